//! Why a data directory, or the log in a database, could not be recovered: said with the file
//! (or table row) and offset where it can be.

use std::path::PathBuf;

use thiserror::Error;

use super::log_error::LogError;
use super::number_file;

#[derive(Debug, Error)]
pub enum RecoveryError {
    #[error("data directory {0} is in use by another process")]
    Locked(PathBuf),
    #[error("I/O error in the data directory: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    NewerFormat(String),
    /// Opened with another number of shards than it was cut into.
    #[error("{0}")]
    ShardCount(String),
    #[error(
        "data directory {dir} belongs to region {region} and account {account}: start with \
         --region {region} --account-id {account}, or use another data directory"
    )]
    OtherHome {
        dir: PathBuf,
        region: String,
        account: String,
    },
    #[error(
        "data directory {dir} {what}; refusing to start rather than start empty (a directory \
         that never held data may be removed to start afresh)"
    )]
    Missing { dir: PathBuf, what: String },
    #[error(
        "data directory {dir} was stopped cleanly with its log reaching {expected}, but \
         the log reaches {found} now: segments are missing, cut short or added; refusing to \
         start rather than lose data (to accept the loss, remove {dir}/CLEAN)"
    )]
    NotAsStopped {
        dir: PathBuf,
        expected: String,
        found: String,
    },
    /// A follower of the log in a database found a snapshot kept since it last looked that
    /// dropped records it had not applied: its engine is of no use, a fresh one recovers.
    #[error(
        "the log now starts at record {starts_at} (a snapshot kept since this engine last read \
         it), past record {next}, which it was to apply next: a fresh engine recovers"
    )]
    LeftBehind { next: u64, starts_at: u64 },
    #[error("data damaged in {file} at offset {offset}: {reason}; refusing to start rather than lose data")]
    Corruption {
        file: String,
        offset: usize,
        reason: String,
    },
}

impl RecoveryError {
    /// `file` of the data directory could not be read as the number it holds.
    pub(crate) fn of_number_file(file: &str, unreadable: number_file::Unreadable) -> Self {
        match unreadable {
            number_file::Unreadable::Io(error) => RecoveryError::Io(error),
            number_file::Unreadable::Damaged(reason) => RecoveryError::Corruption {
                file: file.into(),
                offset: 0,
                reason,
            },
        }
    }
}

impl From<LogError> for RecoveryError {
    fn from(error: LogError) -> Self {
        match error {
            LogError::Io(e) => RecoveryError::Io(e),
            LogError::Corruption {
                file,
                offset,
                reason,
            } => RecoveryError::Corruption {
                file,
                offset,
                reason: reason.into(),
            },
            LogError::Poisoned | LogError::Refused(_) => {
                RecoveryError::Io(std::io::Error::other(error.to_string()))
            }
        }
    }
}
