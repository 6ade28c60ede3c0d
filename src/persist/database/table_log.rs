//! The log writer's batches as rows of `log_batches`: one insert per write, whatever the
//! number of records in it, committed before the writer reports them durable. A write of more
//! than `ROW_BYTES` is cut, between records, into rows of at most that size, all inserted by
//! the one statement: a row that fits its page is cheaper for the database than one cut into
//! TOAST chunks with an index entry each.
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

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Statement};

use super::connection::{Blocking, Work};
use crate::persist::format;
use crate::persist::log_error::LogError;
use crate::persist::record;
use crate::persist::writer::LogSink;

/// Longest an insert of a batch may take before it counts as failed (and is tried again).
const APPEND_TIMEOUT: Duration = Duration::from_secs(5);

/// The most framed record bytes in a row, so that it stays in its page (the table's
/// `toast_tuple_target` is 8160 bytes, row header and numbers included). A record larger than
/// this has a row of its own.
const ROW_BYTES: usize = 8_000;

const APPEND: &str = "INSERT INTO log_batches (first_lsn, last_lsn, epoch, records) \
     SELECT b.first_lsn, b.last_lsn, $3, b.records \
     FROM log_leader, unnest($1::bigint[], $2::bigint[], $4::bytea[]) AS b(first_lsn, last_lsn, records) \
     WHERE log_leader.id = 1 AND log_leader.epoch = $3 FOR SHARE OF log_leader";

/// `APPEND` for a write of one row (most writes under a light load), with the same fence: its
/// values as they are, since unpacking arrays costs the database about a tenth of the insert.
const APPEND_ONE: &str = "INSERT INTO log_batches (first_lsn, last_lsn, epoch, records) \
     SELECT $1::bigint, $2::bigint, $3::bigint, $4::bytea FROM log_leader \
     WHERE log_leader.id = 1 AND log_leader.epoch = $3 FOR SHARE OF log_leader";

/// A write cut into rows: each row's first and last sequence numbers and framed records.
#[derive(Default)]
struct Rows {
    first: Vec<i64>,
    last: Vec<i64>,
    records: Vec<Vec<u8>>,
}

impl Rows {
    fn cut(records: &[&[u8]]) -> Rows {
        let mut rows = Rows::default();
        for record in records {
            let lsn = lsn_of(record) as i64;
            let framed = record.len() + record::HEADER_BYTES;
            let fits = rows
                .records
                .last()
                .is_some_and(|row| row.len() + framed <= ROW_BYTES);
            if !fits {
                rows.first.push(lsn);
                rows.last.push(lsn);
                rows.records.push(Vec::with_capacity(framed));
            }
            let row = rows.records.last_mut().expect("a row was just started");
            record::encode(record, row);
            *rows.last.last_mut().expect("a row was just started") = lsn;
        }
        rows
    }
}

/// The two forms of the insert, prepared on one connection.
struct InsertStatements {
    many: Statement,
    one: Statement,
}

pub struct TableLog {
    db: Blocking,
    epoch: i64,
    /// The sequence number of the first record not yet in the table.
    next_lsn: u64,
    /// The last insert's outcome is unknown.
    unsure: bool,
    deposed: bool,
    /// The inserts (`APPEND`, `APPEND_ONE`), prepared on the connection of this generation
    /// (`Blocking::generation`): planned once, not at every batch.
    append: Option<(u64, InsertStatements)>,
    batch_wait: Duration,
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
            batch_wait: Duration::ZERO,
        }
    }

    /// Lets a busy writer wait this long after an insert before the next (`LogSink::batch_wait`).
    pub fn waiting(self, batch_wait: Duration) -> TableLog {
        TableLog { batch_wait, ..self }
    }

    /// As after an insert whose answer was lost (tests).
    #[cfg(test)]
    pub fn assume_unsure(&mut self) {
        self.unsure = true;
    }

    fn deposed(&mut self) -> LogError {
        self.deposed = true;
        Deposed(self.epoch as u64).into()
    }
}

/// Another node took the lease on the log: this node may never write it again.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("another node leads now: this node's lease on the log (epoch {0}) is over")]
pub struct Deposed(pub u64);

impl From<Deposed> for LogError {
    fn from(deposed: Deposed) -> LogError {
        LogError::Refused(Box::new(deposed))
    }
}

/// The epoch whose lease was over, if `result` is a table log's refusal for that reason.
#[cfg(test)]
pub fn deposed<T>(result: &Result<T, LogError>) -> Option<u64> {
    match result {
        Err(LogError::Refused(cause)) => cause.downcast_ref::<Deposed>().map(|d| d.0),
        _ => None,
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
            return Err(Deposed(self.epoch as u64).into());
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
        let last = lsn_of(last);
        debug_assert!(lsn_of(first) <= last);
        let rows = Rows::cut(&fresh);
        let wanted = rows.records.len() as u64;
        let epoch = self.epoch;
        let generation = self.db.generation();
        let prepared = self
            .append
            .take()
            .filter(|(made_on, _)| *made_on == generation)
            .map(|(_, prepared)| prepared);
        let inserted = self
            .db
            .run(APPEND_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
                Box::pin(async move {
                    let prepared = match prepared {
                        Some(prepared) => prepared,
                        None => {
                            let arrays = [
                                Type::INT8_ARRAY,
                                Type::INT8_ARRAY,
                                Type::INT8,
                                Type::BYTEA_ARRAY,
                            ];
                            let values = [Type::INT8, Type::INT8, Type::INT8, Type::BYTEA];
                            InsertStatements {
                                many: client.prepare_typed(APPEND, &arrays).await?,
                                one: client.prepare_typed(APPEND_ONE, &values).await?,
                            }
                        }
                    };
                    let inserted = match &rows.records[..] {
                        [records] => {
                            let params: [&(dyn ToSql + Sync); 4] =
                                [&rows.first[0], &rows.last[0], &epoch, records];
                            client.execute(&prepared.one, &params).await?
                        }
                        _ => {
                            let params: [&(dyn ToSql + Sync); 4] =
                                [&rows.first, &rows.last, &epoch, &rows.records];
                            client.execute(&prepared.many, &params).await?
                        }
                    };
                    Ok((inserted, prepared))
                })
            })
            .map(|(inserted, prepared)| {
                self.append = Some((self.db.generation(), prepared));
                inserted
            });
        match inserted {
            Ok(count) if count == wanted => {
                self.next_lsn = last + 1;
                Ok(())
            }
            // The lease's row was not this epoch's: nothing was inserted.
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
            return Err(Deposed(self.epoch as u64).into());
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

    fn batch_wait(&self) -> Duration {
        self.batch_wait
    }
}

#[cfg(test)]
mod tests {
    use super::{Rows, ROW_BYTES};
    use crate::persist::{format, record};

    fn record_of(lsn: u64, payload: usize) -> Vec<u8> {
        let mut bytes = format::record_header(lsn).to_vec();
        bytes.resize(bytes.len() + payload, b'x');
        bytes
    }

    #[test]
    fn a_write_is_cut_between_records_into_rows_that_fit_and_a_large_record_has_its_own() {
        let mut records: Vec<Vec<u8>> = (10..40).map(|lsn| record_of(lsn, 900)).collect();
        records.insert(12, record_of(40, 3 * ROW_BYTES));
        // Numbered in order, as the writer hands them over.
        for (index, record) in records.iter_mut().enumerate() {
            record[..8].copy_from_slice(&format::record_header(10 + index as u64));
        }
        let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        let rows = Rows::cut(&slices);
        // Eight records of 916 framed bytes fit a row: 8 + 4 before the large one, then 8 + 8 + 2.
        assert_eq!(rows.records.len(), 6);
        let mut next = 10;
        for ((first, last), bytes) in rows.first.iter().zip(&rows.last).zip(&rows.records) {
            assert_eq!(*first, next, "rows follow one another");
            let decoded = record::decode(bytes);
            assert_eq!(decoded.ending, record::Ending::Clean);
            assert_eq!(decoded.records.len() as i64, last - first + 1);
            assert!(
                bytes.len() <= ROW_BYTES || decoded.records.len() == 1,
                "a row of {} bytes holds {} records",
                bytes.len(),
                decoded.records.len()
            );
            next = last + 1;
        }
        assert_eq!(next, 41, "every record in a row");
        let whole: Vec<u8> = rows.records.concat();
        let mut framed = Vec::new();
        for record in &slices {
            record::encode(record, &mut framed);
        }
        assert_eq!(
            whole, framed,
            "the rows hold the records in order, unchanged"
        );
    }
}
