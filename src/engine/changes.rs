//! The engine's side of durability: the changes it records and the sink it hands them to.
//!
//! A change is submitted while the lock that ordered it is still held, so the log holds each
//! queue's changes in the order they were made. The sink only queues the record; the server
//! waits for it to reach the disk before it answers (see `persist::writer`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::queue::changes::QueueChange;
use super::queue::QueueConfig;
use super::time::Timestamp;
use super::topic::changes::TopicChange;
use super::webhook::changes::{OutboxChange, TokenRecord};

/// Where changes go. Implemented by the write-ahead log.
pub trait ChangeLog: Send + Sync {
    /// Queues one change behind every change submitted before it; must not block on I/O.
    fn submit(&self, change: &Change);
    /// The log sequence number the next change will get.
    fn next_lsn(&self) -> u64;
    /// Opens a group: the changes submitted from now until the matching `release` (and any
    /// submitted meanwhile by others) reach the log in one write, so a crash keeps all of them
    /// or none. Must not block.
    fn hold(&self) {}
    fn release(&self) {}
}

/// An open group of changes (`ChangeLog::hold`), closed when dropped. Changes that span
/// several queues or a topic and its queues (a move, a dead-lettering, a publish's fan-out)
/// are made inside one, so a crash cannot keep half of them.
#[must_use]
pub struct Atomic<'a>(Option<&'a dyn ChangeLog>);

impl<'a> Atomic<'a> {
    pub fn new(change_log: Option<&'a dyn ChangeLog>) -> Self {
        if let Some(change_log) = change_log {
            change_log.hold();
        }
        Atomic(change_log)
    }
}

impl Drop for Atomic<'_> {
    fn drop(&mut self) {
        if let Some(change_log) = self.0 {
            change_log.release();
        }
    }
}

#[derive(Clone, Debug)]
pub enum Change {
    CreateQueue {
        name: Arc<str>,
        uid: u64,
        config: Box<QueueConfig>,
        tags: BTreeMap<String, String>,
    },
    DeleteQueue {
        name: Arc<str>,
        uid: u64,
        at: Timestamp,
    },
    /// Changes to one incarnation of a queue (a recreated queue has a new uid).
    Queue {
        name: Arc<str>,
        uid: u64,
        changes: Vec<QueueChange>,
    },
    /// Changes to a topic; the first one of a new topic is its settings image.
    Topic {
        name: Arc<str>,
        changes: Vec<TopicChange>,
    },
    DeleteTopic {
        name: Arc<str>,
    },
    /// Webhook deliveries queued and finished.
    Outbox(Vec<OutboxChange>),
    /// A confirmation token issued.
    Token(TokenRecord),
    /// A DLQ redrive task's whole state after a change.
    MoveTask(Box<super::move_task::MoveTask>),
    /// The SNS signing key (PKCS#1 DER) and its certificate, so signatures verify across
    /// restarts with the certificate subscribers already fetched.
    Signer {
        private_key_der: Vec<u8>,
        certificate_pem: String,
        certificate_file: String,
    },
    /// The secret receipt handles are sealed with, so handles issued before a restart or a
    /// takeover still open.
    ReceiptKey {
        secret: super::queue::receipt::Secret,
    },
    /// Platform applications, endpoints and SMS state as they now are (`mobile`).
    Mobile(Vec<super::mobile::MobileChange>),
    /// Parcels for other shards' queues sent and forgotten, and those of other shards applied
    /// (`relay`).
    Relay(Vec<super::parcel::ParcelChange>),
}
