//! One suite of the rules every backend must keep, run against each of them (the embedded
//! engine in `embedded/tests.rs`, PostgreSQL in `postgres/tests.rs`): a rule differing between
//! backends fails here, not in a user's deployment.

use std::collections::BTreeMap;

use super::{BackendError, CreateQueue, QueueAdmin};
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
    let t = |plus: u64| Timestamp(now.millis() + plus);
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

    // Dead-letter targets must exist, be of the same type, and not be the queue itself.
    let redrive =
        |target: &str| format!(r#"{{"deadLetterTargetArn":"{ARN}{target}","maxReceiveCount":3}}"#);
    for (target, reason) in [
        ("missing", "Dead letter target does not exist."),
        (
            "a-dlq.fifo",
            "Dead-letter queue must be same type of queue as the source..",
        ),
        ("b-prices", "Dead letter target does not exist."),
    ] {
        let policy = redrive(target);
        let refused =
            backend.set_queue_attributes("b-prices", attrs(&[("RedrivePolicy", &policy)]), t(4));
        let message = rejected(refused.await).to_string();
        assert!(message.ends_with(reason), "{target}: {message}");
    }
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

    // A refused change leaves everything as it was.
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
