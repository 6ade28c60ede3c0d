//! Moving a range of shards cut short, against the test clusters: the range stays where it
//! was, held by the move, and running the move again finishes it.

use super::connection::Work;
use super::range_move::move_range;
use super::shard_map::Placed;
use super::tests::{connect, database, leader_settings, number, sql, triples, Holding};
use super::{lease, schema};
use super::{OpenError, Settings};

pub(super) fn elsewhere() -> Option<String> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(super::test_database::fresh_database_elsewhere())
}

/// Each batch of shards 2 and 3 in the database at `url`: shard, first number, epoch, records.
fn batches(url: &str) -> Vec<(i32, i64, i64, Vec<u8>)> {
    connect(url)
        .run(
            super::connection::STARTUP_TIMEOUT,
            |client| -> Work<'_, _> {
                Box::pin(async move {
                    let rows = client
                        .query(
                            "SELECT shard, first_lsn, epoch, records FROM log_batches \
                             WHERE shard BETWEEN 2 AND 3 ORDER BY shard, first_lsn",
                            &[],
                        )
                        .await?;
                    Ok(rows
                        .iter()
                        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                        .collect())
                })
            },
        )
        .expect("read")
}

/// A home of four shards holding `batches` (SQL rows of `log_batches`), and the settings of
/// a move from it.
pub(super) fn home_with(home: &str, batches: &'static str) -> Settings {
    let mut db = connect(home);
    schema::prepare(&mut db, "us-east-1", "000000000000", 4).expect("tables");
    sql(&mut db, batches);
    Settings {
        shards: 4,
        ..leader_settings(home)
    }
}

pub(super) const BATCHES: &str =
    "INSERT INTO log_batches (shard, first_lsn, last_lsn, epoch, records) \
    VALUES (1, 0, 0, 1, '\\x01'), (2, 0, 1, 1, '\\x0203'), (2, 2, 2, 1, '\\x04'), \
    (3, 0, 0, 1, '\\x05')";

fn shards_2_3(url: &str) -> Placed {
    Placed {
        first: 2,
        last: 3,
        url: url.to_string(),
    }
}

/// Tries the move while the home's record of it waits for the lock past its statements' 5 s,
/// so that it fails: the range is copied and held, not moved.
pub(super) fn cut_short(home: &str, settings: &Settings, to: &Placed) {
    let lock = format!("SELECT pg_advisory_lock({})", schema::STARTS_LOCK);
    let held = Holding::after(home, &lock);
    match move_range(settings, to) {
        Err(OpenError::Database(cause)) => assert!(cause.contains("recording the move"), "{cause}"),
        other => panic!("not cut short: {other:?}"),
    }
    held.finish(&format!(
        "SELECT pg_advisory_unlock({})",
        schema::STARTS_LOCK
    ));
}

#[test]
fn a_move_cut_short_before_the_home_recorded_it_is_finished_by_running_it_again() {
    let (Some(home), Some(target)) = (database(), elsewhere()) else {
        return;
    };
    let settings = home_with(&home, BATCHES);
    let mut db = connect(&home);
    sql(
        &mut db,
        "INSERT INTO log_epochs (shard, epoch, inserts) VALUES (2, 1, 2)",
    );
    sql(
        &mut db,
        "UPDATE log_shards SET clock_ms = 12345 WHERE shard = 3",
    );
    let before = batches(&home);
    let to = shards_2_3(&target);
    cut_short(&home, &settings, &to);
    assert_eq!(
        number(&mut db, "SELECT count(*) FROM log_placed".into()),
        0,
        "nothing recorded"
    );
    assert_eq!(batches(&target), before, "copied");
    assert_eq!(
        number(
            &mut db,
            "SELECT count(*) FROM log_shards WHERE shard BETWEEN 2 AND 3 \
             AND node = 'orderly --move-shards' AND expires > now() + interval '99 years' AND epoch = 1"
                .into()
        ),
        2,
        "held by the move at home, with an epoch no node had"
    );
    // A node given the old map waits for those leases: none leads the range meanwhile.
    let taken = lease::acquire(&mut db, 2, "node", "http://node", false);
    assert!(taken.is_err(), "a lease held by the move was taken");

    // Again: the copy is made anew over the first (no key collides), and the home records it.
    let moved = move_range(&settings, &to).expect("finished");
    assert_eq!((moved.batches, moved.snapshots, moved.bytes), (3, 0, 4));
    assert_eq!(batches(&target), before, "copied once");
    assert!(batches(&home).is_empty(), "dropped at home");
    let mut kept = connect(&target);
    let name = schema::name_of(&mut kept).expect("named").expect("a name");
    assert_eq!(
        number(
            &mut db,
            format!(
                "SELECT count(*) FROM log_placed WHERE first_shard = 2 AND last_shard = 3 \
                 AND database = '{name}'"
            )
        ),
        1
    );
    // Free there, at the epoch the move took (the second try took none more), and the
    // epochs that allow a torn tail came along.
    assert_eq!(
        number(
            &mut kept,
            "SELECT count(*) FROM log_shards WHERE node = '' AND epoch = 1".into()
        ),
        2
    );
    assert_eq!(
        number(
            &mut kept,
            "SELECT clock_ms FROM log_shards WHERE shard = 3".into()
        ),
        12345,
        "the time its leaders reached"
    );
    assert_eq!(
        number(
            &mut kept,
            "SELECT count(*) FROM log_epochs WHERE shard = 2 AND epoch = 1 AND inserts = 2".into()
        ),
        1
    );
    // The shard that stays is untouched.
    assert_eq!(
        number(
            &mut db,
            "SELECT count(*) FROM log_batches WHERE shard = 1".into()
        ),
        1
    );
}

#[test]
fn a_move_cut_short_is_abandoned_by_moving_the_range_where_it_is() {
    let (Some(home), Some(target)) = (database(), elsewhere()) else {
        return;
    };
    let settings = home_with(&home, BATCHES);
    cut_short(&home, &settings, &shards_2_3(&target));
    let given = move_range(&settings, &shards_2_3(&home)).expect("abandoned");
    assert_eq!(given.abandoned, 2);
    let mut db = connect(&home);
    assert_eq!(
        number(
            &mut db,
            "SELECT count(*) FROM log_shards WHERE shard BETWEEN 2 AND 3 AND node = '' \
             AND expires < now()"
                .into()
        ),
        2,
        "free again"
    );
    lease::acquire(&mut db, 2, "node", "http://node", false).expect("taken at once");
    assert_eq!(batches(&home).len(), 3, "kept where they were");
    // Nothing left to abandon: the range is kept there.
    match move_range(&settings, &shards_2_3(&home)) {
        Err(OpenError::ShardMap(why)) => assert!(why.contains("keeps them already"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_log_with_a_gap_is_not_moved_nor_its_leases_taken() {
    let (Some(home), Some(target)) = (database(), elsewhere()) else {
        return;
    };
    // Between two batches of shard 3 (one of several records before them), then in shard 2
    // between the start of a log with no snapshot and its first batch.
    let settings = home_with(
        &home,
        "INSERT INTO log_batches (shard, first_lsn, last_lsn, epoch, records) \
         VALUES (3, 0, 1, 1, '\\x01'), (3, 2, 2, 1, '\\x02'), (3, 4, 4, 1, '\\x04')",
    );
    let refused = |gap: &str| match move_range(&settings, &shards_2_3(&target)) {
        Err(OpenError::ShardMap(why)) => assert!(why.contains(gap), "{why}"),
        other => panic!("moved: {other:?}"),
    };
    refused("shard 3's log has a gap before record 4");
    let mut db = connect(&home);
    sql(&mut db, "DELETE FROM log_batches WHERE shard = 3");
    sql(
        &mut db,
        "INSERT INTO log_batches (shard, first_lsn, last_lsn, epoch, records) \
         VALUES (2, 5, 5, 1, '\\x05')",
    );
    refused("shard 2's log has a gap before record 5");
    assert_eq!(
        number(
            &mut db,
            "SELECT count(*) FROM log_shards WHERE shard BETWEEN 2 AND 3 AND node = ''".into()
        ),
        2,
        "the leases untouched"
    );
}

#[test]
fn a_move_run_again_once_finished_touches_neither_database() {
    let (Some(home), Some(first), Some(second)) = (database(), elsewhere(), elsewhere()) else {
        return;
    };
    let settings = home_with(&home, BATCHES);
    move_range(&settings, &shards_2_3(&first)).expect("moved out of the home");
    let on = Settings {
        placed: vec![shards_2_3(&first)],
        ..settings
    };
    move_range(&on, &shards_2_3(&second)).expect("moved on");
    // The same command again: the home records the second, which keeps the range; the first
    // keeps its leases held for good.
    match move_range(&on, &shards_2_3(&second)) {
        Err(OpenError::ShardMap(why)) => assert!(why.contains("keeps them already"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        number(
            &mut connect(&first),
            "SELECT count(*) FROM log_shards WHERE node = 'orderly --move-shards' \
             AND expires > now()"
                .into()
        ),
        2,
        "still held where the range moved from"
    );
    assert_eq!(batches(&second).len(), 3);
}

#[test]
fn a_move_out_of_the_home_run_again_drops_the_rows_it_left_there() {
    let (Some(home), Some(target)) = (database(), elsewhere()) else {
        return;
    };
    let settings = home_with(&home, BATCHES);
    move_range(&settings, &shards_2_3(&target)).expect("moved out of the home");
    // As a move whose last step failed leaves them: the range's rows but its leases.
    let mut db = connect(&home);
    sql(
        &mut db,
        "INSERT INTO log_batches (shard, first_lsn, last_lsn, epoch, records) \
         VALUES (2, 0, 1, 1, '\\x0203'), (2, 2, 2, 1, '\\x04'), (3, 0, 0, 1, '\\x05')",
    );
    sql(
        &mut db,
        "INSERT INTO log_epochs (shard, epoch, inserts) VALUES (3, 7, 2)",
    );
    let on = Settings {
        placed: vec![shards_2_3(&target)],
        ..settings
    };
    let again = move_range(&on, &shards_2_3(&target)).expect("run again");
    assert_eq!((again.forgotten, again.abandoned), (4, 0));
    assert_eq!(batches(&home), Vec::new(), "dropped from the home");
    let left = "SELECT count(*) FROM log_epochs WHERE shard BETWEEN 2 AND 3";
    assert_eq!(number(&mut db, left.into()), 0);
    let other = "SELECT count(*) FROM log_batches WHERE shard = 1";
    assert_eq!(number(&mut db, other.into()), 1, "another shard's kept");
    assert_eq!(batches(&target).len(), 3, "the range's database untouched");
    // Nothing left: the same command changes nothing.
    match move_range(&on, &shards_2_3(&target)) {
        Err(OpenError::ShardMap(why)) => assert!(why.contains("keeps them already"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// The home's record of where each range is kept: first, last, database name.
pub(super) fn recorded(home: &str) -> Vec<(i32, i32, Option<String>)> {
    let query = "SELECT first_shard, last_shard, database FROM log_placed ORDER BY first_shard";
    triples(&mut connect(home), query)
}

/// The settings of a move from a home of four shards, its nodes given `placed`.
pub(super) fn placed_on(home: &str, placed: Vec<Placed>) -> Settings {
    Settings {
        shards: 4,
        placed,
        ..leader_settings(home)
    }
}

pub(super) fn shard(shard: u32, url: &str) -> Placed {
    Placed {
        first: shard,
        last: shard,
        url: url.to_string(),
    }
}

#[test]
fn a_range_is_split_and_joined_again_by_way_of_the_home() {
    let (Some(home), Some(whole), Some(two), Some(three), Some(joined)) = (
        database(),
        elsewhere(),
        elsewhere(),
        elsewhere(),
        elsewhere(),
    ) else {
        return;
    };
    let settings = home_with(&home, BATCHES);
    move_range(&settings, &shards_2_3(&whole)).expect("moved out of the home");
    let first_moved = batches(&whole);
    assert_eq!(first_moved.len(), 3);
    let on_whole = placed_on(&home, vec![shards_2_3(&whole)]);
    // A move takes shards from one place only, saying how ranges are joined.
    let wider = Placed {
        first: 1,
        ..shards_2_3(&three)
    };
    match move_range(&on_whole, &wider) {
        Err(OpenError::ShardMap(why)) => {
            assert!(why.contains("to join ranges, move one into"), "{why}");
            assert!(why.contains("back into the home"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    let back = move_range(&on_whole, &shards_2_3(&home)).expect("back into the home");
    assert!(back.home);
    assert_eq!(recorded(&home), Vec::new());
    // Split: each shard into a database of its own.
    move_range(&settings, &shard(2, &two)).expect("shard 2 out");
    move_range(&settings, &shard(3, &three)).expect("shard 3 out");
    let names: Vec<(i32, i32)> = recorded(&home).iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(names, vec![(2, 2), (3, 3)]);
    let kept = |url: &str| -> Vec<(i32, i64)> { batches(url).iter().map(|b| (b.0, b.1)).collect() };
    assert_eq!(kept(&two), vec![(2, 0), (2, 2)], "shard 2's batches, only");
    assert_eq!(kept(&three), vec![(3, 0)], "shard 3's batch, only");
    assert_eq!(batches(&home), Vec::new(), "none left in the home");
    // Joined again: both back home, then the whole range out at once.
    let split = placed_on(&home, vec![shard(2, &two), shard(3, &three)]);
    move_range(&split, &shard(2, &home)).expect("shard 2 home");
    let one_left = placed_on(&home, vec![shard(3, &three)]);
    move_range(&one_left, &shard(3, &home)).expect("shard 3 home");
    move_range(&placed_on(&home, vec![]), &shards_2_3(&joined)).expect("joined out of the home");
    let names: Vec<(i32, i32)> = recorded(&home).iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(names, vec![(2, 3)]);
    assert_eq!(batches(&joined), first_moved, "every batch, as first moved");
    let leases = "SELECT count(*) FROM log_shards WHERE shard BETWEEN 2 AND 3 AND node = ''";
    assert_eq!(
        number(&mut connect(&joined), leases.into()),
        2,
        "free to lead"
    );
}

/// A move of a range kept in a database of its own, cut short, then abandoned while the home
/// refuses to drop what an earlier move left there: the leases are given back and said so,
/// with why the rows stayed; once the home drops rows again, running the command again drops
/// them.
#[test]
fn an_abandoned_move_whose_drop_of_leftovers_fails_still_says_the_leases_it_gave_back() {
    let (Some(home), Some(kept), Some(next)) = (database(), elsewhere(), elsewhere()) else {
        return;
    };
    let settings = home_with(&home, BATCHES);
    move_range(&settings, &shards_2_3(&kept)).expect("moved out of the home");
    let on = placed_on(&home, vec![shards_2_3(&kept)]);
    cut_short(&home, &on, &shards_2_3(&next));
    // As a move out of the home whose last step failed leaves them.
    let mut db = connect(&home);
    sql(
        &mut db,
        "INSERT INTO log_batches (shard, first_lsn, last_lsn, epoch, records) \
         VALUES (2, 0, 1, 1, '\\x0203'), (3, 0, 0, 1, '\\x05')",
    );
    refuse_drops(&mut db);
    let abandoned = move_range(&on, &shards_2_3(&kept)).expect("the leases given back");
    assert_eq!((abandoned.abandoned, abandoned.forgotten), (2, 0));
    assert!(abandoned.placed, "kept in a database of its own");
    let why = abandoned.left.expect("why the home's rows stayed");
    assert!(why.contains("drops refused for the test"), "{why}");
    let free = "SELECT count(*) FROM log_shards WHERE shard BETWEEN 2 AND 3 AND node = '' \
                AND expires < now()";
    assert_eq!(number(&mut connect(&kept), free.into()), 2, "free again");
    assert_eq!(
        batches(&kept).len(),
        3,
        "the range's batches kept where they are"
    );
    assert_eq!(batches(&home).len(), 2, "the leftovers still there");
    // The home drops rows again: the same command drops them, and has no lease to give back.
    sql(&mut db, "DROP TRIGGER refuse_drops ON log_batches");
    let again = move_range(&on, &shards_2_3(&kept)).expect("run again");
    assert_eq!((again.abandoned, again.forgotten), (0, 2));
    assert_eq!(again.left, None);
    assert_eq!(batches(&home), Vec::new(), "dropped from the home");
    let names: Vec<(i32, i32)> = recorded(&home).iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(names, vec![(2, 3)], "still kept in a database of its own");
}

/// Makes the database `db` is connected to refuse every delete from `log_batches`, with the
/// message 'drops refused for the test', until the trigger `refuse_drops` is dropped.
pub(super) fn refuse_drops(db: &mut super::connection::Blocking) {
    sql(
        db,
        "CREATE FUNCTION refuse_drops() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN RAISE EXCEPTION 'drops refused for the test'; END $$",
    );
    sql(
        db,
        "CREATE TRIGGER refuse_drops BEFORE DELETE ON log_batches \
         FOR EACH STATEMENT EXECUTE FUNCTION refuse_drops()",
    );
}

/// How many advisory locks on `key` in the database `url` are `granted` (or waited for).
fn advisory(url: &str, key: i64, granted: bool) -> i64 {
    number(
        &mut connect(url),
        format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = {key} \
             AND granted = {granted}"
        ),
    )
}

/// Waits until `ready` holds, at most 20 s: what it reads is the database's state, which no
/// event here reports, so it looks again every 20 ms.
fn until(what: &str, ready: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "never {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_move_whose_home_connection_is_lost_records_nothing_without_its_lock() {
    let (Some(home), Some(target)) = (database(), elsewhere()) else {
        return;
    };
    let settings = home_with(&home, BATCHES);
    let move_lock = super::range_lock::MOVE_LOCK;
    // The new database is made under the lock every start takes: held there, the move waits
    // with the home's lock on moves taken.
    let starts = format!("SELECT pg_advisory_lock({})", schema::STARTS_LOCK);
    let held = Holding::after(&target, &starts);
    let to = shards_2_3(&target);
    let moving = std::thread::spawn({
        let (home, to) = (home.clone(), to.clone());
        move || move_range(&placed_on(&home, Vec::new()), &to)
    });
    until("waited in the new database", || {
        advisory(&target, schema::STARTS_LOCK, false) == 1
    });
    assert_eq!(
        advisory(&home, move_lock, true),
        1,
        "the move holds its lock"
    );
    // The connection holding the lock on moves is cut: the lock goes with it, so another
    // move could start, and this one must not record on a new connection.
    let cut = number(
        &mut connect(&home),
        format!(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_locks \
             WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = {move_lock}) AS cut"
        ),
    );
    assert_eq!(cut, 1);
    until("let go of the lock", || {
        advisory(&home, move_lock, true) == 0
    });
    held.finish(&format!(
        "SELECT pg_advisory_unlock({})",
        schema::STARTS_LOCK
    ));
    match moving.join().expect("the move ran") {
        Err(OpenError::Database(cause)) => {
            assert!(cause.contains("lock on moves"), "{cause}");
            assert!(cause.contains("run it again"), "{cause}");
        }
        other => panic!("recorded without its lock: {other:?}"),
    }
    assert!(recorded(&home).is_empty(), "nothing recorded");
    // Run again, with a lock of its own: finished.
    let moved = move_range(&settings, &to).expect("finished");
    assert_eq!(moved.batches, 3);
    assert_eq!(recorded(&home).len(), 1);
}
