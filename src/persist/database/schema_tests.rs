//! The tables themselves, against the test cluster: the home they belong to, how their rows
//! are stored, the upgrade from earlier versions, and one log per shard.

use super::connection::Blocking;
use super::lease::Fence;
use super::table_log::{deposed, TableLog};
use super::tests::{
    connect, creating, database, fenced, leader_settings, number, queues_of, sql, toasted_bytes,
    SHARD,
};
use super::{lease, schema};
use crate::persist::format;
use crate::persist::writer::LogSink;

#[test]
fn a_database_of_another_home_is_refused() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("tables");
    schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("again");
    let refused = schema::prepare(&mut admin, "eu-west-1", "000000000000", 1);
    assert!(
        matches!(refused, Err(super::OpenError::OtherHome { ref region, .. }) if region == "us-east-1"),
        "{refused:?}"
    );
}

#[test]
fn batches_up_to_8_kb_stay_in_their_rows_and_nothing_written_is_compressed() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("tables");
    // A second start finds the tables as the first left them.
    schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("tables again");
    let epoch = lease::acquire(&mut admin, SHARD, "only", "http://only", true)
        .expect("the lease")
        .0
        .epoch;
    let mut log = TableLog::new(connect(&url), fenced(epoch), 0, 1).expect("a runtime");
    // Bodies as compressible as text often is.
    let mut six_kb = format::record_header(0).to_vec();
    six_kb.extend(std::iter::repeat_n(b'a', 6_000));
    log.append(&[&six_kb]).expect("appended");
    let mut twenty_kb = format::record_header(1).to_vec();
    twenty_kb.extend(std::iter::repeat_n(b'b', 20_000));
    log.append(&[&twenty_kb]).expect("appended");
    sql(
        &mut admin,
        "INSERT INTO log_snapshot_chunks (snapshot, chunk, bytes, shard) \
         VALUES (1, 0, decode(repeat('ab', 100000), 'hex'), 0)",
    );
    // Only the batch too large for a row went to TOAST, and it went there whole.
    let framed = |record: &[u8]| (record.len() + crate::persist::record::HEADER_BYTES) as i64;
    assert_eq!(toasted_bytes(&mut admin, "log_batches"), framed(&twenty_kb));
    assert_eq!(
        number(
            &mut admin,
            "SELECT count(*) FROM log_batches WHERE pg_column_compression(records) IS NULL".into()
        ),
        2
    );
    assert_eq!(toasted_bytes(&mut admin, "log_snapshot_chunks"), 100_000);
}

#[test]
fn tables_made_before_the_storage_settings_get_them_at_the_next_start() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    // As the first builds of version 2 left them (no clock in the lease, no `log_epochs`):
    // batches compressed (the oldest builds), rows kept up to 8 KB but vacuumed and analyzed
    // as they were inserted (the last).
    for statement in [
        "CREATE TABLE log_home (id integer PRIMARY KEY CHECK (id = 1), version integer NOT NULL, \
         region text NOT NULL, account text NOT NULL, snapshot bigint)",
        "INSERT INTO log_home VALUES (1, 2, 'us-east-1', '000000000000', NULL)",
        "CREATE TABLE log_leader (id integer PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL, \
         node text NOT NULL, url text NOT NULL, expires timestamptz NOT NULL)",
        "INSERT INTO log_leader VALUES (1, 3, 'gone', 'http://gone', '-infinity')",
        "CREATE TABLE log_batches (first_lsn bigint PRIMARY KEY, last_lsn bigint NOT NULL, \
         epoch bigint NOT NULL, records bytea NOT NULL) WITH (toast_tuple_target = 8160)",
        "CREATE TABLE log_snapshots (id bigint PRIMARY KEY, first_lsn bigint NOT NULL, \
         epoch bigint NOT NULL, chunks integer NOT NULL, bytes bigint NOT NULL, \
         taken timestamptz NOT NULL DEFAULT now())",
        "CREATE TABLE log_snapshot_chunks (snapshot bigint NOT NULL, chunk integer NOT NULL, \
         bytes bytea NOT NULL, PRIMARY KEY (snapshot, chunk))",
    ] {
        sql(&mut admin, statement);
    }
    // A node of another home is refused and leaves them as they were.
    let refused = schema::prepare(&mut admin, "eu-west-1", "000000000000", 1);
    assert!(
        matches!(refused, Err(super::OpenError::OtherHome { .. })),
        "{refused:?}"
    );
    let version = "SELECT version::bigint FROM log_home";
    assert_eq!(number(&mut admin, version.into()), 2);
    let shards = schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("upgraded");
    assert_eq!(shards, 1);
    assert_eq!(number(&mut admin, version.into()), schema::VERSION as i64);
    // Version 2's lease stays, held for good: no node of version 2 leads these tables again.
    let retired = "SELECT count(*) FROM log_leader WHERE expires = 'infinity'";
    assert_eq!(number(&mut admin, retired.into()), 1);
    // Its lease is shard 0's, with the epoch it had and a clock from the start.
    assert_eq!(
        number(
            &mut admin,
            "SELECT count(*) FROM log_shards WHERE shard = 0 AND epoch = 3 AND clock_ms = 0 \
             AND (SELECT version FROM log_home) = 4"
                .into()
        ),
        1
    );
    assert_eq!(
        number(
            &mut admin,
            "SELECT count(*) FROM pg_attribute WHERE attstorage = 'e' AND \
             ((attrelid = 'log_batches'::regclass AND attname = 'records') OR \
              (attrelid = 'log_snapshot_chunks'::regclass AND attname = 'bytes'))"
                .into()
        ),
        2
    );
    assert_eq!(
        number(
            &mut admin,
            "SELECT count(*) FROM pg_class WHERE oid = 'log_batches'::regclass \
             AND 'toast_tuple_target=8160' = ANY (reloptions)"
                .into()
        ),
        1
    );
    // Autovacuum leaves both tables and their TOAST tables alone until rows are deleted, and
    // never gathers statistics on them.
    assert_eq!(
        number(
            &mut admin,
            "SELECT count(*) FROM pg_class WHERE \
             (oid IN ('log_batches'::regclass, 'log_snapshot_chunks'::regclass) \
              AND 'autovacuum_vacuum_insert_threshold=-1' = ANY (reloptions) \
              AND 'autovacuum_analyze_threshold=2147483647' = ANY (reloptions)) \
             OR (oid IN (SELECT reltoastrelid FROM pg_class WHERE oid IN \
                 ('log_batches'::regclass, 'log_snapshot_chunks'::regclass)) \
              AND 'autovacuum_vacuum_insert_threshold=-1' = ANY (reloptions))"
                .into()
        ),
        4
    );
}

/// Each shard's log is its own: its lease fences its rows only, recovery reads its rows only,
/// and its next leader removes the chunks of its own snapshots never kept, none of another's
/// (which may be being written). A node asking for another count of shards than the database
/// records is refused, with the count to start it with.
#[test]
fn each_shard_keeps_a_log_of_its_own() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("tables");
    sql(&mut admin, "UPDATE log_home SET shards = 2");
    let shards = schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("again");
    assert_eq!(shards, 2);
    let fence = |shard: i32, admin: &mut Blocking| Fence {
        shard,
        epoch: lease::acquire(admin, shard, "node", "http://node", true)
            .expect("a free lease")
            .0
            .epoch,
    };
    let (zero, one) = (fence(0, &mut admin), fence(1, &mut admin));
    assert_eq!(
        (zero.epoch, one.epoch),
        (1, 1),
        "each shard counts its own epochs"
    );
    let mut log_zero = TableLog::new(connect(&url), zero, 0, 1).expect("a runtime");
    let mut log_one = TableLog::new(connect(&url), one, 0, 1).expect("a runtime");
    log_zero
        .append(&[&creating(0, "zero-a"), &creating(1, "zero-b")])
        .expect("shard 0 appends");
    log_one
        .append(&[&creating(0, "one-a")])
        .expect("shard 1 appends from record 0 too");
    // Another node takes shard 1: its old leader writes nothing more; shard 0's goes on.
    sql(
        &mut admin,
        "UPDATE log_shards SET epoch = epoch + 1 WHERE shard = 1",
    );
    assert_eq!(
        deposed(&log_one.append(&[&creating(1, "one-late")])),
        Some(1)
    );
    log_zero
        .append(&[&creating(2, "zero-c")])
        .expect("shard 0's lease is its own");
    let recovered = |shard: i32, admin: &mut Blocking| {
        let engine = crate::engine::Engine::<()>::new("000000000000", "us-east-1");
        super::recovery::recover(admin, shard, &engine).expect("recovered");
        queues_of(&engine)
    };
    assert_eq!(recovered(0, &mut admin), ["zero-a", "zero-b", "zero-c"]);
    assert_eq!(recovered(1, &mut admin), ["one-a"]);
    sql(
        &mut admin,
        "INSERT INTO log_snapshot_chunks (snapshot, chunk, bytes, shard) VALUES (7, 0, 'x', 1)",
    );
    let removed = super::snapshots::remove_orphans(&mut admin, 0).expect("removed");
    assert_eq!(removed, 0, "shard 1's chunks are not shard 0's to remove");
    let removed = super::snapshots::remove_orphans(&mut admin, 1).expect("removed");
    assert_eq!(removed, 1);
    let settings = leader_settings(&url);
    let mut engine = crate::engine::Engine::<()>::new("000000000000", "us-east-1");
    let refused = super::ReadyDatabase::new(&settings, &mut engine).err();
    assert!(
        refused
            .as_ref()
            .is_some_and(|e| e.to_string().contains("cut into 2 shards, not 1")
                && e.to_string().contains("--shards 2")),
        "{:?}",
        refused.map(|e| e.to_string())
    );
}

/// The first node to use a database chooses its count of shards: a row (and lease) for each;
/// a later node's asking changes nothing.
#[test]
fn a_database_is_cut_into_as_many_shards_as_its_first_node_asks() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    let made = schema::prepare(&mut admin, "us-east-1", "000000000000", 5).expect("tables");
    assert_eq!(made, 5);
    let rows = number(&mut admin, "SELECT count(*) FROM log_shards".into());
    let last = number(
        &mut admin,
        "SELECT max(shard)::bigint FROM log_shards".into(),
    );
    assert_eq!((rows, last), (5, 4), "one row per shard, numbered from 0");
    let again = schema::prepare(&mut admin, "us-east-1", "000000000000", 2).expect("again");
    assert_eq!(again, 5, "the count recorded first holds");
}

#[test]
fn one_statement_renews_every_shard_a_node_holds_and_no_other() {
    let Some(url) = database() else { return };
    let mut admin = connect(&url);
    schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("tables");
    sql(&mut admin, "UPDATE log_home SET shards = 3");
    schema::prepare(&mut admin, "us-east-1", "000000000000", 1).expect("again");
    let held: Vec<Fence> = (0..3)
        .map(|shard| Fence {
            shard,
            epoch: lease::acquire(&mut admin, shard, "node", "http://node", true)
                .expect("a free lease")
                .0
                .epoch,
        })
        .collect();
    // Leases near their end, and another node's takeover of shard 1.
    sql(
        &mut admin,
        "UPDATE log_shards SET expires = now() + interval '1 second', clock_ms = 0",
    );
    sql(
        &mut admin,
        "UPDATE log_shards SET epoch = epoch + 1, node = 'other' WHERE shard = 1",
    );
    let mut renewed = admin
        .run(std::time::Duration::from_secs(5), move |client| {
            Box::pin(async move { lease::renew_held(client, &held, 12_345).await })
        })
        .expect("renewed");
    renewed.sort_unstable();
    assert_eq!(renewed, [0, 2], "shard 1 is another node's now");
    let renewed_for = |shard: i32, admin: &mut Blocking| {
        number(
            admin,
            format!(
                "SELECT (expires > now() + interval '4 seconds')::int * 100000 + clock_ms \
                 FROM log_shards WHERE shard = {shard}"
            ),
        )
    };
    assert_eq!(
        renewed_for(0, &mut admin),
        112_345,
        "a lease's length, the time"
    );
    assert_eq!(renewed_for(2, &mut admin), 112_345);
    assert_eq!(renewed_for(1, &mut admin), 0, "untouched");
}
