//! The tables that hold the engine's logs in a database, made at the first start and checked at
//! every start: the format version, the region and account the data belongs to, how many
//! shards the key space is cut into, and for each shard its lease, its log's batches and its
//! snapshots. Every shard's log is exactly the single leader's log of before: its own lease and
//! epoch fence its own batches and snapshots.
//!
//! - `log_home`: one row, the format version of these tables, the home region and account,
//!   the number of shards (chosen when the home database is first used), and the database's
//!   name (random); in a database that keeps a range of shards for a home (`shard_map`), the
//!   home's name and the range.
//! - `log_placed`: in a home, the ranges of shards kept in other databases, as the first node
//!   that made the home was told, each with the name of the database keeping it once one is made.
//! - `log_shards`: a row per shard: its lease (its epoch, one more each time a node takes it,
//!   the node holding it, the URL it serves on, when it ends on the database's clock), the
//!   latest time its leaders' clocks reached (`clock_ms`, milliseconds since the epoch) and the
//!   snapshot its log starts from (none before the first is kept), so a snapshot that goes
//!   missing is found missing rather than taken for a log that never had one.
//! - `log_batches`: up to 8,000 bytes of one write of a shard's log writer (a write is cut
//!   between records, `table_log`): the shard, the sequence numbers of its first and last
//!   record, the epoch that wrote it, and its records framed as in a log segment
//!   (`persist::record`: length, CRC-32C, the record as `persist::format` lays it out).
//! - `log_epochs`: the epochs of a shard whose leader may have had two inserts under way at
//!   once (`--database-inserts 2`): only in such an epoch can a gap in `log_batches` be a torn
//!   tail rather than damage (`recovery`).
//! - `log_nodes`: a row per node that announced itself (its URL, when it last did, on the
//!   database's clock): the nodes seen within a lease's length are the live ones.
//! - `log_snapshots`: a shard's snapshot recovery starts from (one once a snapshot is kept; a
//!   snapshot is numbered at random when its writing starts), and `log_snapshot_chunks`, its
//!   bytes in order, as a snapshot file holds them. Chunks of a snapshot never finished are
//!   dropped when the shard's next one is kept.
//! - `log_sessions`: the temporary credentials STS issued (`sessions`), until they expire: each
//!   access key with its secret, its session token's SHA-256 digest and whom it acts as.
//!   Made by any start of a build that keeps them, with no change of version: a node of an
//!   earlier build leaves the table alone (and keeps its own credentials in its process).
//!
//! Version 2 had one log and one lease (`log_leader`) and kept the snapshot's number in
//! `log_home`: it is upgraded in place to a database of one shard, its log shard 0's. A
//! `log_leader` table stays, its lease held for good, so that no node of version 2 leads again.

use tokio_postgres::Client;

use super::connection::{Blocking, Work};
use super::OpenError;

/// The version of these tables this build writes and reads. Versions 1 to 3 are upgraded in
/// place at start.
pub const VERSION: i32 = 4;

const CREATE: &str = "
CREATE TABLE IF NOT EXISTS log_home (
    id integer PRIMARY KEY CHECK (id = 1),
    version integer NOT NULL,
    region text NOT NULL,
    account text NOT NULL,
    shards integer NOT NULL CHECK (shards > 0),
    database text NOT NULL DEFAULT md5(random()::text || clock_timestamp()::text),
    home text,
    first_shard integer,
    last_shard integer
);
CREATE TABLE IF NOT EXISTS log_placed (
    first_shard integer PRIMARY KEY,
    last_shard integer NOT NULL,
    database text
);
CREATE TABLE IF NOT EXISTS log_shards (
    shard integer PRIMARY KEY,
    epoch bigint NOT NULL,
    node text NOT NULL,
    url text NOT NULL,
    expires timestamptz NOT NULL,
    clock_ms bigint NOT NULL DEFAULT 0,
    snapshot bigint
);
CREATE TABLE IF NOT EXISTS log_batches (
    first_lsn bigint NOT NULL,
    last_lsn bigint NOT NULL,
    epoch bigint NOT NULL,
    records bytea NOT NULL,
    shard integer NOT NULL,
    PRIMARY KEY (shard, first_lsn)
);
CREATE TABLE IF NOT EXISTS log_epochs (
    epoch bigint NOT NULL,
    inserts integer NOT NULL,
    shard integer NOT NULL,
    PRIMARY KEY (shard, epoch)
);
CREATE TABLE IF NOT EXISTS log_snapshots (
    id bigint PRIMARY KEY,
    first_lsn bigint NOT NULL,
    epoch bigint NOT NULL,
    chunks integer NOT NULL,
    bytes bigint NOT NULL,
    taken timestamptz NOT NULL DEFAULT now(),
    shard integer NOT NULL
);
CREATE TABLE IF NOT EXISTS log_snapshot_chunks (
    snapshot bigint NOT NULL,
    chunk integer NOT NULL,
    bytes bytea NOT NULL,
    shard integer NOT NULL,
    PRIMARY KEY (snapshot, chunk)
);
CREATE TABLE IF NOT EXISTS log_nodes (
    node text PRIMARY KEY,
    url text NOT NULL,
    seen timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS log_sessions (
    access_key text PRIMARY KEY,
    secret text NOT NULL,
    token_sha256 bytea NOT NULL,
    account text NOT NULL,
    user_id text NOT NULL,
    principal text NOT NULL,
    expires bigint NOT NULL
);
";

/// How the log's rows are stored, set on tables made by any version.
const STORAGE: &str = "
-- Batches and snapshot chunks are written once and read at recovery only: compressing them
-- costs the database more CPU than the bytes saved are worth (compressing the chunks of a
-- snapshot of a large backlog took a third of its CPU under load). A batch of up to 8 KB
-- stays in its row rather than being cut into TOAST chunks, each with its own index entry.
-- Autovacuum leaves them until rows are deleted (a snapshot covers them): vacuuming rows
-- that were only inserted, and statistics no query needs, took a fifth of the database's
-- CPU under load. Altered only when needed: an ALTER locks the table.
DO $$ BEGIN
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
";

/// A shard's row for each shard this database keeps, free (no node has taken its lease): the
/// range a placed database was made for, or every shard the home row counts but those placed
/// elsewhere.
const SHARD_ROWS: &str = "
INSERT INTO log_shards (shard, epoch, node, url, expires)
    SELECT shard, 0, '', '', '-infinity'
    FROM log_home, generate_series(coalesce(log_home.first_shard, 0),
        coalesce(log_home.last_shard, log_home.shards - 1)) AS shard
    WHERE NOT EXISTS (SELECT 1 FROM log_placed p
        WHERE shard BETWEEN p.first_shard AND p.last_shard)
    ON CONFLICT (shard) DO NOTHING;
";

/// Version 2's lease, held for good: a node of version 2 (still running, or started again,
/// which makes this table if it is missing) never takes it, so it never writes these tables;
/// one holding it is fenced off by a new epoch.
const RETIRED_LEASE: &str = "
CREATE TABLE IF NOT EXISTS log_leader (
    id integer PRIMARY KEY CHECK (id = 1),
    epoch bigint NOT NULL,
    node text NOT NULL,
    url text NOT NULL,
    expires timestamptz NOT NULL,
    clock_ms bigint NOT NULL DEFAULT 0
);
INSERT INTO log_leader (id, epoch, node, url, expires)
    VALUES (1, 0, '', 'tables of version 3: stop this node', 'infinity')
    ON CONFLICT (id) DO UPDATE SET expires = 'infinity', url = excluded.url,
        epoch = log_leader.epoch + 1
    WHERE log_leader.expires <> 'infinity';
";

const UPGRADE_FROM_1: &str = "
ALTER TABLE log_home ADD COLUMN IF NOT EXISTS snapshot bigint;
UPDATE log_home SET version = 2,
    snapshot = (SELECT id FROM log_snapshots ORDER BY first_lsn DESC LIMIT 1);
";

/// Version 2's one log becomes shard 0's of a database of one shard: the lease's row becomes
/// the shard's, with the snapshot the home row named; every row of the log is shard 0's.
/// Columns that version 2 added later (the lease's clock, `log_epochs`) are made if missing.
const UPGRADE_FROM_2: &str = "
ALTER TABLE log_leader ADD COLUMN IF NOT EXISTS clock_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE log_leader ADD COLUMN snapshot bigint;
UPDATE log_leader SET snapshot = (SELECT snapshot FROM log_home);
ALTER TABLE log_leader DROP CONSTRAINT IF EXISTS log_leader_id_check;
ALTER TABLE log_leader RENAME COLUMN id TO shard;
UPDATE log_leader SET shard = 0;
ALTER TABLE log_leader RENAME TO log_shards;
ALTER INDEX IF EXISTS log_leader_pkey RENAME TO log_shards_pkey;
ALTER TABLE log_home DROP COLUMN snapshot;
ALTER TABLE log_home ADD COLUMN shards integer NOT NULL DEFAULT 1 CHECK (shards > 0);
ALTER TABLE log_home ALTER COLUMN shards DROP DEFAULT;
ALTER TABLE log_batches ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE log_batches ALTER COLUMN shard DROP DEFAULT;
ALTER TABLE log_batches DROP CONSTRAINT log_batches_pkey;
ALTER TABLE log_batches ADD PRIMARY KEY (shard, first_lsn);
CREATE TABLE IF NOT EXISTS log_epochs (epoch bigint PRIMARY KEY, inserts integer NOT NULL);
ALTER TABLE log_epochs ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE log_epochs ALTER COLUMN shard DROP DEFAULT;
ALTER TABLE log_epochs DROP CONSTRAINT log_epochs_pkey;
ALTER TABLE log_epochs ADD PRIMARY KEY (shard, epoch);
ALTER TABLE log_snapshots ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE log_snapshots ALTER COLUMN shard DROP DEFAULT;
ALTER TABLE log_snapshot_chunks ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE log_snapshot_chunks ALTER COLUMN shard DROP DEFAULT;
UPDATE log_home SET version = 3;
";

/// Version 4 places ranges of shards in databases of their own: every database is named (at
/// random), a placed one records its home's name and its range, and a home the ranges it
/// placed. A database of version 3 is a home that placed none. Nothing of version 3 changes
/// meaning, so a node of version 3 still leading finishes as it was.
const UPGRADE_FROM_3: &str = "
ALTER TABLE log_home
    ADD COLUMN database text NOT NULL DEFAULT md5(random()::text || clock_timestamp()::text),
    ADD COLUMN home text,
    ADD COLUMN first_shard integer,
    ADD COLUMN last_shard integer;
CREATE TABLE IF NOT EXISTS log_placed (
    first_shard integer PRIMARY KEY,
    last_shard integer NOT NULL,
    database text
);
UPDATE log_home SET version = 4;
";

/// What a database is to be in the shard map, as a node starting asks.
#[derive(Clone, Debug)]
pub enum Role {
    /// The home (`--storage`), placing these ranges (first, last) in other databases if it is
    /// made now.
    Home(Vec<(i32, i32)>),
    /// A database keeping the range (first, last) for the home of this name.
    Placed { home: String, range: (i32, i32) },
}

/// What a database's tables say it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Made {
    /// How many shards the key space is cut into (chosen by whichever node made the home).
    pub shards: i32,
    /// The database's name, chosen at random when it was made.
    pub database: String,
    /// A placed database's home's name and range; `None` for a home.
    pub placed_for: Option<(String, (i32, i32))>,
    /// A home's ranges kept in other databases, each with the name of the database that
    /// keeps it once a node has made that one.
    pub placed: Vec<(i32, i32, Option<String>)>,
}

/// What `prepare` found in the home row: its version, region, account and what the database
/// is (empty unless the tables are of this version).
type Home = (i32, String, String, Made);

/// What one look at the tables found.
enum Found {
    Home(Home),
    /// The row-per-message tables of earlier builds.
    RowStorage,
    /// Tables of an earlier version, to be upgraded, with time enough for it.
    Older,
    /// Tables of an earlier version that a node of that version leads.
    LedByOlder,
}

/// The advisory lock a start holds while it makes, upgrades or reads the tables (and a move
/// of shards while it changes the home's record of them), so that each sees the others' work
/// whole.
pub const STARTS_LOCK: i64 = 7105112710;

/// Longest an upgrade may take: it rebuilds the log's key over every row.
const UPGRADE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

#[cfg(test)]
/// `prepare_as` a home that places no shard elsewhere: answers how many shards the key space
/// is cut into.
pub fn prepare(
    db: &mut Blocking,
    region: &str,
    account: &str,
    shards: i32,
) -> Result<i32, OpenError> {
    prepare_as(db, region, account, (shards, Role::Home(Vec::new()))).map(|made| made.shards)
}

/// Makes the tables if they are missing or upgrades those of versions 1 to 3 (nodes starting
/// together take turns under an advisory lock), then checks the version and home; a database
/// of another region or account, of a newer Orderly, or holding the row-per-message tables of
/// earlier builds is refused, and left as it was. A database made here is cut into `shards`
/// and made for `role`; answers what the database is (which the caller checks against the
/// role: a database made earlier keeps what it was made as).
pub fn prepare_as(
    db: &mut Blocking,
    region: &str,
    account: &str,
    (shards, role): (i32, Role),
) -> Result<Made, OpenError> {
    let asked = (region, account, shards, role);
    let mut found = look(db, asked.clone(), false)?;
    if matches!(found, Found::Older) {
        found = look(db, asked, true)?;
    }
    let (version, found_region, found_account, made) = match found {
        Found::Home(home) => home,
        Found::RowStorage => return Err(OpenError::RowStorage),
        Found::Older | Found::LedByOlder => {
            return Err(OpenError::Database(
                "the log's tables are of an earlier version and a node leads them: stop every \
                 node of the earlier version (its lease then lapses within 5 s), then start \
                 this one"
                    .into(),
            ))
        }
    };
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
    Ok(made)
}

/// Looks at the tables in one transaction, and makes them (or, if `upgrade`, upgrades them)
/// when they are this home's and of no newer version.
fn look(
    db: &mut Blocking,
    (region, account, shards, role): (&str, &str, i32, Role),
    upgrade: bool,
) -> Result<Found, OpenError> {
    let (home_region, home_account) = (region.to_string(), account.to_string());
    let timeout = if upgrade {
        UPGRADE_TIMEOUT
    } else {
        super::connection::STARTUP_TIMEOUT
    };
    db.run(timeout, move |client: &mut Client| -> Work<'_, _> {
        Box::pin(async move {
            let tx = client.transaction().await?;
            // "already exists" notices of every later start say nothing worth a log line.
            tx.batch_execute("SET LOCAL client_min_messages = warning")
                .await?;
            // A node starting while another upgrades waits for it, within this look's time.
            let wait = timeout.saturating_sub(std::time::Duration::from_secs(5));
            tx.batch_execute(&format!("SET LOCAL lock_timeout = {}", wait.as_millis()))
                .await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&STARTS_LOCK])
                .await?;
            let rows_backend = tx
                .query_one("SELECT to_regclass('orderly_schema') IS NOT NULL", &[])
                .await?
                .get::<_, bool>(0);
            if rows_backend {
                return Ok(Found::RowStorage);
            }
            let exists = tx
                .query_one("SELECT to_regclass('log_home') IS NOT NULL", &[])
                .await?
                .get::<_, bool>(0);
            let found: Option<(i32, String, String)> = if exists {
                let row = tx
                    .query_one("SELECT version, region, account FROM log_home", &[])
                    .await?;
                Some((row.get(0), row.get(1), row.get(2)))
            } else {
                None
            };
            if let Some((version, region, account)) = found {
                // Another home's tables, or a newer build's, are left as they are.
                if region != home_region || account != home_account || version > VERSION {
                    return Ok(Found::Home((version, region, account, Made::default())));
                }
                // A database asked to keep a range that is a home (of an earlier version, or
                // naming no home) is left as it is too: it is no range's.
                if let Role::Placed { .. } = role {
                    let a_home = version < VERSION
                        || tx
                            .query_one("SELECT home IS NULL FROM log_home", &[])
                            .await?
                            .get::<_, bool>(0);
                    if a_home {
                        return Ok(Found::Home((version, region, account, Made::default())));
                    }
                }
                if version < VERSION && !upgrade {
                    return Ok(Found::Older);
                }
                if version < 3 {
                    // A node of an earlier version leading would go on writing the tables as
                    // they were: they are upgraded only while none leads, and none may take
                    // the lease meanwhile.
                    tx.batch_execute("LOCK TABLE log_leader IN EXCLUSIVE MODE")
                        .await?;
                    let led = tx
                        .query_one("SELECT expires > now() FROM log_leader", &[])
                        .await?
                        .get::<_, bool>(0);
                    if led {
                        return Ok(Found::LedByOlder);
                    }
                    if version == 1 {
                        // Version 1 kept at most one snapshot: the one the log starts from.
                        tx.batch_execute(UPGRADE_FROM_1).await?;
                    }
                    tx.batch_execute(UPGRADE_FROM_2).await?;
                }
                if version < VERSION {
                    tx.batch_execute(UPGRADE_FROM_3).await?;
                }
            }
            tx.batch_execute(CREATE).await?;
            tx.batch_execute(STORAGE).await?;
            let (home, range) = match &role {
                Role::Home(_) => (None, None),
                Role::Placed { home, range } => (Some(home.clone()), Some(*range)),
            };
            let made_now = tx
                .query_opt(
                    "INSERT INTO log_home \
                     (id, version, region, account, shards, home, first_shard, last_shard) \
                     VALUES (1, $1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING \
                     RETURNING id",
                    &[
                        &VERSION,
                        &home_region,
                        &home_account,
                        &shards,
                        &home,
                        &range.map(|r| r.0),
                        &range.map(|r| r.1),
                    ],
                )
                .await?
                .is_some();
            if let (true, Role::Home(ranges)) = (made_now, &role) {
                for (first, last) in ranges {
                    tx.execute(
                        "INSERT INTO log_placed (first_shard, last_shard) VALUES ($1, $2)",
                        &[first, last],
                    )
                    .await?;
                }
            }
            tx.batch_execute(SHARD_ROWS).await?;
            tx.batch_execute(RETIRED_LEASE).await?;
            let row = tx
                .query_one(
                    "SELECT version, region, account, shards, database, home, first_shard, \
                     last_shard FROM log_home",
                    &[],
                )
                .await?;
            let placed_for = match (row.get(5), row.get(6), row.get(7)) {
                (Some(home), Some(first), Some(last)) => Some((home, (first, last))),
                _ => None,
            };
            let placed = tx
                .query(
                    "SELECT first_shard, last_shard, database FROM log_placed \
                     ORDER BY first_shard",
                    &[],
                )
                .await?;
            let made = Made {
                shards: row.get(3),
                database: row.get(4),
                placed_for,
                placed: (placed.iter())
                    .map(|p| (p.get(0), p.get(1), p.get(2)))
                    .collect(),
            };
            let home: Home = (row.get(0), row.get(1), row.get(2), made);
            tx.commit().await?;
            Ok(Found::Home(home))
        })
    })
    .map_err(|e| OpenError::Database(e.cause))
}

/// Records in the home that the database named `database` keeps the range beginning at
/// `first`, if none is recorded yet; answers the name recorded (another database's, if one
/// was made for the range first).
pub fn record_placed(db: &mut Blocking, first: i32, database: &str) -> Result<String, OpenError> {
    let database = database.to_string();
    db.run(
        super::connection::STARTUP_TIMEOUT,
        move |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                client
                    .execute(
                        "UPDATE log_placed SET database = $2 \
                         WHERE first_shard = $1 AND database IS NULL",
                        &[&first, &database],
                    )
                    .await?;
                let row = client
                    .query_one(
                        "SELECT coalesce(database, '') FROM log_placed WHERE first_shard = $1",
                        &[&first],
                    )
                    .await?;
                Ok(row.get::<_, String>(0))
            })
        },
    )
    .map_err(|e| OpenError::Database(e.cause))
}

/// The name of the database `db` is connected to, as its tables record it (`None` before
/// they are made, or made by a version before names); reads only.
pub fn name_of(db: &mut Blocking) -> Result<Option<String>, OpenError> {
    db.run(
        super::connection::STARTUP_TIMEOUT,
        move |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                let named = client
                    .query_one(
                        "SELECT to_regclass('log_home') IS NOT NULL AND EXISTS (SELECT 1 \
                         FROM pg_attribute WHERE attrelid = to_regclass('log_home') \
                         AND attname = 'database' AND NOT attisdropped)",
                        &[],
                    )
                    .await?
                    .get::<_, bool>(0);
                if !named {
                    return Ok(None);
                }
                let row = client
                    .query_opt("SELECT database FROM log_home", &[])
                    .await?;
                Ok(row.map(|row| row.get::<_, String>(0)))
            })
        },
    )
    .map_err(|e| OpenError::Database(e.cause))
}
