//! The change a log record holds, and the pieces of state only it and snapshots carry (move
//! tasks, the registry, the signing key).

use serde::{Deserialize, Serialize};

use super::list::List;
use super::queue::{DiskQueueChange, DiskQueueConfig, Tags};
use super::topic::DiskTopicChange;
use super::webhook::{DiskOutboxChange, Token};
use crate::engine::changes as live;
use crate::engine::move_task as live_move;
use crate::engine::queues::RegistryImage;
use crate::engine::Timestamp;

#[derive(Clone, Copy, Serialize, Deserialize)]
pub enum DiskMoveStatus {
    Running,
    Completed,
    Cancelled,
    Failed,
}

/// A DLQ redrive task's whole state.
#[derive(Serialize, Deserialize)]
pub struct DiskMoveTask<'a> {
    pub id: &'a str,
    pub source_arn: &'a str,
    pub destination_arn: Option<&'a str>,
    pub rate: Option<i64>,
    pub status: DiskMoveStatus,
    pub moved: u64,
    pub to_move: u64,
    pub started_at: u64,
    pub failure_reason: Option<&'a str>,
}

impl<'a> From<&'a live_move::MoveTask> for DiskMoveTask<'a> {
    fn from(t: &'a live_move::MoveTask) -> Self {
        use live_move::MoveStatus as S;
        DiskMoveTask {
            id: &t.id,
            source_arn: &t.source_arn,
            destination_arn: t.destination_arn.as_deref(),
            rate: t.rate,
            status: match t.status {
                S::Running => DiskMoveStatus::Running,
                S::Completed => DiskMoveStatus::Completed,
                S::Cancelled => DiskMoveStatus::Cancelled,
                S::Failed => DiskMoveStatus::Failed,
            },
            moved: t.moved,
            to_move: t.to_move,
            started_at: t.started_at.0,
            failure_reason: t.failure_reason.as_deref(),
        }
    }
}

impl DiskMoveTask<'_> {
    pub fn into_live(self) -> live_move::MoveTask {
        use live_move::MoveStatus as S;
        live_move::MoveTask {
            id: self.id.into(),
            source_arn: self.source_arn.into(),
            destination_arn: self.destination_arn.map(str::to_string),
            rate: self.rate,
            status: match self.status {
                DiskMoveStatus::Running => S::Running,
                DiskMoveStatus::Completed => S::Completed,
                DiskMoveStatus::Cancelled => S::Cancelled,
                DiskMoveStatus::Failed => S::Failed,
            },
            moved: self.moved,
            to_move: self.to_move,
            started_at: Timestamp(self.started_at),
            failure_reason: self.failure_reason.map(str::to_string),
        }
    }
}

/// The registry's own state: the next queue uid and recently deleted names.
#[derive(Serialize, Deserialize)]
pub struct Registry {
    pub next_uid: u64,
    pub deleted: Vec<(String, u64)>,
}

impl From<&RegistryImage> for Registry {
    fn from(r: &RegistryImage) -> Self {
        Registry {
            next_uid: r.next_uid,
            deleted: r.deleted.iter().map(|(n, t)| (n.clone(), t.0)).collect(),
        }
    }
}

impl From<Registry> for RegistryImage {
    fn from(r: Registry) -> Self {
        RegistryImage {
            next_uid: r.next_uid,
            deleted: r
                .deleted
                .into_iter()
                .map(|(n, t)| (n, Timestamp(t)))
                .collect(),
        }
    }
}

/// What one log record holds.
#[derive(Serialize, Deserialize)]
pub enum DiskChange<'a> {
    CreateQueue {
        name: &'a str,
        uid: u64,
        config: DiskQueueConfig,
        tags: Tags<'a>,
    },
    DeleteQueue {
        name: &'a str,
        uid: u64,
        at: u64,
    },
    /// Changes to one incarnation of a queue (a recreated queue has a new uid).
    Queue {
        name: &'a str,
        uid: u64,
        #[serde(borrow)]
        changes: List<'a, crate::engine::queue::changes::QueueChange, DiskQueueChange<'a>>,
    },
    Topic {
        name: &'a str,
        #[serde(borrow)]
        changes: List<'a, crate::engine::topic::changes::TopicChange, DiskTopicChange<'a>>,
    },
    DeleteTopic {
        name: &'a str,
    },
    Outbox(
        #[serde(borrow)]
        List<'a, crate::engine::webhook::changes::OutboxChange, DiskOutboxChange<'a>>,
    ),
    Token(#[serde(borrow)] Token<'a>),
    MoveTask(#[serde(borrow)] DiskMoveTask<'a>),
    /// The SNS signing key (PKCS#1 DER) and its certificate.
    Signer {
        private_key_der: &'a [u8],
        certificate_pem: &'a str,
        certificate_file: &'a str,
    },
    /// The secret receipt handles are sealed with (format version 3).
    ReceiptKey {
        secret: [u8; crate::engine::queue::receipt::KEY_BYTES],
    },
    /// Platform applications, endpoints and SMS state (format version 5).
    Mobile(#[serde(borrow)] super::mobile::MobileChanges<'a>),
    /// Parcels between shards (format version 6).
    Relay(#[serde(borrow)] super::relay::ParcelChanges<'a>),
}

impl<'a> From<&'a live::Change> for DiskChange<'a> {
    fn from(change: &'a live::Change) -> Self {
        use live::Change as C;
        match change {
            C::CreateQueue {
                name,
                uid,
                config,
                tags,
            } => DiskChange::CreateQueue {
                name,
                uid: *uid,
                config: (&**config).into(),
                tags: std::borrow::Cow::Borrowed(tags),
            },
            C::DeleteQueue { name, uid, at } => DiskChange::DeleteQueue {
                name,
                uid: *uid,
                at: at.0,
            },
            C::Queue { name, uid, changes } => DiskChange::Queue {
                name,
                uid: *uid,
                changes: List::Write(changes),
            },
            C::Topic { name, changes } => DiskChange::Topic {
                name,
                changes: List::Write(changes),
            },
            C::DeleteTopic { name } => DiskChange::DeleteTopic { name },
            C::Outbox(changes) => DiskChange::Outbox(List::Write(changes)),
            C::Token(token) => DiskChange::Token(token.into()),
            C::MoveTask(task) => DiskChange::MoveTask((&**task).into()),
            C::Signer {
                private_key_der,
                certificate_pem,
                certificate_file,
            } => DiskChange::Signer {
                private_key_der,
                certificate_pem,
                certificate_file,
            },
            C::ReceiptKey { secret } => DiskChange::ReceiptKey { secret: secret.0 },
            C::Mobile(changes) => DiskChange::Mobile(List::Write(changes)),
            C::Relay(changes) => DiskChange::Relay(List::Write(changes)),
        }
    }
}

impl DiskChange<'_> {
    pub fn into_live(self) -> live::Change {
        use live::Change as C;
        match self {
            DiskChange::CreateQueue {
                name,
                uid,
                config,
                tags,
            } => C::CreateQueue {
                name: name.into(),
                uid,
                config: Box::new(config.into()),
                tags: tags.into_owned(),
            },
            DiskChange::DeleteQueue { name, uid, at } => C::DeleteQueue {
                name: name.into(),
                uid,
                at: Timestamp(at),
            },
            DiskChange::Queue { name, uid, changes } => C::Queue {
                name: name.into(),
                uid,
                changes: changes
                    .into_vec()
                    .into_iter()
                    .map(DiskQueueChange::into_live)
                    .collect(),
            },
            DiskChange::Topic { name, changes } => C::Topic {
                name: name.into(),
                changes: changes
                    .into_vec()
                    .into_iter()
                    .map(DiskTopicChange::into_live)
                    .collect(),
            },
            DiskChange::DeleteTopic { name } => C::DeleteTopic { name: name.into() },
            DiskChange::Outbox(changes) => C::Outbox(
                changes
                    .into_vec()
                    .into_iter()
                    .map(DiskOutboxChange::into_live)
                    .collect(),
            ),
            DiskChange::Token(token) => C::Token(token.into_live()),
            DiskChange::MoveTask(task) => C::MoveTask(Box::new(task.into_live())),
            DiskChange::Signer {
                private_key_der,
                certificate_pem,
                certificate_file,
            } => C::Signer {
                private_key_der: private_key_der.to_vec(),
                certificate_pem: certificate_pem.into(),
                certificate_file: certificate_file.into(),
            },
            DiskChange::ReceiptKey { secret } => C::ReceiptKey {
                secret: crate::engine::queue::receipt::Secret(secret),
            },
            DiskChange::Mobile(changes) => C::Mobile(
                changes
                    .into_vec()
                    .into_iter()
                    .map(super::mobile::DiskMobileChange::into_live)
                    .collect(),
            ),
            DiskChange::Relay(changes) => C::Relay(
                changes
                    .into_vec()
                    .into_iter()
                    .map(super::relay::DiskParcelChange::into_live)
                    .collect(),
            ),
        }
    }
}
