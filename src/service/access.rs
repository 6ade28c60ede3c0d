//! Who may use a queue or topic of another account. A caller acts in the
//! namespace of its credentials (`RequestContext::namespace`); a resource of another account is
//! used only when that resource's policy allows the caller, as on AWS. Same-account calls are
//! never checked: without IAM, an account's own keys may do anything. Orderly's console acts
//! as every resource's owner (`RequestContext::operator`).
//! Policies are judged by `engine::policy`.

use std::borrow::Cow;

use super::{RequestContext, Service};
use crate::engine::namespace::is_account_id;
use crate::engine::namespace::Namespace;
use crate::engine::policy::{allows, sns_would_refuse, Use};
use crate::engine::EngineError;
use crate::protocol::{ApiError, ErrorCode, SnsAction, SqsAction};

/// What a queue URL names: `/<account>/<name>`, or LocalStack's path form
/// `/queue/<region>/<account>/<name>` that Orderly hands out for queues outside the home region
/// (one endpoint serves every region, so the host it is reached by cannot tell them apart). A
/// host of AWS's regional forms, `sqs.<region>.…` (AWS, and LocalStack's default URLs such as
/// `sqs.eu-west-1.localhost.localstack.cloud`) or the legacy `<region>.queue.…`, names the
/// region too; the path's region wins. Whatever the URL leaves out is the caller's.
#[derive(Debug, PartialEq, Eq)]
pub struct UrlPlace<'a> {
    pub region: Option<&'a str>,
    pub account: Option<&'a str>,
    pub name: &'a str,
}

pub fn url_place(url: &str) -> UrlPlace<'_> {
    let path = url
        .split(['?', '#'])
        .next()
        .unwrap_or("")
        .trim_end_matches('/');
    let mut segments = path.rsplit('/');
    let name = segments.next().unwrap_or(path);
    let account = segments.next().filter(|a| is_account_id(a));
    let in_path = match (account, segments.next(), segments.next()) {
        (Some(_), Some(region), Some("queue")) if !region.is_empty() => Some(region),
        _ => None,
    };
    let region = in_path.or_else(|| region_of_host(url));
    UrlPlace {
        region,
        account,
        name,
    }
}

/// The region a queue URL's host names, if it is of AWS's regional forms.
fn region_of_host(url: &str) -> Option<&str> {
    let host = url
        .split_once("://")?
        .1
        .split(['/', ':', '?', '#'])
        .next()?;
    let mut labels = host.split('.');
    let region = match (labels.next()?, labels.next()?) {
        ("sqs", region) => region,
        (region, "queue") => region,
        _ => return None,
    };
    // us-east-1, eu-west-2, us-gov-west-1, cn-north-1: letters, dashes, a final digit.
    let looks_like_one = region.contains('-')
        && region.ends_with(|c: char| c.is_ascii_digit())
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    looks_like_one.then_some(region)
}

/// Longest a queue's policy is waited for, to say whether AWS would refuse a copy (a listing
/// or a scrape asks once for each queue another node leads).
const QUEUE_POLICY_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A queue's ARN and access policy (`Policy`, `None` when unset).
#[derive(Clone)]
pub struct QueuePolicy {
    arn: String,
    policy: Option<String>,
}

impl QueuePolicy {
    /// Why AWS would not deliver `topic_arn`'s copies into this queue; `None` if it would.
    pub fn sns_would_refuse(&self, topic_arn: &str) -> Option<String> {
        sns_would_refuse(self.policy.as_deref(), &self.arn, topic_arn)
    }
}

fn access_denied(url: &str) -> ApiError {
    ApiError::new(
        ErrorCode::AccessDenied,
        format!("Access to the resource {url} is denied."),
    )
}

impl Service {
    /// Why AWS would not deliver `topic_arn`'s copies into the queue `queue_arn`, as its policy
    /// stands now; `None` if it would (or the queue is gone: no copy goes there either way).
    pub async fn sns_would_refuse(&self, topic_arn: &str, queue_arn: &str) -> Option<String> {
        self.queue_policy(queue_arn)
            .await?
            .sns_would_refuse(topic_arn)
    }

    /// The queue `queue_arn`'s access policy, to judge what AWS would refuse, read wherever
    /// its shard is led within `QUEUE_POLICY_WAIT`; `None` when it is gone or not known then
    /// (nor from a node of an earlier build, which does not say).
    pub async fn queue_policy(&self, queue_arn: &str) -> Option<QueuePolicy> {
        let key = self.namespaces().key_in_arn("sqs", queue_arn)?;
        let read = self.backend.queue_target(key, self.clock.now());
        let queue = (tokio::time::timeout(QUEUE_POLICY_WAIT, read).await)
            .ok()?
            .ok()??;
        Some(QueuePolicy {
            arn: self.namespaces().arn("sqs", key),
            policy: queue.access?.policy,
        })
    }

    /// The key of the queue a queue URL names (`url_place`: its region and account, else the
    /// caller's). A queue of another account must allow `action` to the caller in its policy.
    pub(super) async fn queue_key<'a>(
        &self,
        ctx: &RequestContext,
        url: Option<&'a str>,
        action: SqsAction,
    ) -> Result<Cow<'a, str>, ApiError> {
        let url = url.ok_or_else(|| ApiError::missing("QueueUrl"))?;
        let mut place = url_place(url);
        if self.single_namespace() {
            // One namespace: a URL names a queue by its name alone, as before namespaces.
            (place.region, place.account) = (None, None);
        }
        let here = &ctx.namespace;
        let foreign_account = place.account.filter(|a| *a != &*here.account);
        let foreign_region = place.region.filter(|r| *r != &*here.region);
        if foreign_account.is_none() && foreign_region.is_none() {
            return self
                .namespaces
                .key(here, place.name)
                .ok_or_else(|| EngineError::QueueDoesNotExist.into());
        }
        let namespace = Namespace::new(
            foreign_region.unwrap_or(&here.region),
            foreign_account.unwrap_or(&here.account),
        );
        let key = self
            .namespaces
            .key(&namespace, place.name)
            .ok_or(EngineError::QueueDoesNotExist)?;
        if foreign_account.is_some() {
            self.check_queue_use(ctx, &key, action, url).await?;
        }
        Ok(key)
    }

    /// Whether the caller may call `action` on another account's queue `key`.
    pub(super) async fn check_queue_use(
        &self,
        ctx: &RequestContext,
        key: &str,
        action: SqsAction,
        url: &str,
    ) -> Result<(), ApiError> {
        if ctx.operator {
            return Ok(());
        }
        if action.owner_only() {
            return Err(access_denied(url));
        }
        let view = self.backend.describe_queue(key, self.clock.now()).await?;
        let asked = Use {
            account: &ctx.namespace.account,
            principal: &ctx.principal,
            action: &format!("sqs:{}", action.policy_action().name()),
            resource: &view.arn,
            service: None,
        };
        match view.config.policy.as_deref() {
            Some(policy) if allows(policy, &asked) => Ok(()),
            _ => Err(access_denied(url)),
        }
    }

    /// An SNS ARN of another region than a signed request's is refused (`InvalidParameter`,
    /// shared/spec/sns.md §3). Malformed ARNs are left to the action.
    pub(super) fn check_sns_region(
        &self,
        ctx: &RequestContext,
        parameter: &str,
        arn: &str,
    ) -> Result<(), ApiError> {
        let parts: Vec<&str> = arn.split(':').collect();
        let foreign = parts.len() >= 6
            && parts[0] == "arn"
            && parts[2] == "sns"
            && parts[3] != &*ctx.namespace.region;
        if ctx.authenticated && !ctx.operator && foreign {
            return Err(ApiError::new(
                ErrorCode::InvalidParameter,
                format!("Invalid parameter: {parameter}"),
            ));
        }
        Ok(())
    }

    /// SNS's rules for the ARN a signed request names: one of another region is refused
    /// (`InvalidParameter`, shared/spec/sns.md §3), and a topic of another account must allow
    /// the action in its policy (`AuthorizationError`). Malformed ARNs are left to the action.
    pub(super) async fn check_sns_use(
        &self,
        ctx: &RequestContext,
        action: SnsAction,
        parameter: &str,
        arn: &str,
    ) -> Result<(), ApiError> {
        if !ctx.authenticated || ctx.operator {
            // The unsigned SubscribeURL and UnsubscribeURL links carry no region: the ARN's own.
            return Ok(());
        }
        self.check_sns_region(ctx, parameter, arn)?;
        let parts: Vec<&str> = arn.split(':').collect();
        // Unsubscribing from a subscription ARN without its id is malformed whatever account
        // it names: the action says so before any look-up (observed on AWS for Unsubscribe only).
        let malformed = parts.len() < 6
            || (action == SnsAction::Unsubscribe
                && parameter == "SubscriptionArn"
                && parts.len() < 7);
        if malformed || parts[0] != "arn" || parts[2] != "sns" {
            return Ok(());
        }
        if parts[4] == &*ctx.namespace.account {
            return Ok(());
        }
        let topic_arn = parts[..6].join(":");
        let action = action.name();
        let denied = || {
            ApiError::new(
                ErrorCode::AuthorizationError,
                format!(
                    "User: {} is not authorized to perform: SNS:{action} on resource: {topic_arn} because no resource-based policy allows the SNS:{action} action",
                    ctx.principal
                ),
            )
        };
        // A subscription is its owner's to change, whatever its topic allows.
        if parts.len() > 6 && parameter == "SubscriptionArn" {
            return Err(denied());
        }
        let attributes = self.backend.topic_attributes(&topic_arn).await?;
        let policy = attributes
            .iter()
            .find(|(name, _)| name == "Policy")
            .map(|(_, policy)| policy.as_str());
        let asked = Use {
            account: &ctx.namespace.account,
            principal: &ctx.principal,
            action: &format!("SNS:{action}"),
            resource: &topic_arn,
            service: None,
        };
        match policy {
            Some(policy) if allows(policy, &asked) => Ok(()),
            _ => Err(denied()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_urls_name_an_account_and_perhaps_a_region() {
        let place = url_place("http://h:4566/queue/eu-west-1/123456789012/q.fifo");
        assert_eq!(
            place,
            UrlPlace {
                region: Some("eu-west-1"),
                account: Some("123456789012"),
                name: "q.fifo"
            }
        );
        let plain = url_place("http://localhost:4566/000000000000/q/");
        assert_eq!(
            (plain.region, plain.account, plain.name),
            (None, Some("000000000000"), "q")
        );
        let bare = url_place("http://h/q");
        assert_eq!((bare.region, bare.account, bare.name), (None, None, "q"));
        let odd = url_place("http://h/eu-west-1/000000000000/q");
        assert_eq!(odd.region, None);
        // Hosts of AWS's and LocalStack's regional forms name the region; the path's wins.
        for (url, region) in [
            (
                "https://sqs.eu-west-1.amazonaws.com/000000000000/q",
                Some("eu-west-1"),
            ),
            (
                "http://sqs.ap-south-1.localhost.localstack.cloud:4566/000000000000/q",
                Some("ap-south-1"),
            ),
            (
                "https://us-west-2.queue.amazonaws.com/000000000000/q",
                Some("us-west-2"),
            ),
            ("http://sqs.localhost:4566/000000000000/q", None),
            ("http://queue.amazonaws.com/000000000000/q", None),
            (
                "http://sqs.eu-west-1.localhost/queue/us-east-2/000000000000/q",
                Some("us-east-2"),
            ),
        ] {
            assert_eq!(url_place(url).region, region, "{url}");
        }
    }
}
