use super::*;
use crate::engine::message::MessageAttributes;

fn fifo_topic(extra: &[(&str, &str)]) -> Topic {
    let mut attrs = vec![("FifoTopic".to_string(), "true".to_string())];
    attrs.extend(extra.iter().map(|(a, b)| (a.to_string(), b.to_string())));
    Topic::new(
        "t.fifo",
        "arn:aws:sns:us-east-1:000000000000:t.fifo".into(),
        "000000000000",
        &attrs,
        Timestamp(0),
    )
    .unwrap()
}

fn publish(body: &str, group: &str) -> PublishRequest {
    PublishRequest {
        message: body.into(),
        subject: None,
        structured: false,
        attributes: MessageAttributes::default(),
        group_id: Some(group.into()),
        dedup_id: None,
        trace_header: None,
    }
}

#[test]
fn topic_wide_dedup_ignores_groups_and_returns_original_ids() {
    let mut t = fifo_topic(&[("ContentBasedDeduplication", "true")]);
    let first = t.accept(&publish("Test", "g1"), Timestamp(0)).unwrap();
    assert_eq!(
        first.dedup_id.as_deref(),
        Some("532eaabd9574880dbf76b9b8cc00832c20a6ec113d682299550d7a6e0f345e25")
    );
    let dup = t.accept(&publish("Test", "g2"), Timestamp(1)).unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.message_id, first.message_id);
    assert_eq!(dup.sequence_number, first.sequence_number);
    let later = t
        .accept(&publish("Test", "g2"), Timestamp(DEDUP_WINDOW_MS))
        .unwrap();
    assert!(!later.duplicate);
    assert!(later.sequence_number > first.sequence_number);
}

#[test]
fn message_group_scope_dedups_per_group() {
    let mut t = fifo_topic(&[
        ("ContentBasedDeduplication", "true"),
        ("FifoThroughputScope", "MessageGroup"),
    ]);
    t.accept(&publish("x", "g1"), Timestamp(0)).unwrap();
    assert!(
        !t.accept(&publish("x", "g2"), Timestamp(0))
            .unwrap()
            .duplicate
    );
    assert!(
        t.accept(&publish("x", "g1"), Timestamp(0))
            .unwrap()
            .duplicate
    );
}

#[test]
fn fifo_rules_and_names() {
    let mut t = fifo_topic(&[]);
    let mut no_group = publish("x", "g");
    no_group.group_id = None;
    assert!(
        matches!(t.accept(&no_group, Timestamp(0)), Err(EngineError::InvalidParameter(m)) if m.contains("MessageGroupId parameter is required"))
    );
    assert!(
        matches!(t.accept(&publish("x", "g"), Timestamp(0)), Err(EngineError::InvalidParameter(m)) if m.contains("ContentBasedDeduplication"))
    );
    let standard = Topic::new(
        "s",
        "arn:aws:sns:us-east-1:000000000000:s".into(),
        "000000000000",
        &[],
        Timestamp(0),
    )
    .unwrap();
    assert!(standard
        .check_fifo_rules(&publish("x", "has space"))
        .is_err());
    assert!(standard.check_fifo_rules(&publish("x", "ok-group")).is_ok());
    assert!(validate_topic_name("a.fifo", false).is_err());
    assert!(validate_topic_name("a.fifo", true).is_ok());
    assert!(validate_topic_name("a", true).is_err());
    assert!(validate_topic_name(&"a".repeat(257), false).is_err());
}

#[test]
fn message_checks() {
    let mut m = publish("x", "g");
    m.subject = Some(String::new());
    assert_eq!(
        check_message(&m),
        Err(invalid("Invalid parameter: Subject"))
    );
    let mut big = publish(&"x".repeat(MAX_MESSAGE_BYTES + 1), "g");
    assert_eq!(
        check_message(&big),
        Err(invalid("Invalid parameter: Message too long"))
    );
    big.message = r#"{"sqs":"only"}"#.into();
    big.structured = true;
    assert!(
        matches!(check_message(&big), Err(EngineError::InvalidParameter(m)) if m.contains("No default entry"))
    );
}

#[test]
fn create_idempotency_compares_settings() {
    let t = fifo_topic(&[("ContentBasedDeduplication", "true")]);
    let same = vec![
        ("FifoTopic".to_string(), "true".to_string()),
        ("ContentBasedDeduplication".to_string(), "true".to_string()),
    ];
    assert!(t.same_settings(&same));
    assert!(!t.same_settings(&[("DisplayName".to_string(), "x".to_string())]));
}
