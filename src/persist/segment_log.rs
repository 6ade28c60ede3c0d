//! The segmented write-ahead log: numbered segment files of sync batches of framed records
//! (`batch`). Appends go to the newest segment until it passes the size limit, then a new one
//! starts. Opening reads every segment in order: a torn tail of the newest segment that holds
//! anything is cut off and reported; damage anywhere else stops with the file and offset.
//! Segments of zeros only (made ready, never written) are removed. After opening, writing
//! starts in a fresh segment. Segments of earlier versions (records without batches) are
//! still read.
//!
//! A failed append is undone (the file is cut back to its last good length) and reported; if
//! even that fails, the log refuses every later write rather than risk a hole in the middle.

use super::batch;
use super::log_error::LogError;
use super::record::{self, Ending};
use super::storage::Storage;

/// Segments roll over past this size.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;

/// A torn final record that was dropped: (file, offset, bytes).
pub type DroppedTail = (String, usize, usize);

/// What opening found, collected (tests; recovery replays through `replay`).
#[cfg(test)]
#[derive(Debug, Default)]
pub struct Recovered {
    pub records: Vec<Vec<u8>>,
    pub dropped_tail: Option<DroppedTail>,
}

pub struct SegmentLog<S: Storage> {
    storage: S,
    current: String,
    current_number: u64,
    /// Bytes of the current segment known to be whole records.
    good_len: u64,
    next_segment: u64,
    segment_bytes: u64,
    /// Bytes of the current segment known to be synced: each batch records it, so recovery
    /// can tell a hole that was never synced from damage.
    synced_len: u64,
    poisoned: bool,
    /// `prepare` was called for `next_segment`.
    next_prepared: bool,
    /// `reserve` was called for `next_segment`.
    next_reserved: bool,
    /// The data directory's key, which seals batch headers (`batch::Seal`).
    key: u64,
}

/// The key the log tests seal with.
#[cfg(test)]
pub const TEST_KEY: u64 = 0x0de7_0f7e_5700;

fn segment_name(number: u64) -> String {
    format!("{number:020}.wal")
}

fn segment_number(name: &str) -> Option<u64> {
    name.trim_end_matches(".wal").parse().ok()
}

impl<S: Storage> SegmentLog<S> {
    /// Reads every record and prepares to append to a new segment.
    #[cfg(test)]
    pub fn open(storage: S, segment_bytes: u64) -> Result<(SegmentLog<S>, Recovered), LogError> {
        let mut records = Vec::new();
        let (log, dropped_tail) =
            Self::replay(storage, segment_bytes, TEST_KEY, false, |_, _, record| {
                records.push(record.to_vec());
                Ok::<(), LogError>(())
            })?;
        Ok((
            log,
            Recovered {
                records,
                dropped_tail,
            },
        ))
    }

    /// Hands every record to `each` in order, with the segment's name and the record's offset
    /// in it, straight from the segment it was read from (a restart replays millions; copying
    /// each first cost a fifth of the time), and prepares to append to a new segment. Returns the torn final record it dropped, if any. `key`
    /// seals the batches (see `batch`): the data directory's.
    pub fn replay<E: From<LogError>>(
        mut storage: S,
        segment_bytes: u64,
        key: u64,
        torn_tail_is_damage: bool,
        mut each: impl FnMut(&str, usize, &[u8]) -> Result<(), E>,
    ) -> Result<(SegmentLog<S>, Option<DroppedTail>), E> {
        let names = storage.list().map_err(LogError::from)?;
        // A torn tail is only allowed in the newest segment that holds anything.
        let mut torn: Option<DroppedTail> = None;
        let mut buffer = Vec::new();
        for name in &names {
            storage
                .read_into(name, &mut buffer)
                .map_err(LogError::from)?;
            let bytes = &buffer[..];
            if bytes.iter().all(|b| *b == 0) {
                storage.remove(name).map_err(LogError::from)?;
                continue;
            }
            if let Some((file, offset, _)) = torn.take() {
                return Err(LogError::Corruption {
                    file,
                    offset,
                    reason: "incomplete record before the newest segment",
                }
                .into());
            }
            let seal = batch::Seal {
                key,
                segment: segment_number(name).unwrap_or(0),
            };
            let decoded = if batch::is_batched(bytes, seal) {
                batch::decode(bytes, seal)
            } else {
                record::decode(bytes)
            };
            for record in &decoded.records {
                // Records are slices of `bytes`: where one starts is its distance from there.
                let offset = record.as_ptr() as usize - bytes.as_ptr() as usize;
                each(name, offset, record)?;
            }
            match decoded.ending {
                Ending::Clean => {}
                Ending::TornTail { offset, bytes } => torn = Some((name.clone(), offset, bytes)),
                Ending::Corrupt { offset, reason } => {
                    return Err(LogError::Corruption {
                        file: name.clone(),
                        offset,
                        reason,
                    }
                    .into())
                }
            }
        }
        if let (Some((file, offset, _)), true) = (&torn, torn_tail_is_damage) {
            return Err(LogError::Corruption {
                file: file.clone(),
                offset: *offset,
                reason: "the last write is cut short or damaged, though the server had stopped \
                         cleanly with it synced",
            }
            .into());
        }
        if let Some((name, offset, _)) = &torn {
            // Cut off, so that once later segments exist it does not read as damage.
            storage
                .truncate(name, *offset as u64)
                .map_err(LogError::from)?;
            storage.sync(name).map_err(LogError::from)?;
        }
        let next = names
            .last()
            .and_then(|n| segment_number(n))
            .map_or(1, |n| n + 1);
        let log = SegmentLog {
            storage,
            current: segment_name(next),
            current_number: next,
            good_len: 0,
            next_segment: next + 1,
            segment_bytes,
            synced_len: 0,
            poisoned: false,
            next_prepared: false,
            next_reserved: false,
            key,
        };
        Ok((log, torn))
    }

    /// Once the current segment is a quarter full (so small logs never pay for it), lets
    /// storage get the next one ready while this one fills.
    fn prepare_next(&mut self) {
        if !self.next_prepared && self.good_len >= self.segment_bytes / 4 {
            self.next_prepared = true;
            self.storage
                .prepare(&segment_name(self.next_segment), self.segment_bytes);
        }
    }

    /// Appends records as one batch (one write). Not durable until `sync`.
    pub fn append(&mut self, payloads: &[&[u8]]) -> Result<(), LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned);
        }
        if self.good_len >= self.segment_bytes {
            self.rotate()?;
        }
        let body_len: usize = payloads
            .iter()
            .map(|p| p.len() + record::HEADER_BYTES)
            .sum();
        // The padding up to the batch's boundary overwrites zeros with zeros.
        let padding =
            (self.good_len.next_multiple_of(batch::ALIGN as u64) - self.good_len) as usize;
        let mut bytes = Vec::with_capacity(padding + batch::HEADER_BYTES + body_len);
        bytes.resize(padding, 0);
        let seal = batch::Seal {
            key: self.key,
            segment: self.current_number,
        };
        let at = self.good_len as usize + padding;
        batch::encode_header(seal, at, body_len, self.synced_len, &mut bytes);
        for payload in payloads {
            record::encode(payload, &mut bytes);
        }
        if let Err(error) = self.storage.append(&self.current, &bytes) {
            if self.storage.truncate(&self.current, self.good_len).is_err() {
                self.poisoned = true;
            }
            return Err(error.into());
        }
        self.good_len += bytes.len() as u64;
        if !self.next_reserved {
            self.next_reserved = true;
            self.storage.reserve(&segment_name(self.next_segment));
        }
        self.prepare_next();
        Ok(())
    }

    /// A failed fsync or undo left the log untrustworthy: it takes no more writes.
    pub fn poisoned(&self) -> bool {
        self.poisoned
    }

    /// Makes everything appended so far durable (fsync).
    pub fn sync(&mut self) -> Result<(), LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned);
        }
        if self.good_len == 0 {
            return Ok(());
        }
        // After a failed fsync the page cache may have dropped the data: nothing written
        // since the last good sync can be trusted, so the log stops taking writes.
        self.storage.sync(&self.current).map_err(|e| {
            self.poisoned = true;
            LogError::Io(e)
        })?;
        self.synced_len = self.good_len;
        Ok(())
    }

    /// Makes the current segment durable and starts a new one (unless the current one is still
    /// empty); returns the number of the segment the next append goes to.
    pub fn rotate(&mut self) -> Result<u64, LogError> {
        if self.good_len > 0 {
            // The old segment is never synced again, so it must be whole now.
            self.sync()?;
            self.current_number = self.next_segment;
            self.current = segment_name(self.current_number);
            self.next_segment += 1;
            self.good_len = 0;
            self.synced_len = 0;
            self.next_prepared = false;
            // Turned now, while whoever asked for the turn (a snapshot) waits, so that the
            // descriptor the old segment frees goes to the next one's reservation.
            self.storage.turn_to(&self.current);
            self.storage.reserve(&segment_name(self.next_segment));
            self.next_reserved = true;
        }
        Ok(self.current_number)
    }

    /// Deletes every segment numbered below `number` (their records are in a snapshot).
    pub fn remove_before(&mut self, number: u64) -> Result<(), LogError> {
        for name in self.storage.list()? {
            let older = segment_number(&name).is_some_and(|n| n < number);
            if older {
                self.storage.remove(&name)?;
            }
        }
        Ok(())
    }

    pub fn storage(&self) -> &S {
        &self.storage
    }
}

#[cfg(test)]
mod tests;
