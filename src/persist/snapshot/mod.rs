//! Snapshots: the whole state in one file, so the log before it can be deleted and a restart
//! reads live data rather than history.
//!
//! A snapshot is taken while requests go on (a fuzzy checkpoint). The writer first starts a new
//! log segment at sequence number `first_lsn`; then the registry and each queue are copied one
//! at a time, each under its own lock, together with the sequence number the log had reached
//! at that moment. Recovery loads the snapshot and replays the log from `first_lsn`, skipping
//! each record that the copy it touches already contains.
//!
//! The file is a series of framed, checksummed records (as in the log): a header, then per
//! queue its image followed by its messages in chunks, then an end marker. It is written under
//! a temporary name, synced, and renamed, so a crash leaves either the old or the new one.

mod files;
mod load;
mod loaded;
mod schedule;
mod write;

use std::path::{Path, PathBuf};

use super::writer::LogWriter;
use crate::engine::Engine;
pub use load::{load, load_bytes};
pub use loaded::Loaded;
pub use schedule::{SnapshotStore, Snapshotter};
pub use write::{write_to, Written};

/// Takes a snapshot of `engine` into `dir` and lets the log drop what it covers. Blocks for as
/// long as copying and writing take; each queue is locked only while it is copied.
pub fn take<W: Default>(
    dir: &Path,
    engine: &Engine<W>,
    log_writer: &LogWriter,
) -> std::io::Result<PathBuf> {
    let temporary = dir.join("snapshot.tmp");
    let taken = write::write(dir, &temporary, engine, log_writer);
    if taken.is_err() {
        // A half-written snapshot would hold disk space the log needs (a full disk is the
        // likeliest reason to be here).
        let _ = std::fs::remove_file(&temporary);
    }
    taken
}
