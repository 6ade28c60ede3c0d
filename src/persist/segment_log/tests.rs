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
    let seal = batch::Seal { key: 1, segment: 1 };
    assert!(!batch::is_batched(&legacy, seal));
    // Batches with unsealed headers.
    let mut unsealed = Vec::new();
    let mut body = Vec::new();
    record::encode(b"old three", &mut body);
    batch::encode_unsealed_header(body.len(), 0, &mut unsealed);
    unsealed.extend_from_slice(&body);
    unsealed.resize(4 * batch::ALIGN, 0);
    assert!(batch::is_batched(&unsealed, seal));
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
        SegmentLog::replay(storage, 64, key, false, |_, _, _| Ok::<(), LogError>(()))
            .map(|(_, torn)| torn)
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
    let (mut log, recovered) = SegmentLog::open(DirStorage::new(&dir).unwrap(), 1 << 20).unwrap();
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
    // Real time, bounded: a helper thread writes the zeros, and says when it is done only
    // when asked.
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
    // Real time, bounded: the zero-fill is a helper thread's file writes.
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

#[test]
fn a_turn_opens_the_reserved_segment_at_once_and_reserves_the_one_after() {
    use crate::persist::storage::DirStorage;
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = SegmentLog::open(DirStorage::new(dir.path()).unwrap(), 64 * 1024).unwrap();
    let filling = |n: u64| dir.path().join(segment_name(n) + ".filling");
    log.append(&[b"first"]).unwrap();
    log.sync().unwrap();
    assert!(filling(2).exists(), "the next segment is held open ahead");
    let turned_to = log.rotate().unwrap();
    assert_eq!(turned_to, 2);
    // Named and opened by the turn itself, before anything is appended to it.
    assert!(dir.path().join(segment_name(2)).exists());
    assert!(!filling(2).exists());
    assert!(filling(3).exists(), "the one after is reserved in turn");
    log.append(&[b"second"]).unwrap();
    log.sync().unwrap();
    drop(log);
    let (_, recovered) = SegmentLog::open(DirStorage::new(dir.path()).unwrap(), 64 * 1024).unwrap();
    assert_eq!(
        recovered.records,
        vec![b"first".to_vec(), b"second".to_vec()]
    );
    assert!(
        !filling(3).exists(),
        "an unused reservation is removed at start"
    );
}

/// A tmpfs of a given size, for what a nearly full disk does; unmounted when dropped.
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    /// None, said on stderr, unless this runs as root (CI does).
    fn mount(bytes: u64, test: &str) -> Option<SmallDisk> {
        let uid = std::process::Command::new("id").arg("-u").output().unwrap();
        if uid.stdout != b"0\n" {
            eprintln!("SKIPPED: {test} needs root to mount a tmpfs");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "mounting a tmpfs");
        Some(SmallDisk(dir))
    }

    fn path(&self) -> &std::path::Path {
        self.0.path()
    }

    /// Takes all the room left but `spare` bytes.
    fn fill_but(&self, spare: u64) {
        use std::io::Write;
        let path = self.path().join("ballast");
        let mut ballast = std::fs::File::create(&path).unwrap();
        while ballast.write_all(&[1u8; 4096]).is_ok() {}
        let len = std::fs::metadata(&path).unwrap().len();
        ballast.set_len(len - spare).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.path())
            .status();
    }
}

#[test]
fn an_append_takes_the_room_left_when_a_whole_chunk_of_zeros_does_not_fit() {
    use crate::persist::storage::DirStorage;
    let test = "an_append_takes_the_room_left…";
    let Some(disk) = SmallDisk::mount(2 << 20, test) else {
        return;
    };
    let dir = disk.path().join("data");
    let open = || SegmentLog::open(DirStorage::new(&dir).unwrap(), DEFAULT_SEGMENT_BYTES).unwrap();
    let (mut log, _) = open();
    // The first append zero-fills a whole chunk ahead; the second still fits in it.
    let records = [vec![1u8; 100], vec![2u8; 1_000_000], vec![3u8; 100_000]];
    for record in &records[..2] {
        log.append(&[record]).unwrap();
        log.sync().unwrap();
    }
    // Less room than a chunk, more than the third record needs.
    disk.fill_but(256 << 10);
    log.append(&[&records[2]]).unwrap();
    log.sync().unwrap();
    drop(log);
    assert_eq!(open().1.records, records);
}

#[test]
fn a_next_segment_that_does_not_fit_gives_back_the_room_it_took() {
    use crate::persist::storage::DirStorage;
    let test = "a_next_segment_that_does_not_fit…";
    let Some(disk) = SmallDisk::mount(4 << 20, test) else {
        return;
    };
    let dir = disk.path().join("data");
    // Segments larger than the disk: the helper's zero-fill of the next one cannot finish.
    let segment_bytes = 8 << 20;
    let open = || SegmentLog::open(DirStorage::new(&dir).unwrap(), segment_bytes).unwrap();
    let (mut log, _) = open();
    let record = |n: u8| vec![n; 256 << 10];
    // A quarter of a segment written: the helper starts on the next one.
    for n in 0..9 {
        log.append(&[&record(n)]).unwrap();
        log.sync().unwrap();
    }
    // Real time, bounded: the zero-fill is a helper thread's, failing on the full disk.
    let done = (0..500).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        log.storage().prepared_done()
    });
    assert!(done, "the helper finished");
    let next = dir.join(segment_name(2) + ".filling");
    assert_eq!(std::fs::metadata(&next).unwrap().len(), 0);
    // The room the helper had taken is the log's again.
    for n in 9..12 {
        log.append(&[&record(n)]).unwrap();
        log.sync().unwrap();
    }
    drop(log);
    assert_eq!(open().1.records, (0..12).map(record).collect::<Vec<_>>());
}
