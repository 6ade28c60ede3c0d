//! Webhooks: deliveries waiting in the outbox, and confirmation tokens.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::message::{attributes, live_attributes, Attributes};
use super::topic::DiskSubscription;
use crate::engine::topic::delivery_policy as live_policy;
use crate::engine::webhook::changes as live_changes;
use crate::engine::webhook::{Delivery as LiveDelivery, Kind as LiveKind, LanePolicy as LiveLane};
use crate::engine::Timestamp;

fn owned(s: Option<&str>) -> Option<String> {
    s.map(str::to_string)
}

#[derive(Clone, Copy, Serialize, Deserialize)]
pub enum DiskKind {
    Notification,
    SubscriptionConfirmation,
    UnsubscribeConfirmation,
}

#[derive(Clone, Copy, Serialize, Deserialize)]
pub enum DiskBackoff {
    Linear,
    Arithmetic,
    Geometric,
    Exponential,
}

#[derive(Clone, Copy, Serialize, Deserialize)]
pub struct DiskRetryPolicy {
    pub min_delay: u32,
    pub max_delay: u32,
    pub num_retries: u32,
    pub num_no_delay: u32,
    pub num_min_delay: u32,
    pub num_max_delay: u32,
    pub backoff: DiskBackoff,
}

impl From<&live_policy::RetryPolicy> for DiskRetryPolicy {
    fn from(r: &live_policy::RetryPolicy) -> Self {
        use live_policy::BackoffFunction as B;
        DiskRetryPolicy {
            min_delay: r.min_delay,
            max_delay: r.max_delay,
            num_retries: r.num_retries,
            num_no_delay: r.num_no_delay,
            num_min_delay: r.num_min_delay,
            num_max_delay: r.num_max_delay,
            backoff: match r.backoff {
                B::Linear => DiskBackoff::Linear,
                B::Arithmetic => DiskBackoff::Arithmetic,
                B::Geometric => DiskBackoff::Geometric,
                B::Exponential => DiskBackoff::Exponential,
            },
        }
    }
}

impl From<DiskRetryPolicy> for live_policy::RetryPolicy {
    fn from(r: DiskRetryPolicy) -> Self {
        use live_policy::BackoffFunction as B;
        live_policy::RetryPolicy {
            min_delay: r.min_delay,
            max_delay: r.max_delay,
            num_retries: r.num_retries,
            num_no_delay: r.num_no_delay,
            num_min_delay: r.num_min_delay,
            num_max_delay: r.num_max_delay,
            backoff: match r.backoff {
                DiskBackoff::Linear => B::Linear,
                DiskBackoff::Arithmetic => B::Arithmetic,
                DiskBackoff::Geometric => B::Geometric,
                DiskBackoff::Exponential => B::Exponential,
            },
        }
    }
}

/// One message for one endpoint, formatted once.
#[derive(Serialize, Deserialize)]
pub struct DiskDelivery<'a> {
    pub kind: DiskKind,
    pub subscription_arn: &'a str,
    pub topic_arn: &'a str,
    pub endpoint: &'a str,
    pub message_id: &'a str,
    pub body: &'a str,
    pub content_type: &'a str,
    pub raw: bool,
    pub group_id: Option<&'a str>,
    pub dedup_id: Option<&'a str>,
    pub sequence_number: Option<u128>,
    #[serde(borrow)]
    pub attributes: Attributes<'a>,
    pub fallback_envelope: Option<&'a str>,
    pub dead_letter_arn: Option<&'a str>,
    pub fifo_topic: bool,
    pub retry: DiskRetryPolicy,
}

impl<'a> From<&'a LiveDelivery> for DiskDelivery<'a> {
    fn from(d: &'a LiveDelivery) -> Self {
        DiskDelivery {
            kind: match d.kind {
                LiveKind::Notification => DiskKind::Notification,
                LiveKind::SubscriptionConfirmation => DiskKind::SubscriptionConfirmation,
                LiveKind::UnsubscribeConfirmation => DiskKind::UnsubscribeConfirmation,
            },
            subscription_arn: &d.subscription_arn,
            topic_arn: &d.topic_arn,
            endpoint: &d.endpoint,
            message_id: &d.message_id,
            body: &d.body,
            content_type: &d.content_type,
            raw: d.raw,
            group_id: d.group_id.as_deref(),
            dedup_id: d.dedup_id.as_deref(),
            sequence_number: d.sequence_number,
            attributes: attributes(&d.attributes),
            fallback_envelope: d.fallback_envelope.as_deref(),
            dead_letter_arn: d.dead_letter_arn.as_deref(),
            fifo_topic: d.fifo_topic,
            retry: (&d.retry).into(),
        }
    }
}

impl DiskDelivery<'_> {
    pub fn into_live(self) -> LiveDelivery {
        LiveDelivery {
            kind: match self.kind {
                DiskKind::Notification => LiveKind::Notification,
                DiskKind::SubscriptionConfirmation => LiveKind::SubscriptionConfirmation,
                DiskKind::UnsubscribeConfirmation => LiveKind::UnsubscribeConfirmation,
            },
            subscription_arn: self.subscription_arn.into(),
            topic_arn: self.topic_arn.into(),
            endpoint: self.endpoint.into(),
            message_id: self.message_id.into(),
            body: self.body.into(),
            content_type: self.content_type.into(),
            raw: self.raw,
            group_id: owned(self.group_id),
            dedup_id: owned(self.dedup_id),
            sequence_number: self.sequence_number,
            attributes: live_attributes(self.attributes),
            fallback_envelope: owned(self.fallback_envelope),
            dead_letter_arn: owned(self.dead_letter_arn),
            fifo_topic: self.fifo_topic,
            retry: self.retry.into(),
        }
    }
}

/// How a subscription's lane delivers.
#[derive(Clone, Copy, Serialize, Deserialize)]
pub struct DiskLanePolicy {
    pub ordered: bool,
    pub throttle: Option<u32>,
}

impl From<LiveLane> for DiskLanePolicy {
    fn from(l: LiveLane) -> Self {
        DiskLanePolicy {
            ordered: l.ordered,
            throttle: l.throttle,
        }
    }
}

impl From<DiskLanePolicy> for LiveLane {
    fn from(l: DiskLanePolicy) -> Self {
        LiveLane {
            ordered: l.ordered,
            throttle: l.throttle,
        }
    }
}

/// A queued delivery: (outbox id, delivery, lane policy).
#[derive(Serialize, Deserialize)]
pub struct Queued<'a> {
    pub id: u64,
    #[serde(borrow)]
    pub delivery: DiskDelivery<'a>,
    pub lane: DiskLanePolicy,
}

impl<'a> From<&'a (u64, Arc<LiveDelivery>, LiveLane)> for Queued<'a> {
    fn from((id, delivery, lane): &'a (u64, Arc<LiveDelivery>, LiveLane)) -> Self {
        Queued {
            id: *id,
            delivery: DiskDelivery::from(&**delivery),
            lane: (*lane).into(),
        }
    }
}

impl Queued<'_> {
    pub fn into_live(self) -> (u64, Arc<LiveDelivery>, LiveLane) {
        (
            self.id,
            Arc::new(self.delivery.into_live()),
            self.lane.into(),
        )
    }
}

// Built to be written at once (or read and turned into engine state), never kept: boxing the
// delivery would cost each queued one an allocation for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Serialize, Deserialize)]
pub enum DiskOutboxChange<'a> {
    Queued {
        id: u64,
        #[serde(borrow)]
        delivery: DiskDelivery<'a>,
        lane: DiskLanePolicy,
    },
    /// Delivered, or failed for good and dead-lettered or dropped.
    Done {
        id: u64,
    },
    SubscriptionRemoved {
        arn: &'a str,
    },
}

impl<'a> From<&'a live_changes::OutboxChange> for DiskOutboxChange<'a> {
    fn from(change: &'a live_changes::OutboxChange) -> Self {
        match change {
            live_changes::OutboxChange::Queued { id, delivery, lane } => DiskOutboxChange::Queued {
                id: *id,
                delivery: DiskDelivery::from(&**delivery),
                lane: (*lane).into(),
            },
            live_changes::OutboxChange::Done { id } => DiskOutboxChange::Done { id: *id },
            live_changes::OutboxChange::SubscriptionRemoved { arn } => {
                DiskOutboxChange::SubscriptionRemoved { arn }
            }
        }
    }
}

impl DiskOutboxChange<'_> {
    pub fn into_live(self) -> live_changes::OutboxChange {
        match self {
            DiskOutboxChange::Queued { id, delivery, lane } => live_changes::OutboxChange::Queued {
                id,
                delivery: Arc::new(delivery.into_live()),
                lane: lane.into(),
            },
            DiskOutboxChange::Done { id } => live_changes::OutboxChange::Done { id },
            DiskOutboxChange::SubscriptionRemoved { arn } => {
                live_changes::OutboxChange::SubscriptionRemoved { arn: arn.into() }
            }
        }
    }
}

#[derive(Serialize, Deserialize)]
pub enum DiskGrant<'a> {
    Confirm(&'a str),
    Restore(#[serde(borrow)] DiskSubscription<'a>),
}

/// A confirmation token.
#[derive(Serialize, Deserialize)]
pub struct Token<'a> {
    pub token: &'a str,
    pub expires: u64,
    #[serde(borrow)]
    pub grant: DiskGrant<'a>,
}

impl<'a> From<&'a live_changes::TokenRecord> for Token<'a> {
    fn from(t: &'a live_changes::TokenRecord) -> Self {
        Token {
            token: &t.token,
            expires: t.expires.0,
            grant: match &t.grant {
                live_changes::GrantImage::Confirm(arn) => DiskGrant::Confirm(arn),
                live_changes::GrantImage::Restore(sub) => DiskGrant::Restore(sub.into()),
            },
        }
    }
}

impl Token<'_> {
    pub fn into_live(self) -> live_changes::TokenRecord {
        live_changes::TokenRecord {
            token: self.token.into(),
            expires: Timestamp(self.expires),
            grant: match self.grant {
                DiskGrant::Confirm(arn) => live_changes::GrantImage::Confirm(arn.into()),
                DiskGrant::Restore(sub) => live_changes::GrantImage::Restore(sub.into_live()),
            },
        }
    }
}
