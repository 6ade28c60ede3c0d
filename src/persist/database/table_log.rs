//! The log writer's batches as rows of `log_batches`: one insert per write, whatever the
//! number of records in it, committed before the writer reports them durable. A write of more
//! than `ROW_BYTES` is cut, between records, into rows of at most that size, all inserted by
//! the one statement: a row that fits its page is cheaper for the database than one cut into
//! TOAST chunks with an index entry each.
//!
//! Two inserts may be under way at once (`--database-inserts 2`), each on a connection of its
//! own: while one commits, the next is sent, so a leader's commits are not paid one round trip
//! after another. The second may commit before the first, or the first fail after the second
//! committed: the log then has a gap with one write's rows after it. The writer acknowledges
//! nothing past a gap and writes the missing records again; recovery cuts a gap left by a
//! leader that stopped before it could (`recovery`).
//!
//! The insert reads the lease's row `FOR SHARE` and inserts only while its epoch is this
//! node's: a node taking the lease must wait for an insert already holding the row, and an
//! insert that comes after finds the new epoch and inserts nothing. So every batch a new
//! leader does not see when it reads the log after taking the lease was refused, and the log
//! never forks.
//!
//! An insert whose outcome is unknown (no answer, a connection lost mid-way), or one that
//! failed beside another, may have been kept: the next try first asks which of this epoch's
//! records the log holds and leaves those out.

use std::collections::{BTreeSet, VecDeque};
use std::sync::mpsc;
use std::time::Duration;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Statement};

use super::connection::{Blocking, Failed, Session};
use super::lease::Fence;
use crate::persist::format;
use crate::persist::log_error::LogError;
use crate::persist::record;
use crate::persist::writer::{LogSink, Wake};

/// Longest an insert of a batch may take before it counts as failed (and is tried again).
const APPEND_TIMEOUT: Duration = Duration::from_secs(5);

/// The most inserts that may be under way at once, each on a connection of its own: recovery
/// knows a torn tail by its one gap (`recovery`).
pub const MOST_INSERTS: usize = 2;

/// The most framed record bytes in a row, so that it stays in its page (the table's
/// `toast_tuple_target` is 8160 bytes, row header and numbers included). A record larger than
/// this has a row of its own.
const ROW_BYTES: usize = 8_000;

const APPEND: &str = "INSERT INTO log_batches (shard, first_lsn, last_lsn, epoch, records) \
     SELECT $5, b.first_lsn, b.last_lsn, $3, b.records \
     FROM log_shards, unnest($1::bigint[], $2::bigint[], $4::bytea[]) AS b(first_lsn, last_lsn, records) \
     WHERE log_shards.shard = $5 AND log_shards.epoch = $3 FOR SHARE OF log_shards";

/// `APPEND` for a write of one row (most writes under a light load), with the same fence: its
/// values as they are, since unpacking arrays costs the database about a tenth of the insert.
const APPEND_ONE: &str = "INSERT INTO log_batches (shard, first_lsn, last_lsn, epoch, records) \
     SELECT $5::integer, $1::bigint, $2::bigint, $3::bigint, $4::bytea FROM log_shards \
     WHERE log_shards.shard = $5 AND log_shards.epoch = $3 FOR SHARE OF log_shards";

/// Which of this epoch's rows the log holds from a sequence number on, and whose the lease is.
const STORED: &str = "SELECT l.epoch, b.first_lsn, b.last_lsn FROM log_shards l \
     LEFT JOIN log_batches b ON b.shard = l.shard AND b.epoch = $1 AND b.first_lsn >= $2 \
     WHERE l.shard = $3";

/// A write cut into rows: each row's first and last sequence numbers and framed records.
#[derive(Default)]
struct Rows {
    first: Vec<i64>,
    last: Vec<i64>,
    records: Vec<Vec<u8>>,
}

impl Rows {
    /// Records in number order, cut into rows of at most `ROW_BYTES`, wherever a number is
    /// missing (records the log holds already, left out of a write tried again), and at each
    /// of `starts`.
    fn cut(records: &[&[u8]], starts: &BTreeSet<i64>) -> Rows {
        let mut rows = Rows::default();
        for record in records {
            let lsn = lsn_of(record) as i64;
            let framed = record.len() + record::HEADER_BYTES;
            let fits = rows.last.last() == Some(&(lsn - 1))
                && !starts.contains(&lsn)
                && rows
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

/// A connection and the inserts prepared on it.
struct Slot {
    session: Session,
    /// Prepared on the connection of this generation (`Session::generation`): planned once,
    /// not at every batch.
    prepared: Option<(u64, InsertStatements)>,
}

impl Slot {
    fn new(session: Session) -> Slot {
        Slot {
            session,
            prepared: None,
        }
    }

    /// Inserts the rows if the lease is still `fence`'s; the number of rows inserted.
    async fn insert(&mut self, rows: &Rows, fence: Fence) -> Result<u64, Failed> {
        self.session.connected().await?;
        let generation = self.session.generation();
        if self.prepared.as_ref().map(|(made_on, _)| *made_on) != Some(generation) {
            self.prepared = None;
        }
        let client = self.session.connected().await?;
        let work = insert_rows(client, &mut self.prepared, generation, rows, fence);
        match tokio::time::timeout(APPEND_TIMEOUT, work).await {
            Ok(Ok(count)) => Ok(count),
            Ok(Err(error)) => Err(self.session.failed(&error)),
            Err(_) => Err(self.session.timed_out(APPEND_TIMEOUT)),
        }
    }

    /// The rows of the fence's epoch from `from` on, and the shard lease's epoch.
    async fn stored(&mut self, fence: Fence, from: u64) -> Result<(i64, Vec<(u64, u64)>), Failed> {
        let client = self.session.connected().await?;
        let from = from as i64;
        let params: [&(dyn ToSql + Sync); 3] = [&fence.epoch, &from, &fence.shard];
        let rows = match tokio::time::timeout(APPEND_TIMEOUT, client.query(STORED, &params)).await {
            Ok(Ok(rows)) => rows,
            Ok(Err(error)) => return Err(self.session.failed(&error)),
            Err(_) => return Err(self.session.timed_out(APPEND_TIMEOUT)),
        };
        let current = rows.first().map_or(0, |row| row.get::<_, i64>(0));
        let stored = rows
            .iter()
            .filter_map(|row| {
                let first = row.get::<_, Option<i64>>(1)?;
                let last = row.get::<_, Option<i64>>(2)?;
                Some((first as u64, last as u64))
            })
            .collect();
        Ok((current, stored))
    }
}

async fn insert_rows(
    client: &mut Client,
    prepared: &mut Option<(u64, InsertStatements)>,
    generation: u64,
    rows: &Rows,
    Fence { shard, epoch }: Fence,
) -> Result<u64, tokio_postgres::Error> {
    if prepared.is_none() {
        let arrays = [
            Type::INT8_ARRAY,
            Type::INT8_ARRAY,
            Type::INT8,
            Type::BYTEA_ARRAY,
            Type::INT4,
        ];
        let values = [Type::INT8, Type::INT8, Type::INT8, Type::BYTEA, Type::INT4];
        let statements = InsertStatements {
            many: client.prepare_typed(APPEND, &arrays).await?,
            one: client.prepare_typed(APPEND_ONE, &values).await?,
        };
        *prepared = Some((generation, statements));
    }
    let (_, statements) = prepared.as_ref().expect("prepared above");
    match &rows.records[..] {
        [records] => {
            let params: [&(dyn ToSql + Sync); 5] =
                [&rows.first[0], &rows.last[0], &epoch, records, &shard];
            client.execute(&statements.one, &params).await
        }
        _ => {
            let params: [&(dyn ToSql + Sync); 5] =
                [&rows.first, &rows.last, &epoch, &rows.records, &shard];
            client.execute(&statements.many, &params).await
        }
    }
}

/// A write begun: its insert under way, answered already, or nothing left to insert.
enum UnderWay {
    Inserting {
        outcome: mpsc::Receiver<(Slot, Result<u64, Failed>)>,
        firsts: Vec<i64>,
    },
    Answered {
        answer: Result<u64, Failed>,
        firsts: Vec<i64>,
    },
    Nothing,
}

pub struct TableLog {
    /// Runs the inserts: on a thread of its own while the writer's thread gathers the next
    /// write (inserts overlapping), or on the writer's thread (one at a time).
    runtime: tokio::runtime::Runtime,
    /// How many inserts may be under way at once.
    overlap: usize,
    /// Connections with no insert under way.
    idle: Vec<Slot>,
    /// A connection not made yet, to make more like it (one lost with its insert's task).
    like: Session,
    /// The first numbers of the rows of writes not known to be kept. A write tried again
    /// starts a row at each, so that one of them committing late (its answer lost, still
    /// running on the server) collides with it on `first_lsn`, the table's key, rather than
    /// holding records a row of the retry holds too.
    starts: BTreeSet<i64>,
    under_way: VecDeque<UnderWay>,
    fence: Fence,
    /// The sequence number of the first record not yet begun.
    next_lsn: u64,
    /// A failed insert may have been kept, or one beside it: ask what the log holds first.
    unsure: bool,
    deposed: bool,
    batch_wait: Duration,
}

impl TableLog {
    /// The shard's log led under `fence`, whose next record is numbered `next_lsn`, written
    /// through the connection `db` and, for `inserts` under way at once (at most
    /// `MOST_INSERTS`), more like it.
    pub fn new(
        db: Blocking,
        fence: Fence,
        next_lsn: u64,
        inserts: usize,
    ) -> std::io::Result<TableLog> {
        let overlap = inserts.clamp(1, MOST_INSERTS);
        let runtime = if overlap > 1 {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("orderly-log-insert")
                .enable_all()
                .build()?
        } else {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
        };
        let first = db.into_session();
        let like = first.sibling();
        let mut idle: Vec<Slot> = (1..overlap).map(|_| Slot::new(first.sibling())).collect();
        idle.push(Slot::new(first));
        Ok(TableLog {
            runtime,
            overlap,
            idle,
            like,
            starts: BTreeSet::new(),
            under_way: VecDeque::new(),
            fence,
            next_lsn,
            unsure: false,
            deposed: false,
            batch_wait: Duration::ZERO,
        })
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
        Deposed(self.fence.epoch as u64).into()
    }

    /// The records of `records` the log does not hold yet, asking it first if unsure.
    fn fresh<'r>(&mut self, records: &[&'r [u8]]) -> Result<Vec<&'r [u8]>, LogError> {
        if !self.unsure {
            let next = self.next_lsn;
            return Ok(records
                .iter()
                .copied()
                .filter(|record| lsn_of(record) >= next)
                .collect());
        }
        debug_assert!(self.under_way.is_empty(), "asked with nothing under way");
        let Some(from) = records.first().map(|record| lsn_of(record)) else {
            return Ok(Vec::new());
        };
        let mut slot = self.idle.pop().expect("a connection is idle");
        // Only this epoch's batches: another leader's (after a takeover) hold records of the
        // same numbers that are not these.
        let fence = self.fence;
        let asked = self.runtime.block_on(slot.stored(fence, from));
        self.idle.push(slot);
        let (current, stored) = asked.map_err(failed)?;
        if current != fence.epoch {
            return Err(self.deposed());
        }
        self.unsure = false;
        let covered = |lsn: u64| {
            stored
                .iter()
                .any(|(first, last)| (*first..=*last).contains(&lsn))
        };
        // Below `from` every record was acknowledged: nothing there can still commit.
        self.starts
            .retain(|start| *start as u64 >= from && !covered(*start as u64));
        Ok(records
            .iter()
            .copied()
            .filter(|record| !covered(lsn_of(record)))
            .collect())
    }

    /// `LogSink::begin`, whose failure leaves the log unsure.
    fn begin_write(&mut self, records: &[&[u8]], wake: &Wake) -> Result<(), LogError> {
        if self.deposed {
            return Err(Deposed(self.fence.epoch as u64).into());
        }
        let fresh = self.fresh(records)?;
        if let Some(last) = records.last() {
            self.next_lsn = self.next_lsn.max(lsn_of(last) + 1);
        }
        if fresh.is_empty() {
            self.under_way.push_back(UnderWay::Nothing);
            wake();
            return Ok(());
        }
        let Some(mut slot) = self.idle.pop() else {
            return Err(failed("more writes begun than may be under way"));
        };
        let cut = Rows::cut(&fresh, &self.starts);
        let firsts = cut.first.clone();
        self.starts.extend(&firsts);
        let fence = self.fence;
        if self.overlap == 1 {
            // On this thread: no hand-over to another and back for each insert.
            let answer = self.runtime.block_on(slot.insert(&cut, fence));
            self.idle.push(slot);
            self.under_way
                .push_back(UnderWay::Answered { answer, firsts });
            wake();
            return Ok(());
        }
        let (told, outcome) = mpsc::sync_channel(1);
        let wake = wake.clone();
        self.runtime.spawn(async move {
            let answer = slot.insert(&cut, fence).await;
            // Sent before the writer is woken, so that it finds the outcome when it looks.
            let _ = told.send((slot, answer));
            wake();
        });
        self.under_way
            .push_back(UnderWay::Inserting { outcome, firsts });
        Ok(())
    }

    /// What an insert's answer means for the write whose rows start at `firsts`.
    fn judge(&mut self, answer: Result<u64, Failed>, firsts: &[i64]) -> Result<(), LogError> {
        match answer {
            Ok(count) if count == firsts.len() as u64 => {
                for first in firsts {
                    self.starts.remove(first);
                }
                Ok(())
            }
            // The lease's row was not this epoch's: nothing was inserted.
            Ok(_) => Err(self.deposed()),
            // Kept after all, perhaps (its answer lost, or a duplicate of an earlier try that
            // committed late), or another insert beside it was: which records the log holds
            // is asked before the next try.
            Err(failure) => {
                self.unsure = true;
                Err(failed(failure))
            }
        }
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
    /// One write alone: begun, then waited for (a write tried again after a failure).
    fn append(&mut self, records: &[&[u8]]) -> Result<(), LogError> {
        debug_assert!(self.under_way.is_empty(), "appended with nothing under way");
        self.begin(records, &(std::sync::Arc::new(|| {}) as Wake))?;
        self.finish(true).unwrap_or(Ok(()))
    }

    /// An insert is durable once it returns (it commits by itself).
    fn sync(&mut self) -> Result<(), LogError> {
        if self.deposed {
            return Err(Deposed(self.fence.epoch as u64).into());
        }
        Ok(())
    }

    fn overlap(&self) -> usize {
        self.overlap
    }

    fn begin(&mut self, records: &[&[u8]], wake: &Wake) -> Result<(), LogError> {
        let begun = self.begin_write(records, wake);
        if begun.is_err() {
            // Whatever was begun or numbered, the next try asks what the table holds.
            self.unsure = true;
        }
        begun
    }

    fn finish(&mut self, wait: bool) -> Option<Result<(), LogError>> {
        let answer = match self.under_way.front()? {
            UnderWay::Nothing | UnderWay::Answered { .. } => None,
            UnderWay::Inserting { outcome, .. } if wait => Some(outcome.recv()),
            UnderWay::Inserting { outcome, .. } => match outcome.try_recv() {
                Err(mpsc::TryRecvError::Empty) => return None,
                Ok(answer) => Some(Ok(answer)),
                Err(mpsc::TryRecvError::Disconnected) => Some(Err(mpsc::RecvError)),
            },
        };
        let firsts = match self.under_way.pop_front()? {
            UnderWay::Inserting { firsts, .. } => firsts,
            UnderWay::Answered { answer, firsts } => return Some(self.judge(answer, &firsts)),
            UnderWay::Nothing => Vec::new(),
        };
        Some(match answer {
            None => Ok(()),
            Some(Ok((slot, answer))) => {
                self.idle.push(slot);
                self.judge(answer, &firsts)
            }
            // The insert's task ended without an answer (a panic): its connection is gone.
            Some(Err(_)) => {
                self.idle.push(Slot::new(self.like.sibling()));
                self.unsure = true;
                Err(failed("an insert of the log ended without an answer"))
            }
        })
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
    use std::collections::BTreeSet;

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
        let rows = Rows::cut(&slices, &BTreeSet::new());
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

    #[test]
    fn a_write_tried_again_without_records_already_kept_is_cut_where_numbers_are_missing() {
        let records: Vec<Vec<u8>> = [5, 6, 9, 10, 12].map(|lsn| record_of(lsn, 10)).to_vec();
        let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        let rows = Rows::cut(&slices, &BTreeSet::new());
        assert_eq!(rows.first, [5, 9, 12]);
        assert_eq!(rows.last, [6, 10, 12]);
    }

    #[test]
    fn a_write_tried_again_starts_a_row_where_a_row_of_a_write_not_known_kept_started() {
        let records: Vec<Vec<u8>> = (1..=6).map(|lsn| record_of(lsn, 10)).collect();
        let slices: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        let rows = Rows::cut(&slices, &BTreeSet::from([4]));
        assert_eq!(rows.first, [1, 4]);
        assert_eq!(rows.last, [3, 6]);
    }
}
