//! Subscription dead-letter queues, and archive replay.

use aws_sdk_sns::error::ProvideErrorMetadata;
use aws_sdk_sns::types::MessageAttributeValue;
use serde_json::Value;

use crate::common::{drain, fifo_queue, fifo_topic, start, subscribe, subscribe_with};

#[tokio::test]
async fn undeliverable_copies_go_to_the_subscription_dlq() {
    let server = start().await;
    let topic = fifo_topic(&server, "redrive.fifo").await;
    let dlq = fifo_queue(&server, "sub-dlq.fifo", &[]).await;
    let ok_q = fifo_queue(&server, "healthy.fifo", &[]).await;
    let gone_q = fifo_queue(&server, "gone.fifo", &[]).await;
    let raw_q = fifo_queue(&server, "raw-limit.fifo", &[]).await;
    let raw_dlq = fifo_queue(&server, "raw-dlq.fifo", &[]).await;
    subscribe(&server, &topic, "healthy.fifo", false).await;
    // Each subscription gets its own DLQ: copies of one publish share a dedup id, so a shared
    // FIFO DLQ would keep only one of them (as on AWS).
    for (queue, raw, dead_letter) in [
        ("gone.fifo", "false", "sub-dlq.fifo"),
        ("raw-limit.fifo", "true", "raw-dlq.fifo"),
    ] {
        let policy = format!(
            r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{dead_letter}"}}"#
        );
        subscribe_with(
            &server,
            &topic,
            queue,
            &[("RawMessageDelivery", raw), ("RedrivePolicy", &policy)],
        )
        .await
        .unwrap();
    }
    server
        .sqs
        .delete_queue()
        .queue_url(&gone_q)
        .send()
        .await
        .unwrap();
    // The deleted queue's copies are dead-lettered as envelopes.
    server
        .sns
        .publish()
        .topic_arn(&topic)
        .message("first")
        .message_group_id("g")
        .send()
        .await
        .unwrap();
    // Eleven attributes: fine for SNS and for envelopes, too many for raw delivery into SQS.
    let mut many = server
        .sns
        .publish()
        .topic_arn(&topic)
        .message("second")
        .message_group_id("g");
    for i in 0..11 {
        many = many.message_attributes(
            format!("a{i}"),
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value("v")
                .build()
                .unwrap(),
        );
    }
    many.send().await.unwrap();
    assert_eq!(
        drain(&server, &ok_q).await.len(),
        2,
        "other subscriptions are unaffected"
    );
    assert_eq!(
        drain(&server, &raw_q)
            .await
            .iter()
            .map(|(b, _)| b.as_str())
            .collect::<Vec<_>>(),
        ["first"]
    );
    let dead = drain(&server, &dlq).await;
    let messages: Vec<Value> = dead
        .iter()
        .map(|(b, _)| serde_json::from_str(b).unwrap())
        .collect();
    assert_eq!(
        messages
            .iter()
            .map(|m| m["Message"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["first", "second"]
    );
    assert!(
        dead.iter().all(|(_, g)| g.as_deref() == Some("g")),
        "FIFO DLQs keep the group"
    );
    // The DLQ refuses the raw form too (11 attributes), so it holds the envelope.
    let raw_dead = drain(&server, &raw_dlq).await;
    assert_eq!(raw_dead.len(), 1);
    let envelope: Value = serde_json::from_str(&raw_dead[0].0).unwrap();
    assert_eq!(envelope["MessageAttributes"].as_object().unwrap().len(), 11);
    // Policy validation.
    let sub = server
        .sns
        .list_subscriptions_by_topic()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap()
        .subscriptions
        .unwrap()[1]
        .subscription_arn
        .clone()
        .unwrap();
    let set = |value: &'static str| {
        server
            .sns
            .set_subscription_attributes()
            .subscription_arn(&sub)
            .attribute_name("RedrivePolicy")
            .attribute_value(value)
            .send()
    };
    let err = set(r#"{"deadLetterTargetArn":"nope"}"#).await.unwrap_err();
    assert_eq!(
        err.into_service_error().message(),
        Some("Invalid parameter: RedrivePolicy: deadLetterTargetArn is an invalid arn")
    );
    let err = set(r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:standard-dlq"}"#)
        .await
        .unwrap_err();
    assert_eq!(
        err.into_service_error().message(),
        Some("Invalid parameter: RedrivePolicy: must use a FIFO queue as DLQ for a FIFO Subscription to a FIFO Topic.")
    );
}

#[tokio::test]
async fn archived_messages_replay_into_a_new_and_an_existing_subscription() {
    let server = start().await;
    let topic = server
        .sns
        .create_topic()
        .name("archive.fifo")
        .attributes("FifoTopic", "true")
        .attributes("ContentBasedDeduplication", "true")
        .attributes("ArchivePolicy", r#"{"MessageRetentionPeriod":"30"}"#)
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let live_q = fifo_queue(&server, "live.fifo", &[]).await;
    let live_sub = subscribe(&server, &topic, "live.fifo", false).await;
    let attrs = crate::common::topic_attributes(&server, &topic).await;
    let beginning = attrs["BeginningArchiveTime"].clone();
    assert!(beginning.ends_with('Z'), "{beginning}");
    for (body, price) in [("m1", "1"), ("m2", "200"), ("m3", "3")] {
        server
            .sns
            .publish()
            .topic_arn(&topic)
            .message(body)
            .message_group_id("g")
            .message_attributes(
                "price",
                MessageAttributeValue::builder()
                    .data_type("Number")
                    .string_value(price)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    }
    assert_eq!(drain(&server, &live_q).await.len(), 3);

    // A new subscription replays the archive (its filter applied), then keeps receiving live.
    let replay_q = fifo_queue(&server, "replay.fifo", &[]).await;
    let policy = format!(r#"{{"PointType":"Timestamp","StartingPoint":"{beginning}"}}"#);
    let replay_sub = server
        .sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:replay.fifo")
        .attributes("FilterPolicy", r#"{"price":[{"numeric":["<",100]}]}"#)
        .attributes("ReplayPolicy", &policy)
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap();
    let replayed: Vec<Value> = drain(&server, &replay_q)
        .await
        .iter()
        .map(|(b, _)| serde_json::from_str(b).unwrap())
        .collect();
    assert_eq!(
        replayed
            .iter()
            .map(|m| m["Message"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["m1", "m3"]
    );
    assert!(replayed.iter().all(|m| m["Replayed"] == true));
    let status = server
        .sns
        .get_subscription_attributes()
        .subscription_arn(&replay_sub)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(status["ReplayStatus"], "Completed");
    server
        .sns
        .publish()
        .topic_arn(&topic)
        .message("m4")
        .message_group_id("g")
        .message_attributes(
            "price",
            MessageAttributeValue::builder()
                .data_type("Number")
                .string_value("4")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let live_after: Vec<Value> = drain(&server, &replay_q)
        .await
        .iter()
        .map(|(b, _)| serde_json::from_str(b).unwrap())
        .collect();
    assert_eq!(live_after.len(), 1);
    assert_eq!(live_after[0]["Message"], "m4");
    assert!(
        live_after[0].get("Replayed").is_none(),
        "live messages are not marked"
    );
    drain(&server, &live_q).await;

    // Replaying into the existing subscription re-delivers even inside the queue's dedup window.
    server
        .sns
        .set_subscription_attributes()
        .subscription_arn(&live_sub)
        .attribute_name("ReplayPolicy")
        .attribute_value(&policy)
        .send()
        .await
        .unwrap();
    let again: Vec<Value> = drain(&server, &live_q)
        .await
        .iter()
        .map(|(b, _)| serde_json::from_str(b).unwrap())
        .collect();
    assert_eq!(
        again
            .iter()
            .map(|m| m["Message"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["m1", "m2", "m3", "m4"]
    );

    // Rules.
    let err = server
        .sns
        .set_subscription_attributes()
        .subscription_arn(&live_sub)
        .attribute_name("ReplayPolicy")
        .attribute_value(r#"{"PointType":"Timestamp","StartingPoint":"2000-01-01T00:00:00.000Z"}"#)
        .send()
        .await
        .unwrap_err();
    assert!(err
        .into_service_error()
        .message()
        .unwrap()
        .contains("StartingPoint must be between BeginningArchiveTime and now"));
    let plain = fifo_topic(&server, "no-archive.fifo").await;
    let err = server
        .sns
        .subscribe()
        .topic_arn(&plain)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:replay.fifo")
        .attributes("ReplayPolicy", &policy)
        .send()
        .await
        .unwrap_err();
    assert!(err
        .into_service_error()
        .message()
        .unwrap()
        .contains("the topic has no ArchivePolicy"));
    let err = server
        .sns
        .create_topic()
        .name("std-archive")
        .attributes("ArchivePolicy", r#"{"MessageRetentionPeriod":"1"}"#)
        .send()
        .await
        .unwrap_err();
    assert!(err.into_service_error().is_invalid_parameter_exception());
}
