//! A queue's changes as write-ahead log records, and its whole state as a snapshot image.
//!
//! Every record states an outcome, not a request: a `Put` carries the stored message with its
//! sequence number, a `Touch` the new state of a received one. Replaying them needs no clock
//! and no randomness, so a restart rebuilds exactly the state that was acknowledged. Changes
//! that time alone makes (a delay or visibility timeout ending, retention) are not logged:
//! deadlines are absolute, and the first `tick` after a restart applies them.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::config::{DedupScope, QueueConfig};
use super::stored::{AttemptEntries, State, Stored};
use crate::engine::dedup::{DedupDigest, DedupRecord};
use crate::engine::time::Timestamp;

#[derive(Clone, Debug)]
pub enum QueueChange {
    /// A message stored (sent, moved in, or restored) under this sequence number.
    Put {
        seq: u64,
        stored: Box<Stored>,
    },
    /// A stored message's receive state after a receive or visibility change.
    Touch {
        seq: u64,
        state: State,
        receive_no: u64,
        visibility_changes: u32,
        received_at: Timestamp,
        receive_count: u32,
        first_receive_at: Option<Timestamp>,
    },
    Remove {
        seq: u64,
    },
    Dedup {
        key: Arc<str>,
        record: DedupRecord,
        expires_at: Timestamp,
    },
    Attempt {
        key: String,
        entries: AttemptEntries,
        expires_at: Timestamp,
    },
    Purge {
        at: Timestamp,
    },
    Config(Box<QueueConfig>),
    Tags(BTreeMap<String, String>),
    /// `POST /_orderly/reset`: every message and the deduplication, attempt and purge
    /// histories gone; the queue as if just created.
    Reset,
}

/// Everything about a queue except its messages, which a snapshot writes in chunks.
#[derive(Clone, Debug)]
pub struct QueueImage {
    pub name: Arc<str>,
    pub arn: Arc<str>,
    pub uid: u64,
    pub config: QueueConfig,
    pub tags: BTreeMap<String, String>,
    pub dedup_scope: DedupScope,
    pub next_seq: u64,
    pub next_receive_no: u64,
    pub last_purge: Option<Timestamp>,
    pub dedup: Vec<(DedupDigest, DedupRecord, Timestamp)>,
    pub attempts: Vec<(String, AttemptEntries, Timestamp)>,
}
