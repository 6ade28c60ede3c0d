//! The JSON envelope SNS wraps a notification in when raw delivery is off, with AWS's field order.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{Map, Value};

use crate::engine::message::{AttributeData, MessageAttributes};
use crate::engine::time::Timestamp;

pub struct Notification<'a> {
    pub message_id: &'a str,
    pub sequence_number: Option<u128>,
    pub topic_arn: &'a str,
    pub subject: Option<&'a str>,
    pub message: &'a str,
    pub timestamp: Timestamp,
    pub unsubscribe_url: &'a str,
    pub attributes: &'a MessageAttributes,
    /// Standard topics: (SignatureVersion, Signature, SigningCertURL).
    pub signature: Option<(&'a str, &'a str, &'a str)>,
    /// Replayed from the archive (marked `"Replayed": true`; AWS's exact form is unconfirmed).
    pub replayed: bool,
}

/// The envelope body. FIFO topics carry `SequenceNumber` after `MessageId`. Signature fields
/// are left out until messages are signed (AWS FIFO envelopes carry none either).
pub fn notification(n: &Notification) -> String {
    let mut body = Map::new();
    body.insert("Type".into(), "Notification".into());
    body.insert("MessageId".into(), n.message_id.into());
    if let Some(seq) = n.sequence_number {
        body.insert("SequenceNumber".into(), seq.to_string().into());
    }
    body.insert("TopicArn".into(), n.topic_arn.into());
    if let Some(subject) = n.subject {
        body.insert("Subject".into(), subject.into());
    }
    body.insert("Message".into(), n.message.into());
    body.insert("Timestamp".into(), n.timestamp.iso8601().into());
    if let Some((version, signature, cert_url)) = n.signature {
        body.insert("SignatureVersion".into(), version.into());
        body.insert("Signature".into(), signature.into());
        body.insert("SigningCertURL".into(), cert_url.into());
    }
    body.insert("UnsubscribeURL".into(), n.unsubscribe_url.into());
    if !n.attributes.is_empty() {
        let attrs: Map<String, Value> = n
            .attributes
            .iter()
            .map(|(name, value)| {
                let text = match &value.data {
                    AttributeData::String(s) => s.clone(),
                    AttributeData::Binary(b) => STANDARD.encode(b),
                };
                (
                    name.clone(),
                    serde_json::json!({"Type": value.data_type, "Value": text}),
                )
            })
            .collect();
        body.insert("MessageAttributes".into(), Value::Object(attrs));
    }
    if n.replayed {
        body.insert("Replayed".into(), Value::Bool(true));
    }
    Value::Object(body).to_string()
}

/// A SubscriptionConfirmation or UnsubscribeConfirmation message.
pub struct Confirmation<'a> {
    /// `SubscriptionConfirmation` or `UnsubscribeConfirmation`.
    pub kind: &'a str,
    pub message_id: &'a str,
    pub token: &'a str,
    pub topic_arn: &'a str,
    pub message: &'a str,
    pub subscribe_url: &'a str,
    pub timestamp: Timestamp,
    pub signature: Option<(&'a str, &'a str, &'a str)>,
}

/// The confirmation body, fields in AWS's order.
pub fn confirmation(c: &Confirmation) -> String {
    let mut body = Map::new();
    body.insert("Type".into(), c.kind.into());
    body.insert("MessageId".into(), c.message_id.into());
    body.insert("Token".into(), c.token.into());
    body.insert("TopicArn".into(), c.topic_arn.into());
    body.insert("Message".into(), c.message.into());
    body.insert("SubscribeURL".into(), c.subscribe_url.into());
    body.insert("Timestamp".into(), c.timestamp.iso8601().into());
    if let Some((version, signature, cert_url)) = c.signature {
        body.insert("SignatureVersion".into(), version.into());
        body.insert("Signature".into(), signature.into());
        body.insert("SigningCertURL".into(), cert_url.into());
    }
    Value::Object(body).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::message::AttributeValue;

    #[test]
    fn fifo_envelope_field_order() {
        let attrs = MessageAttributes::new(vec![(
            "amount".into(),
            AttributeValue {
                data_type: "Number".into(),
                data: AttributeData::String("99.5".into()),
            },
        )]);
        let body = notification(&Notification {
            message_id: "m",
            sequence_number: Some(10_000_000_000_000_003_000),
            topic_arn: "arn:aws:sns:us-east-1:000000000000:t.fifo",
            subject: None,
            message: "Test",
            timestamp: Timestamp(0),
            unsubscribe_url: "http://h/?Action=Unsubscribe&SubscriptionArn=s",
            attributes: &attrs,
            replayed: false,
            signature: None,
        });
        assert_eq!(
            body,
            r#"{"Type":"Notification","MessageId":"m","SequenceNumber":"10000000000000003000","TopicArn":"arn:aws:sns:us-east-1:000000000000:t.fifo","Message":"Test","Timestamp":"1970-01-01T00:00:00.000Z","UnsubscribeURL":"http://h/?Action=Unsubscribe&SubscriptionArn=s","MessageAttributes":{"amount":{"Type":"Number","Value":"99.5"}}}"#
        );
    }

    #[test]
    fn confirmation_field_order() {
        let body = confirmation(&Confirmation {
            kind: "SubscriptionConfirmation",
            message_id: "m",
            token: "ab",
            topic_arn: "arn:t",
            message: "hi\nthere",
            subscribe_url: "http://h/?Action=ConfirmSubscription&TopicArn=arn:t&Token=ab",
            timestamp: Timestamp(0),
            signature: Some(("1", "c2ln", "http://h/cert.pem")),
        });
        assert_eq!(
            body,
            r#"{"Type":"SubscriptionConfirmation","MessageId":"m","Token":"ab","TopicArn":"arn:t","Message":"hi\nthere","SubscribeURL":"http://h/?Action=ConfirmSubscription&TopicArn=arn:t&Token=ab","Timestamp":"1970-01-01T00:00:00.000Z","SignatureVersion":"1","Signature":"c2ln","SigningCertURL":"http://h/cert.pem"}"#
        );
    }
}
