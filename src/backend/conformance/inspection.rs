//! Looking inside without changing anything, and both kinds of reset.

use super::*;

/// Looking inside and starting over: counts and groups, peeks that change nothing, and both
/// kinds of reset.
pub async fn inspection<
    B: QueueAdmin + Messages + crate::backend::Work + crate::backend::Inspection,
>(
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
    assert!(!all.truncated);
    let all = all.messages;
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
    assert_eq!(&*one.messages[0].message.body, "a2");
    assert!(!one.truncated, "left out by the limit, not for their size");
    // Peeking held nothing: group a stays locked, b is received.
    assert_eq!(bodies(&receive(backend, "i.fifo", 10).await), ["b1"]);
    let missing = backend.peek_messages("nope", StateFilter::ALL, 1).await;
    assert_eq!(rejected(missing), EngineError::QueueDoesNotExist);

    // A peek answers at most PEEK_BYTES (8 MiB) of messages: 27 of 30 bodies of 300 kB, and
    // says it left some out.
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
    assert_eq!((peeked.messages.len(), peeked.truncated), (27, true));
    let peeked = (backend.peek_messages("i-big", StateFilter::ALL, 27).await).unwrap();
    assert_eq!((peeked.messages.len(), peeked.truncated), (27, false));

    // Reset: every message and history goes, queues stay; a purge is allowed at once.
    backend.purge_queue("i-plain", clock.now()).await.unwrap();
    backend
        .reset(crate::backend::ResetScope::Messages)
        .await
        .unwrap();
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

    backend
        .reset(crate::backend::ResetScope::Everything)
        .await
        .unwrap();
    assert!(backend.queue_overviews().await.unwrap().is_empty());
    assert!(backend.list_queues("").await.unwrap().is_empty());
}

/// What the captured protocols' endpoints would have received: the newest `KEPT` stay, in
/// order, whole (attributes too), the dropped ones counted; forgotten by id; gone on a reset.
pub async fn captured_messages<B: crate::backend::Inspection>(backend: &B) {
    use crate::backend::captured::KEPT;
    use crate::engine::message::{AttributeData, AttributeValue, MessageAttributes};
    use crate::engine::topic::captured::CapturedMessage;
    let sms = |n: usize| CapturedMessage {
        protocol: crate::engine::topic::SubscriptionProtocol::Sms,
        endpoint: "+15555550100".into(),
        subscription_arn: Some("arn:aws:sns:us-east-1:000000000000:t:1".into()),
        topic_arn: Some("arn:aws:sns:us-east-1:000000000000:t".into()),
        message_id: format!("m{n}").into(),
        kind: "Notification",
        subject: Some("s".into()),
        body: format!("text {n}"),
        attributes: MessageAttributes::new(vec![(
            "k".into(),
            AttributeValue {
                data_type: "String".into(),
                data: AttributeData::String(format!("v{n}")),
            },
        )]),
        structure: Some("json"),
        at: Timestamp(n as u64),
    };
    backend
        .capture((0..KEPT + 2).map(sms).collect())
        .await
        .unwrap();
    let (listed, dropped) = backend.captured_messages().await.unwrap();
    assert_eq!((listed.len(), dropped), (KEPT, 2));
    assert_eq!(&*listed[0].1.message_id, "m2");
    let last = &listed[KEPT - 1].1;
    let expected = sms(KEPT + 1);
    assert_eq!(
        (&last.message_id, &last.body, &last.subject, last.at),
        (
            &expected.message_id,
            &expected.body,
            &expected.subject,
            expected.at
        )
    );
    assert_eq!(last.attributes.entries(), expected.attributes.entries());
    assert_eq!((last.kind, last.structure), ("Notification", Some("json")));
    assert_eq!(last.subscription_arn, expected.subscription_arn);
    backend
        .forget_captured(vec![listed[0].0, listed[1].0])
        .await
        .unwrap();
    let (after, _) = backend.captured_messages().await.unwrap();
    assert_eq!(after.len(), KEPT - 2);
    assert_eq!(&*after[0].1.message_id, "m4");
    backend
        .reset(crate::backend::ResetScope::Messages)
        .await
        .unwrap();
    assert!(backend.captured_messages().await.unwrap().0.is_empty());
}
