//! Ranges of shards split and joined in place, beside the copy and the home's record that
//! `range_move` makes of any move:
//! - a part that begins or ends a range kept in a database of its own moves out of it, and
//!   that database then drops every row of the part, leases too, and records the rest as its
//!   range, so that it holds and names the rest only, as a database made for it would;
//! - a range moves into the database of the range beside it, which records the two as one
//!   range in the copy's transaction, before the home records the join.
//!
//! A database that records more than the home records it for (a split's last step, or a
//! join's record, not done) is refused to the nodes; the move run again finishes it, or,
//! abandoned, drops the join's copy.

use super::connection::{config, Session};
use super::range_rows::{connected, drop_rows_in, within};
use super::shard_map::Placed;
use super::OpenError;

/// A range joined to the one beside it in that range's database (named `name`): the home's
/// record of `kept` there becomes one of `joined`, and so does the database's own.
#[derive(Clone, Copy)]
pub(super) struct Join<'a> {
    pub(super) name: &'a str,
    pub(super) kept: (i32, i32),
    pub(super) joined: (i32, i32),
}

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

/// Drops from a range's database (connected as `kept`, named `name`) the shards it records
/// beyond `rest`, the range the home records it for now (what a split moved out of it, or a
/// copy of a range joined to it that the home never recorded), rows and leases, and records
/// `rest` as its range: so that it holds and names that range only, as a database made for it
/// does, and nodes given it take it. How many rows it dropped (none once done).
pub(super) async fn trim(
    kept: &mut Session,
    name: &str,
    rest: (i32, i32),
) -> Result<u64, OpenError> {
    let client = connected(kept).await?;
    let tx = within("dropping the moved rows", client.transaction()).await?;
    let Some((database, Some((f, l)))) = recorded_range(&tx).await? else {
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

/// The join of `range` to the range beside it that the home records (`recorded`: first,
/// last, name) in the database named `target`, if the range is moved there.
pub(super) fn beside_of<'a>(
    recorded: &'a [(i32, i32, Option<String>)],
    range: (i32, i32),
    target: Option<&str>,
) -> Option<Join<'a>> {
    recorded.iter().find_map(|(first, last, name)| {
        let name = name.as_deref().filter(|name| Some(*name) == target)?;
        let beside = *last + 1 == range.0 || range.1 + 1 == *first;
        beside.then_some(Join {
            name,
            kept: (*first, *last),
            joined: ((*first).min(range.0), (*last).max(range.1)),
        })
    })
}

/// The name a database's tables record and the range it keeps (none for a home), locked in
/// the transaction `tx` until it ends.
async fn recorded_range(
    tx: &tokio_postgres::Transaction<'_>,
) -> Result<Option<(String, Option<(i32, i32)>)>, OpenError> {
    let row = within(
        "reading the range's database",
        tx.query_opt(
            "SELECT database, first_shard, last_shard FROM log_home FOR UPDATE",
            &[],
        ),
    )
    .await?;
    Ok(row.map(|row| {
        let (database, f, l): (String, Option<i32>, Option<i32>) =
            (row.get(0), row.get(1), row.get(2));
        (database, f.zip(l))
    }))
}

/// Readies the database beside for the range joined to it, in the copy's transaction `tx`
/// there: it must be the one the home records for `join.kept` (or record `join.joined`, left
/// so by a try of this join cut short); the range's lease rows a try left are dropped for the
/// copy's, and the database records the joined range as its own.
pub(super) async fn begin_join(
    tx: &tokio_postgres::Transaction<'_>,
    join: Join<'_>,
    range: (i32, i32),
) -> Result<(), OpenError> {
    let ready = matches!(&recorded_range(tx).await?, Some((database, Some(kept)))
        if database == join.name && (*kept == join.kept || *kept == join.joined));
    if !ready {
        return Err(OpenError::ShardMap(format!(
            "shards {}-{}: the database given is not the one the home records for shards {}-{}",
            range.0, range.1, join.kept.0, join.kept.1
        )));
    }
    within(
        "copying the leases",
        tx.execute(
            "DELETE FROM log_shards WHERE shard BETWEEN $1 AND $2",
            &[&range.0, &range.1],
        ),
    )
    .await?;
    within(
        "copying the leases",
        tx.execute(
            "UPDATE log_home SET first_shard = $1, last_shard = $2",
            &[&join.joined.0, &join.joined.1],
        ),
    )
    .await
    .map(|_| ())
}

/// Finishes a move that did not finish (a split whose last step failed, or a join the home
/// did not record): the databases the home records (`recorded`: first, last, name) for the
/// ranges beside `range`, found by the URLs `placed` gives them, are trimmed to those ranges
/// (`trim`). How many rows were dropped. Refused, trimming nothing, when such a database is
/// not given: what a move left there could be neither checked nor dropped.
pub(super) async fn trim_beside(
    recorded: &[(i32, i32, Option<String>)],
    range: (i32, i32),
    placed: &[Placed],
) -> Result<u64, OpenError> {
    let mut beside = Vec::new();
    for (first, last, name) in recorded {
        let (true, Some(name)) = (*last + 1 == range.0 || *first == range.1 + 1, name) else {
            continue;
        };
        let Some(given) = Placed::given_for(placed, (*first, *last)) else {
            return Err(OpenError::ShardMap(format!(
                "--move-shards {}-{}: shards {first}-{last}, beside them, are kept in a \
                 database of their own, where a move that did not finish may have left rows: \
                 name it with --shard-database {first}-{last}=URL as the nodes are started",
                range.0, range.1
            )));
        };
        beside.push((*first, *last, name, given));
    }
    let mut dropped = 0;
    for (first, last, name, given) in beside {
        let mut kept = Session::new(config(&given.url).map_err(OpenError::Url)?);
        dropped += trim(&mut kept, name, (first, last)).await?;
    }
    Ok(dropped)
}
