//! The records of a snapshot file.

use serde::{Deserialize, Serialize};

use super::change::{DiskChange, DiskMoveTask, Registry};
use super::list::List;
use super::message::{AttemptEntry, DedupEntry, DigestEntries, DiskStored};
use super::queue::DiskQueueImage;
use super::topic::{DiskArchived, DiskTopicImage};
use super::webhook::{Queued, Token};
use crate::engine::move_task::MoveTask as LiveMoveTask;
use crate::engine::queue::{self as live_queue, AttemptEntries, DedupRecord};
use crate::engine::topic::archive::Archived as LiveArchived;
use crate::engine::webhook::changes::TokenRecord;
use crate::engine::webhook::{Delivery, LanePolicy};
use crate::engine::Timestamp;
use std::sync::Arc;

/// A stored message and its sequence number within its queue.
#[derive(Serialize, Deserialize)]
pub struct Numbered<'a> {
    pub seq: u64,
    #[serde(borrow)]
    pub stored: DiskStored<'a>,
}

impl<'x, 'a: 'x> From<&'x (u64, &'a live_queue::Stored)> for Numbered<'x> {
    fn from((seq, stored): &'x (u64, &'a live_queue::Stored)) -> Self {
        Numbered {
            seq: *seq,
            stored: DiskStored::from(&**stored),
        }
    }
}

/// Messages as a snapshot writer holds them: borrowed from their queue's copy.
pub type Messages<'a> = List<'a, (u64, &'a live_queue::Stored), Numbered<'a>>;

/// One record of a snapshot file: a header, then per queue its image followed by its
/// messages and history in chunks, then topics, webhooks, move tasks, the signer, the receipt
/// key, the mobile state, the relay, an end.
#[derive(Serialize, Deserialize)]
pub enum Item<'a> {
    Header {
        version: u32,
        first_lsn: u64,
        registry_lsn: u64,
        registry: Registry,
    },
    Queue {
        lsn: u64,
        #[serde(borrow)]
        image: DiskQueueImage<'a>,
    },
    Messages(#[serde(borrow)] Messages<'a>),
    /// A queue's deduplication entries by key, as versions up to 3 wrote them.
    Dedup(#[serde(borrow)] List<'a, (Arc<str>, DedupRecord, Timestamp), DedupEntry<'a>>),
    Attempts(#[serde(borrow)] List<'a, (String, AttemptEntries, Timestamp), AttemptEntry<'a>>),
    End {
        queues: u64,
    },
    Topic {
        lsn: u64,
        #[serde(borrow)]
        image: DiskTopicImage<'a>,
    },
    /// A topic's deduplication entries by key, as versions up to 3 wrote them.
    TopicDedup(#[serde(borrow)] List<'a, (Arc<str>, DedupRecord, Timestamp), DedupEntry<'a>>),
    TopicArchive(#[serde(borrow)] List<'a, LiveArchived, DiskArchived<'a>>),
    /// Always a `Change::Signer`.
    Signer(#[serde(borrow)] DiskChange<'a>),
    /// The outbox as of this log position; its deliveries follow in chunks.
    Outbox {
        lsn: u64,
    },
    Deliveries(#[serde(borrow)] List<'a, (u64, Arc<Delivery>, LanePolicy), Queued<'a>>),
    Tokens(#[serde(borrow)] List<'a, TokenRecord, Token<'a>>),
    /// Every DLQ redrive task as of this log position.
    MoveTasks {
        lsn: u64,
        #[serde(borrow)]
        tasks: List<'a, LiveMoveTask, DiskMoveTask<'a>>,
    },
    /// Always a `Change::ReceiptKey` (format version 3).
    ReceiptKey(#[serde(borrow)] DiskChange<'a>),
    /// A queue's deduplication entries by their keys' digests (format version 4).
    DedupDigests(#[serde(borrow)] DigestEntries<'a>),
    /// A topic's deduplication entries by their keys' digests (format version 4).
    TopicDedupDigests(#[serde(borrow)] DigestEntries<'a>),
    /// The mobile state as of this log position (format version 5); its changes follow in
    /// chunks.
    Mobile {
        lsn: u64,
    },
    MobileChanges(#[serde(borrow)] super::mobile::MobileChanges<'a>),
    /// The relay as of this log position (format version 6); its changes follow in chunks.
    Relay {
        lsn: u64,
    },
    RelayChanges(#[serde(borrow)] super::relay::ParcelChanges<'a>),
}
