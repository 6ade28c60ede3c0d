//! `CLEAN`: written when the log closes with everything synced, removed at the next start
//! before anything new is written. While it is there the log's end is known exactly, so a
//! short or damaged last write, or records missing at the end, are damage rather than a crash's
//! torn tail.
//!
//! The file: `ORDLYCLN`, the number the next record gets (u64, little-endian), a CRC-32C of
//! both.

use std::path::Path;

use super::writer::LogWriter;
use super::{number_file, RecoveryError};
use crate::engine::ChangeLog;

const NAME: &str = "CLEAN";
const MAGIC: [u8; 8] = *b"ORDLYCLN";

/// The number the next record was to get when the log closed cleanly, if it did.
pub fn read(dir: &Path) -> Result<Option<u64>, RecoveryError> {
    number_file::read(dir, NAME, MAGIC, "a clean-stop marker")
        .map_err(|unreadable| RecoveryError::of_number_file(NAME, unreadable))
}

/// After `log_writer` closed: notes the clean stop if every record it took was synced.
pub fn note(dir: &Path, log_writer: &LogWriter) {
    let durable = log_writer.durable();
    if durable.failed || durable.lsn != ChangeLog::next_lsn(log_writer) {
        return;
    }
    if let Err(error) = write(dir, durable.lsn) {
        tracing::warn!(%error, "could not note the clean stop in the data directory");
    }
}

/// Notes that the log closed with every record before `next_lsn` synced.
pub fn write(dir: &Path, next_lsn: u64) -> std::io::Result<()> {
    number_file::write(dir, NAME, MAGIC, next_lsn)
}

/// Removes the marker (synced), before the log is written again.
pub fn remove(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(dir.join(NAME)) {
        Ok(()) => std::fs::File::open(dir)?.sync_all(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
