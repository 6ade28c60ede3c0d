//! Snapshots in the database: the same bytes as a snapshot file (`persist::snapshot`), written
//! in chunks as they are made, then kept by one transaction that checks the lease's epoch,
//! records the snapshot, and drops the snapshots and log batches it makes unneeded. A snapshot
//! that fails before that transaction is not there; its chunks are removed at once, or (its
//! node gone) by the next leader, or with the next snapshot kept.

use std::io::Write;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Config};

use super::connection::{Blocking, Failed, Work};
use super::lease::Fence;
use crate::engine::Engine;
use crate::persist::snapshot::{self, Loaded, SnapshotStore, Written};
use crate::persist::writer::LogWriter;
use crate::persist::RecoveryError;

/// Bytes per chunk row.
const CHUNK_BYTES: usize = 8 << 20;

/// Longest one chunk's insert, or the keeping transaction, may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// A shard leader's snapshots, written through a connection of their own.
#[derive(Clone)]
pub struct DatabaseSnapshots {
    config: Config,
    fence: Fence,
}

impl DatabaseSnapshots {
    pub fn new(config: Config, fence: Fence) -> Self {
        DatabaseSnapshots { config, fence }
    }
}

/// A snapshot's bytes on their way into `log_snapshot_chunks`.
struct Chunks {
    db: Blocking,
    shard: i32,
    id: i64,
    next: i32,
    buffer: Vec<u8>,
    bytes: u64,
}

impl Chunks {
    fn flush_chunk(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK_BYTES));
        let (id, chunk, shard) = (self.id, self.next, self.shard);
        self.bytes += bytes.len() as u64;
        self.db
            .run(WRITE_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
                Box::pin(async move {
                    client
                        .query_typed(
                            "INSERT INTO log_snapshot_chunks (snapshot, chunk, bytes, shard) \
                             VALUES ($1, $2, $3, $4)",
                            &[
                                (&id, Type::INT8),
                                (&chunk, Type::INT4),
                                (&bytes, Type::BYTEA),
                                (&shard, Type::INT4),
                            ],
                        )
                        .await
                })
            })
            .map_err(io_error)?;
        self.next += 1;
        Ok(())
    }
}

impl Write for Chunks {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let room = CHUNK_BYTES - self.buffer.len();
        let taken = bytes.len().min(room);
        self.buffer.extend_from_slice(&bytes[..taken]);
        if self.buffer.len() == CHUNK_BYTES {
            self.flush_chunk()?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn io_error(failed: Failed) -> std::io::Error {
    std::io::Error::other(failed.cause)
}

impl SnapshotStore for DatabaseSnapshots {
    fn take(
        &self,
        engine: &Engine<Notify>,
        log_writer: &LogWriter,
    ) -> std::io::Result<(String, u64)> {
        let id = (uuid::Uuid::new_v4().as_u64_pair().0 >> 1) as i64;
        let create = || {
            Ok(Chunks {
                db: Blocking::new(self.config.clone())?,
                shard: self.fence.shard,
                id,
                next: 0,
                buffer: Vec::with_capacity(CHUNK_BYTES),
                bytes: 0,
            })
        };
        let written = snapshot::write_to(create, engine, log_writer);
        self.keep(id, written).map_err(|(error, maybe_kept)| {
            // Its chunks would stay until a snapshot is kept; while snapshots fail, each
            // attempt would leave another set. Not if its keep may have committed: the log
            // may start from it now (a later keep or leader removes them if not).
            if !maybe_kept {
                self.forget(id);
            }
            crate::test_hooks::reached("snapshot-keep-failed");
            error
        })
    }
}

impl DatabaseSnapshots {
    /// Writes the last chunk of snapshot `id` and keeps it, if the lease is still this node's.
    /// A failure says whether the keep may have committed all the same (its answer lost).
    fn keep(
        &self,
        id: i64,
        written: std::io::Result<Written<Chunks>>,
    ) -> Result<(String, u64), (std::io::Error, bool)> {
        let surely_not = |error| (error, false);
        let Written {
            out: mut chunks,
            first_lsn,
            ..
        } = written.map_err(surely_not)?;
        chunks.flush_chunk().map_err(surely_not)?;
        let Fence { shard, epoch } = self.fence;
        let (count, size) = (chunks.next, chunks.bytes);
        let first_lsn = first_lsn as i64;
        let kept = chunks
            .db
            .run(WRITE_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
                Box::pin(async move {
                    let tx = client.transaction().await?;
                    tx.execute(
                        "INSERT INTO log_snapshots (id, shard, first_lsn, epoch, chunks, bytes) \
                         VALUES ($1, $6, $2, $3, $4, $5)",
                        &[&id, &first_lsn, &epoch, &count, &(size as i64), &shard],
                    )
                    .await?;
                    tx.execute(
                        "DELETE FROM log_snapshots WHERE shard = $2 AND id <> $1",
                        &[&id, &shard],
                    )
                    .await?;
                    tx.execute(
                        "DELETE FROM log_snapshot_chunks WHERE shard = $2 AND snapshot <> $1",
                        &[&id, &shard],
                    )
                    .await?;
                    tx.execute(
                        "DELETE FROM log_batches \
                         WHERE shard = $2 AND first_lsn < $1 AND last_lsn < $1",
                        &[&first_lsn, &shard],
                    )
                    .await?;
                    // Checked last, so the lease's row is held only for the commit: a renewal
                    // never waits behind the deletes.
                    let leads = tx
                        .query_opt(
                            "SELECT 1 FROM log_shards WHERE shard = $2 AND epoch = $1 FOR SHARE",
                            &[&epoch, &shard],
                        )
                        .await?
                        .is_some();
                    if !leads {
                        return Ok(false);
                    }
                    crate::test_hooks::pause_while("pause-snapshot-keep", "snapshot-keep-paused")
                        .await;
                    // Last too, so the shard's row is locked only for the commit.
                    tx.execute(
                        "UPDATE log_shards SET snapshot = $1 WHERE shard = $2",
                        &[&id, &shard],
                    )
                    .await?;
                    tx.commit().await?;
                    Ok(true)
                })
            })
            .map_err(|failed| {
                let maybe_kept = failed.unknown_outcome;
                (io_error(failed), maybe_kept)
            })?;
        if !kept {
            return Err(surely_not(std::io::Error::other(
                "another node leads now: the snapshot was not kept",
            )));
        }
        Ok((
            format!("database snapshot {id} (from record {first_lsn})"),
            size,
        ))
    }

    /// Removes the chunks of snapshot `id`, which was not kept (as far as the database can be
    /// reached: the next snapshot kept, or the next leader, removes what is left).
    fn forget(&self, id: i64) {
        let Ok(mut db) = Blocking::new(self.config.clone()) else {
            return;
        };
        let removed = db.run(WRITE_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                client
                    .execute(
                        "DELETE FROM log_snapshot_chunks WHERE snapshot = $1",
                        &[&id],
                    )
                    .await
            })
        });
        if let Err(failed) = removed {
            tracing::debug!(cause = %failed, "chunks of a snapshot not kept were left behind");
        }
    }
}

/// Removes the chunks of the shard's snapshots never kept (a leader that died while writing
/// one): run by the shard's next leader, before it writes snapshots of its own. Answers how
/// many were removed.
pub fn remove_orphans(db: &mut Blocking, shard: i32) -> Result<u64, Failed> {
    db.run(WRITE_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
        Box::pin(async move {
            client
                .execute(
                    "DELETE FROM log_snapshot_chunks c WHERE c.shard = $1 AND NOT EXISTS \
                     (SELECT 1 FROM log_snapshots s WHERE s.id = c.snapshot)",
                    &[&shard],
                )
                .await
        })
    })
}

/// The snapshot the shard's log starts from, as recorded when it was kept, its row if it is
/// still there, and any snapshot of the shard kept without being recorded.
const HEADER: &str = "SELECT l.snapshot, s.first_lsn, s.chunks, s.bytes, \
     (SELECT min(id) FROM log_snapshots WHERE shard = l.shard AND id IS DISTINCT FROM l.snapshot) \
     FROM log_shards l LEFT JOIN log_snapshots s ON s.id = l.snapshot WHERE l.shard = $1";

/// A kept snapshot's row: its first record, chunks and size.
type Row = (i64, i32, i64);

/// What `HEADER` found: a snapshot kept unrecorded, and the recorded one (its id, and its row
/// if it is there).
struct Header {
    unrecorded: Option<i64>,
    kept: Option<(i64, Option<Row>)>,
}

impl Header {
    fn of(row: &tokio_postgres::Row) -> Header {
        let kept: Option<i64> = row.get(0);
        let found =
            (row.get::<_, Option<i64>>(1)).map(|first_lsn| (first_lsn, row.get(2), row.get(3)));
        Header {
            unrecorded: row.get(4),
            kept: kept.map(|id| (id, found)),
        }
    }
}

/// A snapshot's chunks as read: their bytes in order, up to the first one missing.
struct Read {
    bytes: Vec<u8>,
    missing: Option<i32>,
}

/// Loads the snapshot the shard's recovery starts from, if there is one, into `engine`. Its
/// rows are read in one `REPEATABLE READ` transaction, so a snapshot the leader keeps meanwhile
/// (deleting this one's chunks) does not cut the read short: this one is read whole, as it was.
pub fn load<W: Default>(
    db: &mut Blocking,
    shard: i32,
    engine: &Engine<W>,
) -> Result<Loaded, RecoveryError> {
    load_pausing(db, shard, engine, Box::new(|| {}))
}

/// As `load`, running `between` inside the transaction once the snapshot's row is read (tests:
/// the leader keeps a newer snapshot meanwhile).
pub(super) fn load_pausing<W: Default>(
    db: &mut Blocking,
    shard: i32,
    engine: &Engine<W>,
    between: Box<dyn FnOnce() + Send>,
) -> Result<Loaded, RecoveryError> {
    let unreadable = |failed: Failed| RecoveryError::Io(std::io::Error::other(failed.cause));
    // How many chunks there are, to bound the read by (a minute a chunk, as to write one).
    let chunks = db
        .run(
            super::connection::STARTUP_TIMEOUT,
            move |client: &mut Client| -> Work<'_, _> {
                Box::pin(async move {
                    let row = client
                        .query_opt(
                            "SELECT s.chunks FROM log_shards l \
                             JOIN log_snapshots s ON s.id = l.snapshot WHERE l.shard = $1",
                            &[&shard],
                        )
                        .await?;
                    Ok(row.map_or(0, |row| row.get::<_, i32>(0)))
                })
            },
        )
        .map_err(unreadable)?;
    let bound = super::connection::STARTUP_TIMEOUT + WRITE_TIMEOUT * (chunks.max(0) as u32 + 1);
    let (header, read) = db
        .run(bound, move |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                let tx = client
                    .build_transaction()
                    .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start()
                    .await?;
                let header = Header::of(&tx.query_one(HEADER, &[&shard]).await?);
                between();
                let mut read = Read {
                    bytes: Vec::new(),
                    missing: None,
                };
                if let Some((id, Some((_, count, size)))) = header.kept {
                    read.bytes.reserve(usize::try_from(size).unwrap_or(0));
                    for chunk in 0..count {
                        let row = tx
                            .query_opt(
                                "SELECT bytes FROM log_snapshot_chunks \
                                 WHERE snapshot = $1 AND chunk = $2",
                                &[&id, &chunk],
                            )
                            .await?;
                        match row {
                            Some(row) => read.bytes.extend_from_slice(row.get::<_, &[u8]>(0)),
                            None => {
                                read.missing = Some(chunk);
                                break;
                            }
                        }
                    }
                }
                tx.commit().await?;
                Ok((header, read))
            })
        })
        .map_err(unreadable)?;
    if let Some(other) = header.unrecorded {
        // Only an older build, or a hand, keeps a snapshot without recording it.
        return Err(RecoveryError::Corruption {
            file: format!("log_snapshots row {other}"),
            offset: 0,
            reason: "a snapshot the shard's row (log_shards.snapshot) does not name: a node of \
                     an earlier version kept it after the tables were upgraded"
                .into(),
        });
    }
    let Some((id, found)) = header.kept else {
        return Ok(Loaded::default());
    };
    let Some((first_lsn, count, size)) = found else {
        return Err(RecoveryError::Corruption {
            file: format!("log_snapshots row {id}"),
            offset: 0,
            reason: "the snapshot the log starts from (log_shards.snapshot) is missing, and \
                     with it every record it covers"
                .into(),
        });
    };
    let name = format!("log_snapshot_chunks of snapshot {id} (from record {first_lsn})");
    let bytes = read.bytes;
    if let Some(chunk) = read.missing {
        return Err(RecoveryError::Corruption {
            file: name,
            offset: bytes.len(),
            reason: format!("chunk {chunk} of {count} is missing"),
        });
    }
    if i64::try_from(bytes.len()).ok() != Some(size) {
        return Err(RecoveryError::Corruption {
            file: name,
            offset: bytes.len(),
            reason: format!(
                "{} bytes in its {count} chunks where the snapshot has {size}",
                bytes.len()
            ),
        });
    }
    snapshot::load_bytes(&name, &bytes, engine)
}
