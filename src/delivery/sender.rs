//! POSTs one webhook delivery with reqwest (rustls, one pooled client) and classifies the
//! answer as AWS does: 2xx delivered, 4xx refused for good, 5xx, timeouts and connection
//! errors retried. Redirects are not followed (3xx counts as refused, like a 4xx).

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{HeaderValue, ACCEPT_ENCODING, CONTENT_TYPE};

use super::allow::AllowList;
use crate::engine::delivery::{Attempt, Kind, Outcome};

/// The resolver refused every address of a host (allow-list).
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no address of {} is in the webhook allow-list", self.0)
    }
}

impl StdError for Refused {}

/// System DNS, keeping only addresses the allow-list admits (names listed by name are trusted).
struct AllowListResolver(Arc<AllowList>);

impl Resolve for AllowListResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let trusted = allow.is_open() || allow.names_host(&host);
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| trusted || allow.allows_ip(a.ip()))
                .collect();
            if addrs.is_empty() {
                return Err(Box::new(Refused(host)) as Box<dyn StdError + Send + Sync>);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

pub struct Sender {
    client: reqwest::Client,
    allow: Arc<AllowList>,
}

/// Sender settings, from the command line.
pub struct SenderConfig {
    pub timeout: Duration,
    pub accept_invalid_certs: bool,
}

impl Sender {
    pub fn new(allow: Arc<AllowList>, config: &SenderConfig) -> Result<Sender, reqwest::Error> {
        let client = reqwest::Client::builder()
            .user_agent("Amazon Simple Notification Service Agent")
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(AllowListResolver(allow.clone())))
            .danger_accept_invalid_certs(config.accept_invalid_certs)
            .tcp_nodelay(true)
            .build()?;
        Ok(Sender { client, allow })
    }

    /// One attempt; never panics, every failure is an outcome.
    pub async fn send(&self, attempt: &Attempt) -> Outcome {
        let delivery = &attempt.delivery;
        let host = reqwest::Url::parse(&delivery.endpoint)
            .ok()
            .and_then(|u| u.host_str().map(String::from));
        // Address literals never reach the resolver, so they are checked here.
        if !host.as_deref().is_some_and(|h| self.allow.admits_host(h)) {
            tracing::warn!(endpoint = %delivery.endpoint, "webhook endpoint refused by the allow-list");
            return Outcome::Permanent;
        }
        let mut request = self
            .client
            .post(&*delivery.endpoint)
            .header("x-amz-sns-message-type", delivery.kind.wire_name())
            .header("x-amz-sns-message-id", &*delivery.message_id)
            .header("x-amz-sns-topic-arn", &*delivery.topic_arn)
            .header(ACCEPT_ENCODING, HeaderValue::from_static("gzip,deflate"))
            .header(CONTENT_TYPE, &delivery.content_type);
        // AWS leaves the subscription ARN out of SubscriptionConfirmation requests.
        if delivery.kind != Kind::SubscriptionConfirmation {
            request = request.header("x-amz-sns-subscription-arn", &*delivery.subscription_arn);
        }
        if delivery.raw {
            request = request.header("x-amz-sns-rawdelivery", "true");
        }
        // Orderly's ordered FIFO webhooks: group, dedup id and sequence (not AWS headers).
        if delivery.fifo_topic && delivery.kind == Kind::Notification {
            if let Some(group) = &delivery.group_id {
                request = request.header("x-amz-sns-message-group-id", group);
            }
            if let Some(dedup) = &delivery.dedup_id {
                request = request.header("x-amz-sns-message-deduplication-id", dedup);
            }
            if let Some(seq) = delivery.sequence_number {
                request = request.header("x-amz-sns-sequence-number", seq.to_string());
            }
        }
        match request.body(delivery.body.clone()).send().await {
            Ok(response) => classify(response.status().as_u16()),
            Err(error) if refused_by_resolver(&error) => {
                tracing::warn!(endpoint = %delivery.endpoint, %error, "webhook endpoint refused");
                Outcome::Permanent
            }
            Err(error) => {
                tracing::debug!(endpoint = %delivery.endpoint, %error, "webhook attempt failed");
                Outcome::Retryable
            }
        }
    }
}

fn refused_by_resolver(error: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<Refused>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// AWS's rule: 2xx is success, 4xx a permanent failure, the rest worth retrying.
pub fn classify(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered,
        300..=499 => Outcome::Permanent,
        _ => Outcome::Retryable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified_as_aws_does() {
        assert_eq!(classify(200), Outcome::Delivered);
        assert_eq!(classify(204), Outcome::Delivered);
        assert_eq!(classify(404), Outcome::Permanent);
        assert_eq!(classify(429), Outcome::Permanent);
        assert_eq!(classify(301), Outcome::Permanent);
        assert_eq!(classify(500), Outcome::Retryable);
        assert_eq!(classify(503), Outcome::Retryable);
        assert_eq!(classify(101), Outcome::Retryable);
    }
}
