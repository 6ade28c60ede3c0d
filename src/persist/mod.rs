//! Durability: the data directory, recovery at startup, and the write-ahead log.
//!
//! - `record`: framing with length and CRC-32C.
//! - `batch`: each write as one batch on a sector boundary; tells a torn tail from damage in
//!   segments written over zeros.
//! - `segment_log`: numbered segment files of batches; `log_error`: how writing a log
//!   fails, in files or in a database.
//! - `storage`: the file I/O trait (tests inject write, sync and truncate failures).
//! - `format`: what records hold, persist's own types mapped to and from engine state, and
//!   their format version.
//! - `writer`: the log writer (`LogWriter`): group commit by one writer thread; requests wait
//!   for their records.
//! - `snapshot`: the whole state in one file, so old segments can go.
//! - `log_metrics`: the log's and the snapshotter's figures for `GET /metrics`.
//! - `tenure`: how long this node may act as the leader (for good, or a margin inside its
//!   lease on a database), for what no fence can take back: webhooks.
//!
//! A data directory holds `LOCK` (held while a server uses it), `KEY` (a random number made
//! with the directory, which seals the log's batch headers), `HOME` (the region and account
//! it belongs to, `home`), segments `NNN.wal`, at most one finished snapshot `NNN.snap`, and
//! `CLEAN` while stopped cleanly (`clean_stop`).

pub mod batch;
pub mod clean_stop;
pub mod clock_file;
pub mod database;
pub mod format;
pub mod home;
pub mod log_error;
pub mod log_metrics;
pub mod number_file;
pub mod record;
mod recovery_error;
pub mod segment_log;
pub mod shard_dirs;
pub mod snapshot;
pub mod storage;
pub mod tenure;
pub mod writer;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::engine::Engine;
use log_error::LogError;
pub use recovery_error::RecoveryError;
use segment_log::{SegmentLog, DEFAULT_SEGMENT_BYTES};
use storage::DirStorage;
use writer::{FsyncMode, LogWriter};

/// What recovery found, for the startup log line.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    pub snapshot: Option<String>,
    pub snapshot_messages: u64,
    pub replayed: u64,
    pub skipped: u64,
    /// A torn final record that was dropped: (file, offset, bytes).
    pub dropped_tail: Option<(String, usize, usize)>,
    pub next_lsn: u64,
}

impl RecoveryReport {
    /// What a snapshot loaded says, before any log is replayed after it.
    pub(crate) fn after(loaded: &snapshot::Loaded) -> Self {
        RecoveryReport {
            snapshot: loaded.file.clone(),
            snapshot_messages: loaded.messages,
            next_lsn: loaded.first_lsn,
            ..RecoveryReport::default()
        }
    }
}

/// An open data directory: the log the engine writes to, and the lock that keeps other
/// processes out for as long as this value lives.
pub struct DataDir {
    pub path: PathBuf,
    pub log_writer: Arc<LogWriter>,
    /// `Engine::stored_bytes` as the snapshot left it (before the log was replayed).
    pub live_at_snapshot: u64,
    _lock: File,
}

/// Locks `dir`, loads its snapshot and replays its log into `engine` (which must be fresh),
/// and starts the log so that the engine's later changes are logged.
pub fn open<W: Default>(
    dir: &Path,
    mode: FsyncMode,
    engine: &mut Engine<W>,
) -> Result<(DataDir, RecoveryReport), RecoveryError> {
    let lock = lock_dir(dir)?;
    home::check(dir, engine.namespaces.home())?;
    // A key is made with the directory's first start, which logs a record at once: a key
    // with neither log nor snapshot beside it means the data went.
    let had_key = dir.join("KEY").exists();
    let key = log_key(dir)?;
    let log_writer = LogWriter::new();
    engine.set_log(log_writer.clone());
    let clean = clean_stop::read(dir)?;
    let loaded = snapshot::load(dir, engine)?;
    let live_at_snapshot = engine.queues.stored_bytes();
    let mut report = RecoveryReport::after(&loaded);
    let (log, log_bytes) = replay_log(dir, key, engine, &loaded, clean.is_some(), &mut report)?;
    if let Some(next_lsn) = clean.filter(|at| *at != report.next_lsn) {
        let last = |next: u64| match next.checked_sub(1) {
            Some(record) => format!("record {record}"),
            None => "no record".to_string(),
        };
        return Err(RecoveryError::NotAsStopped {
            dir: dir.into(),
            expected: last(next_lsn),
            found: last(report.next_lsn),
        });
    }
    clean_stop::remove(dir)?;
    if had_key && loaded.file.is_none() && report.replayed + report.skipped == 0 {
        return Err(RecoveryError::Missing {
            dir: dir.into(),
            what: "holds a key (KEY) but no log segment and no snapshot".into(),
        });
    }
    // The log kept since the snapshot counts toward the next one, as if written by this
    // process: else a log of a filled-then-drained queue could outlive every restart.
    log_writer.count_logged(log_bytes);
    let mut log = log;
    // A first start writes its receipt key before serving, so a directory holding KEY always
    // holds a record too (`Missing` above), even if killed right after it starts listening.
    let mut kept = None;
    engine.queues.keep_receipt_key_by(|change| {
        let written = format::to_record(report.next_lsn, change)
            .map_err(|e| LogError::Io(std::io::Error::other(e)))
            .and_then(|record| {
                log.append(&[&record])?;
                log_writer.count_logged((record.len() + record::HEADER_BYTES) as u64);
                log.sync()
            });
        let ok = written.is_ok();
        kept = Some(written);
        ok
    });
    if let Some(written) = kept {
        written?;
        report.next_lsn += 1;
    }
    if !dir.join("KEY").exists() {
        std::fs::rename(dir.join(FIRST_KEY), dir.join("KEY"))?;
        File::open(dir)?.sync_all()?;
    }
    log_writer.start(log, report.next_lsn, mode);
    Ok((
        DataDir {
            path: dir.into(),
            log_writer,
            live_at_snapshot,
            _lock: lock,
        },
        report,
    ))
}

/// Creates the directory (private) if needed and takes its lock: one process at a time.
fn lock_dir(dir: &Path) -> Result<std::fs::File, RecoveryError> {
    storage::create_private_dir(dir)?;
    storage::warn_if_shared(dir)?;
    let lock = storage::private_file()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("LOCK"))?;
    // A lock held only for an instant is waited for: a child process forked by another thread
    // holds a copy of every descriptor until it execs (they close then), so a directory just
    // closed can look locked for a moment. Another server holding it is refused after a second.
    for _ in 0..LOCK_TRIES {
        match lock.try_lock() {
            Ok(()) => return Ok(lock),
            Err(std::fs::TryLockError::WouldBlock) => std::thread::sleep(LOCK_RETRY_PAUSE),
            Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
        }
    }
    Err(RecoveryError::Locked(dir.into()))
}

/// How long `lock_dir` waits for a lock held for an instant: `LOCK_TRIES` times this pause.
const LOCK_TRIES: u32 = 100;
const LOCK_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// Applies the log's records the snapshot does not cover, counting them (and the torn tail
/// dropped, if any) in `report`; returns the log opened for appending and the bytes it holds.
/// One thread reads and decodes the log while this one applies it, in order: decoding
/// (postcard, UTF-8 checks, allocation) is about as much work as applying.
fn replay_log<W: Default>(
    dir: &Path,
    key: u64,
    engine: &Engine<W>,
    loaded: &snapshot::Loaded,
    stopped_cleanly: bool,
    report: &mut RecoveryReport,
) -> Result<(SegmentLog<DirStorage>, u64), RecoveryError> {
    let (decoded_tx, decoded_rx) = std::sync::mpsc::sync_channel::<Vec<Decoded>>(8);
    let storage = DirStorage::new(dir)?;
    let mut log_bytes = 0;
    let (log, dropped_tail) = std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            let mut batch = Vec::with_capacity(REPLAY_BATCH);
            let mut sequence = Sequence::after(loaded);
            let replayed = SegmentLog::replay(
                storage,
                DEFAULT_SEGMENT_BYTES,
                key,
                stopped_cleanly,
                |file: &str, offset, bytes: &[u8]| {
                    let damaged = |reason: String| RecoveryError::Corruption {
                        file: file.into(),
                        offset,
                        reason,
                    };
                    let (lsn, change) =
                        format::decode_record(bytes).map_err(|error| match error {
                            format::FormatError::Newer { .. } => {
                                RecoveryError::NewerFormat(error.to_string())
                            }
                            format::FormatError::Damaged(reason) => damaged(reason),
                        })?;
                    sequence.check(lsn).map_err(damaged)?;
                    batch.push((lsn, change, bytes.len()));
                    if batch.len() == REPLAY_BATCH {
                        // The applier only stops once this thread is done, so this cannot fail.
                        let _ = decoded_tx.send(std::mem::replace(
                            &mut batch,
                            Vec::with_capacity(REPLAY_BATCH),
                        ));
                    }
                    Ok::<(), RecoveryError>(())
                },
            );
            if !batch.is_empty() {
                let _ = decoded_tx.send(batch);
            }
            replayed
        });
        for batch in decoded_rx {
            for (lsn, change, len) in batch {
                log_bytes += (len + record::HEADER_BYTES) as u64;
                report.next_lsn = report.next_lsn.max(lsn + 1);
                if covered(loaded, lsn, &change) {
                    report.skipped += 1;
                } else {
                    engine.replay_change(change);
                    report.replayed += 1;
                }
            }
        }
        reader.join().unwrap_or_else(|_| {
            Err(RecoveryError::Io(std::io::Error::other(
                "log reader panicked",
            )))
        })
    })?;
    report.dropped_tail = dropped_tail;
    Ok((log, log_bytes))
}

/// The numbers of the records replayed, which must follow each other from where the snapshot
/// (or, without one, the log's start) leaves off: a gap is a segment or snapshot gone.
struct Sequence {
    /// The number the next record must have; `None` before the first.
    next: Option<u64>,
    snapshot: bool,
    first_lsn: u64,
}

impl Sequence {
    fn after(loaded: &snapshot::Loaded) -> Sequence {
        Sequence {
            next: None,
            snapshot: loaded.file.is_some(),
            first_lsn: loaded.first_lsn,
        }
    }

    fn check(&mut self, lsn: u64) -> Result<(), String> {
        match self.next {
            // Records from before the snapshot may still be there (their segments are
            // removed only after it is written); none may be missing after it.
            None if lsn > self.first_lsn => {
                return Err(if self.snapshot {
                    format!(
                        "the log resumes at record {lsn} but the snapshot holds only the records \
                         before {}: those between are missing (a log segment removed?)",
                        self.first_lsn
                    )
                } else {
                    format!(
                        "the log starts at record {lsn} and there is no snapshot: the snapshot \
                         or the first segments holding the records before it are missing"
                    )
                });
            }
            Some(next) if lsn != next => {
                return Err(format!(
                    "record {lsn} follows record {}: the log is out of sequence (a log segment \
                     removed or put back?)",
                    next - 1
                ));
            }
            _ => {}
        }
        self.next = Some(lsn + 1);
        Ok(())
    }
}

/// A log record decoded for replay: its sequence number, change and size.
type Decoded = (u64, crate::engine::Change, usize);

/// Records handed from the log reader to the applier at a time.
const REPLAY_BATCH: usize = 1024;

const KEY_MAGIC: [u8; 8] = *b"ORDLYKEY";
/// The key of a first start until its first record is synced.
const FIRST_KEY: &str = "KEY.new";

/// Reads the directory's log key (`batch::Seal`), or makes one if the directory has none yet:
/// as `KEY.new`, written to the side and synced, which `open` renames into place once the
/// first record is synced too, so a directory holding `KEY` always holds data.
fn log_key(dir: &Path) -> Result<u64, RecoveryError> {
    let path = dir.join("KEY");
    let damaged = |reason: &str| RecoveryError::Corruption {
        file: "KEY".into(),
        offset: 0,
        reason: reason.into(),
    };
    match std::fs::read(&path) {
        Ok(bytes) => {
            let valid = bytes.len() == 20
                && bytes[..8] == KEY_MAGIC
                && crc32c::crc32c(&bytes[..16]).to_le_bytes() == bytes[16..20];
            if !valid {
                return Err(damaged("not a log key"));
            }
            Ok(u64::from_le_bytes(
                bytes[8..16].try_into().expect("8 bytes"),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A key is `KEY.new` until the first start has synced its first record (`open`):
            // one left alone is a first start cut off before that, which served nothing, so
            // what it wrote goes with it.
            if dir.join(FIRST_KEY).exists() {
                for entry in std::fs::read_dir(dir)? {
                    let entry = entry?;
                    if entry.file_name().to_string_lossy().ends_with(".wal") {
                        std::fs::remove_file(entry.path())?;
                    }
                }
                std::fs::remove_file(dir.join(FIRST_KEY))?;
            }
            for entry in std::fs::read_dir(dir)? {
                let entry = entry?;
                if !entry.file_name().to_string_lossy().ends_with(".wal") {
                    continue;
                }
                let mut head = [0u8; 8];
                let read = std::io::Read::read(&mut File::open(entry.path())?, &mut head)?;
                if read == head.len() && head == batch::MAGIC {
                    return Err(damaged(
                        "missing, and the log segments sealed with it cannot be checked",
                    ));
                }
            }
            let key = uuid::Uuid::new_v4().as_u64_pair().0;
            let mut bytes = KEY_MAGIC.to_vec();
            bytes.extend_from_slice(&key.to_le_bytes());
            let checksum = crc32c::crc32c(&bytes);
            bytes.extend_from_slice(&checksum.to_le_bytes());
            storage::write_whole(dir, FIRST_KEY, &bytes)?;
            Ok(key)
        }
        Err(e) => Err(e.into()),
    }
}

/// True when the snapshot already contains this change.
pub(crate) fn covered(loaded: &snapshot::Loaded, lsn: u64, change: &crate::engine::Change) -> bool {
    use crate::engine::Change;
    if lsn < loaded.first_lsn {
        return true;
    }
    match change {
        Change::CreateQueue { .. } | Change::DeleteQueue { .. } => lsn < loaded.registry_lsn,
        Change::Queue { uid, .. } => loaded.queue_lsns.get(uid).is_some_and(|cut| lsn < *cut),
        Change::Topic { name, .. } | Change::DeleteTopic { name } => {
            loaded.topic_lsns.get(&**name).is_some_and(|cut| lsn < *cut)
        }
        Change::Signer { .. } => loaded.signer,
        Change::ReceiptKey { .. } => loaded.receipt_key,
        Change::Outbox(_) => loaded.outbox_lsn.is_some_and(|cut| lsn < cut),
        Change::Token(_) => false,
        Change::MoveTask(_) => loaded.move_task_lsn.is_some_and(|cut| lsn < cut),
        Change::Mobile(_) => loaded.mobile_lsn.is_some_and(|cut| lsn < cut),
        Change::Relay(_) => loaded.relay_lsn.is_some_and(|cut| lsn < cut),
    }
}

#[cfg(test)]
mod damage_tests;
#[cfg(test)]
mod dedup_tests;
#[cfg(test)]
mod mobile_tests;
#[cfg(test)]
mod power_cut_tests;
#[cfg(test)]
mod relay_tests;
#[cfg(test)]
mod reopen_props;
#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod tests;
