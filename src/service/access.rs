//! Who may use a queue or topic of another account. A caller acts in the
//! namespace of its credentials (`RequestContext::namespace`); a resource of another account is
//! used only when that resource's policy allows the caller, as on AWS. Same-account calls are
//! never checked: without IAM, an account's own keys may do anything. Orderly's console acts
//! as every resource's owner (`RequestContext::operator`).
//!
//! The policy check is a small evaluator of AWS's policy language: an explicit `Deny` wins, an
//! `Allow` must match the principal (`*`, the account id, `arn:aws:iam::<account>:root`, or the
//! caller's ARN), the action and the resource (both with `*`/`?` wildcards), and every condition.
//! Conditions are understood for the keys a direct API call has (`aws:SourceOwner`,
//! `aws:SourceAccount`, `aws:PrincipalAccount`, `aws:PrincipalArn`) with the string and ARN
//! operators; a statement with any other condition, or with `NotPrincipal`, `NotAction` or
//! `NotResource`, is taken not to apply. Sources: IAM User Guide, "Policy evaluation logic" and
//! "IAM JSON policy elements"; SQS API reference, AddPermission.

use std::borrow::Cow;

use serde_json::Value;

use super::{RequestContext, Service};
use crate::engine::namespace::is_account_id;
use crate::engine::namespace::Namespace;
use crate::engine::EngineError;
use crate::protocol::{ApiError, ErrorCode, SnsAction, SqsAction};

/// One use of a resource, as a policy judges it.
pub struct Use<'a> {
    /// The caller's account and principal ARN.
    pub account: &'a str,
    pub principal: &'a str,
    /// `sqs:SendMessage`, `SNS:Publish`: matched without regard to case.
    pub action: &'a str,
    /// The resource's ARN.
    pub resource: &'a str,
    /// A service acting for a resource of `account` (`sns.amazonaws.com` delivering a topic's
    /// copy), with that resource's ARN (`aws:SourceArn`); `None` for a direct call.
    pub service: Option<(&'a str, &'a str)>,
}

/// Whether `policy` (a policy document) allows `asked`.
pub fn allows(policy: &str, asked: &Use<'_>) -> bool {
    let Ok(document) = serde_json::from_str::<Value>(policy) else {
        return false;
    };
    let mut allowed = false;
    for statement in one_or_many(document.get("Statement")) {
        if !applies(statement, asked) {
            continue;
        }
        match statement.get("Effect").and_then(Value::as_str) {
            Some("Deny") => return false,
            Some("Allow") => allowed = true,
            _ => {}
        }
    }
    allowed
}

fn one_or_many(value: Option<&Value>) -> Vec<&Value> {
    match value {
        Some(Value::Array(items)) => items.iter().collect(),
        Some(value) => vec![value],
        None => Vec::new(),
    }
}

fn texts(value: Option<&Value>) -> Vec<&str> {
    one_or_many(value)
        .into_iter()
        .filter_map(Value::as_str)
        .collect()
}

fn applies(statement: &Value, asked: &Use<'_>) -> bool {
    if ["NotPrincipal", "NotAction", "NotResource"]
        .iter()
        .any(|key| statement.get(key).is_some())
    {
        return false;
    }
    let resource_matches = match statement.get("Resource") {
        None => true,
        resource => texts(resource)
            .iter()
            .any(|pattern| wildcard(pattern, asked.resource, false)),
    };
    principal_matches(statement.get("Principal"), asked)
        && texts(statement.get("Action"))
            .iter()
            .any(|pattern| wildcard(pattern, asked.action, true))
        && resource_matches
        && conditions_hold(statement.get("Condition"), asked)
}

fn principal_matches(principal: Option<&Value>, asked: &Use<'_>) -> bool {
    let names = match principal {
        Some(Value::String(any)) => return any == "*",
        Some(Value::Object(kinds)) => {
            if let Some((service, _)) = asked.service {
                // A service is no account's user: it matches its own name, or anyone.
                let named = texts(kinds.get("Service")).contains(&service);
                return named || texts(kinds.get("AWS")).contains(&"*");
            }
            texts(kinds.get("AWS"))
        }
        _ => return false,
    };
    let root = format!("arn:aws:iam::{}:root", asked.account);
    names.iter().any(|name| {
        *name == "*" || *name == asked.account || *name == root || *name == asked.principal
    })
}

fn conditions_hold(conditions: Option<&Value>, asked: &Use<'_>) -> bool {
    let Some(conditions) = conditions else {
        return true;
    };
    let Some(operators) = conditions.as_object() else {
        return false;
    };
    operators.iter().all(|(operator, tests)| {
        let Some(tests) = tests.as_object() else {
            return false;
        };
        tests.iter().all(|(key, wanted)| {
            let actual = match key.to_ascii_lowercase().as_str() {
                "aws:sourceowner" | "aws:sourceaccount" | "aws:principalaccount" => asked.account,
                "aws:principalarn" => asked.principal,
                "aws:sourcearn" => match asked.service {
                    Some((_, source)) => source,
                    None => return false,
                },
                _ => return false,
            };
            let wanted = texts(Some(wanted));
            match operator.as_str() {
                "StringEquals" | "ArnEquals" => wanted.contains(&actual),
                "StringEqualsIgnoreCase" => wanted.iter().any(|w| w.eq_ignore_ascii_case(actual)),
                "StringLike" | "ArnLike" => wanted.iter().any(|w| wildcard(w, actual, false)),
                _ => false,
            }
        })
    })
}

/// `*` matches any run of characters, `?` any one.
fn wildcard(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let (pattern, text): (Vec<char>, Vec<char>) = if ignore_case {
        (
            pattern.to_lowercase().chars().collect(),
            text.to_lowercase().chars().collect(),
        )
    } else {
        (pattern.chars().collect(), text.chars().collect())
    };
    // Greedy matching with one backtrack point: linear for patterns with one `*` run.
    let (mut p, mut t, mut star, mut mark) = (0, 0, None, 0);
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some(p);
            mark = t;
            p += 1;
        } else if let Some(s) = star {
            p = s + 1;
            mark += 1;
            t = mark;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

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

fn access_denied(url: &str) -> ApiError {
    ApiError::new(
        ErrorCode::AccessDenied,
        format!("Access to the resource {url} is denied."),
    )
}

/// What SNS needs to deliver a topic's copies into a queue on AWS: the queue's policy must allow
/// `sns.amazonaws.com` to `sqs:SendMessage` from that topic (a queue with no policy refuses it,
/// even in the topic's own account). Source: SNS Developer Guide, "Sending Amazon SNS messages
/// to an Amazon SQS queue", step 2.
pub const SNS_SERVICE: &str = "sns.amazonaws.com";

/// Why AWS would not deliver `topic_arn`'s copies into a queue whose policy is `policy`, or
/// `None` if it would.
pub fn sns_would_refuse(policy: Option<&str>, queue_arn: &str, topic_arn: &str) -> Option<String> {
    let Some(policy) = policy else {
        return Some(format!(
            "AWS would not deliver this: the queue has no policy, so it does not allow \
             {SNS_SERVICE} to send from {topic_arn}"
        ));
    };
    let owner = topic_arn.split(':').nth(4).unwrap_or("");
    let asked = Use {
        account: owner,
        principal: SNS_SERVICE,
        action: "sqs:SendMessage",
        resource: queue_arn,
        service: Some((SNS_SERVICE, topic_arn)),
    };
    (!allows(policy, &asked)).then(|| {
        format!(
            "AWS would not deliver this: the queue's policy does not allow {SNS_SERVICE} to \
             send from {topic_arn}"
        )
    })
}

impl Service {
    /// Why AWS would not deliver `topic_arn`'s copies into the queue `queue_arn`, as its policy
    /// stands now; `None` if it would (or the queue is gone: no copy goes there either way).
    pub(super) async fn sns_would_refuse(
        &self,
        topic_arn: &str,
        queue_arn: &str,
    ) -> Option<String> {
        let key = self.namespaces().key_in_arn("sqs", queue_arn)?;
        let view = self
            .backend
            .describe_queue(key, self.clock.now())
            .await
            .ok()?;
        sns_would_refuse(view.config.policy.as_deref(), &view.arn, topic_arn)
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
        // it names: the action says so before any look-up (AWS-recorded for Unsubscribe only).
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

    const TOPIC: &str = "arn:aws:sns:us-east-1:111111111111:prices";

    fn asked<'a>(account: &'a str, action: &'a str) -> Use<'a> {
        let principal = match account {
            "222222222222" => "arn:aws:iam::222222222222:user/alice",
            _ => "arn:aws:iam::333333333333:user/bob",
        };
        Use {
            account,
            principal,
            action,
            resource: TOPIC,
            service: None,
        }
    }

    #[test]
    fn statements_grant_by_principal_action_resource_and_condition() {
        let policy = r#"{"Statement":[{"Effect":"Allow","Principal":{"AWS":["222222222222"]},
            "Action":["sns:Pub*"],"Resource":"arn:aws:sns:us-east-1:111111111111:*"}]}"#;
        assert!(allows(policy, &asked("222222222222", "SNS:Publish")));
        assert!(!allows(policy, &asked("333333333333", "SNS:Publish")));
        assert!(!allows(policy, &asked("222222222222", "SNS:Subscribe")));
        let root = r#"{"Statement":{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::222222222222:root"},"Action":"*","Resource":"arn:aws:sns:us-east-1:111111111111:other"}}"#;
        assert!(!allows(root, &asked("222222222222", "SNS:Publish")));
        let anyone = r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"SNS:Publish","Resource":"*"},
            {"Effect":"Deny","Principal":{"AWS":"arn:aws:iam::222222222222:user/alice"},"Action":"SNS:Publish","Resource":"*"}]}"#;
        assert!(!allows(anyone, &asked("222222222222", "SNS:Publish")));
        assert!(allows(anyone, &asked("333333333333", "SNS:Publish")));
    }

    #[test]
    fn the_default_topic_policy_admits_only_its_owner() {
        let default = r#"{"Version":"2008-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},
            "Action":["SNS:Publish","SNS:Subscribe"],"Resource":"arn:aws:sns:us-east-1:111111111111:prices",
            "Condition":{"StringEquals":{"AWS:SourceOwner":"111111111111"}}}]}"#;
        assert!(!allows(default, &asked("222222222222", "SNS:Publish")));
        assert!(allows(default, &asked("111111111111", "SNS:Publish")));
        let unknown = r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"*","Resource":"*",
            "Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}]}"#;
        assert!(!allows(unknown, &asked("222222222222", "SNS:Publish")));
        assert!(!allows("not json", &asked("222222222222", "SNS:Publish")));
    }

    #[test]
    fn sns_delivers_into_a_queue_only_as_its_policy_allows_the_topic() {
        const QUEUE: &str = "arn:aws:sqs:us-east-1:111111111111:prices";
        let policy = |principal: &str, source: &str| {
            format!(
                r#"{{"Statement":[{{"Effect":"Allow","Principal":{principal},"Action":"sqs:SendMessage","Resource":"{QUEUE}","Condition":{{"ArnEquals":{{"aws:SourceArn":"{source}"}}}}}}]}}"#
            )
        };
        let service = r#"{"Service":"sns.amazonaws.com"}"#;
        assert!(sns_would_refuse(None, QUEUE, TOPIC).is_some(), "no policy");
        let cases = [
            (policy(service, TOPIC), true),
            (policy(r#""*""#, TOPIC), true),
            (policy(r#"{"AWS":"*"}"#, TOPIC), true),
            (
                policy(service, "arn:aws:sns:us-east-1:111111111111:other"),
                false,
            ),
            (
                policy(service, "arn:aws:sns:us-east-1:111111111111:*"),
                false,
            ),
            (policy(r#"{"AWS":"111111111111"}"#, TOPIC), false),
        ];
        for (policy, delivers) in cases {
            let refused = sns_would_refuse(Some(&policy), QUEUE, TOPIC);
            assert_eq!(refused.is_none(), delivers, "{policy}");
        }
        // ArnLike takes the topic's wildcards.
        let like =
            policy(service, "arn:aws:sns:us-east-1:111111111111:*").replace("ArnEquals", "ArnLike");
        assert!(sns_would_refuse(Some(&like), QUEUE, TOPIC).is_none());
    }

    #[test]
    fn wildcards_match_runs_and_single_characters() {
        assert!(wildcard("a*c", "abbbc", false));
        assert!(wildcard("a?c", "abc", false));
        assert!(!wildcard("a?c", "abbc", false));
        assert!(wildcard("*", "", false));
        assert!(wildcard("SQS:*", "sqs:SendMessage", true));
        assert!(!wildcard("SQS:*", "sqs:SendMessage", false));
        assert!(wildcard("*:q*", "arn:aws:sqs:r:1:queue", false));
    }

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
