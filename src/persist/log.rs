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

use thiserror::Error;

use super::batch;
use super::record::{self, Ending};
use super::storage::Storage;

/// Segments roll over past this size.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, Error)]
pub enum LogError {
    #[error("log I/O failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("log damaged in {file} at offset {offset}: {reason}")]
    Corruption {
        file: String,
        offset: usize,
        reason: &'static str,
    },
    #[error("the log refuses writes after an earlier write could not be undone")]
    Poisoned,
}

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
        let (log, dropped_tail) = Self::replay(storage, segment_bytes, TEST_KEY, |record| {
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

    /// Hands every record to `each` in order, straight from the segment it was read from (a
    /// restart replays millions; copying each first cost a fifth of the time), and prepares
    /// to append to a new segment. Returns the torn final record it dropped, if any. `key`
    /// seals the batches (see `batch`): the data directory's.
    pub fn replay<E: From<LogError>>(
        mut storage: S,
        segment_bytes: u64,
        key: u64,
        mut each: impl FnMut(&[u8]) -> Result<(), E>,
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
            let decoded = if batch::is_batched(bytes) {
                let seal = batch::Seal {
                    key,
                    segment: segment_number(name).unwrap_or(0),
                };
                batch::decode(bytes, seal)
            } else {
                record::decode(bytes)
            };
            for record in &decoded.records {
                each(record)?;
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
mod tests {
    use super::*;
    use crate::persist::storage::MemStorage;

    fn open(storage: MemStorage) -> (SegmentLog<MemStorage>, Recovered) {
        SegmentLog::open(storage, 64).unwrap()
    }

    fn reopen(log: SegmentLog<MemStorage>) -> Recovered {
        open(log.storage).1
    }

    #[test]
    fn records_come_back_in_order_across_segments() {
        let (mut log, recovered) = open(MemStorage::default());
        assert!(recovered.records.is_empty());
        for i in 0..20 {
            log.append(&[format!("record {i}").as_bytes()]).unwrap();
        }
        log.sync().unwrap();
        assert!(log.storage().files.len() > 1, "rolled over");
        let recovered = reopen(log);
        let expected: Vec<Vec<u8>> = (0..20)
            .map(|i| format!("record {i}").into_bytes())
            .collect();
        assert_eq!(recovered.records, expected);
        assert!(recovered.dropped_tail.is_none());
    }

    #[test]
    fn a_torn_tail_is_dropped_and_reported_and_writing_resumes_in_a_new_segment() {
        let (mut log, _) = open(MemStorage::default());
        log.append(&[b"kept"]).unwrap();
        // The next batch starts on the next boundary; a crash left the start of a record.
        let file = log.storage.files.values_mut().next().unwrap();
        file.resize(batch::ALIGN, 0);
        file.extend_from_slice(&[9, 0, 0, 0, 1, 2]);
        let (mut log, recovered) = open(log.storage);
        assert_eq!(recovered.records, vec![b"kept".to_vec()]);
        assert_eq!(
            recovered.dropped_tail,
            Some((segment_name(1), batch::ALIGN, 6))
        );
        log.append(&[b"after"]).unwrap();
        let recovered = reopen(log);
        assert_eq!(recovered.records, vec![b"kept".to_vec(), b"after".to_vec()]);
        assert!(
            recovered.dropped_tail.is_none(),
            "the torn bytes were cut off"
        );
    }

    /// A power cut that lost the first sector of the second of three batches, each 600 bytes
    /// of payload (so each spans two sectors), with a sync after each batch or only after
    /// the first.
    fn lose_second_batch_start(sync_each: bool) -> Result<Recovered, LogError> {
        let (mut log, _) = open(MemStorage::default());
        log.segment_bytes = 1 << 20;
        let payload = [5u8; 600];
        let mut second = 0;
        for i in 0..3 {
            if i == 1 {
                second = log.good_len as usize;
            }
            log.append(&[&payload]).unwrap();
            if sync_each || i == 0 {
                log.sync().unwrap();
            }
        }
        let file = log.storage.files.get_mut(&segment_name(1)).unwrap();
        file[second..second + batch::ALIGN].fill(0);
        SegmentLog::open(log.storage, 1 << 20).map(|(_, recovered)| recovered)
    }

    #[test]
    fn each_batch_records_how_far_the_segment_was_synced() {
        // Synced after each batch: the third proves the second was durable, so it is damage.
        assert!(matches!(
            lose_second_batch_start(true),
            Err(LogError::Corruption { offset: 1024, .. })
        ));
        // Not synced since the first (interval or never): the second and third were never
        // durable, a torn tail.
        let recovered = lose_second_batch_start(false).unwrap();
        assert_eq!(recovered.records, vec![vec![5u8; 600]]);
        assert!(matches!(recovered.dropped_tail, Some((_, 1024, _))));
    }

    #[test]
    fn a_segment_needed_before_its_helper_is_done_starts_afresh_without_waiting() {
        use crate::persist::storage::{DirStorage, ZERO_CHUNK_BYTES};
        let dir = tempfile::tempdir().unwrap();
        let mut storage = DirStorage::new(dir.path()).unwrap();
        let (release, hold) = std::sync::mpsc::channel();
        storage.hold_helper = Some(hold);
        let name = segment_name(2);
        storage.prepare(&name, 4 * ZERO_CHUNK_BYTES);
        // Needed while its helper has not even started.
        storage.append(&name, b"first").unwrap();
        storage.sync(&name).unwrap();
        let path = dir.path().join(&name);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            ZERO_CHUNK_BYTES,
            "grown in a chunk of its own, not the helper's file"
        );
        release.send(()).unwrap();
        storage.finish_abandoned();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![name.clone()], "the helper's file is gone");
        // A file a helper was filling when a process stopped is deleted at the next start.
        std::fs::write(dir.path().join(format!("{name}.filling")), [0u8; 512]).unwrap();
        drop(DirStorage::new(dir.path()).unwrap());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(path.exists());
    }

    #[test]
    fn segments_of_earlier_versions_are_still_read() {
        // Records one after another, without batches.
        let mut legacy = Vec::new();
        for payload in [&b"old one"[..], b"old two"] {
            record::encode(payload, &mut legacy);
        }
        assert!(!batch::is_batched(&legacy));
        // Batches with unsealed headers.
        let mut unsealed = Vec::new();
        let mut body = Vec::new();
        record::encode(b"old three", &mut body);
        batch::encode_unsealed_header(body.len(), 0, &mut unsealed);
        unsealed.extend_from_slice(&body);
        unsealed.resize(4 * batch::ALIGN, 0);
        assert!(batch::is_batched(&unsealed));
        let mut storage = MemStorage::default();
        storage.files.insert(segment_name(1), legacy);
        storage.files.insert(segment_name(2), unsealed);
        let (mut log, recovered) = open(storage);
        let old: Vec<Vec<u8>> = ["old one", "old two", "old three"]
            .map(|r| r.as_bytes().to_vec())
            .into();
        assert_eq!(recovered.records, old);
        log.append(&[b"new"]).unwrap();
        let recovered = reopen(log);
        assert_eq!(recovered.records[..3], old);
        assert_eq!(recovered.records[3..], [b"new".to_vec()]);
    }

    #[test]
    fn a_batch_read_with_another_key_or_in_another_segment_fails_its_checksum() {
        let (mut log, _) = open(MemStorage::default());
        log.append(&[b"one"]).unwrap();
        log.append(&[b"two"]).unwrap();
        log.sync().unwrap();
        let storage = log.storage;
        let read = |storage: MemStorage, key| {
            SegmentLog::replay(storage, 64, key, |_| Ok::<(), LogError>(())).map(|(_, torn)| torn)
        };
        assert!(matches!(read(storage.clone(), TEST_KEY), Ok(None)));
        // The newest segment, so its unreadable start is taken for a torn tail.
        assert!(matches!(read(storage.clone(), TEST_KEY + 1), Ok(Some(_))));
        let mut moved = MemStorage::default();
        let bytes = storage.files.values().next().unwrap().clone();
        moved.files.insert(segment_name(5), bytes);
        assert!(matches!(read(moved, TEST_KEY), Ok(Some((_, 0, _)))));
    }

    #[test]
    fn damage_before_the_end_stops_recovery_with_file_and_offset() {
        let (mut log, _) = open(MemStorage::default());
        log.append(&[b"first", b"second"]).unwrap();
        log.sync().unwrap();
        // Written after the first batch was synced: that one cannot have been torn.
        log.append(&[b"third"]).unwrap();
        let first_payload = batch::HEADER_BYTES + record::HEADER_BYTES;
        log.storage.files.get_mut(&segment_name(1)).unwrap()[first_payload] ^= 0xff;
        match SegmentLog::open(log.storage, 64) {
            Err(LogError::Corruption { file, offset, .. }) => {
                assert_eq!((file.as_str(), offset), ("00000000000000000001.wal", 0));
            }
            other => panic!("{:?}", other.map(|(_, r)| r)),
        }
    }

    #[test]
    fn a_failed_write_is_undone_and_a_failed_fsync_poisons() {
        let (mut log, _) = open(MemStorage::default());
        log.append(&[b"one"]).unwrap();
        log.storage.fail_append_after = Some(5);
        assert!(matches!(log.append(&[b"two"]), Err(LogError::Io(_))));
        log.append(&[b"three"]).unwrap();
        log.storage.fail_sync = true;
        assert!(log.sync().is_err());
        assert!(matches!(log.append(&[b"four"]), Err(LogError::Poisoned)));
        let recovered = reopen(log);
        assert_eq!(recovered.records, vec![b"one".to_vec(), b"three".to_vec()]);
        assert!(recovered.dropped_tail.is_none());
    }

    #[test]
    fn a_write_that_cannot_be_undone_poisons_the_log() {
        let (mut log, _) = open(MemStorage::default());
        log.storage.fail_append_after = Some(3);
        log.storage.fail_truncate = true;
        assert!(log.append(&[b"partial"]).is_err());
        assert!(matches!(log.append(&[b"next"]), Err(LogError::Poisoned)));
    }

    #[test]
    fn real_files_survive_reopen_and_a_cut_tail() {
        use crate::persist::storage::DirStorage;
        let dir = std::env::temp_dir().join(format!("orderly-log-{}", uuid::Uuid::new_v4()));
        let (mut log, _) = SegmentLog::open(DirStorage::new(&dir).unwrap(), 1 << 20).unwrap();
        log.append(&[b"alpha", b"beta"]).unwrap();
        log.append(&[b"gamma"]).unwrap();
        log.sync().unwrap();
        drop(log);
        // The records were written over zeros made ready ahead of them.
        let file = dir.join(segment_name(1));
        let len = std::fs::metadata(&file).unwrap().len();
        assert_eq!(len, crate::persist::storage::ZERO_CHUNK_BYTES);
        // A crash mid-write: the second batch (at 512) loses its final 2 bytes.
        let mut bytes = std::fs::read(&file).unwrap();
        let end = 512 + batch::HEADER_BYTES + record::HEADER_BYTES + 5;
        assert_eq!(&bytes[end - 5..end], b"gamma");
        bytes[end - 2..end].fill(0);
        std::fs::write(&file, &bytes).unwrap();
        let (mut log, recovered) =
            SegmentLog::open(DirStorage::new(&dir).unwrap(), 1 << 20).unwrap();
        assert_eq!(recovered.records, vec![b"alpha".to_vec(), b"beta".to_vec()]);
        assert_eq!(
            recovered.dropped_tail,
            Some((segment_name(1), 512, end - 2 - 512))
        );
        log.append(&[b"delta"]).unwrap();
        log.sync().unwrap();
        drop(log);
        let (_, recovered) = SegmentLog::open(DirStorage::new(&dir).unwrap(), 1 << 20).unwrap();
        assert_eq!(
            recovered.records,
            vec![b"alpha".to_vec(), b"beta".to_vec(), b"delta".to_vec()]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn appends_to_a_made_ready_segment_read_back_exactly_with_zeros_after() {
        use crate::persist::storage::DirStorage;
        let dir = tempfile::tempdir().unwrap();
        let mut storage = DirStorage::new(dir.path()).unwrap();
        let name = segment_name(1);
        let bytes = 256 * 1024;
        storage.prepare(&name, bytes);
        let done = (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            storage.prepared_done()
        });
        assert!(done, "the segment was made ready");
        // Appends are padded with zeros to whole pages: sizes that end anywhere in a page,
        // within one page, across pages and exactly on a page's end.
        let mut expected = Vec::new();
        for (i, size) in [100usize, 5000, 3092, 4096, 1, 9000, 511]
            .into_iter()
            .enumerate()
        {
            let chunk = vec![i as u8 + 1; size];
            storage.append(&name, &chunk).unwrap();
            expected.extend_from_slice(&chunk);
        }
        storage.sync(&name).unwrap();
        let file = storage.read(&name).unwrap();
        assert_eq!(
            file.len() as u64,
            bytes,
            "written within the made-ready space"
        );
        assert_eq!(&file[..expected.len()], &expected[..]);
        assert!(file[expected.len()..].iter().all(|b| *b == 0));
    }

    #[test]
    fn the_next_segment_is_made_ready_in_zeros_and_removed_if_never_written() {
        use crate::persist::storage::DirStorage;
        let dir = tempfile::tempdir().unwrap();
        let segment_bytes = 64 * 1024;
        let (mut log, _) =
            SegmentLog::open(DirStorage::new(dir.path()).unwrap(), segment_bytes).unwrap();
        let payload = vec![7u8; 1000];
        // A quarter of the segment: the next one is being zero-filled.
        for _ in 0..20 {
            log.append(&[&payload]).unwrap();
            log.sync().unwrap();
        }
        // Filled under another name, so that it reads as a segment only once it is used.
        let next = dir.path().join(segment_name(2) + ".filling");
        let ready = (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            std::fs::metadata(&next).is_ok_and(|m| m.len() == segment_bytes)
        });
        assert!(ready, "the next segment was made ready");
        drop(log);
        let (mut log, recovered) =
            SegmentLog::open(DirStorage::new(dir.path()).unwrap(), segment_bytes).unwrap();
        assert_eq!(recovered.records.len(), 20);
        assert!(recovered.dropped_tail.is_none());
        assert!(
            !next.exists(),
            "a segment made ready but not used is removed"
        );
        // Writing resumes in a fresh segment, and fills the made-ready one after it.
        for _ in 0..80 {
            log.append(&[&payload]).unwrap();
        }
        log.sync().unwrap();
        drop(log);
        let (_, recovered) =
            SegmentLog::open(DirStorage::new(dir.path()).unwrap(), segment_bytes).unwrap();
        assert_eq!(recovered.records.len(), 100);
        assert!(recovered.records.iter().all(|r| r == &payload));
    }
}
