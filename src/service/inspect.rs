//! The inspection API's answers (`GET /_orderly/queues`, `.../messages`) and LocalStack's
//! developer endpoint (`/_aws/sqs/messages`): what is stored, read through the backend without
//! changing anything.

use serde_json::{json, Value};

use super::render::{encode_attributes, message_wire};
use super::Service;
use crate::engine::queue::inspect::{Peeked, StateFilter};
use crate::engine::queue::{Received, State};
use crate::engine::Timestamp;
use crate::protocol::sqs::ReceiveMessageOutput;
use crate::protocol::ApiError;

/// Peeked messages carry this instead of a receipt handle: nothing was received, so nothing can
/// be deleted with it (LocalStack's developer endpoint answers the same text).
pub const PEEK_RECEIPT_HANDLE: &str = "SQS/BACKDOOR/ACCESS";

/// Where clients reach the server, for the URLs an answer names.
pub struct Origin<'a> {
    pub scheme: &'a str,
    pub host: &'a str,
}

impl Service {
    /// Every queue with its counts, FIFO groups and the age of its oldest message.
    pub async fn queue_overviews(&self, origin: &Origin<'_>) -> Result<Value, ApiError> {
        let now = self.clock.now();
        let queues: Vec<Value> = self
            .backend
            .queue_overviews()
            .await?
            .into_iter()
            .map(|q| {
                json!({
                    "name": &*q.name,
                    "url": self.url_of_queue(origin.scheme, origin.host, &q.name),
                    "arn": &*q.arn,
                    "shard": q.shard,
                    "fifo": q.fifo,
                    "visible": q.counts.visible,
                    "inFlight": q.counts.in_flight,
                    "delayed": q.counts.delayed,
                    "groups": q.fifo.then_some(q.groups),
                    "lockedGroups": q.fifo.then_some(q.locked_groups),
                    "oldestMessageAgeSeconds": q.oldest_enqueued_at.map(|at| now.millis_since(at) / 1000),
                    "deadLetterQueue": q.dead_letter_target_arn.as_deref()
                        .and_then(|arn| arn.rsplit(':').next()),
                })
            })
            .collect();
        Ok(json!({ "queues": queues }))
    }

    /// Up to `limit` of a queue's messages in the states `filter` admits, oldest first.
    pub async fn peek_messages(
        &self,
        queue: &str,
        filter: StateFilter,
        limit: usize,
    ) -> Result<Value, ApiError> {
        let peek = self.backend.peek_messages(queue, filter, limit).await?;
        let messages: Vec<Value> = peek.messages.iter().map(peeked_json).collect();
        Ok(json!({ "queue": queue, "messages": messages, "truncated": peek.truncated }))
    }

    /// Up to `limit` of a FIFO queue's groups: depth, in flight, locked and blocked.
    pub async fn queue_groups(&self, queue: &str, limit: usize) -> Result<Value, ApiError> {
        let groups: Vec<Value> = self
            .backend
            .queue_groups(queue, limit)
            .await?
            .iter()
            .map(|g| {
                json!({
                    "group": &*g.group,
                    "messages": g.messages,
                    "inFlight": g.in_flight,
                    "locked": g.in_flight > 0,
                    // Messages waiting behind the one in flight.
                    "blocked": if g.in_flight > 0 { g.messages - g.in_flight } else { 0 },
                })
            })
            .collect();
        Ok(json!({ "queue": queue, "groups": groups }))
    }

    /// Every subscription with its settings and what became of its last messages.
    pub async fn subscription_activity(&self) -> Result<Value, ApiError> {
        let mut subscriptions = Vec::new();
        // Each queue's policy read once, wherever its shard is led.
        let mut queues = std::collections::HashMap::new();
        for activity in self.backend.subscription_activity().await?.iter() {
            let s = &activity.subscription;
            let recent: Vec<Value> = activity
                .recent
                .iter()
                .map(|note| {
                    json!({
                        "messageId": &*note.message_id,
                        "at": rfc3339(note.at),
                        "fate": note.fate.name(),
                    })
                })
                .collect();
            let aws_would_refuse = match s.protocol.name() {
                "sqs" => {
                    if !queues.contains_key(&s.endpoint) {
                        let access = self.queue_policy(&s.endpoint).await;
                        queues.insert(s.endpoint.clone(), access);
                    }
                    (queues[&s.endpoint].as_ref())
                        .and_then(|q| q.sns_would_refuse(&activity.topic_arn))
                }
                _ => None,
            };
            subscriptions.push(json!({
                "topicArn": &*activity.topic_arn,
                "subscriptionArn": &*s.arn,
                "protocol": s.protocol.name(),
                "endpoint": s.endpoint,
                "rawMessageDelivery": s.raw_delivery,
                "filterPolicy": s.attributes.get("FilterPolicy"),
                "filterPolicyScope": match s.filter_scope {
                    crate::engine::topic::Scope::MessageBody => "MessageBody",
                    crate::engine::topic::Scope::MessageAttributes => "MessageAttributes",
                },
                "pendingConfirmation": s.pending,
                "awsWouldRefuse": aws_would_refuse,
                "lastDeliveries": recent,
                "lastError": activity.last_error.as_ref().map(|(at, error)| {
                    json!({ "at": rfc3339(*at), "error": &**error })
                }),
            }));
        }
        Ok(json!({ "subscriptions": subscriptions }))
    }

    /// LocalStack's `/_aws/sqs/messages`: the queue's visible messages (in-flight and delayed
    /// ones too when asked) as a ReceiveMessage answer with every attribute, plus LocalStack's
    /// `IsVisible` and `IsDelayed` (and `ApproximateFirstReceiveTimestamp` 0 for a message
    /// never received, which LocalStack always lists).
    pub async fn localstack_messages(
        &self,
        queue: &str,
        (show_invisible, show_delayed): (bool, bool),
    ) -> Result<ReceiveMessageOutput, ApiError> {
        let filter = StateFilter {
            visible: true,
            in_flight: show_invisible,
            delayed: show_delayed,
        };
        let all = ["All".to_string()];
        let messages = self
            .backend
            .peek_messages(queue, filter, usize::MAX)
            .await?
            .messages
            .into_iter()
            .map(|peeked| {
                let received = Received {
                    message: peeked.message,
                    receipt_handle: PEEK_RECEIPT_HANDLE.to_string(),
                    replayed: false,
                };
                let never_received = received.message.first_receive_at.is_none();
                let mut wire = message_wire(received, &all, &all);
                let (visible, delayed) = match peeked.state {
                    State::Visible => (true, false),
                    State::InFlight(_) => (false, false),
                    State::Delayed(_) => (false, true),
                };
                let attributes = &mut wire.attributes.0;
                if never_received {
                    attributes.push(("ApproximateFirstReceiveTimestamp".into(), "0".into()));
                }
                attributes.push(("IsVisible".into(), visible.to_string()));
                attributes.push(("IsDelayed".into(), delayed.to_string()));
                wire
            })
            .collect();
        Ok(ReceiveMessageOutput { messages })
    }
}

/// RFC 3339 with milliseconds, as the inspection API writes times.
pub fn rfc3339(at: Timestamp) -> String {
    // Four-digit years only: a later time is written as the last one they can show.
    const LAST_WRITABLE: u64 = 253_402_300_799_999;
    let millis = at.millis().min(LAST_WRITABLE);
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(millis);
    humantime::format_rfc3339_millis(time).to_string()
}

fn peeked_json(peeked: &Peeked) -> Value {
    let m = &peeked.message;
    let (state, until) = match peeked.state {
        State::Visible => ("visible", None),
        State::InFlight(at) => ("inFlight", Some(at)),
        State::Delayed(at) => ("delayed", Some(at)),
    };
    json!({
        "messageId": m.id.text().as_str(),
        "body": &*m.body,
        "messageAttributes": encode_attributes(&m.attributes),
        "groupId": m.group_id.as_deref(),
        "deduplicationId": m.dedup_id.as_deref(),
        "sequenceNumber": m.sequence_number.map(|s| s.to_string()),
        "receiveCount": m.receive_count,
        "state": state,
        // In flight: when the visibility timeout ends; delayed: when the delay does.
        "invisibleUntil": until.map(rfc3339),
        "sentAt": rfc3339(m.sent_at),
        "firstReceivedAt": m.first_receive_at.map(rfc3339),
        "senderId": &*m.sender_id,
        "traceHeader": m.trace_header().map(|t| &**t),
        "deadLetterSourceArn": m.dead_letter_source_arn().map(|a| &**a),
    })
}
