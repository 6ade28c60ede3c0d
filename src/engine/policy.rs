//! A small evaluator of AWS's policy language, for queue and topic policies: an explicit `Deny`
//! wins, an `Allow` must match the principal (`*`, the account id, `arn:aws:iam::<account>:root`,
//! or the caller's ARN; for a service acting for a resource, `{"Service": <its name>}` or
//! anyone), the action and the resource (both with `*`/`?` wildcards), and every condition.
//! Conditions are understood for the keys a call has (`aws:SourceOwner`, `aws:SourceAccount`,
//! `aws:PrincipalAccount`, `aws:PrincipalArn`, and a service's `aws:SourceArn`) with the string
//! and ARN operators; a statement with any other condition, or with `NotPrincipal`,
//! `NotAction` or `NotResource`, is taken not to apply. Sources: IAM User Guide, "Policy
//! evaluation logic" and "IAM JSON policy elements"; SQS API reference, AddPermission.

use serde_json::Value;

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
}
