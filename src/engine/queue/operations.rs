//! Receive, delete and visibility changes: the operations that work with receipt handles.

use std::sync::Arc;

use super::config::QueueConfig;
use super::receipt::Receipt;
use super::{Order, Queue, State};
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::message::{validate_token, Message};
use crate::engine::time::Timestamp;

#[derive(Clone, Debug, Default)]
pub struct ReceiveRequest {
    pub max_messages: Option<i64>,
    pub visibility_timeout: Option<i64>,
    pub attempt_id: Option<String>,
}

/// One received message: a snapshot with its counters as of this receive, and its handle.
#[derive(Clone, Debug)]
pub struct Received {
    pub message: Message,
    pub receipt_handle: String,
    /// Given again to a receive retried with the same attempt id: no new receive.
    pub replayed: bool,
}

#[derive(Debug, Default)]
pub struct ReceiveOutcome {
    pub received: Vec<Received>,
    /// Messages past the redrive policy's maxReceiveCount, already removed from this queue,
    /// for the caller to store in the dead-letter queue.
    pub dead_letters: Vec<Message>,
    /// Once moved to the dead-letter queue: each message's id and receive count (for the log).
    pub dead_lettered: Vec<(crate::engine::message::MessageId, u32)>,
    /// What retention dropped from the queue since it was last asked (`Queue::take_expired`),
    /// taken under the receive's own lock, for the log.
    pub expired: (Vec<crate::engine::message::MessageId>, u64),
}

/// The longest a message may stay in flight from one receive, however often it is extended.
pub const MAX_VISIBILITY_SECONDS: i64 = 43_200;

/// A visibility timeout in seconds, checked against AWS's range.
pub fn check_visibility(value: i64) -> EngineResult<u64> {
    if (0..=MAX_VISIBILITY_SECONDS).contains(&value) {
        Ok(value as u64)
    } else {
        Err(EngineError::invalid(format!(
            "Value {value} for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200, if provided."
        )))
    }
}

/// ReceiveMessage's own parameters against the queue's defaults: how many messages at most,
/// and the visibility timeout in seconds.
pub fn check_receive(config: &QueueConfig, req: &ReceiveRequest) -> EngineResult<(usize, u64)> {
    let max = req.max_messages.unwrap_or(1);
    if !(1..=10).contains(&max) {
        return Err(EngineError::invalid(format!(
            "Value {max} for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided."
        )));
    }
    let visibility = match req.visibility_timeout {
        Some(v) => check_visibility(v)?,
        None => config.visibility_timeout as u64,
    };
    if let Some(id) = &req.attempt_id {
        validate_token("ReceiveRequestAttemptId", id)?;
    }
    Ok((max as usize, visibility))
}

/// A FIFO handle whose receive is no longer the message's current one.
pub fn expired_handle(handle: &str) -> EngineError {
    EngineError::invalid(format!(
        "Value {handle} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
    ))
}

impl Queue {
    /// Validates a receive's parameters and returns (max messages, visibility seconds).
    pub fn check_receive(&self, req: &ReceiveRequest) -> EngineResult<(usize, u64)> {
        check_receive(&self.config, req)
    }

    /// ReceiveMessage. `dead_letter_to` is the redrive policy's maxReceiveCount when the
    /// dead-letter queue exists. The caller has run `tick(now)`.
    pub fn receive(
        &mut self,
        req: &ReceiveRequest,
        dead_letter_after: Option<u32>,
        now: Timestamp,
    ) -> EngineResult<ReceiveOutcome> {
        let (max, visibility) = self.check_receive(req)?;
        let deadline = now.plus_seconds(visibility);
        // Attempt ids are a FIFO feature; standard queues ignore them.
        let attempt_id = req.attempt_id.as_ref().filter(|_| self.config.fifo);
        if let Some(id) = attempt_id {
            if let Some(replayed) = self.replay_attempt(id, deadline, now) {
                return Ok(ReceiveOutcome {
                    received: replayed,
                    ..ReceiveOutcome::default()
                });
            }
        }
        if !self.config.fifo && self.in_flight.len() >= self.inflight_limit {
            return Err(EngineError::OverLimit(format!(
                "Maximum number of inflight messages reached for queue {}.",
                self.name
            )));
        }
        let mut outcome = ReceiveOutcome::default();
        while outcome.received.len() < max && self.in_flight.len() < self.inflight_limit {
            match &mut self.order {
                Order::Standard(ready) => match ready.pop_first() {
                    Some(seq) => self.take(seq, deadline, dead_letter_after, now, &mut outcome),
                    None => break,
                },
                Order::Fifo(index) => match index.pop_ready() {
                    Some(group) => self.take_group_run(
                        &group,
                        max,
                        deadline,
                        dead_letter_after,
                        now,
                        &mut outcome,
                    ),
                    None => break,
                },
            }
        }
        if let Some(id) = attempt_id {
            if !outcome.received.is_empty() {
                let entries: Vec<(u64, u64, u32)> = outcome
                    .received
                    .iter()
                    .map(|d| {
                        let receipt = Receipt::decode(&d.receipt_handle, &self.receipt_key)
                            .expect("own handle");
                        let changes = self.messages[&receipt.seq].visibility_changes;
                        (receipt.seq, receipt.receive_no, changes)
                    })
                    .collect();
                let expires_at = now.plus_millis(super::DEDUP_WINDOW_MS);
                self.note(|| super::changes::QueueChange::Attempt {
                    key: id.clone(),
                    entries: entries.clone(),
                    expires_at,
                });
                self.attempts.insert(id.clone(), entries, expires_at);
            }
        }
        Ok(outcome)
    }

    /// Receives the consecutive visible messages from the head of a FIFO group: the group lock
    /// means nothing behind a message that is not visible may be delivered.
    fn take_group_run(
        &mut self,
        group: &Arc<str>,
        max: usize,
        deadline: Timestamp,
        dead_letter_after: Option<u32>,
        now: Timestamp,
        outcome: &mut ReceiveOutcome,
    ) {
        let room = (max - outcome.received.len()).min(self.inflight_limit - self.in_flight.len());
        let Order::Fifo(index) = &self.order else {
            unreachable!("called for FIFO queues only")
        };
        let run: Vec<u64> = index
            .members(group)
            .take_while(|seq| self.messages[seq].state == State::Visible)
            .take(room)
            .collect();
        for seq in run {
            self.take(seq, deadline, dead_letter_after, now, outcome);
        }
        self.refresh_group(group);
    }

    /// Puts one visible message in flight, or dead-letters it once it was received often enough.
    fn take(
        &mut self,
        seq: u64,
        deadline: Timestamp,
        dead_letter_after: Option<u32>,
        now: Timestamp,
        outcome: &mut ReceiveOutcome,
    ) {
        if let Some(limit) = dead_letter_after {
            if self.messages[&seq].message.receive_count >= limit {
                let message = self.remove(seq).expect("present");
                outcome.dead_letters.push(message);
                self.activity.dead_lettered += 1;
                return;
            }
        }
        let receive_no = self.next_receive_no;
        self.next_receive_no += 1;
        self.activity.received += 1;
        let stored = self.messages.get_mut(&seq).expect("present");
        stored.state = State::InFlight(deadline);
        stored.receive_no = receive_no;
        stored.received_at = now;
        stored.message.receive_count += 1;
        stored.message.first_receive_at.get_or_insert(now);
        self.in_flight.insert((deadline, seq));
        self.note_touch(seq);
        let stored = &self.messages[&seq];
        let receipt = Receipt {
            queue_uid: self.uid,
            seq,
            receive_no,
        };
        outcome.received.push(Received {
            message: stored.message.clone(),
            receipt_handle: receipt.encode(&self.receipt_key),
            replayed: false,
        });
    }

    /// A retried receive with a known attempt id gets the same messages and handles, with
    /// fresh visibility, while none of them was deleted, re-received or had its visibility changed.
    fn replay_attempt(
        &mut self,
        id: &str,
        deadline: Timestamp,
        now: Timestamp,
    ) -> Option<Vec<Received>> {
        let entries = self.attempts.get(&id.to_string(), now)?.clone();
        let intact = entries.iter().all(|(seq, receive_no, changes)| {
            self.messages.get(seq).is_some_and(|s| {
                s.receive_no == *receive_no
                    && s.visibility_changes == *changes
                    && matches!(s.state, State::InFlight(_))
            })
        });
        if !intact {
            self.attempts.remove(&id.to_string());
            return None;
        }
        let mut deliveries = Vec::with_capacity(entries.len());
        for (seq, receive_no, _) in entries {
            let stored = self.messages.get_mut(&seq).expect("checked");
            if let State::InFlight(old) = stored.state {
                self.in_flight.remove(&(old, seq));
            }
            stored.state = State::InFlight(deadline);
            self.in_flight.insert((deadline, seq));
            self.note_touch(seq);
            let stored = &self.messages[&seq];
            deliveries.push(Received {
                message: stored.message.clone(),
                receipt_handle: Receipt {
                    queue_uid: self.uid,
                    seq,
                    receive_no,
                }
                .encode(&self.receipt_key),
                replayed: true,
            });
        }
        Some(deliveries)
    }

    fn decode_handle(&self, handle: &str) -> EngineResult<Receipt> {
        Receipt::decode(handle, &self.receipt_key)
            .filter(|r| r.queue_uid == self.uid && r.seq < self.next_seq)
            .ok_or_else(|| EngineError::ReceiptHandleIsInvalid(handle.to_string()))
    }

    /// DeleteMessage. Returns true if a message was removed.
    pub fn delete(&mut self, handle: &str, _now: Timestamp) -> EngineResult<bool> {
        let receipt = self.decode_handle(handle)?;
        let Some(stored) = self.messages.get(&receipt.seq) else {
            // Already deleted: deleting again succeeds.
            return Ok(false);
        };
        if self.config.fifo {
            let current = stored.receive_no == receipt.receive_no
                && matches!(stored.state, State::InFlight(_));
            if !current {
                return Err(expired_handle(handle));
            }
        }
        // Standard queues delete even with a stale handle (observed on AWS).
        self.remove(receipt.seq);
        self.activity.deleted += 1;
        Ok(true)
    }

    /// ChangeMessageVisibility: the new timeout counts from now; 0 makes the message visible
    /// at once (for FIFO, back at the head of its group).
    pub fn change_visibility(
        &mut self,
        handle: &str,
        timeout: i64,
        now: Timestamp,
    ) -> EngineResult<()> {
        let receipt = self.decode_handle(handle)?;
        let timeout = check_visibility(timeout)?;
        let Some(stored) = self.messages.get_mut(&receipt.seq) else {
            return Err(EngineError::invalid(format!(
                "Value {handle} for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change."
            )));
        };
        let current = stored.receive_no == receipt.receive_no;
        let State::InFlight(old_deadline) = stored.state else {
            return if self.config.fifo {
                Err(expired_handle(handle))
            } else {
                // Standard queues accept a change after the timeout lapsed (observed on AWS).
                Ok(())
            };
        };
        // A standard queue applies the change with an earlier receive's handle too (observed on
        // AWS); a FIFO handle must be the current receive's.
        if !current && self.config.fifo {
            return Err(expired_handle(handle));
        }
        let new_deadline = now.plus_seconds(timeout);
        if new_deadline.millis_since(stored.received_at) > MAX_VISIBILITY_SECONDS as u64 * 1000 {
            return Err(EngineError::invalid(format!(
                "Value {timeout} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"
            )));
        }
        stored.visibility_changes += 1;
        self.in_flight.remove(&(old_deadline, receipt.seq));
        if timeout == 0 {
            self.make_visible(receipt.seq);
        } else {
            self.messages.get_mut(&receipt.seq).expect("present").state =
                State::InFlight(new_deadline);
            self.in_flight.insert((new_deadline, receipt.seq));
        }
        self.note_touch(receipt.seq);
        Ok(())
    }

    /// Takes up to `limit` visible messages out of the queue, oldest first (for move tasks).
    pub fn take_visible(&mut self, limit: usize) -> Vec<Message> {
        let mut taken = Vec::new();
        while taken.len() < limit {
            let seq = match &mut self.order {
                Order::Standard(ready) => ready.first().copied(),
                Order::Fifo(index) => index.pop_ready().and_then(|g| index.head(&g)),
            };
            let Some(seq) = seq else { break };
            taken.extend(self.remove(seq));
        }
        taken
    }
}
