//! Deduplication histories across restarts: a snapshot keeps each id's digest, never the id,
//! and reads a history as it was when its queue was copied.

use std::io::Write;

use super::tests::{close, files, open_dir, TestEngine};
use super::*;
use crate::engine::queue::{ReceiveRequest, SendReceipt, SendRequest};
use crate::engine::Timestamp;

/// Sends with an explicit id; true when the send was a duplicate.
fn send_id(engine: &TestEngine, queue: &str, group: &str, id: &str, now: Timestamp) -> bool {
    let entry = engine.queues.get(queue).unwrap();
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
    let entry = engine.queues.get(queue).unwrap();
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
        .queues
        .create_from("q.fifo", &fifo("queue"), &[], t)
        .unwrap();
    engine
        .queues
        .create_from("g.fifo", &fifo("messageGroup"), &[], t)
        .unwrap();
    let before = format!("before-{}", "x".repeat(100));
    let after = format!("after-{}", "y".repeat(100));
    for queue in ["q.fifo", "g.fifo"] {
        assert!(!send_id(&engine, queue, "A", &before, t));
        drain(&engine, queue, t);
    }
    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
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

/// Collects a snapshot's bytes and runs `hook` once, right after its first
/// `Item::DedupDigests` record (variant 15) is written: between two chunks of a history.
struct Hooked<F: FnMut()> {
    bytes: Vec<u8>,
    hook: Option<F>,
}

impl<F: FnMut()> Write for Hooked<F> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.bytes.extend_from_slice(b);
        if b.len() > record::HEADER_BYTES && b[record::HEADER_BYTES] == 15 {
            if let Some(mut hook) = self.hook.take() {
                hook();
            }
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn send_to_q(engine: &TestEngine, id: &str, now: Timestamp) -> SendReceipt {
    let entry = engine.queues.get("q.fifo").unwrap();
    let mut q = entry.lock();
    q.tick(now);
    q.send(
        SendRequest {
            body: format!("body of {id}").as_str().into(),
            group_id: Some("g".into()),
            dedup_id: Some(id.into()),
            sender_id: "t".into(),
            ..Default::default()
        },
        now,
    )
    .unwrap()
}

/// A FIFO queue remembering more ids than one chunk of a snapshot reads.
fn setup(dir: &std::path::Path, t: Timestamp) -> (TestEngine, DataDir) {
    let (engine, data, _) = open_dir(dir);
    let fifo = vec![("FifoQueue".to_string(), "true".to_string())];
    engine.queues.create_from("q.fifo", &fifo, &[], t).unwrap();
    for i in 0..4100 {
        assert!(!send_to_q(&engine, &format!("id-{i}"), t).duplicate);
    }
    (engine, data)
}

/// What a snapshot alone restores (the log after it lost, as in a crash before it synced).
fn snapshot_alone(bytes: &[u8]) -> TestEngine {
    let fresh: TestEngine = crate::engine::Engine::new("000000000000", "us-east-1");
    snapshot::load_bytes("scratch", bytes, &fresh).unwrap();
    fresh
}

#[test]
fn a_send_between_two_chunks_of_a_history_is_left_to_the_log_after_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let t = Timestamp(1_000_000);
    let (engine, data) = setup(dir.path(), t);
    let create = || {
        Ok(Hooked {
            bytes: Vec::new(),
            hook: Some(|| assert!(!send_to_q(&engine, "late", t).duplicate)),
        })
    };
    let written = snapshot::write_to(create, &engine, &data.log_writer).unwrap();
    let restored = snapshot_alone(&written.out.bytes);
    assert_eq!(restored.queues.get("q.fifo").unwrap().lock().len(), 4100);
    // Its id is not in the snapshot without its message: a retry is stored.
    assert!(!send_to_q(&restored, "late", t).duplicate);
    assert!(send_to_q(&restored, "id-4099", t).duplicate);
    close(data);
}

#[test]
fn a_purge_between_two_chunks_of_a_history_fails_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let t = Timestamp(1_000_000);
    let (engine, data) = setup(dir.path(), t);
    let create = || {
        Ok(Hooked {
            bytes: Vec::new(),
            hook: Some(|| {
                engine
                    .queues
                    .get("q.fifo")
                    .unwrap()
                    .lock()
                    .purge(t)
                    .unwrap()
            }),
        })
    };
    let failed = snapshot::write_to(create, &engine, &data.log_writer).err();
    assert!(
        failed.is_some_and(|e| e.to_string().contains("cleared while the snapshot read it")),
        "the messages copied would have lost their ids"
    );
    close(data);
}

#[test]
fn duplicates_get_the_originals_ids_from_a_snapshot_alone_in_queues_and_topics() {
    let dir = tempfile::tempdir().unwrap();
    let t = Timestamp(1_000_000);
    let (engine, data, _) = open_dir(dir.path());
    let fifo = vec![("FifoQueue".to_string(), "true".to_string())];
    engine.queues.create_from("q.fifo", &fifo, &[], t).unwrap();
    let first = send_to_q(&engine, "one", t);
    let attrs = vec![
        ("FifoTopic".to_string(), "true".to_string()),
        ("ContentBasedDeduplication".to_string(), "true".to_string()),
    ];
    let arn = engine.topics.create("p.fifo", &attrs, &[], t).unwrap();
    let request = crate::engine::topic::PublishRequest {
        message: "hello".into(),
        subject: None,
        structured: false,
        attributes: Default::default(),
        group_id: Some("g".into()),
        dedup_id: None,
        trace_header: None,
    };
    let published = engine
        .publish(&arn, &request, "http://x", t)
        .unwrap()
        .publication;
    let create = || {
        Ok(Hooked {
            bytes: Vec::new(),
            hook: None::<fn()>,
        })
    };
    let written = snapshot::write_to(create, &engine, &data.log_writer).unwrap();
    let restored = snapshot_alone(&written.out.bytes);
    let again = send_to_q(&restored, "one", t);
    assert!(again.duplicate);
    assert_eq!(
        (again.message_id, again.sequence_number),
        (first.message_id, first.sequence_number)
    );
    let again = restored
        .publish(&arn, &request, "http://x", t)
        .unwrap()
        .publication;
    assert!(again.duplicate);
    assert_eq!(
        (again.message_id, again.sequence_number),
        (published.message_id, published.sequence_number)
    );
    close(data);
}
