//! SNS through aws-sdk-sns: FIFO topics fanning out into queues, in order, exactly once.

use std::collections::HashMap;

use aws_sdk_sns::error::ProvideErrorMetadata;
use aws_sdk_sns::types::{MessageAttributeValue, PublishBatchRequestEntry};
use aws_sdk_sqs::types::MessageSystemAttributeName as S;
use serde_json::Value;

use crate::common::{
    create_queue, fifo_queue, query, start, start_with_manual_clock, xml_text, Server,
};

async fn fifo_topic(server: &Server, name: &str) -> String {
    server
        .sns
        .create_topic()
        .name(name)
        .attributes("FifoTopic", "true")
        .attributes("ContentBasedDeduplication", "true")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap()
}

async fn subscribe(server: &Server, topic: &str, queue: &str, raw: bool) -> String {
    let mut req = server
        .sns
        .subscribe()
        .topic_arn(topic)
        .protocol("sqs")
        .endpoint(format!("arn:aws:sqs:us-east-1:000000000000:{queue}"));
    if raw {
        req = req.attributes("RawMessageDelivery", "true");
    }
    req.send().await.unwrap().subscription_arn.unwrap()
}

/// Drains a queue: (body, group id) in delivery order, deleting as it goes.
async fn drain(server: &Server, url: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    loop {
        let got = server
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_system_attribute_names(S::All)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            return out;
        }
        for m in messages {
            let group = m
                .attributes()
                .and_then(|a| a.get(&S::MessageGroupId))
                .cloned();
            out.push((m.body().unwrap().to_string(), group));
            server
                .sqs
                .delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
}

#[tokio::test]
async fn fifo_topic_fans_out_in_group_order_with_concurrent_publishers() {
    let server = start().await;
    let topic = fifo_topic(&server, "prices.fifo").await;
    let envelope_q = fifo_queue(&server, "envelope.fifo", &[]).await;
    let raw_q = fifo_queue(&server, "raw.fifo", &[]).await;
    subscribe(&server, &topic, "envelope.fifo", false).await;
    subscribe(&server, &topic, "raw.fifo", true).await;
    let publishers = 4;
    let per_publisher = 30;
    let mut tasks = Vec::new();
    for p in 0..publishers {
        let sns = server.sns.clone();
        let topic = topic.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..per_publisher {
                // Two groups per publisher, shared with nobody, plus one group all publishers share.
                let group = if n % 3 == 0 {
                    "shared".to_string()
                } else {
                    format!("p{p}-{}", n % 2)
                };
                sns.publish()
                    .topic_arn(&topic)
                    .message(format!("{p}:{n}:{group}"))
                    .message_group_id(group)
                    .send()
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let raw = drain(&server, &raw_q).await;
    let wrapped = drain(&server, &envelope_q).await;
    assert_eq!(
        raw.len(),
        publishers * per_publisher,
        "every copy arrives exactly once"
    );
    assert_eq!(wrapped.len(), raw.len());
    // Both queues hold the same messages in the same per-group order (topic sequence order).
    let mut raw_by_group: HashMap<String, Vec<String>> = HashMap::new();
    for (body, group) in &raw {
        raw_by_group
            .entry(group.clone().unwrap())
            .or_default()
            .push(body.clone());
    }
    let mut wrapped_by_group: HashMap<String, Vec<String>> = HashMap::new();
    let mut last_seq: HashMap<String, u128> = HashMap::new();
    for (body, group) in &wrapped {
        let envelope: Value = serde_json::from_str(body).unwrap();
        let group = group.clone().unwrap();
        let seq: u128 = envelope["SequenceNumber"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            seq > last_seq.get(&group).copied().unwrap_or(0),
            "sequence goes up within group {group}"
        );
        last_seq.insert(group.clone(), seq);
        wrapped_by_group
            .entry(group)
            .or_default()
            .push(envelope["Message"].as_str().unwrap().to_string());
    }
    assert_eq!(raw_by_group, wrapped_by_group);
    // Each publisher's own groups keep its publish order.
    for (group, bodies) in &raw_by_group {
        if group == "shared" {
            continue;
        }
        let ns: Vec<u32> = bodies
            .iter()
            .map(|b| b.split(':').nth(1).unwrap().parse().unwrap())
            .collect();
        let mut sorted = ns.clone();
        sorted.sort();
        assert_eq!(ns, sorted, "group {group} out of order");
    }
}

#[tokio::test]
async fn topic_dedup_spans_groups_and_returns_original_ids() {
    let server = start().await;
    let topic = fifo_topic(&server, "dedup.fifo").await;
    let url = fifo_queue(&server, "d.fifo", &[]).await;
    subscribe(&server, &topic, "d.fifo", true).await;
    let first = server
        .sns
        .publish()
        .topic_arn(&topic)
        .message("Test")
        .message_group_id("g1")
        .send()
        .await
        .unwrap();
    let again = server
        .sns
        .publish()
        .topic_arn(&topic)
        .message("Test")
        .message_group_id("g2")
        .send()
        .await
        .unwrap();
    assert_eq!(first.message_id, again.message_id);
    assert_eq!(first.sequence_number, again.sequence_number);
    let got = server
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .message_system_attribute_names(S::All)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].attributes().unwrap()[&S::MessageDeduplicationId],
        "532eaabd9574880dbf76b9b8cc00832c20a6ec113d682299550d7a6e0f345e25"
    );
}

#[tokio::test]
async fn envelope_and_raw_bodies_field_by_field() {
    let server = start().await;
    let topic = fifo_topic(&server, "fields.fifo").await;
    let env_q = fifo_queue(&server, "env.fifo", &[]).await;
    let raw_q = fifo_queue(&server, "rawf.fifo", &[]).await;
    let std_q = create_queue(&server, "plain", &[]).await;
    let sub = subscribe(&server, &topic, "env.fifo", false).await;
    subscribe(&server, &topic, "rawf.fifo", true).await;
    subscribe(&server, &topic, "plain", false).await;
    let published = server
        .sns
        .publish()
        .topic_arn(&topic)
        .message("hello")
        .subject("greeting")
        .message_group_id("g")
        .message_deduplication_id("d-1")
        .message_attributes(
            "px",
            MessageAttributeValue::builder()
                .data_type("Number")
                .string_value("1.5")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let env = &server
        .sqs
        .receive_message()
        .queue_url(&env_q)
        .message_system_attribute_names(S::All)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap()[0];
    let body: Value = serde_json::from_str(env.body().unwrap()).unwrap();
    let keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "Type",
            "MessageId",
            "SequenceNumber",
            "TopicArn",
            "Subject",
            "Message",
            "Timestamp",
            "UnsubscribeURL",
            "MessageAttributes"
        ]
    );
    assert_eq!(body["Type"], "Notification");
    assert_eq!(body["MessageId"], published.message_id.unwrap());
    assert_eq!(body["SequenceNumber"], published.sequence_number.unwrap());
    assert_eq!(body["TopicArn"], topic);
    assert_eq!(body["Message"], "hello");
    assert_eq!(
        body["MessageAttributes"]["px"],
        serde_json::json!({"Type": "Number", "Value": "1.5"})
    );
    let ts = body["Timestamp"].as_str().unwrap();
    assert!(
        ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
        "{ts}"
    );
    assert_eq!(
        body["UnsubscribeURL"],
        format!("{}/?Action=Unsubscribe&SubscriptionArn={sub}", server.url())
    );
    assert!(
        env.message_attributes.is_none(),
        "envelope deliveries carry no SQS attributes"
    );
    assert_eq!(env.attributes().unwrap()[&S::MessageDeduplicationId], "d-1");

    let raw = &server
        .sqs
        .receive_message()
        .queue_url(&raw_q)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap()
        .messages
        .unwrap()[0];
    assert_eq!(raw.body(), Some("hello"));
    let px = &raw.message_attributes().unwrap()["px"];
    assert_eq!((px.data_type(), px.string_value()), ("Number", Some("1.5")));

    let plain = &server
        .sqs
        .receive_message()
        .queue_url(&std_q)
        .message_system_attribute_names(S::All)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap()[0];
    assert!(
        !plain.attributes().unwrap().contains_key(&S::MessageGroupId),
        "a standard queue gets no group from a FIFO topic"
    );

    // The UnsubscribeURL works as a plain GET.
    let url = body["UnsubscribeURL"].as_str().unwrap();
    let status = reqwest::get(url).await.unwrap().status();
    assert_eq!(status, 200);
    let subs = server
        .sns
        .list_subscriptions_by_topic()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap();
    assert_eq!(subs.subscriptions.unwrap().len(), 2);
}

#[tokio::test]
async fn publish_batch_sequences_in_order_and_checks_the_whole_request() {
    let server = start().await;
    let topic = fifo_topic(&server, "batch.fifo").await;
    let entry = |id: &str, body: &str| {
        PublishBatchRequestEntry::builder()
            .id(id)
            .message(body)
            .message_group_id("g")
            .build()
            .unwrap()
    };
    let out = server
        .sns
        .publish_batch()
        .topic_arn(&topic)
        .publish_batch_request_entries(entry("a", "one"))
        .publish_batch_request_entries(entry("b", "two"))
        .send()
        .await
        .unwrap();
    let ok = out.successful.unwrap();
    assert_eq!(
        ok.iter().map(|e| e.id().unwrap()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    let seqs: Vec<u128> = ok
        .iter()
        .map(|e| e.sequence_number().unwrap().parse().unwrap())
        .collect();
    assert!(seqs[0] < seqs[1]);
    assert!(out.failed.unwrap().is_empty());
    let many: Vec<_> = (0..11).map(|i| entry(&format!("e{i}"), "x")).collect();
    let err = server
        .sns
        .publish_batch()
        .topic_arn(&topic)
        .set_publish_batch_request_entries(Some(many))
        .send()
        .await
        .unwrap_err();
    assert!(err
        .into_service_error()
        .is_too_many_entries_in_batch_request_exception());
    let no_group = PublishBatchRequestEntry::builder()
        .id("n")
        .message("x")
        .build()
        .unwrap();
    let err = server
        .sns
        .publish_batch()
        .topic_arn(&topic)
        .publish_batch_request_entries(entry("ok", "fine"))
        .publish_batch_request_entries(no_group)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.into_service_error().code(), Some("InvalidParameter"));
}

#[tokio::test]
async fn sns_errors_as_sdks_see_them() {
    let server = start().await;
    let err = server
        .sns
        .get_topic_attributes()
        .topic_arn("arn:aws:sns:us-east-1:000000000000:nope")
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.raw_response().unwrap().status().as_u16(), 404);
    assert!(err.into_service_error().is_not_found_exception());
    let standard = server
        .sns
        .create_topic()
        .name("std")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let err = server
        .sns
        .subscribe()
        .topic_arn(&standard)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:q.fifo")
        .send()
        .await
        .unwrap_err();
    let message = err.into_service_error().message().unwrap().to_string();
    assert!(
        message.contains("FIFO SQS Queues can not be subscribed to standard SNS topics"),
        "{message}"
    );
    let err = server
        .sns
        .subscribe()
        .topic_arn(&standard)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:q")
        .attributes("FilterPolicy", r#"{"a":[{"numeric":[">",6,"<",5]}]}"#)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.into_service_error().message(),
        Some("Invalid parameter: Attributes Reason: FilterPolicy: Bottom must be less than top")
    );
    let err = server
        .sns
        .create_topic()
        .name("bad.fifo")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.into_service_error().message(),
        Some("Invalid parameter: Topic Name")
    );
    // Idempotent create, and a different attribute is refused.
    let again = server.sns.create_topic().name("std").send().await.unwrap();
    assert_eq!(again.topic_arn.unwrap(), standard);
    let err = server
        .sns
        .create_topic()
        .name("std")
        .attributes("DisplayName", "other")
        .send()
        .await
        .unwrap_err();
    assert!(err.into_service_error().is_invalid_parameter_exception());
}

#[tokio::test]
async fn sns_query_xml_shapes() {
    let server = start().await;
    let (status, body) = query(
        &server,
        "/",
        &[
            ("Action", "CreateTopic"),
            ("Version", "2010-03-31"),
            ("Name", "x"),
        ],
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.starts_with(r#"<?xml version="1.0"?><CreateTopicResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><CreateTopicResult><TopicArn>arn:aws:sns:us-east-1:000000000000:x</TopicArn></CreateTopicResult>"#), "{body}");
    let (_, subs) = query(
        &server,
        "/",
        &[
            ("Action", "ListSubscriptionsByTopic"),
            ("Version", "2010-03-31"),
            ("TopicArn", "arn:aws:sns:us-east-1:000000000000:x"),
        ],
    )
    .await;
    assert!(
        subs.contains("<Subscriptions></Subscriptions>"),
        "empty lists are still emitted: {subs}"
    );
    let (status, err) = query(
        &server,
        "/",
        &[
            ("Action", "DeleteTopic"),
            ("Version", "2010-03-31"),
            ("TopicArn", "bad"),
        ],
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(xml_text(&err, "Code"), Some("InvalidParameter"));
    assert!(err.contains(r#"<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">"#));
    // SQS's AddPermission and SNS's differ only by Version/signing service.
    let (status, tags) = query(
        &server,
        "/",
        &[
            ("Action", "ListTagsForResource"),
            ("ResourceArn", "arn:aws:sns:us-east-1:000000000000:x"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{tags}");
    assert!(tags.contains("<Tags></Tags>"));
}

#[tokio::test]
async fn filter_policies_in_both_scopes_select_copies() {
    let server = start().await;
    let topic = fifo_topic(&server, "filtered.fifo").await;
    let all_q = fifo_queue(&server, "all.fifo", &[]).await;
    let cheap_q = fifo_queue(&server, "cheap.fifo", &[]).await;
    let body_q = fifo_queue(&server, "body.fifo", &[]).await;
    subscribe(&server, &topic, "all.fifo", true).await;
    let cheap = server
        .sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:cheap.fifo")
        .attributes("RawMessageDelivery", "true")
        .attributes(
            "FilterPolicy",
            r#"{"price":[{"numeric":["<",100]}],"symbol":[{"prefix":"A"}]}"#,
        )
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap();
    server
        .sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:body.fifo")
        .attributes("RawMessageDelivery", "true")
        .attributes("FilterPolicyScope", "MessageBody")
        .attributes("FilterPolicy", r#"{"quote":{"venue":["XNAS"]}}"#)
        .send()
        .await
        .unwrap();
    let publish = |symbol: &'static str, price: &'static str, venue: &'static str| {
        server
            .sns
            .publish()
            .topic_arn(&topic)
            .message(format!(
                r#"{{"quote":{{"symbol":"{symbol}","venue":"{venue}"}}}}"#
            ))
            .message_group_id(symbol)
            .message_attributes(
                "price",
                MessageAttributeValue::builder()
                    .data_type("Number")
                    .string_value(price)
                    .build()
                    .unwrap(),
            )
            .message_attributes(
                "symbol",
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(symbol)
                    .build()
                    .unwrap(),
            )
            .send()
    };
    publish("AAPL", "99.5", "XNAS").await.unwrap();
    publish("AMZN", "150", "XNYS").await.unwrap();
    publish("MSFT", "50", "XNAS").await.unwrap();
    let bodies = |v: Vec<(String, Option<String>)>| {
        v.into_iter().map(|(_, g)| g.unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(bodies(drain(&server, &all_q).await).len(), 3);
    assert_eq!(bodies(drain(&server, &cheap_q).await), ["AAPL"]);
    let mut by_body = bodies(drain(&server, &body_q).await);
    by_body.sort();
    assert_eq!(by_body, ["AAPL", "MSFT"]);
    let attrs = server
        .sns
        .get_subscription_attributes()
        .subscription_arn(&cheap)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(attrs["FilterPolicyScope"], "MessageAttributes");
    assert!(attrs["FilterPolicy"].contains("numeric"));
    // A nested policy does not fit the attribute scope, so switching scope back is refused.
    let body_sub = server
        .sns
        .list_subscriptions_by_topic()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap()
        .subscriptions
        .unwrap()
        .into_iter()
        .find(|s| s.endpoint().unwrap().ends_with("body.fifo"))
        .unwrap();
    let err = server
        .sns
        .set_subscription_attributes()
        .subscription_arn(body_sub.subscription_arn().unwrap())
        .attribute_name("FilterPolicyScope")
        .attribute_value("MessageAttributes")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.into_service_error().message(),
        Some("Invalid parameter: Filter policy scope MessageAttributes does not support nested filter policy")
    );
    // Removing the policy delivers everything again.
    server
        .sns
        .set_subscription_attributes()
        .subscription_arn(&cheap)
        .attribute_name("FilterPolicy")
        .attribute_value("")
        .send()
        .await
        .unwrap();
    // (A new body: the same body again would be a content-based duplicate and go nowhere.)
    publish("AMZN", "151", "XLON").await.unwrap();
    assert_eq!(bodies(drain(&server, &cheap_q).await), ["AMZN"]);
}

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
        server
            .sns
            .subscribe()
            .topic_arn(&topic)
            .protocol("sqs")
            .endpoint(format!("arn:aws:sqs:us-east-1:000000000000:{queue}"))
            .attributes("RawMessageDelivery", raw)
            .attributes("RedrivePolicy", format!(r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{dead_letter}"}}"#))
            .send()
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
    let attrs = server
        .sns
        .get_topic_attributes()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
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

#[tokio::test]
async fn topic_dedup_window_ends_after_five_minutes() {
    let (server, clock) = start_with_manual_clock().await;
    let topic = fifo_topic(&server, "window.fifo").await;
    let url = fifo_queue(&server, "window-q.fifo", &[]).await;
    subscribe(&server, &topic, "window-q.fifo", true).await;
    let publish = || {
        server
            .sns
            .publish()
            .topic_arn(&topic)
            .message("same")
            .message_group_id("g")
            .send()
    };
    let first = publish().await.unwrap();
    clock.advance_millis(299_999);
    assert_eq!(
        publish().await.unwrap().message_id,
        first.message_id,
        "still inside the window"
    );
    assert_eq!(drain(&server, &url).await.len(), 1);
    clock.advance_millis(1);
    let later = publish().await.unwrap();
    assert_ne!(later.message_id, first.message_id);
    assert_eq!(
        drain(&server, &url).await.len(),
        1,
        "delivered again once the window passed"
    );
}

#[tokio::test]
async fn json_structure_standard_topics_and_confirm_subscription() {
    let server = start().await;
    let standard = server
        .sns
        .create_topic()
        .name("events")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let raw_q = create_queue(&server, "events-raw", &[]).await;
    let env_q = create_queue(&server, "events-env", &[]).await;
    subscribe(&server, &standard, "events-raw", true).await;
    subscribe(&server, &standard, "events-env", false).await;
    server
        .sns
        .publish()
        .topic_arn(&standard)
        .message_structure("json")
        .message(r#"{"default":"for everyone","sqs":"for queues"}"#)
        .message_attributes(
            "k",
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value("v")
                .build()
                .unwrap(),
        )
        .message_group_id("fair-group")
        .send()
        .await
        .unwrap();
    let raw = server
        .sqs
        .receive_message()
        .queue_url(&raw_q)
        .message_attribute_names("All")
        .message_system_attribute_names(S::All)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(raw[0].body(), Some("for queues"));
    assert!(
        raw[0].message_attributes.is_none(),
        "attributes are not delivered with a json structure"
    );
    assert_eq!(
        raw[0].attributes().unwrap()[&S::MessageGroupId],
        "fair-group",
        "standard topics pass the group to standard queues"
    );
    let env = &server
        .sqs
        .receive_message()
        .queue_url(&env_q)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap()[0];
    let body: Value = serde_json::from_str(env.body().unwrap()).unwrap();
    assert_eq!(body["Message"], "for queues");
    assert!(body.get("SequenceNumber").is_none() && body.get("MessageAttributes").is_none());
    let err = server
        .sns
        .publish()
        .topic_arn(&standard)
        .message("x")
        .message_deduplication_id("d")
        .send()
        .await
        .unwrap_err();
    assert!(err
        .into_service_error()
        .message()
        .unwrap()
        .contains("MessageDeduplicationId"));
    let err = server
        .sns
        .publish()
        .topic_arn(&standard)
        .message_structure("json")
        .message(r#"{"sqs":"x"}"#)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.into_service_error().message(),
        Some("Invalid parameter: Message Structure - No default entry in JSON message body")
    );
    let err = server
        .sns
        .confirm_subscription()
        .topic_arn(&standard)
        .token("nonsense")
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.into_service_error().message(), Some("Invalid token"));
}

#[tokio::test]
async fn at_most_200_filtered_subscriptions_per_topic() {
    let server = start().await;
    let topic = server
        .sns
        .create_topic()
        .name("busy")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let filtered = |i: usize| {
        server
            .sns
            .subscribe()
            .topic_arn(&topic)
            .protocol("sqs")
            .endpoint(format!("arn:aws:sqs:us-east-1:000000000000:q{i}"))
            .attributes("FilterPolicy", r#"{"k":["v"]}"#)
            .send()
    };
    for i in 0..200 {
        filtered(i).await.unwrap();
    }
    let err = filtered(200).await.unwrap_err();
    assert_eq!(err.raw_response().unwrap().status().as_u16(), 403);
    assert_eq!(
        err.into_service_error().code(),
        Some("FilterPolicyLimitExceeded")
    );
}

#[tokio::test]
async fn standard_topic_envelopes_are_signed_with_a_served_certificate() {
    let server = start().await;
    let topic = server
        .sns
        .create_topic()
        .name("signed")
        .attributes("SignatureVersion", "2")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let url = create_queue(&server, "signed-q", &[]).await;
    subscribe(&server, &topic, "signed-q", false).await;
    server
        .sns
        .publish()
        .topic_arn(&topic)
        .message("hi")
        .subject("s")
        .send()
        .await
        .unwrap();
    let message = &server
        .sqs
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap()[0];
    let body: Value = serde_json::from_str(message.body().unwrap()).unwrap();
    let keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "Type",
            "MessageId",
            "TopicArn",
            "Subject",
            "Message",
            "Timestamp",
            "SignatureVersion",
            "Signature",
            "SigningCertURL",
            "UnsubscribeURL"
        ]
    );
    assert_eq!(body["SignatureVersion"], "2");
    assert_eq!(
        body["Signature"].as_str().unwrap().len(),
        344,
        "base64 of a 2048-bit RSA signature"
    );
    let cert_url = body["SigningCertURL"].as_str().unwrap();
    assert!(
        cert_url.starts_with(&format!("{}/SimpleNotificationService-", server.url()))
            && cert_url.ends_with(".pem")
    );
    let pem = reqwest::get(cert_url).await.unwrap().text().await.unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    let missing = reqwest::get(format!(
        "{}/SimpleNotificationService-0000.pem",
        server.url()
    ))
    .await
    .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn list_topics_and_subscriptions_page_by_100() {
    let server = start().await;
    for i in 0..101 {
        let topic = server
            .sns
            .create_topic()
            .name(format!("t{i:03}"))
            .send()
            .await
            .unwrap()
            .topic_arn
            .unwrap();
        if i < 2 {
            for q in 0..60 {
                server
                    .sns
                    .subscribe()
                    .topic_arn(&topic)
                    .protocol("sqs")
                    .endpoint(format!("arn:aws:sqs:us-east-1:000000000000:q{q}"))
                    .send()
                    .await
                    .unwrap();
            }
        }
    }
    let first = server.sns.list_topics().send().await.unwrap();
    assert_eq!(first.topics.as_ref().unwrap().len(), 100);
    let second = server
        .sns
        .list_topics()
        .next_token(first.next_token.unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(
        second.topics.unwrap()[0].topic_arn(),
        Some("arn:aws:sns:us-east-1:000000000000:t100")
    );
    assert!(second.next_token.is_none());
    let subs = server.sns.list_subscriptions().send().await.unwrap();
    assert_eq!(subs.subscriptions.unwrap().len(), 100);
    let rest = server
        .sns
        .list_subscriptions()
        .next_token(subs.next_token.unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(rest.subscriptions.unwrap().len(), 20);
    let err = server
        .sns
        .list_topics()
        .next_token("garbage!")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.into_service_error().message(),
        Some("Invalid parameter: NextToken")
    );
}
