//! One suite of the rules every backend must keep, run against each of them (the embedded
//! engine in `embedded/tests.rs`, PostgreSQL in `postgres/tests.rs`): a rule differing between
//! backends fails here, not in a user's deployment.

use std::collections::BTreeMap;
use std::sync::Arc;

use md5::Digest;

use super::{BackendError, CreateQueue, Messages, QueueAdmin};
use crate::clock::{Clock, ManualClock};
use crate::engine::body::Body;
use crate::engine::queue::{ReceiveRequest, Received, SendRequest};
use crate::engine::{EngineError, QueueConfig, Timestamp};

const ARN: &str = "arn:aws:sqs:us-east-1:000000000000:";

fn attrs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn create(name: &str, attributes: &[(&str, &str)], now: Timestamp) -> CreateQueue {
    let attributes = attrs(attributes);
    CreateQueue {
        name: name.into(),
        config: QueueConfig::for_create(name, &attributes, now).expect("valid attributes"),
        attributes,
        tags: vec![("team".into(), "prices".into())],
        now,
    }
}

fn rejected(result: Result<impl std::fmt::Debug, BackendError>) -> EngineError {
    match result {
        Err(BackendError::Rejected(error)) => error,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn names(list: &[std::sync::Arc<str>]) -> Vec<&str> {
    list.iter().map(|n| &**n).collect()
}

/// Creating, finding, listing, describing and changing queues, with every refusal a user can
/// meet. `now` is the backend's clock reading (creation times are compared with it).
pub async fn queue_administration(backend: &dyn QueueAdmin, now: Timestamp) {
    let t = move |plus: u64| Timestamp(now.millis() + plus);
    creating_and_finding(backend, &t).await;
    dead_letter_targets(backend, &t).await;
    refusals_and_tags(backend, &t).await;
    policies_purges_and_deletes(backend, &t).await;
}

/// Create, find, list and describe.
async fn creating_and_finding(backend: &dyn QueueAdmin, t: &dyn Fn(u64) -> Timestamp) {
    // Create, and create again: the same attributes are no error, other values are.
    let visibility = [("VisibilityTimeout", "45")];
    assert_eq!(
        &*backend
            .create_queue(create("b-prices", &visibility, t(0)))
            .await
            .unwrap(),
        "b-prices"
    );
    backend
        .create_queue(create("b-prices", &visibility, t(1)))
        .await
        .unwrap();
    let differs = backend.create_queue(create("b-prices", &[("VisibilityTimeout", "46")], t(1)));
    assert_eq!(
        rejected(differs.await),
        EngineError::QueueNameExists("VisibilityTimeout".into())
    );
    backend
        .create_queue(create("a-dlq", &[], t(2)))
        .await
        .unwrap();
    backend
        .create_queue(create("a-dlq.fifo", &[("FifoQueue", "true")], t(2)))
        .await
        .unwrap();

    // Found, listed by prefix in byte order, described with what was stored.
    assert_eq!(&*backend.find_queue("a-dlq").await.unwrap(), "a-dlq");
    assert_eq!(
        rejected(backend.find_queue("nope").await),
        EngineError::QueueDoesNotExist
    );
    assert_eq!(
        names(&backend.list_queues("").await.unwrap()),
        ["a-dlq", "a-dlq.fifo", "b-prices"]
    );
    assert_eq!(
        names(&backend.list_queues("a-").await.unwrap()),
        ["a-dlq", "a-dlq.fifo"]
    );
    assert!(
        backend.list_queues("%").await.unwrap().is_empty(),
        "a prefix is no pattern"
    );
    let view = backend.describe_queue("b-prices", t(3)).await.unwrap();
    assert_eq!(&*view.arn, format!("{ARN}b-prices"));
    assert_eq!(view.config.visibility_timeout, 45);
    assert_eq!(view.config.created_at, t(0));
    assert_eq!(view.counts, Default::default());
}

/// Dead-letter targets must exist, be of the same type and allow the source; a queue may name
/// itself.
async fn dead_letter_targets(backend: &dyn QueueAdmin, t: &dyn Fn(u64) -> Timestamp) {
    let redrive =
        |target: &str| format!(r#"{{"deadLetterTargetArn":"{ARN}{target}","maxReceiveCount":3}}"#);
    for (target, reason) in [
        ("missing", "Dead letter target does not exist."),
        (
            "a-dlq.fifo",
            "Dead-letter queue must be same type of queue as the source..",
        ),
    ] {
        let policy = redrive(target);
        let refused =
            backend.set_queue_attributes("b-prices", attrs(&[("RedrivePolicy", &policy)]), t(4));
        let message = rejected(refused.await).to_string();
        assert!(message.ends_with(reason), "{target}: {message}");
    }
    let itself = redrive("b-prices");
    backend
        .set_queue_attributes("b-prices", attrs(&[("RedrivePolicy", &itself)]), t(4))
        .await
        .unwrap();
    assert_eq!(
        names(&backend.dead_letter_sources("b-prices").await.unwrap()),
        ["b-prices"]
    );
    let policy = redrive("a-dlq");
    backend
        .set_queue_attributes("b-prices", attrs(&[("RedrivePolicy", &policy)]), t(5))
        .await
        .unwrap();
    assert_eq!(
        names(&backend.dead_letter_sources("a-dlq").await.unwrap()),
        ["b-prices"]
    );
    assert!(backend
        .dead_letter_sources("b-prices")
        .await
        .unwrap()
        .is_empty());
    let view = backend.describe_queue("b-prices", t(6)).await.unwrap();
    assert_eq!(view.config.last_modified_at, t(5));
    assert_eq!(view.config.created_at, t(0));
    // A DLQ that allows no source refuses a new one.
    let deny = r#"{"redrivePermission":"denyAll"}"#;
    backend
        .set_queue_attributes("a-dlq", attrs(&[("RedriveAllowPolicy", deny)]), t(6))
        .await
        .unwrap();
    let refused = backend.create_queue(create("c-src", &[("RedrivePolicy", &policy)], t(7)));
    assert!(rejected(refused.await)
        .to_string()
        .ends_with("Queue is not allowed to use the dead letter queue."));
}

/// Refused changes leave everything as it was; tags are added, replaced and removed.
async fn refusals_and_tags(backend: &dyn QueueAdmin, t: &dyn Fn(u64) -> Timestamp) {
    let refused = backend.set_queue_attributes(
        "b-prices",
        attrs(&[("DelaySeconds", "5"), ("VisibilityTimeout", "x")]),
        t(8),
    );
    assert!(matches!(
        rejected(refused.await),
        EngineError::InvalidAttributeValue(_)
    ));
    let view = backend.describe_queue("b-prices", t(8)).await.unwrap();
    assert_eq!(
        (view.config.delay_seconds, view.config.visibility_timeout),
        (0, 45)
    );
    let refused =
        backend.set_queue_attributes("a-dlq.fifo", attrs(&[("FifoQueue", "false")]), t(8));
    assert!(matches!(
        rejected(refused.await),
        EngineError::InvalidAttributeValue(_)
    ));

    // Tags: added, replaced, removed; at most 50.
    let tags = BTreeMap::from([
        ("team".to_string(), "quotes".to_string()),
        ("env".into(), "ci".into()),
    ]);
    backend.tag_queue("b-prices", tags).await.unwrap();
    backend
        .untag_queue("b-prices", vec!["env".into(), "absent".into()])
        .await
        .unwrap();
    let expected = BTreeMap::from([("team".to_string(), "quotes".to_string())]);
    assert_eq!(backend.queue_tags("b-prices").await.unwrap(), expected);
    let many: BTreeMap<String, String> =
        (0..50).map(|i| (format!("k{i}"), String::new())).collect();
    assert!(matches!(
        rejected(backend.tag_queue("b-prices", many).await),
        EngineError::InvalidParameterValue(_)
    ));
    assert_eq!(backend.queue_tags("b-prices").await.unwrap(), expected);
    assert_eq!(
        rejected(backend.queue_tags("nope").await),
        EngineError::QueueDoesNotExist
    );
}

/// Policy edits, purges at most once a minute, and deletion.
async fn policies_purges_and_deletes(backend: &dyn QueueAdmin, t: &dyn Fn(u64) -> Timestamp) {
    // Policies are edited from what is stored, with the queue's ARN.
    let edit = |step: u32| -> super::PolicyEdit {
        Box::new(move |current: Option<&str>, arn: &str| {
            Ok(Some(
                serde_json::json!({"Id": arn, "Step": step, "Before": current}).to_string(),
            ))
        })
    };
    backend
        .edit_queue_policy("b-prices", edit(1))
        .await
        .unwrap();
    backend
        .edit_queue_policy("b-prices", edit(2))
        .await
        .unwrap();
    let view = backend.describe_queue("b-prices", t(9)).await.unwrap();
    let arn = format!("{ARN}b-prices");
    let first = serde_json::json!({"Id": arn, "Step": 1, "Before": null}).to_string();
    let second = serde_json::json!({"Id": arn, "Step": 2, "Before": first}).to_string();
    assert_eq!(view.config.policy, Some(second));

    // Purge at most once a minute.
    backend.purge_queue("b-prices", t(10)).await.unwrap();
    let again = backend.purge_queue("b-prices", t(60_009)).await;
    assert_eq!(
        rejected(again),
        EngineError::PurgeQueueInProgress("b-prices".into())
    );
    backend.purge_queue("b-prices", t(60_010)).await.unwrap();

    // Deleted: gone from every view, then free to be created anew.
    backend.delete_queue("b-prices", t(70_000)).await.unwrap();
    assert_eq!(
        rejected(backend.delete_queue("b-prices", t(70_001)).await),
        EngineError::QueueDoesNotExist
    );
    assert_eq!(
        rejected(backend.describe_queue("b-prices", t(70_001)).await),
        EngineError::QueueDoesNotExist
    );
    assert_eq!(
        names(&backend.list_queues("").await.unwrap()),
        ["a-dlq", "a-dlq.fifo"]
    );
    assert!(backend
        .dead_letter_sources("a-dlq")
        .await
        .unwrap()
        .is_empty());
    backend
        .create_queue(create("b-prices", &[], t(70_002)))
        .await
        .unwrap();
    let view = backend.describe_queue("b-prices", t(70_003)).await.unwrap();
    assert_eq!(
        (view.config.visibility_timeout, view.config.created_at),
        (30, t(70_002))
    );
}

fn message(body: &str, group: Option<&str>, dedup: Option<&str>) -> SendRequest {
    SendRequest {
        body: Body::new(body),
        group_id: group.map(Arc::from),
        dedup_id: dedup.map(Arc::from),
        sender_id: "AIDATEST".into(),
        ..SendRequest::default()
    }
}

fn bodies(received: &[Received]) -> Vec<&str> {
    received.iter().map(|r| &*r.message.body).collect()
}

async fn receive(backend: &dyn Messages, queue: &str, max: i64) -> Vec<Received> {
    let request = ReceiveRequest {
        max_messages: Some(max),
        ..ReceiveRequest::default()
    };
    backend.receive(queue, request, Some(0)).await.unwrap()
}

async fn counts(
    backend: &dyn QueueAdmin,
    queue: &str,
    clock: &ManualClock,
) -> (usize, usize, usize) {
    let c = backend
        .describe_queue(queue, clock.now())
        .await
        .unwrap()
        .counts;
    (c.visible, c.in_flight, c.delayed)
}

/// Sending, receiving, deleting and visibility on standard and FIFO queues: the group lock,
/// deduplication, delays, dead-letter queues, receive attempts and long polls. Time moves on
/// `clock`, which the backend reads.
pub async fn messages<B: QueueAdmin + Messages>(backend: &B, clock: &ManualClock) {
    standard_messages(backend, clock).await;
    let last = fifo_groups_and_deduplication(backend, clock).await;
    fifo_window_and_batches(backend, clock, last).await;
    delays_and_dead_letters(backend, clock).await;
    receive_attempts(backend, clock).await;
    retention(backend, clock).await;
    long_polls(backend, clock).await;
}

/// A message enqueued longer ago than the retention period is gone, even from flight; a FIFO
/// group then continues with the next.
async fn retention<B: QueueAdmin + Messages>(backend: &B, clock: &ManualClock) {
    let keep = ("MessageRetentionPeriod", "60");
    let now = clock.now();
    backend
        .create_queue(create("brief", &[keep], now))
        .await
        .unwrap();
    let fifo = [
        keep,
        ("FifoQueue", "true"),
        ("ContentBasedDeduplication", "true"),
        ("VisibilityTimeout", "120"),
    ];
    backend
        .create_queue(create("brief.fifo", &fifo, now))
        .await
        .unwrap();
    for queue in ["brief", "brief.fifo"] {
        let group = queue.ends_with(".fifo").then_some("g");
        backend
            .send(queue, message("old", group, None))
            .await
            .unwrap();
    }
    assert_eq!(bodies(&receive(backend, "brief.fifo", 1).await), ["old"]);
    clock.advance_millis(30_000);
    for queue in ["brief", "brief.fifo"] {
        let group = queue.ends_with(".fifo").then_some("g");
        backend
            .send(queue, message("new", group, None))
            .await
            .unwrap();
    }
    clock.advance_millis(30_000);
    assert_eq!(counts(backend, "brief", clock).await, (1, 0, 0));
    assert_eq!(bodies(&receive(backend, "brief", 10).await), ["new"]);
    // "old" was still in flight (120 s) when it expired, and no longer holds its group.
    assert_eq!(bodies(&receive(backend, "brief.fifo", 10).await), ["new"]);
    assert_eq!(counts(backend, "brief.fifo", clock).await, (0, 1, 0));
}

/// A standard queue: in flight once received, back after the visibility timeout (30 s).
async fn standard_messages<B: QueueAdmin + Messages>(backend: &B, clock: &ManualClock) {
    let (admin, messages): (&dyn QueueAdmin, &dyn Messages) = (backend, backend);
    admin
        .create_queue(create("std", &[], clock.now()))
        .await
        .unwrap();
    for body in ["a", "b", "c"] {
        let receipt = messages
            .send("std", message(body, None, None))
            .await
            .unwrap();
        assert_eq!(
            receipt.body_md5.hex().as_str(),
            format!("{:x}", md5::Md5::digest(body))
        );
        assert!(receipt.sequence_number.is_none() && !receipt.duplicate);
    }
    let first = receive(messages, "std", 10).await;
    let mut got = bodies(&first);
    got.sort();
    assert_eq!(got, ["a", "b", "c"]);
    assert!(first.iter().all(|r| r.message.receive_count == 1));
    assert!(receive(messages, "std", 10).await.is_empty());
    assert_eq!(counts(admin, "std", clock).await, (0, 3, 0));
    clock.advance_millis(30_000);
    let second = receive(messages, "std", 10).await;
    assert_eq!(second.len(), 3);
    assert!(second.iter().all(|r| r.message.receive_count == 2));
    // An earlier receive's handle still changes the visibility on a standard queue.
    let extended = messages
        .change_visibility("std", vec![(&first[0].receipt_handle, 100)])
        .await
        .unwrap();
    assert!(extended[0].is_ok());
    clock.advance_millis(31_000);
    let third = receive(messages, "std", 10).await;
    assert_eq!(third.len(), 2, "the extended one stays in flight");
    assert!(third.iter().all(|r| r.message.id != first[0].message.id));
    // A standard queue deletes with the earlier handle too.
    let handles: Vec<&str> = first.iter().map(|r| r.receipt_handle.as_str()).collect();
    let deleted = messages.delete("std", handles).await.unwrap();
    assert!(deleted.iter().all(Result::is_ok), "{deleted:?}");
    assert_eq!(counts(admin, "std", clock).await, (0, 0, 0));
    let garbage = messages
        .delete("std", vec!["AQEBnot-a-handle"])
        .await
        .unwrap();
    assert!(matches!(
        garbage[0],
        Err(EngineError::ReceiptHandleIsInvalid(_))
    ));
}

/// FIFO: a group's run in order, groups in the order of their first message, the group lock,
/// deduplication. Answers the last send's sequence number.
async fn fifo_groups_and_deduplication<B: QueueAdmin + Messages>(
    backend: &B,
    clock: &ManualClock,
) -> Option<u128> {
    let (admin, messages): (&dyn QueueAdmin, &dyn Messages) = (backend, backend);
    let fifo = [("FifoQueue", "true")];
    admin
        .create_queue(create("q.fifo", &fifo, clock.now()))
        .await
        .unwrap();
    let sent = [("g1", "a1", "d1"), ("g1", "a2", "d2"), ("g2", "b1", "d3")];
    let mut receipts = Vec::new();
    for (group, body, dedup) in sent {
        let request = message(body, Some(group), Some(dedup));
        receipts.push(messages.send("q.fifo", request).await.unwrap());
    }
    let sequence: Vec<u128> = receipts
        .iter()
        .map(|r| r.sequence_number.unwrap())
        .collect();
    assert!(sequence.windows(2).all(|w| w[0] < w[1]), "{sequence:?}");
    // Deduplicated within five minutes: the original's id and sequence number.
    let again = messages
        .send("q.fifo", message("other", Some("g1"), Some("d1")))
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(
        (again.message_id, again.sequence_number),
        (receipts[0].message_id, receipts[0].sequence_number)
    );
    let run = receive(messages, "q.fifo", 10).await;
    assert_eq!(bodies(&run), ["a1", "a2", "b1"]);
    assert_eq!(run[0].message.id, receipts[0].message_id);
    // Both groups are locked while their messages are in flight.
    assert!(receive(messages, "q.fifo", 10).await.is_empty());
    let deleted = messages
        .delete("q.fifo", vec![&run[0].receipt_handle])
        .await
        .unwrap();
    assert!(deleted[0].is_ok());
    assert!(
        receive(messages, "q.fifo", 10).await.is_empty(),
        "a2 still holds g1"
    );
    // Visible again at once: back at the head of its group.
    let changed = messages
        .change_visibility("q.fifo", vec![(&run[1].receipt_handle, 0)])
        .await
        .unwrap();
    assert!(changed[0].is_ok());
    let back = receive(messages, "q.fifo", 10).await;
    assert_eq!(bodies(&back), ["a2"]);
    assert_eq!(back[0].message.receive_count, 2);
    // The earlier receive's handle has expired on a FIFO queue.
    let stale = messages
        .delete("q.fifo", vec![&run[1].receipt_handle])
        .await
        .unwrap();
    assert!(stale[0]
        .as_ref()
        .unwrap_err()
        .to_string()
        .ends_with("The receipt handle has expired."));
    let stale = messages
        .change_visibility("q.fifo", vec![(&run[1].receipt_handle, 5)])
        .await
        .unwrap();
    assert!(stale[0].is_err());
    assert_eq!(counts(admin, "q.fifo", clock).await, (0, 2, 0));
    receipts[2].sequence_number
}

/// After five minutes a deduplication id is new again; a FIFO batch missing a group fails whole.
async fn fifo_window_and_batches<B: QueueAdmin + Messages>(
    backend: &B,
    clock: &ManualClock,
    last: Option<u128>,
) {
    let messages: &dyn Messages = backend;
    // After the window the same deduplication id is a new message.
    clock.advance_millis(5 * 60_000);
    let later = messages
        .send("q.fifo", message("a3", Some("g1"), Some("d1")))
        .await
        .unwrap();
    assert!(!later.duplicate);
    assert!(later.sequence_number > last);
    // A head made visible again comes back alone: what follows it is still in flight.
    for body in ["m1", "m2", "m3"] {
        messages
            .send("q.fifo", message(body, Some("g4"), Some(body)))
            .await
            .unwrap();
    }
    let all = receive(messages, "q.fifo", 10).await;
    let g4: Vec<&Received> = all
        .iter()
        .filter(|r| r.message.group_id.as_deref() == Some("g4"))
        .collect();
    assert_eq!(
        g4.iter().map(|r| &*r.message.body).collect::<Vec<_>>(),
        ["m1", "m2", "m3"]
    );
    let changed = messages
        .change_visibility("q.fifo", vec![(&g4[0].receipt_handle, 0)])
        .await
        .unwrap();
    assert!(changed[0].is_ok());
    assert_eq!(bodies(&receive(messages, "q.fifo", 10).await), ["m1"]);
    let batch = vec![
        message("x", Some("g3"), Some("d9")),
        message("y", None, Some("d10")),
    ];
    let refused = messages.send_batch("q.fifo", batch).await;
    assert!(matches!(
        refused,
        Err(BackendError::Rejected(EngineError::InvalidParameterValue(
            _
        )))
    ));
}

async fn receive_with(backend: &dyn Messages, queue: &str, attempt: &str) -> Vec<Received> {
    let request = ReceiveRequest {
        max_messages: Some(10),
        attempt_id: Some(attempt.into()),
        ..ReceiveRequest::default()
    };
    backend.receive(queue, request, Some(0)).await.unwrap()
}

fn handles(received: &[Received]) -> Vec<&str> {
    received.iter().map(|r| r.receipt_handle.as_str()).collect()
}

/// A FIFO receive retried with its attempt id gets the same messages and handles while they
/// stand as it left them; once one had its visibility changed, it is a new receive.
async fn receive_attempts<B: QueueAdmin + Messages>(backend: &B, clock: &ManualClock) {
    backend
        .create_queue(create("tries.fifo", &[("FifoQueue", "true")], clock.now()))
        .await
        .unwrap();
    for body in ["t1", "t2"] {
        backend
            .send("tries.fifo", message(body, Some("g"), Some(body)))
            .await
            .unwrap();
    }
    let first = receive_with(backend, "tries.fifo", "a1").await;
    assert_eq!(bodies(&first), ["t1", "t2"]);
    clock.advance_millis(20_000);
    let retried = receive_with(backend, "tries.fifo", "a1").await;
    assert_eq!(handles(&retried), handles(&first));
    // The retry restarted the visibility timeout: 20 s later they are still in flight.
    clock.advance_millis(20_000);
    assert!(receive_with(backend, "tries.fifo", "a2").await.is_empty());
    // A visibility change (even one that keeps it in flight) ends the replay.
    let extended = backend
        .change_visibility("tries.fifo", vec![(handles(&first)[1], 100)])
        .await
        .unwrap();
    assert!(extended[0].is_ok());
    assert!(
        receive_with(backend, "tries.fifo", "a1").await.is_empty(),
        "t1 holds the group"
    );
    let changed = backend
        .change_visibility("tries.fifo", vec![(handles(&first)[0], 0)])
        .await
        .unwrap();
    assert!(changed[0].is_ok());
    let fresh = receive_with(backend, "tries.fifo", "a1").await;
    assert_eq!(bodies(&fresh), ["t1"]);
    assert_ne!(handles(&fresh), handles(&first)[..1]);
}

/// A queue's delay holds messages back; a message received maxReceiveCount times moves to
/// the dead-letter queue on the next receive, keeping its id and count.
async fn delays_and_dead_letters<B: QueueAdmin + Messages>(backend: &B, clock: &ManualClock) {
    let now = || clock.now();
    backend
        .create_queue(create("slow", &[("DelaySeconds", "5")], now()))
        .await
        .unwrap();
    backend
        .send("slow", message("late", None, None))
        .await
        .unwrap();
    assert_eq!(counts(backend, "slow", clock).await, (0, 0, 1));
    assert!(receive(backend, "slow", 1).await.is_empty());
    clock.advance_millis(5_000);
    assert_eq!(bodies(&receive(backend, "slow", 1).await), ["late"]);

    let fifo = ("FifoQueue", "true");
    backend
        .create_queue(create("dead.fifo", &[fifo], now()))
        .await
        .unwrap();
    let redrive = format!(r#"{{"deadLetterTargetArn":"{ARN}dead.fifo","maxReceiveCount":2}}"#);
    let attributes = [
        fifo,
        ("RedrivePolicy", &redrive),
        ("VisibilityTimeout", "10"),
    ];
    backend
        .create_queue(create("live.fifo", &attributes, now()))
        .await
        .unwrap();
    let sent = backend
        .send("live.fifo", message("poison", Some("g"), Some("p")))
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(bodies(&receive(backend, "live.fifo", 1).await), ["poison"]);
        clock.advance_millis(10_000);
    }
    assert!(
        receive(backend, "live.fifo", 1).await.is_empty(),
        "moved, not received"
    );
    assert_eq!(counts(backend, "live.fifo", clock).await, (0, 0, 0));
    let moved = receive(backend, "dead.fifo", 1).await;
    assert_eq!(bodies(&moved), ["poison"]);
    assert_eq!(moved[0].message.id, sent.message_id);
    assert_eq!(moved[0].message.receive_count, 3);
    let source = moved[0]
        .message
        .dead_letter_source_arn()
        .map(|a| a.to_string());
    assert_eq!(source, Some(format!("{ARN}live.fifo")));
}

/// A long poll returns as soon as a message arrives, and empty when its wait ends.
async fn long_polls<B: QueueAdmin + Messages>(backend: &B, clock: &ManualClock) {
    backend
        .create_queue(create("polled", &[], clock.now()))
        .await
        .unwrap();
    let poll = backend.receive("polled", ReceiveRequest::default(), Some(20));
    let send = async {
        // Let the poll find the queue empty and wait (real time: only orders the two).
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        backend
            .send("polled", message("woken", None, None))
            .await
            .unwrap();
    };
    let guard = std::time::Duration::from_secs(10);
    let (got, ()) = tokio::time::timeout(guard, async { tokio::join!(poll, send) })
        .await
        .expect("woken");
    assert_eq!(bodies(&got.unwrap()), ["woken"]);
    let poll = backend.receive("polled", ReceiveRequest::default(), Some(20));
    let wait_out = async {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        clock.advance_millis(20_000);
    };
    let (got, ()) = tokio::time::timeout(guard, async { tokio::join!(poll, wait_out) })
        .await
        .expect("ended");
    assert!(got.unwrap().is_empty());
}

/// Looking inside and starting over: counts and groups, peeks that change nothing, and both
/// kinds of reset.
pub async fn inspection<B: QueueAdmin + Messages + super::Inspection>(
    backend: &B,
    clock: &ManualClock,
) {
    use crate::engine::queue::inspect::StateFilter;
    let now = clock.now();
    let fifo = [("FifoQueue", "true"), ("VisibilityTimeout", "30")];
    backend
        .create_queue(create("i.fifo", &fifo, now))
        .await
        .unwrap();
    backend
        .create_queue(create("i-plain", &[("DelaySeconds", "60")], now))
        .await
        .unwrap();
    for (body, group) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
        let mut request = SendRequest {
            body: Body::new(body),
            group_id: Some(group.into()),
            dedup_id: Some(body.into()),
            ..SendRequest::default()
        };
        request.sender_id = "AIDA".into();
        backend.send("i.fifo", request).await.unwrap();
    }
    backend
        .send(
            "i-plain",
            SendRequest {
                body: Body::new("later"),
                ..SendRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(bodies(&receive(backend, "i.fifo", 1).await), ["a1"]);
    clock.advance_millis(5_000);

    let overviews = backend.queue_overviews().await.unwrap();
    let names: Vec<&str> = overviews.iter().map(|q| &*q.name).collect();
    assert_eq!(names, ["i-plain", "i.fifo"]);
    let (plain, queue) = (&overviews[0], &overviews[1]);
    assert_eq!((plain.counts.delayed, plain.groups), (1, 0));
    assert_eq!(
        (
            queue.counts.visible,
            queue.counts.in_flight,
            queue.groups,
            queue.locked_groups
        ),
        (2, 1, 2, 1)
    );
    assert_eq!(queue.oldest_enqueued_at, Some(now));
    assert_eq!(&*queue.arn, format!("{ARN}i.fifo"));

    let all = backend
        .peek_messages("i.fifo", StateFilter::ALL, 10)
        .await
        .unwrap();
    let peeked: Vec<(&str, u32)> = all
        .iter()
        .map(|p| (&*p.message.body, p.message.receive_count))
        .collect();
    assert_eq!(peeked, [("a1", 1), ("a2", 0), ("b1", 0)]);
    assert!(
        matches!(all[0].state, crate::engine::queue::State::InFlight(until)
        if until == Timestamp(now.millis() + 30_000))
    );
    let visible = StateFilter {
        visible: true,
        in_flight: false,
        delayed: false,
    };
    let groups = backend.queue_groups("i.fifo", 10).await.unwrap();
    let groups: Vec<(&str, usize, usize)> = groups
        .iter()
        .map(|g| (&*g.group, g.messages, g.in_flight))
        .collect();
    assert_eq!(
        groups,
        [("a", 2, 1), ("b", 1, 0)],
        "a is locked, a2 waits behind a1"
    );
    assert_eq!(backend.queue_groups("i.fifo", 1).await.unwrap().len(), 1);
    assert!(backend
        .queue_groups("i-plain", 10)
        .await
        .unwrap()
        .is_empty());
    let one = backend.peek_messages("i.fifo", visible, 1).await.unwrap();
    assert_eq!(&*one[0].message.body, "a2");
    // Peeking held nothing: group a stays locked, b is received.
    assert_eq!(bodies(&receive(backend, "i.fifo", 10).await), ["b1"]);
    let missing = backend.peek_messages("nope", StateFilter::ALL, 1).await;
    assert_eq!(rejected(missing), EngineError::QueueDoesNotExist);

    // A peek answers at most PEEK_BYTES (8 MiB) of messages: 27 of 30 bodies of 300 kB.
    backend
        .create_queue(create("i-big", &[], clock.now()))
        .await
        .unwrap();
    let big = "x".repeat(300_000);
    for _ in 0..30 {
        let request = SendRequest {
            body: Body::new(big.as_str()),
            ..SendRequest::default()
        };
        backend.send("i-big", request).await.unwrap();
    }
    let peeked = backend
        .peek_messages("i-big", StateFilter::ALL, 100)
        .await
        .unwrap();
    assert_eq!(peeked.len(), 27);

    // Reset: every message and history goes, queues stay; a purge is allowed at once.
    backend.purge_queue("i-plain", clock.now()).await.unwrap();
    backend.reset(super::ResetScope::Messages).await.unwrap();
    let after: Vec<_> = backend.queue_overviews().await.unwrap();
    assert_eq!(after.len(), 3);
    assert!(after.iter().all(|q| q.counts == Default::default()));
    backend.purge_queue("i-plain", clock.now()).await.unwrap();
    let again = SendRequest {
        body: Body::new("a1"),
        group_id: Some("a".into()),
        dedup_id: Some("a1".into()),
        ..SendRequest::default()
    };
    let receipt = backend.send("i.fifo", again).await.unwrap();
    assert!(
        !receipt.duplicate,
        "the deduplication history went with the reset"
    );

    backend.reset(super::ResetScope::Everything).await.unwrap();
    assert!(backend.queue_overviews().await.unwrap().is_empty());
    assert!(backend.list_queues("").await.unwrap().is_empty());
}

/// Waits (moving the clock a tenth of a second at a time) until the source's newest move task
/// stops running; answers it.
async fn finished_task<B: super::MoveTasks>(
    backend: &B,
    source_arn: &str,
    clock: &ManualClock,
) -> crate::engine::move_task::MoveTask {
    use crate::engine::move_task::MoveStatus;
    for _ in 0..200 {
        let tasks = backend.list_move_tasks(source_arn).await.unwrap();
        if tasks[0].status != MoveStatus::Running {
            return tasks[0].clone();
        }
        clock.advance_millis(100);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("the move task did not finish");
}

/// Message move tasks: StartMessageMoveTask's refusals, one running task per source, moving
/// dead-lettered messages back to their source in group order with their receive counts
/// reset, and cancelling.
pub async fn move_tasks<B: QueueAdmin + Messages + super::MoveTasks>(
    backend: &B,
    clock: &ManualClock,
) {
    use super::StartMove;
    use crate::engine::move_task::MoveStatus;
    let now = || clock.now();
    let fifo = ("FifoQueue", "true");
    for name in ["dlq.fifo", "other"] {
        let attributes: &[(&str, &str)] = if name == "other" { &[] } else { &[fifo] };
        backend
            .create_queue(create(name, attributes, now()))
            .await
            .unwrap();
    }
    let redrive = format!(r#"{{"deadLetterTargetArn":"{ARN}dlq.fifo","maxReceiveCount":1}}"#);
    let attributes = [
        fifo,
        ("RedrivePolicy", &redrive),
        ("VisibilityTimeout", "10"),
    ];
    backend
        .create_queue(create("work.fifo", &attributes, now()))
        .await
        .unwrap();
    for (body, group) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
        backend
            .send("work.fifo", message(body, Some(group), Some(body)))
            .await
            .unwrap();
    }
    // Each received once, then dead-lettered by the next receive.
    for _ in 0..2 {
        receive(backend, "work.fifo", 10).await;
        clock.advance_millis(10_000);
    }
    assert!(receive(backend, "work.fifo", 10).await.is_empty());
    assert_eq!(counts(backend, "dlq.fifo", clock).await, (3, 0, 0));

    let start = |source: &'static str, destination: Option<&'static str>, rate: Option<i64>| {
        backend.start_move_task(StartMove {
            source_arn: source,
            destination_arn: destination,
            rate,
        })
    };
    let dlq = "arn:aws:sqs:us-east-1:000000000000:dlq.fifo";
    let work = "arn:aws:sqs:us-east-1:000000000000:work.fifo";
    let refusals = [
        (start(work, None, None).await, "Source queue must be configured as a Dead Letter Queue."),
        (start("dlq.fifo", None, None).await, "You must use this format to specify the SourceArn: arn:<partition>:<service>:<region>:<account-id>:<resource-id>"),
        (start("arn:aws:sqs:us-east-1:000000000000:nope", None, None).await, "The resource that you specified for the SourceArn parameter doesn't exist."),
        (start(dlq, Some("arn:aws:sqs:us-east-1:000000000000:other"), None).await, "The source queue and the destination queue must be of the same queue type."),
        (start(dlq, None, Some(501)).await, "Value 501 for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: Must be between 1 and 500."),
    ];
    for (result, text) in refusals {
        assert_eq!(rejected(result).to_string(), text);
    }

    // A slow task: a second for the source is refused while it runs; cancelled, it keeps
    // what it moved and moves no more.
    let slow = start(dlq, None, Some(1)).await.unwrap();
    assert_eq!((slow.status, slow.to_move), (MoveStatus::Running, 3));
    let second = rejected(start(dlq, None, None).await);
    assert!(
        second.to_string().contains("already a task running"),
        "{second:?}"
    );
    let moved = backend.cancel_move_task(&slow.handle()).await.unwrap();
    assert!(moved <= 1, "{moved}");
    clock.advance_millis(5_000);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let listed = backend.list_move_tasks(dlq).await.unwrap();
    assert_eq!(
        (listed[0].id.as_str(), listed[0].status, listed[0].moved),
        (slow.id.as_str(), MoveStatus::Cancelled, moved)
    );
    assert_eq!(
        counts(backend, "dlq.fifo", clock).await.0,
        3 - moved as usize
    );
    let again = rejected(backend.cancel_move_task(&slow.handle()).await);
    assert!(
        matches!(again, EngineError::ResourceNotFound(_)),
        "{again:?}"
    );
    let garbage = rejected(backend.cancel_move_task("not a handle").await);
    assert_eq!(
        garbage.to_string(),
        "Value for parameter TaskHandle is invalid."
    );

    // The rest, at the default rate, to completion.
    let task = start(dlq, None, None).await.unwrap();
    assert_eq!(task.to_move, 3 - moved);
    let done = finished_task(backend, dlq, clock).await;
    assert_eq!(done.id, task.id, "newest first");
    assert_eq!(
        (done.status, done.moved),
        (MoveStatus::Completed, 3 - moved)
    );
    assert_eq!(backend.list_move_tasks(dlq).await.unwrap()[1].id, slow.id);
    assert_eq!(counts(backend, "dlq.fifo", clock).await, (0, 0, 0));
    let back = receive(backend, "work.fifo", 10).await;
    assert_eq!(bodies(&back), ["a1", "a2", "b1"], "group order kept");
    for received in &back {
        assert_eq!(received.message.receive_count, 1, "counts start over");
        assert_eq!(received.message.dead_letter_source_arn(), None);
    }
}

fn publish_request(
    body: &str,
    region: &str,
    group: Option<&str>,
    dedup: Option<&str>,
) -> crate::engine::topic::PublishRequest {
    use crate::engine::message::{AttributeData, AttributeValue, MessageAttributes};
    crate::engine::topic::PublishRequest {
        message: body.into(),
        subject: None,
        structured: false,
        attributes: MessageAttributes::new(vec![(
            "region".into(),
            AttributeValue {
                data_type: "String".into(),
                data: AttributeData::String(region.into()),
            },
        )]),
        group_id: group.map(String::from),
        dedup_id: dedup.map(String::from),
        trace_header: None,
    }
}

/// Topics and fan-out into queues: creating and re-creating, subscribing with filter policies
/// and raw delivery, topic-wide deduplication and sequence numbers, envelopes (signed on
/// standard topics, with the certificate served), a subscription's dead-letter queue, batches
/// refused whole, attributes, tags, unsubscribing and deleting.
pub async fn topics<B: super::Backend>(backend: &B, clock: &ManualClock) {
    use super::{CreateTopic, Subscribe};
    const BASE: &str = "http://localhost:4566";
    let sns = "arn:aws:sns:us-east-1:000000000000:";
    let topic = |name: &str, attributes: &[(&str, &str)]| CreateTopic {
        name: name.into(),
        attributes: attrs(attributes),
        tags: Vec::new(),
    };
    let fifo_topic = [("FifoTopic", "true")];
    let arn = backend
        .create_topic(topic("prices.fifo", &fifo_topic))
        .await
        .unwrap();
    assert_eq!(&*arn, &format!("{sns}prices.fifo"));
    let again = backend
        .create_topic(topic("prices.fifo", &fifo_topic))
        .await
        .unwrap();
    assert_eq!(again, arn);
    let other = rejected(
        backend
            .create_topic(topic(
                "prices.fifo",
                &[("FifoTopic", "true"), ("ContentBasedDeduplication", "true")],
            ))
            .await,
    );
    assert_eq!(
        other.to_string(),
        "Invalid parameter: Attributes Reason: Topic already exists with different attributes"
    );
    let fifo = ("FifoQueue", "true");
    for name in ["eu.fifo", "all.fifo", "dlq.fifo"] {
        backend
            .create_queue(create(name, &[fifo], clock.now()))
            .await
            .unwrap();
    }
    let subscribe = |endpoint: String, attributes: &[(&str, &str)]| {
        backend.subscribe(Subscribe {
            topic_arn: &arn,
            protocol: "sqs",
            endpoint: Some(Box::leak(endpoint.into_boxed_str())),
            attributes: attrs(attributes),
            base_url: BASE,
        })
    };
    let eu_only = [
        ("RawMessageDelivery", "true"),
        ("FilterPolicy", r#"{"region":["eu"]}"#),
    ];
    let eu = subscribe(format!("{ARN}eu.fifo"), &eu_only).await.unwrap();
    assert!(!eu.pending);
    assert_eq!(
        subscribe(format!("{ARN}eu.fifo"), &eu_only)
            .await
            .unwrap()
            .arn,
        eu.arn
    );
    let all = subscribe(format!("{ARN}all.fifo"), &[]).await.unwrap();
    let redrive = format!(r#"{{"deadLetterTargetArn":"{ARN}dlq.fifo"}}"#);
    subscribe(format!("{ARN}gone.fifo"), &[("RedrivePolicy", &redrive)])
        .await
        .unwrap();

    let topic_arn = &arn;
    let publish = |body: &'static str, region: &'static str, dedup: &'static str| async move {
        let request = publish_request(body, region, Some("g"), Some(dedup));
        backend.publish(topic_arn, request, BASE).await.unwrap()
    };
    let first = publish("EU 1", "eu", "d1").await;
    let second = publish("US 1", "us", "d2").await;
    let repeat = publish("EU 1", "eu", "d1").await;
    assert!(!first.duplicate && !second.duplicate && repeat.duplicate);
    assert_eq!(
        (repeat.message_id.clone(), repeat.sequence_number),
        (first.message_id.clone(), first.sequence_number)
    );
    let (s1, s2) = (
        first.sequence_number.unwrap(),
        second.sequence_number.unwrap(),
    );
    assert!(s2 > s1 && s1.to_string().len() == 20, "{s1} {s2}");

    let raw = receive(backend, "eu.fifo", 10).await;
    assert_eq!(bodies(&raw), ["EU 1"], "filtered, raw");
    assert!(raw[0].message.attributes.get("region").is_some());
    let enveloped = receive(backend, "all.fifo", 10).await;
    assert_eq!(enveloped.len(), 2, "in publish order, unfiltered");
    let envelopes: Vec<serde_json::Value> = enveloped
        .iter()
        .map(|r| serde_json::from_str(&r.message.body).unwrap())
        .collect();
    assert_eq!(envelopes[0]["Type"], "Notification");
    assert_eq!(envelopes[0]["Message"], "EU 1");
    assert_eq!(envelopes[1]["Message"], "US 1");
    assert_eq!(envelopes[0]["MessageId"], &*first.message_id);
    assert_eq!(envelopes[0]["SequenceNumber"], s1.to_string());
    assert!(
        envelopes[0].get("Signature").is_none(),
        "FIFO envelopes are unsigned"
    );
    assert_eq!(
        counts(backend, "dlq.fifo", clock).await.0,
        2,
        "the missing queue's copies (the duplicate made none)"
    );

    // A batch with one entry breaking the FIFO rules is refused whole.
    let batch = vec![
        publish_request("ok", "eu", Some("b"), Some("d3")),
        publish_request("no group", "eu", None, Some("d4")),
    ];
    let refused = rejected(backend.publish_batch(&arn, batch, BASE).await);
    assert!(refused.to_string().contains("MessageGroupId"), "{refused}");
    assert!(receive(backend, "eu.fifo", 10).await.is_empty());

    let attributes: BTreeMap<String, String> = backend
        .topic_attributes(&arn)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(attributes["SubscriptionsConfirmed"], "3");
    assert_eq!(attributes["FifoTopic"], "true");
    backend
        .set_topic_attribute(&arn, "ContentBasedDeduplication", "true")
        .await
        .unwrap();
    backend
        .publish(&arn, publish_request("EU 2", "eu", Some("h"), None), BASE)
        .await
        .unwrap();
    assert_eq!(bodies(&receive(backend, "eu.fifo", 10).await), ["EU 2"]);
    let copy = receive(backend, "all.fifo", 10).await;
    assert!(copy[0].message.body.contains(r#""Message":"EU 2""#));

    backend
        .tag_topic(&arn, vec![("team".into(), "prices".into())])
        .await
        .unwrap();
    assert_eq!(backend.topic_tags(&arn).await.unwrap()["team"], "prices");
    backend
        .untag_topic(&arn, vec!["team".into()])
        .await
        .unwrap();
    assert!(backend.topic_tags(&arn).await.unwrap().is_empty());
    let missing = rejected(backend.topic_tags(&format!("{sns}nope")).await);
    assert!(
        matches!(missing, EngineError::TagResourceNotFound(_)),
        "{missing:?}"
    );

    let listed = backend.subscription_attributes(&all.arn).await.unwrap();
    assert!(listed.contains(&("Endpoint".into(), format!("{ARN}all.fifo"))));
    backend
        .set_subscription_attribute(&all.arn, "FilterPolicy", r#"{"region":["us"]}"#, BASE)
        .await
        .unwrap();
    backend
        .publish(&arn, publish_request("EU 3", "eu", Some("k"), None), BASE)
        .await
        .unwrap();
    assert!(
        receive(backend, "all.fifo", 10).await.is_empty(),
        "the new filter holds"
    );
    backend.unsubscribe(&all.arn, true, BASE).await.unwrap();
    backend.unsubscribe(&all.arn, true, BASE).await.unwrap();
    assert_eq!(
        backend.list_subscriptions(Some(&arn)).await.unwrap().len(),
        2
    );
    let gone = rejected(backend.subscription_attributes(&all.arn).await);
    assert!(matches!(gone, EngineError::NotFound(_)), "{gone:?}");

    // A standard topic signs its envelopes; the certificate is served.
    let news = backend.create_topic(topic("news", &[])).await.unwrap();
    backend
        .create_queue(create("inbox", &[], clock.now()))
        .await
        .unwrap();
    let fifo_queue = rejected(
        backend
            .subscribe(Subscribe {
                topic_arn: &news,
                protocol: "sqs",
                endpoint: Some(&format!("{ARN}eu.fifo")),
                attributes: Vec::new(),
                base_url: BASE,
            })
            .await,
    );
    assert!(
        fifo_queue
            .to_string()
            .contains("FIFO SQS Queues can not be subscribed"),
        "{fifo_queue}"
    );
    backend
        .subscribe(Subscribe {
            topic_arn: &news,
            protocol: "sqs",
            endpoint: Some(&format!("{ARN}inbox")),
            attributes: Vec::new(),
            base_url: BASE,
        })
        .await
        .unwrap();
    backend
        .publish(&news, publish_request("hello", "eu", None, None), BASE)
        .await
        .unwrap();
    let got = receive(backend, "inbox", 1).await;
    let envelope: serde_json::Value = serde_json::from_str(&got[0].message.body).unwrap();
    assert_eq!(envelope["Message"], "hello");
    assert!(envelope["Signature"]
        .as_str()
        .is_some_and(|s| !s.is_empty()));
    let certificate_url = envelope["SigningCertURL"].as_str().unwrap();
    let file = certificate_url.rsplit('/').next().unwrap();
    let pem = backend
        .signing_certificate(file)
        .await
        .unwrap()
        .expect("served");
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));

    backend.delete_topic(&arn).await.unwrap();
    backend.delete_topic(&arn).await.unwrap();
    assert_eq!(backend.list_topics().await.unwrap(), vec![news.clone()]);
    let deleted = rejected(backend.topic_attributes(&arn).await);
    assert!(matches!(deleted, EngineError::NotFound(_)), "{deleted:?}");
}
