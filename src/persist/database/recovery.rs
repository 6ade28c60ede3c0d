//! Recovery from the database: the snapshot, then every batch after it in order, with the same
//! rules as recovery from a data directory (`persist::covered`). The batches must follow one
//! another with no gap, from the snapshot (or the very first record, without one) on, with one
//! exception: a leader has two inserts under way at once (`table_log`), and one that stops
//! while the first failed and the second committed leaves a gap with the second's rows after
//! it, none of them acknowledged. Such a torn tail (one gap, then the rows of one insert, which
//! follow one another, of an epoch no older than a row before the gap, whose leader recorded
//! in `log_epochs` that it overlaps inserts) is where the log ends: a standby
//! waits there for the gap to be filled, and a node that comes to lead cuts it (`cut_tail`).
//! Any other missing batch is damage, refused with the batch it should have followed.

use tokio_postgres::Client;

use super::connection::{Blocking, Work};
use super::lease::Fence;
use crate::engine::Engine;
use crate::persist::{format, record, RecoveryError, RecoveryReport};

/// Batches read at a time.
const PAGE: i64 = 64;

/// What recovery left for the log writer.
pub struct Recovered {
    pub report: RecoveryReport,
    /// `Engine::stored_bytes` as the snapshot left it.
    pub live_at_snapshot: u64,
    /// Bytes of log kept since the snapshot.
    pub log_bytes: u64,
}

type Batch = (i64, i64, Vec<u8>);

/// Recovery under way: the snapshot loaded into an engine, and the batches applied after it so
/// far. A standby keeps one to follow the log as it is written, so that coming to lead reads
/// only what was written since.
pub struct Follower {
    /// The shard whose log this is.
    shard: i32,
    loaded: crate::persist::snapshot::Loaded,
    report: RecoveryReport,
    live_at_snapshot: u64,
    log_bytes: u64,
    /// The sequence number the next batch must start at; the first may start earlier, inside
    /// what the snapshot covers.
    expected: Option<u64>,
    /// The first sequence number of the last batch applied.
    after: i64,
}

/// Loads the shard's snapshot and applies every batch of its log after it into `engine`
/// (which must be fresh).
pub fn recover<W: Default>(
    db: &mut Blocking,
    shard: i32,
    engine: &Engine<W>,
) -> Result<Recovered, RecoveryError> {
    let mut follower = Follower::start(db, shard, engine)?;
    follower.catch_up(db, engine)?;
    Ok(follower.finish())
}

impl Follower {
    /// Loads the snapshot the shard's log starts from into `engine` (which must be fresh).
    pub fn start<W: Default>(
        db: &mut Blocking,
        shard: i32,
        engine: &Engine<W>,
    ) -> Result<Self, RecoveryError> {
        let loaded = super::snapshots::load(db, shard, engine)?;
        Ok(Follower {
            shard,
            report: RecoveryReport::after(&loaded),
            live_at_snapshot: engine.queues.stored_bytes(),
            loaded,
            log_bytes: 0,
            expected: None,
            after: -1,
        })
    }

    /// The sequence number of the next record to apply.
    pub fn next_lsn(&self) -> u64 {
        self.expected.unwrap_or(self.loaded.first_lsn)
    }

    /// What recovery left for the log writer.
    pub fn finish(mut self) -> Recovered {
        self.report.next_lsn = self.report.next_lsn.max(self.next_lsn());
        Recovered {
            report: self.report,
            live_at_snapshot: self.live_at_snapshot,
            log_bytes: self.log_bytes,
        }
    }

    /// Applies every batch written since the last one applied, in order; returns how many
    /// records it applied. A batch missing before one found is damage, or, once this follower
    /// has applied batches, a snapshot having dropped them meanwhile (`fell_behind`).
    pub fn catch_up<W: Default>(
        &mut self,
        db: &mut Blocking,
        engine: &Engine<W>,
    ) -> Result<u64, RecoveryError> {
        let before = self.report.replayed + self.report.skipped;
        loop {
            let (after, shard) = (self.after, self.shard);
            let page: Vec<Batch> = run(db, move |client: &mut Client| -> Work<'_, _> {
                Box::pin(async move {
                    let rows = client
                        .query(
                            "SELECT first_lsn, last_lsn, records FROM log_batches \
                             WHERE shard = $3 AND first_lsn > $1 ORDER BY first_lsn LIMIT $2",
                            &[&after, &PAGE, &shard],
                        )
                        .await?;
                    Ok(rows
                        .iter()
                        .map(|row| (row.get(0), row.get(1), row.get(2)))
                        .collect())
                })
            })?;
            if page.is_empty() {
                // No batch after the gap yet (the leader kept a snapshot, then wrote nothing
                // more or died): only the snapshot tells that records were dropped unread.
                if let Some(starts_at) = self.log_starts_past_next(db)? {
                    let next = self.next_lsn();
                    return Err(RecoveryError::LeftBehind { next, starts_at });
                }
                return Ok(self.report.replayed + self.report.skipped - before);
            }
            for batch in page {
                if batch.0 as u64 > self.next_lsn() {
                    return self
                        .gap_before(batch.0, db)
                        .map(|()| self.report.replayed + self.report.skipped - before);
                }
                self.apply(batch, engine)?;
            }
        }
    }

    /// Records are missing before the batch starting at `first`: a snapshot dropped them
    /// after this follower loaded its own (`LeftBehind`), or they are a torn tail's gap,
    /// where the log ends for now (`Ok`), or the log is damaged.
    fn gap_before(&self, first: i64, db: &mut Blocking) -> Result<(), RecoveryError> {
        let next = self.next_lsn();
        if let Some(starts_at) = self.log_starts_past_next(db)? {
            return Err(RecoveryError::LeftBehind { next, starts_at });
        }
        if torn_tail_from(db, self.shard, first)? {
            return Ok(());
        }
        let reason = match self.expected {
            None => format!(
                "the log starts at record {first}, but records from {next} on are missing \
                 (no snapshot covers them)"
            ),
            Some(_) => format!("records {next} to {} are missing before it", first - 1),
        };
        Err(RecoveryError::Corruption {
            file: batch_row(self.shard, first),
            offset: 0,
            reason,
        })
    }

    /// Whether a batch found missing was dropped by a snapshot kept after this follower
    /// loaded its own: the log is whole, and only a fresh engine from that snapshot catches up.
    pub fn fell_behind(&self, db: &mut Blocking) -> bool {
        matches!(self.log_starts_past_next(db), Ok(Some(_)))
    }

    /// Where the log starts (the snapshot it starts from) if that is past the next record this
    /// follower would apply.
    fn log_starts_past_next(&self, db: &mut Blocking) -> Result<Option<u64>, RecoveryError> {
        let shard = self.shard;
        let kept = run(db, move |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                let row = client
                    .query_opt(
                        "SELECT s.first_lsn FROM log_shards l \
                         JOIN log_snapshots s ON s.id = l.snapshot WHERE l.shard = $1",
                        &[&shard],
                    )
                    .await?;
                Ok(row.map(|row| row.get::<_, i64>(0)))
            })
        })?;
        Ok(kept
            .map(|first_lsn| first_lsn as u64)
            .filter(|&first_lsn| first_lsn > self.next_lsn()))
    }

    fn apply<W: Default>(
        &mut self,
        (first, last, records): Batch,
        engine: &Engine<W>,
    ) -> Result<(), RecoveryError> {
        let loaded = &self.loaded;
        self.after = first;
        let name = batch_row(self.shard, first);
        let damaged = |offset: usize, reason: String| RecoveryError::Corruption {
            file: name.clone(),
            offset,
            reason,
        };
        let (first, last) = (first as u64, last as u64);
        match self.expected {
            None if first > loaded.first_lsn => {
                return Err(damaged(
                    0,
                    format!(
                        "the log starts at record {first}, but records from {} on are \
                     missing (no snapshot covers them)",
                        loaded.first_lsn
                    ),
                ))
            }
            Some(next) if first != next => {
                return Err(damaged(
                    0,
                    format!("the batch starts at record {first}, where record {next} was due"),
                ))
            }
            _ => {}
        }
        let decoded = record::decode(&records);
        if let record::Ending::Corrupt { offset, reason } = decoded.ending {
            return Err(damaged(offset, reason.into()));
        }
        if decoded.ending != record::Ending::Clean {
            return Err(damaged(records.len(), "batch cut short".into()));
        }
        if decoded.records.len() as u64 != last.saturating_sub(first) + 1 || last < first {
            return Err(damaged(
                0,
                format!(
                    "{} records where records {first} to {last} belong",
                    decoded.records.len()
                ),
            ));
        }
        let mut offset = 0;
        for (index, bytes) in decoded.records.iter().enumerate() {
            let (lsn, change) = format::decode_record(bytes).map_err(|error| match error {
                format::FormatError::Newer { .. } => RecoveryError::NewerFormat(error.to_string()),
                format::FormatError::Damaged(reason) => damaged(offset, reason),
            })?;
            if lsn != first + index as u64 {
                return Err(damaged(offset, format!("record {lsn} out of sequence")));
            }
            offset += bytes.len() + record::HEADER_BYTES;
            if crate::persist::covered(loaded, lsn, &change) {
                self.report.skipped += 1;
            } else {
                engine.replay_change(change);
                self.report.replayed += 1;
            }
        }
        self.log_bytes += records.len() as u64;
        self.expected = Some(last + 1);
        Ok(())
    }
}

/// Runs `work` within recovery's time bound; a failure is the database not answering.
fn run<T>(
    db: &mut Blocking,
    work: impl for<'c> FnOnce(&'c mut Client) -> Work<'c, T>,
) -> Result<T, RecoveryError> {
    db.run(super::connection::STARTUP_TIMEOUT, work)
        .map_err(|failed| RecoveryError::Io(std::io::Error::other(failed.cause)))
}

/// Whether the batches from `first` on are a torn tail: the rows of one insert (one
/// transaction: one `xmin`), following one another, of an epoch no older than a batch before
/// them, whose leader overlapped its inserts (`log_epochs`).
fn torn_tail_from(db: &mut Blocking, shard: i32, first: i64) -> Result<bool, RecoveryError> {
    run(db, move |client: &mut Client| -> Work<'_, _> {
        Box::pin(async move {
            let row = client
                .query_one(
                    "SELECT count(DISTINCT b.xmin::text), min(b.epoch), min(b.first_lsn), \
                     max(b.last_lsn), sum(b.last_lsn - b.first_lsn + 1)::bigint, \
                     (SELECT max(epoch) FROM log_batches WHERE shard = $2 AND first_lsn < $1), \
                     (SELECT e.inserts FROM log_epochs e \
                      WHERE e.shard = $2 AND e.epoch = min(b.epoch)) \
                     FROM log_batches b WHERE b.shard = $2 AND b.first_lsn >= $1",
                    &[&first, &shard],
                )
                .await?;
            let inserts: i64 = row.get(0);
            let epoch: Option<i64> = row.get(1);
            let (low, high, held): (Option<i64>, Option<i64>, Option<i64>) =
                (row.get(2), row.get(3), row.get(4));
            let before: Option<i64> = row.get(5);
            let overlapping = row.get::<_, Option<i32>>(6).is_some_and(|n| n > 1);
            let one_run = matches!((low, high, held), (Some(low), Some(high), Some(held))
                    if held == high - low + 1);
            Ok(overlapping && inserts == 1 && one_run && before <= epoch)
        })
    })
}

/// Removes a torn tail of the fence's shard from `next_lsn` on, if the lease is still the
/// fence's; returns what went (the rows' first and last numbers and their bytes), for the
/// recovery report.
pub fn cut_tail(
    db: &mut Blocking,
    next_lsn: u64,
    Fence { shard, epoch }: Fence,
) -> Result<Option<(String, usize, usize)>, RecoveryError> {
    let from = next_lsn as i64;
    let cut: (i64, Option<i64>, Option<i64>, i64) =
        run(db, move |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                let row = client
                    .query_one(
                        "WITH cut AS (DELETE FROM log_batches b USING log_shards l \
                             WHERE l.shard = $3 AND l.epoch = $2 \
                             AND b.shard = l.shard AND b.first_lsn >= $1 \
                             RETURNING b.first_lsn, b.last_lsn, octet_length(b.records) AS bytes) \
                             SELECT count(*), min(first_lsn), max(last_lsn), \
                             coalesce(sum(bytes), 0)::bigint FROM cut",
                        &[&from, &epoch, &shard],
                    )
                    .await?;
                Ok((row.get(0), row.get(1), row.get(2), row.get(3)))
            })
        })?;
    Ok(match cut {
        (0, ..) => None,
        (rows, Some(first), Some(last), bytes) => Some((
            format!(
                "log_batches rows of shard {shard} from first_lsn {first} to {last} ({rows} \
                 rows), after a gap from {next_lsn}"
            ),
            0,
            bytes as usize,
        )),
        _ => None,
    })
}

/// Records that this epoch's leader may have `inserts` under way at once (when more than one),
/// under its fence, so that recovery may take a gap of this epoch for a torn tail; forgets the
/// epochs no batch is left of.
pub fn note_epoch(
    db: &mut Blocking,
    Fence { shard, epoch }: Fence,
    inserts: usize,
) -> Result<(), RecoveryError> {
    let inserts = inserts as i32;
    run(db, move |client: &mut Client| -> Work<'_, _> {
        Box::pin(async move {
            client
                .execute(
                    "DELETE FROM log_epochs WHERE shard = $2 AND epoch < \
                     (SELECT coalesce(min(epoch), $1) FROM log_batches WHERE shard = $2)",
                    &[&epoch, &shard],
                )
                .await?;
            if inserts > 1 {
                client
                    .execute(
                        "INSERT INTO log_epochs (shard, epoch, inserts) \
                         SELECT $3, $1, $2 FROM log_shards WHERE shard = $3 AND epoch = $1 \
                         ON CONFLICT (shard, epoch) DO NOTHING",
                        &[&epoch, &inserts, &shard],
                    )
                    .await?;
            }
            Ok(())
        })
    })
}

/// How damage names a row of the log: by its key.
fn batch_row(shard: i32, first_lsn: i64) -> String {
    format!("log_batches row (shard {shard}, first_lsn {first_lsn})")
}
