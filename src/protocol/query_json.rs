//! An SQS Query answer rendered as JSON, as AWS renders it for a Query request that accepts
//! JSON (recorded answers, not the AWS JSON protocol's):
//! `{"<Action>Response": {"<Action>Result": {…}, "ResponseMetadata": {"RequestId": …}}}`,
//! list members in lower camel case (`queueUrls`, `messages`), queue attributes a list of
//! `{"Name", "Value"}`; errors `{"Error": {"Code", "Message", "Type"}, "RequestId"}` with the
//! Query protocol's code and status.

use serde_json::{json, Map, Value};

use super::{ApiError, Encoded};

/// The answer to `action`, from the output as the JSON protocol would write it.
pub fn response(action: &str, output: Value, request_id: &str) -> Encoded {
    let result = match output {
        Value::Object(members) => Value::Object(members.into_iter().map(member).collect()),
        _ => Value::Null,
    };
    let mut answer = Map::new();
    answer.insert(format!("{action}Result"), result);
    answer.insert(
        "ResponseMetadata".into(),
        json!({ "RequestId": request_id }),
    );
    encoded(200, json!({ format!("{action}Response"): answer }))
}

/// A member of a result: lists under their name in lower camel case; the queue attributes a
/// list of name and value.
fn member((name, value): (String, Value)) -> (String, Value) {
    match value {
        Value::Array(items) => (lower_camel(&name), Value::Array(items)),
        Value::Object(pairs) if name == "Attributes" => (
            name,
            Value::Array(
                pairs
                    .into_iter()
                    .map(|(name, value)| json!({ "Name": name, "Value": value }))
                    .collect(),
            ),
        ),
        other => (name, other),
    }
}

fn lower_camel(name: &str) -> String {
    let mut chars = name.chars();
    match chars.next() {
        Some(first) => first.to_ascii_lowercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

pub fn error(
    status: u16,
    (fault, code): (&str, &str),
    error: &ApiError,
    request_id: &str,
) -> Encoded {
    encoded(
        status,
        json!({
            "Error": { "Code": code, "Message": error.query_message(), "Type": fault },
            "RequestId": request_id,
        }),
    )
}

fn encoded(status: u16, body: Value) -> Encoded {
    Encoded {
        status,
        content_type: "application/json",
        body: serde_json::to_vec(&body).expect("answers serialize"),
        query_error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(encoded: Encoded) -> Value {
        serde_json::from_slice(&encoded.body).unwrap()
    }

    #[test]
    fn lists_in_lower_camel_case_and_attributes_as_name_value_pairs() {
        let listed = body(response(
            "ListQueues",
            json!({"QueueUrls": ["http://h/1/q"]}),
            "r1",
        ));
        assert_eq!(
            listed,
            json!({"ListQueuesResponse": {
                "ListQueuesResult": {"queueUrls": ["http://h/1/q"]},
                "ResponseMetadata": {"RequestId": "r1"}
            }})
        );
        let attributes = body(response(
            "GetQueueAttributes",
            json!({"Attributes": {"DelaySeconds": "0"}}),
            "r2",
        ));
        assert_eq!(
            attributes["GetQueueAttributesResponse"]["GetQueueAttributesResult"]["Attributes"],
            json!([{"Name": "DelaySeconds", "Value": "0"}])
        );
    }
}
