//! The writer thread: takes what has gathered, appends it as one batch, syncs it when the
//! fsync mode says so, and tells waiting requests how far the log is durable. A failed write
//! is undone by the log and tried again, with whatever came since after it, until it succeeds.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::shared::{
    raise, Acknowledge, Pending, Records, Shared, MAX_RETAINED_BYTES, RETRY_EVERY,
};
use super::sink::{FsyncMode, LogSink, Wake};
use crate::persist::log_error::LogError;
use crate::worker::Backoff;

type RotateReply = std::sync::mpsc::Sender<Result<(u64, u64), String>>;

/// What one round took from `Pending` besides records.
struct Round {
    rotate: Option<RotateReply>,
    remove_before: Option<u64>,
    closing: bool,
    /// Every record numbered below this is in `records` or already written.
    next_lsn: u64,
}

/// A write begun and not finished (a sink that begins writes).
pub(super) struct Begun {
    records: Records,
    /// Every record numbered below this is in `records` or in a write begun before.
    next_lsn: u64,
    /// Set once the records are counted as written, if begun with an `Acknowledge` (which
    /// may count them first).
    counted: Option<Arc<AtomicBool>>,
    /// When it was taken to be written.
    taken_at: Instant,
}

impl Begun {
    /// Whether the write was acknowledged where it finished (`Acknowledge`): it succeeded.
    pub(super) fn acknowledged(&self) -> bool {
        (self.counted.as_ref()).is_some_and(|counted| counted.load(Ordering::SeqCst))
    }
}

/// A log whose requests come so often that three are expected within this (twice its batch
/// wait: above about 2,500 a second at the default 600 µs) writes on its own, its writes begun
/// through `LogSink::begin_busy` by the writer rather than collected: one such log fills a
/// commit of its own, as a single leader's does. Twice, not once: a hot queue's batched sends
/// (about 4,400 requests a second from 8 clients) fall short of the batch wait's own test.
pub(super) fn alone_within(batch_wait: Duration) -> Duration {
    batch_wait * 2
}

/// The writer, shared with whoever may begin its next write on another thread (`collect`);
/// `None` once its thread has ended.
pub(super) type Held<S> = Mutex<Option<Writer<S>>>;

/// What the overlapping writer does next.
enum Next {
    /// Settle the writes that finished.
    Settle,
    /// Begin a write of these records.
    Begin(Begun),
    /// Finish every write under way, then go on one write at a time (a rotation, a removal,
    /// closing, or records lost).
    Alone,
}

pub(super) struct Writer<S: LogSink> {
    pub(super) shared: Arc<Shared>,
    pub(super) log: S,
    mode: FsyncMode,
    last_sync: Instant,
    /// When the last write ended (`LogSink::batch_wait`).
    last_write: Instant,
    /// The records the last write carried: a batch wait ends once as many are ready.
    last_carried: usize,
    unsynced: bool,
    /// The records being written; swapped with `Pending::records` each round.
    records: Records,
    /// `records` holds a batch whose write failed (and was undone): it is written again,
    /// with whatever came since after it, until a write and sync succeed.
    pub(super) retrying: bool,
    /// How long a failed write waits before it is tried again: always `RETRY_EVERY` (changes
    /// are refused meanwhile, so the sooner the better); each failure is counted.
    retry: Backoff,
    retry_wait: Duration,
    /// Records were dropped: the log can never again hold everything, so it stays failed.
    pub(super) lost: bool,
    /// Scratch for what a retrying round takes.
    taken: Records,
    /// Writes begun and not finished, oldest first (a sink that begins writes).
    pub(super) under_way: VecDeque<Begun>,
    /// Emptied buffers of finished writes, for the next ones.
    spare: Vec<Records>,
    /// Tells this thread that a write under way finished.
    wake: Wake,
}

/// Runs the writer until the log closes, then drops it on this thread (its sink may own a
/// runtime, which cannot be dropped on another's).
pub(super) fn run<S: LogSink>(held: &Held<S>) {
    // Dropped last, on this thread, however the loop ends (a panic too): a collect holding
    // the writer a moment would otherwise drop it on the committing thread.
    let _ended = Ended(held);
    let mut guard = lock_writer(held);
    let overlapped = guard.as_ref().is_some_and(|writer| writer.log.begins());
    if overlapped {
        guard = run_overlapped(held, guard);
    } else if let Some(writer) = guard.as_mut() {
        while !writer.step() {}
    }
    drop(guard);
}

/// Takes the writer out of its slot and drops it, once its thread ends.
struct Ended<'h, S: LogSink>(&'h Held<S>);

impl<S: LogSink> Drop for Ended<'_, S> {
    fn drop(&mut self) {
        let writer = lock_writer(self.0).take();
        drop(writer);
    }
}

pub(super) fn lock_writer<S: LogSink>(held: &Held<S>) -> MutexGuard<'_, Option<Writer<S>>> {
    held.lock().unwrap_or_else(|p| p.into_inner())
}

/// With a sink that begins writes (`LogSink::begins`): the next write begins while
/// earlier ones are under way, and each is acknowledged once it and every write begun
/// before it have finished, so nothing is acknowledged past a write that failed. A failure
/// ends the overlap: every write from the failed one on is written again, alone, until
/// written. The writer is let go while it sleeps, so that a sink's `collect` can begin a
/// write meanwhile.
fn run_overlapped<'h, S: LogSink>(
    held: &'h Held<S>,
    mut guard: MutexGuard<'h, Option<Writer<S>>>,
) -> MutexGuard<'h, Option<Writer<S>>> {
    loop {
        let Some(writer) = guard.as_mut() else {
            return guard;
        };
        if writer.retrying || writer.lost {
            if writer.step() {
                return guard;
            }
            continue;
        }
        let shared = writer.shared.clone();
        let mut pending = lock(&shared);
        match writer.next_overlapped(&mut pending) {
            Ok(next) => {
                drop(pending);
                match next {
                    Next::Settle => writer.settle_finished(false),
                    Next::Begin(begun) => writer.begin_here(begun),
                    Next::Alone => {
                        writer.settle_finished(true);
                        if writer.step() {
                            return guard;
                        }
                    }
                }
            }
            Err(wait) => {
                // Woken by a submission while too few are ready (a batch wait wants none);
                // with none under way, a submission may instead ask the sink to collect.
                writer.sleeping_with(&mut pending);
                drop(guard);
                pending.sleeping = true;
                pending = (shared.work.wait_timeout(pending, wait))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                pending.sleeping = false;
                pending.writer_asleep = false;
                pending.collectable = false;
                pending.collect_ready = false;
                pending.wakes += 1;
                drop(pending);
                guard = lock_writer(held);
            }
        }
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, Pending> {
    shared.pending.lock().unwrap_or_else(|p| p.into_inner())
}

impl<S: LogSink> Writer<S> {
    pub(super) fn new(shared: Arc<Shared>, log: S, mode: FsyncMode, wake: Wake) -> Self {
        Writer {
            shared,
            log,
            mode,
            last_sync: Instant::now(),
            last_write: Instant::now(),
            last_carried: 0,
            unsynced: false,
            records: Records::default(),
            retrying: false,
            retry: Backoff::new("log-writer", RETRY_EVERY, RETRY_EVERY),
            retry_wait: RETRY_EVERY,
            lost: false,
            taken: Records::default(),
            under_way: VecDeque::new(),
            spare: Vec::new(),
            wake,
        }
    }

    /// Writes one round alone and settles it; whether the log closed.
    fn step(&mut self) -> bool {
        if !self.retrying {
            self.records.clear();
        }
        let round = self.take_round();
        let failed = self.lost;
        let result = self.write(&round, failed);
        self.settle(result, failed, &round);
        let closing = round.closing;
        self.maintain(round);
        closing
    }

    /// What to do next: settle writes that finished, begin a write of the records ready (fewer
    /// writes under way than the sink allows, and the batch wait over), or finish the writes
    /// and go on alone; or how long to sleep for want of any.
    fn next_overlapped(&mut self, pending: &mut Pending) -> Result<Next, Duration> {
        let full = self.under_way.len() >= self.log.overlap();
        if std::mem::take(&mut pending.finished) {
            return Ok(Next::Settle);
        }
        let closing = pending.closing && pending.holders == 0;
        if pending.lost || pending.rotate.is_some() || pending.remove_before.is_some() || closing {
            return Ok(Next::Alone);
        }
        let mut wait = Duration::from_secs(3600);
        // A write beside one under way carries at least as many records (or the sink's
        // `batch_bytes`), so that overlap does not cost the database more commits than it
        // saves waiting.
        let enough = (self.under_way.back()).is_none_or(|last| {
            pending.ready() >= last.records.len() || pending.ready_bytes() >= self.log.batch_bytes()
        });
        if !full && pending.ready() > 0 && enough {
            match self.batch_wait(pending) {
                None => return Ok(Next::Begin(self.take_ready(pending))),
                Some(left) => {
                    wait = left;
                    self.wake_when_over(pending);
                }
            }
        }
        pending.writer_asleep = pending.ready() == 0 || (!full && !enough);
        Err(wait)
    }

    /// Marks in `pending` how the writer goes to sleep: whether a write acknowledged can be
    /// left unsettled, and whether the sink may begin the next write itself.
    fn sleeping_with(&self, pending: &mut Pending) {
        pending.one_under_way = self.under_way.len() <= 1;
        pending.collectable = self.log.collectable() && !self.retrying && !self.lost;
        pending.alone_within = alone_within(self.log.batch_wait());
        pending.collect_ready =
            pending.collectable && pending.writer_asleep && self.under_way.is_empty();
    }

    /// Takes every record that may be written into a write of its own.
    pub(super) fn take_ready(&mut self, pending: &mut Pending) -> Begun {
        let mut records = self.spare.pop().unwrap_or_default();
        let ready = pending.ready();
        // Begun beside another, the two carry the clients that come back between them: were
        // the next wait to find neither under way, it waits for half of both, not of this one
        // alone, so that the halves do not shrink to a quarter, then an eighth.
        let beside = self.under_way.back().map_or(0, |write| write.records.len());
        self.last_carried = ready + beside;
        pending.wake_at = 0;
        std::mem::swap(&mut pending.records, &mut records);
        records.split_into(ready, &mut pending.records);
        pending.taken += ready as u64;
        let next_lsn = self.shared.next_lsn.load(Ordering::SeqCst) - pending.records.len() as u64;
        Begun {
            records,
            next_lsn,
            counted: None,
            taken_at: Instant::now(),
        }
    }

    /// `begin`, on the writer's own thread: a log whose requests come often has its write
    /// begun there by the sink (`LogSink::begin_busy`).
    fn begin_here(&mut self, begun: Begun) {
        let alone = alone_within(self.log.batch_wait());
        let busy = self.under_way.is_empty()
            && !alone.is_zero()
            && self.shared.arrivals.busy_within(alone);
        self.begin_as(begun, busy);
    }

    pub(super) fn begin(&mut self, begun: Begun) {
        self.begin_as(begun, false);
    }

    fn begin_as(&mut self, mut begun: Begun, busy: bool) {
        // With none under way, every write before this one succeeded: this one's success is
        // enough to acknowledge it.
        let acknowledge = self.under_way.is_empty().then(|| Acknowledge {
            shared: self.shared.clone(),
            lsn: begun.next_lsn,
            records: begun.records.len(),
            bytes: begun.records.written_bytes(),
            counted: Arc::new(AtomicBool::new(false)),
            taken_at: (self.log.durable_once_appended()).then_some(begun.taken_at),
        });
        begun.counted = acknowledge.as_ref().map(|a| a.counted.clone());
        let slices: Vec<&[u8]> = begun.records.iter().collect();
        let begin = match busy {
            true => self.log.begin_busy(&slices, &self.wake, acknowledge),
            false => self.log.begin(&slices, &self.wake, acknowledge),
        };
        drop(slices);
        self.last_write = Instant::now();
        self.under_way.push_back(begun);
        if let Err(error) = begin {
            self.fail_overlapped(error, self.under_way.len() - 1);
        }
    }

    /// Acknowledges the writes that finished, in the order begun, up to the first still
    /// running (or, waiting, every one).
    pub(super) fn settle_finished(&mut self, wait: bool) {
        while !self.under_way.is_empty() {
            let Some(outcome) = self.log.finish(wait) else {
                return;
            };
            match outcome {
                Ok(()) => {
                    let Begun {
                        mut records,
                        next_lsn,
                        counted,
                        taken_at,
                    } = self.under_way.pop_front().expect("one under way");
                    self.last_write = Instant::now();
                    // Counted and observed once: here, or where it was acknowledged first.
                    if counted.is_none_or(|counted| !counted.swap(true, Ordering::SeqCst)) {
                        self.count_written(&records);
                        if self.log.durable_once_appended() {
                            self.observe_sync(self.last_write.duration_since(taken_at));
                        }
                    }
                    let lost = self.lock_pending().lost;
                    // Unchanged when acknowledged already: waiting requests are not woken.
                    self.shared.durable.send_if_modified(|d| {
                        let failed = std::mem::replace(&mut d.failed, lost) != lost;
                        raise(&mut d.lsn, next_lsn) || failed
                    });
                    records.clear();
                    self.spare.push(records);
                }
                Err(error) => {
                    let begun_after = self.under_way.len() - 1;
                    return self.fail_overlapped(error, begun_after);
                }
            }
        }
    }

    /// A write under way failed (or could not begin): waits for the `begun` writes still
    /// under way, whatever their outcome, and writes every record of them all again, alone.
    fn fail_overlapped(&mut self, error: LogError, begun: usize) {
        for _ in 0..begun {
            let _ = self.log.finish(true);
        }
        self.records.clear();
        for mut write in self.under_way.drain(..) {
            self.records.extend_from(&write.records);
            write.records.clear();
            self.spare.push(write.records);
        }
        self.write_failed(error, false);
    }

    /// Waits for work, then takes the records that may be written (none from an open group).
    fn take_round(&mut self) -> Round {
        let retry_at = Instant::now() + self.retry_wait;
        let shared = self.shared.clone();
        let mut pending = self.wait_for_work(&shared, retry_at);
        while let Some(wait) = self.batch_wait(&pending) {
            self.wake_when_over(&mut pending);
            pending = (shared.work.wait_timeout(pending, wait))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        pending.wake_at = 0;
        let ready = pending.ready();
        // A round with nothing to write (a rotation, a close) says nothing of the clients.
        if ready > 0 {
            self.last_carried = ready;
        }
        if self.retrying {
            self.taken.clear();
            std::mem::swap(&mut pending.records, &mut self.taken);
            self.taken.split_into(ready, &mut pending.records);
            self.records.extend_from(&self.taken);
        } else {
            std::mem::swap(&mut pending.records, &mut self.records);
            self.records.split_into(ready, &mut pending.records);
        }
        pending.taken += ready as u64;
        self.lost |= pending.lost;
        // Numbers are handed out in record order, so the records held back for open groups
        // are the last ones numbered.
        let next_lsn = self.shared.next_lsn.load(Ordering::SeqCst) - pending.records.len() as u64;
        Round {
            rotate: pending.rotate.take(),
            remove_before: pending.remove_before.take(),
            closing: pending.closing && pending.holders == 0,
            next_lsn,
        }
    }

    /// Has a submission wake the writer once the records ready end its batch wait.
    fn wake_when_over(&self, pending: &mut Pending) {
        pending.wake_at = self.batch_target();
        pending.wake_at_ready_bytes = self.log.batch_bytes();
    }

    /// How long the next write waits for more requests to share it: while requests come often
    /// (three or more expected within the sink's `batch_wait`), until that long after the last
    /// write ended, or until `batch_target` records, or the sink's `batch_bytes`, are ready.
    /// Under a steady load this bounds the writes a second, and so the sink's fixed cost per
    /// write; a quiet log writes at once. Clients that each wait for their answer before the
    /// next request come back together once a write is acknowledged: waiting for more than
    /// came back would only hold them, each write carrying no more for it.
    pub(super) fn batch_wait(&self, pending: &Pending) -> Option<Duration> {
        let wait = self.log.batch_wait();
        if wait.is_zero()
            || self.retrying
            || self.lost
            || pending.lost
            || pending.ready() == 0
            || pending.closing
            || pending.rotate.is_some()
            || pending.ready() >= self.batch_target()
            || pending.ready_bytes() >= self.log.batch_bytes()
            || !self.shared.arrivals.busy_within(wait)
        {
            return None;
        }
        Some(wait.saturating_sub(self.last_write.elapsed())).filter(|left| !left.is_zero())
    }

    /// The records whose coming ends a batch wait: as many as the last write carried (with the
    /// one it was begun beside), shared over the writes the sink may have under way. With two,
    /// the clients that came back together split into two halves whose writes take turns, one
    /// half's requests handled while the other's commit; otherwise one write would carry them
    /// all and the second would never begin (it must carry as many as the one under way).
    fn batch_target(&self) -> usize {
        self.last_carried.div_ceil(self.log.overlap().max(1))
    }

    fn lock_pending(&self) -> MutexGuard<'_, Pending> {
        lock(&self.shared)
    }

    /// Sleeps until there is something to do: records ready, a rotation or removal asked for,
    /// the log closing, a sync or a retry due.
    fn wait_for_work<'s>(&self, shared: &'s Shared, retry_at: Instant) -> MutexGuard<'s, Pending> {
        let mut pending = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            // Closing waits for open groups, so that none is cut short.
            let closing = pending.closing && pending.holders == 0;
            if pending.ready() > 0
                || pending.rotate.is_some()
                || pending.remove_before.is_some()
                || closing
            {
                return pending;
            }
            let wait = match self.mode {
                _ if self.retrying => retry_at.saturating_duration_since(Instant::now()),
                FsyncMode::Interval(every) if self.unsynced => {
                    every.saturating_sub(self.last_sync.elapsed())
                }
                _ => Duration::from_secs(3600),
            };
            if wait.is_zero() {
                return pending;
            }
            pending.writer_asleep = true;
            pending.retry_scheduled = self.retrying;
            pending.sleeping = true;
            pending = shared
                .work
                .wait_timeout(pending, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            pending.sleeping = false;
            pending.writer_asleep = false;
            pending.wakes += 1;
        }
    }

    /// Appends the round's records (unless records were lost: the log stays failed), then
    /// syncs what is written if the mode, a close or a rotation asks.
    fn write(&mut self, round: &Round, failed: bool) -> Result<(), LogError> {
        if !self.records.is_empty() && !failed {
            let slices: Vec<&[u8]> = self.records.iter().collect();
            let started = Instant::now();
            self.log.append(&slices)?;
            self.last_write = Instant::now();
            self.count_written(&self.records);
            if self.log.durable_once_appended() {
                self.observe_sync(self.last_write.duration_since(started));
            }
            self.unsynced = true;
        }
        let sync_due = match self.mode {
            FsyncMode::Always => true,
            FsyncMode::Interval(every) => self.last_sync.elapsed() >= every,
            FsyncMode::Never => false,
        };
        if self.unsynced && (sync_due || round.closing || round.rotate.is_some()) {
            let started = Instant::now();
            self.log.sync()?;
            self.last_sync = Instant::now();
            if !self.log.durable_once_appended() {
                self.observe_sync(self.last_sync.duration_since(started));
            }
            self.unsynced = false;
        }
        Ok(())
    }

    /// Counts how long a write took to become durable (`GET /metrics`).
    fn observe_sync(&self, took: Duration) {
        (self.shared.metrics.sync_seconds).observe(took.as_secs_f64());
    }

    fn count_written(&self, records: &Records) {
        self.shared
            .count_written(records.len(), records.written_bytes());
    }

    /// Tells waiting requests the outcome: durable up to the round's records, or failed.
    fn settle(&mut self, result: Result<(), LogError>, failed: bool, round: &Round) {
        match result {
            Ok(()) if !failed => {
                if self.retrying {
                    tracing::warn!("the write-ahead log is written again; accepting changes");
                    self.retry.succeeded();
                }
                self.retrying = false;
                // Records lost meanwhile (`LogWriter::fail_for_good`, while this round was
                // written) keep the log failed: only this round's records are acknowledged.
                let lost = self.lock_pending().lost;
                self.shared.durable.send_modify(|d| {
                    d.lsn = d.lsn.max(round.next_lsn);
                    d.failed = lost;
                });
            }
            Ok(()) => {
                self.records.clear();
                self.shared.durable.send_modify(|d| d.failed = true);
            }
            Err(error) => self.write_failed(error, round.closing),
        }
    }

    /// A write of `records` failed: it is tried again later, or, if it never can be, the log
    /// stays failed.
    fn write_failed(&mut self, error: LogError, closing: bool) {
        // A write is undone when it fails, so it can be tried again; a failed fsync or undo
        // poisons the log (the page cache may have dropped what it held).
        let permanent =
            self.log.poisoned() || self.records.bytes.len() > MAX_RETAINED_BYTES || closing;
        if !self.retrying || permanent {
            tracing::error!(
                %error,
                retry = !permanent,
                "write-ahead log write failed; refusing changes until it is written again"
            );
        }
        if permanent {
            self.lost = true;
            self.retrying = false;
            self.records.clear();
        } else {
            self.retrying = true;
            self.retry_wait = self.retry.failed();
        }
        self.shared.durable.send_modify(|d| d.failed = true);
    }

    /// Turns to a new segment (for a snapshot) and removes segments a snapshot covers.
    fn maintain(&mut self, round: Round) {
        if let Some(reply) = round.rotate {
            let rotated = self
                .log
                .rotate()
                .map(|segment| {
                    self.shared.bytes_since_snapshot.store(0, Ordering::Relaxed);
                    (segment, round.next_lsn)
                })
                .map_err(|e| e.to_string());
            let _ = reply.send(rotated);
        }
        if let Some(segment) = round.remove_before {
            if let Err(error) = self.log.remove_before(segment) {
                tracing::warn!(%error, "old log segments not removed");
            }
        }
    }
}
