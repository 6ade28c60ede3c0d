//! Moving a whole state between a data directory and a database (`--import-from DIR`,
//! `--export-to DIR`): the source is recovered into an engine as a server would, and one
//! snapshot of it is written into the destination, numbered by the destination's own log. A
//! snapshot holds everything a restart needs (queues with their messages, receipt handles'
//! counters, deduplication and receive-attempt windows, topics, subscriptions, the webhook
//! outbox, move tasks, the signing and receipt keys), so nothing is lost on the way. The destination must
//! hold nothing yet, and no node may lead the database meanwhile.

use std::path::Path;

use tokio::sync::Notify;

use super::{OpenError, Settings};
use crate::engine::Engine;
use crate::persist::snapshot::SnapshotStore;
use crate::persist::writer::FsyncMode;

/// What was moved, for the operator.
#[derive(Debug)]
pub struct Moved {
    pub queues: usize,
    pub messages: u64,
    /// Where the snapshot went.
    pub snapshot: String,
}

fn engine(settings: &Settings) -> Engine<Notify> {
    Engine::new(&settings.account_id, &settings.region)
}

fn count(engine: &Engine<Notify>) -> (usize, u64) {
    let queues = engine.queues.list("").len();
    (queues, engine.queues.message_count())
}

/// Copies the state of the data directory `dir` into the database, which must hold no log yet.
pub fn import(dir: &Path, settings: &Settings) -> Result<Moved, OpenError> {
    if crate::persist::shard_dirs::is_sharded(dir) {
        return Err(OpenError::NotEmpty(format!(
            "{} is cut into shards (or is one shard of such a directory): moving shards into a \
             database is not built yet",
            dir.display()
        )));
    }
    if !dir.join("HOME").exists() && !dir.join("KEY").exists() {
        return Err(OpenError::NotEmpty(format!(
            "{} is not an Orderly data directory",
            dir.display()
        )));
    }
    let mut source = engine(settings);
    let (data, _) = crate::persist::open(dir, FsyncMode::Always, &mut source)?;
    let mut destination = engine(settings);
    let log = super::open(settings, &mut destination)?;
    let empty = log.report.snapshot.is_none() && log.report.next_lsn == 0;
    let moved = if empty {
        log.snapshots
            .take(&source, &log.log_writer)
            .map_err(OpenError::Io)
            .map(|(snapshot, _)| {
                let (queues, messages) = count(&source);
                Moved {
                    queues,
                    messages,
                    snapshot,
                }
            })
    } else {
        Err(OpenError::NotEmpty(
            "the database already holds a log: import into an empty one".into(),
        ))
    };
    log.log_writer.close();
    log.lease.release();
    data.log_writer.close();
    crate::persist::clean_stop::note(dir, &data.log_writer);
    moved
}

/// Copies the state kept in the database into `dir`, a data directory that must not exist yet
/// or be empty.
pub fn export(dir: &Path, settings: &Settings) -> Result<Moved, OpenError> {
    let occupied = std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some());
    if occupied {
        return Err(OpenError::NotEmpty(format!(
            "{} is not empty: export into a new directory",
            dir.display()
        )));
    }
    let mut source = engine(settings);
    let log = super::open(settings, &mut source)?;
    let mut destination = engine(settings);
    let exported = crate::persist::open(dir, FsyncMode::Always, &mut destination)
        .map_err(OpenError::Recovery)
        .and_then(|(data, _)| {
            let written = crate::persist::snapshot::take(dir, &source, &data.log_writer);
            data.log_writer.close();
            crate::persist::clean_stop::note(dir, &data.log_writer);
            let path = written.map_err(OpenError::Io)?;
            let (queues, messages) = count(&source);
            Ok(Moved {
                queues,
                messages,
                snapshot: path.display().to_string(),
            })
        });
    log.log_writer.close();
    log.lease.release();
    exported
}
