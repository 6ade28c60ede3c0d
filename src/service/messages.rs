//! Message actions: send, receive (with long polling), delete, change visibility, and batches.

use std::sync::Arc;

use super::batch::{check_entries, failure};
use super::render::{decode_attributes, decode_trace_header, message_wire};
use super::{Entry, RequestContext, Service};
use crate::engine::body::Body;
use crate::engine::queue::{Queue, ReceiveRequest, SendRequest};
use crate::engine::Timestamp;
use crate::protocol::sqs::*;
use crate::protocol::{ApiError, ErrorCode};

/// Batch requests may carry at most this many bytes of bodies and attributes in total.
const MAX_BATCH_BYTES: usize = 1_048_576;

impl Service {
    /// The engine's request. The body's MD5 is computed here, before any queue lock is taken.
    fn send_request(
        &self,
        entry: SendEntry<'_>,
        ctx: &RequestContext,
    ) -> Result<SendRequest, ApiError> {
        Ok(SendRequest {
            body: Body::new(entry.message_body.as_deref().unwrap_or_default()),
            attributes: decode_attributes(entry.message_attributes)?,
            trace_header: decode_trace_header(entry.message_system_attributes)?.map(Arc::from),
            group_id: entry.message_group_id.as_deref().map(Arc::from),
            dedup_id: entry.message_deduplication_id.as_deref().map(Arc::from),
            delay_seconds: entry.delay_seconds,
            sender_id: ctx.sender_id.clone(),
            bypass_dedup: false,
        })
    }

    pub(super) fn send_message(
        &self,
        input: SendMessageInput<'_>,
        ctx: &RequestContext,
    ) -> Result<SendMessageOutput<'static>, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        let request = self.send_request(input, ctx)?;
        let receipt = self.with_queue(&entry, |queue, now| queue.send(request, now))?;
        Self::wake(&entry);
        Ok(SendMessageOutput {
            id: None,
            message_id: receipt.message_id,
            md5_of_message_body: receipt.body_md5,
            md5_of_message_attributes: receipt.attributes_md5.as_deref().map(String::from),
            md5_of_message_system_attributes: receipt.trace_header_md5,
            sequence_number: receipt.sequence_number,
        })
    }

    pub(super) fn send_message_batch<'a>(
        &self,
        input: SendMessageBatchInput<'a>,
        ctx: &RequestContext,
    ) -> Result<BatchOutput<SendMessageOutput<'a>>, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        let entries = input.entries.unwrap_or_default();
        check_entries(
            "SendMessageBatchRequestEntry",
            entries.iter().map(|e| e.id.as_deref()),
        )?;
        let mut ids = Vec::with_capacity(entries.len());
        let mut failed = Vec::new();
        let mut requests = Vec::with_capacity(entries.len());
        let mut total = 0;
        for mut e in entries {
            let id = e.id.take().expect("checked above");
            match self.send_request(e, ctx) {
                Ok(request) => {
                    total += request.body.len() + request.attributes.size();
                    ids.push(id);
                    requests.push(request);
                }
                Err(error) => failed.push(failure(&id, error)),
            }
        }
        if total > MAX_BATCH_BYTES {
            return Err(ApiError::new(
                ErrorCode::BatchRequestTooLong,
                format!("Batch requests cannot be longer than {MAX_BATCH_BYTES} bytes. You have sent {total} bytes."),
            ));
        }
        let results = self.with_queue(&entry, |queue, now| queue.send_batch(requests, now))?;
        let mut successful = Vec::with_capacity(results.len());
        for (id, result) in ids.into_iter().zip(results) {
            match result {
                Ok(receipt) => successful.push(SendMessageOutput {
                    id: Some(id),
                    message_id: receipt.message_id,
                    md5_of_message_body: receipt.body_md5,
                    md5_of_message_attributes: receipt.attributes_md5.as_deref().map(String::from),
                    md5_of_message_system_attributes: receipt.trace_header_md5,
                    sequence_number: receipt.sequence_number,
                }),
                Err(error) => failed.push(failure(&id, error.into())),
            }
        }
        if !successful.is_empty() {
            Self::wake(&entry);
        }
        Ok(BatchOutput { successful, failed })
    }

    /// ReceiveMessage. With a wait time it parks on the queue's notifier (holding no lock) until
    /// a message becomes receivable, a deadline inside the queue falls due, or time runs out.
    pub(super) async fn receive_message(
        &self,
        input: ReceiveMessageInput<'_>,
    ) -> Result<ReceiveMessageOutput, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        let wait_seconds = match input.wait_time_seconds {
            Some(w) if !(0..=20).contains(&w) => {
                return Err(ApiError::invalid(format!(
                    "Value {w} for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided."
                )))
            }
            Some(w) => w as u64,
            None => entry.lock().config().receive_wait_seconds as u64,
        };
        let request = ReceiveRequest {
            max_messages: input.max_number_of_messages,
            visibility_timeout: input.visibility_timeout,
            attempt_id: input.receive_request_attempt_id.clone(),
        };
        // Newer SDKs send MessageSystemAttributeNames; it wins over the deprecated AttributeNames.
        let system_names = input
            .message_system_attribute_names
            .or(input.attribute_names)
            .unwrap_or_default();
        let deadline = self.clock.now().plus_seconds(wait_seconds);
        loop {
            let notified = entry.waiters.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = self.clock.now();
            let (outcome, dead_letter_queue) = self.engine.receive(&entry, &request, now)?;
            if let Some(dlq) = dead_letter_queue {
                Self::wake(&dlq);
            }
            let gone = self
                .engine
                .queue(&entry.name)
                .map_or(true, |current| !std::sync::Arc::ptr_eq(&current, &entry));
            if !outcome.received.is_empty() || now >= deadline || gone {
                if !outcome.received.is_empty() && entry.lock().has_receivable() {
                    Self::wake(&entry);
                }
                let messages = outcome
                    .received
                    .into_iter()
                    .map(|r| message_wire(r, &system_names, &input.message_attribute_names))
                    .collect();
                return Ok(ReceiveMessageOutput { messages });
            }
            let wake_at = entry
                .lock()
                .next_deadline()
                .map_or(deadline, |d| d.min(deadline));
            tokio::select! {
                _ = notified => {}
                _ = self.clock.sleep_until(wake_at.max(now.plus_millis(1))) => {}
            }
        }
    }

    /// Runs `f` on the queue under its lock, after applying the deadlines due by now.
    fn with_queue<T>(&self, entry: &Entry, f: impl FnOnce(&mut Queue, Timestamp) -> T) -> T {
        let mut queue = entry.lock();
        let now = self.clock.now();
        queue.tick(now);
        f(&mut queue, now)
    }

    /// The receipt-handle batches: whole-request checks, then each entry on its own.
    fn handle_batch<'a>(
        &self,
        input: HandleBatchInput<'a>,
        entry_name: &str,
        mut apply: impl FnMut(&mut Queue, &HandleEntry, Timestamp) -> Result<(), ApiError>,
    ) -> Result<BatchOutput<IdOnly<'a>>, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        let entries = input.entries.unwrap_or_default();
        check_entries(entry_name, entries.iter().map(|e| e.id.as_deref()))?;
        let mut output = BatchOutput {
            successful: Vec::new(),
            failed: Vec::new(),
        };
        self.with_queue(&entry, |queue, now| {
            for e in entries {
                let id = e.id.clone().expect("checked above");
                match apply(queue, &e, now) {
                    Ok(()) => output.successful.push(IdOnly { id }),
                    Err(error) => output.failed.push(failure(&id, error)),
                }
            }
        });
        // A delete or visibility change may have unlocked a group or made messages visible.
        Self::wake(&entry);
        Ok(output)
    }

    pub(super) fn delete_message(
        &self,
        input: DeleteMessageInput<'_>,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        let handle = input
            .receipt_handle
            .ok_or_else(|| ApiError::missing("ReceiptHandle"))?;
        if self.with_queue(&entry, |queue, now| queue.delete(&handle, now))? {
            // Deleting a FIFO group's head unlocks the group.
            Self::wake(&entry);
        }
        Ok(Empty {})
    }

    pub(super) fn delete_message_batch<'a>(
        &self,
        input: HandleBatchInput<'a>,
        _ctx: &RequestContext,
    ) -> Result<BatchOutput<IdOnly<'a>>, ApiError> {
        self.handle_batch(input, "DeleteMessageBatchRequestEntry", |queue, e, now| {
            let handle = e
                .receipt_handle
                .as_deref()
                .ok_or_else(|| ApiError::missing("ReceiptHandle"))?;
            queue.delete(handle, now)?;
            Ok(())
        })
    }

    pub(super) fn change_message_visibility(
        &self,
        input: ChangeMessageVisibilityInput<'_>,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        let handle = input
            .receipt_handle
            .ok_or_else(|| ApiError::missing("ReceiptHandle"))?;
        let timeout = input
            .visibility_timeout
            .ok_or_else(|| ApiError::missing("VisibilityTimeout"))?;
        self.with_queue(&entry, |queue, now| {
            queue.change_visibility(&handle, timeout, now)
        })?;
        Self::wake(&entry);
        Ok(Empty {})
    }

    pub(super) fn change_message_visibility_batch<'a>(
        &self,
        input: HandleBatchInput<'a>,
        _ctx: &RequestContext,
    ) -> Result<BatchOutput<IdOnly<'a>>, ApiError> {
        self.handle_batch(
            input,
            "ChangeMessageVisibilityBatchRequestEntry",
            |queue, e, now| {
                let handle = e
                    .receipt_handle
                    .as_deref()
                    .ok_or_else(|| ApiError::missing("ReceiptHandle"))?;
                let timeout = e
                    .visibility_timeout
                    .ok_or_else(|| ApiError::missing("VisibilityTimeout"))?;
                queue.change_visibility(handle, timeout, now)?;
                Ok(())
            },
        )
    }
}
