//! What one endpoint of a captured protocol would have received (`captured`).

use std::sync::Arc;

use super::SubscriptionProtocol;
use crate::engine::message::MessageAttributes;
use crate::engine::time::Timestamp;

/// What one endpoint would have received.
#[derive(Clone, Debug)]
pub struct CapturedMessage {
    pub protocol: SubscriptionProtocol,
    /// The address, number or ARN it was for.
    pub endpoint: Arc<str>,
    /// `None` for a Publish straight to a phone number.
    pub subscription_arn: Option<Arc<str>>,
    pub topic_arn: Option<Arc<str>>,
    pub message_id: Arc<str>,
    /// `Notification`, or `SubscriptionConfirmation` for an email endpoint's confirmation.
    pub kind: &'static str,
    pub subject: Option<String>,
    /// What the endpoint gets: text, the envelope or Lambda's event.
    pub body: String,
    /// The message's attributes (not delivered with a json-structured message).
    pub attributes: MessageAttributes,
    /// `json` when the publish's message was json-structured.
    pub structure: Option<&'static str>,
    pub at: Timestamp,
}
