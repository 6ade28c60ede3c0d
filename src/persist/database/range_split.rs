//! A range of shards split in place: a part that begins or ends a range kept in a database
//! of its own moves out of it (`range_move` copies and records it as any move), and that
//! database then drops every row of the part, leases too, and records the rest as its range,
//! so that it holds and names the rest only, as a database made for it would.

use super::connection::{config, Session};
use super::range_rows::{connected, drop_rows_in, within};
use super::shard_map::Placed;
use super::OpenError;

/// A range moved out of a larger one kept in a database of its own.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Split {
    /// The larger range, as the nodes were given it.
    pub kept: (i32, i32),
    /// What that database keeps on.
    pub rest: (i32, i32),
}

/// `kept` without `range`, which begins or ends it (`None` when it is all of it).
pub(super) fn rest_of(kept: (i32, i32), range: (i32, i32)) -> Option<(i32, i32)> {
    match (kept.0 == range.0, kept.1 == range.1) {
        (true, true) => None,
        (true, false) => Some((range.1 + 1, kept.1)),
        _ => Some((kept.0, range.0 - 1)),
    }
}

/// Drops from a range's database (connected as `kept`, named `name`) what a split moved out
/// of it, rows and leases, and records there the rest it keeps (`rest`, as the home records
/// it now): so that it holds and names the rest only, as a database made for it does, and
/// nodes given the rest take it. How many rows it dropped (none once done).
pub(super) async fn trim(
    kept: &mut Session,
    name: &str,
    rest: (i32, i32),
) -> Result<u64, OpenError> {
    let client = connected(kept).await?;
    let tx = within("dropping the moved rows", client.transaction()).await?;
    let row = within(
        "reading the range's database",
        tx.query_opt(
            "SELECT database, first_shard, last_shard FROM log_home FOR UPDATE",
            &[],
        ),
    )
    .await?;
    let recorded = row.map(|row| {
        let (database, f, l): (String, Option<i32>, Option<i32>) =
            (row.get(0), row.get(1), row.get(2));
        (database, f.zip(l))
    });
    let Some((database, Some((f, l)))) = recorded else {
        return Err(OpenError::ShardMap(format!(
            "--shard-database {}-{}: not a database made for a range of shards",
            rest.0, rest.1
        )));
    };
    let split = database == name && f <= rest.0 && rest.1 <= l && (f == rest.0 || l == rest.1);
    if !split {
        return Err(OpenError::ShardMap(format!(
            "--shard-database {}-{}: not the database the home records for these shards (it \
             keeps shards {f}-{l})",
            rest.0, rest.1
        )));
    }
    let Some(moved) = rest_of((f, l), rest) else {
        return Ok(0);
    };
    let mut dropped = drop_rows_in(&tx, moved).await?;
    dropped += within(
        "dropping the moved rows",
        tx.execute(
            "DELETE FROM log_shards WHERE shard BETWEEN $1 AND $2",
            &[&moved.0, &moved.1],
        ),
    )
    .await?;
    within(
        "dropping the moved rows",
        tx.execute(
            "UPDATE log_home SET first_shard = $1, last_shard = $2",
            &[&rest.0, &rest.1],
        ),
    )
    .await?;
    within("dropping the moved rows", tx.commit()).await?;
    Ok(dropped)
}

/// Finishes a split whose last step failed: the databases the home records (`recorded`:
/// first, last, name) for the ranges beside `range`, found by the URLs `placed` gives them,
/// are trimmed to those ranges (`trim`). How many rows were dropped.
pub(super) async fn trim_beside(
    recorded: &[(i32, i32, Option<String>)],
    range: (i32, i32),
    placed: &[Placed],
) -> Result<u64, OpenError> {
    let mut dropped = 0;
    for (first, last, name) in recorded {
        let beside = *last + 1 == range.0 || *first == range.1 + 1;
        let given = (placed.iter()).find(|p| (p.first as i32, p.last as i32) == (*first, *last));
        let (true, Some(name), Some(given)) = (beside, name, given) else {
            continue;
        };
        let mut kept = Session::new(config(&given.url).map_err(OpenError::Url)?);
        dropped += trim(&mut kept, name, (*first, *last)).await?;
    }
    Ok(dropped)
}
