//! The fence and the lease against a real PostgreSQL (`ORDERLY_TEST_POSTGRES`).

use super::connection::{config, Blocking, Work};
use super::lease::Fence;
use super::table_log::{deposed, TableLog};
use super::{lease, schema};
use crate::persist::format;
use crate::persist::writer::LogSink;

/// The shard every test here writes: a database of one shard has only it.
pub(super) const SHARD: i32 = 0;

/// The fence of shard 0's lease in `epoch`.
pub(super) fn fenced(epoch: i64) -> Fence {
    Fence {
        shard: SHARD,
        epoch,
    }
}

pub(super) fn database() -> Option<String> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(super::test_database::fresh_database())
}

pub(super) fn connect(url: &str) -> Blocking {
    Blocking::new(config(url).expect("a URL")).expect("a runtime")
}

fn record(lsn: u64) -> Vec<u8> {
    let mut bytes = format::record_header(lsn).to_vec();
    bytes.extend_from_slice(b"payload");
    bytes
}

/// A connection of the test's own that ran a statement taking a lock, kept with the runtime
/// driving it until `finish` runs the statement that lets the lock go.
pub(super) struct Holding {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl Holding {
    pub(super) fn after(url: &str, statements: &str) -> Holding {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let client = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(connection);
            client.batch_execute(statements).await.expect("locked");
            client
        });
        Holding { runtime, client }
    }

    pub(super) fn finish(self, statements: &str) {
        self.runtime
            .block_on(self.client.batch_execute(statements))
            .expect("released");
    }
}

pub(super) fn sql(db: &mut Blocking, statement: &'static str) -> u64 {
    db.run(
        super::connection::STARTUP_TIMEOUT,
        move |client| -> Work<'_, _> {
            Box::pin(async move { client.execute(statement, &[]).await })
        },
    )
    .expect("the statement runs")
}

/// The rows `query` reads, three columns each.
pub(super) fn triples<A, B, C>(db: &mut Blocking, query: &'static str) -> Vec<(A, B, C)>
where
    A: for<'a> tokio_postgres::types::FromSql<'a> + Send,
    B: for<'a> tokio_postgres::types::FromSql<'a> + Send,
    C: for<'a> tokio_postgres::types::FromSql<'a> + Send,
{
    db.run(
        super::connection::STARTUP_TIMEOUT,
        move |client| -> Work<'_, _> {
            Box::pin(async move {
                let rows = client.query(query, &[]).await?;
                Ok(rows
                    .iter()
                    .map(|r| (r.get(0), r.get(1), r.get(2)))
                    .collect())
            })
        },
    )
    .expect("read the rows")
}

fn batches(db: &mut Blocking) -> Vec<(i64, i64, i64)> {
    let query = "SELECT first_lsn, last_lsn, epoch FROM log_batches ORDER BY first_lsn";
    triples(db, query)
}

#[test]
fn an_append_after_another_node_took_the_lease_is_refused_for_good() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("tables");
    let epoch = lease::acquire(&mut admin, SHARD, "first", "http://first", true)
        .expect("a free lease")
        .0
        .epoch;
    assert_eq!(epoch, 1);
    let mut log = TableLog::new(connect(&url), fenced(epoch), 0, 1).expect("a runtime");
    let (zero, one, two) = (record(0), record(1), record(2));
    log.append(&[&zero, &one]).expect("the leader appends");
    assert_eq!(batches(&mut admin), [(0, 1, 1)]);

    // The lease lapses and another node takes it.
    sql(&mut admin, "UPDATE log_shards SET expires = '-infinity'");
    let next = lease::acquire(&mut admin, SHARD, "second", "http://second", true)
        .expect("lapsed")
        .0
        .epoch;
    assert_eq!(next, 2);
    assert_eq!(deposed(&log.append(&[&two])), Some(1));
    assert!(log.poisoned(), "a deposed log never writes again");
    assert_eq!(deposed(&log.append(&[&two])), Some(1));
    assert_eq!(
        batches(&mut admin),
        [(0, 1, 1)],
        "nothing of the old epoch after"
    );

    // The new leader goes on from where the log ends.
    let mut second = TableLog::new(connect(&url), fenced(next), 2, 1).expect("a runtime");
    second.append(&[&two]).expect("the new leader appends");
    assert_eq!(batches(&mut admin), [(0, 1, 1), (2, 2, 2)]);
}

#[test]
fn a_held_lease_is_not_taken_and_records_already_stored_are_not_stored_twice() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("tables");
    lease::acquire(&mut admin, SHARD, "first", "http://first", true).expect("a free lease");
    // A second taker waits while the lease runs; here it is only asked once, by hand.
    let held: i64 = admin
        .run(
            super::connection::STARTUP_TIMEOUT,
            |client| -> Work<'_, _> {
                Box::pin(async move {
                    let rows = client
                        .query(
                            "UPDATE log_shards SET epoch = epoch + 1 WHERE expires <= now() \
                         RETURNING epoch",
                            &[],
                        )
                        .await?;
                    Ok(rows.len() as i64)
                })
            },
        )
        .expect("asked");
    assert_eq!(held, 0, "a running lease is not taken");

    // A retry of records partly stored already (an insert whose answer was lost) stores only
    // the new ones.
    let mut log = TableLog::new(connect(&url), fenced(1), 0, 1).expect("a runtime");
    let records: Vec<Vec<u8>> = (0..4).map(record).collect();
    log.append(&[&records[0], &records[1]]).expect("append");
    let mut again = TableLog::new(connect(&url), fenced(1), 0, 1).expect("a runtime");
    again.assume_unsure();
    again
        .append(&[&records[0], &records[1], &records[2], &records[3]])
        .expect("the rest");
    assert_eq!(batches(&mut admin), [(0, 1, 1), (2, 3, 1)]);
}

/// One number a query answers.
pub(super) fn number(db: &mut Blocking, query: String) -> i64 {
    db.run(
        super::connection::STARTUP_TIMEOUT,
        move |client| -> Work<'_, _> {
            Box::pin(async move { Ok(client.query_one(&query, &[]).await?.get::<_, i64>(0)) })
        },
    )
    .expect("the query runs")
}

/// Bytes held in the TOAST table of `table`.
pub(super) fn toasted_bytes(db: &mut Blocking, table: &str) -> i64 {
    let toast: String = db
        .run(super::connection::STARTUP_TIMEOUT, {
            let query = format!("SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = '{table}'::regclass");
            move |client| -> Work<'_, _> {
                Box::pin(async move { Ok(client.query_one(&query, &[]).await?.get(0)) })
            }
        })
        .expect("the table has a TOAST table");
    number(
        db,
        format!("SELECT coalesce(sum(length(chunk_data)), 0) FROM {toast}"),
    )
}

#[test]
fn an_unsure_retry_after_a_takeover_is_refused_not_taken_as_stored() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("tables");
    let first = lease::acquire(&mut admin, SHARD, "first", "http://first", true)
        .expect("free")
        .0
        .epoch;
    let records: Vec<Vec<u8>> = (0..4).map(record).collect();
    let mut old = TableLog::new(connect(&url), fenced(first), 0, 1).expect("a runtime");
    old.append(&[&records[0]]).expect("the leader appends");
    // The lease lapses; the next leader writes records of the numbers the old one holds.
    sql(&mut admin, "UPDATE log_shards SET expires = '-infinity'");
    let second = lease::acquire(&mut admin, SHARD, "second", "http://second", true)
        .expect("lapsed")
        .0
        .epoch;
    let mut new = TableLog::new(connect(&url), fenced(second), 1, 1).expect("a runtime");
    new.append(&[&records[1], &records[2], &records[3]])
        .expect("the new leader appends");
    // The old leader's insert of 1 and 2 had no answer: what is stored is not its own.
    old.assume_unsure();
    assert!(
        deposed(&old.append(&[&records[1], &records[2]])).is_some(),
        "records another leader stored were taken for this one's"
    );
    assert_eq!(batches(&mut admin), [(0, 0, 1), (1, 3, 2)]);
}

#[test]
fn a_write_larger_than_a_row_is_inserted_as_rows_that_fit_their_pages_or_not_at_all() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("tables");
    let epoch = lease::acquire(&mut admin, SHARD, "only", "http://only", true)
        .expect("the lease")
        .0
        .epoch;
    let mut log = TableLog::new(connect(&url), fenced(epoch), 0, 1).expect("a runtime");
    // Changes of about 900 bytes each, which recovery can replay.
    let records: Vec<Vec<u8>> = (0..40)
        .map(|lsn| {
            let change = crate::engine::Change::DeleteQueue {
                name: format!("q{lsn}-{}", "r".repeat(880)).into(),
                uid: 1,
                at: crate::engine::Timestamp(1),
            };
            format::to_record(lsn, &change).expect("encoded")
        })
        .collect();
    let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    log.append(&slices[..30]).expect("appended");
    let rows = batches(&mut admin);
    assert!(rows.len() >= 4, "{rows:?}");
    assert_eq!(rows.first().map(|r| r.0), Some(0));
    assert_eq!(rows.last().map(|r| r.1), Some(29));
    assert!(
        rows.windows(2).all(|pair| pair[1].0 == pair[0].1 + 1),
        "{rows:?}"
    );
    assert_eq!(
        number(
            &mut admin,
            "SELECT count(DISTINCT xmin::text) FROM log_batches".into()
        ),
        1,
        "one insert"
    );
    assert!(
        number(
            &mut admin,
            "SELECT max(length(records))::bigint FROM log_batches".into()
        ) <= 8_000
    );
    assert_eq!(toasted_bytes(&mut admin, "log_batches"), 0);
    // Recovery reads the rows back as the one write they are.
    let engine = crate::engine::Engine::<tokio::sync::Notify>::new("000000000000", "us-east-1");
    let recovered = super::recovery::recover(&mut admin, SHARD, &engine).expect("recovered");
    assert_eq!(recovered.report.replayed, 30);
    assert_eq!(recovered.report.next_lsn, 30);

    // Another node takes the lease: none of the next write's rows goes in.
    sql(&mut admin, "UPDATE log_shards SET expires = '-infinity'");
    lease::acquire(&mut admin, SHARD, "next", "http://next", true).expect("lapsed");
    assert!(deposed(&log.append(&slices[30..])).is_some());
    assert_eq!(batches(&mut admin), rows);
}

/// A leader frozen (or cut off) inside a transaction that holds the lease's row, as a snapshot
/// being kept does between its statements: the next node takes the lapsed lease within a few
/// seconds, because the server ends the idle transaction, rather than when TCP gives up on the
/// frozen node's connection (hours by default).
#[test]
fn a_leader_frozen_holding_the_lease_row_does_not_keep_the_next_from_taking_it() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("tables");
    lease::acquire(&mut admin, SHARD, "first", "http://first", true).expect("a free lease");
    sql(&mut admin, "UPDATE log_shards SET expires = now()");
    let mut frozen = connect(&url);
    frozen
        .run(
            super::connection::STARTUP_TIMEOUT,
            |client| -> Work<'_, _> {
                Box::pin(async move {
                    client
                        .batch_execute("BEGIN; SELECT 1 FROM log_shards WHERE shard = 0 FOR SHARE")
                        .await
                })
            },
        )
        .expect("the lease's row held, and nothing more said");
    let (taken, took) = std::sync::mpsc::channel();
    let taker = std::thread::spawn(move || {
        let mut next = connect(&url);
        let started = std::time::Instant::now();
        let taken_now = lease::acquire(&mut next, SHARD, "second", "http://second", true);
        let _ = taken.send((taken_now.map(|(taken, _)| taken.epoch), started.elapsed()));
    });
    let (epoch, after) = took
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the lease taken while the frozen node holds its row");
    assert_eq!(epoch.expect("taken"), 2);
    assert!(after < std::time::Duration::from_secs(10), "{after:?}");
    taker.join().unwrap();
    drop(frozen);
}

/// A node that leads the log at `url` once it may.
pub(super) fn leader_settings(url: &str) -> super::Settings {
    super::Settings {
        url: url.to_string(),
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
        advertise_url: "http://leader".into(),
        wait_for_lease: true,
        batch_wait: std::time::Duration::ZERO,
        commit_wait: std::time::Duration::ZERO,
        inserts: 1,
        require_synchronous_replication: false,
        shards_alone: false,
        shards: 1,
        placed: Vec::new(),
        placed_checked: Default::default(),
    }
}

/// A standby reads the snapshot the log starts from while the leader keeps a newer one, which
/// drops this one's rows: the read, one `REPEATABLE READ` transaction, gets it whole; outside
/// one it would find its chunks gone.
#[test]
fn a_snapshot_is_read_whole_while_the_leader_keeps_a_newer_one() {
    use crate::persist::snapshot::SnapshotStore;
    let Some(url) = database() else { return };
    let settings = leader_settings(&url);
    let mut leader = crate::engine::Engine::<tokio::sync::Notify>::new("000000000000", "us-east-1");
    let log = super::open(&settings, &mut leader).expect("leads");
    let t = crate::engine::Timestamp(1_000);
    for name in ["a", "b", "c"] {
        leader
            .queues
            .create_from(name, &[], &[], t)
            .expect("created");
    }
    let lsn = crate::engine::ChangeLog::next_lsn(&*log.log_writer);
    log.log_writer.wait_blocking(lsn).expect("durable");
    log.snapshots.take(&leader, &log.log_writer).expect("kept");

    let dropped = url.clone();
    let keep_a_newer_one = Box::new(move || {
        // The leader's keep, on its own connection, while the standby's read is open.
        std::thread::spawn(move || {
            let mut other = connect(&dropped);
            sql(&mut other, "DELETE FROM log_snapshot_chunks");
            sql(&mut other, "DELETE FROM log_snapshots");
        })
        .join()
        .expect("deleted");
    });
    let standby = crate::engine::Engine::<()>::new("000000000000", "us-east-1");
    let mut db = connect(&url);
    super::snapshots::load_pausing(&mut db, SHARD, &standby, keep_a_newer_one).expect("read whole");
    assert_eq!(standby.state_for_tests(), leader.state_for_tests());
    // The rows are gone for any read that starts now.
    let later = crate::engine::Engine::<()>::new("000000000000", "us-east-1");
    assert!(super::snapshots::load(&mut db, SHARD, &later).is_err());
    log.lease.release();
}

/// A snapshot that is not kept leaves no chunks behind, and chunks left by a leader that died
/// while writing one are removed by the next leader.
#[test]
fn chunks_of_snapshots_never_kept_are_removed() {
    use crate::persist::snapshot::SnapshotStore;
    let Some(url) = database() else { return };
    let settings = leader_settings(&url);
    let new_engine =
        || crate::engine::Engine::<tokio::sync::Notify>::new("000000000000", "us-east-1");
    let mut leader = new_engine();
    let log = super::open(&settings, &mut leader).expect("leads");
    let t = crate::engine::Timestamp(1_000);
    leader
        .queues
        .create_from("q", &[], &[], t)
        .expect("created");
    let lsn = crate::engine::ChangeLog::next_lsn(&*log.log_writer);
    log.log_writer.wait_blocking(lsn).expect("durable");
    let mut admin = connect(&url);
    let chunks =
        |admin: &mut Blocking| number(admin, "SELECT count(*) FROM log_snapshot_chunks".into());
    // Another node took the lease: the keep is refused, and its chunks go.
    sql(&mut admin, "UPDATE log_shards SET epoch = epoch + 1");
    assert!(log.snapshots.take(&leader, &log.log_writer).is_err());
    assert_eq!(chunks(&mut admin), 0);
    // A leader that died while writing one left a chunk; the next leader removes it.
    sql(
        &mut admin,
        "INSERT INTO log_snapshot_chunks (snapshot, chunk, bytes, shard) VALUES (42, 0, 'x', 0)",
    );
    sql(&mut admin, "UPDATE log_shards SET expires = '-infinity'");
    drop(log);
    let mut next = new_engine();
    let next_log = super::open(&settings, &mut next).expect("leads next");
    assert_eq!(chunks(&mut admin), 0);
    next_log.lease.release();
}

/// The log in the database held back while a snapshot is cut, then the leader deposed before
/// the held records are written: the snapshot is not kept (it waits for them, and they never
/// come), so the next leader numbers its records after what is durable, and its changes come
/// back after two more takeovers.
#[test]
fn a_snapshot_is_kept_only_once_the_records_it_covers_are_in_the_database() {
    use crate::persist::snapshot::SnapshotStore;
    use crate::persist::tests::{bodies, fifo, send};
    let Some(url) = database() else { return };
    let settings = leader_settings(&url);
    let new_engine =
        || crate::engine::Engine::<tokio::sync::Notify>::new("000000000000", "us-east-1");
    let t = crate::engine::Timestamp(1_000_000);
    let mut engine = new_engine();
    let log = super::open(&settings, &mut engine).expect("leads");
    engine
        .queues
        .create_from("a.fifo", &fifo(), &[], t)
        .expect("created");
    send(&engine, "a.fifo", "durable", t);
    let lsn = crate::engine::ChangeLog::next_lsn(&*log.log_writer);
    log.log_writer.wait_blocking(lsn).expect("durable");
    // Queued, never written: never acknowledged either.
    log.log_writer.hold_writes(true);
    send(&engine, "a.fifo", "lost with its leader", t);
    let engine = std::sync::Arc::new(engine);
    let taking = {
        let (snapshots, engine, log_writer) = (
            log.snapshots.clone(),
            engine.clone(),
            log.log_writer.clone(),
        );
        std::thread::spawn(move || snapshots.take(&engine, &log_writer))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !taking.is_finished() && log.log_writer.durability_waiters() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the snapshot neither kept nor waiting"
        );
        std::thread::yield_now();
    }
    // Another node takes over before the held records are written.
    let mut admin = connect(&url);
    sql(
        &mut admin,
        "UPDATE log_shards SET epoch = epoch + 1, expires = '-infinity'",
    );
    log.log_writer.hold_writes(false);
    assert!(
        taking.join().expect("no panic").is_err(),
        "a snapshot kept past what is durable"
    );
    drop(log);

    let mut next = new_engine();
    let next_log = super::open(&settings, &mut next).expect("leads next");
    assert_eq!(bodies(&next, "a.fifo"), ["durable"]);
    send(&next, "a.fifo", "after the takeover", t.plus_millis(1));
    let lsn = crate::engine::ChangeLog::next_lsn(&*next_log.log_writer);
    next_log.log_writer.wait_blocking(lsn).expect("durable");
    next_log.log_writer.close();
    next_log.lease.release();
    for start in 0..2 {
        let mut again = new_engine();
        let log = super::open(&settings, &mut again).expect("leads again");
        assert_eq!(
            bodies(&again, "a.fifo"),
            ["durable", "after the takeover"],
            "takeover {start} after"
        );
        log.log_writer.close();
        log.lease.release();
    }
}

/// A record that creates the standard queue `name`.
pub(super) fn creating(lsn: u64, name: &str) -> Vec<u8> {
    let change = crate::engine::Change::CreateQueue {
        name: name.into(),
        uid: 1_000 + lsn,
        config: Box::new(crate::engine::queue::config::QueueConfig::new(
            false,
            crate::engine::Timestamp(1_000),
        )),
        tags: Default::default(),
    };
    format::to_record(lsn, &change).expect("encodes")
}

pub(super) fn queues_of<W: Default>(engine: &crate::engine::Engine<W>) -> Vec<String> {
    engine
        .queues
        .list("")
        .iter()
        .map(|name| name.to_string())
        .collect()
}

/// A node leading the log at `url` with two inserts under way at once, its engine and its log.
fn overlapping_leader(
    url: &str,
) -> (
    super::Settings,
    crate::engine::Engine<tokio::sync::Notify>,
    super::DatabaseLog,
) {
    let settings = super::Settings {
        inserts: 2,
        ..leader_settings(url)
    };
    let mut leader = crate::engine::Engine::new("000000000000", "us-east-1");
    let log = super::open(&settings, &mut leader).expect("leads");
    (settings, leader, log)
}

/// A leader with two inserts under way stopped after the second committed and before the
/// first did: the gap and the rows after it, never acknowledged, end the log. A standby waits
/// at the gap; a gap with the rows of two inserts after it, or in an epoch whose leader wrote
/// one insert at a time, is damage; the next leader cuts the tail and writes on from the gap,
/// and the standby follows it there.
#[test]
fn a_torn_tail_ends_the_log_a_standby_waits_at_its_gap_and_the_next_leader_cuts_it() {
    use crate::engine::{ChangeLog, Engine};
    let Some(url) = database() else { return };
    let (settings, leader, log) = overlapping_leader(&url);
    let t = crate::engine::Timestamp(1_000);
    for name in ["a", "b"] {
        leader.queues.create_from(name, &[], &[], t).expect("made");
    }
    let gap = log.log_writer.next_lsn();
    log.log_writer.wait_blocking(gap).expect("durable");
    // The second of two writes, kept; the first (records `gap` and `gap + 1`) never was.
    let (late, later) = (creating(gap + 2, "late"), creating(gap + 3, "later"));
    let mut second = TableLog::new(connect(&url), fenced(1), gap + 2, 1).expect("a runtime");
    second.append(&[&late, &later]).expect("kept");

    let mut db = connect(&url);
    let standby = Engine::<()>::new("000000000000", "us-east-1");
    let mut follower = super::recovery::Follower::start(&mut db, SHARD, &standby).expect("loads");
    follower
        .catch_up(&mut db, &standby)
        .expect("stops at the gap");
    assert_eq!(follower.next_lsn(), gap, "waits at the gap");
    assert_eq!(queues_of(&standby), ["a", "b"]);

    let mut admin = connect(&url);
    // Another insert after it: more than a torn tail.
    let latest = creating(gap + 4, "latest");
    second.append(&[&latest]).expect("kept");
    let fresh = Engine::<()>::new("000000000000", "us-east-1");
    let refused = super::recovery::recover(&mut db, SHARD, &fresh).err();
    assert!(
        matches!(&refused, Some(crate::persist::RecoveryError::Corruption { file, .. })
            if *file == format!("log_batches row (shard {SHARD}, first_lsn {})", gap + 2)),
        "the rows of two inserts after a gap are damage: {refused:?}"
    );
    let removed = format!("DELETE FROM log_batches WHERE first_lsn = {}", gap + 4);
    admin
        .run(
            super::connection::STARTUP_TIMEOUT,
            move |client| -> Work<'_, _> {
                Box::pin(async move { client.execute(&removed, &[]).await })
            },
        )
        .expect("removed");
    // A leader that never overlapped its inserts leaves no torn tail: its gap is damage.
    sql(&mut admin, "UPDATE log_epochs SET inserts = 1");
    let fresh = Engine::<()>::new("000000000000", "us-east-1");
    assert!(
        matches!(
            super::recovery::recover(&mut db, SHARD, &fresh),
            Err(crate::persist::RecoveryError::Corruption { .. })
        ),
        "a gap in an epoch of one insert at a time is damage"
    );
    sql(&mut admin, "UPDATE log_epochs SET inserts = 2");

    // The leader stops; the next one cuts the tail and writes from the gap.
    log.lease.release();
    drop(log);
    let mut next = Engine::<tokio::sync::Notify>::new("000000000000", "us-east-1");
    let led = super::open(&settings, &mut next).expect("the next leader");
    let (cut, _, bytes) = led.report.dropped_tail.clone().expect("a tail cut");
    assert!(
        cut.contains(&format!(
            "rows of shard {SHARD} from first_lsn {} to {}",
            gap + 2,
            gap + 3
        )),
        "{cut}"
    );
    assert!(bytes > 0);
    assert_eq!(queues_of(&next), ["a", "b"]);
    next.queues.create_from("c", &[], &[], t).expect("made");
    let end = led.log_writer.next_lsn();
    assert_eq!(end, gap + 1, "numbered on from the gap");
    led.log_writer.wait_blocking(end).expect("durable");
    assert_eq!(
        batches(&mut admin)
            .last()
            .map(|&(first, last, epoch)| (first, last, epoch)),
        Some((gap as i64, gap as i64, 2)),
        "the new leader's batch follows the records recovered"
    );
    follower.catch_up(&mut db, &standby).expect("follows on");
    assert_eq!(queues_of(&standby), ["a", "b", "c"]);
    led.lease.release();
}

/// Two inserts under way: the first is held by the database, then refused, while the second
/// commits. Nothing is acknowledged past the first's records while they are missing; then
/// both writes' records are written again, and the log holds each record once, in order.
#[test]
fn a_write_that_fails_while_the_next_is_kept_holds_back_both_until_written_again() {
    use crate::engine::{ChangeLog, Engine};
    let Some(url) = database() else { return };
    let (_, leader, log) = overlapping_leader(&url);
    let t = crate::engine::Timestamp(1_000);
    leader
        .queues
        .create_from("first", &[], &[], t)
        .expect("made");
    let held = log.log_writer.next_lsn();
    log.log_writer.wait_blocking(held).expect("durable");
    let mut admin = connect(&url);
    let trigger = format!(
        "CREATE SEQUENCE refusals; \
         CREATE FUNCTION refuse_once() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           IF NEW.first_lsn = {held} AND nextval('refusals') = 1 THEN \
             PERFORM pg_sleep(0.5); RAISE EXCEPTION 'refused once'; \
           END IF; RETURN NEW; END $$; \
         CREATE TRIGGER refuse_once BEFORE INSERT ON log_batches \
           FOR EACH ROW EXECUTE FUNCTION refuse_once()"
    );
    admin
        .run(
            super::connection::STARTUP_TIMEOUT,
            move |client| -> Work<'_, _> {
                Box::pin(async move { client.batch_execute(&trigger).await })
            },
        )
        .expect("the trigger");

    leader
        .queues
        .create_from("held", &[], &[], t)
        .expect("made");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // The first write is under way (held by the trigger) when the second begins.
    while number(
        &mut admin,
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'".into(),
    ) == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the first insert never waited"
        );
        std::thread::yield_now();
    }
    leader
        .queues
        .create_from("kept", &[], &[], t)
        .expect("made");
    let kept_row = format!(
        "SELECT count(*) FROM log_batches WHERE first_lsn = {}",
        held + 1
    );
    while number(&mut admin, kept_row.clone()) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the second write was not kept beside the first"
        );
        std::thread::yield_now();
    }
    assert_eq!(
        number(
            &mut admin,
            format!("SELECT count(*) FROM log_batches WHERE first_lsn = {held}")
        ),
        0,
        "the first write is still held"
    );
    assert!(
        log.log_writer.durable().lsn <= held,
        "nothing acknowledged past the gap"
    );

    // The first is refused, then written again; the second's record is not stored twice.
    let end = held + 2;
    let written = crate::persist::writer::Durable {
        lsn: end,
        failed: false,
    };
    assert!(
        log.log_writer.wait_for_durable(
            written,
            deadline.saturating_duration_since(std::time::Instant::now())
        ),
        "never written again: {:?}",
        log.log_writer.durable()
    );
    assert_eq!(
        number(&mut admin, "SELECT last_value FROM refusals".into()),
        2,
        "refused once, then kept"
    );
    let rows = batches(&mut admin);
    let mut next = 0;
    for (first, last, _) in &rows {
        assert_eq!(*first, next, "no gap, no record twice: {rows:?}");
        next = last + 1;
    }
    assert_eq!(next as u64, end);
    let standby = Engine::<()>::new("000000000000", "us-east-1");
    super::recovery::recover(&mut connect(&url), SHARD, &standby).expect("recovers");
    assert_eq!(queues_of(&standby), ["first", "held", "kept"]);
    log.lease.release();
}
