//! Why a node could not open the log in a database.

use thiserror::Error;

use crate::persist::RecoveryError;

#[derive(Debug, Error)]
pub enum OpenError {
    #[error("{0}")]
    Url(String),
    #[error("{0}")]
    Database(String),
    #[error(
        "the database holds the tables of Orderly's earlier row-per-message storage, which \
         this build no longer reads: give an empty database (--import-from moves a data \
         directory's state into one)"
    )]
    RowStorage,
    #[error(
        "the database's log tables are version {found}, newer than this build of Orderly knows \
         ({known}): run the newer Orderly that wrote them"
    )]
    Newer { found: i32, known: i32 },
    #[error(
        "the database belongs to region {region} and account {account}: start every node with \
         --region {region} --account-id {account}"
    )]
    OtherHome { region: String, account: String },
    #[error(
        "the node at {url} leads this database (epoch {epoch}): stop it first (a node that \
         stopped without giving the lease up holds it for 5 s more)"
    )]
    Led { url: String, epoch: i64 },
    #[error(
        "the database's key space is cut into {found} shards, not {asked}: start every node on \
         it with --shards {found}"
    )]
    ShardCount { found: i32, asked: i32 },
    #[error("{0}")]
    NotEmpty(String),
    /// The databases given do not agree with the shard map the home recorded.
    #[error("{0}")]
    ShardMap(String),
    #[error(transparent)]
    Recovery(#[from] RecoveryError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}
