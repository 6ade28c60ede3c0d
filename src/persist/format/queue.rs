//! Queues: settings, the changes a queue records, and its image in a snapshot.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::list::List;
use super::message::{
    AttemptEntry, DedupEntry, DiskAttemptEntries, DiskDedupRecord, DiskState, DiskStored,
    KeyedEntries,
};
use crate::engine::queue::config::{
    RedrivePermission as LivePermission, ThroughputLimit as LiveLimit,
};
use crate::engine::queue::{self as live, changes as live_changes};
use crate::engine::Timestamp;

pub type Tags<'a> = Cow<'a, BTreeMap<String, String>>;

#[derive(Clone, Copy, Serialize, Deserialize)]
pub enum DiskDedupScope {
    Queue,
    MessageGroup,
}

impl From<live::DedupScope> for DiskDedupScope {
    fn from(scope: live::DedupScope) -> Self {
        match scope {
            live::DedupScope::Queue => DiskDedupScope::Queue,
            live::DedupScope::MessageGroup => DiskDedupScope::MessageGroup,
        }
    }
}

impl From<DiskDedupScope> for live::DedupScope {
    fn from(scope: DiskDedupScope) -> Self {
        match scope {
            DiskDedupScope::Queue => live::DedupScope::Queue,
            DiskDedupScope::MessageGroup => live::DedupScope::MessageGroup,
        }
    }
}

#[derive(Clone, Copy, Serialize, Deserialize)]
pub enum DiskThroughputLimit {
    PerQueue,
    PerMessageGroupId,
}

#[derive(Serialize, Deserialize)]
pub struct DiskRedrivePolicy {
    pub dead_letter_target_arn: String,
    pub max_receive_count: u32,
}

#[derive(Serialize, Deserialize)]
pub enum DiskRedrivePermission {
    AllowAll,
    DenyAll,
    ByQueue(Vec<String>),
}

/// Every settable attribute of a queue.
#[derive(Serialize, Deserialize)]
pub struct DiskQueueConfig {
    pub fifo: bool,
    pub delay_seconds: u32,
    pub maximum_message_size: u32,
    pub retention_seconds: u32,
    pub receive_wait_seconds: u32,
    pub visibility_timeout: u32,
    pub policy: Option<String>,
    pub redrive_policy: Option<DiskRedrivePolicy>,
    pub redrive_allow_policy: Option<(DiskRedrivePermission, String)>,
    pub kms_master_key_id: Option<String>,
    pub kms_data_key_reuse_seconds: Option<u32>,
    pub sqs_managed_sse: bool,
    pub content_based_dedup: bool,
    pub dedup_scope: DiskDedupScope,
    pub throughput_limit: DiskThroughputLimit,
    pub created_at: u64,
    pub last_modified_at: u64,
}

impl From<&live::QueueConfig> for DiskQueueConfig {
    fn from(c: &live::QueueConfig) -> Self {
        DiskQueueConfig {
            fifo: c.fifo,
            delay_seconds: c.delay_seconds,
            maximum_message_size: c.maximum_message_size,
            retention_seconds: c.retention_seconds,
            receive_wait_seconds: c.receive_wait_seconds,
            visibility_timeout: c.visibility_timeout,
            policy: c.policy.clone(),
            redrive_policy: c.redrive_policy.as_ref().map(|p| DiskRedrivePolicy {
                dead_letter_target_arn: p.dead_letter_target_arn.clone(),
                max_receive_count: p.max_receive_count,
            }),
            redrive_allow_policy: c.redrive_allow_policy.as_ref().map(|(permission, text)| {
                let permission = match permission {
                    LivePermission::AllowAll => DiskRedrivePermission::AllowAll,
                    LivePermission::DenyAll => DiskRedrivePermission::DenyAll,
                    LivePermission::ByQueue(q) => DiskRedrivePermission::ByQueue(q.clone()),
                };
                (permission, text.clone())
            }),
            kms_master_key_id: c.kms_master_key_id.clone(),
            kms_data_key_reuse_seconds: c.kms_data_key_reuse_seconds,
            sqs_managed_sse: c.sqs_managed_sse,
            content_based_dedup: c.content_based_dedup,
            dedup_scope: c.dedup_scope.into(),
            throughput_limit: match c.throughput_limit {
                LiveLimit::PerQueue => DiskThroughputLimit::PerQueue,
                LiveLimit::PerMessageGroupId => DiskThroughputLimit::PerMessageGroupId,
            },
            created_at: c.created_at.0,
            last_modified_at: c.last_modified_at.0,
        }
    }
}

impl From<DiskQueueConfig> for live::QueueConfig {
    fn from(c: DiskQueueConfig) -> Self {
        live::QueueConfig {
            fifo: c.fifo,
            delay_seconds: c.delay_seconds,
            maximum_message_size: c.maximum_message_size,
            retention_seconds: c.retention_seconds,
            receive_wait_seconds: c.receive_wait_seconds,
            visibility_timeout: c.visibility_timeout,
            policy: c.policy,
            redrive_policy: c.redrive_policy.map(|p| live::RedrivePolicy {
                dead_letter_target_arn: p.dead_letter_target_arn,
                max_receive_count: p.max_receive_count,
            }),
            redrive_allow_policy: c.redrive_allow_policy.map(|(permission, text)| {
                let permission = match permission {
                    DiskRedrivePermission::AllowAll => LivePermission::AllowAll,
                    DiskRedrivePermission::DenyAll => LivePermission::DenyAll,
                    DiskRedrivePermission::ByQueue(q) => LivePermission::ByQueue(q),
                };
                (permission, text)
            }),
            kms_master_key_id: c.kms_master_key_id,
            kms_data_key_reuse_seconds: c.kms_data_key_reuse_seconds,
            sqs_managed_sse: c.sqs_managed_sse,
            content_based_dedup: c.content_based_dedup,
            dedup_scope: c.dedup_scope.into(),
            throughput_limit: match c.throughput_limit {
                DiskThroughputLimit::PerQueue => LiveLimit::PerQueue,
                DiskThroughputLimit::PerMessageGroupId => LiveLimit::PerMessageGroupId,
            },
            created_at: Timestamp(c.created_at),
            last_modified_at: Timestamp(c.last_modified_at),
        }
    }
}

/// One change to a queue.
#[derive(Serialize, Deserialize)]
pub enum DiskQueueChange<'a> {
    /// A message stored (sent, moved in, or restored) under this sequence number.
    Put {
        seq: u64,
        #[serde(borrow)]
        stored: DiskStored<'a>,
    },
    /// A stored message's receive state after a receive or visibility change.
    Touch {
        seq: u64,
        state: DiskState,
        receive_no: u64,
        visibility_changes: u32,
        received_at: u64,
        receive_count: u32,
        first_receive_at: Option<u64>,
    },
    Remove {
        seq: u64,
    },
    Dedup {
        key: &'a str,
        record: DiskDedupRecord,
        expires_at: u64,
    },
    Attempt {
        key: &'a str,
        #[serde(borrow)]
        entries: DiskAttemptEntries<'a>,
        expires_at: u64,
    },
    Purge {
        at: u64,
    },
    Config(DiskQueueConfig),
    Tags(Tags<'a>),
    /// Since version 2.
    Reset,
}

impl<'a> From<&'a live_changes::QueueChange> for DiskQueueChange<'a> {
    fn from(change: &'a live_changes::QueueChange) -> Self {
        use live_changes::QueueChange as C;
        match change {
            C::Put { seq, stored } => DiskQueueChange::Put {
                seq: *seq,
                stored: DiskStored::from(&**stored),
            },
            C::Touch {
                seq,
                state,
                receive_no,
                visibility_changes,
                received_at,
                receive_count,
                first_receive_at,
            } => DiskQueueChange::Touch {
                seq: *seq,
                state: (*state).into(),
                receive_no: *receive_no,
                visibility_changes: *visibility_changes,
                received_at: received_at.0,
                receive_count: *receive_count,
                first_receive_at: first_receive_at.map(|t| t.0),
            },
            C::Remove { seq } => DiskQueueChange::Remove { seq: *seq },
            C::Dedup {
                key,
                record,
                expires_at,
            } => DiskQueueChange::Dedup {
                key,
                record: record.into(),
                expires_at: expires_at.0,
            },
            C::Attempt {
                key,
                entries,
                expires_at,
            } => DiskQueueChange::Attempt {
                key,
                entries: List::Write(entries),
                expires_at: expires_at.0,
            },
            C::Purge { at } => DiskQueueChange::Purge { at: at.0 },
            C::Config(config) => DiskQueueChange::Config((&**config).into()),
            C::Tags(tags) => DiskQueueChange::Tags(Cow::Borrowed(tags)),
            C::Reset => DiskQueueChange::Reset,
        }
    }
}

impl DiskQueueChange<'_> {
    pub fn into_live(self) -> live_changes::QueueChange {
        use live_changes::QueueChange as C;
        match self {
            DiskQueueChange::Put { seq, stored } => C::Put {
                seq,
                stored: Box::new(stored.into_live()),
            },
            DiskQueueChange::Touch {
                seq,
                state,
                receive_no,
                visibility_changes,
                received_at,
                receive_count,
                first_receive_at,
            } => C::Touch {
                seq,
                state: state.into(),
                receive_no,
                visibility_changes,
                received_at: Timestamp(received_at),
                receive_count,
                first_receive_at: first_receive_at.map(Timestamp),
            },
            DiskQueueChange::Remove { seq } => C::Remove { seq },
            DiskQueueChange::Dedup {
                key,
                record,
                expires_at,
            } => C::Dedup {
                key: key.into(),
                record: record.into(),
                expires_at: Timestamp(expires_at),
            },
            DiskQueueChange::Attempt {
                key,
                entries,
                expires_at,
            } => {
                let (key, entries, expires_at) = AttemptEntry {
                    key,
                    entries,
                    expires_at,
                }
                .into_live();
                C::Attempt {
                    key,
                    entries,
                    expires_at,
                }
            }
            DiskQueueChange::Purge { at } => C::Purge { at: Timestamp(at) },
            DiskQueueChange::Config(config) => C::Config(Box::new(config.into())),
            DiskQueueChange::Tags(tags) => C::Tags(tags.into_owned()),
            DiskQueueChange::Reset => C::Reset,
        }
    }
}

/// Everything about a queue except its messages, which a snapshot writes in chunks.
#[derive(Serialize, Deserialize)]
pub struct DiskQueueImage<'a> {
    pub name: &'a str,
    pub arn: &'a str,
    pub uid: u64,
    pub config: DiskQueueConfig,
    pub tags: Tags<'a>,
    pub dedup_scope: DiskDedupScope,
    pub next_seq: u64,
    pub next_receive_no: u64,
    pub last_purge: Option<u64>,
    #[serde(borrow)]
    pub dedup: KeyedEntries<'a>,
    #[serde(borrow)]
    pub attempts: List<'a, (String, live::AttemptEntries, Timestamp), AttemptEntry<'a>>,
}

impl<'a> From<&'a live_changes::QueueImage> for DiskQueueImage<'a> {
    fn from(image: &'a live_changes::QueueImage) -> Self {
        debug_assert!(
            image.dedup.is_empty(),
            "a snapshot writes a queue's history as its own items"
        );
        DiskQueueImage {
            name: &image.name,
            arn: &image.arn,
            uid: image.uid,
            config: (&image.config).into(),
            tags: Cow::Borrowed(&image.tags),
            dedup_scope: image.dedup_scope.into(),
            next_seq: image.next_seq,
            next_receive_no: image.next_receive_no,
            last_purge: image.last_purge.map(|t| t.0),
            dedup: List::Write(&[]),
            attempts: List::Write(&image.attempts),
        }
    }
}

impl DiskQueueImage<'_> {
    pub fn into_live(self) -> live_changes::QueueImage {
        live_changes::QueueImage {
            name: self.name.into(),
            arn: self.arn.into(),
            uid: self.uid,
            config: self.config.into(),
            tags: self.tags.into_owned(),
            dedup_scope: self.dedup_scope.into(),
            next_seq: self.next_seq,
            next_receive_no: self.next_receive_no,
            last_purge: self.last_purge.map(Timestamp),
            dedup: self
                .dedup
                .into_vec()
                .into_iter()
                .map(DedupEntry::into_live)
                .collect(),
            attempts: self
                .attempts
                .into_vec()
                .into_iter()
                .map(AttemptEntry::into_live)
                .collect(),
        }
    }
}
