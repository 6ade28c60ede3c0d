//! HTTP/S subscriptions against a real HTTP receiver: confirmation both ways, headers and
//! bodies, signatures checked with an independent RSA implementation, retries on a manual
//! clock, 4xx versus 5xx, dead-letter queues, unsubscribe, the allow-list, and Orderly's
//! ordered webhooks on FIFO topics.

use crate::common::{self, query, xml_text, Server};
use crate::receiver::{verify_signature, Receiver};
use orderly::clock::Clock;
use orderly::config::Config;

async fn topic(server: &Server, name: &str, attributes: &[(&str, &str)]) -> String {
    let mut req = server.sns.create_topic().name(name);
    for (k, v) in attributes {
        req = req.attributes(*k, *v);
    }
    req.send().await.unwrap().topic_arn.unwrap()
}

/// Subscribes an endpoint and returns the SubscriptionConfirmation the receiver got.
async fn subscribe_http(
    server: &Server,
    receiver: &Receiver,
    topic: &str,
    path: &str,
    attributes: &[(&str, &str)],
) -> serde_json::Value {
    let endpoint = receiver.url(path);
    let protocol = endpoint.split(':').next().unwrap().to_string();
    let mut req = server
        .sns
        .subscribe()
        .topic_arn(topic)
        .protocol(protocol)
        .endpoint(endpoint);
    for (k, v) in attributes {
        req = req.attributes(*k, *v);
    }
    let answer = req.send().await.unwrap();
    assert_eq!(answer.subscription_arn(), Some("pending confirmation"));
    let confirmation = receiver.next().await;
    assert_eq!(
        confirmation.header("x-amz-sns-message-type"),
        Some("SubscriptionConfirmation")
    );
    // Confirmations are always text/plain, and AWS leaves the subscription ARN header out.
    assert_eq!(
        confirmation.header("content-type"),
        Some("text/plain; charset=UTF-8")
    );
    assert_eq!(confirmation.header("x-amz-sns-subscription-arn"), None);
    assert_eq!(confirmation.header("x-amz-sns-topic-arn"), Some(topic));
    confirmation.json()
}

/// Confirms through the SDK (a signed call) and returns the subscription ARN.
async fn confirm(server: &Server, confirmation: &serde_json::Value) -> String {
    server
        .sns
        .confirm_subscription()
        .topic_arn(confirmation["TopicArn"].as_str().unwrap())
        .token(confirmation["Token"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap()
}

async fn publish(server: &Server, topic: &str, body: &str) {
    server
        .sns
        .publish()
        .topic_arn(topic)
        .message(body)
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn subscribe_url_get_confirms_and_notifications_are_signed() {
    let server = common::start().await;
    let receiver = Receiver::start().await;
    let topic = topic(&server, "alerts", &[]).await;
    let confirmation = subscribe_http(&server, &receiver, &topic, "/hooks/sns", &[]).await;

    // The confirmation request, field by field.
    assert_eq!(
        common::json_keys(&confirmation),
        vec![
            "Type",
            "MessageId",
            "Token",
            "TopicArn",
            "Message",
            "SubscribeURL",
            "Timestamp",
            "SignatureVersion",
            "Signature",
            "SigningCertURL"
        ]
    );
    assert_eq!(
        confirmation["Message"],
        format!("You have chosen to subscribe to the topic {topic}.\nTo confirm the subscription, visit the SubscribeURL included in this message.")
    );
    let token = confirmation["Token"].as_str().unwrap();
    assert_eq!(token.len(), 256);
    assert_eq!(
        confirmation["SubscribeURL"],
        format!(
            "{}/?Action=ConfirmSubscription&TopicArn={topic}&Token={token}",
            server.url()
        )
    );
    verify_signature(&confirmation).await.unwrap();

    // Pending: listed under the placeholder, counted, and not delivered to.
    let listed = server
        .sns
        .list_subscriptions_by_topic()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap();
    assert_eq!(
        listed.subscriptions()[0].subscription_arn(),
        Some("PendingConfirmation")
    );
    let topic_attributes = common::topic_attributes(&server, &topic).await;
    assert_eq!(topic_attributes["SubscriptionsPending"], "1");
    assert_eq!(topic_attributes["SubscriptionsConfirmed"], "0");
    publish(&server, &topic, "before confirmation").await;

    // The endpoint confirms by GETting the SubscribeURL: unsigned, answered with XML.
    let response = reqwest::get(confirmation["SubscribeURL"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let xml = response.text().await.unwrap();
    let arn = xml_text(&xml, "SubscriptionArn").unwrap().to_string();
    assert!(arn.starts_with(&format!("{topic}:")), "{xml}");
    let attrs = crate::common::subscription_attributes(&server, &arn).await;
    assert_eq!(attrs["PendingConfirmation"], "false");
    assert_eq!(attrs["ConfirmationWasAuthenticated"], "false");
    assert!(attrs["EffectiveDeliveryPolicy"].contains(r#""numRetries":3"#));

    server
        .sns
        .publish()
        .topic_arn(&topic)
        .message("line one\nline two")
        .subject("price")
        .message_attributes("tenant", common::string_attribute("acme"))
        .send()
        .await
        .unwrap();
    let notification = receiver.next().await;
    assert_eq!(notification.path, "/hooks/sns");
    assert_eq!(
        notification.header("x-amz-sns-message-type"),
        Some("Notification")
    );
    assert_eq!(
        notification.header("x-amz-sns-subscription-arn"),
        Some(arn.as_str())
    );
    assert_eq!(
        notification.header("x-amz-sns-topic-arn"),
        Some(topic.as_str())
    );
    assert_eq!(
        notification.header("content-type"),
        Some("text/plain; charset=UTF-8")
    );
    assert_eq!(
        notification.header("user-agent"),
        Some("Amazon Simple Notification Service Agent")
    );
    assert_eq!(notification.header("x-amz-sns-rawdelivery"), None);
    let body = notification.json();
    assert_eq!(
        notification.header("x-amz-sns-message-id"),
        body["MessageId"].as_str()
    );
    assert_eq!(
        body["Message"], "line one\nline two",
        "the unconfirmed-time publish was not sent"
    );
    assert_eq!(body["Subject"], "price");
    assert_eq!(body["SignatureVersion"], "1");
    assert_eq!(body["MessageAttributes"]["tenant"]["Value"], "acme");
    assert_eq!(
        body["UnsubscribeURL"],
        format!("{}/?Action=Unsubscribe&SubscriptionArn={arn}", server.url())
    );
    verify_signature(&body).await.unwrap();
    // A tampered message does not verify.
    let mut tampered = body.clone();
    tampered["Message"] = "line one\nline 2".into();
    assert!(verify_signature(&tampered).await.is_err());
}

#[tokio::test]
async fn confirm_subscription_by_token_with_signature_version_2() {
    let server = common::start().await;
    let receiver = Receiver::start().await;
    let topic = topic(&server, "v2", &[("SignatureVersion", "2")]).await;
    let confirmation = subscribe_http(&server, &receiver, &topic, "/v2", &[]).await;
    assert_eq!(confirmation["SignatureVersion"], "2");
    verify_signature(&confirmation).await.unwrap();

    // Bad tokens first: malformed, then well-formed but unknown.
    let err = server
        .sns
        .confirm_subscription()
        .topic_arn(&topic)
        .token("garbage")
        .send()
        .await
        .unwrap_err();
    assert!(format!("{err:?}").contains("Invalid token"), "{err:?}");
    let err = server
        .sns
        .confirm_subscription()
        .topic_arn(&topic)
        .token("ab".repeat(128))
        .send()
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").contains("Invalid parameter: Token"),
        "{err:?}"
    );

    let arn = confirm(&server, &confirmation).await;
    assert_eq!(
        crate::common::subscription_attributes(&server, &arn).await["ConfirmationWasAuthenticated"],
        "true"
    );
    // Confirming again is idempotent.
    assert_eq!(confirm(&server, &confirmation).await, arn);

    publish(&server, &topic, "signed with sha256").await;
    let body = receiver.next().await.json();
    assert_eq!(body["SignatureVersion"], "2");
    verify_signature(&body).await.unwrap();
}

#[tokio::test]
async fn raw_delivery_with_a_request_policy_content_type() {
    let server = common::start().await;
    let receiver = Receiver::start().await;
    let topic = topic(&server, "raw", &[]).await;
    let confirmation = subscribe_http(
        &server,
        &receiver,
        &topic,
        "/raw",
        &[
            ("RawMessageDelivery", "true"),
            (
                "DeliveryPolicy",
                r#"{"requestPolicy":{"headerContentType":"application/json"}}"#,
            ),
        ],
    )
    .await;
    let arn = confirm(&server, &confirmation).await;
    let attrs = crate::common::subscription_attributes(&server, &arn).await;
    assert_eq!(
        attrs["DeliveryPolicy"],
        r#"{"healthyRetryPolicy":null,"sicklyRetryPolicy":null,"throttlePolicy":null,"requestPolicy":{"headerContentType":"application/json"},"guaranteed":false}"#
    );
    server
        .sns
        .publish()
        .topic_arn(&topic)
        .message(r#"{"price":42}"#)
        .message_attributes("ignored", common::string_attribute("x"))
        .send()
        .await
        .unwrap();
    let notification = receiver.next().await;
    assert_eq!(notification.body, r#"{"price":42}"#);
    assert_eq!(notification.header("x-amz-sns-rawdelivery"), Some("true"));
    assert_eq!(
        notification.header("content-type"),
        Some("application/json")
    );
}

#[tokio::test]
async fn retries_wait_for_the_policy_delays_on_a_manual_clock() {
    let (server, clock) = common::start_with_manual_clock().await;
    let receiver = Receiver::start().await;
    let topic = topic(&server, "retry", &[]).await;
    let confirmation = subscribe_http(
        &server,
        &receiver,
        &topic,
        "/flaky",
        &[(
            "DeliveryPolicy",
            r#"{"healthyRetryPolicy":{"minDelayTarget":5,"maxDelayTarget":10,"numRetries":3,"numNoDelayRetries":1}}"#,
        )],
    )
    .await;
    let arn = confirm(&server, &confirmation).await;
    // Confirmed and not yet delivered to: listed, with nothing to tell.
    let idle = webhook_stats(&server).await["Subscriptions"].clone();
    assert_eq!(idle.as_array().unwrap().len(), 1, "{idle}");
    assert_eq!(
        (
            &idle[0]["SubscriptionArn"],
            &idle[0]["Pending"],
            &idle[0]["Delivered"]
        ),
        (&arn.clone().into(), &0.into(), &0.into())
    );
    assert_eq!(idle[0]["NextAttempt"], serde_json::Value::Null);
    receiver.respond("/flaky", &[500, 503, 502]);
    publish(&server, &topic, "eventually").await;
    // Attempt 1 fails; the no-delay retry follows at once and fails too.
    assert_eq!(receiver.next().await.status, 500);
    assert_eq!(receiver.next().await.status, 503);
    // The backoff phase: 5 s, then 10 s. Nothing happens before each delay has passed.
    // (Each failure is noted, and its retry scheduled, before the clock moves.)
    // The worker sends only what is due, so a retry scheduled later cannot have been sent.
    wait_for_retries(&server, 2).await;
    assert_eq!(next_attempt(&server).await, due_at(clock.now().0 + 5_000));
    clock.advance_millis(4_900);
    assert!(receiver.within(0).await.is_none(), "retried too early");
    clock.advance_millis(100);
    assert_eq!(receiver.next().await.status, 502);
    wait_for_retries(&server, 3).await;
    assert_eq!(next_attempt(&server).await, due_at(clock.now().0 + 10_000));
    clock.advance_millis(9_999);
    assert!(receiver.within(0).await.is_none(), "retried too early");
    clock.advance_millis(1);
    let last = receiver.next().await;
    assert_eq!(last.status, 200);
    assert_eq!(last.json()["Message"], "eventually");
    // The receiver answered before the server noted the delivery: on PostgreSQL, moving the
    // clock past the delivery's lease before then would hand it out again.
    wait_for_count(&server, "Delivered", 1).await;
    let lane = webhook_stats(&server).await["Subscriptions"][0].clone();
    assert_eq!(
        (&lane["Pending"], &lane["NextAttempt"]),
        (&0.into(), &serde_json::Value::Null)
    );
    clock.advance_millis(3_600_000);
    assert!(receiver.within(0).await.is_none(), "delivered once only");
}

#[tokio::test]
async fn client_errors_dead_letter_at_once_and_server_errors_after_retries() {
    let (server, clock) = common::start_with_manual_clock().await;
    let receiver = Receiver::start().await;
    let dlq = common::create_queue(&server, "hook-dlq", &[]).await;
    let topic = topic(&server, "failing", &[]).await;
    let redrive = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:hook-dlq"}"#;
    for path in ["/gone", "/down"] {
        let confirmation = subscribe_http(
            &server,
            &receiver,
            &topic,
            path,
            &[("RedrivePolicy", redrive)],
        )
        .await;
        confirm(&server, &confirmation).await;
    }
    receiver.always("/gone", 404);
    receiver.always("/down", 500);
    publish(&server, &topic, "doomed").await;
    let mut first = [receiver.next().await, receiver.next().await];
    first.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!((first[0].path.as_str(), first[0].status), ("/down", 500));
    assert_eq!((first[1].path.as_str(), first[1].status), ("/gone", 404));
    // The 404 is final: its copy is in the DLQ already, as the envelope that was POSTed.
    let dead = wait_for_messages(&server, &dlq, 1).await;
    let envelope: serde_json::Value = serde_json::from_str(&dead[0]).unwrap();
    assert_eq!(envelope["Message"], "doomed");
    assert!(envelope["UnsubscribeURL"]
        .as_str()
        .unwrap()
        .contains("Unsubscribe"));
    // The 500 is retried three times, 20 s apart (the default policy), then dead-lettered.
    for retries in 1..=3 {
        wait_for_retries(&server, retries).await;
        assert_eq!(next_attempt(&server).await, due_at(clock.now().0 + 20_000));
        assert!(receiver.within(0).await.is_none());
        clock.advance_millis(20_000);
        let retry = receiver.next().await;
        assert_eq!((retry.path.as_str(), retry.status), ("/down", 500));
    }
    let dead = wait_for_messages(&server, &dlq, 1).await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&dead[0]).unwrap()["Message"],
        "doomed"
    );
    let stats = webhook_stats(&server).await;
    let total: u64 = stats["Subscriptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["DeadLettered"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 2);
}

/// The time a lane's next attempt falls due, as `/_orderly/webhooks` writes it.
fn due_at(millis: u64) -> serde_json::Value {
    orderly::service::inspect::rfc3339(orderly::engine::Timestamp(millis)).into()
}

/// The next attempt of whichever lane has one scheduled.
async fn next_attempt(server: &Server) -> serde_json::Value {
    let stats = webhook_stats(server).await;
    let lanes = stats["Subscriptions"].as_array().unwrap().clone();
    let scheduled = lanes.into_iter().map(|lane| lane["NextAttempt"].clone());
    scheduled
        .into_iter()
        .find(|at| !at.is_null())
        .unwrap_or_default()
}

/// `GET /_orderly/webhooks` of the node holding the subscriptions; with the shards spread
/// over several nodes, each tells of the subscriptions it leads, so their lists are joined.
async fn webhook_stats(server: &Server) -> serde_json::Value {
    let mut joined: Option<serde_json::Value> = None;
    for node in common::leading_nodes(server).await {
        let text = reqwest::get(format!("{node}/_orderly/webhooks"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let stats: serde_json::Value = serde_json::from_str(&text).unwrap();
        match &mut joined {
            None => joined = Some(stats),
            Some(joined) => {
                let more = stats["Subscriptions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if let Some(all) = joined["Subscriptions"].as_array_mut() {
                    all.extend(more);
                }
            }
        }
    }
    joined.expect("a node")
}

/// Waits until the server has scheduled `n` retries in all (so moving the clock is safe).
async fn wait_for_retries(server: &Server, n: u64) {
    wait_for_count(server, "Retries", n).await;
}

/// Waits until the subscriptions' `counter` (of `GET /_orderly/webhooks`) adds up to `n`.
/// Real time, bounded: attempts are real HTTP requests to a real receiver.
async fn wait_for_count(server: &Server, counter: &str, n: u64) {
    for _ in 0..200 {
        let stats = webhook_stats(server).await;
        let sum: u64 = stats["Subscriptions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s[counter].as_u64().unwrap())
            .sum();
        if sum >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{counter} never reached {n}");
}

/// Receives (and deletes) `n` messages from a queue, waiting for them to arrive. Real time,
/// bounded: they come through a real webhook and back into the queue.
async fn wait_for_messages(server: &Server, url: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..50 {
        for (body, _) in common::drain(server, url).await {
            out.push(body);
        }
        if out.len() >= n {
            return out;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("expected {n} messages, got {out:?}");
}

#[tokio::test]
async fn unsubscribe_sends_a_confirmation_that_can_restore_the_subscription() {
    let server = common::start().await;
    let receiver = Receiver::start().await;
    let topic = topic(&server, "leaving", &[]).await;
    let confirmation = subscribe_http(&server, &receiver, &topic, "/leaving", &[]).await;
    let arn = confirm(&server, &confirmation).await;
    server
        .sns
        .unsubscribe()
        .subscription_arn(&arn)
        .send()
        .await
        .unwrap();
    let goodbye = receiver.next().await;
    assert_eq!(
        goodbye.header("x-amz-sns-message-type"),
        Some("UnsubscribeConfirmation")
    );
    assert_eq!(
        goodbye.header("x-amz-sns-subscription-arn"),
        Some(arn.as_str())
    );
    let body = goodbye.json();
    assert_eq!(
        body["Message"],
        format!("You have chosen to deactivate subscription {arn}.\nTo cancel this operation and restore the subscription, visit the SubscribeURL included in this message.")
    );
    verify_signature(&body).await.unwrap();
    assert!(server
        .sns
        .get_subscription_attributes()
        .subscription_arn(&arn)
        .send()
        .await
        .is_err());
    // Visiting the SubscribeURL restores it, with the same ARN.
    let xml = reqwest::get(body["SubscribeURL"].as_str().unwrap())
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(xml_text(&xml, "SubscriptionArn"), Some(arn.as_str()));
    publish(&server, &topic, "welcome back").await;
    assert_eq!(receiver.next().await.json()["Message"], "welcome back");
}

#[tokio::test]
async fn authenticate_on_unsubscribe_refuses_the_unsigned_unsubscribe_url() {
    let server = common::start().await;
    let receiver = Receiver::start().await;
    let topic = topic(&server, "guarded", &[]).await;
    let confirmation = subscribe_http(&server, &receiver, &topic, "/guarded", &[]).await;
    let arn = server
        .sns
        .confirm_subscription()
        .topic_arn(&topic)
        .token(confirmation["Token"].as_str().unwrap())
        .authenticate_on_unsubscribe("true")
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap();
    publish(&server, &topic, "hello").await;
    let unsubscribe_url = receiver.next().await.json()["UnsubscribeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let response = reqwest::get(&unsubscribe_url).await.unwrap();
    assert_eq!(response.status(), 403);
    assert!(response
        .text()
        .await
        .unwrap()
        .contains("AuthorizationError"));
    assert_eq!(
        crate::common::subscription_attributes(&server, &arn).await["PendingConfirmation"],
        "false"
    );
}

#[tokio::test]
async fn endpoint_validation_and_the_allow_list() {
    let mut config = Config::ephemeral();
    config.webhook_allow = orderly::delivery::AllowList::parse("10.0.0.0/8").unwrap();
    let server = common::start_with(config).await;
    let topic = topic(&server, "guarded", &[]).await;
    let subscribe = |protocol: &'static str, endpoint: &'static str| {
        server
            .sns
            .subscribe()
            .topic_arn(&topic)
            .protocol(protocol)
            .endpoint(endpoint)
            .send()
    };
    let err = subscribe("http", "http://127.0.0.1:9/hook")
        .await
        .unwrap_err();
    assert!(format!("{err:?}").contains("allow-list"), "{err:?}");
    let err = subscribe("https", "http://10.0.0.1/hook")
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").contains("Endpoint must match the specified protocol"),
        "{err:?}"
    );
    assert!(subscribe("http", "http://10.1.2.3:9/hook").await.is_ok());
}

#[tokio::test]
async fn fifo_topics_refuse_http_unless_the_extension_is_on() {
    let server = common::start().await;
    let topic = common::fifo_topic(&server, "plain.fifo").await;
    let err = server
        .sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("https")
        .endpoint("https://example.com/hook")
        .send()
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").contains("Invalid parameter: Invalid protocol type: https"),
        "{err:?}"
    );
}

#[tokio::test]
async fn ordered_fifo_webhooks_block_only_the_failing_group() {
    let clock = common::manual_clock();
    let mut config = Config::ephemeral();
    config.fifo_http_subscriptions = true;
    let server = common::start_with_clock(config, clock.clone()).await;
    let receiver = Receiver::start().await;
    let topic = common::fifo_topic(&server, "prices.fifo").await;
    let confirmation = subscribe_http(&server, &receiver, &topic, "/ordered", &[]).await;
    let arn = confirm(&server, &confirmation).await;
    let publish_in = |group: &'static str, body: &'static str| {
        server
            .sns
            .publish()
            .topic_arn(&topic)
            .message_group_id(group)
            .message(body)
            .send()
    };
    // Group a's first message fails once; group b must not wait for it.
    receiver.respond("/ordered", &[500]);
    publish_in("a", "a1").await.unwrap();
    let failed = receiver.next().await;
    assert_eq!(
        (failed.json()["Message"].as_str(), failed.status),
        (Some("a1"), 500)
    );
    assert_eq!(failed.header("x-amz-sns-message-group-id"), Some("a"));
    assert!(failed.header("x-amz-sns-sequence-number").is_some());
    verify_signature(&failed.json()).await.unwrap();
    publish_in("a", "a2").await.unwrap();
    publish_in("b", "b1").await.unwrap();
    publish_in("b", "b2").await.unwrap();
    // A duplicate (content-based dedup) is never POSTed.
    publish_in("b", "b1").await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(
            receiver.next().await.json()["Message"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(seen, vec!["b1", "b2"]);
    // Everything due was taken together and b's are done: a2, published before them, would
    // have gone with them. It waits behind a1, whose retry is the lane's next attempt.
    wait_for_count(&server, "Delivered", 2).await;
    wait_for_retries(&server, 1).await;
    let lane = webhook_stats(&server).await["Subscriptions"][0].clone();
    assert_eq!(
        (&lane["Pending"], &lane["InFlight"]),
        (&2.into(), &0.into())
    );
    assert_eq!(lane["NextAttempt"], due_at(clock.now().0 + 20_000));
    assert!(receiver.within(0).await.is_none(), "a2 waits behind a1");
    clock.advance_millis(20_000);
    let mut group_a = Vec::new();
    for _ in 0..2 {
        let r = receiver.next().await;
        assert_eq!(r.status, 200);
        group_a.push(r.json()["Message"].as_str().unwrap().to_string());
    }
    assert_eq!(group_a, vec!["a1", "a2"]);
    // The outbox holds nothing more to send: a duplicate of b1 would have been among it.
    wait_for_count(&server, "Delivered", 4).await;
    assert!(receiver.within(0).await.is_none(), "no duplicate of b1");
    let stats = webhook_stats(&server).await;
    let lane = &stats["Subscriptions"][0];
    assert_eq!(lane["SubscriptionArn"], arn.as_str());
    assert_eq!(
        (lane["Delivered"].as_u64(), lane["Retries"].as_u64()),
        (Some(4), Some(1))
    );
}

#[tokio::test]
async fn query_protocol_subscribe_can_return_the_pending_arn() {
    let server = common::start().await;
    let receiver = Receiver::start().await;
    let topic = topic(&server, "query", &[]).await;
    let endpoint = receiver.url("/q");
    let (status, xml) = query(
        &server,
        "/",
        &[
            ("Action", "Subscribe"),
            ("Version", "2010-03-31"),
            ("TopicArn", &topic),
            ("Protocol", "http"),
            ("Endpoint", &endpoint),
            ("ReturnSubscriptionArn", "true"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{xml}");
    let arn = xml_text(&xml, "SubscriptionArn").unwrap();
    assert!(arn.starts_with(&format!("{topic}:")));
    assert_eq!(
        receiver.next().await.header("x-amz-sns-message-type"),
        Some("SubscriptionConfirmation")
    );
    assert_eq!(
        crate::common::subscription_attributes(&server, arn).await["PendingConfirmation"],
        "true"
    );
}

#[tokio::test]
async fn https_endpoints_need_a_valid_certificate_unless_told_otherwise() {
    let receiver = Receiver::start_tls().await;
    // Certificates are checked by default: a self-signed endpoint never gets the confirmation.
    let strict = common::start().await;
    let topic_arn = topic(&strict, "strict", &[]).await;
    strict
        .sns
        .subscribe()
        .topic_arn(&topic_arn)
        .protocol("https")
        .endpoint(receiver.url("/secure"))
        .send()
        .await
        .unwrap();
    // The attempt ended in an error, so whatever it sent has arrived by now. The receiver
    // counts the refused handshake on its own time: poll, with a bound.
    let errors = common::delivery_errors(&strict, 1).await;
    for _ in 0..100 {
        if receiver.failed_handshakes() >= 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        receiver.failed_handshakes() >= 1,
        "the confirmation was attempted and the certificate refused: {errors:?}"
    );
    assert!(receiver.within(0).await.is_none(), "{errors:?}");

    let mut config = Config::ephemeral();
    config.webhook_accept_invalid_certs = true;
    let lenient = common::start_with(config).await;
    let topic_arn = topic(&lenient, "lenient", &[]).await;
    let confirmation = subscribe_http(&lenient, &receiver, &topic_arn, "/secure", &[]).await;
    confirm(&lenient, &confirmation).await;
    publish(&lenient, &topic_arn, "over tls").await;
    let notification = receiver.next().await;
    assert_eq!(notification.json()["Message"], "over tls");
    verify_signature(&notification.json()).await.unwrap();
}

#[tokio::test]
async fn a_request_that_times_out_is_retried_then_dead_lettered() {
    let mut config = Config::ephemeral();
    config.webhook_timeout = 1;
    let server = common::start_with(config).await;
    let receiver = Receiver::start().await;
    let dlq = common::create_queue(&server, "slow-dlq", &[]).await;
    let topic = topic(&server, "slow", &[]).await;
    let confirmation = subscribe_http(
        &server,
        &receiver,
        &topic,
        "/slow",
        &[
            (
                "DeliveryPolicy",
                r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":1,"numRetries":1}}"#,
            ),
            (
                "RedrivePolicy",
                r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:slow-dlq"}"#,
            ),
        ],
    )
    .await;
    confirm(&server, &confirmation).await;
    receiver.delay("/slow", std::time::Duration::from_secs(5));
    publish(&server, &topic, "too slow").await;
    let started = std::time::Instant::now();
    assert_eq!(receiver.next().await.json()["Message"], "too slow");
    assert_eq!(
        receiver.next().await.json()["Message"],
        "too slow",
        "retried after the timeout"
    );
    let dead = wait_for_messages(&server, &dlq, 1).await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&dead[0]).unwrap()["Message"],
        "too slow"
    );
    // Two 1-second timeouts and a 1-second retry delay, not the endpoint's 5-second answers.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// `GET /_orderly/subscriptions`: a webhook's last deliveries (the hand-over to the outbox,
/// a failed attempt, its retry) and its last error.
#[tokio::test]
async fn the_inspection_api_shows_a_webhooks_last_deliveries() {
    let (server, clock) = common::start_with_manual_clock().await;
    let receiver = Receiver::start().await;
    let topic = topic(&server, "watched", &[]).await;
    let confirmation = subscribe_http(&server, &receiver, &topic, "/hook", &[]).await;
    let arn = confirm(&server, &confirmation).await;
    // The first attempt fails with 503, the retry succeeds.
    receiver.respond("/hook", &[503]);
    publish(&server, &topic, "one").await;
    assert_eq!(receiver.next().await.status, 503);
    // The retry is due after the delivery policy's delay, on the server's clock.
    let retried = loop {
        if let Some(request) = receiver.within(50).await {
            break request;
        }
        clock.advance_millis(1_000);
    };
    assert_eq!(retried.json()["Message"], "one");
    let mut fates = Vec::new();
    let mut last_error = serde_json::Value::Null;
    for _ in 0..100 {
        let listing = common::get_json(&server, "/_orderly/subscriptions").await;
        let subscription = &listing["subscriptions"][0];
        assert_eq!(subscription["subscriptionArn"], arn.as_str());
        fates = subscription["lastDeliveries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["fate"].as_str().unwrap().to_string())
            .collect();
        last_error = subscription["lastError"].clone();
        if fates.len() == 3 {
            break;
        }
        // The worker records the attempt just after the receiver answered.
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(fates, ["toWebhook", "retrying", "delivered"]);
    assert_eq!(last_error["error"], "HTTP 503 Service Unavailable");
}

/// With `--enforce-queue-policies`, a webhook's dead-letter queue takes a refused delivery only
/// if its policy lets SNS send from the topic; otherwise the delivery is dropped.
#[tokio::test]
async fn with_queue_policies_enforced_a_webhook_dead_letters_only_where_allowed() {
    let mut config = orderly::config::Config::ephemeral();
    config.enforce_queue_policies = true;
    let server = common::start_with_clock(config, common::manual_clock()).await;
    dead_letters_only_where_allowed(&server, ["policed", "open-dlq", "closed-dlq"]).await;
}

/// As above, each dead-letter queue in a shard of its own, not the topic's: the copy the
/// closed one refuses is counted as dropped once its shard says so.
#[tokio::test]
async fn a_webhooks_dead_letter_refused_in_another_shard_is_counted_as_dropped() {
    use crate::shards::{name_in, SHARDS};
    let mut config = orderly::config::Config::ephemeral();
    config.enforce_queue_policies = true;
    let server = common::start_sharded_with_clock(config, SHARDS, common::manual_clock()).await;
    let names = [
        name_in("policed", "", 0),
        name_in("open-dlq", "", 1),
        name_in("closed-dlq", "", 2),
    ];
    dead_letters_only_where_allowed(&server, names.each_ref().map(|n| n.as_str())).await;
}

/// A topic `names[0]` with webhooks that always fail, dead-lettering into a queue whose policy
/// lets SNS in (`names[1]`) and one without a policy (`names[2]`), with queue policies enforced.
async fn dead_letters_only_where_allowed(server: &Server, names: [&str; 3]) {
    let [topic_name, open_name, closed_name] = names;
    let receiver = Receiver::start().await;
    let topic = topic(server, topic_name, &[]).await;
    let allowing = format!(
        r#"{{"Statement":[{{"Effect":"Allow","Principal":{{"Service":"sns.amazonaws.com"}},"Action":"sqs:SendMessage","Resource":"arn:aws:sqs:us-east-1:000000000000:{open_name}","Condition":{{"ArnEquals":{{"aws:SourceArn":"{topic}"}}}}}}]}}"#
    );
    let open = common::create_queue(server, open_name, &[("Policy", &allowing)]).await;
    let closed = common::create_queue(server, closed_name, &[]).await;
    for (path, dlq) in [("/open", open_name), ("/closed", closed_name)] {
        let redrive =
            format!(r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{dlq}"}}"#);
        let attributes = [("RedrivePolicy", redrive.as_str())];
        let confirmation = subscribe_http(server, &receiver, &topic, path, &attributes).await;
        confirm(server, &confirmation).await;
    }
    receiver.always("/open", 404);
    receiver.always("/closed", 404);
    publish(server, &topic, "refused").await;
    let _ = [receiver.next().await, receiver.next().await];
    let dead = wait_for_messages(server, &open, 1).await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&dead[0]).unwrap()["Message"],
        "refused"
    );
    wait_for_count(server, "Dropped", 1).await;
    wait_for_count(server, "DeadLettered", 1).await;
    assert!(common::drain(server, &closed).await.is_empty());
    let stats = webhook_stats(server).await;
    let counted = |counter: &str| -> Vec<u64> {
        let mut each: Vec<u64> = (stats["Subscriptions"].as_array().unwrap().iter())
            .map(|s| s[counter].as_u64().unwrap())
            .collect();
        each.sort_unstable();
        each
    };
    // Each failure counted once, by the subscription it failed.
    assert_eq!(
        (counted("Dropped"), counted("DeadLettered")),
        (vec![0, 1], vec![0, 1])
    );
}
