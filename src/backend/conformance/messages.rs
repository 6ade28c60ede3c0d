//! Messages: sends, receives, deletes, visibility, FIFO groups, deduplication, delays,
//! dead-letter queues, receive attempts, retention and long polls.

use super::*;

/// Sending, receiving, deleting and visibility on standard and FIFO queues: the group lock,
/// deduplication, delays, dead-letter queues, receive attempts and long polls. Time moves on
/// `clock`, which the backend reads.
pub async fn messages<B: QueueAdmin + Messages + crate::backend::Work>(
    backend: &B,
    clock: &ManualClock,
) {
    standard_messages(backend, clock).await;
    visibility_changes(backend, clock).await;
    let last = fifo_groups_and_deduplication(backend, clock).await;
    fifo_window_and_batches(backend, clock, last).await;
    fifo_batch_delete(backend, clock).await;
    delays_and_dead_letters(backend, clock).await;
    receive_attempts(backend, clock).await;
    retention(backend, clock).await;
    long_polls(backend, clock).await;
}

/// A message enqueued longer ago than the retention period is gone, even from flight; a FIFO
/// group then continues with the next.
async fn retention<B: QueueAdmin + Messages + crate::backend::Work>(
    backend: &B,
    clock: &ManualClock,
) {
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
async fn standard_messages<B: QueueAdmin + Messages + crate::backend::Work>(
    backend: &B,
    clock: &ManualClock,
) {
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
    let first = receive(backend, "std", 10).await;
    let mut got = bodies(&first);
    got.sort();
    assert_eq!(got, ["a", "b", "c"]);
    assert!(first.iter().all(|r| r.message.receive_count == 1));
    assert!(receive(backend, "std", 10).await.is_empty());
    assert_eq!(counts(backend, "std", clock).await, (0, 3, 0));
    clock.advance_millis(30_000);
    let second = receive(backend, "std", 10).await;
    assert_eq!(second.len(), 3);
    assert!(second.iter().all(|r| r.message.receive_count == 2));
    // An earlier receive's handle still changes the visibility on a standard queue.
    let extended = messages
        .change_visibility("std", vec![(&first[0].receipt_handle, 100)])
        .await
        .unwrap();
    assert!(extended[0].is_ok());
    clock.advance_millis(31_000);
    let third = receive(backend, "std", 10).await;
    assert_eq!(third.len(), 2, "the extended one stays in flight");
    assert!(third.iter().all(|r| r.message.id != first[0].message.id));
    // A standard queue deletes with the earlier handle too.
    let handles: Vec<&str> = first.iter().map(|r| r.receipt_handle.as_str()).collect();
    let deleted = messages.delete("std", handles).await.unwrap();
    assert!(deleted.iter().all(Result::is_ok), "{deleted:?}");
    assert_eq!(counts(backend, "std", clock).await, (0, 0, 0));
    let garbage = messages
        .delete("std", vec!["AQEBnot-a-handle"])
        .await
        .unwrap();
    assert!(matches!(
        garbage[0],
        Err(EngineError::ReceiptHandleIsInvalid(_))
    ));
}

/// A ChangeMessageVisibility batch answers each entry in its own place: a timeout out of
/// range, a handle never issued, a total past 12 hours since the receive, a lapsed standard
/// message (accepted, nothing done) and a deleted one.
async fn visibility_changes<B: QueueAdmin + Messages + crate::backend::Work>(
    backend: &B,
    clock: &ManualClock,
) {
    let (admin, messages): (&dyn QueueAdmin, &dyn Messages) = (backend, backend);
    admin
        .create_queue(create("vis", &[], clock.now()))
        .await
        .unwrap();
    for body in ["a", "b", "c"] {
        messages
            .send("vis", message(body, None, None))
            .await
            .unwrap();
    }
    let run = receive(backend, "vis", 10).await;
    let handle = |body: &str| {
        let found = run.iter().find(|r| &*r.message.body == body);
        found.expect("received").receipt_handle.as_str()
    };
    let reason =
        |answer: &crate::engine::EngineResult<()>| answer.as_ref().unwrap_err().to_string();
    let answers = messages
        .change_visibility(
            "vis",
            vec![
                (handle("a"), 43_201),
                (handle("b"), 43_200),
                ("AQEBnot-a-handle", 5),
                (handle("c"), 60),
            ],
        )
        .await
        .unwrap();
    assert!(
        reason(&answers[0]).contains("VisibilityTimeout"),
        "{answers:?}"
    );
    assert!(answers[1].is_ok() && answers[3].is_ok(), "{answers:?}");
    assert!(matches!(
        answers[2],
        Err(EngineError::ReceiptHandleIsInvalid(_))
    ));
    // Twelve hours at most from the receive, however the time is asked for.
    clock.advance_millis(100_000);
    let beyond = messages
        .change_visibility("vis", vec![(handle("b"), 43_200)])
        .await
        .unwrap();
    assert!(
        reason(&beyond[0]).ends_with("beyond the limit [43200 seconds]"),
        "{beyond:?}"
    );
    // a's 30 s and c's 60 s have lapsed: c's change is accepted and does nothing.
    let lapsed = messages
        .change_visibility("vis", vec![(handle("c"), 600)])
        .await
        .unwrap();
    assert!(lapsed[0].is_ok());
    let back = receive(backend, "vis", 10).await;
    let mut back = bodies(&back);
    back.sort_unstable();
    assert_eq!(back, ["a", "c"], "b stays in flight for 12 hours");
    let deleted = messages.delete("vis", vec![handle("b")]).await.unwrap();
    assert!(deleted[0].is_ok());
    let gone = messages
        .change_visibility("vis", vec![(handle("b"), 5)])
        .await
        .unwrap();
    assert!(
        reason(&gone[0]).contains("not available for visibility timeout change"),
        "{gone:?}"
    );
}

/// FIFO: a group's run in order, groups in the order of their first message, the group lock,
/// deduplication. Answers the last send's sequence number.
async fn fifo_groups_and_deduplication<B: QueueAdmin + Messages + crate::backend::Work>(
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
    let run = receive(backend, "q.fifo", 10).await;
    assert_eq!(bodies(&run), ["a1", "a2", "b1"]);
    assert_eq!(run[0].message.id, receipts[0].message_id);
    // Both groups are locked while their messages are in flight.
    assert!(receive(backend, "q.fifo", 10).await.is_empty());
    let deleted = messages
        .delete("q.fifo", vec![&run[0].receipt_handle])
        .await
        .unwrap();
    assert!(deleted[0].is_ok());
    assert!(
        receive(backend, "q.fifo", 10).await.is_empty(),
        "a2 still holds g1"
    );
    // Visible again at once: back at the head of its group.
    let changed = messages
        .change_visibility("q.fifo", vec![(&run[1].receipt_handle, 0)])
        .await
        .unwrap();
    assert!(changed[0].is_ok());
    let back = receive(backend, "q.fifo", 10).await;
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
    assert_eq!(counts(backend, "q.fifo", clock).await, (0, 2, 0));
    receipts[2].sequence_number
}

/// A FIFO delete batch whose handles span groups, out of the groups' order, answers each handle
/// in its own place: deleted, expired or invalid; the groups it empties take new messages.
async fn fifo_batch_delete<B: QueueAdmin + Messages + crate::backend::Work>(
    backend: &B,
    clock: &ManualClock,
) {
    let (admin, messages): (&dyn QueueAdmin, &dyn Messages) = (backend, backend);
    admin
        .create_queue(create("batch.fifo", &[("FifoQueue", "true")], clock.now()))
        .await
        .unwrap();
    for (body, group) in [("z1", "z"), ("a1", "a"), ("a2", "a"), ("m1", "m")] {
        let request = message(body, Some(group), Some(body));
        messages.send("batch.fifo", request).await.unwrap();
    }
    let first = receive(backend, "batch.fifo", 10).await;
    let handle = |run: &[Received], body: &str| {
        let found = run.iter().find(|r| &*r.message.body == body);
        found.expect("received").receipt_handle.clone()
    };
    let stale = handle(&first, "m1");
    let changed = messages
        .change_visibility("batch.fifo", vec![(&stale, 0)])
        .await
        .unwrap();
    assert!(changed[0].is_ok());
    let again = receive(backend, "batch.fifo", 10).await;
    assert_eq!(bodies(&again), ["m1"]);
    let (z1, a1, a2) = (
        handle(&first, "z1"),
        handle(&first, "a1"),
        handle(&first, "a2"),
    );
    let answers = messages
        .delete(
            "batch.fifo",
            vec![&*z1, &*stale, "AQEBnot-a-handle", &*a2, &*a1],
        )
        .await
        .unwrap();
    assert!(answers[0].is_ok(), "{answers:?}");
    let expired = answers[1].as_ref().unwrap_err().to_string();
    assert!(
        expired.ends_with("The receipt handle has expired."),
        "{expired}"
    );
    assert!(matches!(
        answers[2],
        Err(EngineError::ReceiptHandleIsInvalid(_))
    ));
    assert!(answers[3].is_ok() && answers[4].is_ok(), "{answers:?}");
    assert_eq!(counts(backend, "batch.fifo", clock).await, (0, 1, 0));
    for (body, group) in [("a3", "a"), ("z2", "z")] {
        let request = message(body, Some(group), Some(body));
        messages.send("batch.fifo", request).await.unwrap();
    }
    let next = receive(backend, "batch.fifo", 10).await;
    let mut next = bodies(&next);
    next.sort_unstable();
    assert_eq!(next, ["a3", "z2"]);
}

/// After five minutes a deduplication id is new again; a FIFO batch missing a group fails whole.
async fn fifo_window_and_batches<B: QueueAdmin + Messages + crate::backend::Work>(
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
    let all = receive(backend, "q.fifo", 10).await;
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
    assert_eq!(bodies(&receive(backend, "q.fifo", 10).await), ["m1"]);
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
async fn receive_attempts<B: QueueAdmin + Messages + crate::backend::Work>(
    backend: &B,
    clock: &ManualClock,
) {
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
    assert!(first.iter().all(|r| !r.replayed));
    assert!(retried.iter().all(|r| r.replayed), "a retry says it is one");
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
    assert!(!fresh[0].replayed, "received again, not replayed");
}

/// A queue's delay holds messages back; a message received maxReceiveCount times moves to
/// the dead-letter queue on the next receive, keeping its id and count.
async fn delays_and_dead_letters<B: QueueAdmin + Messages + crate::backend::Work>(
    backend: &B,
    clock: &ManualClock,
) {
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
async fn long_polls<B: QueueAdmin + Messages + crate::backend::Work>(
    backend: &B,
    clock: &ManualClock,
) {
    backend
        .create_queue(create("polled", &[], clock.now()))
        .await
        .unwrap();
    let guard = std::time::Duration::from_secs(10);
    let mut poll = std::pin::pin!(backend.receive("polled", ReceiveRequest::default(), Some(20)));
    assert!(
        still_waiting(poll.as_mut()).await,
        "an empty queue's poll waits"
    );
    backend
        .send("polled", message("woken", None, None))
        .await
        .unwrap();
    let got = tokio::time::timeout(guard, poll).await.expect("woken");
    assert_eq!(bodies(&got.unwrap()), ["woken"]);

    let mut poll = std::pin::pin!(backend.receive("polled", ReceiveRequest::default(), Some(20)));
    assert!(
        still_waiting(poll.as_mut()).await,
        "an empty queue's poll waits"
    );
    clock.advance_millis(19_999);
    assert!(still_waiting(poll.as_mut()).await, "the wait is not over");
    clock.advance_millis(1);
    let got = tokio::time::timeout(guard, poll).await.expect("ended");
    assert!(got.unwrap().is_empty());
}

/// Polls a future once: whether it is still waiting (and has not answered). A poll that has
/// found nothing to receive is parked by then, so what happens next can only wake it.
async fn still_waiting<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> bool {
    let mut future = Some(future);
    std::future::poll_fn(|cx| {
        let pending = future.take().is_some_and(|f| f.poll(cx).is_pending());
        std::task::Poll::Ready(pending)
    })
    .await
}
