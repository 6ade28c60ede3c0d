//! A topic's message data protection policy (PutDataProtectionPolicy, GetDataProtectionPolicy,
//! CreateTopic's DataProtectionPolicy): stored, checked for the shape AWS documents, returned as
//! given. Orderly does not scan messages with it (no audit, de-identification or denial).
//!
//! The shape (AWS SNS Developer Guide, "Understanding data protection policies"): an object
//! with `Name`, optional `Description`, `Version` "2021-06-01" and a non-empty `Statement`
//! list; each statement has an optional `Sid`, `DataDirection` `Inbound` or `Outbound`,
//! non-empty `Principal` and `DataIdentifier` lists and an `Operation` that is exactly one of
//! `Audit`, `Deidentify` or `Deny`; a policy has at most one Audit statement, whose
//! `SampleRate` is an integer from 0 to 99. At most 30,720 characters (the API reference).
//! The refusal texts are Orderly's: AWS's are not recorded in `../shared/spec/`.

use serde_json::Value;

use crate::engine::error::{EngineError, EngineResult};

/// The settings key the policy is kept under (never listed by GetTopicAttributes, never set by
/// SetTopicAttributes).
pub const SETTING: &str = "DataProtectionPolicy";

/// AWS's length limit on the policy document.
const MAX_CHARS: usize = 30_720;

pub(super) fn refused(reason: &str) -> EngineError {
    EngineError::InvalidParameter(format!(
        "Invalid parameter: DataProtectionPolicy Reason: {reason}"
    ))
}

/// Checks a data protection policy document's shape.
pub fn check_policy(text: &str) -> EngineResult<()> {
    if text.chars().count() > MAX_CHARS {
        return Err(refused("the policy is longer than 30720 characters"));
    }
    let policy: Value =
        serde_json::from_str(text).map_err(|e| refused(&format!("failed to parse JSON. {e}")))?;
    let Some(policy) = policy.as_object() else {
        return Err(refused("the policy must be a JSON object"));
    };
    if policy
        .get("Name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(refused("Name is required"));
    }
    if policy.get("Version").and_then(Value::as_str) != Some("2021-06-01") {
        return Err(refused("Version must be 2021-06-01"));
    }
    let statements = policy
        .get("Statement")
        .and_then(Value::as_array)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| refused("Statement must be a non-empty list"))?;
    let mut audits = 0;
    for statement in statements {
        if check_statement(statement)? == "Audit" {
            audits += 1;
        }
    }
    if audits > 1 {
        return Err(refused("a policy may have only one Audit statement"));
    }
    Ok(())
}

/// Checks one statement; answers its operation's name.
fn check_statement(statement: &Value) -> EngineResult<&str> {
    if !matches!(
        statement.get("DataDirection").and_then(Value::as_str),
        Some("Inbound" | "Outbound")
    ) {
        return Err(refused("DataDirection must be Inbound or Outbound"));
    }
    for list in ["Principal", "DataIdentifier"] {
        let strings = statement
            .get(list)
            .and_then(Value::as_array)
            .filter(|items| !items.is_empty() && items.iter().all(Value::is_string));
        if strings.is_none() {
            return Err(refused(&format!(
                "{list} must be a non-empty list of strings"
            )));
        }
    }
    let operation = statement
        .get("Operation")
        .and_then(Value::as_object)
        .filter(|operation| operation.len() == 1)
        .ok_or_else(|| refused("Operation must be one of Audit, Deidentify or Deny"))?;
    let (name, settings) = operation.iter().next().expect("one entry");
    match name.as_str() {
        "Audit" => {
            if let Some(rate) = settings.get("SampleRate") {
                let rate = match rate {
                    Value::String(text) => text.parse::<u64>().ok(),
                    other => other.as_u64(),
                };
                if rate.is_none_or(|rate| rate > 99) {
                    return Err(refused("SampleRate must be an integer from 0 to 99"));
                }
            }
            Ok("Audit")
        }
        "Deidentify" => Ok("Deidentify"),
        "Deny" => Ok("Deny"),
        _ => Err(refused(
            "Operation must be one of Audit, Deidentify or Deny",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"Name":"basicPII-protection","Description":"Protect basic types of sensitive data","Version":"2021-06-01","Statement":[{"Sid":"basicPII-inbound-protection","DataDirection":"Inbound","Principal":["*"],"DataIdentifier":["arn:aws:dataprotection::aws:data-identifier/Name"],"Operation":{"Deny":{}}},{"DataDirection":"Outbound","Principal":["*"],"DataIdentifier":["arn:aws:dataprotection::aws:data-identifier/Address"],"Operation":{"Audit":{"SampleRate":"99","FindingsDestination":{}}}}]}"#;

    #[test]
    fn a_documented_policy_is_taken_and_broken_ones_are_refused() {
        assert!(check_policy(GOOD).is_ok());
        let broken = [
            ("not json", "failed to parse JSON"),
            ("[]", "JSON object"),
            (r#"{"Version":"2021-06-01","Statement":[]}"#, "Name"),
            (
                r#"{"Name":"p","Version":"2012-10-17","Statement":[]}"#,
                "Version",
            ),
            (
                r#"{"Name":"p","Version":"2021-06-01","Statement":[]}"#,
                "Statement",
            ),
            (
                &GOOD.replace("\"Inbound\"", "\"Sideways\""),
                "DataDirection",
            ),
            (&GOOD.replace("[\"*\"]", "[]"), "Principal"),
            (
                &GOOD.replace("{\"Deny\":{}}", "{\"Block\":{}}"),
                "Operation",
            ),
            (&GOOD.replace("\"99\"", "\"100\""), "SampleRate"),
            (
                &GOOD.replace("{\"Deny\":{}}", "{\"Audit\":{}}"),
                "only one Audit",
            ),
        ];
        for (text, reason) in broken {
            let error = check_policy(text).unwrap_err().to_string();
            assert!(error.contains(reason), "{text}: {error}");
        }
        let long = format!("{{\"Name\":\"{}\"}}", "x".repeat(MAX_CHARS));
        assert!(check_policy(&long)
            .unwrap_err()
            .to_string()
            .contains("30720"));
    }
}
