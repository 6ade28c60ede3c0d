//! The protocols Subscribe takes, by AWS's names, and where each one's copies go. Every
//! protocol AWS knows is accepted; Orderly delivers to queues and HTTP/S endpoints and keeps
//! what the others would have received (`captured`).

use std::borrow::Cow;
use std::fmt;

/// A subscription's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubscriptionProtocol {
    Sqs,
    Http,
    Https,
    Email,
    EmailJson,
    Sms,
    Application,
    Lambda,
    Firehose,
}

/// Where a subscription's copies go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointKind {
    /// An SQS queue.
    Queue,
    /// An HTTP/S endpoint (the webhook outbox).
    Webhook,
    /// A protocol Orderly records instead of delivering (`captured`).
    Captured,
}

impl SubscriptionProtocol {
    pub const ALL: [SubscriptionProtocol; 9] = [
        Self::Sqs,
        Self::Http,
        Self::Https,
        Self::Email,
        Self::EmailJson,
        Self::Sms,
        Self::Application,
        Self::Lambda,
        Self::Firehose,
    ];

    /// The name as Subscribe takes it and the listings show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sqs => "sqs",
            Self::Http => "http",
            Self::Https => "https",
            Self::Email => "email",
            Self::EmailJson => "email-json",
            Self::Sms => "sms",
            Self::Application => "application",
            Self::Lambda => "lambda",
            Self::Firehose => "firehose",
        }
    }

    /// The protocol of a name, which must be spelled as AWS spells it (lower case).
    pub fn parse(name: &str) -> Option<SubscriptionProtocol> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether the protocol takes `RawMessageDelivery`: queues, webhooks and Firehose get the
    /// message alone; email, SMS, mobile and Lambda always get SNS's own shape.
    pub fn delivers_raw(self) -> bool {
        matches!(self, Self::Sqs | Self::Http | Self::Https | Self::Firehose)
    }

    pub fn kind(self) -> EndpointKind {
        match self {
            Self::Sqs => EndpointKind::Queue,
            Self::Http | Self::Https => EndpointKind::Webhook,
            Self::Email
            | Self::EmailJson
            | Self::Sms
            | Self::Application
            | Self::Lambda
            | Self::Firehose => EndpointKind::Captured,
        }
    }
}

impl fmt::Display for SubscriptionProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The text a subscription's protocol gets, and which of `Outgoing::signatures` signs it: a
/// json-structured message says what each protocol gets, "default" otherwise.
pub(crate) fn protocol_text(
    message: &str,
    structured: bool,
    protocol: SubscriptionProtocol,
) -> (Cow<'_, str>, usize) {
    if !structured {
        return (Cow::Borrowed(message), 0);
    }
    let json: serde_json::Value = serde_json::from_str(message).unwrap_or_default();
    let text = json
        .get(protocol.name())
        .and_then(|v| v.as_str())
        .or_else(|| json.get("default").and_then(|v| v.as_str()))
        .unwrap_or_default()
        .to_string();
    let slot = match protocol {
        SubscriptionProtocol::Sqs => 0,
        SubscriptionProtocol::Http => 1,
        _ => 2,
    };
    (Cow::Owned(text), slot)
}

/// What a platform endpoint gets of a json-structured message: its platform's key (`GCM`,
/// `APNS`, …, as the endpoint's ARN names it), else `default`.
pub fn platform_text(message: &str, endpoint_arn: &str) -> String {
    let platform = endpoint_arn
        .split_once(":endpoint/")
        .and_then(|(_, resource)| resource.split('/').next())
        .unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(message).unwrap_or_default();
    let text = json.get(platform).or_else(|| json.get("default"));
    text.and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_platform_endpoint_gets_its_platforms_key_or_the_default() {
        let message = r#"{"default":"d","GCM":"g","APNS_SANDBOX":"a"}"#;
        let arn = |platform: &str| {
            format!("arn:aws:sns:us-east-1:000000000000:endpoint/{platform}/app/1")
        };
        assert_eq!(platform_text(message, &arn("GCM")), "g");
        assert_eq!(platform_text(message, &arn("APNS_SANDBOX")), "a");
        assert_eq!(platform_text(message, &arn("ADM")), "d");
        assert_eq!(platform_text(message, "not an arn"), "d");
    }

    #[test]
    fn every_protocol_reads_back_from_its_name_and_no_other_spelling() {
        for protocol in SubscriptionProtocol::ALL {
            assert_eq!(SubscriptionProtocol::parse(protocol.name()), Some(protocol));
            let upper = protocol.name().to_uppercase();
            assert_eq!(SubscriptionProtocol::parse(&upper), None, "{upper}");
        }
        assert_eq!(SubscriptionProtocol::parse("smtp"), None);
        assert_eq!(SubscriptionProtocol::parse(""), None);
    }

    #[test]
    fn queues_and_webhooks_are_delivered_and_the_rest_captured() {
        let delivered: Vec<_> = SubscriptionProtocol::ALL
            .into_iter()
            .filter(|p| p.kind() != EndpointKind::Captured)
            .map(SubscriptionProtocol::name)
            .collect();
        assert_eq!(delivered, ["sqs", "http", "https"]);
    }
}
