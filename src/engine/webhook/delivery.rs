//! What an HTTP/S endpoint is sent, formatted once: confirmation messages and notifications,
//! and the copies a failed notification leaves in its subscription's dead-letter queue. Pure,
//! so what is sent depends on the message alone.

use std::sync::Arc;

use super::outbox::{Delivery, Kind, LanePolicy};
use crate::engine::body::Body;
use crate::engine::message::MessageAttributes;
use crate::engine::time::Timestamp;
use crate::engine::topic::delivery_policy::DEFAULT_CONTENT_TYPE;
use crate::engine::topic::envelope::{self, Confirmation};
use crate::engine::topic::signing::{self, MessageSigner};
use crate::engine::topic::subscription_copy::SubscriptionCopy;
use crate::engine::topic::{Subscription, Topic};

/// SQS takes at most this many message attributes; a raw copy with more cannot be dead-lettered raw.
const SQS_MAX_ATTRIBUTES: usize = 10;

/// One subscription's formatted copy of a notification.
pub struct NotificationCopy<'a> {
    pub message_id: &'a Arc<str>,
    pub body: String,
    pub attributes: &'a MessageAttributes,
    /// Builds the envelope, for a raw copy that a dead-letter queue would refuse raw.
    pub envelope: &'a dyn Fn() -> String,
    pub group_id: Option<&'a str>,
    pub dedup_id: Option<&'a str>,
    pub sequence_number: Option<u128>,
}

/// A notification's delivery to an HTTP/S subscription, and how its lane delivers (FIFO
/// topics in order per group, throttled as the delivery policy says).
pub fn notification_delivery(
    topic: &Topic,
    subscription: &Subscription,
    copy: NotificationCopy,
) -> (Delivery, LanePolicy) {
    let policy = topic.effective_policy(subscription);
    let raw = subscription.raw_delivery;
    let delivery = Delivery {
        kind: Kind::Notification,
        subscription_arn: subscription.arn.clone(),
        topic_arn: topic.arn.clone(),
        endpoint: subscription.endpoint.as_str().into(),
        message_id: copy.message_id.clone(),
        body: copy.body,
        content_type: policy.content_type().to_string(),
        raw,
        group_id: copy.group_id.map(String::from),
        dedup_id: copy.dedup_id.map(String::from),
        sequence_number: copy.sequence_number,
        attributes: if raw {
            copy.attributes.clone()
        } else {
            MessageAttributes::default()
        },
        fallback_envelope: (raw && copy.attributes.len() > SQS_MAX_ATTRIBUTES)
            .then(|| (copy.envelope)()),
        dead_letter_arn: subscription.dead_letter_arn().map(String::from),
        fifo_topic: topic.fifo,
        retry: policy.retry,
    };
    let lane = LanePolicy {
        ordered: topic.fifo,
        throttle: policy.throttle,
    };
    (delivery, lane)
}

/// Which confirmation message, with its token and the URL clients reach this server at.
pub struct ConfirmationFor<'a> {
    pub kind: Kind,
    pub token: &'a str,
    pub base_url: &'a str,
}

/// A SubscriptionConfirmation or UnsubscribeConfirmation for `subscription`, signed when a
/// signing key is at hand. Its SubscribeURL confirms (or restores) with the token.
pub fn confirmation_delivery(
    topic: &Topic,
    subscription: &Subscription,
    confirmation: ConfirmationFor,
    signer: Option<&MessageSigner>,
    now: Timestamp,
) -> Delivery {
    let ConfirmationFor {
        kind,
        token,
        base_url,
    } = confirmation;
    let message = match kind {
        Kind::UnsubscribeConfirmation => format!(
            "You have chosen to deactivate subscription {}.\nTo cancel this operation and restore the subscription, visit the SubscribeURL included in this message.",
            subscription.arn
        ),
        _ => format!(
            "You have chosen to subscribe to the topic {}.\nTo confirm the subscription, visit the SubscribeURL included in this message.",
            topic.arn
        ),
    };
    let message_id = uuid::Uuid::new_v4().to_string();
    let subscribe_url = format!(
        "{base_url}/?Action=ConfirmSubscription&TopicArn={}&Token={token}",
        topic.arn
    );
    let timestamp = now.iso8601();
    let signed = signer.map(|signer| {
        let version = topic.signature_version().to_string();
        let text = signing::confirmation_string_to_sign(
            kind.wire_name(),
            &message,
            &message_id,
            &subscribe_url,
            &timestamp,
            token,
            &topic.arn,
        );
        let signature = signer.sign(&version, &text);
        (
            version,
            signature,
            format!("{base_url}/{}", signer.certificate_file),
        )
    });
    let body = envelope::confirmation(&Confirmation {
        kind: kind.wire_name(),
        message_id: &message_id,
        token,
        topic_arn: &topic.arn,
        message: &message,
        subscribe_url: &subscribe_url,
        timestamp: now,
        signature: signed
            .as_ref()
            .map(|(v, s, u)| (v.as_str(), s.as_str(), u.as_str())),
    });
    Delivery {
        kind,
        subscription_arn: subscription.arn.clone(),
        topic_arn: topic.arn.clone(),
        endpoint: subscription.endpoint.as_str().into(),
        message_id: message_id.into(),
        body,
        content_type: DEFAULT_CONTENT_TYPE.into(),
        raw: false,
        group_id: None,
        dedup_id: None,
        sequence_number: None,
        attributes: MessageAttributes::default(),
        fallback_envelope: None,
        dead_letter_arn: None,
        fifo_topic: topic.fifo,
        retry: topic.effective_policy(subscription).retry,
    }
}

impl Delivery {
    /// A SubscriptionConfirmation as the message an SQS queue of another account is sent: the
    /// document is the body (SNS Developer Guide, "Sending Amazon SNS messages to an Amazon SQS
    /// queue in a different account"). A FIFO queue gets it as a group of its own, deduplicated
    /// by its message id (Orderly's choice: what AWS does there is not recorded).
    pub fn queue_confirmation_copy(&self) -> SubscriptionCopy<'_> {
        SubscriptionCopy {
            body: Body::new(self.body.as_str()),
            attributes: MessageAttributes::default(),
            group_id: Some(&self.message_id),
            dedup_id: Some(&self.message_id),
            fifo_topic: true,
            bypass_dedup: false,
            trace_header: None,
        }
    }

    /// What a failed notification leaves in its subscription's dead-letter queue: the payload
    /// that would have been POSTed (the envelope, or the raw body with its attributes as SQS
    /// message attributes), and for a raw copy with more attributes than SQS takes, the
    /// envelope to store if the queue refuses the first.
    pub fn dead_letter_copies(&self) -> (SubscriptionCopy<'_>, Option<SubscriptionCopy<'_>>) {
        let copy = |body: &str, attributes: MessageAttributes| SubscriptionCopy {
            body: Body::new(body),
            attributes,
            group_id: self.group_id.as_deref(),
            dedup_id: self.dedup_id.as_deref(),
            fifo_topic: self.fifo_topic,
            bypass_dedup: false,
            // The outbox keeps no trace header: a webhook's dead-lettered copy carries none.
            trace_header: None,
        };
        let raw = copy(&self.body, self.attributes.clone());
        let enveloped = self
            .fallback_envelope
            .as_deref()
            .map(|envelope| copy(envelope, MessageAttributes::default()));
        (raw, enveloped)
    }
}
