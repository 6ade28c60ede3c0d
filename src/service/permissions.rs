//! AddPermission / RemovePermission, of SQS and of SNS: statements kept in the queue's or
//! topic's `Policy` attribute, in the shape AWS writes them. Pure policy-document work, above
//! the engine; the actions a statement may name come from the action declarations.

use serde_json::{json, Value};

use crate::engine::error::{EngineError, EngineResult};
use crate::engine::namespace::is_account_id;
use crate::protocol::actions::{sns_grantable, sqs_grantable};

/// AWS allows this many statements in a queue policy.
const MAX_STATEMENTS: usize = 20;

fn single_or_list(values: Vec<String>) -> Value {
    if values.len() == 1 {
        Value::String(values.into_iter().next().expect("one"))
    } else {
        Value::Array(values.into_iter().map(Value::String).collect())
    }
}

fn check_label(label: &str) -> EngineResult<()> {
    let ok = !label.is_empty()
        && label.len() <= 80
        && label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(EngineError::invalid(format!(
            "Value {label} for parameter Label is invalid. Reason: Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length."
        )))
    }
}

/// Returns the new policy document with a statement for `label` appended.
pub fn add_permission(
    policy: Option<&str>,
    queue_arn: &str,
    label: &str,
    accounts: &[String],
    actions: &[String],
) -> EngineResult<String> {
    check_label(label)?;
    if accounts.is_empty() {
        return Err(EngineError::missing("AWSAccountIds"));
    }
    if actions.is_empty() {
        return Err(EngineError::missing("Actions"));
    }
    if actions.len() > 7 {
        return Err(EngineError::OverLimit(
            "7 Actions were found, maximum allowed is 7."
                .replace("7 Actions", &format!("{} Actions", actions.len())),
        ));
    }
    if let Some(bad) = actions.iter().find(|a| !sqs_grantable(a)) {
        return Err(EngineError::invalid(format!(
            "Value SQS:{bad} for parameter ActionName is invalid. Reason: Please refer to the appropriate WSDL for a list of valid actions."
        )));
    }
    if !accounts.iter().all(|a| is_account_id(a)) {
        return Err(EngineError::invalid(format!(
            "Value [{}] for parameter PrincipalId is invalid. Reason: Unable to verify.",
            accounts.join(", ")
        )));
    }
    let mut document: Value = match policy {
        Some(p) => serde_json::from_str(p).unwrap_or_else(|_| json!({})),
        None => json!({
            "Version": "2008-10-17",
            "Id": format!("{queue_arn}/SQSDefaultPolicy"),
            "Statement": [],
        }),
    };
    let Some(list) = statement_list(&mut document) else {
        return Err(EngineError::invalid(
            "The queue policy has no statement list.",
        ));
    };
    if has_statement(list, label) {
        return Err(EngineError::invalid(format!(
            "Value {label} for parameter Label is invalid. Reason: Already exists."
        )));
    }
    if list.len() >= MAX_STATEMENTS {
        return Err(EngineError::OverLimit(format!(
            "{MAX_STATEMENTS} statements were found, maximum allowed is {MAX_STATEMENTS}."
        )));
    }
    list.push(statement(label, accounts, "SQS", actions, queue_arn));
    Ok(document.to_string())
}

/// A policy document's statements, made an empty list if it has none; `None` if the document
/// is not an object or its `Statement` is not a list.
fn statement_list(document: &mut Value) -> Option<&mut Vec<Value>> {
    document
        .as_object_mut()?
        .entry("Statement")
        .or_insert_with(|| json!([]))
        .as_array_mut()
}

fn has_statement(list: &[Value], label: &str) -> bool {
    list.iter()
        .any(|s| s.get("Sid").and_then(Value::as_str) == Some(label))
}

/// An Allow statement for `accounts`' root principals and `service:action`s on `resource`.
fn statement(
    label: &str,
    accounts: &[String],
    service: &str,
    actions: &[String],
    resource: &str,
) -> Value {
    let principals = accounts
        .iter()
        .map(|a| match a.as_str() {
            "*" => a.clone(),
            a => format!("arn:aws:iam::{a}:root"),
        })
        .collect();
    let actions = actions.iter().map(|a| format!("{service}:{a}")).collect();
    json!({
        "Sid": label,
        "Effect": "Allow",
        "Principal": {"AWS": single_or_list(principals)},
        "Action": single_or_list(actions),
        "Resource": resource,
    })
}

fn sns_invalid(what: &str) -> EngineError {
    EngineError::InvalidParameter(format!("Invalid parameter: {what}"))
}

/// SNS AddPermission: `policy` is the topic's current policy document (its default one if
/// none was set); returns it with a statement for `label` appended.
pub fn add_topic_permission(
    policy: &str,
    topic_arn: &str,
    label: &str,
    accounts: &[String],
    actions: &[String],
) -> EngineResult<String> {
    check_label(label).map_err(|_| sns_invalid("Label"))?;
    if accounts.is_empty() {
        return Err(sns_invalid("AWSAccountId"));
    }
    if actions.is_empty() {
        return Err(sns_invalid("ActionName"));
    }
    if !actions.iter().all(|a| sns_grantable(a)) {
        return Err(sns_invalid("Policy statement action out of service scope!"));
    }
    // SNS takes everyone (`*`) where SQS does not.
    if !accounts.iter().all(|a| a == "*" || is_account_id(a)) {
        return Err(sns_invalid("A provided account ID is not valid"));
    }
    let mut document: Value = serde_json::from_str(policy).unwrap_or_else(|_| json!({}));
    let Some(list) = statement_list(&mut document) else {
        return Err(sns_invalid("Policy has no statement list"));
    };
    if has_statement(list, label) {
        return Err(sns_invalid("Statement already exists"));
    }
    list.push(statement(label, accounts, "SNS", actions, topic_arn));
    Ok(document.to_string())
}

/// SNS RemovePermission: the policy without `label`'s statement. A label that is not there
/// changes nothing.
pub fn remove_topic_permission(policy: &str, label: &str) -> EngineResult<String> {
    if label.is_empty() {
        return Err(sns_invalid("Label"));
    }
    let mut document: Value = serde_json::from_str(policy).unwrap_or_else(|_| json!({}));
    if let Some(list) = document.get_mut("Statement").and_then(Value::as_array_mut) {
        list.retain(|s| s.get("Sid").and_then(Value::as_str) != Some(label));
    }
    Ok(document.to_string())
}

/// Returns the policy without `label`'s statement, or `None` when no statement is left.
pub fn remove_permission(policy: Option<&str>, label: &str) -> EngineResult<Option<String>> {
    let not_found = || {
        EngineError::invalid(format!(
            "Value {label} for parameter Label is invalid. Reason: can't find label."
        ))
    };
    let mut document: Value = policy
        .and_then(|p| serde_json::from_str(p).ok())
        .ok_or_else(not_found)?;
    let list = document
        .get_mut("Statement")
        .and_then(Value::as_array_mut)
        .ok_or_else(not_found)?;
    let before = list.len();
    list.retain(|s| s.get("Sid").and_then(Value::as_str) != Some(label));
    if list.len() == before {
        return Err(not_found());
    }
    if list.is_empty() {
        return Ok(None);
    }
    Ok(Some(document.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_and_remove_statements() {
        let arn = "arn:aws:sqs:us-east-1:000000000000:q";
        let p = add_permission(
            None,
            arn,
            "one",
            &["111111111111".into()],
            &["SendMessage".into()],
        )
        .unwrap();
        let v: Value = serde_json::from_str(&p).unwrap();
        assert_eq!(v["Id"], format!("{arn}/SQSDefaultPolicy"));
        assert_eq!(v["Statement"][0]["Action"], "SQS:SendMessage");
        assert_eq!(
            v["Statement"][0]["Principal"]["AWS"],
            "arn:aws:iam::111111111111:root"
        );
        let p2 = add_permission(
            Some(&p),
            arn,
            "two",
            &["111111111111".into(), "222222222222".into()],
            &["*".into()],
        )
        .unwrap();
        let v2: Value = serde_json::from_str(&p2).unwrap();
        assert_eq!(v2["Statement"].as_array().unwrap().len(), 2);
        assert!(v2["Statement"][1]["Principal"]["AWS"].is_array());
        let account = || vec!["111111111111".to_string()];
        let refused = |r: EngineResult<String>| match r {
            Err(EngineError::InvalidParameterValue(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(refused(add_permission(
            Some(&p2),
            arn,
            "one",
            &account(),
            &["*".into()]
        ))
        .ends_with("Reason: Already exists."));
        assert!(add_permission(None, arn, "x", &account(), &["Bogus".into()]).is_err());
        // Only accounts, by their twelve digits: not everyone, a user's ARN or a name.
        for bad in [
            "*",
            "11111111111",
            "1111111111111",
            "arn:aws:iam::111111111111:user/x",
        ] {
            let accounts = [account(), vec![bad.to_string()]].concat();
            assert_eq!(
                refused(add_permission(
                    Some(&p2),
                    arn,
                    "x",
                    &accounts,
                    &["*".into()]
                )),
                format!(
                    "Value [111111111111, {bad}] for parameter PrincipalId is invalid. \
                     Reason: Unable to verify."
                )
            );
        }
        let p3 = remove_permission(Some(&p2), "one").unwrap().unwrap();
        assert_eq!(remove_permission(Some(&p3), "two").unwrap(), None);
        assert!(remove_permission(Some(&p3), "zzz").is_err());
    }

    #[test]
    fn topic_statements_follow_the_default_one() {
        let arn = "arn:aws:sns:us-east-1:000000000000:t";
        let default = r#"{"Version":"2008-10-17","Statement":[{"Sid":"__default_statement_ID"}]}"#;
        let p = add_topic_permission(
            default,
            arn,
            "pub",
            &["111111111111".into(), "222222222222".into()],
            &["Publish".into()],
        )
        .unwrap();
        let v: Value = serde_json::from_str(&p).unwrap();
        assert_eq!(v["Statement"][1]["Sid"], "pub");
        assert_eq!(v["Statement"][1]["Action"], "SNS:Publish");
        assert_eq!(v["Statement"][1]["Resource"], arn);
        assert_eq!(
            v["Statement"][1]["Principal"]["AWS"][1],
            "arn:aws:iam::222222222222:root"
        );
        let code = |r: EngineResult<String>| match r {
            Err(EngineError::InvalidParameter(m)) => m,
            other => panic!("{other:?}"),
        };
        let one = |a: &str| vec![a.to_string()];
        assert_eq!(
            code(add_topic_permission(
                &p,
                arn,
                "pub",
                &one("111111111111"),
                &one("Publish")
            )),
            "Invalid parameter: Statement already exists"
        );
        // Everyone may be granted a topic's actions; anything else must be an account.
        let everyone = add_topic_permission(&p, arn, "all", &one("*"), &one("Publish")).unwrap();
        let v: Value = serde_json::from_str(&everyone).unwrap();
        assert_eq!(v["Statement"][2]["Principal"]["AWS"], "*");
        for bad in [
            "public",
            "abc",
            "11111111111",
            "arn:aws:iam::111111111111:root",
        ] {
            assert_eq!(
                code(add_topic_permission(
                    &p,
                    arn,
                    "x",
                    &one(bad),
                    &one("Publish")
                )),
                "Invalid parameter: A provided account ID is not valid"
            );
        }
        assert!(code(add_topic_permission(
            &p,
            arn,
            "x",
            &one("1"),
            &one("SendMessage")
        ))
        .contains("out of service scope"));
        assert_eq!(
            code(add_topic_permission(
                &p,
                arn,
                "a b",
                &one("1"),
                &one("Publish")
            )),
            "Invalid parameter: Label"
        );
        let back = remove_topic_permission(&p, "pub").unwrap();
        let v: Value = serde_json::from_str(&back).unwrap();
        assert_eq!(v["Statement"].as_array().unwrap().len(), 1);
        assert_eq!(remove_topic_permission(&back, "pub").unwrap(), back);
    }
}
