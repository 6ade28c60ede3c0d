//! The range as a move finds it and holds it: where it is kept now, and the leases the move
//! took there.

use super::connection::Session;
use super::range_in_place::rest_of;
use super::range_rows::{connected, within};
use super::OpenError;

/// Who holds a range's leases while it moves, and for good where it moved from: until a
/// century from the move, a time nodes can subtract from now (they cannot from `infinity`).
pub(super) const MOVER: &str = "orderly --move-shards";

/// Where the range is kept now.
pub(super) enum Source {
    Home,
    /// A database of its own, recorded in the home under `name` as keeping `kept`: the range
    /// moved, or a range it begins or ends (a split: the rest stays there).
    Placed {
        url: String,
        name: String,
        kept: (i32, i32),
    },
}

impl Source {
    /// What a split leaves where the range was kept: `kept` without the range moved.
    pub(super) fn rest(&self, range: (i32, i32)) -> Option<(i32, i32)> {
        match self {
            Source::Placed { kept, .. } => rest_of(*kept, range),
            Source::Home => None,
        }
    }
}

/// A shard's lease row once the move holds it.
pub(super) struct Lease {
    pub(super) shard: i32,
    pub(super) epoch: i64,
    pub(super) clock_ms: i64,
    pub(super) snapshot: Option<i64>,
}

/// Gives back the range's leases a move cut short holds in the database `kept` keeps it in,
/// so nodes lead it there again; answers how many.
pub(super) async fn abandon(
    kept: &mut Session,
    (first, last): (i32, i32),
) -> Result<u64, OpenError> {
    let client = connected(kept).await?;
    within(
        "giving the leases back",
        client.execute(
            "UPDATE log_shards SET node = '', expires = '-infinity' \
             WHERE shard BETWEEN $1 AND $2 AND node = $3",
            &[&first, &last, &MOVER],
        ),
    )
    .await
}
