//! Reopen, damage and fault-injection tests over real directories and injected I/O failures.

use std::path::Path;
use std::sync::Arc;

use super::segment_log::SegmentLog;
use super::storage::MemStorage;
use super::writer::{FsyncMode, LogWriter};
use super::*;
use crate::engine::queue::{ReceiveRequest, SendRequest};
use crate::engine::{ChangeLog, Timestamp};

pub(super) type TestEngine = Engine<()>;

pub(super) fn engine() -> TestEngine {
    Engine::new("000000000000", "us-east-1")
}

pub(super) fn open_dir(dir: &Path) -> (TestEngine, DataDir, RecoveryReport) {
    let mut engine = engine();
    let (data, report) = open(dir, FsyncMode::Always, &mut engine).expect("recovers");
    (engine, data, report)
}

/// Closes like a graceful shutdown: everything queued is written and synced.
pub(super) fn close(data: DataDir) {
    data.log_writer.close();
}

pub(super) fn state(engine: &TestEngine) -> Vec<String> {
    engine.state_for_tests()
}

/// Shuts down, reopens the directory and checks the snapshot plus log rebuilt the same state.
fn restart_from_snapshot(dir: &Path, engine: TestEngine, data: DataDir) -> (TestEngine, DataDir) {
    let before = state(&engine);
    close(data);
    drop(engine);
    let (engine, data, report) = open_dir(dir);
    assert!(report.snapshot.is_some());
    assert_eq!(state(&engine), before);
    (engine, data)
}

pub(crate) fn fifo() -> Vec<(String, String)> {
    vec![
        ("FifoQueue".into(), "true".into()),
        ("ContentBasedDeduplication".into(), "true".into()),
    ]
}

pub(crate) fn send<W: Default>(engine: &Engine<W>, queue: &str, body: &str, now: Timestamp) {
    let entry = engine.queues.get(queue).unwrap();
    let mut q = entry.lock();
    q.tick(now);
    q.send(
        SendRequest {
            body: body.into(),
            group_id: Some(format!("g{}", body.len() % 3).into()),
            sender_id: "t".into(),
            ..Default::default()
        },
        now,
    )
    .unwrap();
}

fn receive(engine: &TestEngine, queue: &str, now: Timestamp) -> Vec<String> {
    let entry = engine.queues.get(queue).unwrap();
    let req = ReceiveRequest {
        max_messages: Some(3),
        visibility_timeout: Some(30),
        attempt_id: Some("a".into()),
    };
    let (outcome, _) = engine.receive(&entry, &req, now).unwrap();
    outcome
        .received
        .into_iter()
        .map(|d| d.receipt_handle)
        .collect()
}

#[test]
fn reopening_restores_the_state_across_a_snapshot_and_later_changes() {
    let dir = tempfile::tempdir().unwrap();
    let t = Timestamp(1_000_000);
    let (engine, data, _) = open_dir(dir.path());
    engine
        .queues
        .create_from("a.fifo", &fifo(), &[], t)
        .unwrap();
    for i in 0..20 {
        send(&engine, "a.fifo", &"x".repeat(i + 1), t);
    }
    let handles = receive(&engine, "a.fifo", t);
    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
    // After the snapshot: more sends, a delete, a new queue, a deleted queue.
    for i in 20..25 {
        send(&engine, "a.fifo", &"y".repeat(i), t.plus_millis(1));
    }
    engine
        .queues
        .get("a.fifo")
        .unwrap()
        .lock()
        .delete(&handles[0], t)
        .unwrap();
    engine.queues.create_from("b", &[], &[], t).unwrap();
    engine.queues.create_from("c", &[], &[], t).unwrap();
    engine.queues.delete("c", t).unwrap();
    let before = state(&engine);
    close(data);
    drop(engine);

    let (engine, data, report) = open_dir(dir.path());
    assert!(
        report.snapshot.is_some(),
        "recovery started from the snapshot"
    );
    assert!(report.skipped == 0 || report.replayed > 0);
    assert_eq!(state(&engine), before);
    // A handle from before the restart still deletes its message.
    engine
        .queues
        .get("a.fifo")
        .unwrap()
        .lock()
        .delete(&handles[1], t.plus_millis(2))
        .unwrap();
    let after_delete = state(&engine);
    close(data);
    drop(engine);
    let (engine, data, _) = open_dir(dir.path());
    assert_eq!(state(&engine), after_delete, "the delete was logged too");
    close(data);
}

#[test]
fn a_group_keeps_its_order_across_a_snapshot() {
    // Enough messages that the queue's hash map holds them out of sequence order: the group
    // comes back in order whatever order the snapshot copied them in.
    let dir = tempfile::tempdir().unwrap();
    let t = Timestamp(1_000);
    let (engine, data, _) = open_dir(dir.path());
    engine
        .queues
        .create_from("order.fifo", &fifo(), &[], t)
        .unwrap();
    let sent: Vec<String> = (0..500).map(|i| format!("m{i}")).collect();
    for body in &sent {
        let entry = engine.queues.get("order.fifo").unwrap();
        let mut q = entry.lock();
        let request = SendRequest {
            body: body.as_str().into(),
            group_id: Some("one".into()),
            sender_id: "t".into(),
            ..Default::default()
        };
        q.send(request, t).unwrap();
    }
    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
    close(data);
    drop(engine);

    let (engine, data, _) = open_dir(dir.path());
    let entry = engine.queues.get("order.fifo").unwrap();
    let mut q = entry.lock();
    let mut received = Vec::new();
    let req = ReceiveRequest {
        max_messages: Some(10),
        visibility_timeout: Some(30),
        attempt_id: None,
    };
    loop {
        let deliveries = q.receive(&req, None, t).unwrap().received;
        if deliveries.is_empty() {
            break;
        }
        for d in deliveries {
            received.push(d.message.body.to_string());
            q.delete(&d.receipt_handle, t).unwrap();
        }
    }
    assert_eq!(received, sent);
    drop(q);
    close(data);
}

#[test]
fn a_snapshot_drops_the_segments_it_covers() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, data, _) = open_dir(dir.path());
    let t = Timestamp(5);
    engine.queues.create_from("q", &[], &[], t).unwrap();
    for i in 0..50 {
        send(&engine, "q", &format!("{i}"), t);
    }
    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
    send(&engine, "q", "after", t);
    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
    let before = state(&engine);
    close(data);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.iter().filter(|n| n.ends_with(".snap")).count(), 1);
    assert!(
        names.iter().filter(|n| n.ends_with(".wal")).count() <= 2,
        "old segments were removed: {names:?}"
    );
    let (engine, data, _) = open_dir(dir.path());
    assert_eq!(state(&engine), before);
    close(data);
}

pub(super) fn newest_segment(dir: &Path) -> std::path::PathBuf {
    written_segments(dir).pop().unwrap()
}

/// The segments holding anything, oldest first.
pub(super) fn written_segments(dir: &Path) -> Vec<std::path::PathBuf> {
    files(dir, ".wal")
        .into_iter()
        .filter(|p| std::fs::metadata(p).unwrap().len() > 0)
        .collect()
}

#[test]
fn the_log_kept_at_a_restart_counts_toward_the_next_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, data, _) = open_dir(dir.path());
    // Only the receipt key so far.
    assert!(data.log_writer.bytes_since_snapshot() < 100);
    assert_eq!(data.live_at_snapshot, 0);
    engine
        .queues
        .create_from("q", &[], &[], Timestamp(1))
        .unwrap();
    for body in ["one", "two", "three"] {
        send(&engine, "q", body, Timestamp(1));
    }
    let log_writer = data.log_writer.clone();
    close(data);
    // Records and their frames, as the writer counted them (segments are zero-filled ahead,
    // so their sizes say nothing).
    let written = log_writer.bytes_since_snapshot();
    let (engine, data, _) = open_dir(dir.path());
    assert!(written > 0);
    assert_eq!(data.log_writer.bytes_since_snapshot(), written);
    assert_eq!(data.live_at_snapshot, 0, "no snapshot yet");
    let live = engine.queues.stored_bytes();
    assert!(live > 0);
    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
    close(data);
    let (_engine, data, _) = open_dir(dir.path());
    assert_eq!(data.live_at_snapshot, live, "what the snapshot held");
    close(data);
}

/// Waits until everything the engine has logged so far is durable, so the next change goes
/// into a batch of its own, written after this one was synced.
pub(super) fn settle(data: &DataDir) {
    let lsn = data.log_writer.next_lsn();
    rt().block_on(data.log_writer.wait(lsn)).unwrap();
}

/// Where each batch of a segment starts.
pub(super) fn batch_starts(bytes: &[u8]) -> Vec<usize> {
    (0..bytes.len())
        .step_by(super::batch::ALIGN)
        .filter(|at| bytes[*at..].starts_with(&super::batch::MAGIC))
        .collect()
}

pub(super) fn files(dir: &Path, ending: &str) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(ending))
        .collect();
    found.sort();
    found
}

#[test]
fn a_second_server_cannot_open_the_same_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (_engine, data, _) = open_dir(dir.path());
    let mut other = engine();
    assert!(matches!(
        open(dir.path(), FsyncMode::Always, &mut other),
        Err(RecoveryError::Locked(_))
    ));
    close(data);
    let (_engine, data, _) = open_dir(dir.path());
    close(data);
}

fn mem_log(storage: MemStorage) -> Arc<LogWriter> {
    let (log, _) = SegmentLog::open(storage, 1 << 20).unwrap();
    let log_writer = LogWriter::new();
    log_writer.start(log, 1, FsyncMode::Always);
    log_writer
}

pub(super) fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn sample_change() -> crate::engine::Change {
    crate::engine::Change::DeleteQueue {
        name: "q".into(),
        uid: 1,
        at: Timestamp(1),
    }
}

#[test]
fn a_failed_fsync_fails_the_waiting_request_and_every_later_one() {
    let log_writer = mem_log(MemStorage {
        fail_sync: true,
        ..MemStorage::default()
    });
    log_writer.submit(&sample_change());
    let target = log_writer.next_lsn();
    assert!(rt().block_on(log_writer.wait(target)).is_err());
    assert!(log_writer.failed());
    log_writer.submit(&sample_change());
    let target = log_writer.next_lsn();
    assert!(rt().block_on(log_writer.wait(target)).is_err());
    log_writer.close();
}

#[test]
fn a_failed_write_is_not_acknowledged_and_is_written_when_the_log_can_be_written_again() {
    let log_writer = mem_log(MemStorage {
        // One write fails part way (out of space, say) and is undone; the next succeeds.
        fail_append_after: Some(3),
        ..MemStorage::default()
    });
    log_writer.submit(&sample_change());
    let target = log_writer.next_lsn();
    assert!(rt().block_on(log_writer.wait(target)).is_err());
    // Real time, bounded: the writer tries a failed write again on the machine's clock.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while log_writer.failed() {
        assert!(
            std::time::Instant::now() < deadline,
            "the log never resumed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The refused change was written by the retry, before the next one.
    assert_eq!(log_writer.durable().lsn, target);
    log_writer.submit(&sample_change());
    let next = log_writer.next_lsn();
    rt().block_on(log_writer.wait(next)).unwrap();
    assert_eq!(log_writer.durable().lsn, 3);
    log_writer.close();
}

#[test]
fn a_write_that_cannot_be_undone_fails_the_log_for_good() {
    let log_writer = mem_log(MemStorage {
        fail_append_after: Some(3),
        fail_truncate: true,
        ..MemStorage::default()
    });
    log_writer.submit(&sample_change());
    let target = log_writer.next_lsn();
    assert!(rt().block_on(log_writer.wait(target)).is_err());
    // Idle with no retry scheduled: nothing will ever write the log again.
    log_writer.wait_until_idle();
    assert!(!log_writer.will_retry(), "a poisoned log tries again");
    assert!(log_writer.failed());
    log_writer.submit(&sample_change());
    let next = log_writer.next_lsn();
    assert!(rt().block_on(log_writer.wait(next)).is_err());
    log_writer.close();
}

#[test]
fn queued_changes_become_durable_in_order() {
    let log_writer = mem_log(MemStorage::default());
    let runtime = rt();
    for _ in 0..1000 {
        log_writer.submit(&sample_change());
    }
    let target = log_writer.next_lsn();
    runtime.block_on(log_writer.wait(target)).unwrap();
    assert_eq!(log_writer.durable().lsn, 1001);
    log_writer.close();
}

#[test]
fn a_log_longer_than_a_replay_batch_comes_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, data, _) = open_dir(dir.path());
    engine
        .queues
        .create_from("q.fifo", &fifo(), &[], Timestamp(1))
        .unwrap();
    // Several of the reader's batches, then a receive.
    let changes = 3 * super::REPLAY_BATCH + 17;
    for i in 0..changes {
        send(&engine, "q.fifo", &format!("body {i}"), Timestamp(2));
    }
    let handles = receive(&engine, "q.fifo", Timestamp(3));
    assert!(!handles.is_empty());
    let before = state(&engine);
    close(data);
    drop(engine);
    let (engine, data, report) = open_dir(dir.path());
    assert!(report.replayed as usize > changes, "every send replayed");
    assert_eq!(state(&engine), before);
    close(data);
}

#[test]
fn changes_from_many_threads_are_each_logged_once_in_number_order() {
    let dir = tempfile::tempdir().unwrap();
    let (_engine, data, _) = open_dir(dir.path());
    let log_writer = data.log_writer.clone();
    let first = log_writer.next_lsn();
    let threads = 4;
    let each = 300;
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let log_writer = &log_writer;
            scope.spawn(move || {
                let runtime = rt();
                for i in 0..each {
                    // Names of many lengths, so records straddle pages; waiting for every
                    // third lets the writer fall asleep and be woken again and again.
                    let name = "q".repeat(1 + (i * 37 + thread * 11) % 300);
                    log_writer.submit(&crate::engine::Change::DeleteQueue {
                        name: name.into(),
                        uid: (thread * each + i) as u64,
                        at: Timestamp(1),
                    });
                    if i % 3 == 0 {
                        runtime
                            .block_on(log_writer.wait(log_writer.next_lsn()))
                            .unwrap();
                    }
                }
            });
        }
    });
    let last = log_writer.next_lsn();
    assert_eq!(last - first, (threads * each) as u64);
    close(data);
    let key = log_key(dir.path()).unwrap();
    let mut lsns = Vec::new();
    let mut uids = std::collections::BTreeSet::new();
    SegmentLog::replay(
        storage::DirStorage::new(dir.path()).unwrap(),
        segment_log::DEFAULT_SEGMENT_BYTES,
        key,
        false,
        |_, _, bytes| {
            let (lsn, change) = super::format::decode_record(bytes).unwrap();
            if let crate::engine::Change::DeleteQueue { uid, .. } = change {
                uids.insert(uid);
            }
            // The receipt key, logged when the directory was opened, comes before.
            if lsn >= first {
                lsns.push(lsn);
            }
            Ok::<(), LogError>(())
        },
    )
    .unwrap();
    assert_eq!(lsns, (first..last).collect::<Vec<_>>());
    assert_eq!(uids.len(), threads * each, "every change once");
}

#[test]
fn a_group_is_written_in_one_batch_and_holds_back_only_what_follows_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let (_engine, data, _) = open_dir(dir.path());
    let log_writer = data.log_writer.clone();
    // The receipt key, logged at the opening, in a batch of its own.
    log_writer.wait_until_idle();
    let runtime = rt();
    let first = log_writer.next_lsn();
    log_writer.submit(&sample_change());
    log_writer.hold();
    log_writer.submit(&sample_change());
    // The change before the group is written while the group is open; the group's is not.
    runtime.block_on(log_writer.wait(first + 1)).unwrap();
    log_writer.wait_until_idle();
    assert_eq!(
        log_writer.durable().lsn,
        first + 1,
        "an open group is held back"
    );
    log_writer.submit(&sample_change());
    log_writer.release();
    runtime.block_on(log_writer.wait(first + 3)).unwrap();
    // Overlapping groups: nothing of either is written before the last one closes.
    log_writer.hold();
    log_writer.submit(&sample_change());
    log_writer.hold();
    log_writer.submit(&sample_change());
    log_writer.release();
    log_writer.wait_until_idle();
    assert_eq!(
        log_writer.durable().lsn,
        first + 3,
        "the inner group is still open"
    );
    log_writer.release();
    runtime.block_on(log_writer.wait(first + 5)).unwrap();
    close(data);
    let bytes = std::fs::read(newest_segment(dir.path())).unwrap();
    assert_eq!(
        batch_starts(&bytes).len(),
        4,
        "the receipt key, the first change alone, then each group's changes in one write"
    );
}

fn publish(engine: &TestEngine, arn: &str, body: &str, now: Timestamp) -> bool {
    let request = crate::engine::topic::PublishRequest {
        message: body.into(),
        subject: None,
        structured: false,
        attributes: Default::default(),
        group_id: Some("g".into()),
        dedup_id: None,
        trace_header: None,
    };
    let fanout = engine.publish(arn, &request, "http://x", now).unwrap();
    fanout.publication.duplicate
}

#[test]
fn topics_and_the_signing_key_survive_a_snapshot_and_later_changes() {
    let dir = tempfile::tempdir().unwrap();
    let t = Timestamp(1_000_000);
    let (engine, data, _) = open_dir(dir.path());
    engine
        .queues
        .create_from("a.fifo", &fifo(), &[], t)
        .unwrap();
    let attrs = vec![
        ("FifoTopic".to_string(), "true".to_string()),
        ("ContentBasedDeduplication".to_string(), "true".to_string()),
    ];
    let arn = engine.topics.create("t.fifo", &attrs, &[], t).unwrap();
    let queue_arn = "arn:aws:sqs:us-east-1:000000000000:a.fifo";
    engine
        .subscribe(&arn, "sqs", Some(queue_arn), &[], "http://x", None, t)
        .unwrap();
    assert!(!publish(&engine, &arn, "before", t));
    let certificate = engine.topics.signer().unwrap().certificate_file.clone();
    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
    // After the snapshot: a publish, a second topic, a deleted one, new tags.
    assert!(!publish(&engine, &arn, "after", t));
    let other = engine.topics.create("other", &[], &[], t).unwrap();
    let gone = engine.topics.create("gone", &[], &[], t).unwrap();
    engine.delete_topic(&gone).unwrap();
    engine
        .topics
        .with_tags(&other, |tags| {
            tags.insert("k".into(), "v".into());
            Ok(())
        })
        .unwrap();
    let (engine, data) = restart_from_snapshot(dir.path(), engine, data);
    assert!(engine.topics.get(&gone).is_err());
    assert_eq!(
        engine.topics.signer().unwrap().certificate_file,
        certificate
    );
    // Dedup history from before and after the snapshot is remembered.
    assert!(publish(&engine, &arn, "before", t.plus_millis(1)));
    assert!(publish(&engine, &arn, "after", t.plus_millis(1)));
    assert_eq!(engine.queues.get("a.fifo").unwrap().lock().len(), 2);
    close(data);
}

#[test]
fn receipt_handles_open_after_a_restart_from_the_log_and_from_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let t = Timestamp(1_000_000);
    let (engine, data, _) = open_dir(dir.path());
    engine.queues.create_from("q", &[], &[], t).unwrap();
    for body in ["one", "two", "three"] {
        send(&engine, "q", body, t);
    }
    let handles = receive(&engine, "q", t);
    assert_eq!(handles.len(), 3);
    close(data);
    drop(engine);
    // From the log alone: the key was logged when the directory was first opened.
    let (engine, data, report) = open_dir(dir.path());
    assert!(report.snapshot.is_none());
    let delete = |engine: &TestEngine, handle: &str| {
        engine.queues.get("q").unwrap().lock().delete(handle, t)
    };
    assert!(delete(&engine, &handles[0]).unwrap(), "deleted");
    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
    let (engine, data) = restart_from_snapshot(dir.path(), engine, data);
    assert!(delete(&engine, &handles[1]).unwrap(), "deleted");
    // A handle sealed by another directory's key opens nowhere else.
    let other = tempfile::tempdir().unwrap();
    let (stranger, stranger_data, _) = open_dir(other.path());
    stranger.queues.create_from("q", &[], &[], t).unwrap();
    assert!(matches!(
        delete(&stranger, &handles[2]),
        Err(crate::engine::EngineError::ReceiptHandleIsInvalid(_))
    ));
    close(stranger_data);
    close(data);
}

#[test]
fn move_tasks_survive_a_snapshot_and_later_changes() {
    use crate::engine::move_task::MoveStatus;
    let dir = tempfile::tempdir().unwrap();
    let t = Timestamp(1_000_000);
    let (engine, data, _) = open_dir(dir.path());
    engine.queues.create_from("dlq", &[], &[], t).unwrap();
    let redrive =
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":5}"#;
    let source = vec![("RedrivePolicy".to_string(), redrive.to_string())];
    let source2 = vec![("RedrivePolicy".to_string(), redrive.replace("dlq", "dlq2"))];
    engine.queues.create_from("src", &source, &[], t).unwrap();
    let dlq = engine.queues.arn("dlq");
    let src = engine.queues.arn("src");
    for i in 0..10 {
        let entry = engine.queues.get("dlq").unwrap();
        let mut q = entry.lock();
        q.send(
            SendRequest {
                body: format!("m{i}").into(),
                sender_id: "t".into(),
                ..Default::default()
            },
            t,
        )
        .unwrap();
    }
    let first = engine
        .start_move_task(&dlq, (Some(src.as_str()), Default::default()), None, t)
        .unwrap();
    engine.move_step(&first.id, &dlq, 2, t);
    // A task on another source that is over before the snapshot: only the snapshot has it.
    engine.queues.create_from("dlq2", &[], &[], t).unwrap();
    engine.queues.create_from("src2", &source2, &[], t).unwrap();
    let dlq2 = engine.queues.arn("dlq2");
    let done = engine
        .start_move_task(&dlq2, (None, Default::default()), None, t)
        .unwrap();
    engine.move_step(&done.id, &dlq2, 2, t);
    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
    engine.move_step(&first.id, &dlq, 2, t);
    let handle = engine.move_tasks.of_source(&dlq)[0].handle();
    assert_eq!(engine.cancel_move_task(&handle).unwrap(), 4);
    let second = engine
        .start_move_task(&dlq, (Some(src.as_str()), Default::default()), None, t)
        .unwrap();
    engine.move_step(&second.id, &dlq, 3, t);
    let (engine, data) = restart_from_snapshot(dir.path(), engine, data);
    let tasks = engine.move_tasks.of_source(&dlq);
    let summary: Vec<_> = tasks
        .iter()
        .map(|t| (t.id.clone(), t.status, t.moved))
        .collect();
    assert_eq!(
        summary,
        vec![
            (second.id.clone(), MoveStatus::Running, 3),
            (first.id.clone(), MoveStatus::Cancelled, 4),
        ]
    );
    assert_eq!(engine.move_tasks.running().len(), 1);
    let finished = engine.move_tasks.of_source(&dlq2);
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].status, MoveStatus::Completed);
    assert_eq!(engine.queues.get("src").unwrap().lock().len(), 7);
    // The resumed task finishes what is left (6 - 3 = 3 of the messages it counted).
    engine.move_step(&second.id, &dlq, 10, t);
    assert_eq!(
        engine.move_tasks.of_source(&dlq)[0].status,
        MoveStatus::Completed
    );
    assert_eq!(engine.queues.get("dlq").unwrap().lock().len(), 0);
    close(data);
}

#[test]
fn the_snapshotter_is_woken_when_the_log_reaches_what_it_waits_for_and_not_before() {
    let log_writer = mem_log(MemStorage::default());
    let runtime = rt();
    log_writer.submit(&sample_change());
    runtime
        .block_on(log_writer.wait(log_writer.next_lsn()))
        .unwrap();
    let one = log_writer.bytes_since_snapshot();
    assert!(one > 0);
    let waiting = log_writer.clone();
    let reached = runtime.spawn(async move { waiting.log_reaches(3 * one).await });
    // Registered, then one more record: still short of three.
    runtime.block_on(tokio::task::yield_now());
    log_writer.submit(&sample_change());
    runtime
        .block_on(log_writer.wait(log_writer.next_lsn()))
        .unwrap();
    log_writer.wait_until_idle();
    runtime.block_on(tokio::task::yield_now());
    assert!(!reached.is_finished(), "woken at two records of three");
    log_writer.submit(&sample_change());
    runtime.block_on(async {
        tokio::time::timeout(std::time::Duration::from_secs(5), reached)
            .await
            .expect("woken at three records")
            .unwrap()
    });
    log_writer.close();
}

/// The bodies stored in `queue`, in sequence order.
pub(crate) fn bodies<W: Default>(engine: &Engine<W>, queue: &str) -> Vec<String> {
    let mut messages = engine.queues.get(queue).unwrap().lock().stored_messages();
    messages.sort_unstable_by_key(|(seq, _)| *seq);
    messages
        .into_iter()
        .map(|(_, stored)| stored.message.body.to_string())
        .collect()
}

/// Every file of `from` copied into `to`: the directory as a crash at this moment leaves it.
fn crash_image(from: &Path, to: &Path) {
    for file in std::fs::read_dir(from).unwrap() {
        let file = file.unwrap();
        if file.file_type().unwrap().is_file() {
            std::fs::copy(file.path(), to.join(file.file_name())).unwrap();
        }
    }
}

/// A snapshot's parts are cut at sequence numbers the log has handed out, not written. Kept
/// before those records were written, a crash that lost them left a snapshot whose cut lay
/// past the log's end: the next start numbered its records from below the cut, and the start
/// after that skipped them. A snapshot is now kept only once the records it covers are durable.
#[test]
fn a_snapshot_is_kept_only_once_the_records_it_covers_are_durable() {
    let dir = tempfile::tempdir().unwrap();
    let t = Timestamp(1_000_000);
    let (engine, data, _) = open_dir(dir.path());
    engine
        .queues
        .create_from("a.fifo", &fifo(), &[], t)
        .unwrap();
    send(&engine, "a.fifo", "durable", t);
    data.log_writer
        .wait_blocking(data.log_writer.next_lsn())
        .unwrap();
    // Queued but never written before the crash: never acknowledged either.
    data.log_writer.hold_writes(true);
    send(&engine, "a.fifo", "lost in the crash", t);
    let engine = Arc::new(engine);
    let taking = {
        let (path, engine, log_writer) = (
            dir.path().to_owned(),
            engine.clone(),
            data.log_writer.clone(),
        );
        std::thread::spawn(move || snapshot::take(&path, &engine, &log_writer))
    };
    // The snapshot either is kept (the claim) or waits for the log (the fix): bounded, as the
    // snapshot thread runs by itself.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !taking.is_finished() && data.log_writer.durability_waiters() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the snapshot neither kept nor waiting"
        );
        std::thread::yield_now();
    }
    let crashed = tempfile::tempdir().unwrap();
    crash_image(dir.path(), crashed.path());
    data.log_writer.hold_writes(false);
    taking
        .join()
        .unwrap()
        .expect("kept once the log holds what it covers");
    close(data);

    // Recovered from the crash image, a change is made and the node stops; two more starts
    // must each find it.
    let (engine, data, _) = open_dir(crashed.path());
    let recovered = bodies(&engine, "a.fifo");
    send(&engine, "a.fifo", "after the crash", t.plus_millis(1));
    close(data);
    drop(engine);
    for start in 0..2 {
        let (engine, data, _) = open_dir(crashed.path());
        let mut expected = recovered.clone();
        expected.push("after the crash".into());
        assert_eq!(
            bodies(&engine, "a.fifo"),
            expected,
            "start {start} after the crash"
        );
        close(data);
    }
    // And what recovery found was what the log held, not what it never wrote.
    assert_eq!(recovered, ["durable"]);
}
