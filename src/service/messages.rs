//! Message actions: send, receive (with long polling), delete, change visibility, and batches.
//! What the request must hold is checked here; the backend applies it.

use std::sync::Arc;

use super::batch::{check_entries, failure};
use super::render::{decode_attributes, decode_trace_header, message_wire};
use super::{RequestContext, Service};
use crate::engine::body::Body;
use crate::engine::queue::{ReceiveRequest, SendReceipt, SendRequest};
use crate::protocol::sqs::*;
use crate::protocol::{ApiError, ErrorCode, SqsAction};

/// Batch requests may carry at most this many bytes of bodies and attributes in total.
const MAX_BATCH_BYTES: usize = 1_048_576;

/// What a receipt-handle batch does to each entry.
#[derive(Clone, Copy)]
enum HandleAction {
    Delete,
    ChangeVisibility,
}

fn sent<'a>(id: Option<std::borrow::Cow<'a, str>>, receipt: SendReceipt) -> SendMessageOutput<'a> {
    SendMessageOutput {
        id,
        message_id: receipt.message_id,
        md5_of_message_body: receipt.body_md5,
        md5_of_message_attributes: receipt.attributes_md5.as_deref().map(String::from),
        md5_of_message_system_attributes: receipt.trace_header_md5,
        sequence_number: receipt.sequence_number,
    }
}

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
            trace_header: decode_trace_header(entry.message_system_attributes)?
                .map(Arc::from)
                .or_else(|| ctx.trace_header.clone()),
            group_id: entry.message_group_id.as_deref().map(Arc::from),
            dedup_id: entry.message_deduplication_id.as_deref().map(Arc::from),
            delay_seconds: entry.delay_seconds,
            sender_id: ctx.sender_id.clone(),
            bypass_dedup: false,
        })
    }

    pub(super) async fn send_message(
        &self,
        mut input: SendMessageInput<'_>,
        ctx: &RequestContext,
    ) -> Result<SendMessageOutput<'static>, ApiError> {
        let url = input.queue_url.take();
        let queue = self
            .queue_key(ctx, url.as_deref(), SqsAction::SendMessage)
            .await?;
        let queue = &*queue;
        self.backend.check_led_here(queue)?;
        let request = self.send_request(input, ctx)?;
        let receipt = self.backend.send(queue, request).await?;
        self.pace.take_turns(queue, 1).await;
        Ok(sent(None, receipt))
    }

    pub(super) async fn send_message_batch<'a>(
        &self,
        input: SendMessageBatchInput<'a>,
        ctx: &RequestContext,
    ) -> Result<BatchOutput<SendMessageOutput<'a>>, ApiError> {
        let queue = self
            .queue_key(ctx, input.queue_url.as_deref(), SqsAction::SendMessageBatch)
            .await?;
        let queue = &*queue;
        self.backend.check_led_here(queue)?;
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
        let results = self.backend.send_batch(queue, requests).await?;
        let kept = results.iter().filter(|r| r.is_ok()).count();
        self.pace.take_turns(queue, kept).await;
        let mut successful = Vec::with_capacity(results.len());
        for (id, result) in ids.into_iter().zip(results) {
            match result {
                Ok(receipt) => successful.push(sent(Some(id), receipt)),
                Err(error) => failed.push(failure(&id, error.into())),
            }
        }
        Ok(BatchOutput { successful, failed })
    }

    /// ReceiveMessage; a wait time makes it a long poll, which the backend serves.
    pub(super) async fn receive_message(
        &self,
        input: ReceiveMessageInput<'_>,
        ctx: &RequestContext,
    ) -> Result<ReceiveMessageOutput, ApiError> {
        let queue = self
            .queue_key(ctx, input.queue_url.as_deref(), SqsAction::ReceiveMessage)
            .await?;
        let queue = &*queue;
        let wait_seconds = match input.wait_time_seconds {
            Some(w) if !(0..=20).contains(&w) => {
                return Err(ApiError::invalid(format!(
                    "Value {w} for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided."
                )))
            }
            Some(w) => Some(w as u64),
            None => None,
        };
        let request = ReceiveRequest {
            max_messages: input.max_number_of_messages,
            visibility_timeout: input.visibility_timeout,
            attempt_id: input.receive_request_attempt_id.clone(),
        };
        let asked = usize::try_from(input.max_number_of_messages.unwrap_or(1)).unwrap_or(1);
        let received = self.backend.receive(queue, request, wait_seconds).await?;
        // A receive retried with its attempt id gets the same messages again, not new ones.
        let firsts = (received.iter())
            .filter(|r| r.message.receive_count == 1 && !r.replayed)
            .count();
        self.pace.received(queue, asked, received.len(), firsts);
        // Newer SDKs send MessageSystemAttributeNames; it wins over the deprecated AttributeNames.
        let system_names = input
            .message_system_attribute_names
            .or(input.attribute_names)
            .unwrap_or_default();
        let messages = received
            .into_iter()
            .map(|r| message_wire(r, &system_names, &input.message_attribute_names))
            .collect();
        Ok(ReceiveMessageOutput { messages })
    }

    /// The receipt-handle batches: whole-request checks, then each entry on its own.
    async fn handle_batch<'a>(
        &self,
        input: HandleBatchInput<'a>,
        action: HandleAction,
        ctx: &RequestContext,
    ) -> Result<BatchOutput<IdOnly<'a>>, ApiError> {
        let (entry_name, sqs_action) = match action {
            HandleAction::Delete => (
                "DeleteMessageBatchRequestEntry",
                SqsAction::DeleteMessageBatch,
            ),
            HandleAction::ChangeVisibility => (
                "ChangeMessageVisibilityBatchRequestEntry",
                SqsAction::ChangeMessageVisibilityBatch,
            ),
        };
        let queue = self
            .queue_key(ctx, input.queue_url.as_deref(), sqs_action)
            .await?;
        let queue = &*queue;
        let entries = input.entries.unwrap_or_default();
        check_entries(entry_name, entries.iter().map(|e| e.id.as_deref()))?;
        let mut output = BatchOutput {
            successful: Vec::new(),
            failed: Vec::new(),
        };
        let mut ids = Vec::with_capacity(entries.len());
        let mut changes = Vec::with_capacity(entries.len());
        for e in &entries {
            let id = e.id.clone().expect("checked above");
            let checked = e
                .receipt_handle
                .as_deref()
                .ok_or_else(|| ApiError::missing("ReceiptHandle"))
                .and_then(|handle| match action {
                    HandleAction::Delete => Ok((handle, 0)),
                    HandleAction::ChangeVisibility => e
                        .visibility_timeout
                        .map(|timeout| (handle, timeout))
                        .ok_or_else(|| ApiError::missing("VisibilityTimeout")),
                });
            match checked {
                Ok(change) => {
                    ids.push(id);
                    changes.push(change);
                }
                Err(error) => output.failed.push(failure(&id, error)),
            }
        }
        let results = match action {
            HandleAction::Delete => {
                let handles = changes.into_iter().map(|(handle, _)| handle).collect();
                self.backend.delete(queue, handles).await?
            }
            HandleAction::ChangeVisibility => {
                self.backend.change_visibility(queue, changes).await?
            }
        };
        for (id, result) in ids.into_iter().zip(results) {
            match result {
                Ok(()) => output.successful.push(IdOnly { id }),
                Err(error) => output.failed.push(failure(&id, error.into())),
            }
        }
        Ok(output)
    }

    pub(super) async fn delete_message(
        &self,
        input: DeleteMessageInput<'_>,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let queue = self
            .queue_key(ctx, input.queue_url.as_deref(), SqsAction::DeleteMessage)
            .await?;
        let queue = &*queue;
        let handle = input
            .receipt_handle
            .as_deref()
            .ok_or_else(|| ApiError::missing("ReceiptHandle"))?;
        let mut results = self.backend.delete(queue, vec![handle]).await?;
        results.pop().expect("one answer per handle")?;
        Ok(Empty {})
    }

    pub(super) async fn delete_message_batch<'a>(
        &self,
        input: HandleBatchInput<'a>,
        ctx: &RequestContext,
    ) -> Result<BatchOutput<IdOnly<'a>>, ApiError> {
        self.handle_batch(input, HandleAction::Delete, ctx).await
    }

    pub(super) async fn change_message_visibility(
        &self,
        input: ChangeMessageVisibilityInput<'_>,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let queue = self
            .queue_key(
                ctx,
                input.queue_url.as_deref(),
                SqsAction::ChangeMessageVisibility,
            )
            .await?;
        let queue = &*queue;
        let handle = input
            .receipt_handle
            .as_deref()
            .ok_or_else(|| ApiError::missing("ReceiptHandle"))?;
        let timeout = input
            .visibility_timeout
            .ok_or_else(|| ApiError::missing("VisibilityTimeout"))?;
        let mut results = self
            .backend
            .change_visibility(queue, vec![(handle, timeout)])
            .await?;
        results.pop().expect("one answer per handle")?;
        Ok(Empty {})
    }

    pub(super) async fn change_message_visibility_batch<'a>(
        &self,
        input: HandleBatchInput<'a>,
        ctx: &RequestContext,
    ) -> Result<BatchOutput<IdOnly<'a>>, ApiError> {
        self.handle_batch(input, HandleAction::ChangeVisibility, ctx)
            .await
    }
}
