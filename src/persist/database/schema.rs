//! The tables that hold the engine's log in a database, made at the first start and checked at
//! every start: the format version, the region and account the data belongs to, the lease that
//! says which node leads, the log's batches and the snapshots.
//!
//! - `log_home`: one row, the format version of these tables, the home region and account,
//!   and the snapshot the log starts from (none before the first is kept), so a snapshot that
//!   goes missing is found missing rather than taken for a log that never had one.
//! - `log_leader`: one row, the lease: its epoch (one more each time a node takes it), the
//!   node holding it, the URL it serves on, when it ends (on the database's clock) and the
//!   latest time its leaders' clocks reached (`clock_ms`, milliseconds since the epoch).
//! - `log_batches`: up to 8,000 bytes of one write of the log writer (a write is cut between
//!   records, `table_log`): the sequence numbers of its first and last record, the epoch that
//!   wrote it, and its records framed as in a log segment (`persist::record`: length,
//!   CRC-32C, the record as `persist::format` lays it out).
//! - `log_epochs`: the epochs whose leader may have had two inserts under way at once
//!   (`--database-inserts 2`): only in such an epoch can a gap in `log_batches` be a torn
//!   tail rather than damage (`recovery`). Added beside version 2; older nodes leave it alone.
//! - `log_snapshots`: the snapshot recovery starts from (one once a snapshot is kept; a
//!   snapshot is numbered at random when its writing starts), and `log_snapshot_chunks`, its
//!   bytes in order, as a snapshot file holds them. Chunks of a snapshot never finished are
//!   dropped when the next one is kept.

use tokio_postgres::Client;

use super::connection::{Blocking, Work};
use super::OpenError;

/// The version of these tables this build writes and reads. Version 1 had no record of the
/// snapshot kept; it is upgraded in place at start.
pub const VERSION: i32 = 2;

const CREATE: &str = "
CREATE TABLE IF NOT EXISTS log_home (
    id integer PRIMARY KEY CHECK (id = 1),
    version integer NOT NULL,
    region text NOT NULL,
    account text NOT NULL,
    snapshot bigint
);
CREATE TABLE IF NOT EXISTS log_leader (
    id integer PRIMARY KEY CHECK (id = 1),
    epoch bigint NOT NULL,
    node text NOT NULL,
    url text NOT NULL,
    expires timestamptz NOT NULL,
    clock_ms bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS log_batches (
    first_lsn bigint PRIMARY KEY,
    last_lsn bigint NOT NULL,
    epoch bigint NOT NULL,
    records bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS log_epochs (
    epoch bigint PRIMARY KEY,
    inserts integer NOT NULL
);
CREATE TABLE IF NOT EXISTS log_snapshots (
    id bigint PRIMARY KEY,
    first_lsn bigint NOT NULL,
    epoch bigint NOT NULL,
    chunks integer NOT NULL,
    bytes bigint NOT NULL,
    taken timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS log_snapshot_chunks (
    snapshot bigint NOT NULL,
    chunk integer NOT NULL,
    bytes bytea NOT NULL,
    PRIMARY KEY (snapshot, chunk)
);
-- Batches and snapshot chunks are written once and read at recovery only: compressing them
-- costs the database more CPU than the bytes saved are worth (compressing the chunks of a
-- snapshot of a large backlog took a third of its CPU under load). A batch of up to 8 KB
-- stays in its row rather than being cut into TOAST chunks, each with its own index entry.
-- Autovacuum leaves them until rows are deleted (a snapshot covers them): vacuuming rows
-- that were only inserted, and statistics no query needs, took a fifth of the database's
-- CPU under load. Altered only when needed: an ALTER locks the table.
DO $$ BEGIN
    -- Added beside version 2 (older nodes leave it alone): the latest time a leader reached.
    IF NOT EXISTS (SELECT FROM pg_attribute
        WHERE attrelid = 'log_leader'::regclass AND attname = 'clock_ms') THEN
        ALTER TABLE log_leader ADD COLUMN clock_ms bigint NOT NULL DEFAULT 0;
    END IF;
    IF (SELECT attstorage FROM pg_attribute
        WHERE attrelid = 'log_batches'::regclass AND attname = 'records') <> 'e' THEN
        ALTER TABLE log_batches ALTER COLUMN records SET STORAGE EXTERNAL;
    END IF;
    IF (SELECT attstorage FROM pg_attribute
        WHERE attrelid = 'log_snapshot_chunks'::regclass AND attname = 'bytes') <> 'e' THEN
        ALTER TABLE log_snapshot_chunks ALTER COLUMN bytes SET STORAGE EXTERNAL;
    END IF;
    IF NOT coalesce((SELECT 'autovacuum_analyze_threshold=2147483647' = ANY (reloptions)
        FROM pg_class WHERE oid = 'log_batches'::regclass), false) THEN
        ALTER TABLE log_batches SET (toast_tuple_target = 8160,
            autovacuum_vacuum_insert_threshold = -1, autovacuum_analyze_threshold = 2147483647,
            toast.autovacuum_vacuum_insert_threshold = -1);
        ALTER TABLE log_snapshot_chunks SET (
            autovacuum_vacuum_insert_threshold = -1, autovacuum_analyze_threshold = 2147483647,
            toast.autovacuum_vacuum_insert_threshold = -1);
    END IF;
END $$;
INSERT INTO log_leader (id, epoch, node, url, expires)
    VALUES (1, 0, '', '', '-infinity') ON CONFLICT (id) DO NOTHING;
";

const UPGRADE_FROM_1: &str = "
ALTER TABLE log_home ADD COLUMN IF NOT EXISTS snapshot bigint;
UPDATE log_home SET version = 2,
    snapshot = (SELECT id FROM log_snapshots ORDER BY first_lsn DESC LIMIT 1);
";

/// Makes the tables if they are missing or upgrades those of version 1 (nodes starting
/// together take turns under an advisory lock), then checks the version and home; a database
/// of another region or account, of a newer Orderly, or holding the row-per-message tables of
/// earlier builds is refused.
pub fn prepare(db: &mut Blocking, region: &str, account: &str) -> Result<(), OpenError> {
    let (home_region, home_account) = (region.to_string(), account.to_string());
    let found = db
        .run(
            super::connection::STARTUP_TIMEOUT,
            move |client: &mut Client| -> Work<'_, _> {
                Box::pin(async move {
                    let tx = client.transaction().await?;
                    // "already exists" notices of every later start say nothing worth a log line.
                    tx.batch_execute("SET LOCAL client_min_messages = warning")
                        .await?;
                    tx.execute("SELECT pg_advisory_xact_lock(7105112710)", &[])
                        .await?;
                    let rows_backend = tx
                        .query_one("SELECT to_regclass('orderly_schema') IS NOT NULL", &[])
                        .await?
                        .get::<_, bool>(0);
                    tx.batch_execute(CREATE).await?;
                    tx.execute(
                    "INSERT INTO log_home (id, version, region, account) VALUES (1, $1, $2, $3) \
                     ON CONFLICT (id) DO NOTHING",
                    &[&VERSION, &home_region, &home_account],
                )
                .await?;
                    let row = tx
                        .query_one("SELECT version, region, account FROM log_home", &[])
                        .await?;
                    let found: (i32, String, String) = (row.get(0), row.get(1), row.get(2));
                    // A node of version 1 leading would keep snapshots without recording
                    // them: the tables are upgraded only while none leads.
                    let mut led_by_older = false;
                    if found.0 == 1 {
                        led_by_older = tx
                            .query_one("SELECT expires > now() FROM log_leader", &[])
                            .await?
                            .get::<_, bool>(0);
                        if !led_by_older {
                            // Version 1 kept at most one snapshot: the one the log starts from.
                            tx.batch_execute(UPGRADE_FROM_1).await?;
                        }
                    }
                    tx.commit().await?;
                    Ok((rows_backend, led_by_older, found))
                })
            },
        )
        .map_err(|e| OpenError::Database(e.cause))?;
    let (rows_backend, led_by_older, (version, found_region, found_account)) = found;
    if rows_backend {
        return Err(OpenError::RowStorage);
    }
    if led_by_older {
        return Err(OpenError::Database(
            "the log's tables are of an earlier version and a node leads them: stop every \
             node of the earlier version (its lease then lapses within 5 s), then start this one"
                .into(),
        ));
    }
    if version > VERSION {
        return Err(OpenError::Newer {
            found: version,
            known: VERSION,
        });
    }
    if found_region != region || found_account != account {
        return Err(OpenError::OtherHome {
            region: found_region,
            account: found_account,
        });
    }
    Ok(())
}
