//! Recovery from the database: the snapshot, then every batch after it in order, with the same
//! rules as recovery from a data directory (`persist::covered`). The batches must follow one
//! another with no gap, from the snapshot (or the very first record, without one) on: a missing
//! batch is damage, refused with the batch it should have followed.

use tokio_postgres::Client;

use super::connection::{Blocking, Work};
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

/// Loads the snapshot and applies every batch after it into `engine` (which must be fresh).
pub fn recover<W: Default>(
    db: &mut Blocking,
    engine: &Engine<W>,
) -> Result<Recovered, RecoveryError> {
    let mut follower = Follower::start(db, engine)?;
    follower.catch_up(db, engine)?;
    Ok(follower.finish())
}

impl Follower {
    /// Loads the snapshot the log starts from into `engine` (which must be fresh).
    pub fn start<W: Default>(db: &mut Blocking, engine: &Engine<W>) -> Result<Self, RecoveryError> {
        let loaded = super::snapshots::load(db, engine)?;
        Ok(Follower {
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
            let after = self.after;
            let page: Vec<Batch> = db
                .run(
                    super::connection::STARTUP_TIMEOUT,
                    move |client: &mut Client| -> Work<'_, _> {
                        Box::pin(async move {
                            let rows = client
                                .query(
                                    "SELECT first_lsn, last_lsn, records FROM log_batches \
                                     WHERE first_lsn > $1 ORDER BY first_lsn LIMIT $2",
                                    &[&after, &PAGE],
                                )
                                .await?;
                            Ok(rows
                                .iter()
                                .map(|row| (row.get(0), row.get(1), row.get(2)))
                                .collect())
                        })
                    },
                )
                .map_err(|failed| RecoveryError::Io(std::io::Error::other(failed.cause)))?;
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
                self.apply(batch, engine)?;
            }
        }
    }

    /// Whether a batch found missing was dropped by a snapshot kept after this follower
    /// loaded its own: the log is whole, and only a fresh engine from that snapshot catches up.
    pub fn fell_behind(&self, db: &mut Blocking) -> bool {
        matches!(self.log_starts_past_next(db), Ok(Some(_)))
    }

    /// Where the log starts (the snapshot it starts from) if that is past the next record this
    /// follower would apply.
    fn log_starts_past_next(&self, db: &mut Blocking) -> Result<Option<u64>, RecoveryError> {
        let kept = db
            .run(
                super::connection::STARTUP_TIMEOUT,
                move |client: &mut Client| -> Work<'_, _> {
                    Box::pin(async move {
                        let row = client
                            .query_opt(
                                "SELECT s.first_lsn FROM log_home h \
                                 JOIN log_snapshots s ON s.id = h.snapshot",
                                &[],
                            )
                            .await?;
                        Ok(row.map(|row| row.get::<_, i64>(0)))
                    })
                },
            )
            .map_err(|failed| RecoveryError::Io(std::io::Error::other(failed.cause)))?;
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
        let name = format!("log_batches row {first}");
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
                    format!(
                        "records {next} to {} are missing before it",
                        first.max(next) - 1
                    ),
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
