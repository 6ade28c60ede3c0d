//! Queue administration: creating, finding, listing, attributes, tags, policies, purges.

use super::*;

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
    let edit = |step: u32| -> crate::backend::PolicyEdit {
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
