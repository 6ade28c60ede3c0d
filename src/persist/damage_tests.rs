//! What recovery refuses and what it repairs: torn tails, damage, missing files, and the log's
//! end as a clean stop left it.

use std::path::Path;

use super::tests::{
    batch_starts, close, engine, files, newest_segment, open_dir, send, settle, state,
    written_segments,
};
use super::writer::FsyncMode;
use super::*;
use crate::engine::Timestamp;

#[test]
fn a_torn_final_record_is_dropped_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, data, _) = open_dir(dir.path());
    engine
        .queues
        .create_from("q", &[], &[], Timestamp(1))
        .unwrap();
    send(&engine, "q", "kept", Timestamp(1));
    let before = state(&engine);
    close(data);
    // A batch cut off mid-write, where the next one starts (a sector boundary past the last
    // written byte): its header promises more bytes than follow.
    let segment = newest_segment(dir.path());
    let mut bytes = std::fs::read(&segment).unwrap();
    let whole =
        (bytes.iter().rposition(|b| *b != 0).unwrap() + 1).next_multiple_of(super::batch::ALIGN);
    bytes[whole..whole + 10].copy_from_slice(b"ORDLYSB2\x01\x02");
    std::fs::write(&segment, &bytes).unwrap();

    let (engine, data, report) = open_dir(dir.path());
    let (file, offset, dropped) = report.dropped_tail.expect("reported");
    assert!(segment.ends_with(&file));
    assert_eq!((offset, dropped), (whole, 10));
    assert_eq!(state(&engine), before);
    close(data);
}

/// Closes as a stopping server does: the log closed, then the clean stop noted.
fn close_cleanly(data: DataDir) {
    use super::snapshot::SnapshotStore;
    data.log_writer.close();
    data.log_closed(&data.log_writer);
}

/// A directory stopped cleanly with three messages sent in batches of their own.
fn stopped_cleanly() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let (engine, data, _) = open_dir(dir.path());
    engine
        .queues
        .create_from("q", &[], &[], Timestamp(1))
        .unwrap();
    for body in ["one", "two", "three"] {
        send(&engine, "q", body, Timestamp(1));
        settle(&data);
    }
    close_cleanly(data);
    assert!(dir.path().join("CLEAN").exists());
    dir
}

#[test]
fn after_a_clean_stop_a_short_or_damaged_last_write_is_damage_not_a_torn_tail() {
    let dir = stopped_cleanly();
    let segment = newest_segment(dir.path());
    let bytes = std::fs::read(&segment).unwrap();
    let end = bytes.iter().rposition(|b| *b != 0).unwrap() + 1;
    let last = *batch_starts(&bytes).last().unwrap();
    let cut = &bytes[..end - 37];
    std::fs::write(&segment, cut).unwrap();
    let reason = refusal(dir.path(), Some(&segment));
    assert!(reason.contains("stopped cleanly"), "{reason}");
    let mut flipped = bytes.clone();
    flipped[end - 5] ^= 0x40;
    std::fs::write(&segment, &flipped).unwrap();
    assert_damaged_at(dir.path(), &segment, last);
    // Without the marker (as after a crash) the same cut is a torn tail, dropped.
    std::fs::write(&segment, cut).unwrap();
    std::fs::remove_file(dir.path().join("CLEAN")).unwrap();
    let (_, data, report) = open_dir(dir.path());
    assert_eq!(report.dropped_tail.map(|(_, at, _)| at), Some(last));
    close(data);
}

#[test]
fn after_a_clean_stop_a_log_shorter_than_it_was_is_refused() {
    let dir = stopped_cleanly();
    let (engine, data, _) = open_dir(dir.path());
    assert!(!dir.path().join("CLEAN").exists(), "removed before writing");
    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
    send(&engine, "q", "after the snapshot", Timestamp(2));
    close_cleanly(data);
    for segment in files(dir.path(), ".wal") {
        std::fs::remove_file(segment).unwrap();
    }
    let reason = refusal(dir.path(), None);
    assert!(
        reason.contains("segments are missing, cut short or added") && reason.contains("remove"),
        "{reason}"
    );
    assert!(
        reason.contains("log reaching record ") && !reason.contains("record record"),
        "{reason}"
    );
    // A damaged marker is refused too, naming it.
    std::fs::write(dir.path().join("CLEAN"), b"ORDLYCLN").unwrap();
    let reason = refusal(dir.path(), Some(Path::new("CLEAN")));
    assert!(reason.contains("not a clean-stop marker"), "{reason}");
}

#[test]
fn a_clean_stop_opens_as_it_was_and_a_crash_after_it_is_judged_as_a_crash() {
    let dir = stopped_cleanly();
    let (engine, data, report) = open_dir(dir.path());
    assert!(report.dropped_tail.is_none());
    assert_eq!(engine.queues.get("q").unwrap().lock().len(), 3);
    send(&engine, "q", "four", Timestamp(2));
    // A crash: no marker, so a torn tail after it is a crash's.
    close(data);
    assert!(!dir.path().join("CLEAN").exists());
    let (engine, data, _) = open_dir(dir.path());
    assert_eq!(engine.queues.get("q").unwrap().lock().len(), 4);
    close(data);
}

/// Opening `dir` stops with damage in `segment` at `offset`.
fn assert_damaged_at(dir: &Path, segment: &Path, at: usize) {
    let mut engine = self::engine();
    match open(dir, FsyncMode::Always, &mut engine) {
        Err(RecoveryError::Corruption { file, offset, .. }) => {
            assert!(segment.ends_with(&file));
            assert_eq!(offset, at);
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("damaged log opened"),
    }
}

#[test]
fn a_power_cut_that_kept_only_later_sectors_of_the_last_write_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, data, _) = open_dir(dir.path());
    engine
        .queues
        .create_from("q", &[], &[], Timestamp(1))
        .unwrap();
    send(&engine, "q", "kept", Timestamp(1));
    settle(&data);
    let before = state(&engine);
    // Spans several sectors.
    send(&engine, "q", &"x".repeat(3000), Timestamp(2));
    close(data);
    let segment = newest_segment(dir.path());
    let whole = std::fs::read(&segment).unwrap();
    let starts = batch_starts(&whole);
    let (previous, last) = (starts[starts.len() - 2], starts[starts.len() - 1]);
    // The last write's first sector never reached the disk; its later ones did.
    let mut bytes = whole.clone();
    bytes[last..last + super::batch::ALIGN].fill(0);
    std::fs::write(&segment, &bytes).unwrap();
    let (engine, data, report) = open_dir(dir.path());
    let (file, offset, _) = report.dropped_tail.expect("reported");
    assert!(segment.ends_with(&file));
    assert_eq!(offset, last);
    assert_eq!(state(&engine), before);
    close(data);
    // The same hole in the write before it, which the last one proves was synced, is damage.
    let mut bytes = whole;
    bytes[previous..previous + super::batch::ALIGN].fill(0);
    std::fs::write(&segment, &bytes).unwrap();
    assert_damaged_at(dir.path(), &segment, previous);
}

#[test]
fn damage_before_the_end_stops_startup_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, data, _) = open_dir(dir.path());
    engine
        .queues
        .create_from("q", &[], &[], Timestamp(1))
        .unwrap();
    send(&engine, "q", "one", Timestamp(1));
    send(&engine, "q", "two", Timestamp(1));
    close(data);
    let segment = newest_segment(dir.path());
    // A later segment: the first one was complete and synced, so damage in it is damage.
    let (engine, data, _) = open_dir(dir.path());
    send(&engine, "q", "three", Timestamp(1));
    close(data);
    assert_ne!(newest_segment(dir.path()), segment);
    let mut bytes = std::fs::read(&segment).unwrap();
    // Inside the first record's payload (after the batch and record headers).
    bytes[super::batch::HEADER_BYTES + super::record::HEADER_BYTES + 4] ^= 0xff;
    std::fs::write(&segment, &bytes).unwrap();
    assert_damaged_at(dir.path(), &segment, 0);
}

/// The reason startup gave for refusing `dir`, checking that it names `file` (if any).
fn refusal(dir: &Path, file: Option<&Path>) -> String {
    match open(dir, FsyncMode::Always, &mut self::engine()) {
        Err(RecoveryError::Corruption {
            file: named,
            reason,
            ..
        }) => {
            if let Some(file) = file {
                assert!(file.ends_with(&named), "{named} named, not {file:?}");
            }
            reason
        }
        Err(other) => other.to_string(),
        Ok(_) => panic!("opened"),
    }
}

#[test]
fn a_snapshot_the_log_needs_gone_stops_startup() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, data, _) = open_dir(dir.path());
    let t = Timestamp(5);
    engine.queues.create_from("q", &[], &[], t).unwrap();
    for i in 0..20 {
        send(&engine, "q", &format!("{i}"), t);
    }
    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
    send(&engine, "q", "after", t);
    close(data);
    let snapshots = files(dir.path(), ".snap");
    assert_eq!(snapshots.len(), 1);
    std::fs::remove_file(&snapshots[0]).unwrap();
    let segment = newest_segment(dir.path());
    let reason = refusal(dir.path(), Some(&segment));
    assert!(
        reason.contains("the snapshot or the first segments holding the records before it"),
        "{reason}"
    );
}

#[test]
fn a_log_segment_gone_from_the_middle_stops_startup() {
    let dir = tempfile::tempdir().unwrap();
    let t = Timestamp(5);
    // Each start writes a segment of its own.
    for round in 0..3 {
        let (engine, data, _) = open_dir(dir.path());
        if round == 0 {
            engine.queues.create_from("q", &[], &[], t).unwrap();
        }
        send(&engine, "q", &format!("round {round}"), t);
        close(data);
    }
    let segments = written_segments(dir.path());
    assert!(segments.len() >= 3, "{segments:?}");
    std::fs::remove_file(&segments[1]).unwrap();
    let reason = refusal(dir.path(), Some(&segments[2]));
    assert!(reason.contains("out of sequence"), "{reason}");
}

/// A directory that held a queue "q", closed as after a crash (no clean-stop marker).
fn with_one_queue() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let (engine, data, _) = open_dir(dir.path());
    engine
        .queues
        .create_from("q", &[], &[], Timestamp(5))
        .unwrap();
    close(data);
    dir
}

#[test]
fn a_key_with_neither_log_nor_snapshot_stops_startup() {
    let dir = with_one_queue();
    for segment in files(dir.path(), ".wal") {
        std::fs::remove_file(segment).unwrap();
    }
    let reason = refusal(dir.path(), None);
    assert!(
        reason.contains("holds a key (KEY) but no log segment and no snapshot"),
        "{reason}"
    );
    // A fresh directory is the one empty start.
    let fresh = tempfile::tempdir().unwrap();
    let (engine, data, report) = open_dir(fresh.path());
    assert_eq!(report.replayed, 0);
    assert!(engine.queues.get("q").is_err());
    close(data);
}

#[test]
fn a_first_start_cut_off_before_its_first_record_was_synced_starts_afresh() {
    let dir = with_one_queue();
    // As if the key had never been renamed into place: nothing of that start was served.
    std::fs::rename(dir.path().join("KEY"), dir.path().join("KEY.new")).unwrap();
    let (engine, data, report) = open_dir(dir.path());
    assert_eq!(report.replayed + report.skipped, 0);
    assert!(engine.queues.get("q").is_err());
    assert!(dir.path().join("KEY").exists() && !dir.path().join("KEY.new").exists());
    close(data);
    let (_, data, _) = open_dir(dir.path());
    close(data);
}

#[test]
fn the_log_key_is_made_once_and_a_damaged_or_missing_one_stops_startup() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("KEY");
    let (engine, data, _) = open_dir(dir.path());
    let made = std::fs::read(&key).unwrap();
    engine
        .queues
        .create_from("q", &[], &[], Timestamp(1))
        .unwrap();
    send(&engine, "q", "one", Timestamp(1));
    let before = state(&engine);
    close(data);
    let (engine, data, report) = open_dir(dir.path());
    assert!(report.dropped_tail.is_none());
    assert_eq!(state(&engine), before, "read with the same key");
    assert_eq!(std::fs::read(&key).unwrap(), made, "not made anew");
    close(data);
    let refused = |dir: &Path| match open(dir, FsyncMode::Always, &mut self::engine()) {
        Err(RecoveryError::Corruption { file, .. }) => file == "KEY",
        _ => false,
    };
    let mut damaged = made.clone();
    damaged[10] ^= 1;
    std::fs::write(&key, &damaged).unwrap();
    assert!(refused(dir.path()), "a damaged key");
    std::fs::remove_file(&key).unwrap();
    assert!(
        refused(dir.path()),
        "a missing key, with segments sealed by it"
    );
    // A directory opened once holds a sealed batch (its receipt key); only a fresh one gets
    // a new log key.
    let opened = tempfile::tempdir().unwrap();
    close(open_dir(opened.path()).1);
    std::fs::remove_file(opened.path().join("KEY")).unwrap();
    assert!(refused(opened.path()), "a key gone after the first start");
    let fresh = tempfile::tempdir().unwrap();
    close(open_dir(fresh.path()).1);
    assert_ne!(std::fs::read(fresh.path().join("KEY")).unwrap(), made);
}

#[test]
fn a_damaged_snapshot_stops_startup() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, data, _) = open_dir(dir.path());
    engine
        .queues
        .create_from("q", &[], &[], Timestamp(1))
        .unwrap();
    send(&engine, "q", "one", Timestamp(1));
    let path = snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
    close(data);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let mut engine = self::engine();
    let error = open(dir.path(), FsyncMode::Always, &mut engine)
        .err()
        .expect("refused");
    assert!(
        matches!(&error, RecoveryError::Corruption { file, .. } if file.ends_with(".snap")),
        "{error}"
    );
}
