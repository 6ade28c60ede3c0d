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
use crate::engine::webhook::{Attempt, Kind, Outcome};

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
    /// Names are resolved by the proxy, not by `AllowListResolver`: checked here first.
    proxied: bool,
    listening: Option<SocketAddr>,
    nodes: Option<NodeUrls>,
}

/// Longest a node's name is looked up, to compare a webhook's destination with it.
const NODE_LOOKUP: Duration = Duration::from_secs(2);

/// The URLs of the other nodes of Orderly's database, as last read (`--spread-shards`).
pub type NodeUrls = Arc<dyn Fn() -> Vec<String> + Send + Sync>;

/// Sender settings, from the command line.
pub struct SenderConfig {
    pub timeout: Duration,
    pub accept_invalid_certs: bool,
    /// `--webhook-proxy`: the only proxy used (proxy variables in the environment are not).
    pub proxy: Option<String>,
    /// Orderly's own listening address: never a destination unless the allow-list names it.
    pub listening: Option<SocketAddr>,
    /// The other nodes of Orderly's database: no destinations either, unless listed.
    pub nodes: Option<NodeUrls>,
}

impl Sender {
    pub fn new(allow: Arc<AllowList>, config: &SenderConfig) -> Result<Sender, reqwest::Error> {
        let builder = match &config.proxy {
            Some(proxy) => reqwest::Client::builder().proxy(reqwest::Proxy::all(proxy)?),
            // HTTP_PROXY and friends would send webhooks where the allow-list cannot see.
            None => reqwest::Client::builder().no_proxy(),
        };
        let client = builder
            .user_agent("Amazon Simple Notification Service Agent")
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(AllowListResolver(allow.clone())))
            .danger_accept_invalid_certs(config.accept_invalid_certs)
            .tcp_nodelay(true)
            .build()?;
        Ok(Sender {
            client,
            allow,
            proxied: config.proxy.is_some(),
            listening: config.listening,
            nodes: config.nodes.clone(),
        })
    }

    /// Checks what the resolver cannot: a destination reached through a proxy (which resolves
    /// names itself) against the allow-list, and any destination against Orderly's own
    /// listening address and its other nodes' (the resolver does not see ports).
    async fn destination_refused(&self, url: &reqwest::Url) -> Option<String> {
        let host = url.host_str()?;
        let port = url.port_or_known_default()?;
        let own_port = self.listening.is_some_and(|l| l.port() == port);
        let check_list = self.proxied && !self.allow.is_open();
        let nodes = self.nodes_on(port);
        if !own_port && !check_list && nodes.is_empty() {
            return None;
        }
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((bare, port)).await {
            Ok(addrs) => addrs.collect(),
            // Unresolvable here: through a proxy it would go unchecked.
            Err(_) if self.proxied => return Some(format!("{host} does not resolve")),
            // Perhaps a node of the database: not sent where it could not be told apart.
            Err(_) if !nodes.is_empty() => return Some(format!("{host} does not resolve")),
            Err(_) => return None,
        };
        let trusted = self.allow.names_host(bare);
        for &addr in &addrs {
            let ip = addr.ip();
            let listed = trusted || (!self.allow.is_open() && self.allow.allows_ip(ip));
            if self.proxied && !listed && !self.allow.is_open() {
                return Some(format!("{ip} is not in the webhook allow-list"));
            }
            if own_port && !listed && self.is_own(ip) {
                return Some(format!("{addr} is this server's own address"));
            }
        }
        if trusted {
            return None;
        }
        let listed = !self.allow.is_open() && addrs.iter().any(|a| self.allow.allows_ip(a.ip()));
        // Compared as IPv4 where an IPv6 address maps one, so `[::ffff:a.b.c.d]` is no way round.
        let canonical = |ip: std::net::IpAddr| ip.to_canonical();
        let ips: Vec<std::net::IpAddr> = addrs.iter().map(|a| canonical(a.ip())).collect();
        for node in nodes.iter().filter(|_| !listed) {
            let same = node.eq_ignore_ascii_case(bare)
                || (tokio::time::timeout(
                    NODE_LOOKUP,
                    tokio::net::lookup_host((node.as_str(), port)),
                )
                .await)
                    .is_ok_and(|found| {
                        found.is_ok_and(|mut at| at.any(|at| ips.contains(&canonical(at.ip()))))
                    });
            if same {
                return Some(format!(
                    "{host}:{port} is another node of this server's database"
                ));
            }
        }
        None
    }

    /// The hosts of the other nodes listening on `port`.
    fn nodes_on(&self, port: u16) -> Vec<String> {
        let Some(nodes) = &self.nodes else {
            return Vec::new();
        };
        (nodes().iter())
            .filter_map(|node| reqwest::Url::parse(node).ok())
            .filter(|node| node.port_or_known_default() == Some(port))
            .filter_map(|node| {
                let host = node.host_str()?;
                Some(
                    host.trim_start_matches('[')
                        .trim_end_matches(']')
                        .to_string(),
                )
            })
            .collect()
    }

    fn is_own(&self, ip: std::net::IpAddr) -> bool {
        let Some(listening) = self.listening else {
            return false;
        };
        let ip = ip.to_canonical();
        ip.is_loopback()
            || ip.is_unspecified()
            || ip == listening.ip()
            // Bound to every interface: any address could be ours; refuse the local ranges.
            || (listening.ip().is_unspecified() && is_private(ip))
    }

    /// One attempt; never panics, every failure is an outcome, with what went wrong.
    pub async fn send(&self, attempt: &Attempt) -> (Outcome, Option<String>) {
        let delivery = &attempt.delivery;
        let host = reqwest::Url::parse(&delivery.endpoint)
            .ok()
            .and_then(|u| u.host_str().map(String::from));
        // Address literals never reach the resolver, so they are checked here.
        if !host.as_deref().is_some_and(|h| self.allow.admits_host(h)) {
            tracing::warn!(endpoint = %delivery.endpoint, "webhook endpoint refused by the allow-list");
            return (
                Outcome::Permanent,
                Some("refused by --webhook-allow".into()),
            );
        }
        if let Ok(url) = reqwest::Url::parse(&delivery.endpoint) {
            if let Some(reason) = self.destination_refused(&url).await {
                tracing::warn!(endpoint = %delivery.endpoint, %reason, "webhook endpoint refused");
                return (Outcome::Permanent, Some(format!("refused: {reason}")));
            }
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
            Ok(response) => {
                let status = response.status();
                let outcome = classify(status.as_u16());
                let reason = (outcome != Outcome::Delivered).then(|| format!("HTTP {status}"));
                (outcome, reason)
            }
            Err(error) if refused_by_resolver(&error) => {
                tracing::warn!(endpoint = %delivery.endpoint, %error, "webhook endpoint refused");
                (Outcome::Permanent, Some(format!("refused: {error}")))
            }
            Err(error) => {
                tracing::debug!(endpoint = %delivery.endpoint, %error, "webhook attempt failed");
                (Outcome::Retryable, Some(error.to_string()))
            }
        }
    }
}

fn is_private(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_private() || v4.is_link_local(),
        std::net::IpAddr::V6(v6) => v6.is_unique_local() || v6.is_unicast_link_local(),
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

    fn sender(allow: &str, proxy: Option<&str>) -> Sender {
        let config = SenderConfig {
            timeout: Duration::from_secs(1),
            accept_invalid_certs: false,
            proxy: proxy.map(String::from),
            listening: Some("127.0.0.1:4566".parse().unwrap()),
            nodes: None,
        };
        Sender::new(Arc::new(AllowList::parse(allow).unwrap()), &config).unwrap()
    }

    async fn refused(sender: &Sender, url: &str) -> bool {
        let url = reqwest::Url::parse(url).unwrap();
        sender.destination_refused(&url).await.is_some()
    }

    #[tokio::test]
    async fn orderlys_own_address_is_no_destination_unless_listed() {
        let open = sender("", None);
        assert!(refused(&open, "http://127.0.0.1:4566/?Action=DeleteQueue").await);
        assert!(refused(&open, "http://localhost:4566/").await);
        assert!(refused(&open, "http://0.0.0.0:4566/").await);
        assert!(refused(&open, "http://[::ffff:127.0.0.1]:4566/").await);
        assert!(!refused(&open, "http://127.0.0.1:4567/hook").await);
        let listed = sender("127.0.0.1", None);
        assert!(!refused(&listed, "http://127.0.0.1:4566/hook").await);
    }

    #[tokio::test]
    async fn the_other_nodes_of_the_database_are_no_destinations_unless_listed() {
        let with_nodes = |allow: &str| {
            let config = SenderConfig {
                timeout: Duration::from_secs(1),
                accept_invalid_certs: false,
                proxy: None,
                listening: Some("127.0.0.1:4566".parse().unwrap()),
                nodes: Some(Arc::new(|| {
                    vec![
                        "http://127.0.0.1:4567".into(),
                        "http://localhost:4568/".into(),
                    ]
                })),
            };
            Sender::new(Arc::new(AllowList::parse(allow).unwrap()), &config).unwrap()
        };
        let open = with_nodes("");
        assert!(refused(&open, "http://127.0.0.1:4567/?Action=Unsubscribe").await);
        assert!(refused(&open, "http://localhost:4567/").await);
        assert!(refused(&open, "http://127.0.0.1:4568/").await);
        assert!(refused(&open, "http://[::ffff:127.0.0.1]:4567/").await);
        assert!(!refused(&open, "http://127.0.0.1:4569/hook").await);
        let listed = with_nodes("127.0.0.1");
        assert!(!refused(&listed, "http://127.0.0.1:4567/hook").await);
    }

    #[tokio::test]
    async fn through_a_proxy_the_allow_list_is_checked_on_the_destination() {
        let proxied = sender("127.0.0.0/8", Some("http://127.0.0.1:9"));
        assert!(refused(&proxied, "http://10.1.2.3/hook").await);
        assert!(!refused(&proxied, "http://127.0.0.1:8080/hook").await);
        assert!(!refused(&proxied, "http://localhost:8080/hook").await);
        // Without a list, a proxy is trusted as any destination is.
        let open = sender("", Some("http://127.0.0.1:9"));
        assert!(!refused(&open, "http://10.1.2.3/hook").await);
    }

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
