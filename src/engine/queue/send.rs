//! A send checked against its queue's configuration, before anything is stored: the rules every
//! backend applies the same way (sizes, delays, FIFO group and deduplication ids).

use std::sync::Arc;

use super::config::{DedupScope, QueueConfig};
use crate::engine::body::{validate_body, Body};
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::message::{
    content_dedup_id, trace_header_md5, validate_attributes, validate_token, Md5Digest, Message,
    MessageAttributes, MessageId, NewMessage, SequenceNumber,
};
use crate::engine::time::Timestamp;

/// What a send carries once the protocol layer has decoded it.
#[derive(Clone, Debug, Default)]
pub struct SendRequest {
    pub body: Body,
    pub attributes: MessageAttributes,
    pub trace_header: Option<Arc<str>>,
    pub group_id: Option<Arc<str>>,
    pub dedup_id: Option<Arc<str>>,
    pub delay_seconds: Option<i64>,
    pub sender_id: Arc<str>,
    /// Engine-internal (SNS replays): store even if the dedup id was seen in the window.
    pub bypass_dedup: bool,
}

/// What SendMessage answers.
#[derive(Clone, Debug)]
pub struct SendReceipt {
    pub message_id: MessageId,
    pub body_md5: Md5Digest,
    pub attributes_md5: Option<Arc<str>>,
    pub trace_header_md5: Option<String>,
    pub sequence_number: Option<u128>,
    /// True when deduplication suppressed the message (the ids are the original's).
    pub duplicate: bool,
}

/// The sequence number of the message at `seq`: AWS's are 20 digits, so a queue's start at
/// `SequenceNumber::BASE` and a message's is that plus its position.
pub fn sequence_number(seq: u64) -> SequenceNumber {
    (SequenceNumber::BASE.get() + seq as u128).into()
}

/// A send that passed its checks and is ready to store.
#[derive(Clone)]
pub struct CheckedSend {
    pub message: Message,
    pub delay_seconds: u32,
    /// Store even if its deduplication id was seen in the window (SNS replays).
    pub bypass_dedup: bool,
}

/// Checks a send against the queue's rules and builds the message; stores nothing.
/// `in_batch`: one entry of SendMessageBatch (AWS words the size error differently there).
pub fn prepare(
    config: &QueueConfig,
    req: SendRequest,
    now: Timestamp,
    in_batch: bool,
) -> EngineResult<CheckedSend> {
    validate_body(&req.body)?;
    validate_attributes(&req.attributes)?;
    let size = req.body.len() + req.attributes.size();
    if size > config.maximum_message_size as usize {
        let verb = if in_batch {
            "cannot be validated"
        } else {
            "are invalid"
        };
        return Err(EngineError::invalid(format!(
            "One or more parameters {verb}. Reason: Message must be shorter than {} bytes.",
            config.maximum_message_size
        )));
    }
    let delay = match req.delay_seconds {
        None => config.delay_seconds,
        Some(d) if !(0..=900).contains(&d) => {
            return Err(EngineError::invalid(format!(
                "Value {d} for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900."
            )))
        }
        Some(d) if config.fifo && d > 0 => {
            return Err(EngineError::invalid(format!(
                "Value {d} for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type."
            )))
        }
        // A FIFO queue takes no timer of a message's own: 0 leaves the queue's delay. On a
        // standard queue a message's timer, 0 included, overrides the queue's.
        Some(0) if config.fifo => config.delay_seconds,
        Some(d) => d as u32,
    };
    if req.trace_header.as_deref().is_some_and(str::is_empty) {
        return Err(EngineError::invalid(
            "Message (system) attribute 'AWSTraceHeader' must contain a non-empty value of type 'String'.",
        ));
    }
    if let Some(group) = &req.group_id {
        validate_token("MessageGroupId", group)?;
    }
    let dedup_id = dedup_id(config, &req)?;
    Ok(CheckedSend {
        message: Message::new(NewMessage {
            attributes_md5: req.attributes.md5().map(Arc::from),
            body: req.body,
            attributes: req.attributes,
            trace_header: req.trace_header,
            sender_id: req.sender_id,
            sent_at: now,
            group_id: req.group_id,
            dedup_id,
        }),
        delay_seconds: delay,
        bypass_dedup: req.bypass_dedup,
    })
}

/// A FIFO send's deduplication id: given, or the body's SHA-256 with content-based
/// deduplication. Standard queues take none.
fn dedup_id(config: &QueueConfig, req: &SendRequest) -> EngineResult<Option<Arc<str>>> {
    if !config.fifo {
        return match &req.dedup_id {
            Some(id) => Err(EngineError::invalid(format!(
                "Value {id} for parameter MessageDeduplicationId is invalid. Reason: The request include parameter that is not valid for this queue type."
            ))),
            None => Ok(None),
        };
    }
    if req.group_id.is_none() {
        return Err(EngineError::missing("MessageGroupId"));
    }
    match &req.dedup_id {
        Some(id) => {
            validate_token("MessageDeduplicationId", id)?;
            Ok(Some(id.clone()))
        }
        None if config.content_based_dedup => Ok(Some(content_dedup_id(&req.body).into())),
        None => Err(EngineError::invalid(
            "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly",
        )),
    }
}

/// SendMessageBatch's FIFO rules, which fail the whole batch before anything is stored.
pub fn check_batch(config: &QueueConfig, entries: &[SendRequest]) -> EngineResult<()> {
    if !config.fifo {
        return Ok(());
    }
    if entries.iter().any(|e| e.group_id.is_none()) {
        return Err(EngineError::invalid(
            "The request must contain the parameter MessageGroupId.",
        ));
    }
    if !config.content_based_dedup && entries.iter().any(|e| e.dedup_id.is_none()) {
        return Err(EngineError::invalid(
            "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly",
        ));
    }
    Ok(())
}

/// The key a FIFO message is deduplicated under: its id, within its group when the queue
/// deduplicates by group.
pub fn dedup_key(scope: DedupScope, message: &Message) -> Arc<str> {
    let id = message
        .dedup_id
        .as_ref()
        .expect("FIFO messages have dedup ids");
    match scope {
        DedupScope::Queue => id.clone(),
        DedupScope::MessageGroup => {
            let group = message
                .group_id
                .as_deref()
                .expect("FIFO messages have groups");
            format!("{}\u{0}{id}", group).into()
        }
    }
}

/// What SendMessage answers for a stored message, or (`duplicate`) for a send deduplication
/// suppressed, with the original's id and sequence number.
pub fn receipt(
    message: &Message,
    original: Option<(super::super::message::MessageId, Option<SequenceNumber>)>,
) -> SendReceipt {
    let (message_id, sequence_number) = original.unwrap_or((message.id, message.sequence_number));
    SendReceipt {
        message_id,
        body_md5: message.body_md5,
        attributes_md5: message.attributes_md5().cloned(),
        trace_header_md5: message.trace_header().map(|t| trace_header_md5(t)),
        sequence_number: sequence_number.map(SequenceNumber::get),
        duplicate: original.is_some(),
    }
}
