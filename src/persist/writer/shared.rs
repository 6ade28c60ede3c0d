//! What the requests' side and the writer thread share: the records queued, how far the log is
//! durable, and how often requests arrive.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// How far the log is durable: every record numbered below `lsn` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Durable {
    pub lsn: u64,
    /// A write or sync failed: nothing is acknowledged while it is set. A failed write is
    /// tried again (every `RETRY_EVERY`) and clears it once written and synced; a failed sync
    /// sets it for good (the page cache may have dropped what it held: restart to recover).
    pub failed: bool,
}

/// Records one after another in one buffer. Submitters copy theirs in and the writer swaps
/// the whole buffer for its emptied one, so a steady stream allocates and frees nothing: a
/// record allocated on a runtime thread and freed by the writer made the two contend for the
/// allocator's lock (a futex call per record).
#[derive(Default)]
pub(super) struct Records {
    pub(super) bytes: Vec<u8>,
    /// Where each record ends in `bytes`.
    ends: Vec<usize>,
}

/// A buffer grown past this by a burst is let go once written, rather than kept for good.
pub(super) const KEEP_BUFFER_BYTES: usize = 16 * 1024 * 1024;

/// How often a write that failed (out of descriptors, disk full) is tried again.
pub(super) const RETRY_EVERY: Duration = Duration::from_millis(250);

/// Records kept for a retry beyond this are dropped and the log stays failed for good.
/// Requests are refused while the log fails, so only background work adds records meanwhile.
pub(super) const MAX_RETAINED_BYTES: usize = 256 * 1024 * 1024;

impl Records {
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub(super) fn push(&mut self, record: &[u8]) {
        self.bytes.extend_from_slice(record);
        self.ends.push(self.bytes.len());
    }

    /// The bytes the records take in the log, as its figures count them.
    pub(super) fn written_bytes(&self) -> u64 {
        (self.bytes.len() + 8 * self.len()) as u64
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, end)| &self.bytes[start..*end])
    }

    /// The bytes of the first `count` records.
    pub(super) fn bytes_before(&self, count: usize) -> u64 {
        count
            .checked_sub(1)
            .map_or(0, |last| self.ends[last] as u64)
    }

    /// Moves the records from index `at` on into `rest`, which must be empty.
    pub(super) fn split_into(&mut self, at: usize, rest: &mut Records) {
        debug_assert!(rest.is_empty());
        let cut = at.checked_sub(1).map_or(0, |last| self.ends[last]);
        rest.bytes.extend_from_slice(&self.bytes[cut..]);
        rest.ends
            .extend(self.ends[at..].iter().map(|end| end - cut));
        self.bytes.truncate(cut);
        self.ends.truncate(at);
    }

    /// Copies every record of `other` after this one's (the rare path of a retry).
    pub(super) fn extend_from(&mut self, other: &Records) {
        let base = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes);
        self.ends.extend(other.ends.iter().map(|end| end + base));
    }

    pub(super) fn clear(&mut self) {
        if self.bytes.capacity() > KEEP_BUFFER_BYTES {
            *self = Records::default();
        }
        self.bytes.clear();
        self.ends.clear();
    }
}

#[derive(Default)]
pub(super) struct Pending {
    pub(super) records: Records,
    /// Records handed to the writer so far: the position of `records[0]` among all records.
    pub(super) taken: u64,
    /// Groups open (`ChangeLog::hold`). Groups open at the same time form one region, which
    /// starts where the first of them did and ends when the last closes: their records
    /// interleave, so they can only be written together. The writer takes no record from
    /// `region_start` on while any is open.
    pub(super) holders: usize,
    pub(super) region_start: u64,
    /// A change could not even be encoded: the log can never hold everything again.
    pub(super) lost: bool,
    /// A snapshot waits for the writer to start a new segment.
    pub(super) rotate: Option<std::sync::mpsc::Sender<Result<(u64, u64), String>>>,
    pub(super) remove_before: Option<u64>,
    pub(super) closing: bool,
    /// The writer sleeps on `Shared::work` and nobody has woken it yet: only then does a
    /// submission pay for a wake-up call (it used to make one per sync while the writer
    /// was busy syncing and not listening).
    pub(super) writer_asleep: bool,
    /// The writer waits out a batch wait until this many records are ready (0: for no
    /// count): the submission that makes them so many wakes it.
    pub(super) wake_at: usize,
    /// ... or until the records ready hold this many bytes (`LogSink::batch_bytes`).
    pub(super) wake_at_ready_bytes: u64,
    /// A write under way finished: the writer settles it (a sink that begins writes; set by
    /// `Acknowledge` too).
    pub(super) finished: bool,
    /// The writer sleeps with at most one write under way: one acknowledged needs no settling
    /// before the next records come.
    pub(super) one_under_way: bool,
    /// The writer sleeps with a sink that can begin writes itself (`LogSink::collector`).
    pub(super) collectable: bool,
    /// ... and with no write of its own unacknowledged: records submitted now are collected
    /// by the sink's thread instead of waking the writer (`collect`).
    pub(super) collect_ready: bool,
    /// How soon three requests must be expected for the writer to write on its own
    /// (`write_loop::alone_within`): while they come so often, no collect is asked for.
    pub(super) alone_within: Duration,
    /// A collect was asked for and has not run: later records wait for it.
    pub(super) collect_asked: bool,
    /// Writes begun by a collect (tests look at it).
    pub(super) collected: u64,
    /// The writer waits for work, and how often it has been woken from waiting (tests look
    /// at them).
    pub(super) sleeping: bool,
    pub(super) wakes: u64,
    /// The writer sleeps until a failed write is due to be tried again (tests look at it).
    pub(super) retry_scheduled: bool,
    /// Tests hold the writer back (`LogWriter::hold_writes`): records queue, none is taken.
    pub(super) held: bool,
}

pub(super) struct Shared {
    pub(super) pending: Mutex<Pending>,
    pub(super) work: Condvar,
    pub(super) next_lsn: AtomicU64,
    pub(super) durable: watch::Sender<Durable>,
    /// Bytes appended since the last snapshot, to decide when to take the next one.
    pub(super) bytes_since_snapshot: AtomicU64,
    /// The snapshotter waits for `bytes_since_snapshot` to reach this (`u64::MAX`: nobody
    /// waits), and is woken through `log_grown` once it does.
    pub(super) wake_at_bytes: AtomicU64,
    pub(super) log_grown: tokio::sync::Notify,
    /// Records, bytes and sync times, for `GET /metrics`.
    pub(super) metrics: Arc<crate::persist::log_metrics::LogMetrics>,
    pub(super) arrivals: Arrivals,
    /// Asks the sink's thread to collect this log's records (`collect`); set once, when the
    /// writer starts over a sink that has one. False if that thread has gone.
    pub(super) collector: std::sync::OnceLock<Box<dyn Fn() -> bool + Send + Sync>>,
}

/// Acknowledges a write on the thread that learns it succeeded, rather than waking the
/// writer's thread to do so: one thread switch fewer per write where a commit runs on a
/// thread of its own. The writer settles the write later, when something else wakes it.
pub struct Acknowledge {
    pub(super) shared: Arc<Shared>,
    /// Every record numbered below this is in the write or in one settled before it.
    pub(super) lsn: u64,
    /// The write's records and their bytes, counted once written: here, or by the writer if
    /// it settles the write first (whichever sets `counted`).
    pub(super) records: usize,
    pub(super) bytes: u64,
    pub(super) counted: Arc<AtomicBool>,
    /// When the write was taken, so that whichever counts it observes its sync time: taken
    /// to acknowledged (the writer may settle it much later, once the next records come).
    /// `None` where a write is not durable once appended (its sync is observed on its own).
    pub(super) taken_at: Option<std::time::Instant>,
}

impl Acknowledge {
    /// The write succeeded: its records are durable.
    pub fn succeeded(self) {
        if !self.counted.swap(true, Ordering::SeqCst) {
            self.shared.count_written(self.records, self.bytes);
            if let Some(taken_at) = self.taken_at {
                (self.shared.metrics.sync_seconds).observe(taken_at.elapsed().as_secs_f64());
            }
        }
        let mut pending = self
            .shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        pending.finished = true;
        // Asleep with nothing to take and no other write to settle, the writer is woken by
        // the next records (or a close) and settles this one then; otherwise it needs
        // telling now.
        let later = pending.writer_asleep && pending.ready() == 0 && pending.one_under_way;
        // Nothing of the writer's left unacknowledged: the next records may be collected.
        pending.collect_ready |= later && pending.collectable;
        drop(pending);
        self.shared
            .durable
            .send_if_modified(|d| raise(&mut d.lsn, self.lsn));
        if !later {
            self.shared.work.notify_one();
        }
    }
}

/// Raises `value` to `to` if below it; whether it changed.
pub(super) fn raise(value: &mut u64, to: u64) -> bool {
    let raised = *value < to;
    *value = (*value).max(to);
    raised
}

/// How often requests come to wait for the log, so that the writer can tell a busy log, where
/// a short wait lets several requests share a write, from a quiet one, where it would only
/// delay the one request there is.
pub(super) struct Arrivals {
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
    pub(super) fn new() -> Self {
        Arrivals {
            origin: std::time::Instant::now(),
            last: AtomicU64::new(0),
            gap: AtomicU64::new(LONGEST_GAP.as_nanos() as u64),
        }
    }

    pub(super) fn note(&self) {
        self.note_at(self.origin.elapsed());
    }

    /// Notes requests 10 µs apart a minute from now, as a busy log's: requests noted within
    /// that minute count as coming at once, so the log stays busy however slowly a test runs
    /// (tests).
    #[cfg(test)]
    pub(super) fn note_busy(&self) {
        let ahead = self.origin.elapsed() + Duration::from_secs(60);
        for n in 0..1000 {
            self.note_at(ahead + Duration::from_micros(10 * n));
        }
    }

    /// Notes a request come `at` after `origin`.
    pub(super) fn note_at(&self, at: Duration) {
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
    pub(super) fn busy_within(&self, wait: Duration) -> bool {
        3 * self.gap.load(Ordering::Relaxed) <= wait.as_nanos() as u64
    }
}

impl Shared {
    /// Counts records written, and wakes the snapshotter once the log has grown enough.
    pub(super) fn count_written(&self, records: usize, bytes: u64) {
        self.metrics.records.inc_by(records as u64);
        self.metrics.bytes.inc_by(bytes);
        let total = self.bytes_since_snapshot.fetch_add(bytes, Ordering::SeqCst) + bytes;
        if total >= self.wake_at_bytes.load(Ordering::SeqCst) {
            self.log_grown.notify_one();
        }
    }
}

impl Pending {
    /// How many records the writer may take: those before the open region, if any.
    pub(super) fn ready(&self) -> usize {
        if self.held {
            return 0;
        }
        if self.holders == 0 {
            self.records.len()
        } else {
            (self.region_start - self.taken) as usize
        }
    }

    /// The bytes of the records the writer may take.
    pub(super) fn ready_bytes(&self) -> u64 {
        self.records.bytes_before(self.ready())
    }

    /// Whether the records ready end the writer's batch wait (`wake_at`).
    pub(super) fn wait_over(&self) -> bool {
        self.wake_at > 0
            && (self.ready() >= self.wake_at || self.ready_bytes() >= self.wake_at_ready_bytes)
    }
}
