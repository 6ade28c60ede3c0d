//! Deduplication histories across restarts: a snapshot keeps each id's digest, never the id.

use super::tests::{close, files, open_dir, TestEngine};
use super::*;
use crate::engine::queue::{ReceiveRequest, SendRequest};
use crate::engine::Timestamp;

/// Sends with an explicit id; true when the send was a duplicate.
fn send_id(engine: &TestEngine, queue: &str, group: &str, id: &str, now: Timestamp) -> bool {
    let entry = engine.queue(queue).unwrap();
    let mut q = entry.lock();
    q.tick(now);
    q.send(
        SendRequest {
            body: format!("body of {id}").as_str().into(),
            group_id: Some(group.into()),
            dedup_id: Some(id.into()),
            sender_id: "t".into(),
            ..Default::default()
        },
        now,
    )
    .unwrap()
    .duplicate
}

/// Receives and deletes everything visible, so only the history remembers the ids.
fn drain(engine: &TestEngine, queue: &str, now: Timestamp) {
    let entry = engine.queue(queue).unwrap();
    let req = ReceiveRequest {
        max_messages: Some(10),
        visibility_timeout: Some(30),
        attempt_id: None,
    };
    loop {
        let (outcome, _) = engine.receive(&entry, &req, now).unwrap();
        if outcome.received.is_empty() {
            return;
        }
        for delivery in outcome.received {
            entry.lock().delete(&delivery.receipt_handle, now).unwrap();
        }
    }
}

#[test]
fn ids_are_remembered_across_a_snapshot_and_the_log_after_it_and_the_snapshot_holds_no_id() {
    let dir = tempfile::tempdir().unwrap();
    let t = Timestamp(1_000_000);
    let (engine, data, _) = open_dir(dir.path());
    let fifo = |scope: &str| {
        vec![
            ("FifoQueue".to_string(), "true".to_string()),
            ("DeduplicationScope".to_string(), scope.to_string()),
        ]
    };
    engine
        .create_queue_from("q.fifo", &fifo("queue"), &[], t)
        .unwrap();
    engine
        .create_queue_from("g.fifo", &fifo("messageGroup"), &[], t)
        .unwrap();
    let before = format!("before-{}", "x".repeat(100));
    let after = format!("after-{}", "y".repeat(100));
    for queue in ["q.fifo", "g.fifo"] {
        assert!(!send_id(&engine, queue, "A", &before, t));
        drain(&engine, queue, t);
    }
    snapshot::take(dir.path(), &engine, &data.journal).unwrap();
    for queue in ["q.fifo", "g.fifo"] {
        assert!(!send_id(&engine, queue, "A", &after, t));
    }
    let snapshot = std::fs::read(files(dir.path(), ".snap").pop().unwrap()).unwrap();
    assert!(
        !snapshot
            .windows(before.len())
            .any(|w| w == before.as_bytes()),
        "the snapshot holds the id's digest, not the id"
    );
    close(data);
    drop(engine);

    let (engine, data, report) = open_dir(dir.path());
    assert!(report.snapshot.is_some());
    let t2 = t.plus_millis(1_000);
    for queue in ["q.fifo", "g.fifo"] {
        assert!(
            send_id(&engine, queue, "A", &before, t2),
            "{queue}: from the snapshot"
        );
        assert!(
            send_id(&engine, queue, "A", &after, t2),
            "{queue}: from the log"
        );
    }
    // Scoped by group: the same id in another group is another message.
    assert!(!send_id(&engine, "g.fifo", "B", &before, t2));
    assert!(send_id(&engine, "q.fifo", "B", &before, t2));
    // Five minutes after the first sends, the window is over.
    let later = t.plus_millis(5 * 60 * 1000);
    assert!(!send_id(&engine, "q.fifo", "A", &before, later));
    close(data);
}
