//! Records collected by the sink's thread while the writer sleeps: the test's thread plays
//! the sink's, running each collect asked for when it chooses.

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use super::acknowledge_tests::{asleep_after, durable_to, open, submit, Finishing, Gates};
use super::{Collect, Durable, FsyncMode, LogWriter};

struct Collecting {
    log_writer: Arc<LogWriter>,
    gates: Gates,
    collects: mpsc::Receiver<Collect>,
    sizes: Arc<Mutex<Vec<usize>>>,
    busy_begins: Arc<Mutex<usize>>,
}

/// A log whose sink takes collects (one write under way at most), failing its first `refuse`
/// writes as they begin.
fn collecting(refuse: usize) -> Collecting {
    collecting_with(Finishing {
        refuse,
        ..Finishing::default()
    })
}

fn collecting_with(sink: Finishing) -> Collecting {
    let (asks, collects) = mpsc::channel();
    let sink = Finishing {
        acknowledges: true,
        overlap: 1,
        collects: Some(asks),
        ..sink
    };
    let (gates, sizes) = (sink.gates.clone(), sink.sizes.clone());
    let busy_begins = sink.busy_begins.clone();
    let log_writer = LogWriter::new();
    log_writer.start(sink, 0, FsyncMode::Always);
    Collecting {
        log_writer,
        gates,
        collects,
        sizes,
        busy_begins,
    }
}

impl Collecting {
    /// The collect asked for, which must come within 10 s.
    fn asked(&self) -> Collect {
        (self.collects.recv_timeout(Duration::from_secs(10))).expect("a collect asked for")
    }

    fn nothing_asked(&self) -> bool {
        self.collects.try_recv().is_err()
    }

    fn sizes(&self) -> Vec<usize> {
        self.sizes.lock().expect("sizes").clone()
    }

    fn busy_begins(&self) -> usize {
        *self.busy_begins.lock().expect("count")
    }
}

#[test]
fn records_come_while_the_writer_sleeps_are_collected_without_waking_it() {
    let log = collecting(0);
    asleep_after(&log.log_writer, 0);
    let (woken, _) = log.log_writer.writer_wakes();
    // Two records before the collect runs: one collect asked for, which takes both.
    submit(&log.log_writer);
    submit(&log.log_writer);
    let collect = log.asked();
    assert!(log.nothing_asked(), "one collect for both records");
    collect();
    assert_eq!(log.sizes(), [2]);
    assert_eq!(
        log.busy_begins(),
        0,
        "a collect never begins a write as busy"
    );
    open(&log.gates, 0);
    assert!(durable_to(&log.log_writer, 2));
    // Acknowledged where it finished, the write leaves the next records to a collect too,
    // which settles it first.
    submit(&log.log_writer);
    log.asked()();
    open(&log.gates, 1);
    assert!(durable_to(&log.log_writer, 3));
    assert_eq!(log.sizes(), [2, 1]);
    assert_eq!(log.log_writer.collected(), 2);
    assert_eq!(
        log.log_writer.writer_wakes().0,
        woken,
        "the writer slept throughout"
    );
    log.log_writer.close();
    assert_eq!(
        log.log_writer.metrics().records.get(),
        3,
        "each counted once"
    );
}

#[test]
fn a_record_come_while_a_collected_write_is_under_way_wakes_the_writer() {
    let log = collecting(0);
    let woken = asleep_after(&log.log_writer, 0);
    submit(&log.log_writer);
    log.asked()();
    // The collected write is not acknowledged yet: the writer is woken for the next record
    // and writes it once the first has ended.
    submit(&log.log_writer);
    asleep_after(&log.log_writer, woken + 1);
    assert!(
        log.nothing_asked(),
        "no collect while a write is unacknowledged"
    );
    open(&log.gates, 0);
    open(&log.gates, 1);
    assert!(
        durable_to(&log.log_writer, 2),
        "{:?}",
        log.log_writer.durable()
    );
    assert_eq!(log.sizes(), [1, 1]);
    assert_eq!(log.log_writer.collected(), 1);
    log.log_writer.close();
}

#[test]
fn a_log_busy_enough_for_its_batch_wait_leaves_its_records_to_the_writer() {
    // Requests 10 µs apart: a write would wait for company, which a collect does not.
    written_alone_with_requests_apart(Duration::from_micros(10));
}

#[test]
fn a_log_whose_requests_come_within_two_batch_waits_writes_on_its_own_at_once() {
    // Requests 300 µs apart: three within two waits (900 µs), not within one, so the write
    // waits for no company but is the writer's own.
    written_alone_with_requests_apart(Duration::from_micros(300));
}

/// A log with a 600 µs batch wait whose requests came `gap` apart: its next record is not
/// collected but begun by the writer through `begin_busy`, and acknowledged.
fn written_alone_with_requests_apart(gap: Duration) {
    let log = collecting_with(Finishing {
        batch_wait: Duration::from_micros(600),
        ..Finishing::default()
    });
    for n in 0..100 {
        (log.log_writer.shared.arrivals).note_at(gap * n);
    }
    let woken = asleep_after(&log.log_writer, 0);
    submit(&log.log_writer);
    asleep_after(&log.log_writer, woken + 1);
    assert!(log.nothing_asked(), "no collect for a busy log");
    open(&log.gates, 0);
    assert!(
        durable_to(&log.log_writer, 1),
        "{:?}",
        log.log_writer.durable()
    );
    assert_eq!(log.log_writer.collected(), 0);
    assert_eq!(log.busy_begins(), 1, "begun by the writer on its own");
    log.log_writer.close();
}

#[test]
fn a_collected_write_that_cannot_begin_is_written_by_the_writer() {
    let log = collecting(1);
    let woken = asleep_after(&log.log_writer, 0);
    submit(&log.log_writer);
    log.asked()();
    assert!(log.log_writer.failed(), "refused as it began");
    // Woken to try again, the writer writes it alone, and acknowledges it.
    asleep_after(&log.log_writer, woken + 1);
    let written = Durable {
        lsn: 1,
        failed: false,
    };
    assert!(
        log.log_writer
            .wait_for_durable(written, Duration::from_secs(10)),
        "{:?}",
        log.log_writer.durable()
    );
    assert!(log.sizes().is_empty(), "none begun: written alone");
    assert_eq!(log.log_writer.metrics().records.get(), 1);
    log.log_writer.close();
}
