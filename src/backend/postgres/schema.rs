//! The database schema, created and upgraded at start by numbered migrations. The database
//! records how many have run (`orderly_schema.version`); a node runs the ones it lacks and
//! refuses a database whose version is newer than it knows, so an older node never writes
//! rows it does not understand. A migration that has shipped is never edited: the next change
//! is the next file.

use tokio_postgres::Client;

use super::PostgresError;

/// Each migration's SQL, in order: version N is the first N of them.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/001_queues.sql"),
    include_str!("migrations/002_messages.sql"),
    include_str!("migrations/003_move_tasks.sql"),
    include_str!("migrations/004_topics.sql"),
    include_str!("migrations/005_send_function.sql"),
    include_str!("migrations/006_delete_function.sql"),
    include_str!("migrations/007_receive_function.sql"),
    include_str!("migrations/008_webhooks.sql"),
    include_str!("migrations/009_topic_archive.sql"),
    include_str!("migrations/010_send_group_lock.sql"),
    include_str!("migrations/011_recorded_messages.sql"),
    include_str!("migrations/012_publish_decide.sql"),
    include_str!("migrations/013_home.sql"),
    include_str!("migrations/014_change_visibility_function.sql"),
];

/// The schema version this build writes.
pub const VERSION: i32 = MIGRATIONS.len() as i32;

/// Serialises migrations across nodes starting together (a transaction-scoped advisory lock;
/// the number is arbitrary, fixed for Orderly).
const MIGRATION_LOCK: i64 = 0x4f72_6465_726c_7901;

/// Brings the database up to `VERSION`; returns the version it found.
pub async fn migrate(client: &mut Client) -> Result<i32, PostgresError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS orderly_schema (version integer NOT NULL)")
        .await?;
    let found = match tx
        .query_opt("SELECT version FROM orderly_schema", &[])
        .await?
    {
        Some(row) => row.get::<_, i32>(0),
        None => {
            tx.execute("INSERT INTO orderly_schema (version) VALUES (0)", &[])
                .await?;
            0
        }
    };
    if found > VERSION {
        return Err(PostgresError::NewerSchema {
            found,
            known: VERSION,
        });
    }
    for sql in MIGRATIONS.iter().skip(found.max(0) as usize) {
        tx.batch_execute(sql).await?;
    }
    tx.execute("UPDATE orderly_schema SET version = $1", &[&VERSION])
        .await?;
    tx.commit().await?;
    Ok(found)
}
