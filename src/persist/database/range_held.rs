//! The range as a move finds it and holds it: where it is kept now, and the leases the move
//! took there.

use super::range_in_place::rest_of;

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
