//! Rows of `log_batches`: a write cut into rows that fit their pages, the statements that
//! insert them under a lease's fence (one shard's, or several shards' in one statement), and
//! the connection they are prepared and run on. What the rows mean to the log, and how its
//! writes are retried, is `table_log`'s.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Statement};

use super::connection::{Failed, Session};
use super::lease::Fence;
use crate::persist::format;
use crate::persist::record;

/// Longest an insert of a batch may take before it counts as failed (and is tried again).
const APPEND_TIMEOUT: Duration = Duration::from_secs(5);

/// The most framed record bytes in a row, so that it stays in its page (the table's
/// `toast_tuple_target` is 8160 bytes, row header and numbers included). A record larger than
/// this has a row of its own.
const ROW_BYTES: usize = 8_000;

/// A write's rows, inserted only while the shard's lease still has the log's epoch, and then
/// locked so that no node takes it until they are committed. The lease's row is locked once,
/// by a condition evaluated before any row is made. Locked in a join, it was looked up and
/// locked again for each row, and each row's bytes were copied once more (a join's row lock
/// keeps the other side's whole row, to check it again should the lease change meanwhile): a
/// profile of batched sends found the executor's scans at 9.3 % of the database's CPU, and at
/// 2.5 % once locked so.
const APPEND: &str = "INSERT INTO log_batches (shard, first_lsn, last_lsn, epoch, records) \
     SELECT $5, b.first_lsn, b.last_lsn, $3, b.records \
     FROM unnest($1::bigint[], $2::bigint[], $4::bytea[]) AS b(first_lsn, last_lsn, records) \
     WHERE EXISTS (SELECT FROM log_shards WHERE shard = $5 AND epoch = $3 FOR SHARE)";

/// `APPEND` for a write of one row (most writes under a light load), with the same fence: its
/// values as they are, since unpacking arrays costs the database about a tenth of the insert.
const APPEND_ONE: &str = "INSERT INTO log_batches (shard, first_lsn, last_lsn, epoch, records) \
     SELECT $5::integer, $1::bigint, $2::bigint, $3::bigint, $4::bytea FROM log_shards \
     WHERE log_shards.shard = $5 AND log_shards.epoch = $3 FOR SHARE OF log_shards";

/// `APPEND` for the writes of several shards (a node's shared commit, `shared_commit`), each
/// row with its own shard and epoch and each shard fenced by its own lease. The leases' rows
/// are locked in shard order, as the keeper's renewal locks them, so the two never wait for
/// each other crosswise; the rows answered tell which shards' epochs held.
const APPEND_SHARDS: &str = "WITH fence AS MATERIALIZED (SELECT shard, epoch FROM log_shards \
     WHERE shard = ANY($1::integer[]) ORDER BY shard FOR SHARE) \
     INSERT INTO log_batches (shard, first_lsn, last_lsn, epoch, records) \
     SELECT b.shard, b.first_lsn, b.last_lsn, b.epoch, b.records \
     FROM unnest($2::integer[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bytea[]) \
     AS b(shard, first_lsn, last_lsn, epoch, records) \
     JOIN fence ON fence.shard = b.shard AND fence.epoch = b.epoch \
     RETURNING shard, epoch";

/// Which of this epoch's rows the log holds from a sequence number on, and whose the lease is.
const STORED: &str = "SELECT l.epoch, b.first_lsn, b.last_lsn FROM log_shards l \
     LEFT JOIN log_batches b ON b.shard = l.shard AND b.epoch = $1 AND b.first_lsn >= $2 \
     WHERE l.shard = $3";

/// A write cut into rows: each row's first and last sequence numbers and framed records.
#[derive(Default)]
pub(super) struct Rows {
    pub(super) first: Vec<i64>,
    last: Vec<i64>,
    records: Vec<Vec<u8>>,
}

impl Rows {
    /// Whether an insert's `answer` says every one of these rows was kept (a table log judges
    /// the same answer a success).
    pub(super) fn all_kept(&self, answer: &Result<u64, Failed>) -> bool {
        matches!(answer, Ok(count) if *count == self.first.len() as u64)
    }

    /// The bytes of the rows' records.
    pub(super) fn bytes(&self) -> usize {
        self.records.iter().map(Vec::len).sum()
    }

    /// Records in number order, cut into rows of at most `ROW_BYTES`, wherever a number is
    /// missing (records the log holds already, left out of a write tried again), and at each
    /// of `starts`.
    pub(super) fn cut(records: &[&[u8]], starts: &BTreeSet<i64>) -> Rows {
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

/// The forms of the insert, prepared on one connection.
struct InsertStatements {
    many: Statement,
    one: Statement,
    shards: Statement,
}

/// A write of one shard's log, to be inserted under its fence.
pub(super) struct Write {
    pub fence: Fence,
    pub rows: Rows,
}

/// A connection and the inserts prepared on it.
pub(super) struct Slot {
    session: Session,
    /// Prepared on the connection of this generation (`Session::generation`): planned once,
    /// not at every batch.
    prepared: Option<(u64, InsertStatements)>,
}

impl Slot {
    pub(super) fn new(session: Session) -> Slot {
        Slot {
            session,
            prepared: None,
        }
    }

    /// Another connection like this one's, not made yet.
    pub(super) fn sibling(&self) -> Session {
        self.session.sibling()
    }

    /// Inserts the rows if the lease is still `fence`'s; the number of rows inserted.
    pub(super) async fn insert(&mut self, rows: &Rows, fence: Fence) -> Result<u64, Failed> {
        let generation = self.prepare().await?;
        let client = self.session.connected().await?;
        let work = insert_rows(client, &mut self.prepared, generation, rows, fence);
        match tokio::time::timeout(APPEND_TIMEOUT, work).await {
            Ok(Ok(count)) => Ok(count),
            Ok(Err(error)) => Err(self.session.failed(&error)),
            Err(_) => Err(self.session.timed_out(APPEND_TIMEOUT)),
        }
    }

    /// Connects, and forgets statements prepared on an earlier connection; the generation
    /// connected.
    async fn prepare(&mut self) -> Result<u64, Failed> {
        self.session.connected().await?;
        let generation = self.session.generation();
        if self.prepared.as_ref().map(|(made_on, _)| *made_on) != Some(generation) {
            self.prepared = None;
        }
        Ok(generation)
    }

    /// Inserts the writes of several shards in one statement, and so one commit, each shard's
    /// rows only while its lease is still its write's epoch: for each write, in order, the
    /// number of its rows inserted (all or none), or why it failed.
    pub(super) async fn insert_all(&mut self, writes: &[Write]) -> Vec<Result<u64, Failed>> {
        if let [write] = writes {
            return vec![self.insert(&write.rows, write.fence).await];
        }
        let kept = match self.insert_shards(writes).await {
            Ok(kept) => kept,
            // The database answered with an error (one shard's late commit holding a key):
            // nothing of the statement was kept, and each write alone fails only the shard at
            // fault. A connection that could not be made is not asked again write by write.
            Err(failed) if !failed.unknown_outcome && failed.code.is_some() => {
                let mut outcomes = Vec::with_capacity(writes.len());
                for write in writes {
                    outcomes.push(self.insert(&write.rows, write.fence).await);
                }
                return outcomes;
            }
            Err(failed) => return vec![Err(failed); writes.len()],
        };
        // A shard's rows go in whole or not at all (its lease's row is read once), so a
        // write was kept if any row of its shard and epoch was.
        writes
            .iter()
            .map(|write| {
                let fence = (write.fence.shard, write.fence.epoch);
                Ok(if kept.contains(&fence) {
                    write.rows.first.len() as u64
                } else {
                    0
                })
            })
            .collect()
    }

    /// `APPEND_SHARDS` of `writes`: the shards and epochs of which it inserted rows.
    async fn insert_shards(&mut self, writes: &[Write]) -> Result<BTreeSet<(i32, i64)>, Failed> {
        let generation = self.prepare().await?;
        let client = self.session.connected().await?;
        let work = insert_shards(client, &mut self.prepared, generation, writes);
        match tokio::time::timeout(APPEND_TIMEOUT, work).await {
            Ok(Ok(kept)) => Ok(kept),
            Ok(Err(error)) => Err(self.session.failed(&error)),
            Err(_) => Err(self.session.timed_out(APPEND_TIMEOUT)),
        }
    }

    /// The rows of the fence's epoch from `from` on, and the shard lease's epoch.
    pub(super) async fn stored(
        &mut self,
        fence: Fence,
        from: u64,
    ) -> Result<(i64, Vec<(u64, u64)>), Failed> {
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

/// The insert's forms, prepared on `client` unless they are already.
async fn statements<'p>(
    client: &mut Client,
    prepared: &'p mut Option<(u64, InsertStatements)>,
    generation: u64,
) -> Result<&'p InsertStatements, tokio_postgres::Error> {
    if prepared.is_none() {
        let arrays = [
            Type::INT8_ARRAY,
            Type::INT8_ARRAY,
            Type::INT8,
            Type::BYTEA_ARRAY,
            Type::INT4,
        ];
        let values = [Type::INT8, Type::INT8, Type::INT8, Type::BYTEA, Type::INT4];
        let shards = [
            Type::INT4_ARRAY,
            Type::INT4_ARRAY,
            Type::INT8_ARRAY,
            Type::INT8_ARRAY,
            Type::INT8_ARRAY,
            Type::BYTEA_ARRAY,
        ];
        let statements = InsertStatements {
            many: client.prepare_typed(APPEND, &arrays).await?,
            one: client.prepare_typed(APPEND_ONE, &values).await?,
            shards: client.prepare_typed(APPEND_SHARDS, &shards).await?,
        };
        *prepared = Some((generation, statements));
    }
    Ok(&prepared.as_ref().expect("prepared above").1)
}

/// The shards and epochs of which `APPEND_SHARDS` inserted rows.
async fn insert_shards(
    client: &mut Client,
    prepared: &mut Option<(u64, InsertStatements)>,
    generation: u64,
    writes: &[Write],
) -> Result<BTreeSet<(i32, i64)>, tokio_postgres::Error> {
    let statements = statements(client, prepared, generation).await?;
    let mut locked: Vec<i32> = writes.iter().map(|write| write.fence.shard).collect();
    locked.sort_unstable();
    locked.dedup();
    let rows: usize = writes.iter().map(|write| write.rows.first.len()).sum();
    let (mut shard, mut epoch) = (Vec::with_capacity(rows), Vec::with_capacity(rows));
    let (mut first, mut last) = (Vec::with_capacity(rows), Vec::with_capacity(rows));
    let mut records: Vec<&[u8]> = Vec::with_capacity(rows);
    for write in writes {
        for at in 0..write.rows.first.len() {
            shard.push(write.fence.shard);
            epoch.push(write.fence.epoch);
            first.push(write.rows.first[at]);
            last.push(write.rows.last[at]);
            records.push(&write.rows.records[at]);
        }
    }
    let params: [&(dyn ToSql + Sync); 6] = [&locked, &shard, &first, &last, &epoch, &records];
    let answered = client.query(&statements.shards, &params).await?;
    Ok(answered
        .iter()
        .map(|row| (row.get::<_, i32>(0), row.get::<_, i64>(1)))
        .collect())
}

async fn insert_rows(
    client: &mut Client,
    prepared: &mut Option<(u64, InsertStatements)>,
    generation: u64,
    rows: &Rows,
    Fence { shard, epoch }: Fence,
) -> Result<u64, tokio_postgres::Error> {
    let statements = statements(client, prepared, generation).await?;
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

/// A record's sequence number (its first 8 bytes, `format::record_header`).
pub(super) fn lsn_of(record: &[u8]) -> u64 {
    let word = u64::from_le_bytes(record[..8].try_into().expect("records start with 8 bytes"));
    word & format::MAX_LSN
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
