//! Where the writer's batches go, and when they are made durable.

use std::time::Duration;

use super::shared::Acknowledge;
use crate::persist::log_error::LogError;
use crate::persist::segment_log::SegmentLog;
use crate::persist::storage::Storage;

/// Called once the outcome of a write begun with `LogSink::begin` is known, unless its
/// `Acknowledge` is called instead.
pub type Wake = std::sync::Arc<dyn Fn() + Send + Sync>;

/// Takes a log's ready records and begins their write, where the sink's writes are finished
/// (`LogSink::collector`; see `collect`): it never blocks.
pub type Collect = std::sync::Arc<dyn Fn() + Send + Sync>;

/// Asks whatever finishes a sink's writes to run a collect soon; false if it has gone.
pub type Collector = Box<dyn Fn(Collect) -> bool + Send + Sync>;

/// Where the writer's batches go: the data directory's segments (`SegmentLog`), or a
/// database's log table (`persist::database`). One writer, one batching and retry policy for
/// both.
pub trait LogSink: Send + 'static {
    /// Appends records as one batch, whole or not at all; a failure is undone, so the same
    /// records (with later ones after them) can be appended again.
    fn append(&mut self, records: &[&[u8]]) -> Result<(), LogError>;
    /// Makes everything appended so far durable.
    fn sync(&mut self) -> Result<(), LogError>;
    /// The sink takes no more writes, ever (a failed sync, or another node leads now).
    fn poisoned(&self) -> bool;
    /// Starts a new part of the log after everything appended (for a snapshot); returns the
    /// number that `remove_before` is later given to drop what came before it.
    fn rotate(&mut self) -> Result<u64, LogError>;
    /// Drops the parts of the log numbered below `number` (a snapshot covers them).
    fn remove_before(&mut self, number: u64) -> Result<(), LogError>;
    /// How long, while requests come often, the writer lets the next write wait after the
    /// last one so that more requests share it: worth it where each write has a large fixed
    /// cost (a database's commit), not for a file.
    fn batch_wait(&self) -> Duration {
        Duration::ZERO
    }
    /// The bytes of records that end a batch wait however few requests they are: a write this
    /// large costs the sink little more a byte than a larger one, so waiting for more only
    /// holds back the requests it carries.
    fn batch_bytes(&self) -> u64 {
        u64::MAX
    }
    /// Whether each write is durable once appended (a database's insert commits), `sync`
    /// having nothing left to do: the log's sync times are then its writes' (`GET /metrics`).
    fn durable_once_appended(&self) -> bool {
        false
    }
    /// How many writes may be under way at once. A sink that allows more than one is written
    /// through `begin` and `finish` (and `append` only for a write tried again after a
    /// failure, alone), and each of its writes is durable once finished.
    fn overlap(&self) -> usize {
        1
    }
    /// Whether the writer writes through `begin` and `finish`: where more than one write may
    /// be under way, or where writes are finished by another thread, which can then
    /// acknowledge them without the writer's thread waiting for them or being woken.
    fn begins(&self) -> bool {
        self.overlap() > 1
    }
    /// Starts writing `records` as one batch after the writes begun before it and returns
    /// without waiting for it; once its outcome is known (`finish`), `acknowledge` is called
    /// if given and the write succeeded, `wake` otherwise. `acknowledge` comes with a write
    /// begun while none was under way, so that no write before it can still fail.
    fn begin(
        &mut self,
        _records: &[&[u8]],
        _wake: &Wake,
        _acknowledge: Option<Acknowledge>,
    ) -> Result<(), LogError> {
        Err(LogError::Io(std::io::Error::other(
            "this log takes one write at a time",
        )))
    }
    /// `begin`, for a log whose requests come often (`write_loop::alone_within`), with no
    /// write under way. A sink whose writes are otherwise finished on a thread of its own may
    /// write this one on the caller's thread, which waits for it: a busy log's batch is worth
    /// a commit of its own, and handing it over would cost a thread switch there and one back.
    fn begin_busy(
        &mut self,
        records: &[&[u8]],
        wake: &Wake,
        acknowledge: Option<Acknowledge>,
    ) -> Result<(), LogError> {
        self.begin(records, wake, acknowledge)
    }
    /// The outcome of the oldest write begun and not finished yet, waiting for it if `wait`;
    /// `None` when none is under way or, not waiting, while it runs.
    fn finish(&mut self, _wait: bool) -> Option<Result<(), LogError>> {
        None
    }
    /// Where writes are finished outside the writer's thread: asks what finishes them to take
    /// a log's ready records and begin their write itself (`Collect`), which spares the
    /// writer's thread a wake-up. It is asked only while `collectable`.
    fn collector(&self) -> Option<Collector> {
        None
    }
    /// Whether a write may be begun now without the sink blocking its caller (nothing to ask
    /// the database first), and so where the collector runs (a runtime's task, say).
    fn collectable(&self) -> bool {
        false
    }
}

impl<S: Storage + 'static> LogSink for SegmentLog<S> {
    fn append(&mut self, records: &[&[u8]]) -> Result<(), LogError> {
        SegmentLog::append(self, records)
    }
    fn sync(&mut self) -> Result<(), LogError> {
        SegmentLog::sync(self)
    }
    fn poisoned(&self) -> bool {
        SegmentLog::poisoned(self)
    }
    fn rotate(&mut self) -> Result<u64, LogError> {
        SegmentLog::rotate(self)
    }
    fn remove_before(&mut self, number: u64) -> Result<(), LogError> {
        SegmentLog::remove_before(self, number)
    }
}

/// When the log is made durable with fsync, and therefore what a crash can lose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncMode {
    /// Before any request is answered: an acknowledged change survives power loss.
    Always,
    /// At most this long after a change is written: a power loss (not a process crash) can
    /// lose the last interval of acknowledged changes.
    Interval(Duration),
    /// Never explicitly: survives a process crash, not a power loss.
    Never,
}

impl std::str::FromStr for FsyncMode {
    type Err = String;
    fn from_str(value: &str) -> Result<Self, String> {
        match value {
            "always" => Ok(FsyncMode::Always),
            "never" => Ok(FsyncMode::Never),
            _ => value
                .strip_prefix("interval:")
                .and_then(|ms| ms.parse::<u64>().ok())
                .filter(|ms| *ms > 0)
                .map(|ms| FsyncMode::Interval(Duration::from_millis(ms)))
                .ok_or_else(|| "expected always, never or interval:MILLISECONDS".to_string()),
        }
    }
}
