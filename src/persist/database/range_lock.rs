//! One move of shards at a time: a session's advisory lock in the home, held on the move's
//! connection there from its start to its end. That connection is pinned
//! (`Session::pinned`): lost, the lock goes with it, and the move is not to go on without it.

use super::connection::Session;
use super::range_rows::{connected, within};
use super::schema;
use super::OpenError;

/// The advisory lock a move holds in the home while it runs, on its connection.
pub(super) const MOVE_LOCK: i64 = schema::STARTS_LOCK + 1;

/// What the home's pinned session holds, as its error names it.
pub(super) const HELD: &str = "the home's lock on moves";

/// Takes (if `take`: whether it was free) or lets go of the lock only one move at a time holds.
pub(super) async fn lock_moves(home: &mut Session, take: bool) -> Result<bool, OpenError> {
    let client = connected(home).await?;
    let statement = match take {
        true => "SELECT pg_try_advisory_lock($1)",
        false => "SELECT pg_advisory_unlock($1)",
    };
    let row = within("locking moves", client.query_one(statement, &[&MOVE_LOCK])).await?;
    Ok(row.get(0))
}

/// Fails once the connection holding the lock is gone. Sent before each step the move takes
/// in another connection or database, which the lock does not cover otherwise: another move
/// could then run beside this one only within one step.
pub(super) async fn still_alone(home: &mut Session) -> Result<(), OpenError> {
    let client = connected(home).await?;
    within(
        "checking the lock on moves",
        client.query_one("SELECT 1", &[]),
    )
    .await?;
    Ok(())
}
