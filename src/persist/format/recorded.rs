//! What a recorded protocol's endpoint would have received (`engine::topic::recorded`), as
//! PostgreSQL keeps it for every node to list.

use serde::{Deserialize, Serialize};

use super::message::{attributes, live_attributes, Attributes};
use crate::engine::topic::recorded::RecordedMessage;
use crate::engine::Timestamp;

#[derive(Serialize, Deserialize)]
pub struct Recorded<'a> {
    protocol: &'a str,
    endpoint: &'a str,
    subscription_arn: Option<&'a str>,
    topic_arn: Option<&'a str>,
    message_id: &'a str,
    /// A SubscriptionConfirmation (else a Notification).
    confirmation: bool,
    subject: Option<&'a str>,
    body: &'a str,
    #[serde(borrow)]
    attributes: Attributes<'a>,
    /// The publish's message was json-structured.
    json_structure: bool,
    at: u64,
}

impl<'a> From<&'a RecordedMessage> for Recorded<'a> {
    fn from(m: &'a RecordedMessage) -> Self {
        Recorded {
            protocol: &m.protocol,
            endpoint: &m.endpoint,
            subscription_arn: m.subscription_arn.as_deref(),
            topic_arn: m.topic_arn.as_deref(),
            message_id: &m.message_id,
            confirmation: m.kind == "SubscriptionConfirmation",
            subject: m.subject.as_deref(),
            body: &m.body,
            attributes: attributes(&m.attributes),
            json_structure: m.structure.is_some(),
            at: m.at.0,
        }
    }
}

impl Recorded<'_> {
    pub fn into_live(self) -> RecordedMessage {
        RecordedMessage {
            protocol: self.protocol.into(),
            endpoint: self.endpoint.into(),
            subscription_arn: self.subscription_arn.map(Into::into),
            topic_arn: self.topic_arn.map(Into::into),
            message_id: self.message_id.into(),
            kind: if self.confirmation {
                "SubscriptionConfirmation"
            } else {
                "Notification"
            },
            subject: self.subject.map(str::to_string),
            body: self.body.to_string(),
            attributes: live_attributes(self.attributes),
            structure: self.json_structure.then_some("json"),
            at: Timestamp(self.at),
        }
    }
}
