//! The home's records of where ranges are kept, changed as a move ends.

use super::connection::Session;
use super::range_held::{Lease, Source, MOVER};
use super::range_in_place::Join;
use super::range_rows::{connected, within};
use super::schema;
use super::OpenError;

/// Records in the home that the database named `target` keeps the range: for a range the
/// home kept, with its rows dropped in the same transaction, once the move still holds every
/// lease of it.
pub(super) async fn record(
    home: &mut Session,
    range: (i32, i32),
    (source, leases): (&Source, &[Lease]),
    target: Target<'_>,
) -> Result<(), OpenError> {
    let recorded = record_in_home(home, range, (source, leases), target).await;
    match (recorded, target) {
        // The join's copy named the joined range in the database beside already.
        (Err(OpenError::ShardMap(why)), Target::Beside(join)) => Err(OpenError::ShardMap(format!(
            "{why} in the home; the database the range was to join names shards {}-{} \
             meanwhile and is refused to the nodes until the same move is run again, or \
             abandoned by moving the range where the home keeps it",
            join.joined.0, join.joined.1
        ))),
        (recorded, _) => recorded,
    }
}

async fn record_in_home(
    home: &mut Session,
    (first, last): (i32, i32),
    (source, leases): (&Source, &[Lease]),
    target: Target<'_>,
) -> Result<(), OpenError> {
    let client = connected(home).await?;
    let tx = within("recording the move", client.transaction()).await?;
    hold_starts(&tx).await?;
    match source {
        Source::Home => {
            // Held still by this move, at the epochs it took: copied as no node changed them.
            let shards: Vec<i32> = leases.iter().map(|lease| lease.shard).collect();
            let epochs: Vec<i64> = leases.iter().map(|lease| lease.epoch).collect();
            let held: i64 = within(
                "recording the move",
                tx.query_one(
                    "SELECT count(*) FROM (SELECT 1 FROM log_shards l, \
                     unnest($1::integer[], $2::bigint[]) AS t(shard, epoch) \
                     WHERE l.shard = t.shard AND l.epoch = t.epoch AND l.node = $3 \
                     FOR UPDATE OF l) AS held",
                    &[&shards, &epochs, &MOVER],
                ),
            )
            .await?
            .get(0);
            if held != i64::from(last - first + 1) {
                return Err(OpenError::ShardMap(format!(
                    "shards {first}-{last}: a lease of the range was taken while it moved; \
                     nothing was recorded"
                )));
            }
            record_target(&tx, (first, last), target).await?;
            // The leases go with the record; the rest of the rows after it (`forget`), as they
            // may take long and are never read again.
            within(
                "recording the move",
                tx.execute(
                    "DELETE FROM log_shards WHERE shard BETWEEN $1 AND $2",
                    &[&first, &last],
                ),
            )
            .await?;
        }
        Source::Placed { name, kept, .. } => {
            let rest = source.rest((first, last));
            re_record(&tx, (*kept, name), rest).await?;
            record_target(&tx, (first, last), target).await?;
        }
    }
    within("recording the move", tx.commit()).await
}

/// The database a range moved into, as the home records it.
#[derive(Clone, Copy)]
pub(super) enum Target<'a> {
    /// A database made for the range, named so.
    Own(&'a str),
    /// The database of the range beside, which keeps both now.
    Beside(Join<'a>),
}

/// Drops, in the home's transaction `tx`, its record of a range kept in a database of its
/// own (`kept`, in the database named `name`), recording the rest of a split there instead.
pub(super) async fn re_record(
    tx: &tokio_postgres::Transaction<'_>,
    (kept, name): ((i32, i32), &str),
    rest: Option<(i32, i32)>,
) -> Result<(), OpenError> {
    let dropped = within(
        "recording the move",
        tx.execute(
            "DELETE FROM log_placed WHERE first_shard = $1 AND last_shard = $2 AND database = $3",
            &[&kept.0, &kept.1, &name],
        ),
    )
    .await?;
    if dropped != 1 {
        return Err(OpenError::ShardMap(format!(
            "shards {}-{}: the home's record of their database changed while they moved; \
             nothing was recorded",
            kept.0, kept.1
        )));
    }
    match rest {
        Some(rest) => insert_record(tx, rest, name).await,
        None => Ok(()),
    }
}

/// Records, in the home's transaction `tx`, the database the range moved into: its own, or
/// the one beside, whose record then names the two ranges joined.
async fn record_target(
    tx: &tokio_postgres::Transaction<'_>,
    range: (i32, i32),
    target: Target<'_>,
) -> Result<(), OpenError> {
    match target {
        Target::Own(name) => insert_record(tx, range, name).await,
        Target::Beside(join) => {
            re_record(tx, (join.kept, join.name), None).await?;
            insert_record(tx, join.joined, join.name).await
        }
    }
}

async fn insert_record(
    tx: &tokio_postgres::Transaction<'_>,
    (first, last): (i32, i32),
    name: &str,
) -> Result<(), OpenError> {
    within(
        "recording the move",
        tx.execute(
            "INSERT INTO log_placed (first_shard, last_shard, database) VALUES ($1, $2, $3)",
            &[&first, &last, &name],
        ),
    )
    .await
    .map(|_| ())
}

/// Takes the lock a node's start takes in the home, so that one starting meanwhile reads the
/// shard map as it was before the move or after.
pub(super) async fn hold_starts(tx: &tokio_postgres::Transaction<'_>) -> Result<(), OpenError> {
    within(
        "recording the move",
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&schema::STARTS_LOCK]),
    )
    .await
    .map(|_| ())
}
