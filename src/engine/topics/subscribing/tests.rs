use super::*;
use crate::engine::message::MessageAttributes;
use crate::engine::webhook::tokens::TOKEN_LIFETIME_MS;
use crate::engine::webhook::Attempt;
use crate::engine::Engine;

fn engine_with_topic() -> (Engine<()>, String) {
    let engine = Engine::<()>::new("000000000000", "us-east-1");
    let topic = engine
        .topics
        .create("t", &[], &[], Timestamp(0))
        .unwrap()
        .to_string();
    (engine, topic)
}

fn token_of(attempt: &Attempt) -> String {
    let body: serde_json::Value = serde_json::from_str(&attempt.delivery.body).unwrap();
    body["Token"].as_str().unwrap().to_string()
}

#[test]
fn pending_subscriptions_expire_with_their_token() {
    let (engine, topic) = engine_with_topic();
    let sub = engine
        .subscribe(
            &topic,
            "http",
            Some("http://h/x"),
            &[],
            "http://o",
            None,
            Timestamp(0),
        )
        .unwrap();
    assert!(sub.pending);
    let confirmation = engine.webhooks.take_due(Timestamp(0), 10);
    assert_eq!(confirmation.len(), 1);
    assert_eq!(
        confirmation[0].delivery.kind,
        Kind::SubscriptionConfirmation
    );
    engine.expire_confirmations(Timestamp(TOKEN_LIFETIME_MS - 1));
    assert_eq!(
        engine
            .topics
            .list_subscriptions(Some(&topic))
            .unwrap()
            .len(),
        1
    );
    engine.expire_confirmations(Timestamp(TOKEN_LIFETIME_MS));
    assert!(engine
        .topics
        .list_subscriptions(Some(&topic))
        .unwrap()
        .is_empty());
    // The token died with it.
    assert_eq!(
        engine.confirm_subscription(
            &topic,
            &token_of(&confirmation[0]),
            false,
            true,
            Timestamp(TOKEN_LIFETIME_MS)
        ),
        Err(invalid("Invalid parameter: Token"))
    );
}

#[test]
fn confirmed_subscriptions_outlive_their_token_and_get_notifications() {
    let (engine, topic) = engine_with_topic();
    let sub = engine
        .subscribe(
            &topic,
            "https",
            Some("https://h/x"),
            &[],
            "http://o",
            None,
            Timestamp(0),
        )
        .unwrap();
    let confirmation = engine.webhooks.take_due(Timestamp(0), 10);
    let arn = engine
        .confirm_subscription(
            &topic,
            &token_of(&confirmation[0]),
            false,
            false,
            Timestamp(1),
        )
        .unwrap();
    assert_eq!(arn, sub.arn);
    engine.expire_confirmations(Timestamp(TOKEN_LIFETIME_MS));
    let request = crate::engine::topic::PublishRequest {
        message: "hello".into(),
        subject: None,
        structured: false,
        attributes: MessageAttributes::default(),
        group_id: None,
        dedup_id: None,
        trace_header: None,
    };
    let fanout = engine
        .publish(&topic, &request, "http://o", Timestamp(TOKEN_LIFETIME_MS))
        .unwrap();
    assert_eq!(fanout.webhooks, 1);
    let sent = engine.webhooks.take_due(Timestamp(TOKEN_LIFETIME_MS), 10);
    assert_eq!(sent[0].delivery.kind, Kind::Notification);
    assert_eq!(&*sent[0].delivery.endpoint, "https://h/x");
}
