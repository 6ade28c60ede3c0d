//! The write-ahead log: changes queue up in memory, one writer thread appends whatever has
//! gathered as one batch and syncs it once (group commit), and requests wait until the batch
//! holding their changes is durable before they are answered.
//!
//! Each record is the change's log sequence number with the format version (8 bytes) followed
//! by the change in postcard (see `format`). Numbers are handed out under the same lock that queues the record, so
//! the log holds records in number order.
//!
//! Changes that belong together (`ChangeLog::hold`) are never split between two writes: the
//! writer takes records only up to where the groups still open began, and a batch is whole
//! or dropped at recovery, so a crash keeps a group entirely or not at all. Groups are short
//! (in-memory work under the engine's locks), so the writer is held back for microseconds.

use crate::worker::Thread;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use tokio::sync::watch;

use super::format;
use super::record::Buffer;
use crate::engine::changes::{Change, ChangeLog};
pub use shared::{Acknowledge, Durable};
use shared::{Arrivals, Pending, Shared, KEEP_BUFFER_BYTES};
pub use sink::{Collect, Collector, FsyncMode, LogSink, Wake};
use std::sync::MutexGuard;
use write_loop::Writer;

#[cfg(test)]
mod acknowledge_tests;
mod collect;
#[cfg(test)]
mod collect_tests;
mod shared;
mod sink;
mod write_loop;

/// A request's changes could not be made durable.
#[derive(Debug, thiserror::Error)]
#[error("the write-ahead log failed; changes are no longer being persisted")]
pub struct LogFailed;

thread_local! {
    /// Where a change is encoded before it is copied into the queue of records.
    static ENCODE_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

pub struct LogWriter {
    shared: Arc<Shared>,
    writer: Mutex<Option<Thread<()>>>,
}

impl LogWriter {
    /// A log that queues changes but writes nothing until `start`: the engine gets it
    /// before recovery, so the queues it restores record their later changes.
    pub fn new() -> Arc<LogWriter> {
        let (durable, _) = watch::channel(Durable {
            lsn: 0,
            failed: false,
        });
        Arc::new(LogWriter {
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
                collector: std::sync::OnceLock::new(),
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
        let wake: Wake = {
            let shared = shared.clone();
            Arc::new(move || {
                shared
                    .pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .finished = true;
                shared.work.notify_one();
            })
        };
        let collector = log.collector();
        let held = Arc::new(Mutex::new(Some(Writer::new(
            shared.clone(),
            log,
            mode,
            wake,
        ))));
        if let Some(collector) = collector {
            let collect = collect::collect_for(&held, &shared);
            let _ = (shared.collector).set(Box::new(move || collector(collect.clone())));
        }
        // Woken by what it shares with the server (records, closing, writes finished), not by
        // its `Stop`.
        let writer = Thread::start("log-writer", move |_| write_loop::run(&held))
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
    /// look at what is durable knowing nothing more is on its way (no sleeping in hope). For a
    /// sink that writes one batch at a time only: one that begins writes sleeps with some
    /// still under way.
    #[cfg(test)]
    pub fn wait_until_idle(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
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

    /// Blocks until the log is durable as `wanted` says, or `limit` has passed; whether it got
    /// there (tests: the durable state is watched, not polled).
    #[cfg(test)]
    pub fn wait_for_durable(&self, wanted: Durable, limit: std::time::Duration) -> bool {
        let mut rx = self.shared.durable.subscribe();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let reached = rx.wait_for(|d| *d == wanted);
            matches!(tokio::time::timeout(limit, reached).await, Ok(Ok(_)))
        })
    }

    /// How often the writer's thread has been woken from waiting for work, and whether it
    /// waits now.
    #[cfg(test)]
    pub fn writer_wakes(&self) -> (u64, bool) {
        let pending = self.lock();
        (pending.wakes, pending.sleeping)
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
    pub async fn wait(&self, lsn: u64) -> Result<(), LogFailed> {
        // Only requests with something to write count: a load of reads that log nothing would
        // make the log look busy, and a rare write would wait for company that never comes.
        if self.shared.durable.borrow().lsn < lsn {
            self.shared.arrivals.note();
        }
        self.durable_to(lsn).await
    }

    /// Completes once every record submitted so far is durable, or the log failed first: what a
    /// shard handed to another node waits for before it gives its lease up.
    pub async fn submitted_durable(&self) -> Result<(), LogFailed> {
        self.durable_to(self.shared.next_lsn.load(Ordering::SeqCst))
            .await
    }

    /// Completes once every record below `lsn` is durable, or the log failed first.
    async fn durable_to(&self, lsn: u64) -> Result<(), LogFailed> {
        let mut rx = self.shared.durable.subscribe();
        let reached = rx
            .wait_for(|d| d.failed || d.lsn >= lsn)
            .await
            .map_err(|_| LogFailed)?;
        if reached.lsn >= lsn {
            Ok(())
        } else {
            Err(LogFailed)
        }
    }

    /// Blocks until every record numbered below `lsn` is durable, for a thread outside the
    /// runtime (a snapshot's).
    pub fn wait_blocking(&self, lsn: u64) -> Result<(), LogFailed> {
        let durable = self.durable();
        if durable.lsn >= lsn {
            return Ok(());
        }
        if durable.failed {
            return Err(LogFailed);
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|_| LogFailed)?;
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
        // Held while the writer ends: a second caller returns once it has.
        let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(writer) = writer.take() {
            writer.join();
        }
    }

    /// Has the records ready written: collected by the sink's thread where the writer may
    /// sleep on (one collect asked for at a time, which takes every record come until it
    /// runs), otherwise by the writer, woken if it sleeps.
    fn hand_on<'l>(&'l self, mut pending: MutexGuard<'l, Pending>) {
        if pending.collect_ready
            && pending.ready() > 0
            && !pending.closing
            && !self.shared.arrivals.busy_within(pending.alone_within)
        {
            if std::mem::replace(&mut pending.collect_asked, true) {
                return;
            }
            drop(pending);
            let asked = (self.shared.collector.get()).is_some_and(|collector| collector());
            if asked {
                return;
            }
            pending = self.lock();
            pending.collect_asked = false;
            pending.collect_ready = false;
        }
        let mut wake = std::mem::take(&mut pending.writer_asleep);
        if pending.wait_over() {
            pending.wake_at = 0;
            wake = true;
        }
        drop(pending);
        if wake {
            self.shared.work.notify_one();
        }
    }

    /// Makes the log look busy for its batch wait, as requests 10 µs apart would (tests).
    #[cfg(test)]
    pub fn seem_busy(&self) {
        self.shared.arrivals.note_busy();
    }

    /// How many writes were begun by a collect (tests).
    #[cfg(test)]
    pub fn collected(&self) -> u64 {
        self.lock().collected
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for LogWriter {
    /// A log nobody holds any more (a server dropped without stopping, as tests do) lets
    /// its writer finish what is queued and end, with whatever it holds (a database
    /// connection) rather than keep it for the life of the process.
    fn drop(&mut self) {
        self.lock().closing = true;
        self.shared.work.notify_one();
    }
}

impl ChangeLog for LogWriter {
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
            if pending.holders == 0 {
                self.hand_on(pending);
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
        if pending.ready() > 0 || pending.closing {
            self.hand_on(pending);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::shared::Records;
    use super::{Change, ChangeLog, FsyncMode, LogWriter};

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

    /// A sink whose append takes the log's lease away while it writes, as a lease keeper that
    /// finds another leader does.
    fn deposed_while_writing(log_writer: std::sync::Weak<LogWriter>) -> Scripted {
        Scripted {
            on_append: Box::new(move |_| {
                if let Some(log_writer) = log_writer.upgrade() {
                    log_writer.fail_for_good();
                }
            }),
            wait: Duration::ZERO,
            batch_bytes: u64::MAX,
        }
    }

    /// A sink that writes nothing: it runs `on_append` at each append and asks for `wait`
    /// between writes.
    struct Scripted {
        /// Called with each append's number of records.
        on_append: Box<dyn FnMut(usize) + Send>,
        wait: Duration,
        batch_bytes: u64,
    }

    impl super::LogSink for Scripted {
        fn append(&mut self, records: &[&[u8]]) -> Result<(), crate::persist::log_error::LogError> {
            (self.on_append)(records.len());
            Ok(())
        }
        fn sync(&mut self) -> Result<(), crate::persist::log_error::LogError> {
            Ok(())
        }
        fn poisoned(&self) -> bool {
            false
        }
        fn rotate(&mut self) -> Result<u64, crate::persist::log_error::LogError> {
            Ok(0)
        }
        fn remove_before(
            &mut self,
            _number: u64,
        ) -> Result<(), crate::persist::log_error::LogError> {
            Ok(())
        }
        fn batch_wait(&self) -> Duration {
            self.wait
        }
        fn batch_bytes(&self) -> u64 {
            self.batch_bytes
        }
    }

    #[test]
    fn a_log_failed_for_good_while_a_round_is_written_stays_failed() {
        let log_writer = LogWriter::new();
        log_writer.start(
            deposed_while_writing(Arc::downgrade(&log_writer)),
            1,
            FsyncMode::Always,
        );
        // The round being written when the lease went is durable all the same (a waiter that
        // looked between the failure and the round's end was told the outcome is unknown).
        log_writer.submit(&sample_change());
        let target = log_writer.next_lsn();
        log_writer.wait_until_idle();
        assert!(log_writer.durable().lsn >= target);
        assert!(
            log_writer.failed(),
            "acknowledging again after failing for good"
        );
        // A later change is refused, not left waiting.
        log_writer.submit(&sample_change());
        let target = log_writer.next_lsn();
        let waited = runtime().block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(10), log_writer.wait(target)).await
        });
        assert!(matches!(waited, Ok(Err(_))), "{waited:?}");
        log_writer.close();
    }

    #[test]
    fn requests_count_as_busy_only_while_they_come_closer_than_a_third_of_the_wait() {
        let arrivals = super::shared::Arrivals::new();
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

    /// A log whose sink notes when each append came and asks for `wait` between writes.
    /// Each append's time and number of records.
    type Appends = Arc<std::sync::Mutex<Vec<(std::time::Instant, usize)>>>;

    fn timed_log(wait: Duration) -> (Arc<LogWriter>, Appends) {
        timed_log_of(wait, u64::MAX)
    }

    /// `timed_log`, its sink's writes full at `batch_bytes`.
    fn timed_log_of(wait: Duration, batch_bytes: u64) -> (Arc<LogWriter>, Appends) {
        let appends = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log_writer = LogWriter::new();
        let noted = appends.clone();
        log_writer.start(
            Scripted {
                on_append: Box::new(move |records| {
                    noted
                        .lock()
                        .unwrap()
                        .push((std::time::Instant::now(), records))
                }),
                wait,
                batch_bytes,
            },
            1,
            FsyncMode::Always,
        );
        (log_writer, appends)
    }

    fn logged(log_writer: &LogWriter) {
        log_writer.submit(&sample_change());
        let target = log_writer.next_lsn();
        let waited = runtime().block_on(async {
            tokio::time::timeout(Duration::from_secs(10), log_writer.wait(target)).await
        });
        assert!(matches!(waited, Ok(Ok(()))), "{waited:?}");
    }

    #[test]
    fn a_quiet_log_writes_each_request_at_once() {
        // A few requests after a quiet start: were the writer to wait, the second would wait
        // 30 s and time out.
        let (log_writer, appends) = timed_log(Duration::from_secs(30));
        for _ in 0..3 {
            logged(&log_writer);
        }
        assert_eq!(appends.lock().unwrap().len(), 3);
        log_writer.close();
    }

    /// Submits `count` records at once and waits until they are durable.
    fn logged_together(log_writer: &LogWriter, count: usize) {
        log_writer.hold_writes(true);
        for _ in 0..count {
            log_writer.submit(&sample_change());
        }
        log_writer.hold_writes(false);
        let target = log_writer.next_lsn();
        let waited = runtime().block_on(async {
            tokio::time::timeout(Duration::from_secs(5), log_writer.wait(target)).await
        });
        assert!(matches!(waited, Ok(Ok(()))), "{waited:?}");
    }

    /// A busy log whose last write carried three records.
    fn busy_after_three(wait: Duration) -> (Arc<LogWriter>, Appends) {
        busy_after_three_of(wait, u64::MAX)
    }

    /// `busy_after_three`, its sink's writes full at `batch_bytes`.
    fn busy_after_three_of(wait: Duration, batch_bytes: u64) -> (Arc<LogWriter>, Appends) {
        let (log_writer, appends) = timed_log_of(wait, batch_bytes);
        // Requests as a busy server sees them.
        for _ in 0..100 {
            log_writer.shared.arrivals.note();
        }
        logged_together(&log_writer, 3);
        assert_eq!(appends.lock().unwrap()[0].1, 3);
        (log_writer, appends)
    }

    #[test]
    fn a_busy_log_lets_the_next_write_wait_for_company() {
        let wait = Duration::from_millis(50);
        let (log_writer, appends) = busy_after_three(wait);
        // Fewer than the last write carried: the rest may yet come.
        logged(&log_writer);
        let appends = appends.lock().unwrap().clone();
        assert_eq!(appends.len(), 2);
        assert!(
            appends[1].0 - appends[0].0 >= wait,
            "the second write came {:?} after the first",
            appends[1].0 - appends[0].0
        );
        log_writer.close();
    }

    #[test]
    fn a_busy_log_writes_once_as_many_came_as_its_last_write_carried() {
        // As clients that each wait for their answer come back: were the writer to wait out
        // its 30 s, the third request would time out.
        let (log_writer, appends) = busy_after_three(Duration::from_secs(30));
        writes_once_three_came(&log_writer, &appends);
    }

    /// Whether the writer's state came to what `wanted` says within 5 s. Polled: the writer
    /// tells no one when it begins a wait.
    fn until_pending(log_writer: &LogWriter, wanted: impl Fn(&super::Pending) -> bool) -> bool {
        (0..1000).any(|_| {
            std::thread::sleep(Duration::from_millis(5));
            wanted(&log_writer.lock())
        })
    }

    /// Submits two records to a busy log whose last write carried three: the writer waits
    /// for a third, and writes the three together once it comes.
    fn writes_once_three_came(log_writer: &LogWriter, appends: &Appends) {
        for _ in 0..2 {
            log_writer.submit(&sample_change());
        }
        let waiting = until_pending(log_writer, |pending| pending.wake_at == 3);
        assert!(waiting, "the writer never waited for the third record");
        logged(log_writer);
        let appends = appends.lock().unwrap().clone();
        let carried: Vec<usize> = appends.iter().map(|(_, records)| *records).collect();
        assert_eq!(carried, [3, 3], "each write's records");
        log_writer.close();
    }

    #[test]
    fn a_busy_log_writes_once_its_records_fill_the_sinks_batch_bytes() {
        // Two records fill the sink's write where the last write carried three: were the
        // writer to wait for a third, or out its 30 s, the second would time out.
        let record = crate::persist::format::encode_change(
            &sample_change(),
            crate::persist::record::Buffer(vec![0; 8]),
        )
        .expect("encoded")
        .len() as u64;
        let (log_writer, appends) = busy_after_three_of(Duration::from_secs(30), 2 * record);
        log_writer.submit(&sample_change());
        let waiting = until_pending(&log_writer, |pending| {
            pending.wake_at == 3 && pending.wake_at_ready_bytes == 2 * record
        });
        assert!(waiting, "one record never waited for company");
        logged(&log_writer);
        let appends = appends.lock().unwrap().clone();
        let carried: Vec<usize> = appends.iter().map(|(_, records)| *records).collect();
        assert_eq!(carried, [3, 2], "each write's records");
        log_writer.close();
    }

    #[test]
    fn a_round_with_nothing_to_write_leaves_the_next_wait_as_it_was() {
        // A new segment begun between two writes: the clients are as many as before, and the
        // next write still waits for the three, rather than go with the first that comes.
        let (log_writer, appends) = busy_after_three(Duration::from_secs(30));
        log_writer.rotate().expect("rotated");
        writes_once_three_came(&log_writer, &appends);
    }
}
