//! Generated SNS requests (Query protocol), shaped like the SQS ones.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{json, Value};

use super::sqs_requests::value_for;
use orderly::protocol::SnsAction;

use super::values::*;
use super::Hostile;

/// Every SNS action's name, from the server's own declaration of them.
pub(super) fn sns_actions() -> Vec<&'static str> {
    SnsAction::ALL.iter().map(|a| a.name()).collect()
}

pub(super) const SNS_KEYS: &[&str] = &[
    "TopicArn",
    "Name",
    "Attributes",
    "Tags",
    "Protocol",
    "Endpoint",
    "ReturnSubscriptionArn",
    "SubscriptionArn",
    "Token",
    "AuthenticateOnUnsubscribe",
    "NextToken",
    "AttributeName",
    "AttributeValue",
    "Message",
    "Subject",
    "MessageStructure",
    "MessageAttributes",
    "MessageGroupId",
    "MessageDeduplicationId",
    "TargetArn",
    "PhoneNumber",
    "PublishBatchRequestEntries",
    "ResourceArn",
    "TagKeys",
    "Label",
    "AWSAccountId",
    "ActionName",
    "DataProtectionPolicy",
    "PlatformApplicationArn",
    "EndpointArn",
    "Platform",
    "CustomUserData",
    "OneTimePassword",
    "LanguageCode",
    "MaxResults",
    "phoneNumber",
    "nextToken",
];

pub(super) const TOPICS: &[&str] = &["ft.fifo", "ft", "missing.fifo"];

pub(super) fn sns_value(key: &'static str) -> BoxedStrategy<Value> {
    let plausible: BoxedStrategy<Value> = match key {
        "TopicArn" | "TargetArn" | "ResourceArn" => prop_oneof![
            4 => select(TOPICS).prop_map(|t| Value::from(topic_arn(t))),
            1 => select(vec!["arn:bogus", "", "arn:aws:sns:us-east-1:000000000000:ft.fifo:sub"]).prop_map(Value::from),
        ]
        .boxed(),
        "PlatformApplicationArn" => select(vec![
            "arn:aws:sns:us-east-1:000000000000:app/GCM/ft",
            "arn:aws:sns:us-east-1:000000000000:app/GCM/missing",
            "invalid",
            "",
        ])
        .prop_map(Value::from)
        .boxed(),
        "EndpointArn" => select(vec![
            "arn:aws:sns:us-east-1:000000000000:endpoint/GCM/ft/x",
            "arn:aws:sns:us-east-1:000000000000:endpoint/GCM",
            "invalid",
            "",
        ])
        .prop_map(Value::from)
        .boxed(),
        "Platform" => select(vec!["GCM", "APNS", "ADM", "AAA", ""])
            .prop_map(Value::from)
            .boxed(),
        "phoneNumber" | "PhoneNumber" => select(vec!["+15550100", "+1555", "invalid", ""])
            .prop_map(Value::from)
            .boxed(),
        "Name" => select(vec!["ft.fifo", "ft", "ft-new", ".fifo", "a b", ""])
            .prop_map(Value::from)
            .boxed(),
        "Protocol" => select(vec!["sqs", "http", "https", "email", "lambda", "bogus", ""])
            .prop_map(Value::from)
            .boxed(),
        // Webhooks only to a port nothing listens on: the barrage must not reach out.
        "SubscriptionArn" => prop_oneof![
            3 => Just(Value::from(SUBSCRIPTION)),
            1 => select(vec!["arn:bogus", "", "arn:aws:sns:us-east-1:000000000000:ft.fifo:x"]).prop_map(Value::from),
        ]
        .boxed(),
        "Endpoint" => prop_oneof![
            3 => select(QUEUES).prop_map(|q| Value::from(queue_arn(q))),
            1 => select(vec!["http://127.0.0.1:9/h", "https://127.0.0.1:9/h", "mailto:x", "not a url", ""]).prop_map(Value::from),
        ]
        .boxed(),
        "AttributeName" => select(TOPIC_ATTRIBUTES).prop_map(Value::from).boxed(),
        "AttributeValue" => attribute_value("FilterPolicy"),
        "Attributes" => attributes(TOPIC_ATTRIBUTES),
        "Message" | "Subject" => text().prop_map(Value::from).boxed(),
        "MessageStructure" => select(vec!["json", "raw", ""]).prop_map(Value::from).boxed(),
        "MessageAttributes" => message_attributes(),
        "Tags" => value_for("Tags"),
        "TagKeys" | "AWSAccountId" | "ActionName" => value_for("TagKeys"),
        "PublishBatchRequestEntries" => prop::collection::vec(
            (token(), text(), token()).prop_map(|(id, message, group)| {
                json!({"Id": id, "Message": message, "MessageGroupId": group})
            }),
            0..12,
        )
        .prop_map(Value::from)
        .boxed(),
        _ => token(),
    };
    prop_oneof![5 => plausible, 1 => arbitrary_json()].boxed()
}

/// SNS names its collections differently from SQS: `Attributes.entry.N.key`,
/// `MessageAttributes.entry.N.Name`, `Tags.member.N.Key`, `*.member.N`.
pub(super) fn sns_flatten(
    action: &str,
    fields: Vec<(&'static str, Value)>,
) -> Vec<(String, String)> {
    let index = |i: usize| (i + 1).to_string();
    let mut out = vec![("Action".to_string(), action.to_string())];
    for (key, value) in fields {
        match (key, &value) {
            ("Attributes", Value::Object(m)) => {
                push_map(&mut out, m, index, "Attributes.entry", ("key", "value"))
            }
            ("MessageAttributes", Value::Object(m)) => {
                push_message_attributes(&mut out, m, index, "MessageAttributes.entry")
            }
            ("Tags", Value::Object(m)) => {
                push_map(&mut out, m, index, "Tags.member", ("Key", "Value"))
            }
            (list, Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::Object(fields) => {
                            for (f, fv) in fields {
                                out.push((format!("{list}.member.{}.{f}", i + 1), scalar(fv)));
                            }
                        }
                        other => out.push((format!("{list}.member.{}", i + 1), scalar(other))),
                    }
                }
            }
            (k, v) => out.push((k.to_string(), scalar(v))),
        }
    }
    out
}

/// The parameters an SNS action needs. Exhaustive, as `sqs_required`.
pub(super) fn sns_required(action: &str) -> &'static [&'static str] {
    let Some(action) = SnsAction::parse(action) else {
        return &[];
    };
    use SnsAction as A;
    match action {
        A::CreateTopic => &["Name", "Attributes"],
        A::ListTopics | A::ListSubscriptions => &[],
        A::SetTopicAttributes => &["TopicArn", "AttributeName", "AttributeValue"],
        A::Subscribe => &["TopicArn", "Protocol", "Endpoint", "Attributes"],
        A::Unsubscribe | A::GetSubscriptionAttributes => &["SubscriptionArn"],
        A::SetSubscriptionAttributes => &["SubscriptionArn", "AttributeName", "AttributeValue"],
        A::ConfirmSubscription => &["TopicArn", "Token"],
        A::Publish => &[
            "TopicArn",
            "Message",
            "MessageGroupId",
            "MessageDeduplicationId",
            "MessageAttributes",
        ],
        A::PublishBatch => &["TopicArn", "PublishBatchRequestEntries"],
        A::TagResource => &["ResourceArn", "Tags"],
        A::UntagResource => &["ResourceArn", "TagKeys"],
        A::ListTagsForResource => &["ResourceArn"],
        A::AddPermission => &["TopicArn", "Label", "AWSAccountId", "ActionName"],
        A::RemovePermission => &["TopicArn", "Label"],
        A::GetDataProtectionPolicy => &["ResourceArn"],
        A::PutDataProtectionPolicy => &["ResourceArn", "DataProtectionPolicy"],
        A::DeleteTopic | A::GetTopicAttributes | A::ListSubscriptionsByTopic => &["TopicArn"],
        A::CreatePlatformApplication => &["Name", "Platform", "Attributes"],
        A::GetPlatformApplicationAttributes
        | A::DeletePlatformApplication
        | A::ListEndpointsByPlatformApplication => &["PlatformApplicationArn"],
        A::SetPlatformApplicationAttributes => &["PlatformApplicationArn", "Attributes"],
        A::ListPlatformApplications
        | A::GetSMSAttributes
        | A::ListPhoneNumbersOptedOut
        | A::GetSMSSandboxAccountStatus
        | A::ListSMSSandboxPhoneNumbers
        | A::ListOriginationNumbers => &[],
        A::CreatePlatformEndpoint => &["PlatformApplicationArn", "Token"],
        A::GetEndpointAttributes | A::DeleteEndpoint => &["EndpointArn"],
        A::SetEndpointAttributes => &["EndpointArn", "Attributes"],
        A::SetSMSAttributes => &["attributes"],
        A::CheckIfPhoneNumberIsOptedOut | A::OptInPhoneNumber => &["phoneNumber"],
        A::CreateSMSSandboxPhoneNumber | A::DeleteSMSSandboxPhoneNumber => &["PhoneNumber"],
        A::VerifySMSSandboxPhoneNumber => &["PhoneNumber", "OneTimePassword"],
    }
}

pub(super) fn sns_query_request() -> BoxedStrategy<Hostile> {
    let field = || select(SNS_KEYS).prop_flat_map(|k| sns_value(k).prop_map(move |v| (k, v)));
    let action = prop_oneof![
        8 => select(sns_actions()).prop_map(String::from),
        1 => "[A-Za-z]{0,12}",
    ];
    let random = (action, prop::collection::vec(field(), 0..8));
    let templated = select(sns_actions()).prop_flat_map(move |action| {
        let required = sns_required(action)
            .iter()
            .map(|k| {
                let k: &'static str = k;
                sns_value(k).prop_map(move |v| (k, v)).boxed()
            })
            .collect::<Vec<_>>();
        (required, prop::collection::vec(field(), 0..3)).prop_map(move |(mut fields, extra)| {
            fields.extend(extra);
            (action.to_string(), fields)
        })
    });
    (
        prop_oneof![1 => random, 2 => templated],
        prop::bool::weighted(0.2),
    )
        .prop_map(|((action, fields), get)| Hostile::SnsQuery {
            params: sns_flatten(&action, fields),
            get,
        })
        .boxed()
}
