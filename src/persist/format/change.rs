//! The change a log record holds, and the pieces of state only it and snapshots carry (move
//! tasks, the registry, the signing key).

use serde::{Deserialize, Serialize};

use super::list::List;
use super::queue::{QueueChange, QueueConfig, Tags};
use super::topic::TopicChange;
use super::webhook::{OutboxChange, Token};
use crate::engine::changes as live;
use crate::engine::move_task as live_move;
use crate::engine::restore::RegistryImage;
use crate::engine::Timestamp;

#[derive(Clone, Copy, Serialize, Deserialize)]
pub enum MoveStatus {
    Running,
    Completed,
    Cancelled,
    Failed,
}

/// A DLQ redrive task's whole state.
#[derive(Serialize, Deserialize)]
pub struct MoveTask<'a> {
    pub id: &'a str,
    pub source_arn: &'a str,
    pub destination_arn: Option<&'a str>,
    pub rate: Option<i64>,
    pub status: MoveStatus,
    pub moved: u64,
    pub to_move: u64,
    pub started_at: u64,
    pub failure_reason: Option<&'a str>,
}

impl<'a> From<&'a live_move::MoveTask> for MoveTask<'a> {
    fn from(t: &'a live_move::MoveTask) -> Self {
        use live_move::MoveStatus as S;
        MoveTask {
            id: &t.id,
            source_arn: &t.source_arn,
            destination_arn: t.destination_arn.as_deref(),
            rate: t.rate,
            status: match t.status {
                S::Running => MoveStatus::Running,
                S::Completed => MoveStatus::Completed,
                S::Cancelled => MoveStatus::Cancelled,
                S::Failed => MoveStatus::Failed,
            },
            moved: t.moved,
            to_move: t.to_move,
            started_at: t.started_at.0,
            failure_reason: t.failure_reason.as_deref(),
        }
    }
}

impl MoveTask<'_> {
    pub fn into_live(self) -> live_move::MoveTask {
        use live_move::MoveStatus as S;
        live_move::MoveTask {
            id: self.id.into(),
            source_arn: self.source_arn.into(),
            destination_arn: self.destination_arn.map(str::to_string),
            rate: self.rate,
            status: match self.status {
                MoveStatus::Running => S::Running,
                MoveStatus::Completed => S::Completed,
                MoveStatus::Cancelled => S::Cancelled,
                MoveStatus::Failed => S::Failed,
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
pub enum Change<'a> {
    CreateQueue {
        name: &'a str,
        uid: u64,
        config: QueueConfig,
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
        changes: List<'a, crate::engine::queue::changes::QueueChange, QueueChange<'a>>,
    },
    Topic {
        name: &'a str,
        #[serde(borrow)]
        changes: List<'a, crate::engine::topic::changes::TopicChange, TopicChange<'a>>,
    },
    DeleteTopic {
        name: &'a str,
    },
    Outbox(
        #[serde(borrow)] List<'a, crate::engine::webhook::changes::OutboxChange, OutboxChange<'a>>,
    ),
    Token(#[serde(borrow)] Token<'a>),
    MoveTask(#[serde(borrow)] MoveTask<'a>),
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
}

impl<'a> From<&'a live::Change> for Change<'a> {
    fn from(change: &'a live::Change) -> Self {
        use live::Change as C;
        match change {
            C::CreateQueue {
                name,
                uid,
                config,
                tags,
            } => Change::CreateQueue {
                name,
                uid: *uid,
                config: (&**config).into(),
                tags: std::borrow::Cow::Borrowed(tags),
            },
            C::DeleteQueue { name, uid, at } => Change::DeleteQueue {
                name,
                uid: *uid,
                at: at.0,
            },
            C::Queue { name, uid, changes } => Change::Queue {
                name,
                uid: *uid,
                changes: List::Write(changes),
            },
            C::Topic { name, changes } => Change::Topic {
                name,
                changes: List::Write(changes),
            },
            C::DeleteTopic { name } => Change::DeleteTopic { name },
            C::Outbox(changes) => Change::Outbox(List::Write(changes)),
            C::Token(token) => Change::Token(token.into()),
            C::MoveTask(task) => Change::MoveTask((&**task).into()),
            C::Signer {
                private_key_der,
                certificate_pem,
                certificate_file,
            } => Change::Signer {
                private_key_der,
                certificate_pem,
                certificate_file,
            },
            C::ReceiptKey { secret } => Change::ReceiptKey { secret: secret.0 },
        }
    }
}

impl Change<'_> {
    pub fn into_live(self) -> live::Change {
        use live::Change as C;
        match self {
            Change::CreateQueue {
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
            Change::DeleteQueue { name, uid, at } => C::DeleteQueue {
                name: name.into(),
                uid,
                at: Timestamp(at),
            },
            Change::Queue { name, uid, changes } => C::Queue {
                name: name.into(),
                uid,
                changes: changes
                    .into_vec()
                    .into_iter()
                    .map(QueueChange::into_live)
                    .collect(),
            },
            Change::Topic { name, changes } => C::Topic {
                name: name.into(),
                changes: changes
                    .into_vec()
                    .into_iter()
                    .map(TopicChange::into_live)
                    .collect(),
            },
            Change::DeleteTopic { name } => C::DeleteTopic { name: name.into() },
            Change::Outbox(changes) => C::Outbox(
                changes
                    .into_vec()
                    .into_iter()
                    .map(OutboxChange::into_live)
                    .collect(),
            ),
            Change::Token(token) => C::Token(token.into_live()),
            Change::MoveTask(task) => C::MoveTask(Box::new(task.into_live())),
            Change::Signer {
                private_key_der,
                certificate_pem,
                certificate_file,
            } => C::Signer {
                private_key_der: private_key_der.to_vec(),
                certificate_pem: certificate_pem.into(),
                certificate_file: certificate_file.into(),
            },
            Change::ReceiptKey { secret } => C::ReceiptKey {
                secret: crate::engine::queue::receipt::Secret(secret),
            },
        }
    }
}
