//! How writing a log fails, whether its records go to segment files (`segment_log.rs`) or to a
//! database's table (`database/table_log.rs`): the writer (`writer.rs`) handles both alike.

/// A failed append, sync or rotation of a log.
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
    /// The sink refuses this write and every later one, for a reason of its own (a log in a
    /// database whose lease another node took: `database::table_log::Deposed`).
    #[error("{0}")]
    Refused(Box<dyn std::error::Error + Send + Sync>),
}
