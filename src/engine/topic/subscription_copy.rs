//! One subscription's copy of a publish as a queue takes it: a fan-out's, a subscription
//! confirmation's or a failed webhook notification's on its way to a dead-letter queue.

use std::sync::Arc;

use crate::engine::body::Body;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::message::MessageAttributes;
use crate::engine::queue::SendRequest;

/// One subscription's copy of a publish, before a queue decides how much of it to keep.
pub struct SubscriptionCopy<'a> {
    pub body: Body,
    pub attributes: MessageAttributes,
    pub group_id: Option<&'a str>,
    pub dedup_id: Option<&'a str>,
    pub fifo_topic: bool,
    pub bypass_dedup: bool,
    pub trace_header: Option<Arc<str>>,
}

impl SubscriptionCopy<'_> {
    /// The send that puts this copy into a queue. FIFO queues get the group and dedup id; a
    /// standard queue gets the group only from a standard topic (fair queues), never from a
    /// FIFO topic.
    pub fn send_request(&self, fifo_queue: bool) -> EngineResult<SendRequest> {
        if fifo_queue && self.dedup_id.is_none() {
            // Only a standard topic could send this, and Subscribe refuses that pairing.
            return Err(EngineError::invalid(
                "a FIFO queue needs a deduplication id",
            ));
        }
        Ok(SendRequest {
            body: self.body.clone(),
            attributes: self.attributes.clone(),
            trace_header: self.trace_header.clone(),
            group_id: (fifo_queue || !self.fifo_topic)
                .then(|| self.group_id.map(Arc::from))
                .flatten(),
            dedup_id: fifo_queue.then(|| self.dedup_id.map(Arc::from)).flatten(),
            delay_seconds: None,
            sender_id: "sns.amazonaws.com".into(),
            bypass_dedup: self.bypass_dedup,
        })
    }
}
