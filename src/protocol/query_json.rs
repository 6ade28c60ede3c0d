//! An SQS Query answer rendered as JSON, as AWS renders it for a Query request that accepts
//! JSON (answers observed on AWS, not the AWS JSON protocol's):
//! `{"<Action>Response": {"<Action>Result": {…}, "ResponseMetadata": {"RequestId": …}}}`,
//! every member of the result present (`null` when it has no value), list members in lower
//! camel case (`queueUrls`, `messages`), queue attributes a list of `{"Name", "Value"}`, keys
//! in ASCII order; errors `{"Error": {"Code", "Message", "Type"}, "RequestId"}` with the Query
//! protocol's code and status.

use serde_json::{json, Map, Value};

use super::actions::SqsAction as A;

use super::encoded::Encoded;
use super::ApiError;

/// The members AWS writes in an action's result, whether or not they have a value: the SQS
/// model's output members (ListQueues also writes one the model does not name). Actions with
/// no result members, and any member not listed, are written as the output has them.
fn result_members(action: A) -> &'static [&'static str] {
    match action {
        A::CancelMessageMoveTask => &["ApproximateNumberOfMessagesMoved"],
        A::ChangeMessageVisibilityBatch | A::DeleteMessageBatch | A::SendMessageBatch => {
            &["Successful", "Failed"]
        }
        A::CreateQueue | A::GetQueueUrl => &["QueueUrl"],
        A::GetQueueAttributes => &["Attributes"],
        A::ListDeadLetterSourceQueues => &["queueUrls", "NextToken"],
        A::ListMessageMoveTasks => &["Results"],
        A::ListQueueTags => &["Tags"],
        A::ListQueues => &["QueueUrls", "NextToken", "NextExclusiveStartQueueName"],
        A::ReceiveMessage => &["Messages"],
        A::SendMessage => &[
            "MD5OfMessageBody",
            "MD5OfMessageAttributes",
            "MD5OfMessageSystemAttributes",
            "MessageId",
            "SequenceNumber",
        ],
        A::StartMessageMoveTask => &["TaskHandle"],
        // The actions declared without a result (a test holds the two lists together).
        _ => &[],
    }
}

/// The members of each item of a result's list, by the list and the action.
fn item_members(action: A, list: &str) -> &'static [&'static str] {
    match (action, list) {
        (_, "Messages") => &[
            "MessageId",
            "ReceiptHandle",
            "MD5OfBody",
            "Body",
            "Attributes",
            "MD5OfMessageAttributes",
            "MessageAttributes",
        ],
        (A::SendMessageBatch, "Successful") => &[
            "Id",
            "MessageId",
            "MD5OfMessageBody",
            "MD5OfMessageAttributes",
            "MD5OfMessageSystemAttributes",
            "SequenceNumber",
        ],
        (_, "Successful") => &["Id"],
        (_, "Failed") => &["Id", "SenderFault", "Code", "Message"],
        (_, "Results") => &[
            "TaskHandle",
            "Status",
            "SourceArn",
            "DestinationArn",
            "MaxNumberOfMessagesPerSecond",
            "ApproximateNumberOfMessagesMoved",
            "ApproximateNumberOfMessagesToMove",
            "FailureReason",
            "StartedTimestamp",
        ],
        _ => &[],
    }
}

/// The answer to `action`, from the output as the JSON protocol would write it.
pub fn response(action: A, output: Value, request_id: &str) -> Encoded {
    let members = match output {
        Value::Object(members) => members,
        _ => Map::new(),
    };
    let result = with_every_member(members, result_members(action))
        .into_iter()
        .map(|(name, value)| member(action, name, value))
        .collect();
    let answer = json!({
        format!("{}Response", action.name()): {
            format!("{}Result", action.name()): Value::Object(result),
            "ResponseMetadata": { "RequestId": request_id },
        }
    });
    encoded(200, in_ascii_order(answer))
}

/// `members` with each of `names` it lacks added as `null`.
fn with_every_member(mut members: Map<String, Value>, names: &[&str]) -> Map<String, Value> {
    for name in names {
        if !members.contains_key(*name) {
            members.insert((*name).to_string(), Value::Null);
        }
    }
    members
}

/// The result members that are lists.
const LISTS: [&str; 6] = [
    "QueueUrls",
    "queueUrls",
    "Messages",
    "Successful",
    "Failed",
    "Results",
];

/// A member of a result: lists under their name in lower camel case, each item with every
/// member, and `null` when empty (the XML AWS renders cannot tell an empty list from none);
/// the queue attributes a list of name and value.
fn member(action: A, name: String, value: Value) -> (String, Value) {
    if LISTS.contains(&name.as_str()) {
        let names = item_members(action, &name);
        let items = match value {
            Value::Array(items) if !items.is_empty() => Value::Array(
                items
                    .into_iter()
                    .map(|item| match item {
                        Value::Object(fields) => Value::Object(with_every_member(fields, names)),
                        other => other,
                    })
                    .collect(),
            ),
            _ => Value::Null,
        };
        return (lower_camel(&name), items);
    }
    match value {
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

/// Every object's keys sorted, as AWS writes them (`NextToken` before `queueUrls`).
fn in_ascii_order(value: Value) -> Value {
    match value {
        Value::Object(members) => {
            let mut sorted: Vec<(String, Value)> = members.into_iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                sorted
                    .into_iter()
                    .map(|(name, value)| (name, in_ascii_order(value)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(in_ascii_order).collect()),
        other => other,
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

    #[test]
    fn an_action_has_result_members_exactly_when_it_is_declared_with_a_result() {
        for &action in A::ALL {
            assert_eq!(
                !result_members(action).is_empty(),
                action.xml_result(),
                "{}: add its result members, or declare it NoResult",
                action.name()
            );
        }
    }

    fn body(encoded: Encoded) -> Value {
        serde_json::from_slice(&encoded.body).unwrap()
    }

    #[test]
    fn every_member_present_lists_in_lower_camel_case_and_keys_in_ascii_order() {
        // As observed on AWS for a Query ListQueues accepting JSON, with no queues.
        let none = response(A::ListQueues, json!({}), "a85e390b");
        assert_eq!(
            String::from_utf8(none.body).unwrap(),
            r#"{"ListQueuesResponse":{"ListQueuesResult":{"NextExclusiveStartQueueName":null,"NextToken":null,"queueUrls":null},"ResponseMetadata":{"RequestId":"a85e390b"}}}"#
        );
        let listed = body(response(
            A::ListQueues,
            json!({"QueueUrls": ["http://h/1/q"]}),
            "r1",
        ));
        assert_eq!(
            listed["ListQueuesResponse"]["ListQueuesResult"]["queueUrls"],
            json!(["http://h/1/q"])
        );
        // SendMessage to a standard queue, as observed on AWS: the absent members are null.
        let sent = response(
            A::SendMessage,
            json!({"MD5OfMessageBody": "49f6", "MessageId": "m1"}),
            "r2",
        );
        assert_eq!(
            String::from_utf8(sent.body).unwrap(),
            r#"{"SendMessageResponse":{"ResponseMetadata":{"RequestId":"r2"},"SendMessageResult":{"MD5OfMessageAttributes":null,"MD5OfMessageBody":"49f6","MD5OfMessageSystemAttributes":null,"MessageId":"m1","SequenceNumber":null}}}"#
        );
        // A received message has every member; an empty receive is `"messages": null`.
        let received = body(response(
            A::ReceiveMessage,
            json!({"Messages": [{"MessageId": "m1", "ReceiptHandle": "h", "MD5OfBody": "49f6", "Body": "hi"}]}),
            "r3",
        ));
        assert_eq!(
            received["ReceiveMessageResponse"]["ReceiveMessageResult"]["messages"][0],
            json!({"Attributes": null, "Body": "hi", "MD5OfBody": "49f6", "MD5OfMessageAttributes": null, "MessageAttributes": null, "MessageId": "m1", "ReceiptHandle": "h"})
        );
        let empty = body(response(A::ReceiveMessage, json!({"Messages": []}), "r4"));
        assert_eq!(
            empty["ReceiveMessageResponse"]["ReceiveMessageResult"],
            json!({"messages": null})
        );
    }

    #[test]
    fn queue_attributes_as_name_value_pairs() {
        let attributes = body(response(
            A::GetQueueAttributes,
            json!({"Attributes": {"DelaySeconds": "0"}}),
            "r2",
        ));
        assert_eq!(
            attributes["GetQueueAttributesResponse"]["GetQueueAttributesResult"]["Attributes"],
            json!([{"Name": "DelaySeconds", "Value": "0"}])
        );
    }
}
