//! One queue's state machine: storage, visibility, delays, retention, FIFO groups and
//! deduplication. Pure: every method takes `now`, nothing here reads a clock or does I/O.
//!
//! Deadlines (delays, visibility, retention) live in time-ordered sets; `tick` moves only the
//! entries that are due, so no operation scans the backlog.

pub mod changes;
pub mod config;
mod durability;
mod fifo_delay;
mod groups;
pub mod inspect;
mod operations;
pub mod receipt;
pub mod send;
pub mod stored;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub use super::dedup::DedupRecord;
use super::dedup::{DedupDigest, DedupHistory};
use super::window::ExpiringMap;
use groups::GroupIndex;

use super::error::{EngineError, EngineResult};
use super::fast_map::shrink_when_sparse;
use super::message::{Message, MessageId};
use super::time::Timestamp;
use super::FastMap;
pub use config::{DedupScope, QueueConfig, RedrivePolicy};
pub use operations::{ReceiveOutcome, ReceiveRequest, Received};
use send::CheckedSend;
pub use send::{SendReceipt, SendRequest};
use stored::logged_bytes;
pub use stored::{AttemptEntries, State, Stored, LOGGED_BYTES};

/// AWS's in-flight limit, for FIFO and standard queues alike.
pub const INFLIGHT_LIMIT: usize = 120_000;
/// FIFO deduplication and receive-attempt window.
pub const DEDUP_WINDOW_MS: u64 = 5 * 60 * 1000;
/// Ids of expired messages kept for the log between two backend calls on a queue.
const EXPIRED_KEPT: usize = 1_000;
/// Only one PurgeQueue per queue in this period.
pub const PURGE_INTERVAL_MS: u64 = 60_000;

/// Why a message arrives from another queue.
#[derive(Clone, Debug)]
pub enum Moved {
    /// Received too often in the named source queue.
    DeadLetter(Arc<str>),
    /// Moved back out of a dead-letter queue by a move task.
    Redrive,
}

/// What happened to a queue's messages since the server started (for metrics; kept under
/// the queue's lock, not in the log).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Activity {
    /// Stored by a send or a publish (moves in are not counted).
    pub sent: u64,
    /// Sends suppressed as duplicates within the deduplication window.
    pub deduplicated: u64,
    /// Handed to a receive (each receive of a message counts).
    pub received: u64,
    pub deleted: u64,
    /// Moved to the dead-letter queue after too many receives.
    pub dead_lettered: u64,
    /// Dropped at the end of the retention period.
    pub expired: u64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub visible: usize,
    pub in_flight: usize,
    pub delayed: usize,
}

#[derive(Debug)]
enum Order {
    Fifo(GroupIndex),
    /// Visible messages of a standard queue, oldest first.
    Standard(BTreeSet<u64>),
}

pub struct Queue {
    pub name: Arc<str>,
    pub arn: Arc<str>,
    /// Distinguishes incarnations of one name, so old receipt handles are foreign.
    pub uid: u64,
    /// Changed only through methods that record the change (`changes.rs`).
    pub(in crate::engine) config: QueueConfig,
    pub(in crate::engine) tags: BTreeMap<String, String>,
    /// Dedup keeps the scope the queue was created with (AWS-observed).
    dedup_scope: DedupScope,
    /// Boxed: the table keeps spare buckets, and a spare pointer costs less than a spare
    /// `Stored`.
    messages: FastMap<u64, Box<Stored>>,
    /// About what the stored messages take in a log or snapshot (see `LOGGED_BYTES`).
    stored_bytes: u64,
    order: Order,
    next_seq: u64,
    next_receive_no: u64,
    delayed: BTreeSet<(Timestamp, u64)>,
    in_flight: BTreeSet<(Timestamp, u64)>,
    by_enqueue: BTreeSet<(Timestamp, u64)>,
    dedup: DedupHistory<DedupRecord>,
    attempts: ExpiringMap<String, AttemptEntries>,
    last_purge: Option<Timestamp>,
    pub inflight_limit: usize,
    pub activity: Activity,
    /// Ids of messages retention dropped, for the backend to log once (`take_expired`); past
    /// `EXPIRED_KEPT` only counted.
    expired: (Vec<MessageId>, u64),
    /// Changes not yet handed to the write-ahead log; `None` when nothing is persisted.
    change_log: Option<Vec<changes::QueueChange>>,
    /// Seals the receipt handles this queue issues: the engine's, once registered there.
    pub(in crate::engine) receipt_key: Arc<receipt::ReceiptKey>,
}

impl Queue {
    pub fn new(name: &str, arn: String, uid: u64, config: QueueConfig) -> Self {
        Queue {
            name: name.into(),
            arn: arn.into(),
            uid,
            dedup_scope: config.dedup_scope,
            order: if config.fifo {
                Order::Fifo(GroupIndex::default())
            } else {
                Order::Standard(BTreeSet::new())
            },
            config,
            tags: BTreeMap::new(),
            messages: FastMap::default(),
            stored_bytes: 0,
            next_seq: 1,
            next_receive_no: 1,
            delayed: BTreeSet::new(),
            in_flight: BTreeSet::new(),
            by_enqueue: BTreeSet::new(),
            dedup: DedupHistory::default(),
            attempts: ExpiringMap::default(),
            last_purge: None,
            inflight_limit: INFLIGHT_LIMIT,
            activity: Activity::default(),
            expired: (Vec::new(), 0),
            change_log: None,
            receipt_key: Arc::new(receipt::ReceiptKey::generate()),
        }
    }

    pub fn is_fifo(&self) -> bool {
        self.config.fifo
    }

    pub fn counts(&self) -> Counts {
        Counts {
            visible: self.messages.len() - self.delayed.len() - self.in_flight.len(),
            in_flight: self.in_flight.len(),
            delayed: self.delayed.len(),
        }
    }

    /// True when a receive would return something now (given deadlines already ticked).
    pub fn has_receivable(&self) -> bool {
        self.in_flight.len() < self.inflight_limit
            && match &self.order {
                Order::Standard(ready) => !ready.is_empty(),
                Order::Fifo(index) => index.has_ready(),
            }
    }

    /// The earliest moment a deadline falls due (delay, visibility or retention), for timers.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        let retention = self
            .by_enqueue
            .first()
            .map(|(at, _)| at.plus_seconds(self.config.retention_seconds as u64));
        [
            self.delayed.first().map(|e| e.0),
            self.in_flight.first().map(|e| e.0),
            retention,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Applies every deadline due by `now`: retention drops, delays and visibility timeouts end.
    pub fn tick(&mut self, now: Timestamp) {
        let retention_ms = self.config.retention_seconds as u64 * 1000;
        while let Some(&(at, seq)) = self.by_enqueue.first() {
            if at.plus_millis(retention_ms) > now {
                break;
            }
            if let Some(message) = self.remove(seq) {
                if self.expired.0.len() < EXPIRED_KEPT {
                    self.expired.0.push(message.id);
                } else {
                    self.expired.1 += 1;
                }
            }
            self.activity.expired += 1;
        }
        while let Some(&(at, seq)) = self.delayed.first() {
            if at > now {
                break;
            }
            self.delayed.pop_first();
            self.make_visible(seq);
        }
        while let Some(&(at, seq)) = self.in_flight.first() {
            if at > now {
                break;
            }
            self.in_flight.pop_first();
            self.make_visible(seq);
        }
        self.dedup.expire(now);
        self.attempts.expire(now);
    }

    fn make_visible(&mut self, seq: u64) {
        let Some(stored) = self.messages.get_mut(&seq) else {
            return;
        };
        stored.state = State::Visible;
        let group = stored.message.group_id.clone();
        match &mut self.order {
            Order::Standard(ready) => {
                ready.insert(seq);
            }
            Order::Fifo(_) => {
                self.refresh_group(group.as_deref().expect("FIFO messages have groups"))
            }
        }
    }

    /// A FIFO group is ready exactly when its head message is visible.
    fn refresh_group(&mut self, group: &str) {
        let Order::Fifo(index) = &mut self.order else {
            return;
        };
        let ready = index
            .head(group)
            .and_then(|seq| self.messages.get(&seq))
            .is_some_and(|s| s.state == State::Visible);
        index.set_ready(group, ready);
    }

    /// Removes a message wherever it is.
    fn remove(&mut self, seq: u64) -> Option<Message> {
        let stored = self.messages.remove(&seq)?;
        shrink_when_sparse(&mut self.messages);
        self.stored_bytes -= logged_bytes(&stored);
        self.note(|| changes::QueueChange::Remove { seq });
        match stored.state {
            State::Delayed(at) => {
                self.delayed.remove(&(at, seq));
            }
            State::InFlight(at) => {
                self.in_flight.remove(&(at, seq));
            }
            State::Visible => {}
        }
        self.by_enqueue.remove(&(stored.enqueued_at, seq));
        match &mut self.order {
            Order::Standard(ready) => {
                ready.remove(&seq);
            }
            Order::Fifo(index) => {
                let group = stored
                    .message
                    .group_id
                    .as_deref()
                    .expect("FIFO messages have groups");
                index.remove(group, seq);
                self.refresh_group(group);
            }
        }
        Some(stored.message)
    }

    /// Stores a message under `seq` and enters it in the indexes its state and queue type need.
    fn place(&mut self, seq: u64, mut stored: Stored) {
        match stored.state {
            State::Delayed(at) => {
                self.delayed.insert((at, seq));
            }
            State::InFlight(at) => {
                self.in_flight.insert((at, seq));
            }
            State::Visible => {}
        }
        self.by_enqueue.insert((stored.enqueued_at, seq));
        let mut fifo_group = None;
        match &mut self.order {
            Order::Standard(ready) => {
                if stored.state == State::Visible {
                    ready.insert(seq);
                }
            }
            Order::Fifo(index) => {
                let group = stored
                    .message
                    .group_id
                    .as_mut()
                    .expect("FIFO messages have groups");
                let (held, head) = index.add(group, seq);
                *group = held;
                // Behind the head, the message changes nothing about the group's readiness.
                fifo_group = head.then(|| group.clone());
            }
        }
        self.stored_bytes += logged_bytes(&stored);
        if let Some(replaced) = self.messages.insert(seq, Box::new(stored)) {
            self.stored_bytes -= logged_bytes(&replaced);
        }
        // After the message is stored: whether its group is ready depends on its state.
        if let Some(group) = fifo_group {
            self.refresh_group(&group);
        }
    }

    /// Stores a message that passed every check.
    fn insert(
        &mut self,
        mut message: Message,
        delay_seconds: u32,
        enqueued_at: Timestamp,
        now: Timestamp,
    ) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.config.fifo {
            message.sequence_number = Some(send::sequence_number(seq));
        }
        let state = if delay_seconds > 0 {
            State::Delayed(now.plus_seconds(delay_seconds as u64))
        } else {
            State::Visible
        };
        self.place(
            seq,
            Stored {
                message,
                state,
                receive_no: 0,
                visibility_changes: 0,
                received_at: now,
                enqueued_at,
            },
        );
        self.note_put(seq);
        seq
    }

    fn enqueue(&mut self, prepared: CheckedSend, now: Timestamp) -> SendReceipt {
        let CheckedSend {
            message,
            delay_seconds,
            bypass_dedup,
        } = prepared;
        if !self.config.fifo {
            let receipt = send::receipt(&message, None);
            self.insert(message, delay_seconds, now, now);
            self.activity.sent += 1;
            return receipt;
        }
        let key = send::dedup_key(self.dedup_scope, &message);
        let digest = DedupDigest::of(&key);
        if let Some(original) = self.dedup.get(&digest, now).filter(|_| !bypass_dedup) {
            self.activity.deduplicated += 1;
            return send::receipt(
                &message,
                Some((original.message_id, original.sequence_number)),
            );
        }
        let seq = self.insert(message, delay_seconds, now, now);
        self.activity.sent += 1;
        let stored = &self.messages[&seq].message;
        let record = DedupRecord {
            message_id: stored.id,
            sequence_number: stored.sequence_number,
        };
        let receipt = send::receipt(stored, None);
        let expires_at = now.plus_millis(DEDUP_WINDOW_MS);
        self.note(|| changes::QueueChange::Dedup {
            key,
            record,
            expires_at,
        });
        self.dedup.insert(digest, record, expires_at);
        receipt
    }

    /// SendMessage. The caller has run `tick(now)`.
    pub fn send(&mut self, req: SendRequest, now: Timestamp) -> EngineResult<SendReceipt> {
        let prepared = send::prepare(&self.config, req, now, false)?;
        Ok(self.enqueue(prepared, now))
    }

    /// SendMessageBatch after the batch-structure checks: FIFO group and dedup rules fail the
    /// whole request before anything is stored; other problems fail only their entry.
    pub fn send_batch(
        &mut self,
        entries: Vec<SendRequest>,
        now: Timestamp,
    ) -> EngineResult<Vec<EngineResult<SendReceipt>>> {
        send::check_batch(&self.config, &entries)?;
        Ok(entries
            .into_iter()
            .map(|entry| {
                let prepared = send::prepare(&self.config, entry, now, true)?;
                Ok(self.enqueue(prepared, now))
            })
            .collect())
    }

    /// Stores a message moved here from another queue. Dead-lettering keeps its id, body,
    /// attributes and receive count and records where it came from; a redrive (move task) hands
    /// it back as if never received. Neither passes through deduplication. A FIFO queue gives it
    /// a new sequence number and restarts its retention clock; a standard queue keeps the original.
    pub fn accept_moved(&mut self, mut message: Message, how: Moved, now: Timestamp) {
        match how {
            Moved::DeadLetter(source_arn) => message.set_dead_letter_source_arn(Some(source_arn)),
            Moved::Redrive => message.redriven(),
        }
        let enqueued_at = if self.config.fifo {
            now
        } else {
            message.sent_at
        };
        if !self.config.fifo {
            message.sequence_number = None;
        }
        self.insert(message, 0, enqueued_at, now);
    }

    /// PurgeQueue: drops every message; a FIFO queue also forgets its deduplication history.
    pub fn purge(&mut self, now: Timestamp) -> EngineResult<()> {
        if let Some(last) = self.last_purge {
            if now.millis_since(last) < PURGE_INTERVAL_MS {
                return Err(EngineError::PurgeQueueInProgress(self.name.to_string()));
            }
        }
        self.last_purge = Some(now);
        self.note(|| changes::QueueChange::Purge { at: now });
        self.clear_messages();
        Ok(())
    }

    /// `POST /_orderly/reset`: drops every message and forgets the deduplication, attempt
    /// and purge histories (a test suite's next PurgeQueue is not refused as too soon).
    pub fn reset(&mut self) {
        self.note(|| changes::QueueChange::Reset);
        self.clear_all();
    }

    fn clear_all(&mut self) {
        self.last_purge = None;
        self.clear_messages();
    }

    /// Drops every message and the deduplication and receive-attempt histories.
    fn clear_messages(&mut self) {
        self.messages.clear();
        self.stored_bytes = 0;
        self.delayed.clear();
        self.in_flight.clear();
        self.by_enqueue.clear();
        match &mut self.order {
            Order::Standard(ready) => ready.clear(),
            Order::Fifo(index) => index.clear(),
        }
        self.dedup.clear();
        self.attempts.clear();
    }

    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// The ids of messages retention dropped since the last call, and how many more were
    /// dropped past what is kept.
    pub fn take_expired(&mut self) -> (Vec<MessageId>, u64) {
        std::mem::take(&mut self.expired)
    }

    /// About how many bytes the stored messages take in a snapshot or log.
    pub fn stored_bytes(&self) -> u64 {
        self.stored_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}
