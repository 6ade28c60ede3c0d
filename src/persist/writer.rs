//! The write-ahead journal: changes queue up in memory, one writer thread appends whatever has
//! gathered as one batch and syncs it once (group commit), and requests wait until the batch
//! holding their changes is durable before they are answered.
//!
//! Each record is the change's log sequence number with the format version (8 bytes) followed
//! by the change in postcard (see `format`). Numbers are handed out under the same lock that queues the record, so
//! the log holds records in number order.
//!
//! Changes that belong together (`Journal::hold`) are never split between two writes: the
//! writer takes records only up to where the groups still open began, and a batch is whole
//! or dropped at recovery, so a crash keeps a group entirely or not at all. Groups are short
//! (in-memory work under the engine's locks), so the writer is held back for microseconds.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::watch;

use super::format;
use super::log::{LogError, SegmentLog};
use super::record::Buffer;
use super::storage::Storage;
use crate::engine::changes::{Change, Journal};

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
use write_loop::Writer;

mod write_loop;

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

/// How far the log is durable: every record numbered below `lsn` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Durable {
    pub lsn: u64,
    /// A write or sync failed: nothing is acknowledged while it is set. A failed write is
    /// tried again (every `RETRY_EVERY`) and clears it once written and synced; a failed sync
    /// sets it for good (the page cache may have dropped what it held: restart to recover).
    pub failed: bool,
}

/// A request's changes could not be made durable.
#[derive(Debug, thiserror::Error)]
#[error("the write-ahead log failed; changes are no longer being persisted")]
pub struct JournalFailed;

/// Records one after another in one buffer. Submitters copy theirs in and the writer swaps
/// the whole buffer for its emptied one, so a steady stream allocates and frees nothing: a
/// record allocated on a runtime thread and freed by the writer made the two contend for the
/// allocator's lock (a futex call per record).
#[derive(Default)]
struct Records {
    bytes: Vec<u8>,
    /// Where each record ends in `bytes`.
    ends: Vec<usize>,
}

/// A buffer grown past this by a burst is let go once written, rather than kept for good.
const KEEP_BUFFER_BYTES: usize = 16 * 1024 * 1024;

/// How often a write that failed (out of descriptors, disk full) is tried again.
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// Records kept for a retry beyond this are dropped and the log stays failed for good.
/// Requests are refused while the log fails, so only background work adds records meanwhile.
const MAX_RETAINED_BYTES: usize = 256 * 1024 * 1024;

impl Records {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn push(&mut self, record: &[u8]) {
        self.bytes.extend_from_slice(record);
        self.ends.push(self.bytes.len());
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, end)| &self.bytes[start..*end])
    }

    /// Moves the records from index `at` on into `rest`, which must be empty.
    fn split_into(&mut self, at: usize, rest: &mut Records) {
        debug_assert!(rest.is_empty());
        let cut = at.checked_sub(1).map_or(0, |last| self.ends[last]);
        rest.bytes.extend_from_slice(&self.bytes[cut..]);
        rest.ends
            .extend(self.ends[at..].iter().map(|end| end - cut));
        self.bytes.truncate(cut);
        self.ends.truncate(at);
    }

    /// Copies every record of `other` after this one's (the rare path of a retry).
    fn extend_from(&mut self, other: &Records) {
        let base = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes);
        self.ends.extend(other.ends.iter().map(|end| end + base));
    }

    fn clear(&mut self) {
        if self.bytes.capacity() > KEEP_BUFFER_BYTES {
            *self = Records::default();
        }
        self.bytes.clear();
        self.ends.clear();
    }
}

thread_local! {
    /// Where a change is encoded before it is copied into the queue of records.
    static ENCODE_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

#[derive(Default)]
struct Pending {
    records: Records,
    /// Records handed to the writer so far: the position of `records[0]` among all records.
    taken: u64,
    /// Groups open (`Journal::hold`). Groups open at the same time form one region, which
    /// starts where the first of them did and ends when the last closes: their records
    /// interleave, so they can only be written together. The writer takes no record from
    /// `region_start` on while any is open.
    holders: usize,
    region_start: u64,
    /// A change could not even be encoded: the log can never hold everything again.
    lost: bool,
    /// A snapshot waits for the writer to start a new segment.
    rotate: Option<std::sync::mpsc::Sender<Result<(u64, u64), String>>>,
    remove_before: Option<u64>,
    closing: bool,
    /// The writer sleeps on `Shared::work` and nobody has woken it yet: only then does a
    /// submission pay for a wake-up call (it used to make one per sync while the writer
    /// was busy syncing and not listening).
    writer_asleep: bool,
    /// The writer sleeps until a failed write is due to be tried again (tests look at it).
    retry_scheduled: bool,
    /// Tests hold the writer back (`FileJournal::hold_writes`): records queue, none is taken.
    held: bool,
}

struct Shared {
    pending: Mutex<Pending>,
    work: Condvar,
    next_lsn: AtomicU64,
    durable: watch::Sender<Durable>,
    /// Bytes appended since the last snapshot, to decide when to take the next one.
    bytes_since_snapshot: AtomicU64,
    /// The snapshotter waits for `bytes_since_snapshot` to reach this (`u64::MAX`: nobody
    /// waits), and is woken through `log_grown` once it does.
    wake_at_bytes: AtomicU64,
    log_grown: tokio::sync::Notify,
    /// Records, bytes and sync times, for `GET /metrics`.
    metrics: Arc<super::log_metrics::LogMetrics>,
    arrivals: Arrivals,
}

/// How often requests come to wait for the log, so that the writer can tell a busy log, where
/// a short wait lets several requests share a write, from a quiet one, where it would only
/// delay the one request there is.
struct Arrivals {
    origin: std::time::Instant,
    /// When the last request came, in nanoseconds from `origin`.
    last: AtomicU64,
    /// The mean time between requests, in nanoseconds (a moving average over about the last
    /// eight).
    gap: AtomicU64,
}

/// A pause longer than this counts as this long, so that the busy times after a long quiet
/// one soon count again (after about a hundred requests close together).
const LONGEST_GAP: Duration = Duration::from_secs(60);

impl Arrivals {
    fn new() -> Self {
        Arrivals {
            origin: std::time::Instant::now(),
            last: AtomicU64::new(0),
            gap: AtomicU64::new(LONGEST_GAP.as_nanos() as u64),
        }
    }

    fn note(&self) {
        self.note_at(self.origin.elapsed());
    }

    /// Notes a request come `at` after `origin`.
    fn note_at(&self, at: Duration) {
        let now = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
        let since = now.saturating_sub(self.last.swap(now, Ordering::Relaxed));
        let sample = since.min(LONGEST_GAP.as_nanos() as u64);
        // Two requests noted at once may each miss the other's update: the figure only guides.
        let mean = self.gap.load(Ordering::Relaxed);
        self.gap
            .store(mean - mean / 8 + sample / 8, Ordering::Relaxed);
    }

    /// Whether at least three more requests are likely within `wait`. (Two let a paced load
    /// of a few thousand requests a second count as busy now and then, and wait for nothing.)
    fn busy_within(&self, wait: Duration) -> bool {
        3 * self.gap.load(Ordering::Relaxed) <= wait.as_nanos() as u64
    }
}

pub struct FileJournal {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl FileJournal {
    /// A journal that queues changes but writes nothing until `start`: the engine gets it
    /// before recovery, so the queues it restores record their later changes.
    pub fn new() -> Arc<FileJournal> {
        let (durable, _) = watch::channel(Durable {
            lsn: 0,
            failed: false,
        });
        Arc::new(FileJournal {
            shared: Arc::new(Shared {
                pending: Mutex::new(Pending::default()),
                work: Condvar::new(),
                next_lsn: AtomicU64::new(0),
                durable,
                bytes_since_snapshot: AtomicU64::new(0),
                wake_at_bytes: AtomicU64::new(u64::MAX),
                log_grown: tokio::sync::Notify::new(),
                metrics: Default::default(),
                arrivals: Arrivals::new(),
            }),
            writer: Mutex::new(None),
        })
    }

    /// Starts the writer thread over an opened log whose next record is numbered `next_lsn`.
    pub fn start(&self, log: impl LogSink, next_lsn: u64, mode: FsyncMode) {
        assert!(
            self.lock().records.is_empty(),
            "nothing is submitted during recovery"
        );
        self.shared.next_lsn.store(next_lsn, Ordering::SeqCst);
        self.shared.durable.send_modify(|d| d.lsn = next_lsn);
        let shared = self.shared.clone();
        let writer = std::thread::Builder::new()
            .name("orderly-wal".into())
            .spawn(move || Writer::new(&shared, log, mode).run())
            .expect("spawn the log writer thread");
        *self.writer.lock().unwrap_or_else(|p| p.into_inner()) = Some(writer);
    }

    /// The log's figures (records, bytes, sync and snapshot times).
    pub fn metrics(&self) -> Arc<super::log_metrics::LogMetrics> {
        self.shared.metrics.clone()
    }

    pub fn durable(&self) -> Durable {
        *self.shared.durable.borrow()
    }

    /// Blocks until the writer has taken every record it may and gone to sleep, so a test can
    /// look at what is durable knowing nothing more is on its way (no sleeping in hope).
    #[cfg(test)]
    pub fn wait_until_idle(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            {
                let pending = self.lock();
                if pending.writer_asleep && pending.ready() == 0 {
                    return;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the log writer never went idle"
            );
            std::thread::yield_now();
        }
    }

    /// Whether the idle writer will try a failed write again (see `wait_until_idle`).
    #[cfg(test)]
    pub fn will_retry(&self) -> bool {
        self.lock().retry_scheduled
    }

    pub fn failed(&self) -> bool {
        self.durable().failed
    }

    /// Acknowledges nothing from now on: the log may no longer be this process's to write (a
    /// leader that could not renew its lease). Changes already waiting are refused too.
    pub fn fail_for_good(&self) {
        self.lock().lost = true;
        self.shared.durable.send_modify(|d| d.failed = true);
        self.shared.work.notify_one();
    }

    /// Waits until every record numbered below `lsn` is durable.
    pub async fn wait(&self, lsn: u64) -> Result<(), JournalFailed> {
        // Only requests with something to write count: a load of reads that log nothing would
        // make the log look busy, and a rare write would wait for company that never comes.
        if self.shared.durable.borrow().lsn < lsn {
            self.shared.arrivals.note();
        }
        self.durable_to(lsn).await
    }

    /// Completes once every record below `lsn` is durable, or the log failed first.
    async fn durable_to(&self, lsn: u64) -> Result<(), JournalFailed> {
        let mut rx = self.shared.durable.subscribe();
        let reached = rx
            .wait_for(|d| d.failed || d.lsn >= lsn)
            .await
            .map_err(|_| JournalFailed)?;
        if reached.lsn >= lsn {
            Ok(())
        } else {
            Err(JournalFailed)
        }
    }

    /// Blocks until every record numbered below `lsn` is durable, for a thread outside the
    /// runtime (a snapshot's).
    pub fn wait_blocking(&self, lsn: u64) -> Result<(), JournalFailed> {
        let durable = self.durable();
        if durable.lsn >= lsn {
            return Ok(());
        }
        if durable.failed {
            return Err(JournalFailed);
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|_| JournalFailed)?;
        runtime.block_on(self.durable_to(lsn))
    }

    /// Callers blocked in `wait` or `wait_blocking` now.
    #[cfg(test)]
    pub fn durability_waiters(&self) -> usize {
        self.shared.durable.receiver_count()
    }

    /// Holds the writer back (records queue, none is written) until called with false: a
    /// crash before a write, made to order (tests only: in process, or `test_hooks`).
    pub fn hold_writes(&self, held: bool) {
        self.lock().held = held;
        self.shared.work.notify_one();
    }

    /// Adds log bytes written before this process started (the log replayed at start).
    pub fn count_logged(&self, bytes: u64) {
        self.shared
            .bytes_since_snapshot
            .fetch_add(bytes, Ordering::Relaxed);
        self.shared.metrics.replayed(bytes);
    }

    pub fn bytes_since_snapshot(&self) -> u64 {
        self.shared.bytes_since_snapshot.load(Ordering::Relaxed)
    }

    /// Completes once the log written since the last snapshot holds at least `bytes` (the
    /// writer wakes the one waiter when it gets there, rather than being polled).
    pub async fn log_reaches(&self, bytes: u64) {
        let shared = &self.shared;
        loop {
            let grown = shared.log_grown.notified();
            tokio::pin!(grown);
            grown.as_mut().enable();
            shared.wake_at_bytes.store(bytes, Ordering::SeqCst);
            if self.bytes_since_snapshot() >= bytes {
                shared.wake_at_bytes.store(u64::MAX, Ordering::SeqCst);
                return;
            }
            grown.await;
        }
    }

    /// Asks the writer to start a new segment after everything queued so far; returns the
    /// new segment's number and the first sequence number that goes into it. Blocks.
    pub fn rotate(&self) -> Result<(u64, u64), String> {
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let mut pending = self.lock();
            pending.rotate = Some(tx);
        }
        self.shared.work.notify_one();
        rx.recv()
            .map_err(|_| "the log writer stopped".to_string())?
    }

    /// Deletes segments numbered below `segment` once a snapshot covers them.
    pub fn remove_segments_before(&self, segment: u64) {
        self.lock().remove_before = Some(segment);
        self.shared.work.notify_one();
    }

    /// Writes and syncs what is queued, then stops the writer. Later submissions are dropped.
    pub fn close(&self) {
        self.lock().closing = true;
        self.shared.work.notify_one();
        let writer = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for FileJournal {
    /// A journal nobody holds any more (a server dropped without stopping, as tests do) lets
    /// its writer finish what is queued and end, with whatever it holds (a database
    /// connection) rather than keep it for the life of the process.
    fn drop(&mut self) {
        self.lock().closing = true;
        self.shared.work.notify_one();
    }
}

impl Pending {
    /// How many records the writer may take: those before the open region, if any.
    fn ready(&self) -> usize {
        if self.held {
            return 0;
        }
        if self.holders == 0 {
            self.records.len()
        } else {
            (self.region_start - self.taken) as usize
        }
    }
}

impl Journal for FileJournal {
    fn submit(&self, change: &Change) {
        ENCODE_BUFFER.with_borrow_mut(|buffer| {
            // The sequence number goes in front once it is known; until then, room for it.
            buffer.clear();
            buffer.extend_from_slice(&[0; 8]);
            let encoded = format::encode_change(change, Buffer(std::mem::take(buffer)));
            *buffer = match encoded {
                Ok(record) => record,
                Err(error) => {
                    // Only a bug can get here (every change type serializes); refuse to go
                    // on acknowledging changes the log does not hold.
                    tracing::error!(%error, "a change could not be encoded");
                    self.lock().lost = true;
                    self.shared.durable.send_modify(|d| d.failed = true);
                    return;
                }
            };
            let mut pending = self.lock();
            let lsn = self.shared.next_lsn.fetch_add(1, Ordering::SeqCst);
            buffer[..8].copy_from_slice(&format::record_header(lsn));
            pending.records.push(buffer);
            // Inside an open group the writer is woken when the group closes.
            let wake = pending.holders == 0 && std::mem::take(&mut pending.writer_asleep);
            drop(pending);
            if wake {
                self.shared.work.notify_one();
            }
            if buffer.capacity() > KEEP_BUFFER_BYTES {
                *buffer = Vec::new();
            }
        });
    }

    fn next_lsn(&self) -> u64 {
        self.shared.next_lsn.load(Ordering::SeqCst)
    }

    fn hold(&self) {
        let mut pending = self.lock();
        if pending.holders == 0 {
            pending.region_start = pending.taken + pending.records.len() as u64;
        }
        pending.holders += 1;
    }

    fn release(&self) {
        let mut pending = self.lock();
        pending.holders = pending.holders.saturating_sub(1);
        let wake =
            (pending.ready() > 0 || pending.closing) && std::mem::take(&mut pending.writer_asleep);
        drop(pending);
        if wake {
            self.shared.work.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Change, FileJournal, FsyncMode, Journal, Records};

    fn contents(records: &Records) -> Vec<&[u8]> {
        records.iter().collect()
    }

    #[test]
    fn records_split_where_the_writer_must_stop_and_keep_their_bytes() {
        let mut records = Records::default();
        for record in [&b"one"[..], b"", b"three", b"four"] {
            records.push(record);
        }
        assert_eq!(contents(&records), [&b"one"[..], b"", b"three", b"four"]);
        let mut held = Records::default();
        records.split_into(2, &mut held);
        assert_eq!(contents(&records), [&b"one"[..], b""]);
        assert_eq!(contents(&held), [&b"three"[..], b"four"]);
        // Later records follow the held ones.
        held.push(b"five");
        assert_eq!(contents(&held), [&b"three"[..], b"four", b"five"]);
        let mut rest = Records::default();
        held.split_into(0, &mut rest);
        assert!(held.is_empty());
        assert_eq!(rest.len(), 3);
        rest.split_into(3, &mut held);
        assert!(held.is_empty() && rest.len() == 3);
        rest.clear();
        assert!(rest.is_empty() && rest.bytes.is_empty());
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    }

    fn sample_change() -> Change {
        Change::DeleteQueue {
            name: "q".into(),
            uid: 1,
            at: crate::engine::Timestamp(1),
        }
    }

    /// A sink whose append takes the journal's lease away while it writes, as a lease keeper that
    /// finds another leader does.
    fn deposed_while_writing(journal: std::sync::Weak<FileJournal>) -> Scripted {
        Scripted {
            on_append: Box::new(move || {
                if let Some(journal) = journal.upgrade() {
                    journal.fail_for_good();
                }
            }),
            wait: Duration::ZERO,
        }
    }

    /// A sink that writes nothing: it runs `on_append` at each append and asks for `wait`
    /// between writes.
    struct Scripted {
        on_append: Box<dyn FnMut() + Send>,
        wait: Duration,
    }

    impl super::LogSink for Scripted {
        fn append(&mut self, _records: &[&[u8]]) -> Result<(), super::LogError> {
            (self.on_append)();
            Ok(())
        }
        fn sync(&mut self) -> Result<(), super::LogError> {
            Ok(())
        }
        fn poisoned(&self) -> bool {
            false
        }
        fn rotate(&mut self) -> Result<u64, super::LogError> {
            Ok(0)
        }
        fn remove_before(&mut self, _number: u64) -> Result<(), super::LogError> {
            Ok(())
        }
        fn batch_wait(&self) -> Duration {
            self.wait
        }
    }

    #[test]
    fn a_journal_failed_for_good_while_a_round_is_written_stays_failed() {
        let journal = FileJournal::new();
        journal.start(
            deposed_while_writing(Arc::downgrade(&journal)),
            1,
            FsyncMode::Always,
        );
        // The round being written when the lease went is durable all the same (a waiter that
        // looked between the failure and the round's end was told the outcome is unknown).
        journal.submit(&sample_change());
        let target = journal.next_lsn();
        journal.wait_until_idle();
        assert!(journal.durable().lsn >= target);
        assert!(
            journal.failed(),
            "acknowledging again after failing for good"
        );
        // A later change is refused, not left waiting.
        journal.submit(&sample_change());
        let target = journal.next_lsn();
        let waited = runtime().block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(10), journal.wait(target)).await
        });
        assert!(matches!(waited, Ok(Err(_))), "{waited:?}");
        journal.close();
    }

    #[test]
    fn requests_count_as_busy_only_while_they_come_closer_than_a_third_of_the_wait() {
        let arrivals = super::Arrivals::new();
        let wait = Duration::from_micros(400);
        assert!(!arrivals.busy_within(wait), "busy before any request");
        let mut at = Duration::from_secs(5);
        // `count` requests, one every `every` after the last.
        let mut requests = |count: usize, every: Duration| {
            for _ in 0..count {
                at += every;
                arrivals.note_at(at);
            }
        };
        let (close, apart) = (Duration::from_micros(100), Duration::from_micros(300));
        // Every 100 µs: busy once the mean has come down from the long pause before.
        requests(150, close);
        assert!(arrivals.busy_within(wait));
        // Every 300 µs: three are no longer expected within the wait.
        requests(100, apart);
        assert!(!arrivals.busy_within(wait));
        requests(100, close);
        assert!(arrivals.busy_within(wait));
        // One quiet second ends it at once.
        requests(1, Duration::from_secs(1));
        assert!(!arrivals.busy_within(wait));
        // A long pause counts as a minute: about a hundred requests close together make it busy.
        requests(1, Duration::from_secs(3600));
        requests(70, close);
        assert!(!arrivals.busy_within(wait));
        requests(30, close);
        assert!(arrivals.busy_within(wait));
    }

    /// A journal whose sink notes when each append came and asks for `wait` between writes.
    fn timed_journal(
        wait: Duration,
    ) -> (
        Arc<FileJournal>,
        Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
    ) {
        let appends = Arc::new(std::sync::Mutex::new(Vec::new()));
        let journal = FileJournal::new();
        let noted = appends.clone();
        journal.start(
            Scripted {
                on_append: Box::new(move || noted.lock().unwrap().push(std::time::Instant::now())),
                wait,
            },
            1,
            FsyncMode::Always,
        );
        (journal, appends)
    }

    fn logged(journal: &FileJournal) {
        journal.submit(&sample_change());
        let target = journal.next_lsn();
        let waited = runtime().block_on(async {
            tokio::time::timeout(Duration::from_secs(10), journal.wait(target)).await
        });
        assert!(matches!(waited, Ok(Ok(()))), "{waited:?}");
    }

    #[test]
    fn a_quiet_log_writes_each_request_at_once() {
        // A few requests after a quiet start: were the writer to wait, the second would wait
        // 30 s and time out.
        let (journal, appends) = timed_journal(Duration::from_secs(30));
        for _ in 0..3 {
            logged(&journal);
        }
        assert_eq!(appends.lock().unwrap().len(), 3);
        journal.close();
    }

    #[test]
    fn a_busy_log_lets_the_next_write_wait_for_company() {
        let wait = Duration::from_millis(50);
        let (journal, appends) = timed_journal(wait);
        // Requests as a busy server sees them.
        for _ in 0..100 {
            journal.shared.arrivals.note();
        }
        logged(&journal);
        logged(&journal);
        let appends = appends.lock().unwrap().clone();
        assert_eq!(appends.len(), 2);
        assert!(
            appends[1] - appends[0] >= wait,
            "the second write came {:?} after the first",
            appends[1] - appends[0]
        );
        journal.close();
    }
}
