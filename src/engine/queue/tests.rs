//! Queue rules, each checked with chosen timestamps (no sleeping).

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::*;
use crate::engine::queue::operations::ReceiveRequest;

fn attrs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn fifo(extra: &[(&str, &str)]) -> Queue {
    let mut all = vec![("FifoQueue", "true")];
    all.extend_from_slice(extra);
    let config = QueueConfig::for_create("q.fifo", &attrs(&all), Timestamp(0)).unwrap();
    Queue::new(
        "q.fifo",
        "arn:aws:sqs:us-east-1:000000000000:q.fifo".into(),
        1,
        config,
    )
}

fn standard(extra: &[(&str, &str)]) -> Queue {
    let config = QueueConfig::for_create("q", &attrs(extra), Timestamp(0)).unwrap();
    Queue::new(
        "q",
        "arn:aws:sqs:us-east-1:000000000000:q".into(),
        1,
        config,
    )
}

fn msg(body: &str, group: &str, dedup: &str) -> SendRequest {
    SendRequest {
        body: body.into(),
        group_id: Some(group.into()),
        dedup_id: Some(dedup.into()),
        sender_id: "tester".into(),
        ..Default::default()
    }
}

fn plain(body: &str) -> SendRequest {
    SendRequest {
        body: body.into(),
        sender_id: "tester".into(),
        ..Default::default()
    }
}

fn receive(q: &mut Queue, max: i64, now: u64) -> Vec<Received> {
    q.tick(Timestamp(now));
    let req = ReceiveRequest {
        max_messages: Some(max),
        ..Default::default()
    };
    q.receive(&req, None, Timestamp(now)).unwrap().received
}

fn bodies(d: &[Received]) -> Vec<&str> {
    d.iter().map(|d| &*d.message.body).collect()
}

#[test]
fn fifo_batch_receive_fills_from_one_group_first_in_first_ready_order() {
    let mut q = fifo(&[]);
    for (body, group) in [
        ("a1", "a"),
        ("b1", "b"),
        ("a2", "a"),
        ("c1", "c"),
        ("b2", "b"),
    ] {
        q.send(msg(body, group, body), Timestamp(0)).unwrap();
    }
    let got = receive(&mut q, 10, 1);
    assert_eq!(bodies(&got), ["a1", "a2", "b1", "b2", "c1"]);
}

#[test]
fn group_lock_blocks_messages_behind_an_inflight_one() {
    let mut q = fifo(&[]);
    for b in ["1", "2", "3"] {
        q.send(msg(b, "g", b), Timestamp(0)).unwrap();
    }
    q.send(msg("other", "h", "o"), Timestamp(0)).unwrap();
    let first = receive(&mut q, 1, 0);
    assert_eq!(bodies(&first), ["1"]);
    // Group g is locked while "1" is in flight; only h is available.
    assert_eq!(bodies(&receive(&mut q, 10, 1)), ["other"]);
    assert!(receive(&mut q, 10, 2).is_empty());
    q.delete(&first[0].receipt_handle, Timestamp(3)).unwrap();
    assert_eq!(bodies(&receive(&mut q, 10, 3)), ["2", "3"]);
}

#[test]
fn visibility_expiry_returns_message_to_head_of_its_group() {
    let mut q = fifo(&[("VisibilityTimeout", "10")]);
    for b in ["1", "2"] {
        q.send(msg(b, "g", b), Timestamp(0)).unwrap();
    }
    let got = receive(&mut q, 1, 0);
    assert_eq!(bodies(&got), ["1"]);
    assert!(receive(&mut q, 10, 9_999).is_empty());
    let again = receive(&mut q, 10, 10_000);
    assert_eq!(bodies(&again), ["1", "2"]);
    assert_eq!(again[0].message.receive_count, 2);
    assert_eq!(again[0].message.first_receive_at, Some(Timestamp(0)));
    // The first handle expired: FIFO rejects it.
    let err = q
        .delete(&got[0].receipt_handle, Timestamp(10_001))
        .unwrap_err();
    assert!(matches!(err, EngineError::InvalidParameterValue(m) if m.contains("has expired")));
}

#[test]
fn only_messages_before_the_first_invisible_one_are_receivable() {
    let mut q = fifo(&[("VisibilityTimeout", "10")]);
    for b in ["1", "2", "3"] {
        q.send(msg(b, "g", b), Timestamp(0)).unwrap();
    }
    let got = receive(&mut q, 3, 0);
    // Keep "2" invisible longer; after the others expire only "1" may be received.
    q.change_visibility(&got[1].receipt_handle, 100, Timestamp(1))
        .unwrap();
    assert_eq!(bodies(&receive(&mut q, 10, 10_000)), ["1"]);
}

#[test]
fn change_visibility_zero_puts_head_back_while_others_stay_locked() {
    let mut q = fifo(&[]);
    for b in ["1", "2"] {
        q.send(msg(b, "g", b), Timestamp(0)).unwrap();
    }
    let got = receive(&mut q, 2, 0);
    q.change_visibility(&got[0].receipt_handle, 0, Timestamp(1))
        .unwrap();
    assert_eq!(bodies(&receive(&mut q, 10, 1)), ["1"]);
    assert!(receive(&mut q, 10, 2).is_empty(), "2 is still in flight");
}

#[test]
fn dedup_window_survives_delete_and_expires_after_five_minutes() {
    let mut q = fifo(&[]);
    let first = q.send(msg("x", "g", "d"), Timestamp(0)).unwrap();
    let got = receive(&mut q, 1, 1);
    q.delete(&got[0].receipt_handle, Timestamp(2)).unwrap();
    let dup = q.send(msg("y", "g", "d"), Timestamp(299_999)).unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.message_id, first.message_id);
    assert_eq!(dup.sequence_number, first.sequence_number);
    assert!(receive(&mut q, 10, 299_999).is_empty());
    q.tick(Timestamp(300_000));
    let fresh = q.send(msg("z", "g", "d"), Timestamp(300_000)).unwrap();
    assert!(!fresh.duplicate);
    assert!(fresh.sequence_number > first.sequence_number);
    assert_eq!(bodies(&receive(&mut q, 10, 300_001)), ["z"]);
}

#[test]
fn dedup_scope_message_group_keys_on_group_and_id() {
    let mut q = fifo(&[("DeduplicationScope", "messageGroup")]);
    q.send(msg("a", "g1", "d"), Timestamp(0)).unwrap();
    assert!(!q.send(msg("b", "g2", "d"), Timestamp(0)).unwrap().duplicate);
    assert!(q.send(msg("c", "g1", "d"), Timestamp(0)).unwrap().duplicate);
    let mut queue_scope = fifo(&[]);
    queue_scope.send(msg("a", "g1", "d"), Timestamp(0)).unwrap();
    assert!(
        queue_scope
            .send(msg("b", "g2", "d"), Timestamp(0))
            .unwrap()
            .duplicate
    );
}

#[test]
fn content_based_dedup_hashes_the_body() {
    let mut q = fifo(&[("ContentBasedDeduplication", "true")]);
    let mut m = msg("hello", "g", "");
    m.dedup_id = None;
    q.send(m.clone(), Timestamp(0)).unwrap();
    assert!(q.send(m, Timestamp(1)).unwrap().duplicate);
    let got = receive(&mut q, 1, 2);
    assert_eq!(
        got[0].message.dedup_id.as_deref(),
        Some("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
    );
}

#[test]
fn fifo_send_rules() {
    let mut q = fifo(&[]);
    let mut no_group = msg("x", "g", "d");
    no_group.group_id = None;
    assert_eq!(
        q.send(no_group, Timestamp(0)).unwrap_err(),
        EngineError::missing("MessageGroupId")
    );
    let mut no_dedup = msg("x", "g", "d");
    no_dedup.dedup_id = None;
    assert!(
        matches!(q.send(no_dedup, Timestamp(0)), Err(EngineError::InvalidParameterValue(m)) if m.contains("ContentBasedDeduplication"))
    );
    let mut delayed = msg("x", "g", "d");
    delayed.delay_seconds = Some(2);
    assert!(
        matches!(q.send(delayed, Timestamp(0)), Err(EngineError::InvalidParameterValue(m)) if m.starts_with("Value 2 for parameter DelaySeconds"))
    );
    let mut zero = msg("x", "g", "d");
    zero.delay_seconds = Some(0);
    assert!(q.send(zero, Timestamp(0)).is_ok());
}

#[test]
fn stored_bytes_follow_the_messages_through_receive_delete_and_purge() {
    let mut q = fifo(&[("VisibilityTimeout", "1")]);
    let each = |body: &str| body.len() as u64 + LOGGED_BYTES;
    q.send(msg("first", "g", "1"), Timestamp(0)).unwrap();
    q.send(msg("second body", "h", "2"), Timestamp(0)).unwrap();
    q.send(msg("first", "g", "1"), Timestamp(0)).unwrap(); // a duplicate stores nothing
    assert_eq!(q.stored_bytes(), each("first") + each("second body"));
    let got = receive(&mut q, 10, 1);
    assert_eq!(got.len(), 2);
    // In flight, then back after the visibility timeout: still stored once.
    assert_eq!(receive(&mut q, 10, 2_000).len(), 2);
    assert_eq!(q.stored_bytes(), each("first") + each("second body"));
    let again = receive(&mut q, 10, 4_000);
    q.delete(&again[0].receipt_handle, Timestamp(4_001))
        .unwrap();
    assert_eq!(q.stored_bytes(), each(&again[1].message.body));
    q.purge(Timestamp(4_002)).unwrap();
    assert_eq!(q.stored_bytes(), 0);
}

#[test]
fn purge_clears_dedup_history_and_is_limited_to_once_a_minute() {
    let mut q = fifo(&[]);
    q.send(msg("x", "g", "d"), Timestamp(0)).unwrap();
    q.purge(Timestamp(1)).unwrap();
    assert!(q.is_empty());
    assert!(matches!(
        q.purge(Timestamp(60_000)),
        Err(EngineError::PurgeQueueInProgress(_))
    ));
    assert!(!q.send(msg("y", "g", "d"), Timestamp(2)).unwrap().duplicate);
    q.purge(Timestamp(60_001)).unwrap();
}

#[test]
fn queue_delay_holds_fifo_messages_back() {
    let mut q = fifo(&[("DelaySeconds", "5")]);
    q.send(msg("x", "g", "d"), Timestamp(0)).unwrap();
    assert_eq!(q.counts().delayed, 1);
    assert!(receive(&mut q, 1, 4_999).is_empty());
    assert_eq!(q.next_deadline(), Some(Timestamp(5_000)));
    assert_eq!(bodies(&receive(&mut q, 1, 5_000)), ["x"]);
}

/// The queue's delay set to `seconds` at `now`, as SetQueueAttributes sets it.
fn set_delay(q: &mut Queue, seconds: &str, now: u64) {
    let before = q.config.delay_seconds;
    q.config
        .apply(&attrs(&[("DelaySeconds", seconds)]))
        .unwrap();
    q.delay_changed(before, Timestamp(now));
}

#[test]
fn a_fifo_queues_delay_changes_for_messages_not_yet_received() {
    let mut q = fifo(&[("DelaySeconds", "100")]);
    q.send(msg("a", "g", "1"), Timestamp(0)).unwrap();
    // Shortened: available from its send plus the new delay (30 s), not the old one (100 s).
    set_delay(&mut q, "30", 10_000);
    assert!(receive(&mut q, 10, 29_999).is_empty());
    assert_eq!(q.next_deadline(), Some(Timestamp(30_000)));
    assert_eq!(bodies(&receive(&mut q, 10, 30_000)), ["a"]);
    // Lengthened: messages sent since and visible already are held back again; the one in
    // flight (delivered) is not.
    set_delay(&mut q, "0", 31_000);
    q.send(msg("b", "h", "2"), Timestamp(40_000)).unwrap();
    q.send(msg("c", "k", "3"), Timestamp(40_000)).unwrap();
    set_delay(&mut q, "20", 50_000);
    assert_eq!((q.counts().delayed, q.counts().in_flight), (2, 1));
    assert!(receive(&mut q, 10, 50_000).is_empty());
    let received = receive(&mut q, 10, 60_000);
    let mut due = bodies(&received);
    due.sort();
    assert_eq!(due, ["a", "b", "c"]);
    // Set to none, nothing delayed is left.
    q.send(msg("d", "m", "4"), Timestamp(70_000)).unwrap();
    assert_eq!(q.counts().delayed, 1);
    set_delay(&mut q, "0", 70_001);
    assert_eq!(q.counts().delayed, 0);
    assert_eq!(bodies(&receive(&mut q, 10, 70_001)), ["d"]);
}

#[test]
fn a_standard_queues_delay_changes_only_later_sends() {
    let mut q = standard(&[("DelaySeconds", "100")]);
    q.send(plain("a"), Timestamp(0)).unwrap();
    q.send(plain("b"), Timestamp(0)).unwrap();
    set_delay(&mut q, "0", 10_000);
    assert!(receive(&mut q, 10, 10_000).is_empty());
    set_delay(&mut q, "900", 10_000);
    assert_eq!(bodies(&receive(&mut q, 10, 100_000)).len(), 2);
}

#[test]
fn standard_per_message_delay_and_stale_handle_delete() {
    let mut q = standard(&[("VisibilityTimeout", "1")]);
    let mut m = plain("later");
    m.delay_seconds = Some(3);
    q.send(m, Timestamp(0)).unwrap();
    q.send(plain("now"), Timestamp(0)).unwrap();
    assert_eq!(bodies(&receive(&mut q, 10, 0)), ["now"]);
    let got = receive(&mut q, 10, 3_000);
    let mut seen = bodies(&got);
    seen.sort();
    assert_eq!(seen, ["later", "now"]);
    // Handles expired: a standard queue still deletes.
    q.delete(&got[0].receipt_handle, Timestamp(10_000)).unwrap();
    assert_eq!(q.len(), 1);
    assert!(matches!(
        q.send(msg("x", "g", "d"), Timestamp(0)),
        Err(EngineError::InvalidParameterValue(m)) if m.contains("MessageDeduplicationId")
    ));
}

#[test]
fn receipt_handles_from_elsewhere_are_invalid() {
    let mut q = standard(&[]);
    q.send(plain("x"), Timestamp(0)).unwrap();
    let got = receive(&mut q, 1, 0);
    let other = Queue::new("o", "arn".into(), 99, QueueConfig::new(false, Timestamp(0)));
    // Another queue's handle under the same key, and this queue's numbers under another key.
    let foreign = receipt::Receipt {
        queue_uid: other.uid,
        seq: 1,
        receive_no: 1,
    }
    .encode(&q.receipt_key);
    let forged = receipt::Receipt {
        queue_uid: q.uid,
        seq: 1,
        receive_no: 1,
    }
    .encode(&other.receipt_key);
    for handle in [&foreign, &forged] {
        assert!(matches!(
            q.delete(handle, Timestamp(1)),
            Err(EngineError::ReceiptHandleIsInvalid(_))
        ));
    }
    assert!(matches!(
        q.delete("nonsense", Timestamp(1)),
        Err(EngineError::ReceiptHandleIsInvalid(_))
    ));
    q.delete(&got[0].receipt_handle, Timestamp(1)).unwrap();
    // Deleting twice succeeds; changing visibility of a deleted message does not.
    q.delete(&got[0].receipt_handle, Timestamp(2)).unwrap();
    assert!(matches!(
        q.change_visibility(&got[0].receipt_handle, 5, Timestamp(2)),
        Err(EngineError::InvalidParameterValue(m)) if m.contains("does not exist")
    ));
}

#[test]
fn retention_drops_messages_even_in_flight() {
    let mut q = standard(&[
        ("MessageRetentionPeriod", "60"),
        ("VisibilityTimeout", "600"),
    ]);
    q.send(plain("x"), Timestamp(0)).unwrap();
    receive(&mut q, 1, 0);
    q.tick(Timestamp(59_999));
    assert_eq!(q.counts().in_flight, 1);
    q.tick(Timestamp(60_000));
    assert!(q.is_empty());
    assert_eq!(q.counts(), Counts::default());
}

#[test]
fn receive_attempt_id_replays_same_handles_until_invalidated() {
    let mut q = fifo(&[]);
    for b in ["1", "2"] {
        q.send(msg(b, "g", b), Timestamp(0)).unwrap();
    }
    let req = ReceiveRequest {
        max_messages: Some(10),
        attempt_id: Some("attempt".into()),
        ..Default::default()
    };
    let first = q.receive(&req, None, Timestamp(1)).unwrap().received;
    let retry = q.receive(&req, None, Timestamp(2)).unwrap().received;
    let handles = |d: &[Received]| {
        d.iter()
            .map(|d| d.receipt_handle.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(handles(&first), handles(&retry));
    assert_eq!(
        retry[0].message.receive_count, 1,
        "a replay is not a new receive"
    );
    assert!(first.iter().all(|r| !r.replayed));
    assert!(retry.iter().all(|r| r.replayed), "a replay says so");
    q.change_visibility(&first[0].receipt_handle, 0, Timestamp(3))
        .unwrap();
    let after = q.receive(&req, None, Timestamp(4)).unwrap().received;
    assert_eq!(bodies(&after), ["1"]);
    assert_ne!(after[0].receipt_handle, first[0].receipt_handle);
}

#[test]
fn inflight_limit_stops_fifo_silently_and_standard_with_overlimit() {
    let mut q = fifo(&[]);
    q.inflight_limit = 2;
    for (i, g) in ["a", "b", "c"].iter().enumerate() {
        q.send(msg(g, g, &i.to_string()), Timestamp(0)).unwrap();
    }
    assert_eq!(receive(&mut q, 10, 0).len(), 2);
    assert!(receive(&mut q, 10, 0).is_empty());
    let mut s = standard(&[]);
    s.inflight_limit = 1;
    s.send(plain("a"), Timestamp(0)).unwrap();
    s.send(plain("b"), Timestamp(0)).unwrap();
    assert_eq!(receive(&mut s, 10, 0).len(), 1);
    let req = ReceiveRequest::default();
    assert!(matches!(
        s.receive(&req, None, Timestamp(0)),
        Err(EngineError::OverLimit(_))
    ));
}

#[test]
fn dead_lettering_keeps_receive_count_and_unlocks_group() {
    let mut q = fifo(&[("VisibilityTimeout", "1")]);
    q.send(msg("1", "g", "1"), Timestamp(0)).unwrap();
    q.send(msg("2", "g", "2"), Timestamp(0)).unwrap();
    let req = ReceiveRequest {
        max_messages: Some(1),
        ..Default::default()
    };
    let first = q.receive(&req, Some(1), Timestamp(0)).unwrap();
    assert_eq!(bodies(&first.received), ["1"]);
    q.tick(Timestamp(1_000));
    let second = q.receive(&req, Some(1), Timestamp(1_000)).unwrap();
    assert_eq!(second.dead_letters.len(), 1);
    assert_eq!(second.dead_letters[0].receive_count, 1);
    assert_eq!(
        bodies(&second.received),
        ["2"],
        "the group moves on once its head is dead-lettered"
    );
    let mut dlq = fifo(&[]);
    let moved = second.dead_letters.into_iter().next().unwrap();
    dlq.accept_moved(
        moved,
        Moved::DeadLetter("arn:source".into()),
        Timestamp(1_000),
    );
    let got = receive(&mut dlq, 1, 1_001);
    assert_eq!(got[0].message.receive_count, 2);
    assert_eq!(
        got[0].message.dead_letter_source_arn().map(|a| &**a),
        Some("arn:source")
    );
}

#[test]
fn batch_send_whole_request_rules() {
    let mut q = fifo(&[]);
    let mut missing = msg("x", "g", "d");
    missing.group_id = None;
    assert!(q
        .send_batch(vec![msg("a", "g", "a"), missing], Timestamp(0))
        .is_err());
    assert!(q.is_empty(), "nothing is stored when the whole batch fails");
    let mut big = msg(&"x".repeat(2_000), "g", "big");
    big.body = "x".repeat(1_048_577).into();
    let results = q
        .send_batch(vec![msg("a", "g", "a"), big], Timestamp(0))
        .unwrap();
    assert!(results[0].is_ok());
    assert!(
        matches!(&results[1], Err(EngineError::InvalidParameterValue(m)) if m.contains("cannot be validated"))
    );
}

#[test]
fn visibility_total_is_capped_at_twelve_hours() {
    let mut q = standard(&[]);
    q.send(plain("x"), Timestamp(0)).unwrap();
    let got = receive(&mut q, 1, 0);
    q.change_visibility(&got[0].receipt_handle, 43_200, Timestamp(0))
        .unwrap();
    assert!(q
        .change_visibility(&got[0].receipt_handle, 43_200, Timestamp(1_000))
        .is_err());
}

#[derive(Clone, Debug)]
enum Op {
    Send(u8),
    Receive(u8),
    DeleteOldest,
    ExpireAll,
    Reset(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4).prop_map(Op::Send),
        (1u8..=10).prop_map(Op::Receive),
        Just(Op::DeleteOldest),
        Just(Op::ExpireAll),
        (0u8..8).prop_map(Op::Reset),
    ]
}

proptest! {
    /// Per-group order, one in-flight run per group, no loss, no delivery twice while in flight.
    #[test]
    fn fifo_invariants(ops in proptest::collection::vec(op(), 1..120)) {
        let mut q = fifo(&[("VisibilityTimeout", "30")]);
        let mut now = 0u64;
        let mut sent: HashMap<String, Vec<String>> = HashMap::new();
        let mut deleted: HashSet<String> = HashSet::new();
        let mut in_flight: Vec<Received> = Vec::new();
        let mut counter = 0;
        for op in ops {
            now += 1;
            q.tick(Timestamp(now));
            match op {
                Op::Send(g) => {
                    counter += 1;
                    let body = format!("{g}-{counter}");
                    q.send(msg(&body, &g.to_string(), &body), Timestamp(now)).unwrap();
                    sent.entry(g.to_string()).or_default().push(body);
                }
                Op::Receive(n) => {
                    let got = receive(&mut q, n as i64, now);
                    for d in &got {
                        let group = d.message.group_id.as_deref().unwrap().to_string();
                        // The delivered message is the oldest undeleted one of its group not already held.
                        prop_assert!(!in_flight.iter().any(|f| f.message.group_id.as_deref() == Some(&*group) && !got.iter().any(|g| g.receipt_handle == f.receipt_handle)),
                            "group {} delivered while another of its messages is in flight", group);
                        prop_assert!(!in_flight.iter().any(|f| f.message.id == d.message.id), "delivered twice while in flight");
                    }
                    // Within the response, each group's messages are the next ones in send order.
                    let mut by_group: HashMap<String, Vec<String>> = HashMap::new();
                    for d in &got {
                        by_group.entry(d.message.group_id.as_deref().unwrap().into()).or_default().push(d.message.body.to_string());
                    }
                    for (group, got_bodies) in by_group {
                        let pending: Vec<String> = sent[&group].iter().filter(|b| !deleted.contains(*b)).cloned().collect();
                        prop_assert_eq!(&pending[..got_bodies.len()], &got_bodies[..]);
                    }
                    in_flight.extend(got);
                }
                Op::DeleteOldest => {
                    if !in_flight.is_empty() {
                        let d = in_flight.remove(0);
                        q.delete(&d.receipt_handle, Timestamp(now)).unwrap();
                        deleted.insert(d.message.body.to_string());
                    }
                }
                Op::ExpireAll => {
                    now += 30_000;
                    q.tick(Timestamp(now));
                    in_flight.clear();
                }
                Op::Reset(i) => {
                    if let Some(d) = in_flight.get(i as usize).cloned() {
                        q.change_visibility(&d.receipt_handle, 0, Timestamp(now)).unwrap();
                        // The whole group's later messages stay locked until they expire; treat them as held.
                        in_flight.retain(|f| f.receipt_handle != d.receipt_handle);
                        // A reset message becomes receivable only when nothing before it is in flight,
                        // so later messages of the group remain "in flight" for the invariant.
                        let group = d.message.group_id.clone();
                        if in_flight.iter().any(|f| f.message.group_id == group) {
                            // Make the bookkeeping conservative: expire everything.
                            now += 30_000;
                            q.tick(Timestamp(now));
                            in_flight.clear();
                        }
                    }
                }
            }
        }
        // No loss: draining yields every undeleted message exactly once, in group order.
        now += 30_000;
        let mut drained: HashMap<String, Vec<String>> = HashMap::new();
        loop {
            let got = receive(&mut q, 10, now);
            if got.is_empty() { break; }
            for d in got {
                drained.entry(d.message.group_id.as_deref().unwrap().into()).or_default().push(d.message.body.to_string());
                q.delete(&d.receipt_handle, Timestamp(now)).unwrap();
            }
        }
        for (group, bodies) in sent {
            let expected: Vec<String> = bodies.into_iter().filter(|b| !deleted.contains(b)).collect();
            prop_assert_eq!(drained.remove(&group).unwrap_or_default(), expected);
        }
        prop_assert!(q.is_empty());
    }
}

#[test]
fn receive_attempt_ids_expire_after_five_minutes() {
    let mut q = fifo(&[("VisibilityTimeout", "600")]);
    q.send(msg("1", "g", "1"), Timestamp(0)).unwrap();
    q.send(msg("2", "h", "2"), Timestamp(0)).unwrap();
    let req = ReceiveRequest {
        max_messages: Some(1),
        attempt_id: Some("a".into()),
        ..Default::default()
    };
    let first = q.receive(&req, None, Timestamp(0)).unwrap().received;
    q.tick(Timestamp(DEDUP_WINDOW_MS - 1));
    let retry = q
        .receive(&req, None, Timestamp(DEDUP_WINDOW_MS - 1))
        .unwrap()
        .received;
    assert_eq!(
        retry[0].receipt_handle, first[0].receipt_handle,
        "inside the window: same receive"
    );
    q.tick(Timestamp(DEDUP_WINDOW_MS));
    let later = q
        .receive(&req, None, Timestamp(DEDUP_WINDOW_MS))
        .unwrap()
        .received;
    assert_eq!(
        bodies(&later),
        ["2"],
        "after the window the id starts a fresh receive"
    );
}

#[test]
fn a_recycled_change_list_is_reused_but_never_replaces_pending_changes() {
    let mut q = fifo(&[]);
    q.enable_log();
    q.send(msg("a", "g", "1"), Timestamp(0)).unwrap();
    let logged = q.take_changes();
    assert!(!logged.is_empty());
    let buffer = logged.as_ptr();
    q.recycle_changes(logged);
    q.send(msg("b", "g", "2"), Timestamp(1)).unwrap();
    let next = q.take_changes();
    assert!(!next.is_empty());
    assert_eq!(
        next.as_ptr(),
        buffer,
        "the logged list's buffer is filled again"
    );

    // Changes recorded before the list comes back must stay where they are.
    q.send(msg("c", "g", "3"), Timestamp(2)).unwrap();
    q.recycle_changes(next);
    assert!(!q.take_changes().is_empty());

    // A huge list (a purge of many messages) is dropped rather than kept.
    let mut huge = Vec::with_capacity(10_000);
    huge.push(changes::QueueChange::Purge { at: Timestamp(3) });
    q.recycle_changes(huge);
    q.send(msg("d", "g", "4"), Timestamp(4)).unwrap();
    assert!(q.take_changes().capacity() < 10_000);
}

#[test]
fn activity_counts_what_happened_to_messages() {
    let mut q = fifo(&[("VisibilityTimeout", "1")]);
    q.send(msg("1", "g", "1"), Timestamp(0)).unwrap();
    q.send(msg("1 again", "g", "1"), Timestamp(0)).unwrap();
    q.send(msg("2", "h", "2"), Timestamp(0)).unwrap();
    q.send(msg("3", "i", "3"), Timestamp(0)).unwrap();
    let req = ReceiveRequest {
        max_messages: Some(10),
        ..Default::default()
    };
    let got = q.receive(&req, Some(1), Timestamp(0)).unwrap();
    assert_eq!(bodies(&got.received), ["1", "2", "3"]);
    q.delete(&got.received[1].receipt_handle, Timestamp(0))
        .unwrap();
    // Back from flight, "1" and "3" have been received as often as the policy allows.
    q.tick(Timestamp(1_000));
    let again = q.receive(&req, Some(1), Timestamp(1_000)).unwrap();
    assert_eq!(again.dead_letters.len(), 2);
    let a = q.activity;
    assert_eq!(
        (
            a.sent,
            a.deduplicated,
            a.received,
            a.deleted,
            a.dead_lettered
        ),
        (3, 1, 3, 1, 2)
    );

    let mut short = standard(&[("MessageRetentionPeriod", "60")]);
    short.send(plain("old"), Timestamp(0)).unwrap();
    short.tick(Timestamp(61_000));
    assert_eq!((short.activity.sent, short.activity.expired), (1, 1));
}
