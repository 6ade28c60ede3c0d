use super::*;

fn delivery(sub: &str, group: Option<&str>, body: &str) -> Delivery {
    Delivery {
        kind: Kind::Notification,
        subscription_arn: sub.into(),
        topic_arn: "arn:aws:sns:us-east-1:000000000000:t".into(),
        endpoint: "http://127.0.0.1:1/".into(),
        message_id: body.into(),
        body: body.into(),
        content_type: "text/plain".into(),
        raw: false,
        group_id: group.map(String::from),
        dedup_id: None,
        sequence_number: None,
        attributes: MessageAttributes::default(),
        fallback_envelope: None,
        dead_letter_arn: None,
        fifo_topic: group.is_some(),
        retry: RetryPolicy::default(),
    }
}

fn bodies(attempts: &[Attempt]) -> Vec<&str> {
    attempts.iter().map(|a| a.delivery.body.as_str()).collect()
}

/// Pushes an unordered, unthrottled notification at time 0.
fn push(outbox: &mut Outbox, body: &str) -> u64 {
    outbox
        .push(
            delivery("s", None, body),
            LanePolicy::default(),
            Timestamp(0),
        )
        .unwrap()
}

const ORDERED: LanePolicy = LanePolicy {
    ordered: true,
    throttle: None,
};

#[test]
fn retries_follow_the_policy_then_fail() {
    let mut outbox = Outbox::default();
    let id = push(&mut outbox, "m");
    let mut now = Timestamp(0);
    assert_eq!(outbox.stats("s").next_attempt, Some(now));
    for expected_retry_at in [20_000, 40_000, 60_000] {
        let attempts = outbox.take_due(now, 10);
        assert_eq!(attempts.len(), 1);
        assert_eq!(
            outbox.stats("s").next_attempt,
            None,
            "in flight, nothing waits"
        );
        match outbox.finish(id, Outcome::Retryable, now) {
            Finished::Retrying(at) => assert_eq!(at, Timestamp(expected_retry_at)),
            other => panic!("{other:?}"),
        }
        let next = outbox.stats("s").next_attempt;
        assert_eq!(next, Some(Timestamp(expected_retry_at)));
        assert!(outbox
            .take_due(Timestamp(expected_retry_at - 1), 10)
            .is_empty());
        now = Timestamp(expected_retry_at);
    }
    let last = outbox.take_due(now, 10);
    assert_eq!(last[0].number, 4, "first attempt plus three retries");
    assert!(matches!(
        outbox.finish(id, Outcome::Retryable, now),
        Finished::Failed(_)
    ));
    assert!(outbox.is_empty());
    assert_eq!(outbox.stats("s").retries, 3);
}

#[test]
fn client_errors_are_not_retried() {
    let mut outbox = Outbox::default();
    let id = push(&mut outbox, "m");
    outbox.take_due(Timestamp(0), 1);
    assert!(matches!(
        outbox.finish(id, Outcome::Permanent, Timestamp(0)),
        Finished::Failed(_)
    ));
    assert_eq!(outbox.next_due(), None);
}

#[test]
fn ordered_lane_blocks_only_the_failing_group() {
    let mut outbox = Outbox::default();
    let now = Timestamp(0);
    for (group, body) in [("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2")] {
        outbox
            .push(delivery("s", Some(group), body), ORDERED, now)
            .unwrap();
    }
    let first = outbox.take_due(now, 10);
    assert_eq!(bodies(&first), vec!["a1", "b1"], "one head per group");
    // a1 fails and waits for its retry; b moves on.
    outbox.finish(first[0].id, Outcome::Retryable, now);
    outbox.finish(first[1].id, Outcome::Delivered, now);
    assert_eq!(bodies(&outbox.take_due(now, 10)), vec!["b2"]);
    let retry = outbox.take_due(Timestamp(20_000), 10);
    assert_eq!(bodies(&retry), vec!["a1"], "a2 still waits behind a1");
    outbox.finish(retry[0].id, Outcome::Delivered, Timestamp(20_000));
    assert_eq!(bodies(&outbox.take_due(Timestamp(20_000), 10)), vec!["a2"]);
}

#[test]
fn unordered_lane_sends_everything_at_once() {
    let mut outbox = Outbox::default();
    for body in ["1", "2", "3"] {
        outbox
            .push(
                delivery("s", Some("g"), body),
                LanePolicy::default(),
                Timestamp(0),
            )
            .unwrap();
    }
    assert_eq!(outbox.take_due(Timestamp(0), 10).len(), 3);
    assert_eq!(outbox.stats("s").in_flight, 3);
}

#[test]
fn cap_hands_back_the_delivery_and_confirmations_are_exempt() {
    let mut outbox = Outbox {
        max_pending: 2,
        ..Outbox::default()
    };
    let policy = LanePolicy::default();
    assert!(outbox
        .push(delivery("s", None, "1"), policy, Timestamp(0))
        .is_ok());
    assert!(outbox
        .push(delivery("s", None, "2"), policy, Timestamp(0))
        .is_ok());
    let refused = outbox.push(delivery("s", None, "3"), policy, Timestamp(0));
    assert_eq!(refused.unwrap_err().body, "3");
    let mut confirmation = delivery("s", None, "c");
    confirmation.kind = Kind::SubscriptionConfirmation;
    assert!(outbox.push(confirmation, policy, Timestamp(0)).is_ok());
    assert!(outbox
        .push(delivery("other", None, "4"), policy, Timestamp(0))
        .is_ok());
}

#[test]
fn throttle_spaces_sends() {
    let mut outbox = Outbox::default();
    let policy = LanePolicy {
        ordered: false,
        throttle: Some(2),
    };
    for body in ["1", "2", "3"] {
        outbox
            .push(delivery("s", None, body), policy, Timestamp(0))
            .unwrap();
    }
    assert_eq!(bodies(&outbox.take_due(Timestamp(0), 10)), vec!["1"]);
    assert_eq!(outbox.next_due(), Some(Timestamp(500)));
    assert_eq!(bodies(&outbox.take_due(Timestamp(500), 10)), vec!["2"]);
    assert!(outbox.take_due(Timestamp(999), 10).is_empty());
    assert_eq!(bodies(&outbox.take_due(Timestamp(1000), 10)), vec!["3"]);
}

#[test]
fn removing_a_subscription_drops_its_notifications_only() {
    let mut outbox = Outbox::default();
    let policy = LanePolicy::default();
    let id = outbox
        .push(delivery("s", None, "1"), policy, Timestamp(0))
        .unwrap();
    outbox
        .push(delivery("s", None, "2"), policy, Timestamp(0))
        .unwrap();
    let mut goodbye = delivery("s", None, "bye");
    goodbye.kind = Kind::UnsubscribeConfirmation;
    outbox.push(goodbye, policy, Timestamp(0)).unwrap();
    outbox.take_due(Timestamp(0), 1);
    outbox.remove_subscription("s");
    assert!(matches!(
        outbox.finish(id, Outcome::Delivered, Timestamp(0)),
        Finished::Gone
    ));
    assert_eq!(bodies(&outbox.take_due(Timestamp(0), 10)), vec!["bye"]);
}

#[test]
fn a_confirmations_error_is_kept_for_a_subscription_and_never_for_one_gone() {
    let mut outbox = Outbox::default();
    outbox.note_error("pending", "refused", true, Timestamp(5));
    assert_eq!(
        outbox.last_error("pending"),
        Some((Timestamp(5), "refused".into()))
    );
    // An UnsubscribeConfirmation's error comes after its subscription is removed.
    outbox.note_error("gone", "refused", false, Timestamp(6));
    assert_eq!(outbox.last_error("gone"), None);
    // Kept for its error only, it has had no traffic to list.
    assert!(outbox.all_stats().is_empty());
    outbox.remove_subscription("pending");
    assert_eq!(outbox.last_error("pending"), None);
}
