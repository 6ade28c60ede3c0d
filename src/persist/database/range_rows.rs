//! What a move of shards asks of a database, shared by the ways a range moves: statements
//! waited for within a bound, and the drop of a range's rows.

use std::future::Future;
use std::time::Duration;

use tokio_postgres::Client;

use super::connection::{describe, Session};
use super::OpenError;

/// Longest one statement of the move is waited for.
const STATEMENT: Duration = Duration::from_secs(60);

/// Longest the rows of a range are waited for to be dropped, in one statement a table: a long
/// log's rows take long.
const DROP_ROWS: Duration = Duration::from_secs(600);

/// Waits for a statement's answer, at most `STATEMENT`.
pub(super) async fn within<T>(
    what: &str,
    work: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, OpenError> {
    within_for(STATEMENT, what, work).await
}

/// Waits for a statement's answer, at most `limit`.
pub(super) async fn within_for<T>(
    limit: Duration,
    what: &str,
    work: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, OpenError> {
    match tokio::time::timeout(limit, work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(OpenError::Database(format!("{what}: {}", describe(&error)))),
        Err(_) => Err(OpenError::Database(format!(
            "{what}: no answer within {} s",
            limit.as_secs()
        ))),
    }
}

pub(super) async fn connected(session: &mut Session) -> Result<&mut Client, OpenError> {
    session
        .connected()
        .await
        .map_err(|failed| OpenError::Database(failed.cause))
}

/// Drops the range's rows but its leases from the database `session` is connected to.
/// How many it dropped.
pub(super) async fn drop_rows(session: &mut Session, range: (i32, i32)) -> Result<u64, OpenError> {
    let client = connected(session).await?;
    let tx = within("dropping the moved rows", client.transaction()).await?;
    let dropped = drop_rows_in(&tx, range).await?;
    within("dropping the moved rows", tx.commit()).await?;
    Ok(dropped)
}

pub(super) async fn drop_rows_in(
    tx: &tokio_postgres::Transaction<'_>,
    (first, last): (i32, i32),
) -> Result<u64, OpenError> {
    let tables = [
        "log_batches",
        "log_epochs",
        "log_snapshot_chunks",
        "log_snapshots",
    ];
    let mut dropped = 0;
    for table in tables {
        dropped += within_for(
            DROP_ROWS,
            "dropping the moved rows",
            tx.execute(
                &format!("DELETE FROM {table} WHERE shard BETWEEN $1 AND $2"),
                &[&first, &last],
            ),
        )
        .await?;
    }
    Ok(dropped)
}
