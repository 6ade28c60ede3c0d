//! Value generators shared by the SQS and SNS request generators: text with characters SQS
//! refuses, odd numbers, attribute maps, and names of the queues and topics the barrage aims at.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Value};

pub(super) const ACCOUNT: &str = "000000000000";

/// Queues the barrage may touch; `sealed.fifo` is not among them.
pub(super) const QUEUES: &[&str] = &[
    "fz.fifo",
    "fz",
    "fz-dlq.fifo",
    "fz-dlq",
    "missing",
    "fz-new.fifo",
];

/// Stand for a receipt handle and a subscription ARN the server gave out earlier in the run.
pub(super) const HANDLE: &str = "$HANDLE";
pub(super) const SUBSCRIPTION: &str = "$SUBSCRIPTION";

pub(super) fn queue_url(name: &str) -> String {
    format!("http://localhost/{ACCOUNT}/{name}")
}

pub(super) fn queue_arn(name: &str) -> String {
    format!("arn:aws:sqs:us-east-1:{ACCOUNT}:{name}")
}

pub(super) fn topic_arn(name: &str) -> String {
    format!("arn:aws:sns:us-east-1:{ACCOUNT}:{name}")
}

/// Free text, including characters SQS refuses and one body over the 1 MiB limit.
pub(super) fn text() -> BoxedStrategy<String> {
    prop_oneof![
        4 => "\\PC{0,24}",
        2 => "[a-zA-Z0-9_.-]{1,10}",
        1 => "[\\x00-\\x1f\\u{fffe}\\u{ffff}]{1,4}",
        1 => Just(String::new()),
        1 => Just("x".repeat(1_048_577)),
        1 => Just("é".repeat(300)),
    ]
    .boxed()
}

pub(super) fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => (-2i64..1_300).prop_map(Value::from),
        1 => select(vec![i64::MIN, i64::MAX, 43_201, 1_209_601, 262_145, 120_001]).prop_map(Value::from),
        1 => select(vec![0.5f64, 1e300, -0.0, 10.0]).prop_map(Value::from),
        1 => select(vec!["10", "x", "", "1e3", "-1", "007"]).prop_map(Value::from),
    ]
    .boxed()
}

pub(super) fn arbitrary_json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("\\PC{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}

pub(super) fn strings(pool: &[&str]) -> BoxedStrategy<Value> {
    let pool: Vec<String> = pool.iter().map(|s| s.to_string()).collect();
    prop::collection::vec(prop_oneof![select(pool), "\\PC{0,12}"], 0..4)
        .prop_map(Value::from)
        .boxed()
}

pub(super) fn attribute_value(name: &'static str) -> BoxedStrategy<Value> {
    let plausible: BoxedStrategy<String> = match name {
        "RedrivePolicy" => select(vec![
            format!(
                r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":1}}"#,
                queue_arn("fz-dlq.fifo")
            ),
            format!(
                r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":"2"}}"#,
                queue_arn("fz-dlq")
            ),
            r#"{"deadLetterTargetArn":"x"}"#.into(),
            "{}".into(),
            "not json".into(),
            String::new(),
        ])
        .boxed(),
        "RedriveAllowPolicy" => select(vec![
            r#"{"redrivePermission":"allowAll"}"#.to_string(),
            r#"{"redrivePermission":"byQueue","sourceQueueArns":[]}"#.into(),
            r#"{"redrivePermission":"denyAll","sourceQueueArns":["x"]}"#.into(),
            "[]".into(),
        ])
        .boxed(),
        "FilterPolicy" => select(vec![
            r#"{"kind":["a"]}"#.to_string(),
            r#"{"price":[{"numeric":[">",1,"<=",5]}]}"#.into(),
            r#"{"a":[{"prefix":"x"},{"anything-but":{"suffix":"y"}}]}"#.into(),
            r#"{"a":{"b":[{"exists":false}]}}"#.into(),
            r#"{"a":[]}"#.into(),
            "{".into(),
        ])
        .boxed(),
        _ => select(vec![
            "true",
            "false",
            "0",
            "1",
            "30",
            "-1",
            "901",
            "43200",
            "262144",
            "1024",
            "queue",
            "messageGroup",
            "perQueue",
            "perMessageGroupId",
            "MessageAttributes",
            "MessageBody",
            "{}",
        ])
        .prop_map(String::from)
        .boxed(),
    };
    prop_oneof![4 => plausible, 1 => text()]
        .prop_map(Value::from)
        .boxed()
}

pub(super) const QUEUE_ATTRIBUTES: &[&str] = &[
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
    "VisibilityTimeout",
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "RedrivePolicy",
    "RedriveAllowPolicy",
    "Policy",
    "SqsManagedSseEnabled",
    "KmsMasterKeyId",
    "QueueArn",
    "Bogus",
];

pub(super) const TOPIC_ATTRIBUTES: &[&str] = &[
    "FifoTopic",
    "ContentBasedDeduplication",
    "FilterPolicy",
    "FilterPolicyScope",
    "RawMessageDelivery",
    "RedrivePolicy",
    "DeliveryPolicy",
    "DisplayName",
    "ArchivePolicy",
    "SignatureVersion",
    "Bogus",
];

pub(super) fn attributes(names: &'static [&'static str]) -> BoxedStrategy<Value> {
    prop::collection::vec(
        select(names).prop_flat_map(|n| attribute_value(n).prop_map(move |v| (n, v))),
        0..4,
    )
    .prop_map(|pairs| Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
    .boxed()
}

pub(super) fn message_attributes() -> BoxedStrategy<Value> {
    let name = prop_oneof![
        3 => "[a-zA-Z][a-zA-Z0-9_.-]{0,8}",
        1 => select(vec!["AWS.x".to_string(), ".a".into(), "a..b".into(), "a.".into(), String::new(), "x".repeat(257)]),
    ];
    let data_type = select(vec![
        "String",
        "Number",
        "Binary",
        "String.custom",
        "Number.x",
        "Binary.",
        "bogus",
        "",
    ]);
    let value = (
        data_type,
        prop::option::of(prop_oneof![
            text(),
            select(vec!["1", "-1.5", "1e400", "x", "00"]).prop_map(String::from)
        ]),
        prop::option::of(select(vec!["aGk=", "!!", "", "AAAA"])),
    )
        .prop_map(|(t, s, b)| {
            let mut m = Map::new();
            m.insert("DataType".into(), t.into());
            if let Some(s) = s {
                m.insert("StringValue".into(), s.into());
            }
            if let Some(b) = b {
                m.insert("BinaryValue".into(), b.into());
            }
            Value::Object(m)
        });
    prop::collection::btree_map(name, value, 0..3)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
        .boxed()
}

pub(super) fn token() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => "[a-zA-Z0-9_-]{1,8}",
        1 => "\\PC{0,130}",
        1 => Just(String::new()),
    ]
    .prop_map(Value::from)
    .boxed()
}

pub(super) fn receipt_handle() -> BoxedStrategy<Value> {
    prop_oneof![3 => Just(HANDLE.to_string()), 1 => text()]
        .prop_map(Value::from)
        .boxed()
}

/// A JSON value as a Query parameter: strings as they are, anything else as JSON text.
pub(super) fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A map as Query parameters `{prefix}.{index}.{key}` and `{prefix}.{index}.{value}`.
pub(super) fn push_map(
    out: &mut Vec<(String, String)>,
    map: &Map<String, Value>,
    index: impl Fn(usize) -> String,
    prefix: &str,
    (key, value): (&str, &str),
) {
    for (i, (k, v)) in map.iter().enumerate() {
        out.push((format!("{prefix}.{}.{key}", index(i)), k.clone()));
        out.push((format!("{prefix}.{}.{value}", index(i)), scalar(v)));
    }
}

/// Message attributes as Query parameters `{prefix}.{index}.Name` and `.Value.{field}`.
pub(super) fn push_message_attributes(
    out: &mut Vec<(String, String)>,
    map: &Map<String, Value>,
    index: impl Fn(usize) -> String,
    prefix: &str,
) {
    for (i, (name, value)) in map.iter().enumerate() {
        let at = format!("{prefix}.{}", index(i));
        out.push((format!("{at}.Name"), name.clone()));
        if let Value::Object(fields) = value {
            for (f, fv) in fields {
                out.push((format!("{at}.Value.{f}"), scalar(fv)));
            }
        }
    }
}
