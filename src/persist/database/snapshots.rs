//! Snapshots in the database: the same bytes as a snapshot file (`persist::snapshot`), written
//! in chunks as they are made, then kept by one transaction that checks the lease's epoch,
//! records the snapshot, and drops the snapshots and log batches it makes unneeded. A snapshot
//! cut off before that transaction is simply not there; its chunks go with the next one.

use std::io::Write;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Config};

use super::connection::{Blocking, Failed, Work};
use crate::engine::Engine;
use crate::persist::snapshot::{self, Loaded, SnapshotStore, Written};
use crate::persist::writer::FileJournal;
use crate::persist::RecoveryError;

/// Bytes per chunk row.
const CHUNK_BYTES: usize = 8 << 20;

/// Longest one chunk's insert, or the keeping transaction, may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// The leader's snapshots, written through a connection of their own.
#[derive(Clone)]
pub struct DatabaseSnapshots {
    config: Config,
    epoch: i64,
}

impl DatabaseSnapshots {
    pub fn new(config: Config, epoch: i64) -> Self {
        DatabaseSnapshots { config, epoch }
    }
}

/// A snapshot's bytes on their way into `log_snapshot_chunks`.
struct Chunks {
    db: Blocking,
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
        let (id, chunk) = (self.id, self.next);
        self.bytes += bytes.len() as u64;
        self.db
            .run(WRITE_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
                Box::pin(async move {
                    client
                        .query_typed(
                            "INSERT INTO log_snapshot_chunks (snapshot, chunk, bytes) \
                             VALUES ($1, $2, $3)",
                            &[
                                (&id, Type::INT8),
                                (&chunk, Type::INT4),
                                (&bytes, Type::BYTEA),
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
        journal: &FileJournal,
    ) -> std::io::Result<(String, u64)> {
        let id = (uuid::Uuid::new_v4().as_u64_pair().0 >> 1) as i64;
        let create = || {
            Ok(Chunks {
                db: Blocking::new(self.config.clone())?,
                id,
                next: 0,
                buffer: Vec::with_capacity(CHUNK_BYTES),
                bytes: 0,
            })
        };
        let Written {
            out: mut chunks,
            first_lsn,
            ..
        } = snapshot::write_to(create, engine, journal)?;
        chunks.flush_chunk()?;
        let (epoch, count, size) = (self.epoch, chunks.next, chunks.bytes);
        let first_lsn = first_lsn as i64;
        let kept = chunks
            .db
            .run(WRITE_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
                Box::pin(async move {
                    let tx = client.transaction().await?;
                    tx.execute(
                        "INSERT INTO log_snapshots (id, first_lsn, epoch, chunks, bytes) \
                         VALUES ($1, $2, $3, $4, $5)",
                        &[&id, &first_lsn, &epoch, &count, &(size as i64)],
                    )
                    .await?;
                    tx.execute("DELETE FROM log_snapshots WHERE id <> $1", &[&id])
                        .await?;
                    tx.execute(
                        "DELETE FROM log_snapshot_chunks WHERE snapshot <> $1",
                        &[&id],
                    )
                    .await?;
                    tx.execute("DELETE FROM log_batches WHERE last_lsn < $1", &[&first_lsn])
                        .await?;
                    // Checked last, so the lease's row is held only for the commit: a renewal
                    // never waits behind the deletes.
                    let leads = tx
                        .query_opt(
                            "SELECT 1 FROM log_leader WHERE id = 1 AND epoch = $1 FOR SHARE",
                            &[&epoch],
                        )
                        .await?
                        .is_some();
                    if !leads {
                        return Ok(false);
                    }
                    // Last too, so the home row is locked only for the commit.
                    tx.execute("UPDATE log_home SET snapshot = $1", &[&id])
                        .await?;
                    tx.commit().await?;
                    Ok(true)
                })
            })
            .map_err(io_error)?;
        if !kept {
            return Err(std::io::Error::other(
                "another node leads now: the snapshot was not kept",
            ));
        }
        Ok((
            format!("database snapshot {id} (from record {first_lsn})"),
            size,
        ))
    }
}

/// Loads the snapshot recovery starts from, if there is one, into `engine`.
pub fn load<W: Default>(db: &mut Blocking, engine: &Engine<W>) -> Result<Loaded, RecoveryError> {
    let unreadable = |failed: Failed| RecoveryError::Io(std::io::Error::other(failed.cause));
    let found = db
        .run(
            super::STARTUP_TIMEOUT,
            |client: &mut Client| -> Work<'_, _> {
                Box::pin(async move {
                    // The snapshot the log starts from, as recorded when it was kept, and
                    // its row if it is still there.
                    let row = client
                        .query_one(
                            "SELECT h.snapshot, s.first_lsn, s.chunks, s.bytes, \
                             (SELECT min(id) FROM log_snapshots WHERE id IS DISTINCT FROM \
                              h.snapshot) FROM log_home h \
                             LEFT JOIN log_snapshots s ON s.id = h.snapshot",
                            &[],
                        )
                        .await?;
                    let kept: Option<i64> = row.get(0);
                    let unrecorded: Option<i64> = row.get(4);
                    let found: Option<(i64, i32, i64)> = row
                        .get::<_, Option<i64>>(1)
                        .map(|first_lsn| (first_lsn, row.get(2), row.get(3)));
                    Ok((unrecorded, kept.map(|id| (id, found))))
                })
            },
        )
        .map_err(unreadable)?;
    let (unrecorded, found) = found;
    if let Some(other) = unrecorded {
        // Only an older build, or a hand, keeps a snapshot without recording it.
        return Err(RecoveryError::Corruption {
            file: format!("log_snapshots row {other}"),
            offset: 0,
            reason: "a snapshot the log's home row (log_home.snapshot) does not name: a node of \
                     an earlier version kept it after the tables were upgraded"
                .into(),
        });
    }
    let Some((id, found)) = found else {
        return Ok(Loaded::default());
    };
    let Some((first_lsn, count, size)) = found else {
        return Err(RecoveryError::Corruption {
            file: format!("log_snapshots row {id}"),
            offset: 0,
            reason: "the snapshot the log starts from (log_home.snapshot) is missing, and \
                     with it every record it covers"
                .into(),
        });
    };
    let name = format!("log_snapshot_chunks of snapshot {id} (from record {first_lsn})");
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    // A chunk a query, each with its own bound: a snapshot of any size is read back.
    for chunk in 0..count {
        let part = db
            .run(WRITE_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
                Box::pin(async move {
                    let row = client
                        .query_opt(
                            "SELECT bytes FROM log_snapshot_chunks \
                             WHERE snapshot = $1 AND chunk = $2",
                            &[&id, &chunk],
                        )
                        .await?;
                    Ok(row.map(|row| row.get::<_, Vec<u8>>(0)))
                })
            })
            .map_err(unreadable)?;
        let Some(part) = part else {
            return Err(RecoveryError::Corruption {
                file: name,
                offset: bytes.len(),
                reason: format!("chunk {chunk} of {count} is missing"),
            });
        };
        bytes.extend_from_slice(&part);
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
