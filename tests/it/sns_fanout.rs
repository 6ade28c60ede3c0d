//! SNS fan-out through aws-sdk-sns: FIFO topics into queues, in order, exactly once; envelopes.

use std::collections::HashMap;

use aws_sdk_sns::error::ProvideErrorMetadata;
use aws_sdk_sns::types::MessageAttributeValue;
use aws_sdk_sqs::types::MessageSystemAttributeName as S;
use serde_json::Value;

use crate::common::{
    create_queue, drain, fifo_queue, fifo_topic, start, start_with_manual_clock, subscribe,
    subscribe_with,
};

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
    crate::common::carried(&server).await;
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
    // Copies into queues of other shards land a moment later, as on AWS.
    crate::common::carried(&server).await;
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
    assert_eq!(
        crate::common::json_keys(&body),
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
    // In its queue before the clock moves: the queue's own window starts when a copy lands.
    crate::common::carried(&server).await;
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
    crate::common::carried(&server).await;
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
    assert_eq!(
        crate::common::json_keys(&body),
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

/// A batch's copies are stored together per queue (one statement per queue on PostgreSQL):
/// each queue still gets them in the topic's order within every group, a filtered
/// subscription only its matches, a topic-wide duplicate goes nowhere, and the copies meant
/// for a deleted queue reach that subscription's dead-letter queue.
#[tokio::test]
async fn a_publish_batch_reaches_every_queue_in_topic_order_per_group() {
    let server = start().await;
    let topic = fifo_topic(&server, "batched.fifo").await;
    let all_q = fifo_queue(&server, "all.fifo", &[]).await;
    let odd_q = fifo_queue(&server, "odd.fifo", &[]).await;
    let gone_q = fifo_queue(&server, "gone.fifo", &[]).await;
    let dlq = fifo_queue(&server, "gone-dlq.fifo", &[]).await;
    subscribe(&server, &topic, "all.fifo", true).await;
    subscribe_with(
        &server,
        &topic,
        "odd.fifo",
        &[
            ("RawMessageDelivery", "true"),
            ("FilterPolicyScope", "MessageBody"),
            ("FilterPolicy", r#"{"odd":[true]}"#),
        ],
    )
    .await
    .unwrap();
    let policy = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:gone-dlq.fifo"}"#;
    subscribe_with(
        &server,
        &topic,
        "gone.fifo",
        &[("RawMessageDelivery", "true"), ("RedrivePolicy", policy)],
    )
    .await
    .unwrap();
    server
        .sqs
        .delete_queue()
        .queue_url(&gone_q)
        .send()
        .await
        .unwrap();
    let body = |n: usize| format!(r#"{{"n":{n},"odd":{}}}"#, n % 2 == 1);
    // Published before: the batch's entry with the same body is a topic-wide duplicate.
    server
        .sns
        .publish()
        .topic_arn(&topic)
        .message(body(0))
        .message_group_id("g0")
        .send()
        .await
        .unwrap();
    let entry = |id: String, body: String, group: String| {
        aws_sdk_sns::types::PublishBatchRequestEntry::builder()
            .id(id)
            .message(body)
            .message_group_id(group)
    };
    let publish_batch = |entries: Vec<_>| {
        server
            .sns
            .publish_batch()
            .topic_arn(&topic)
            .set_publish_batch_request_entries(Some(entries))
            .send()
    };
    let entries = (0..10)
        .map(|n| entry(format!("e{n}"), body(n), format!("g{}", n % 3)).build())
        .collect::<Result<_, _>>()
        .unwrap();
    let out = publish_batch(entries).await.unwrap();
    assert_eq!(out.successful().len(), 10);
    let in_groups = |got: Vec<(String, Option<String>)>| {
        let mut groups: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
        for (body, group) in got {
            let value: serde_json::Value = serde_json::from_str(&body).unwrap();
            groups
                .entry(group.unwrap())
                .or_default()
                .push(value["n"].as_u64().unwrap());
        }
        groups
    };
    // Body 0 arrives from the single publish, where the filter lets it through.
    let expected = |keep: fn(u64) -> bool| {
        let mut groups: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
        for n in (0..10u64).filter(|n| keep(*n)) {
            groups.entry(format!("g{}", n % 3)).or_default().push(n);
        }
        groups
    };
    // Entry 0 repeats the earlier publish: no queue gets it twice.
    assert_eq!(in_groups(drain(&server, &all_q).await), expected(|_| true));
    assert_eq!(
        in_groups(drain(&server, &odd_q).await),
        expected(|n| n % 2 == 1)
    );
    assert_eq!(in_groups(drain(&server, &dlq).await), expected(|_| true));
    // Within one batch, a repeated deduplication id answers the first entry's ids.
    let twice = ["first", "second"]
        .map(|id| {
            let body = format!(r#"{{"n":100,"from":"{id}"}}"#);
            entry(id.into(), body, "g0".into())
                .message_deduplication_id("same")
                .build()
        })
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    let out = publish_batch(twice).await.unwrap();
    let [first, second] = out.successful() else {
        panic!("two entries published: {out:?}")
    };
    assert_eq!(first.message_id(), second.message_id());
    assert_eq!(first.sequence_number(), second.sequence_number());
    let got = drain(&server, &all_q).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].0.contains("first"), "{got:?}");
}

/// A queue subscribed to a topic gets its copies on Orderly whatever its policy says, but the
/// subscription says when AWS would not deliver them: no policy, or one for another topic.
#[tokio::test]
async fn a_subscription_says_when_the_queues_policy_would_refuse_sns_on_aws() {
    let server = start().await;
    let topic = crate::common::fifo_topic(&server, "guarded.fifo").await;
    let url = crate::common::fifo_queue(&server, "guarded.fifo", &[]).await;
    crate::common::subscribe(&server, &topic, "guarded.fifo", true).await;
    let refusal = || async {
        let listed = crate::common::get_json(&server, "/_orderly/subscriptions").await;
        listed["subscriptions"][0]["awsWouldRefuse"].clone()
    };
    let said = refusal().await;
    assert!(
        said.as_str()
            .is_some_and(|s| s.contains("the queue has no policy")),
        "{said}"
    );
    let queue_arn = "arn:aws:sqs:us-east-1:000000000000:guarded.fifo";
    let set_policy = |source: String| {
        let policy = format!(
            r#"{{"Statement":[{{"Effect":"Allow","Principal":{{"Service":"sns.amazonaws.com"}},"Action":"sqs:SendMessage","Resource":"{queue_arn}","Condition":{{"ArnEquals":{{"aws:SourceArn":"{source}"}}}}}}]}}"#
        );
        (server.sqs.set_queue_attributes())
            .queue_url(&url)
            .attributes(aws_sdk_sqs::types::QueueAttributeName::Policy, policy)
            .send()
    };
    // Counted by the node that leads the topic, whichever leads the queue.
    let flagged = || async {
        let mut flagged = false;
        for node in crate::common::leading_nodes(&server).await {
            let text = crate::common::get_text(&format!("{node}/metrics")).await;
            flagged |= text.lines().any(|line| {
                line.starts_with("orderly_subscription_aws_would_refuse{") && line.ends_with(" 1")
            });
        }
        flagged
    };
    assert!(flagged().await, "counted in /metrics");
    set_policy(topic.clone()).await.unwrap();
    assert_eq!(refusal().await, serde_json::Value::Null);
    assert!(
        !flagged().await,
        "no longer counted once the policy allows the topic"
    );
    set_policy(topic.replace("guarded", "another"))
        .await
        .unwrap();
    let said = refusal().await;
    assert!(
        said.as_str()
            .is_some_and(|s| s.contains("does not allow sns.amazonaws.com")),
        "{said}"
    );
    // Delivered all the same: only AWS would refuse it.
    (server.sns.publish())
        .topic_arn(&topic)
        .message("copied")
        .message_group_id("g")
        .message_deduplication_id("d")
        .send()
        .await
        .unwrap();
    let bodies = crate::common::drain(&server, &url).await;
    assert_eq!(bodies.len(), 1);
}

/// With `--enforce-queue-policies` a copy goes only where the queue's policy lets SNS send
/// from the topic, as on AWS: refused copies go to the subscription's dead-letter queue when
/// its own policy allows it, and are counted as failed otherwise.
#[tokio::test]
async fn with_queue_policies_enforced_only_allowed_queues_get_copies() {
    let mut config = orderly::config::Config::ephemeral();
    config.enforce_queue_policies = true;
    let server = crate::common::start_with(config).await;
    let topic = fifo_topic(&server, "enforced.fifo").await;
    let allowing = |queue: &str, source: &str| {
        format!(
            r#"{{"Statement":[{{"Effect":"Allow","Principal":{{"Service":"sns.amazonaws.com"}},"Action":"sqs:SendMessage","Resource":"arn:aws:sqs:us-east-1:000000000000:{queue}","Condition":{{"ArnEquals":{{"aws:SourceArn":"{source}"}}}}}}]}}"#
        )
    };
    let open = fifo_queue(
        &server,
        "open.fifo",
        &[("Policy", &allowing("open.fifo", &topic))],
    )
    .await;
    let closed = fifo_queue(&server, "closed.fifo", &[]).await;
    let other = topic.replace("enforced", "other");
    let elsewhere = fifo_queue(
        &server,
        "elsewhere.fifo",
        &[("Policy", &allowing("elsewhere.fifo", &other))],
    )
    .await;
    let dlq = fifo_queue(
        &server,
        "dlq.fifo",
        &[("Policy", &allowing("dlq.fifo", &topic))],
    )
    .await;
    subscribe(&server, &topic, "open.fifo", true).await;
    let redrive = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq.fifo"}"#;
    let closed_attributes = [("RawMessageDelivery", "true"), ("RedrivePolicy", redrive)];
    subscribe_with(&server, &topic, "closed.fifo", &closed_attributes)
        .await
        .unwrap();
    subscribe(&server, &topic, "elsewhere.fifo", true).await;
    (server.sns.publish())
        .topic_arn(&topic)
        .message("guarded")
        .message_group_id("g")
        .message_deduplication_id("d")
        .send()
        .await
        .unwrap();
    let server = &server;
    let count = |url: String| async move { drain(server, &url).await.len() };
    assert_eq!(count(open).await, 1, "the allowed queue gets its copy");
    assert_eq!(count(closed).await, 0, "no policy: no copy");
    assert_eq!(
        count(dlq).await,
        1,
        "the refused copy goes to the dead-letter queue"
    );
    assert_eq!(
        count(elsewhere).await,
        0,
        "a policy for another topic: no copy"
    );
    let listed = crate::common::get_json(server, "/_orderly/subscriptions").await;
    let fates: Vec<String> = (listed["subscriptions"].as_array().unwrap().iter())
        .map(|s| {
            s["lastDeliveries"][0]["fate"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(fates, ["queued", "deadLettered", "failed"]);
}
