//! The node's shared commit against a real PostgreSQL (`ORDERLY_TEST_POSTGRES`).

use std::time::{Duration, Instant};

use super::connection::Blocking;
use super::connection::{config, Session};
use super::lease::{self, Fence};
use super::schema;
use super::shared_commit::SharedCommit;
use super::table_log::{deposed, TableLog};
use super::tests::{connect, database, number, sql, triples, Holding};
use crate::engine::changes::{Change, ChangeLog};
use crate::persist::format;
use crate::persist::writer::{FsyncMode, LogSink, LogWriter, Wake};

fn record(lsn: u64) -> Vec<u8> {
    let mut bytes = format::record_header(lsn).to_vec();
    bytes.extend_from_slice(b"payload");
    bytes
}

/// Each batch's shard, first number and the transaction that inserted it.
fn batches(db: &mut Blocking) -> Vec<(i32, i64, i64)> {
    let query = "SELECT shard, first_lsn, xmin::text::bigint FROM log_batches \
                 ORDER BY shard, first_lsn";
    triples(db, query)
}

/// Each batch's shard and first number.
fn rows(db: &mut Blocking) -> Vec<(i32, i64)> {
    batches(db)
        .iter()
        .map(|(shard, first, _)| (*shard, *first))
        .collect()
}

/// Four shards led by this node; shard 1 then taken by another node without it knowing.
fn four_shards(admin: &mut Blocking) -> Vec<Fence> {
    schema::prepare(admin, "us-east-1", "000000000000", 4).expect("tables");
    let fences = (0..4)
        .map(|shard| {
            let (taken, _) =
                lease::acquire(admin, shard, "first", "http://first", true).expect("a free lease");
            Fence {
                shard,
                epoch: taken.epoch,
            }
        })
        .collect();
    sql(
        admin,
        "UPDATE log_shards SET expires = '-infinity' WHERE shard = 1",
    );
    lease::acquire(admin, 1, "second", "http://second", true).expect("lapsed");
    fences
}

/// Each shard's log, its writes inserted by one shared commit of one connection.
fn shared_logs(url: &str, fences: &[Fence]) -> Vec<TableLog> {
    waiting_logs(url, fences, Duration::ZERO)
}

/// As `shared_logs`, the commit waiting `wait` for more writes while they come steadily.
fn waiting_logs(url: &str, fences: &[Fence], wait: Duration) -> Vec<TableLog> {
    let session = Session::new(config(url).expect("a URL"));
    let shared = SharedCommit::start(session, 1, wait).expect("a thread");
    fences
        .iter()
        .map(|fence| TableLog::sharing(connect(url), *fence, 0, 2, shared.clone()).expect("a log"))
        .collect()
}

/// Shard 3's lease row, held by another transaction until the answer is dropped or told to
/// commit: the shared commit's one connection waits on shard 3's write meanwhile, so writes
/// handed over then are gathered into one statement.
struct Held(Holding);

impl Held {
    fn shard_3(url: &str) -> Held {
        Held(Holding::after(
            url,
            "BEGIN; SELECT 1 FROM log_shards WHERE shard = 3 FOR UPDATE",
        ))
    }

    /// Waits until an insert waits for the row.
    fn until_waited_for(&self, admin: &mut Blocking) {
        // This test's database only: tests beside it hold rows of their own.
        let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                       AND query LIKE '%INSERT INTO log_batches%' \
                       AND datname = current_database()";
        let started = std::time::Instant::now();
        while number(admin, waiting.into()) == 0 {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "no insert waited for the row"
            );
            std::thread::yield_now();
        }
    }

    fn release(self) {
        self.0.finish("COMMIT");
    }
}

fn waker() -> Wake {
    std::sync::Arc::new(|| {})
}

#[test]
fn shards_written_meanwhile_share_one_commit_and_a_shard_led_elsewhere_is_refused_alone() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    let fences = four_shards(&mut admin);
    let mut logs = shared_logs(&url, &fences);

    let held = Held::shard_3(&url);
    let wake = waker();
    let records: Vec<Vec<u8>> = (0..2).map(record).collect();
    logs[3]
        .begin(&[&records[0]], &wake, None)
        .expect("handed over");
    held.until_waited_for(&mut admin);
    for shard in [0, 1, 2] {
        logs[shard]
            .begin(&[&records[0], &records[1]], &wake, None)
            .expect("handed over");
    }
    for (shard, log) in logs.iter_mut().enumerate() {
        assert!(
            log.finish(false).is_none(),
            "shard {shard}'s write waits behind the held row"
        );
    }
    held.release();

    logs[3].finish(true).expect("an answer").expect("kept");
    logs[0].finish(true).expect("an answer").expect("kept");
    logs[2].finish(true).expect("an answer").expect("kept");
    let refused = logs[1].finish(true).expect("an answer");
    assert_eq!(deposed(&refused), Some(fences[1].epoch as u64));
    assert!(
        logs[1].poisoned(),
        "a deposed shard's log never writes again"
    );

    let kept = batches(&mut admin);
    let shards: Vec<(i32, i64)> = kept.iter().map(|(s, f, _)| (*s, *f)).collect();
    assert_eq!(shards, [(0, 0), (2, 0), (3, 0)], "shard 1's rows refused");
    assert_eq!(
        kept[0].2, kept[1].2,
        "shards 0 and 2, handed over meanwhile, committed together"
    );
    assert_ne!(kept[0].2, kept[2].2, "shard 3 committed before them");

    // The shards kept go on.
    let next = record(2);
    logs[0].append(&[&next]).expect("shard 0 goes on");
    assert_eq!(batches(&mut admin).len(), 4);
}

#[test]
fn a_write_that_finds_the_commit_idle_goes_at_once_and_writes_that_come_steadily_wait_for_more() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    let fences = four_shards(&mut admin);
    let wait = Duration::from_secs(4);
    let mut logs = waiting_logs(&url, &fences, wait);
    let wake = waker();
    let records: Vec<Vec<u8>> = (0..3).map(record).collect();

    // A write to a commit with nothing waiting when its statement before ended is kept in
    // less than half the wait.
    let at_once = |log: &mut TableLog, record: &[u8]| {
        let began = Instant::now();
        log.begin(&[record], &wake, None).expect("handed over");
        log.finish(true).expect("an answer").expect("kept");
        assert!(
            began.elapsed() < wait / 2,
            "a write to an idle commit waited"
        );
    };
    // No statement before.
    at_once(&mut logs[0], &records[0]);

    // Shard 2's write is handed over while shard 3's statement waits behind the held row: it
    // waits about the wait once that one ends, so shard 0's next write, handed over half a
    // second later (when shard 2's would have been answered without a wait), shares its
    // statement.
    let held = Held::shard_3(&url);
    logs[3]
        .begin(&[&records[0]], &wake, None)
        .expect("handed over");
    held.until_waited_for(&mut admin);
    logs[2]
        .begin(&[&records[0]], &wake, None)
        .expect("handed over");
    held.release();
    logs[3].finish(true).expect("an answer").expect("kept");
    let ended = Instant::now();
    let mut answered = None;
    while answered.is_none() && ended.elapsed() < Duration::from_millis(500) {
        answered = logs[2].finish(false);
        std::thread::yield_now();
    }
    logs[0]
        .begin(&[&records[1]], &wake, None)
        .expect("handed over");
    let answered = answered.or_else(|| logs[2].finish(true));
    answered.expect("an answer").expect("kept");
    let waited = ended.elapsed();
    assert!(
        waited > wait / 2 && waited < wait * 3 / 2,
        "shard 2's statement went {waited:?} after the one before, not about the wait"
    );
    logs[0].finish(true).expect("an answer").expect("kept");
    let kept = batches(&mut admin);
    let xmin = |shard: i32, first: i64| {
        (kept.iter().find(|(s, f, _)| (*s, *f) == (shard, first)))
            .map(|(_, _, xmin)| *xmin)
            .expect("kept")
    };
    assert_eq!(
        xmin(2, 0),
        xmin(0, 1),
        "shard 2's write, waiting when the statement before ended, waited for shard 0's"
    );
    assert_ne!(xmin(2, 0), xmin(3, 0), "shard 3's statement went before");

    // That statement ended with nothing waiting.
    at_once(&mut logs[0], &records[2]);
}

#[test]
fn a_statement_refused_for_one_shard_is_tried_write_by_write_so_only_that_shard_fails() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    let fences = four_shards(&mut admin);
    // A row of shard 0 numbered as its next write: as if an earlier try of that write had
    // committed late, after its answer was lost.
    sql(
        &mut admin,
        "INSERT INTO log_batches (shard, first_lsn, last_lsn, epoch, records) \
         VALUES (0, 0, 0, 1, 'late')",
    );
    let mut logs = shared_logs(&url, &fences);

    let held = Held::shard_3(&url);
    let wake = waker();
    let records: Vec<Vec<u8>> = (0..3).map(record).collect();
    logs[3]
        .begin(&[&records[0]], &wake, None)
        .expect("handed over");
    held.until_waited_for(&mut admin);
    logs[0]
        .begin(&[&records[0]], &wake, None)
        .expect("handed over");
    // Two writes of shard 2 in the same statement.
    logs[2]
        .begin(&[&records[0]], &wake, None)
        .expect("handed over");
    logs[2]
        .begin(&[&records[1], &records[2]], &wake, None)
        .expect("handed over");
    held.release();

    logs[3].finish(true).expect("an answer").expect("kept");
    let failed = logs[0].finish(true).expect("an answer");
    assert!(
        failed.is_err(),
        "shard 0's write collides with the late row"
    );
    assert_eq!(deposed(&failed), None, "a collision is not a lost lease");
    logs[2].finish(true).expect("an answer").expect("kept");
    logs[2].finish(true).expect("an answer").expect("kept");

    assert_eq!(rows(&mut admin), [(0, 0), (2, 0), (2, 1), (3, 0)]);
    // Shard 0's log asks what it holds before trying again, and leaves the late row's record out.
    logs[0]
        .append(&[&records[0], &records[1]])
        .expect("the rest");
    assert_eq!(rows(&mut admin), [(0, 0), (0, 1), (2, 0), (2, 1), (3, 0)]);
}

/// Waits for what `log_writer` was given so far; whether it was made durable.
fn logged(log_writer: &LogWriter) -> bool {
    log_writer.submit(&Change::DeleteQueue {
        name: "q".into(),
        uid: 1,
        at: crate::engine::Timestamp(1),
    });
    let lsn = log_writer.next_lsn();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let waited = runtime.block_on(async {
        tokio::time::timeout(std::time::Duration::from_secs(10), log_writer.wait(lsn)).await
    });
    waited.expect("an answer within 10 s").is_ok()
}

#[test]
fn a_write_kept_is_acknowledged_by_the_commit_and_one_refused_wakes_its_writer_to_fail() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    let fences = four_shards(&mut admin);
    let mut logs = shared_logs(&url, &fences).into_iter();
    let (kept, deposed) = (logs.next().expect("shard 0"), logs.next().expect("shard 1"));

    // Shard 0's writer, asleep with nothing under way at each submission, is not woken at
    // all: the commit collects each write's records and acknowledges it (woken for each
    // submission, it would wake three times; for each outcome too, six).
    let writer = LogWriter::new();
    writer.start(kept, 0, FsyncMode::Always);
    for _ in 0..3 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !writer.writer_wakes().1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer never slept"
            );
            std::thread::yield_now();
        }
        assert!(logged(&writer), "kept");
    }
    assert_eq!(rows(&mut admin), [(0, 0), (0, 1), (0, 2)]);
    let (wakes, _) = writer.writer_wakes();
    assert_eq!(wakes, 0, "wake-ups for 3 writes");
    assert_eq!(writer.collected(), 3, "writes begun by the commit");
    assert_eq!(writer.metrics().records.get(), 3);

    // Shard 1, led elsewhere: its write is refused, not acknowledged, and its writer, woken
    // to learn so, fails the log for good.
    let refused = LogWriter::new();
    refused.start(deposed, 0, FsyncMode::Always);
    assert!(!logged(&refused), "refused");
    assert!(refused.failed());
    assert_eq!(
        refused.metrics().records.get(),
        0,
        "nothing counted as written"
    );
    writer.close();
    refused.close();
}

#[test]
fn a_busy_shards_write_goes_on_its_own_connection_at_once_while_the_commit_is_held() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    let fences = four_shards(&mut admin);
    let mut logs = shared_logs(&url, &fences).into_iter();
    let (busy, _, mut two, mut three) = (
        logs.next().expect("shard 0"),
        logs.next().expect("shard 1"),
        logs.next().expect("shard 2"),
        logs.next().expect("shard 3"),
    );

    // The commit's one connection waits on shard 3's write.
    let held = Held::shard_3(&url);
    let wake = waker();
    let records: Vec<Vec<u8>> = (0..2).map(record).collect();
    three
        .begin(&[&records[0]], &wake, None)
        .expect("handed over");
    held.until_waited_for(&mut admin);
    // Shard 2's write, begun as busy, is kept meanwhile; begun as not, it would wait.
    two.begin_busy(&[&records[0]], &wake, None)
        .expect("written");
    two.finish(false)
        .expect("answered when begun")
        .expect("kept");
    assert_eq!(rows(&mut admin), [(2, 0)]);
    two.begin(&[&records[1]], &wake, None).expect("handed over");
    assert!(two.finish(false).is_none(), "waits behind the held row");

    // Through its writer: a busy log's record is acknowledged while the commit is held.
    let busy = busy.waiting(Duration::from_micros(600));
    let writer = LogWriter::new();
    writer.start(busy, 0, FsyncMode::Always);
    writer.seem_busy();
    assert!(logged(&writer), "kept, the commit still held");
    assert_eq!(rows(&mut admin), [(0, 0), (2, 0)]);
    assert_eq!(writer.collected(), 0, "nothing collected for a busy log");
    assert_eq!(writer.metrics().records.get(), 1);

    held.release();
    two.finish(true).expect("an answer").expect("kept");
    assert_eq!(rows(&mut admin), [(0, 0), (2, 0), (2, 1), (3, 0)]);
    writer.close();
}

/// A shard whose writes share the node's commit waits for nothing itself when that commit
/// waits (`--database-commit-wait`), and for the batch wait when it does not; a shard's log
/// of its own (one shard a database) waits as told, or until 16 KiB are ready. Nothing is
/// written: no database is asked.
#[test]
fn a_shard_waits_for_more_writes_only_where_its_commit_does_not() {
    let url = "postgres://nobody@127.0.0.1:1/none";
    let fence = Fence { shard: 1, epoch: 1 };
    let wait = Duration::from_micros(600);
    for (commit_wait, shard_wait) in [
        (Duration::from_micros(1000), Duration::ZERO),
        (Duration::ZERO, wait),
    ] {
        let session = Session::new(config(url).expect("a URL"));
        let shared = SharedCommit::start(session, 1, commit_wait).expect("a thread");
        let log = TableLog::sharing(connect(url), fence, 0, 1, shared).expect("a log");
        let log = log.waiting(wait);
        assert_eq!(log.batch_wait(), shard_wait, "commit wait {commit_wait:?}");
        // However many bytes are ready, a shard's wait ends only on count or time.
        assert_eq!(log.batch_bytes(), u64::MAX, "commit wait {commit_wait:?}");
    }
    let alone = TableLog::new(connect(url), fence, 0, 1).expect("a log");
    assert_eq!(alone.batch_bytes(), 16 * 1024);
    assert_eq!(alone.waiting(wait).batch_wait(), wait);
}

/// Each shard's log, its writes inserted by one shared commit of one connection started as a
/// node starts it: from the blocking pool of a runtime of one thread (returned with it).
fn committed_on_a_runtime(
    url: &str,
    fences: &[Fence],
) -> (
    tokio::runtime::Runtime,
    std::sync::Arc<SharedCommit>,
    Vec<TableLog>,
) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let session = Session::new(config(url).expect("a URL"));
    let started = runtime.block_on(async {
        tokio::task::spawn_blocking(move || SharedCommit::start(session, 1, Duration::ZERO)).await
    });
    let shared = started.expect("joined").expect("started");
    let logs = (fences.iter())
        .map(|fence| TableLog::sharing(connect(url), *fence, 0, 2, shared.clone()).expect("a log"))
        .collect();
    (runtime, shared, logs)
}

/// Started within a runtime (a node's, from its blocking pool), the committer is a task of
/// that runtime, not a thread of its own: writes are kept while the runtime runs, and once it
/// is gone a write is refused as never sent (on a thread of its own, it would be kept).
#[test]
fn a_commit_started_within_a_runtime_commits_on_that_runtime() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    let fences = four_shards(&mut admin);
    let (runtime, _shared, mut logs) = committed_on_a_runtime(&url, &fences);
    let wake = waker();
    let records: Vec<Vec<u8>> = (0..2).map(record).collect();
    for shard in [0, 2] {
        logs[shard]
            .begin(&[&records[0]], &wake, None)
            .expect("handed over");
        logs[shard].finish(true).expect("an answer").expect("kept");
    }
    assert_eq!(rows(&mut admin), [(0, 0), (2, 0)]);

    drop(runtime);
    logs[0]
        .begin(&[&records[1]], &wake, None)
        .expect("handed over");
    let refused = logs[0].finish(true).expect("an answer");
    assert!(refused.is_err(), "the committer went with its runtime");
    assert_eq!(rows(&mut admin), [(0, 0), (2, 0)], "nothing more kept");
}

/// Writes and collects waiting for the committer when its runtime goes are not left to sleep
/// on: each write's writer is woken (its outcome gone, the write fails) and each collect runs.
#[test]
fn writes_and_collects_dropped_with_the_committers_runtime_wake_their_writers() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    let fences = four_shards(&mut admin);
    let (runtime, shared, mut logs) = committed_on_a_runtime(&url, &fences);
    let counter = |count: &Arc<AtomicUsize>| -> Wake {
        let count = count.clone();
        Arc::new(move || {
            count.fetch_add(1, Ordering::SeqCst);
        })
    };
    let (woken, collected) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let wake = counter(&woken);
    let record = record(0);

    // Shard 3's statement waits behind the held row on the one connection: shard 0's write
    // and a collect wait behind it.
    let held = Held::shard_3(&url);
    logs[3].begin(&[&record], &wake, None).expect("handed over");
    held.until_waited_for(&mut admin);
    logs[0].begin(&[&record], &wake, None).expect("handed over");
    let collector = SharedCommit::collector(&shared);
    assert!(collector(counter(&collected)), "a collect asked for");
    assert_eq!(woken.load(Ordering::SeqCst), 0, "nothing answered yet");
    assert_eq!(collected.load(Ordering::SeqCst), 0, "nothing collected yet");

    drop(runtime);
    assert_eq!(woken.load(Ordering::SeqCst), 2, "both writers woken");
    assert_eq!(collected.load(Ordering::SeqCst), 1, "the collect ran");
    for shard in [0, 3] {
        let outcome = logs[shard].finish(false).expect("an answer");
        assert!(outcome.is_err(), "shard {shard}'s write failed");
    }
    held.release();
}

/// The committer's inbox, dropped while senders that outlive it keep sending, leaves nothing
/// in the channel: each value sent is dropped with the inbox or refused to its sender.
/// (Tokio's receiver alone leaves a send under way as it drops in the channel until the last
/// sender goes.)
#[test]
fn an_inbox_dropped_while_sends_land_leaves_nothing_behind() {
    use super::shared_commit::Inbox;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    for round in 0..500 {
        let (made, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let inbox = Inbox(receiver);
        let senders: Vec<_> = (0..2)
            .map(|_| {
                let (sender, made, dropped) = (sender.clone(), made.clone(), dropped.clone());
                std::thread::spawn(move || loop {
                    made.fetch_add(1, Ordering::SeqCst);
                    if sender.send(Counted(dropped.clone())).is_err() {
                        return sender;
                    }
                })
            })
            .collect();
        while made.load(Ordering::SeqCst) < 64 {
            std::thread::yield_now();
        }
        drop(inbox);
        // The senders end at their first refusal, and are kept, as the shards' logs keep theirs.
        let _kept: Vec<_> = senders
            .into_iter()
            .map(|s| s.join().expect("sent"))
            .collect();
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            made.load(Ordering::SeqCst),
            "round {round}: a value left in the channel"
        );
    }
}
