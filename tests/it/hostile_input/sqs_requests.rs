//! Generated SQS requests: each action with its required parameters (plausible values, now and
//! then anything), or any parameters at all, as a JSON body or flattened Query parameters.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{json, Map, Value};

use orderly::protocol::SqsAction;

use super::values::*;
use super::Hostile;

/// Every SQS action's name, from the server's own declaration of them.
pub(super) fn sqs_actions() -> Vec<&'static str> {
    SqsAction::ALL.iter().map(|a| a.name()).collect()
}

/// A plausible value for `key`, or now and then anything at all.
pub(super) fn value_for(key: &'static str) -> BoxedStrategy<Value> {
    let plausible: BoxedStrategy<Value> = match key {
        "QueueUrl" => prop_oneof![
            4 => select(QUEUES).prop_map(|q| Value::from(queue_url(q))),
            1 => select(vec!["", "fz.fifo", "http://x/", "/000000000000/fz"]).prop_map(Value::from),
        ]
        .boxed(),
        "QueueName" => prop_oneof![
            3 => select(QUEUES).prop_map(Value::from),
            1 => select(vec![".fifo".to_string(), "a b".into(), String::new(), "q".repeat(81)]).prop_map(Value::from),
        ]
        .boxed(),
        "SourceArn" | "DestinationArn" => prop_oneof![
            3 => select(QUEUES).prop_map(|q| Value::from(queue_arn(q))),
            1 => select(vec!["arn:bogus", ""]).prop_map(Value::from),
        ]
        .boxed(),
        "MessageBody" => text().prop_map(Value::from).boxed(),
        "ReceiptHandle" => receipt_handle(),
        "Attributes" => attributes(QUEUE_ATTRIBUTES),
        "MessageAttributes" => message_attributes(),
        "MessageSystemAttributes" => select(vec![
            json!({"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}}),
            json!({"AWSTraceHeader": {"DataType": "Binary", "BinaryValue": "aGk="}}),
            json!({"Other": {"DataType": "String", "StringValue": "x"}}),
        ])
        .boxed(),
        "AttributeNames" | "MessageSystemAttributeNames" | "MessageAttributeNames" => strings(&[
            "All",
            ".*",
            "SenderId",
            "ApproximateReceiveCount",
            "MessageGroupId",
            "Policy",
            "a.*",
            "bogus",
        ]),
        "TagKeys" | "AWSAccountIds" | "Actions" => {
            strings(&["SendMessage", "*", "ReceiveMessage", "Publish", ACCOUNT, "k"])
        }
        "Tags" => prop::collection::btree_map("[a-z]{0,4}", text(), 0..3)
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k, v.into())).collect()))
            .boxed(),
        "Entries" => prop::collection::vec(entry(), 0..12)
            .prop_map(Value::from)
            .boxed(),
        "DelaySeconds"
        | "VisibilityTimeout"
        | "WaitTimeSeconds"
        | "MaxNumberOfMessages"
        | "MaxResults"
        | "MaxNumberOfMessagesPerSecond" => number(),
        _ => token(),
    };
    prop_oneof![5 => plausible, 1 => arbitrary_json()].boxed()
}

pub(super) const ENTRY_KEYS: &[&str] = &[
    "Id",
    "MessageBody",
    "MessageGroupId",
    "MessageDeduplicationId",
    "DelaySeconds",
    "MessageAttributes",
    "ReceiptHandle",
    "VisibilityTimeout",
];

pub(super) fn entry() -> BoxedStrategy<Value> {
    prop::collection::vec(
        select(ENTRY_KEYS).prop_flat_map(|k| {
            let value = match k {
                "MessageAttributes" => message_attributes(),
                "ReceiptHandle" => receipt_handle(),
                "MessageBody" => text().prop_map(Value::from).boxed(),
                "DelaySeconds" | "VisibilityTimeout" => number(),
                _ => token(),
            };
            value.prop_map(move |v| (k, v))
        }),
        0..6,
    )
    .prop_map(|pairs| Value::Object(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect()))
    .boxed()
}

pub(super) const SQS_KEYS: &[&str] = &[
    "QueueUrl",
    "QueueName",
    "QueueNamePrefix",
    "MaxResults",
    "NextToken",
    "Attributes",
    "AttributeNames",
    "MessageSystemAttributeNames",
    "MessageAttributeNames",
    "MessageBody",
    "DelaySeconds",
    "MessageAttributes",
    "MessageSystemAttributes",
    "MessageDeduplicationId",
    "MessageGroupId",
    "Entries",
    "MaxNumberOfMessages",
    "VisibilityTimeout",
    "WaitTimeSeconds",
    "ReceiveRequestAttemptId",
    "ReceiptHandle",
    "Tags",
    "TagKeys",
    "Label",
    "AWSAccountIds",
    "Actions",
    "SourceArn",
    "DestinationArn",
    "MaxNumberOfMessagesPerSecond",
    "TaskHandle",
];

pub(super) fn sqs_fields() -> BoxedStrategy<Vec<(&'static str, Value)>> {
    prop::collection::vec(
        select(SQS_KEYS).prop_flat_map(|k| value_for(k).prop_map(move |v| (k, v))),
        0..8,
    )
    .boxed()
}

/// The parameters an SQS action needs, so that most templated requests get past the first
/// checks and reach the engine. Exhaustive: an action added to the server does not compile
/// here until its parameters are named.
pub(super) fn sqs_required(action: &str) -> &'static [&'static str] {
    let Some(action) = SqsAction::parse(action) else {
        return &[];
    };
    use SqsAction as A;
    match action {
        A::CreateQueue => &["QueueName", "Attributes"],
        A::GetQueueUrl => &["QueueName"],
        A::ListQueues => &[],
        A::SetQueueAttributes => &["QueueUrl", "Attributes"],
        A::TagQueue => &["QueueUrl", "Tags"],
        A::UntagQueue => &["QueueUrl", "TagKeys"],
        A::AddPermission => &["QueueUrl", "Label", "AWSAccountIds", "Actions"],
        A::RemovePermission => &["QueueUrl", "Label"],
        A::SendMessage => &[
            "QueueUrl",
            "MessageBody",
            "MessageGroupId",
            "MessageDeduplicationId",
        ],
        A::DeleteMessage => &["QueueUrl", "ReceiptHandle"],
        A::ChangeMessageVisibility => &["QueueUrl", "ReceiptHandle", "VisibilityTimeout"],
        A::SendMessageBatch | A::DeleteMessageBatch | A::ChangeMessageVisibilityBatch => {
            &["QueueUrl", "Entries"]
        }
        A::StartMessageMoveTask | A::ListMessageMoveTasks => &["SourceArn"],
        A::CancelMessageMoveTask => &["TaskHandle"],
        A::DeleteQueue
        | A::GetQueueAttributes
        | A::PurgeQueue
        | A::ListQueueTags
        | A::ListDeadLetterSourceQueues
        | A::ReceiveMessage => &["QueueUrl"],
    }
}

/// Batch entries shaped for `action`.
pub(super) fn entries_for(action: &'static str) -> BoxedStrategy<Value> {
    let keys: &'static [&'static str] = match action {
        "SendMessageBatch" => &[
            "Id",
            "MessageBody",
            "MessageGroupId",
            "MessageDeduplicationId",
        ],
        "DeleteMessageBatch" => &["Id", "ReceiptHandle"],
        _ => &["Id", "ReceiptHandle", "VisibilityTimeout"],
    };
    let one = keys
        .iter()
        .map(|k| {
            let k: &'static str = k;
            let value = match k {
                "MessageBody" => text().prop_map(Value::from).boxed(),
                "ReceiptHandle" => receipt_handle(),
                "VisibilityTimeout" => number(),
                _ => token(),
            };
            value.prop_map(move |v| (k, v)).boxed()
        })
        .collect::<Vec<_>>()
        .prop_map(|pairs| {
            Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
        });
    prop::collection::vec(one, 0..12)
        .prop_map(Value::from)
        .boxed()
}

/// An action with its required parameters, plus a few others at random.
pub(super) fn sqs_templated() -> BoxedStrategy<(String, Vec<(&'static str, Value)>)> {
    select(sqs_actions())
        .prop_flat_map(|action| {
            let required = sqs_required(action)
                .iter()
                .map(|k| {
                    let k: &'static str = k;
                    let value = if k == "Entries" {
                        entries_for(action)
                    } else {
                        value_for(k)
                    };
                    value.prop_map(move |v| (k, v)).boxed()
                })
                .collect::<Vec<_>>();
            let extra = prop::collection::vec(
                select(SQS_KEYS).prop_flat_map(|k| value_for(k).prop_map(move |v| (k, v))),
                0..3,
            );
            (required, extra).prop_map(move |(mut fields, extra)| {
                fields.extend(extra);
                (action.to_string(), fields)
            })
        })
        .boxed()
}

pub(super) fn sqs_action_and_fields() -> BoxedStrategy<(String, Vec<(&'static str, Value)>)> {
    let action = prop_oneof![
        8 => select(sqs_actions()).prop_map(String::from),
        1 => "[A-Za-z]{0,12}",
    ];
    prop_oneof![1 => (action, sqs_fields()), 2 => sqs_templated()].boxed()
}

pub(super) fn json_request() -> BoxedStrategy<Hostile> {
    let object = sqs_action_and_fields().prop_map(|(action, fields)| {
        // Later duplicates of a key replace earlier ones, as a JSON parser would keep one.
        let object: Map<String, Value> = fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        Hostile::Json {
            action,
            body: serde_json::to_vec(&Value::Object(object)).expect("json"),
        }
    });
    let action = prop_oneof![
        8 => select(sqs_actions()).prop_map(String::from),
        1 => "[A-Za-z]{0,12}",
    ];
    let garbage = prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..48),
        1 => arbitrary_json().prop_map(|v| serde_json::to_vec(&v).expect("json")),
    ];
    prop_oneof![
        8 => object,
        1 => (action, garbage).prop_map(|(action, body)| Hostile::Json { action, body }),
    ]
    .boxed()
}

/// Flattens JSON-shaped fields the way the Query protocol names them, with odd indexes now
/// and then.
pub(super) fn flatten(
    action: &str,
    fields: Vec<(&'static str, Value)>,
    odd_index: &str,
) -> Vec<(String, String)> {
    let index = |i: usize| {
        if i == 0 && !odd_index.is_empty() {
            odd_index.to_string()
        } else {
            (i + 1).to_string()
        }
    };
    let mut out = vec![("Action".to_string(), action.to_string())];
    for (key, value) in fields {
        match (key, &value) {
            ("Attributes", Value::Object(m)) => {
                push_map(&mut out, m, index, "Attribute", ("Name", "Value"))
            }
            ("MessageAttributes", Value::Object(m)) => {
                push_message_attributes(&mut out, m, index, "MessageAttribute")
            }
            ("Tags", Value::Object(m)) => push_map(&mut out, m, index, "Tag", ("Key", "Value")),
            ("Entries", Value::Array(entries)) => {
                let prefix = format!("{action}RequestEntry");
                for (i, e) in entries.iter().enumerate() {
                    if let Value::Object(fields) = e {
                        for (f, fv) in fields {
                            out.push((format!("{prefix}.{}.{f}", index(i)), scalar(fv)));
                        }
                    }
                }
            }
            (list, Value::Array(items)) => {
                let singular = match list {
                    "AttributeNames" => "AttributeName",
                    "MessageAttributeNames" => "MessageAttributeName",
                    "MessageSystemAttributeNames" => "MessageSystemAttributeName",
                    "TagKeys" => "TagKey",
                    "AWSAccountIds" => "AWSAccountId",
                    "Actions" => "ActionName",
                    other => other,
                };
                for (i, item) in items.iter().enumerate() {
                    out.push((format!("{singular}.{}", index(i)), scalar(item)));
                }
            }
            (k, v) => out.push((k.to_string(), scalar(v))),
        }
    }
    out
}

pub(super) fn odd_index() -> impl Strategy<Value = String> {
    prop_oneof![6 => Just(String::new()), 1 => select(vec!["0", "x", "-1", "99999999999999999999"]).prop_map(String::from)]
}

/// Old clients post to the queue's URL and leave `QueueUrl` out; any path must be safe.
fn query_path() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("/".to_string()),
        2 => select(QUEUES).prop_map(|q| format!("/{ACCOUNT}/{q}")),
        1 => select(vec!["/000000000000/", "/x/y/z", "/%00", "/000000000000/fz.fifo/x"]).prop_map(String::from),
    ]
}

pub(super) fn sqs_query_request() -> BoxedStrategy<Hostile> {
    (
        sqs_action_and_fields(),
        odd_index(),
        any::<bool>(),
        query_path(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|((action, fields), odd, version, path, get)| {
            let mut params = flatten(&action, fields, &odd);
            if version {
                params.push(("Version".into(), "2012-11-05".into()));
            }
            Hostile::SqsQuery { params, path, get }
        })
        .boxed()
}
