//! The log writer's batches as rows of `log_batches`: one insert per write, whatever the
//! number of records in it, committed before the writer reports them durable.
//!
//! The insert reads the lease's row `FOR SHARE` and inserts only while its epoch is this
//! node's: a node taking the lease must wait for an insert already holding the row, and an
//! insert that comes after finds the new epoch and inserts nothing. So every batch a new
//! leader does not see when it reads the log after taking the lease was refused, and the log
//! never forks.
//!
//! An insert whose outcome is unknown (no answer, a connection lost mid-way) may have been
//! kept: the next try first asks how far the log goes and leaves out what is there already.

use std::time::Duration;

use tokio_postgres::types::Type;
use tokio_postgres::{Client, Statement};

use super::connection::{Blocking, Work};
use crate::persist::format;
use crate::persist::log::LogError;
use crate::persist::record;
use crate::persist::writer::LogSink;

/// Longest an insert of a batch may take before it counts as failed (and is tried again).
const APPEND_TIMEOUT: Duration = Duration::from_secs(5);

const APPEND: &str = "INSERT INTO log_batches (first_lsn, last_lsn, epoch, records) \
     SELECT $1, $2, $3, $4 FROM log_leader WHERE id = 1 AND epoch = $3 FOR SHARE \
     RETURNING 1";

pub struct TableLog {
    db: Blocking,
    epoch: i64,
    /// The sequence number of the first record not yet in the table.
    next_lsn: u64,
    /// The last insert's outcome is unknown.
    unsure: bool,
    deposed: bool,
    /// The insert, prepared on the connection of this generation (`Blocking::generation`):
    /// planned once, not at every batch.
    append: Option<(u64, Statement)>,
}

impl TableLog {
    pub fn new(db: Blocking, epoch: i64, next_lsn: u64) -> TableLog {
        TableLog {
            db,
            epoch,
            next_lsn,
            unsure: false,
            deposed: false,
            append: None,
        }
    }

    /// As after an insert whose answer was lost (tests).
    #[cfg(test)]
    pub fn assume_unsure(&mut self) {
        self.unsure = true;
    }

    fn deposed(&mut self) -> LogError {
        self.deposed = true;
        LogError::Deposed(self.epoch as u64)
    }
}

/// A record's sequence number (its first 8 bytes, `format::record_header`).
fn lsn_of(record: &[u8]) -> u64 {
    let word = u64::from_le_bytes(record[..8].try_into().expect("records start with 8 bytes"));
    word & format::MAX_LSN
}

fn failed(cause: impl std::fmt::Display) -> LogError {
    LogError::Io(std::io::Error::other(cause.to_string()))
}

impl LogSink for TableLog {
    fn append(&mut self, records: &[&[u8]]) -> Result<(), LogError> {
        if self.deposed {
            return Err(LogError::Deposed(self.epoch as u64));
        }
        if self.unsure {
            // Only this epoch's batches: another leader's (after a takeover) hold records of
            // the same numbers that are not these.
            let epoch = self.epoch;
            let (current, stored) = self
                .db
                .run(APPEND_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
                    Box::pin(async move {
                        let row = client
                            .query_one(
                                "SELECT (SELECT epoch FROM log_leader WHERE id = 1), \
                                 (SELECT max(last_lsn) FROM log_batches WHERE epoch = $1)",
                                &[&epoch],
                            )
                            .await?;
                        Ok((row.get::<_, i64>(0), row.get::<_, Option<i64>>(1)))
                    })
                })
                .map_err(failed)?;
            if current != self.epoch {
                return Err(self.deposed());
            }
            if let Some(last) = stored {
                self.next_lsn = self.next_lsn.max(last as u64 + 1);
            }
            self.unsure = false;
        }
        let fresh: Vec<&[u8]> = records
            .iter()
            .copied()
            .filter(|record| lsn_of(record) >= self.next_lsn)
            .collect();
        let (Some(first), Some(last)) = (fresh.first(), fresh.last()) else {
            return Ok(());
        };
        let (first, last) = (lsn_of(first), lsn_of(last));
        let mut frames =
            Vec::with_capacity(fresh.iter().map(|r| r.len() + record::HEADER_BYTES).sum());
        for record in &fresh {
            record::encode(record, &mut frames);
        }
        let epoch = self.epoch;
        let generation = self.db.generation();
        let prepared = self
            .append
            .take()
            .filter(|(made_on, _)| *made_on == generation)
            .map(|(_, statement)| statement);
        let inserted = self
            .db
            .run(APPEND_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
                Box::pin(async move {
                    let statement = match prepared {
                        Some(statement) => statement,
                        None => {
                            let types = [Type::INT8, Type::INT8, Type::INT8, Type::BYTEA];
                            client.prepare_typed(APPEND, &types).await?
                        }
                    };
                    let (first, last) = (first as i64, last as i64);
                    let rows = client
                        .query(&statement, &[&first, &last, &epoch, &frames])
                        .await?;
                    Ok((rows.len(), statement))
                })
            })
            .map(|(rows, statement)| {
                self.append = Some((self.db.generation(), statement));
                rows
            });
        match inserted {
            Ok(1) => {
                self.next_lsn = last + 1;
                Ok(())
            }
            Ok(_) => Err(self.deposed()),
            Err(failure) => {
                // A batch of these numbers already there: an earlier try of this one that
                // committed after all (its answer lost, or still running when it was tried
                // again). Which records it holds is asked before the next try.
                let duplicate = failure.code.as_deref() == Some("23505");
                self.unsure |= failure.unknown_outcome || duplicate;
                Err(failed(failure))
            }
        }
    }

    /// An insert is durable once it returns (it commits by itself).
    fn sync(&mut self) -> Result<(), LogError> {
        if self.deposed {
            return Err(LogError::Deposed(self.epoch as u64));
        }
        Ok(())
    }

    fn poisoned(&self) -> bool {
        self.deposed
    }

    /// Batches are numbered by their first record: what a snapshot covers is told by number.
    fn rotate(&mut self) -> Result<u64, LogError> {
        Ok(self.next_lsn)
    }

    /// The snapshot's own transaction drops the batches it covers (`snapshots`).
    fn remove_before(&mut self, _number: u64) -> Result<(), LogError> {
        Ok(())
    }
}
