//! A publish as it reaches a topic, and what the topic decided for it.

use std::sync::Arc;

use crate::engine::message::MessageAttributes;

/// A message as published, after validation.
#[derive(Clone, Debug, Default)]
pub struct PublishRequest {
    pub message: String,
    pub subject: Option<String>,
    /// `MessageStructure=json`: `message` is a JSON object of per-protocol bodies.
    pub structured: bool,
    pub attributes: MessageAttributes,
    pub group_id: Option<String>,
    pub dedup_id: Option<String>,
    /// The request's `X-Amzn-Trace-Id`: the `AWSTraceHeader` of its SQS copies. Not archived,
    /// so a replay's copies carry none.
    pub trace_header: Option<Arc<str>>,
}

/// What the topic decided for one publish.
#[derive(Clone, Debug)]
pub struct Publication {
    pub message_id: Arc<str>,
    pub sequence_number: Option<u128>,
    /// The dedup id used (explicit or content-based), FIFO topics only.
    pub dedup_id: Option<String>,
    /// Deduplicated: nothing is delivered.
    pub duplicate: bool,
}
