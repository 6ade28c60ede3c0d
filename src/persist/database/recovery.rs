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

pub fn recover<W: Default>(
    db: &mut Blocking,
    engine: &Engine<W>,
) -> Result<Recovered, RecoveryError> {
    let loaded = super::snapshots::load(db, engine)?;
    let live_at_snapshot = engine.stored_bytes();
    let mut report = RecoveryReport::after(&loaded);
    let mut log_bytes = 0;
    // The sequence number the next batch must start at; the first may start earlier, inside
    // what the snapshot covers.
    let mut expected: Option<u64> = None;
    let mut after = -1i64;
    loop {
        let page: Vec<Batch> = db
            .run(
                super::STARTUP_TIMEOUT,
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
        let Some(last) = page.last() else {
            break;
        };
        after = last.0;
        for (first, last, records) in page {
            let name = format!("log_batches row {first}");
            let damaged = |offset: usize, reason: String| RecoveryError::Corruption {
                file: name.clone(),
                offset,
                reason,
            };
            let (first, last) = (first as u64, last as u64);
            match expected {
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
                    format::FormatError::Newer { .. } => {
                        RecoveryError::NewerFormat(error.to_string())
                    }
                    format::FormatError::Damaged(reason) => damaged(offset, reason),
                })?;
                if lsn != first + index as u64 {
                    return Err(damaged(offset, format!("record {lsn} out of sequence")));
                }
                offset += bytes.len() + record::HEADER_BYTES;
                if crate::persist::covered(&loaded, lsn, &change) {
                    report.skipped += 1;
                } else {
                    engine.replay_change(change);
                    report.replayed += 1;
                }
            }
            log_bytes += records.len() as u64;
            expected = Some(last + 1);
        }
    }
    report.next_lsn = report.next_lsn.max(expected.unwrap_or(0));
    Ok(Recovered {
        report,
        live_at_snapshot,
        log_bytes,
    })
}
