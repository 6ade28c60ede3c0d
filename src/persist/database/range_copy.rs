//! A range's rows copied from the database that keeps it into the one it moves to, in one
//! transaction of the latter's.

use super::connection::Session;
use super::range_held::Lease;
use super::range_in_place::{begin_join, Join};
use super::range_record::{hold_starts, re_record};
use super::range_rows::{connected, drop_rows_in, within};
use super::OpenError;

/// Batches copied a statement (each row holds at most 8,000 bytes of records).
const BATCH_PAGE: i64 = 1024;

/// What the range's rows are copied into.
#[derive(Clone, Copy)]
pub(super) enum Destination<'a> {
    /// A database made for the range, whose lease rows are there already.
    Placed,
    /// The database that keeps the range beside (a join), which then records the two as one.
    Beside(Join<'a>),
    /// The home, whose record of the range's database (named `placed`, recorded as keeping
    /// `kept`) is dropped in the same transaction, or narrowed to `rest` (a split).
    Home {
        placed: &'a str,
        kept: (i32, i32),
        rest: Option<(i32, i32)>,
    },
}

/// What a copy carried.
#[derive(Debug, Default)]
pub(super) struct Copied {
    pub(super) batches: u64,
    pub(super) snapshots: u64,
    /// The bytes of the batches' records and of the snapshots' chunks.
    pub(super) bytes: u64,
}

/// Copies the range's rows from `from` into `to` in one transaction of `to`'s, after dropping
/// what an earlier try copied there; the leases are copied free, at the epoch the move took.
pub(super) async fn copy(
    from: &mut Session,
    to: &mut Session,
    (first, last): (i32, i32),
    leases: &[Lease],
    into: Destination<'_>,
) -> Result<Copied, OpenError> {
    let source = connected(from).await?;
    let target = connected(to).await?;
    let tx = within("copying", target.transaction()).await?;
    // Reading a snapshot's chunk from the other database may keep this transaction idle for
    // longer than a node's sessions allow.
    within(
        "copying",
        tx.batch_execute("SET LOCAL idle_in_transaction_session_timeout = 0"),
    )
    .await?;
    if let Destination::Home { .. } = into {
        hold_starts(&tx).await?;
    }
    if let Destination::Beside(join) = into {
        begin_join(&tx, join, (first, last)).await?;
    }
    // What a try cut short before the home recorded it copied here.
    drop_rows_in(&tx, (first, last)).await?;
    for lease in leases {
        // A range's database has a free row for each of its shards; the home none for a range
        // kept elsewhere.
        let statement = match into {
            Destination::Placed => {
                "UPDATE log_shards SET epoch = $2, node = '', url = '', expires = '-infinity', \
                 clock_ms = $3, snapshot = $4 WHERE shard = $1"
            }
            Destination::Home { .. } | Destination::Beside(_) => {
                "INSERT INTO log_shards (shard, epoch, node, url, expires, clock_ms, snapshot) \
                 VALUES ($1, $2, '', '', '-infinity', $3, $4)"
            }
        };
        let updated = within(
            "copying the leases",
            tx.execute(
                statement,
                &[&lease.shard, &lease.epoch, &lease.clock_ms, &lease.snapshot],
            ),
        )
        .await?;
        if updated != 1 {
            return Err(OpenError::Database(format!(
                "the new database has no lease row for shard {}",
                lease.shard
            )));
        }
    }
    let epochs = within(
        "copying the epochs",
        source.query(
            "SELECT shard, epoch, inserts FROM log_epochs WHERE shard BETWEEN $1 AND $2",
            &[&first, &last],
        ),
    )
    .await?;
    for row in &epochs {
        let (shard, epoch, inserts): (i32, i64, i32) = (row.get(0), row.get(1), row.get(2));
        within(
            "copying the epochs",
            tx.execute(
                "INSERT INTO log_epochs (shard, epoch, inserts) VALUES ($1, $2, $3)",
                &[&shard, &epoch, &inserts],
            ),
        )
        .await?;
    }
    let mut moved = Copied::default();
    let snapshots = within(
        "copying the snapshots",
        source.query(
            "SELECT id, first_lsn, epoch, chunks, bytes, \
             (extract(epoch FROM taken) * 1000000)::bigint, shard FROM log_snapshots \
             WHERE shard BETWEEN $1 AND $2",
            &[&first, &last],
        ),
    )
    .await?;
    for row in &snapshots {
        let (id, first_lsn, epoch, chunks, bytes, taken, shard): (
            i64,
            i64,
            i64,
            i32,
            i64,
            i64,
            i32,
        ) = (
            row.get(0),
            row.get(1),
            row.get(2),
            row.get(3),
            row.get(4),
            row.get(5),
            row.get(6),
        );
        within(
            "copying the snapshots",
            tx.execute(
                "INSERT INTO log_snapshots (id, first_lsn, epoch, chunks, bytes, taken, shard) \
                 VALUES ($1, $2, $3, $4, $5, to_timestamp($6::bigint / 1000000.0), $7)",
                &[&id, &first_lsn, &epoch, &chunks, &bytes, &taken, &shard],
            ),
        )
        .await?;
        moved.snapshots += 1;
    }
    // A chunk at a time: each holds up to 8 MiB.
    let mut after: (i64, i32) = (i64::MIN, -1);
    loop {
        let row = within(
            "copying the snapshots' chunks",
            source.query_opt(
                "SELECT snapshot, chunk, bytes, shard FROM log_snapshot_chunks \
                 WHERE shard BETWEEN $1 AND $2 AND (snapshot, chunk) > ($3, $4) \
                 ORDER BY snapshot, chunk LIMIT 1",
                &[&first, &last, &after.0, &after.1],
            ),
        )
        .await?;
        let Some(row) = row else { break };
        let (snapshot, chunk, bytes, shard): (i64, i32, Vec<u8>, i32) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        within(
            "copying the snapshots' chunks",
            tx.execute(
                "INSERT INTO log_snapshot_chunks (snapshot, chunk, bytes, shard) \
                 VALUES ($1, $2, $3, $4)",
                &[&snapshot, &chunk, &bytes, &shard],
            ),
        )
        .await?;
        moved.bytes += bytes.len() as u64;
        after = (snapshot, chunk);
    }
    let mut after: (i32, i64) = (first, -1);
    loop {
        let rows = within(
            "copying the log",
            source.query(
                "SELECT shard, first_lsn, last_lsn, epoch, records FROM log_batches \
                 WHERE shard BETWEEN $1 AND $2 AND (shard, first_lsn) > ($3, $4) \
                 ORDER BY shard, first_lsn LIMIT $5",
                &[&first, &last, &after.0, &after.1, &BATCH_PAGE],
            ),
        )
        .await?;
        let Some(end) = rows.last() else { break };
        after = (end.get(0), end.get(1));
        let shards: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
        let firsts: Vec<i64> = rows.iter().map(|r| r.get(1)).collect();
        let lasts: Vec<i64> = rows.iter().map(|r| r.get(2)).collect();
        let epochs: Vec<i64> = rows.iter().map(|r| r.get(3)).collect();
        let records: Vec<Vec<u8>> = rows.iter().map(|r| r.get(4)).collect();
        moved.batches += rows.len() as u64;
        moved.bytes += records.iter().map(|r| r.len() as u64).sum::<u64>();
        within(
            "copying the log",
            tx.execute(
                "INSERT INTO log_batches (shard, first_lsn, last_lsn, epoch, records) \
                 SELECT * FROM unnest($1::integer[], $2::bigint[], $3::bigint[], \
                 $4::bigint[], $5::bytea[])",
                &[&shards, &firsts, &lasts, &epochs, &records],
            ),
        )
        .await?;
    }
    if let Destination::Home { placed, kept, rest } = into {
        re_record(&tx, (kept, placed), rest).await?;
    }
    within("copying", tx.commit()).await?;
    Ok(moved)
}
