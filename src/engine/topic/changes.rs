//! A topic's durable state: what is logged when it changes and what a snapshot holds.
//!
//! Settings, tags and subscriptions change rarely, so any change to them logs the topic's whole
//! settings image (replaying one is idempotent). Publishes change only the dedup history, the
//! sequence counter and the archive, and log just that, after the copies they fanned out.
//! Derived state (compiled filter policies, parsed delivery policies) is rebuilt on restore
//! (`durability`, which also applies these records and writes the images).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::archive::Archived;
use super::SubscriptionProtocol;
use crate::engine::dedup::{DedupDigest, DedupRecord};
use crate::engine::time::Timestamp;

/// A topic's dedup entry: its key's digest, the original's message id and sequence number,
/// and when it expires.
pub type TopicDedup = (DedupDigest, DedupRecord, Timestamp);

#[derive(Clone, Debug)]
pub enum TopicChange {
    /// The topic's settings, tags and subscriptions as they now are (no history).
    Settings(Box<TopicImage>),
    /// One accepted publish of a FIFO topic.
    Published {
        key: String,
        message_id: Arc<str>,
        sequence_number: u128,
        expires_at: Timestamp,
        archived: Option<Box<Archived>>,
    },
    /// `POST /_orderly/reset`: the deduplication history and the archive emptied.
    Reset,
}

#[derive(Clone, Debug)]
pub struct SubscriptionImage {
    pub arn: Arc<str>,
    pub protocol: SubscriptionProtocol,
    pub endpoint: String,
    pub owner: String,
    pub raw_delivery: bool,
    pub attributes: BTreeMap<String, String>,
    pub message_body_scope: bool,
    pub replay: Option<(Timestamp, Option<Timestamp>, String)>,
    pub live: bool,
    pub pending: bool,
    pub confirmation_authenticated: bool,
    pub authenticate_on_unsubscribe: bool,
    pub principal: Option<Arc<str>>,
}

#[derive(Clone, Debug)]
pub struct TopicImage {
    pub name: Arc<str>,
    pub arn: Arc<str>,
    pub fifo: bool,
    pub owner: String,
    pub settings: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
    pub subscriptions: Vec<SubscriptionImage>,
    pub deleted_subscriptions: u64,
    pub next_seq: u64,
    /// When archiving was switched on, if it is.
    pub archive_since: Option<Timestamp>,
    /// History: filled in snapshots only (a settings change does not repeat it).
    pub dedup: Vec<TopicDedup>,
    pub archive: Vec<Archived>,
}
