//! How writing a log fails, whether its records go to segment files (`segment_log.rs`) or to a
//! database's table (`database/table_log.rs`): the writer (`writer.rs`) handles both alike.

/// A failed append, sync or rotation of a log. `Deposed` only comes from a log in a database.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("log I/O failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("log damaged in {file} at offset {offset}: {reason}")]
    Corruption {
        file: String,
        offset: usize,
        reason: &'static str,
    },
    #[error("the log refuses writes after an earlier write could not be undone")]
    Poisoned,
    /// The log is in a database and another node took the lease on it: this node may never
    /// write it again.
    #[error("another node leads now: this node's lease on the log (epoch {0}) is over")]
    Deposed(u64),
}
