//! A sink whose writes finish on threads of their own: a write begun while none was under way
//! is acknowledged by the thread that finished it, and the writer's thread is woken only when
//! it has something to do.

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Acknowledge, Collect, Collector, FsyncMode, LogSink, LogWriter, Wake};
use crate::engine::changes::{Change, ChangeLog};
use crate::persist::log_error::LogError;

/// Finishes each write successfully on a thread of its own, once the test opens its gate:
/// the gates of the writes begun so far, in order.
pub(super) type Gates = Arc<Mutex<Vec<mpsc::Sender<()>>>>;

#[derive(Default)]
pub(super) struct Finishing {
    /// Calls a write's `Acknowledge` when given one; else (a sink that ignores it) wakes.
    pub(super) acknowledges: bool,
    pub(super) overlap: usize,
    pub(super) gates: Gates,
    pub(super) outcomes: std::collections::VecDeque<mpsc::Receiver<()>>,
    /// Where collects asked for go (the test runs them), if the sink takes them.
    pub(super) collects: Option<mpsc::Sender<Collect>>,
    /// The number of records in each write begun.
    pub(super) sizes: Arc<Mutex<Vec<usize>>>,
    /// How many of the next writes fail to begin.
    pub(super) refuse: usize,
    pub(super) batch_wait: Duration,
    /// How many writes were begun through `begin_busy`.
    pub(super) busy_begins: Arc<Mutex<usize>>,
}

impl LogSink for Finishing {
    fn append(&mut self, _records: &[&[u8]]) -> Result<(), LogError> {
        Ok(())
    }
    fn sync(&mut self) -> Result<(), LogError> {
        Ok(())
    }
    fn poisoned(&self) -> bool {
        false
    }
    fn rotate(&mut self) -> Result<u64, LogError> {
        Ok(0)
    }
    fn remove_before(&mut self, _number: u64) -> Result<(), LogError> {
        Ok(())
    }
    fn overlap(&self) -> usize {
        self.overlap
    }
    fn begins(&self) -> bool {
        true
    }
    fn begin(
        &mut self,
        records: &[&[u8]],
        wake: &Wake,
        acknowledge: Option<Acknowledge>,
    ) -> Result<(), LogError> {
        if self.refuse > 0 {
            self.refuse -= 1;
            return Err(LogError::Io(std::io::Error::other("refused")));
        }
        self.sizes.lock().expect("sizes").push(records.len());
        let (told, outcome) = mpsc::sync_channel(1);
        self.outcomes.push_back(outcome);
        let (open, gate) = mpsc::channel();
        self.gates.lock().expect("gates").push(open);
        let (wake, acknowledges) = (wake.clone(), self.acknowledges);
        std::thread::spawn(move || {
            let _ = gate.recv();
            let _ = told.send(());
            match acknowledge {
                Some(acknowledge) if acknowledges => acknowledge.succeeded(),
                _ => wake(),
            }
        });
        Ok(())
    }
    fn begin_busy(
        &mut self,
        records: &[&[u8]],
        wake: &Wake,
        acknowledge: Option<Acknowledge>,
    ) -> Result<(), LogError> {
        *self.busy_begins.lock().expect("count") += 1;
        self.begin(records, wake, acknowledge)
    }
    fn finish(&mut self, wait: bool) -> Option<Result<(), LogError>> {
        let outcome = self.outcomes.front()?;
        let came = if wait {
            outcome.recv().is_ok()
        } else {
            outcome.try_recv().is_ok()
        };
        came.then(|| {
            self.outcomes.pop_front();
            Ok(())
        })
    }
    fn collector(&self) -> Option<Collector> {
        let collects = self.collects.clone()?;
        Some(Box::new(move |collect| collects.send(collect).is_ok()))
    }
    fn collectable(&self) -> bool {
        self.collects.is_some()
    }
    fn batch_wait(&self) -> Duration {
        self.batch_wait
    }
}

/// A log over a `Finishing` sink, and the gates of its writes.
fn finishing(acknowledges: bool, overlap: usize) -> (Arc<LogWriter>, Gates) {
    let gates = Gates::default();
    let log_writer = LogWriter::new();
    let sink = Finishing {
        acknowledges,
        overlap,
        gates: gates.clone(),
        ..Finishing::default()
    };
    log_writer.start(sink, 0, FsyncMode::Always);
    (log_writer, gates)
}

pub(super) fn submit(log_writer: &LogWriter) {
    log_writer.submit(&Change::DeleteQueue {
        name: "q".into(),
        uid: 1,
        at: crate::engine::Timestamp(1),
    });
}

/// Opens the gate of the `n`th write begun (from 0), once it is begun.
pub(super) fn open(gates: &Gates, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(gate) = gates.lock().expect("gates").get(n) {
            gate.send(()).expect("the write waits");
            return;
        }
        assert!(Instant::now() < deadline, "write {n} was never begun");
        std::thread::yield_now();
    }
}

/// Waits until `count` writes have been begun.
fn begun(gates: &Gates, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while gates.lock().expect("gates").len() < count {
        assert!(Instant::now() < deadline, "{count} writes were never begun");
        std::thread::yield_now();
    }
}

/// Whether every record below `lsn` becomes durable within 10 s.
pub(super) fn durable_to(log_writer: &LogWriter, lsn: u64) -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let waited = runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), log_writer.wait(lsn)).await
    });
    matches!(waited, Ok(Ok(())))
}

/// Blocks until the writer has been woken at least `wakes` times in all and waits for work
/// again; how often it has been woken.
pub(super) fn asleep_after(log_writer: &LogWriter, wakes: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (woken, sleeping) = log_writer.writer_wakes();
        if woken >= wakes && sleeping {
            return woken;
        }
        assert!(
            Instant::now() < deadline,
            "the writer never slept after {wakes} wake-ups"
        );
        std::thread::yield_now();
    }
}

/// Writes `count` changes one after another, each begun and finished while the writer waits
/// with nothing to take; how often it was woken meanwhile.
fn wakes_writing(count: usize, acknowledges: bool) -> u64 {
    let (log_writer, gates) = finishing(acknowledges, 1);
    for n in 0..count {
        let woken = asleep_after(&log_writer, 0);
        submit(&log_writer);
        // Begun, and waiting again before the write finishes.
        asleep_after(&log_writer, woken + 1);
        open(&gates, n);
        assert!(durable_to(&log_writer, n as u64 + 1), "write {n}");
    }
    let (wakes, _) = log_writer.writer_wakes();
    log_writer.close();
    assert_eq!(
        log_writer.metrics().records.get(),
        count as u64,
        "each record counted once"
    );
    wakes
}

#[test]
fn a_write_acknowledged_where_it_finished_costs_the_writer_one_wake_up_not_two() {
    let writes = 40;
    // Each submission wakes the writer; the write's outcome, acknowledged by the thread that
    // learned it, waits for the writer there.
    let acknowledged = wakes_writing(writes, true);
    assert!(
        acknowledged <= writes as u64 + 4,
        "{acknowledged} wake-ups for {writes} writes"
    );
    // Told by waking instead, the writer is woken a second time for each write.
    let woken = wakes_writing(writes, false);
    assert!(
        woken >= 2 * writes as u64,
        "{woken} wake-ups for {writes} writes told by waking"
    );
}

#[test]
fn a_writer_waiting_for_a_full_overlap_to_end_is_woken_by_its_acknowledgement() {
    // The writer holds records it may not begin while its one write is under way: the
    // acknowledgement wakes it, with no later submission to do so.
    let (log_writer, gates) = finishing(true, 1);
    let woken = asleep_after(&log_writer, 0);
    submit(&log_writer);
    let woken = asleep_after(&log_writer, woken + 1);
    submit(&log_writer);
    asleep_after(&log_writer, woken + 1);
    open(&gates, 0);
    open(&gates, 1);
    assert!(durable_to(&log_writer, 2), "{:?}", log_writer.durable());
    log_writer.close();
}

#[test]
fn an_acknowledged_write_ending_after_the_one_behind_it_wakes_the_writer_to_settle_both() {
    // Two writes under way, the second finished first: the writer, woken by it, can settle
    // neither and waits with nothing to take. The first's acknowledgement covers only its own
    // records, so it wakes the writer to settle the second.
    let (log_writer, gates) = finishing(true, 2);
    for _ in 0..2 {
        let woken = asleep_after(&log_writer, 0);
        submit(&log_writer);
        asleep_after(&log_writer, woken + 1);
    }
    assert_eq!(gates.lock().expect("gates").len(), 2, "both writes begun");
    let (woken, _) = log_writer.writer_wakes();
    open(&gates, 1);
    asleep_after(&log_writer, woken + 1);
    assert_eq!(log_writer.durable().lsn, 0, "nothing past the first write");
    open(&gates, 0);
    assert!(
        durable_to(&log_writer, 2),
        "the second write settled: {:?}",
        log_writer.durable()
    );
    log_writer.close();
}

#[test]
fn a_busy_log_with_two_writes_allowed_splits_the_clients_that_came_back_over_both() {
    // Were a batch wait to last until as many came as the last write carried, four clients
    // would share every write, the second write would never begin beside the first, and the
    // first two records here would wait out the 30 s. Were it to wait for half of the last
    // write alone, each wait begun with neither under way would halve the halves.
    let (gates, sizes) = (Gates::default(), Arc::new(Mutex::new(Vec::new())));
    let log_writer = LogWriter::new();
    let sink = Finishing {
        acknowledges: true,
        overlap: 2,
        gates: gates.clone(),
        sizes: sizes.clone(),
        batch_wait: Duration::from_secs(30),
        ..Finishing::default()
    };
    log_writer.start(sink, 0, FsyncMode::Always);
    log_writer.seem_busy();
    log_writer.hold_writes(true);
    for _ in 0..4 {
        submit(&log_writer);
    }
    log_writer.hold_writes(false);
    open(&gates, 0);
    assert!(durable_to(&log_writer, 4), "{:?}", log_writer.durable());
    // Half of them back: their write begins; the other half's begins beside it.
    for _ in 0..2 {
        submit(&log_writer);
    }
    begun(&gates, 2);
    for _ in 0..2 {
        submit(&log_writer);
    }
    // Begun beside the first half's, before that one ends.
    begun(&gates, 3);
    open(&gates, 1);
    open(&gates, 2);
    assert!(durable_to(&log_writer, 8), "{:?}", log_writer.durable());
    assert_eq!(
        *sizes.lock().expect("sizes"),
        [4, 2, 2],
        "each write's records"
    );
    // The halves took turns, and both writes ended before either came back: the next wait
    // still waits for a half of the four (two), not for half of the last write (one).
    let woken = asleep_after(&log_writer, 0);
    submit(&log_writer);
    asleep_after(&log_writer, woken + 1);
    assert_eq!(gates.lock().expect("gates").len(), 3, "{:?}", sizes);
    submit(&log_writer);
    begun(&gates, 4);
    open(&gates, 3);
    assert!(durable_to(&log_writer, 10), "{:?}", log_writer.durable());
    assert_eq!(*sizes.lock().expect("sizes"), [4, 2, 2, 2]);
    log_writer.close();
}
