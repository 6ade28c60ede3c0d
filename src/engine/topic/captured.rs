//! The subscription protocols Orderly accepts but never sends to: `email`, `email-json`, `sms`,
//! `application`, `lambda` and `firehose`, on standard topics. Each is checked and confirmed as AWS
//! does (email endpoints pend until their SubscribeURL is visited; the others are confirmed at
//! once, sns.md §3.6), and what each would have received is captured instead (`CapturedMessage`),
//! for the inspection API to show. Nothing leaves the machine. Pure.
//!
//! What each gets: `email` and `sms` the text (a json-structured message's own key, else
//! `default`) and, for email, the subject; `email-json` and `firehose` the notification
//! envelope (firehose the raw text with RawMessageDelivery); `lambda` the event Lambda is
//! invoked with (`Records[0].Sns`: the envelope with Lambda's field spellings,
//! `SigningCertUrl` and `UnsubscribeUrl`; AWS Lambda Developer Guide, "Using Lambda with Amazon
//! SNS"); `application` the text (of a json-structured message, its platform's key). Endpoint texts from sns.md §3.6 where it records them
//! (`Invalid SMS endpoint: …`); the others are Orderly's.

use std::sync::Arc;

use serde_json::Value;

pub use super::captured_message::CapturedMessage;
use super::subscription::{Subscribed, Subscriber};
use super::{PublishRequest, Subscription, SubscriptionProtocol as P, Topic};
use crate::engine::error::invalid_parameter as invalid;
use crate::engine::error::EngineResult;
use crate::engine::message::MessageAttributes;
use crate::engine::time::Timestamp;

/// Whether a protocol's subscriptions wait for confirmation (sns.md §3.6).
pub fn pends(protocol: P) -> bool {
    matches!(protocol, P::Email | P::EmailJson)
}

/// A phone number as SMS endpoints and Publish's PhoneNumber take it: E.164 digits after an
/// optional `+`, with single `-`, `.` or `/` allowed between digits.
pub fn check_phone_number(number: &str) -> bool {
    let separators = |c: char| matches!(c, '-' | '.' | '/');
    let digits: String = number
        .strip_prefix('+')
        .unwrap_or(number)
        .chars()
        .filter(|c| !separators(*c))
        .collect();
    let well_placed = !number.starts_with(separators)
        && !number.ends_with(separators)
        && !number
            .as_bytes()
            .windows(2)
            .any(|w| separators(w[0] as char) && separators(w[1] as char));
    well_placed
        && (2..=15).contains(&digits.len())
        && digits.chars().all(|c| c.is_ascii_digit())
        && !digits.starts_with('0')
}

/// An ARN of `service` whose resource starts with `prefix` (`function:`, `deliverystream/`).
fn arn_of(endpoint: &str, service: &str, prefix: &str) -> bool {
    let parts: Vec<&str> = endpoint.splitn(6, ':').collect();
    parts.len() == 6
        && parts[0] == "arn"
        && parts[2] == service
        && !parts[3].is_empty()
        && parts[4].len() == 12
        && parts[4].chars().all(|c| c.is_ascii_digit())
        && parts[5]
            .strip_prefix(prefix)
            .is_some_and(|name| !name.is_empty())
}

/// Checks an endpoint of a captured protocol.
pub fn check_endpoint(protocol: P, endpoint: &str) -> EngineResult<()> {
    let valid = match protocol {
        P::Sms => {
            if !check_phone_number(endpoint) {
                return Err(invalid(format!("Invalid SMS endpoint: {endpoint}")));
            }
            true
        }
        P::Email | P::EmailJson => endpoint.split_once('@').is_some_and(|(user, domain)| {
            !user.is_empty()
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
                && !endpoint.contains(char::is_whitespace)
                && !domain.contains('@')
        }),
        P::Lambda => arn_of(endpoint, "lambda", "function:"),
        P::Firehose => arn_of(endpoint, "firehose", "deliverystream/"),
        P::Application => arn_of(endpoint, "sns", "endpoint/"),
        P::Sqs | P::Http | P::Https => false,
    };
    if valid {
        Ok(())
    } else {
        Err(invalid(format!(
            "Invalid parameter: Endpoint Reason: not a valid {protocol} endpoint: {endpoint}"
        )))
    }
}

impl Topic {
    /// Subscribe's change to the topic for a captured protocol: a new subscription (pending for
    /// email endpoints), or the existing one of this protocol and endpoint. Answers also the
    /// subscription a confirmation must go to (a new pending one, or one still pending).
    pub fn subscribe_captured(
        &mut self,
        (protocol, endpoint): (P, &str),
        attrs: &[(String, String)],
        subscriber: Subscriber,
        now: Timestamp,
    ) -> EngineResult<(Subscribed, Option<Arc<Subscription>>)> {
        check_endpoint(protocol, endpoint)?;
        if protocol == P::Firehose && !attrs.iter().any(|(name, _)| name == "SubscriptionRoleArn") {
            return Err(invalid(
                "Invalid parameter: Attributes Reason: SubscriptionRoleArn is required for firehose subscriptions",
            ));
        }
        self.subscribe_confirmable(
            (protocol, endpoint),
            attrs,
            subscriber,
            (pends(protocol), now),
        )
    }
}

/// An email endpoint's SubscriptionConfirmation, as captured: the confirmation document (it
/// holds the SubscribeURL to visit and the token).
pub fn confirmation_record(
    topic: &Topic,
    subscription: &Subscription,
    document: String,
    message_id: Arc<str>,
    now: Timestamp,
) -> CapturedMessage {
    CapturedMessage {
        protocol: subscription.protocol,
        endpoint: subscription.endpoint.as_str().into(),
        subscription_arn: Some(subscription.arn.clone()),
        topic_arn: Some(topic.arn.clone()),
        message_id,
        kind: "SubscriptionConfirmation",
        subject: Some(format!(
            "AWS Notification - Subscription Confirmation ({})",
            topic.name
        )),
        body: document,
        attributes: MessageAttributes::default(),
        structure: None,
        at: now,
    }
}

/// What the published message gives this subscription's endpoint. `text` is the protocol's
/// text, `envelope` builds the notification envelope.
pub struct Notified<'a> {
    pub topic_arn: &'a Arc<str>,
    pub message_id: &'a Arc<str>,
    pub subject: Option<&'a str>,
    pub text: &'a str,
    /// The message as published (a json-structured one's per-protocol texts).
    pub message: &'a str,
    pub attributes: &'a MessageAttributes,
    pub structured: bool,
    pub envelope: &'a dyn Fn() -> String,
    pub at: Timestamp,
}

pub fn notification(subscription: &Subscription, n: Notified) -> CapturedMessage {
    let body = match subscription.protocol {
        P::EmailJson => (n.envelope)(),
        P::Firehose if subscription.raw_delivery => n.text.to_string(),
        P::Firehose => (n.envelope)(),
        P::Lambda => lambda_event(&subscription.arn, &(n.envelope)()),
        P::Application if n.structured => {
            super::protocol::platform_text(n.message, &subscription.endpoint)
        }
        P::Email | P::Sms | P::Application | P::Sqs | P::Http | P::Https => n.text.to_string(),
    };
    CapturedMessage {
        protocol: subscription.protocol,
        endpoint: subscription.endpoint.as_str().into(),
        subscription_arn: Some(subscription.arn.clone()),
        topic_arn: Some(n.topic_arn.clone()),
        message_id: n.message_id.clone(),
        kind: "Notification",
        subject: n.subject.map(String::from),
        body,
        attributes: n.attributes.clone(),
        structure: n.structured.then_some("json"),
        at: n.at,
    }
}

/// A Publish straight to a phone number: the SMS text (a json-structured message's `sms`,
/// else `default`).
pub fn sms_to_number(
    number: &str,
    request: &PublishRequest,
    message_id: &Arc<str>,
    now: Timestamp,
) -> CapturedMessage {
    let (text, _) = super::protocol::protocol_text(&request.message, request.structured, P::Sms);
    CapturedMessage {
        protocol: P::Sms,
        endpoint: number.into(),
        subscription_arn: None,
        topic_arn: None,
        message_id: message_id.clone(),
        kind: "Notification",
        subject: request.subject.clone(),
        body: text.into_owned(),
        attributes: if request.structured {
            MessageAttributes::default()
        } else {
            request.attributes.clone()
        },
        structure: request.structured.then_some("json"),
        at: now,
    }
}

/// The event a Lambda function subscribed to a topic is invoked with.
fn lambda_event(subscription_arn: &str, envelope: &str) -> String {
    let mut sns: serde_json::Map<String, Value> =
        serde_json::from_str(envelope).unwrap_or_default();
    for (ours, lambdas) in [
        ("SigningCertURL", "SigningCertUrl"),
        ("UnsubscribeURL", "UnsubscribeUrl"),
    ] {
        if let Some(value) = sns.remove(ours) {
            sns.insert(lambdas.into(), value);
        }
    }
    serde_json::json!({
        "Records": [{
            "EventSource": "aws:sns",
            "EventVersion": "1.0",
            "EventSubscriptionArn": subscription_arn,
            "Sns": sns,
        }]
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_checked_per_protocol() {
        for good in [
            "+15551234567",
            "15551234567",
            "+1-555-123-4567",
            "+1.555/123.4567",
        ] {
            assert!(check_endpoint(P::Sms, good).is_ok(), "{good}");
        }
        for bad in [
            "NAA+15551234567",
            "+15--551234567",
            "+15551234567.",
            "/+15551234567",
            "+0123",
        ] {
            let error = check_endpoint(P::Sms, bad).unwrap_err().to_string();
            assert_eq!(error, format!("Invalid SMS endpoint: {bad}"));
        }
        assert!(check_endpoint(P::Email, "ops@example.com").is_ok());
        assert!(check_endpoint(P::EmailJson, "ops@example.com").is_ok());
        for bad in ["ops", "ops@localhost", "@example.com", "o ps@example.com"] {
            assert!(check_endpoint(P::Email, bad).is_err(), "{bad}");
        }
        let lambda = "arn:aws:lambda:us-east-1:000000000000:function:notify";
        assert!(check_endpoint(P::Lambda, lambda).is_ok());
        assert!(check_endpoint(P::Lambda, &format!("{lambda}:live")).is_ok());
        assert!(check_endpoint(P::Lambda, "notify").is_err());
        let stream = "arn:aws:firehose:us-east-1:000000000000:deliverystream/prices";
        assert!(check_endpoint(P::Firehose, stream).is_ok());
        assert!(check_endpoint(P::Firehose, lambda).is_err());
        let app = "arn:aws:sns:us-east-1:000000000000:endpoint/GCM/app/1234";
        assert!(check_endpoint(P::Application, app).is_ok());
        assert!(check_endpoint(P::Application, stream).is_err());
    }

    #[test]
    fn lambda_gets_its_own_field_spellings() {
        let envelope = r#"{"Type":"Notification","MessageId":"m","Message":"hi","SigningCertURL":"c","UnsubscribeURL":"u"}"#;
        let event: Value = serde_json::from_str(&lambda_event("arn:s", envelope)).unwrap();
        let record = &event["Records"][0];
        assert_eq!(record["EventSource"], "aws:sns");
        assert_eq!(record["EventSubscriptionArn"], "arn:s");
        assert_eq!(record["Sns"]["Message"], "hi");
        assert_eq!(record["Sns"]["SigningCertUrl"], "c");
        assert_eq!(record["Sns"]["UnsubscribeUrl"], "u");
        assert!(record["Sns"].get("SigningCertURL").is_none());
    }
}
