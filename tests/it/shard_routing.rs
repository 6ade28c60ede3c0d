//! Two nodes, each leading some of four shards (set by hand here: placement decides it on a
//! database), seen through the SDKs: a request to either node for a queue in a shard the other
//! leads is passed there as the client sent it and answered from there; a request passed on
//! once is never passed again; a listing that would need the other node's shards is refused
//! rather than answered from half of them (nodes set by hand have no way to ask one another;
//! nodes leading their shares of a database do, `multi_node_shards`); a leader that cannot be
//! reached is said so.

use aws_sdk_sqs::error::ProvideErrorMetadata;
use orderly::app::App;
use orderly::config::Config;

use crate::common::{get_json, query, start_sharded, Server, Stoppable};
use crate::shards::{name_in, SHARDS};

/// A node leading shards 0 and 1 of four, passing requests for 2 and 3 to `other`.
async fn leading_half(other: &Server) -> Stoppable {
    let mut config = Config::ephemeral();
    config.shards = SHARDS;
    config.leader_wait = 1;
    config.test_shards_led_elsewhere = vec![(2, other.url()), (3, other.url())];
    Stoppable::start(App::bind(&config).await.expect("bind")).await
}

/// A node leading all four shards, that can be stopped.
async fn leading_all() -> Stoppable {
    let mut config = Config::ephemeral();
    config.shards = SHARDS;
    Stoppable::start(App::bind(&config).await.expect("bind")).await
}

async fn standard(server: &Server, name: &str) -> String {
    (server.sqs.create_queue().queue_name(name))
        .send()
        .await
        .expect("created")
        .queue_url
        .expect("a URL")
}

async fn fifo(server: &Server, name: &str) -> String {
    (server.sqs.create_queue())
        .queue_name(name)
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .expect("created")
        .queue_url
        .expect("a URL")
}

async fn send(server: &Server, url: &str, body: &str) -> Result<String, String> {
    (server.sqs.send_message())
        .queue_url(url)
        .message_body(body)
        .message_group_id("g")
        .message_deduplication_id(body.replace(" ", "-"))
        .send()
        .await
        .map(|sent| sent.message_id.unwrap_or_default())
        .map_err(|error| error.code().unwrap_or("no code").to_string())
}

async fn bodies(server: &Server, url: &str) -> Vec<String> {
    (server.sqs.receive_message())
        .queue_url(url)
        .max_number_of_messages(10)
        .send()
        .await
        .expect("received")
        .messages
        .unwrap_or_default()
        .into_iter()
        .filter_map(|message| message.body)
        .collect()
}

/// How many requests `server` passed on and had answered, as its `/metrics` says.
async fn passed_on(server: &Server) -> Option<u64> {
    metric(
        server,
        "orderly_forwarded_requests_total{outcome=\"answered\"}",
    )
    .await
}

/// How many requests `server` passed on over a link between nodes, as its `/metrics` says.
async fn passed_on_link(server: &Server) -> Option<u64> {
    metric(server, "orderly_forwarded_on_link_requests_total ").await
}

async fn metric(server: &Server, line_start: &str) -> Option<u64> {
    let metrics = reqwest::get(format!("{}/metrics", server.url()))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    (metrics.lines())
        .find(|line| line.starts_with(line_start))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|count| count.parse().ok())
}

#[tokio::test]
async fn a_request_for_a_shard_another_node_leads_is_answered_by_that_node() {
    let other = start_sharded(SHARDS).await;
    let node = leading_half(&other).await;
    let here = name_in("here", ".fifo", 0);
    let there = name_in("there", ".fifo", 2);

    // Created through the node for either shard: the URL names the node the client asked.
    let here_url = fifo(&node.server, &here).await;
    let there_url = fifo(&node.server, &there).await;
    assert_eq!(there_url, node.server.queue_url(&there));
    send(&node.server, &here_url, "kept here").await.unwrap();
    send(&node.server, &there_url, "kept there").await.unwrap();

    // The other node holds the queue of its shard, and none of this node's.
    assert_eq!(
        bodies(&other, &other.queue_url(&there)).await,
        ["kept there"]
    );
    let missing = other.sqs.get_queue_url().queue_name(&here).send().await;
    assert_eq!(
        missing.unwrap_err().code(),
        Some("AWS.SimpleQueueService.NonExistentQueue")
    );
    assert_eq!(bodies(&node.server, &here_url).await, ["kept here"]);

    // The Query protocol is passed on as well, its answer back as the other node gave it.
    let path = format!("/000000000000/{there}");
    let params = [
        ("Action", "SendMessage"),
        ("MessageBody", "by query"),
        ("MessageGroupId", "g"),
        ("MessageDeduplicationId", "q"),
    ];
    let (status, answer) = query(&node.server, &path, &params).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("<SendMessageResult>"), "{answer}");

    // CreateQueue, SendMessage and the Query SendMessage of the other node's queue, each on
    // the link to the other node.
    assert_eq!(passed_on(&node.server).await, Some(3));
    assert_eq!(passed_on_link(&node.server).await, Some(3));
    // One after another, each went in a write of its own.
    let writes = metric(&node.server, "orderly_link_writes_total ").await;
    assert_eq!(writes, Some(3));
    node.stop().await;
}

#[tokio::test]
async fn without_the_link_requests_are_passed_on_as_http_requests_alike() {
    let other = start_sharded(SHARDS).await;
    let mut config = Config::ephemeral();
    config.shards = SHARDS;
    config.leader_wait = 1;
    config.node_link = false;
    config.test_shards_led_elsewhere = vec![(2, other.url()), (3, other.url())];
    let node = Stoppable::start(App::bind(&config).await.expect("bind")).await;
    let there = name_in("there", ".fifo", 2);
    let there_url = fifo(&node.server, &there).await;
    send(&node.server, &there_url, "over http").await.unwrap();
    assert_eq!(bodies(&node.server, &there_url).await, ["over http"]);
    assert_eq!(passed_on(&node.server).await, Some(3));
    assert_eq!(passed_on_link(&node.server).await, Some(0));
    node.stop().await;
}

/// Sends and publishes, single and batched, whose queue or topic another node leads are passed
/// on before their messages are read here (no digest, no copy of a body or attribute made for nothing): even
/// one refused for what the service reads of its message is passed on, and the leader's
/// refusal comes back.
#[tokio::test]
async fn a_send_or_publish_led_elsewhere_is_passed_on_before_its_message_is_read() {
    let other = start_sharded(SHARDS).await;
    let node = leading_half(&other).await;
    let queue = fifo(&node.server, &name_in("early", ".fifo", 2)).await;
    let topic = (node.server.sns.create_topic())
        .name(name_in("early", "", 3))
        .send()
        .await
        .expect("created")
        .topic_arn
        .expect("an ARN");
    let before = passed_on(&node.server).await.expect("counted");
    // Both refused by what the service reads of the message, before any shard is asked.
    let trace = aws_sdk_sqs::types::MessageSystemAttributeValue::builder()
        .data_type("String")
        .string_value("v")
        .build()
        .expect("an attribute");
    let refused = (node.server.sqs.send_message().queue_url(&queue))
        .message_body("b")
        .message_group_id("g")
        .message_deduplication_id("d")
        .message_system_attributes("Unknown".into(), trace)
        .send()
        .await
        .expect_err("not a system attribute SQS takes");
    assert_eq!(
        refused.message(),
        Some("Message system attribute name 'Unknown' is invalid."),
        "{refused:?}"
    );
    let refused = (node.server.sns.publish().topic_arn(&topic))
        .message("m")
        .message_structure("xml")
        .send()
        .await
        .expect_err("not a structure SNS takes");
    assert!(
        (refused.message()).is_some_and(|m| m.contains("MessageStructure")),
        "{refused:?}"
    );
    // And each kind of batch, refused for two entries with one id.
    let entry = |id: &str| {
        aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
            .id(id)
            .message_body("b")
            .message_group_id("g")
            .message_deduplication_id(id)
            .build()
            .expect("an entry")
    };
    let refused = (node.server.sqs.send_message_batch().queue_url(&queue))
        .entries(entry("same"))
        .entries(entry("same"))
        .send()
        .await
        .expect_err("two entries with one id")
        .into_service_error();
    assert!(refused.is_batch_entry_ids_not_distinct(), "{refused:?}");
    let entry = |id: &str| {
        aws_sdk_sns::types::PublishBatchRequestEntry::builder()
            .id(id)
            .message("m")
            .build()
            .expect("an entry")
    };
    let refused = (node.server.sns.publish_batch().topic_arn(&topic))
        .publish_batch_request_entries(entry("same"))
        .publish_batch_request_entries(entry("same"))
        .send()
        .await
        .expect_err("two entries with one id")
        .into_service_error();
    assert!(
        refused.is_batch_entry_ids_not_distinct_exception(),
        "{refused:?}"
    );
    assert_eq!(
        passed_on(&node.server).await,
        Some(before + 4),
        "every one answered by the leader"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_listing_across_nodes_is_refused_not_answered_in_part() {
    let other = start_sharded(SHARDS).await;
    let node = leading_half(&other).await;
    fifo(&node.server, &name_in("here", ".fifo", 1)).await;
    let listed = node.server.sqs.list_queues().send().await;
    assert_eq!(listed.unwrap_err().code(), Some("ServiceUnavailable"));
    let topics = node.server.sns.list_topics().send().await;
    assert_eq!(
        aws_sdk_sns::error::ProvideErrorMetadata::code(&topics.unwrap_err()),
        Some("ServiceUnavailable")
    );
    // What a node says of itself is its own to answer.
    let cluster = get_json(&node.server, "/_orderly/cluster").await;
    assert_eq!(cluster["shards"], SHARDS);
    node.stop().await;
}

/// A request another node passed here is not passed on again, even when this node does not
/// lead its shard: refused as not served (503), the sender tries the shard's next leader.
#[tokio::test]
async fn a_request_passed_on_once_is_not_passed_again() {
    let other = start_sharded(SHARDS).await;
    let node = leading_half(&other).await;
    let there = name_in("there", ".fifo", 3);
    fifo(&other, &there).await;
    let refused = reqwest::Client::new()
        .post(node.server.url())
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amz-target", "AmazonSQS.GetQueueUrl")
        .header("x-orderly-forwarded", "1")
        .body(format!("{{\"QueueName\":\"{there}\"}}"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("x-orderly-not-served"));
    // Not forwarded, it is.
    let found = node
        .server
        .sqs
        .get_queue_url()
        .queue_name(&there)
        .send()
        .await;
    assert!(found.is_ok(), "{found:?}");
    node.stop().await;
}

/// With the shard's leader gone, a request for it waits `--leader-wait` and is then refused as
/// not kept (503), which SDKs retry; the node's own shards serve on.
#[tokio::test]
async fn a_shard_whose_leader_is_gone_is_unavailable_and_the_rest_serve() {
    let other = leading_all().await;
    let node = leading_half(&other.server).await;
    let (here, there) = (name_in("here", ".fifo", 0), name_in("there", ".fifo", 2));
    let here_url = fifo(&node.server, &here).await;
    let there_url = fifo(&node.server, &there).await;
    other.stop().await;
    let refused = send(&node.server, &there_url, "nowhere").await;
    assert_eq!(refused, Err("ServiceUnavailable".to_string()));
    send(&node.server, &here_url, "still here").await.unwrap();
    node.stop().await;
}

/// A request that used a shard here is answered here, whatever it read of another node's
/// shards on the way: a Subscribe of a queue the other node leads to a topic led here is made
/// here, and not passed on as well.
#[tokio::test]
async fn a_request_that_used_a_shard_here_is_not_passed_on() {
    let other = start_sharded(SHARDS).await;
    let node = leading_half(&other).await;
    let queue = name_in("there", ".fifo", 2);
    let queue_url = fifo(&node.server, &queue).await;
    let topic = (node.server.sns.create_topic())
        .name(name_in("prices", ".fifo", 1))
        .attributes("FifoTopic", "true")
        .send()
        .await
        .expect("a topic")
        .topic_arn
        .expect("an ARN");
    let queue_arn = format!("arn:aws:sqs:us-east-1:000000000000:{queue}");
    let subscribed = (node.server.sns.subscribe())
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(&queue_arn)
        .send()
        .await
        .expect("subscribed");
    assert!(subscribed.subscription_arn.is_some());
    let listed = (node.server.sns.list_subscriptions_by_topic())
        .topic_arn(&topic)
        .send()
        .await
        .expect("listed");
    assert_eq!(listed.subscriptions().len(), 1);
    // The queue's CreateQueue only: neither the topic's requests nor the Subscribe.
    assert_eq!(passed_on(&node.server).await, Some(1));
    assert_eq!(queue_url, node.server.queue_url(&queue));
    node.stop().await;
}

/// Requests this node sent straight to the leader of their queue's shard, as learned from an
/// earlier request on that queue.
async fn passed_straight(server: &Server) -> Option<u64> {
    metric(server, "orderly_forwarded_straight_requests_total ").await
}

/// Once a request on a queue's messages was refused here for the shard another node leads, the
/// next ones on that queue go straight to that node, each served once (a standard queue, so
/// a send made twice would show), with the answers the longer way gives (the leader's refusals
/// among them); a queue led here is served here; and once the leader is gone, no straight
/// attempt is taken and the longer way answers as one that reached no leader, as before.
#[tokio::test]
async fn requests_on_a_queues_messages_go_straight_to_its_leader_once_learned() {
    let other = leading_all().await;
    let node = leading_half(&other.server).await;
    let there = name_in("straight", "", 2);
    let there_url = standard(&node.server, &there).await;
    let here_url = fifo(&node.server, &name_in("here", ".fifo", 0)).await;
    let send_there = |body: &'static str| {
        (node.server.sqs.send_message().queue_url(&there_url))
            .message_body(body)
            .send()
    };
    send_there("first").await.expect("sent");
    assert_eq!(passed_straight(&node.server).await, Some(0), "learned");
    send_there("second").await.expect("sent");
    let received = (node.server.sqs.receive_message().queue_url(&there_url))
        .max_number_of_messages(10)
        .send()
        .await
        .expect("received")
        .messages
        .unwrap_or_default();
    let mut got: Vec<_> = received.iter().filter_map(|m| m.body()).collect();
    got.sort();
    assert_eq!(got, ["first", "second"]);
    let entries = received.iter().enumerate().map(|(n, message)| {
        aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
            .id(n.to_string())
            .receipt_handle(message.receipt_handle().expect("a handle"))
            .build()
            .expect("an entry")
    });
    let deleted = (node.server.sqs.delete_message_batch().queue_url(&there_url))
        .set_entries(Some(entries.collect()))
        .send()
        .await
        .expect("deleted");
    assert_eq!(deleted.successful().len(), 2, "{deleted:?}");
    assert_eq!(passed_straight(&node.server).await, Some(3));
    let at_leader = other.server.queue_url(&there);
    assert!(bodies(&other.server, &at_leader).await.is_empty());

    // The Query protocol's sends naming the queue go straight too, once learned for their
    // caller.
    for n in 1..=2 {
        let before = passed_straight(&node.server).await.expect("counted");
        let body = format!("by query {n}");
        let params = [
            ("Action", "SendMessage"),
            ("QueueUrl", there_url.as_str()),
            ("MessageBody", body.as_str()),
        ];
        let (status, answer) = query(&node.server, "/", &params).await;
        assert_eq!(status, 200, "{answer}");
        let after = passed_straight(&node.server).await.expect("counted");
        if n == 2 {
            assert_eq!(after, before + 1, "the second straight");
        }
    }
    let mut got = bodies(&other.server, &at_leader).await;
    got.sort();
    assert_eq!(got, ["by query 1", "by query 2"]);
    let straight = passed_straight(&node.server).await.expect("counted");

    // The leader's refusal, straight back.
    let refused = (node.server.sqs.send_message().queue_url(&there_url))
        .message_body("too late")
        .delay_seconds(901)
        .send()
        .await
        .expect_err("a delay past 15 minutes");
    assert_eq!(refused.code(), Some("InvalidParameterValue"), "{refused:?}");
    assert_eq!(passed_straight(&node.server).await, Some(straight + 1));

    // A queue led here is served here, nothing passed on.
    let passed = passed_on(&node.server).await;
    send(&node.server, &here_url, "here").await.unwrap();
    assert_eq!(bodies(&node.server, &here_url).await, ["here"]);
    assert_eq!(passed_on(&node.server).await, passed);
    assert_eq!(passed_straight(&node.server).await, Some(straight + 1));

    // The leader gone, no straight attempt is taken: each is run here, whose longer way waits
    // for a leader and says none took it.
    other.stop().await;
    let refused = send_there("nowhere").await.expect_err("no leader");
    assert_eq!(refused.code(), Some("ServiceUnavailable"), "{refused:?}");
    assert_eq!(passed_straight(&node.server).await, Some(straight + 1));
    node.stop().await;
}

/// Publishes (the Query protocol) to a topic whose shard another node leads go straight to
/// that node once one was refused here, and their copies arrive as by the longer way.
#[tokio::test]
async fn publishes_to_a_topic_go_straight_to_its_leader_once_learned() {
    let other = leading_all().await;
    let node = leading_half(&other.server).await;
    let queue = name_in("copies", "", 2);
    let queue_url = standard(&node.server, &queue).await;
    let topic = (node.server.sns.create_topic())
        .name(name_in("news", "", 3))
        .send()
        .await
        .expect("created")
        .topic_arn
        .expect("an ARN");
    (node.server.sns.subscribe().topic_arn(&topic))
        .protocol("sqs")
        .endpoint(format!("arn:aws:sqs:us-east-1:000000000000:{queue}"))
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .expect("subscribed");
    let publish = |message: &'static str| {
        node.server
            .sns
            .publish()
            .topic_arn(&topic)
            .message(message)
            .send()
    };
    publish("one").await.expect("published");
    assert_eq!(passed_straight(&node.server).await, Some(0), "learned");
    publish("two").await.expect("published");
    let entry = aws_sdk_sns::types::PublishBatchRequestEntry::builder()
        .id("3")
        .message("three")
        .build()
        .expect("an entry");
    let batch = (node.server.sns.publish_batch().topic_arn(&topic))
        .publish_batch_request_entries(entry)
        .send()
        .await
        .expect("published");
    assert_eq!(batch.successful().len(), 1, "{batch:?}");
    assert_eq!(passed_straight(&node.server).await, Some(2));
    // Copies cross shards a moment after the publish: long polls gather them.
    let at_leader = other.server.queue_url(&queue);
    let mut got = Vec::new();
    for _ in 0..20 {
        let received = (other.server.sqs.receive_message().queue_url(&at_leader))
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("received");
        got.extend(received.messages().iter().filter_map(|m| m.body.clone()));
        if got.len() >= 3 {
            break;
        }
    }
    got.sort();
    assert_eq!(got, ["one", "three", "two"]);
    assert_eq!(queue_url, node.server.queue_url(&queue));
    node.stop().await;
}

/// A straight request that the node passed to refuses as not served (it no longer leads the
/// shard: here it never did, and passes what another node sends it nowhere) is run here and
/// takes the longer way, as a request with no route learned does: not counted as straight,
/// answered as one no leader took.
#[tokio::test]
async fn a_straight_request_refused_as_not_served_takes_the_longer_way() {
    let leader = leading_all().await;
    let stale = leading_half(&leader.server).await;
    let node = leading_half(&stale.server).await;
    let there = name_in("stale", "", 2);
    standard(&leader.server, &there).await;
    let url = node.server.queue_url(&there);
    let not_sent = "orderly_forwarded_requests_total{outcome=\"not_sent\"}";
    for n in 1..=2 {
        // One attempt each, no SDK retrying.
        let answer = reqwest::Client::new()
            .post(node.server.url())
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", "AmazonSQS.SendMessage")
            .header("authorization", crate::common::signed("sqs"))
            .body(format!(r#"{{"QueueUrl":"{url}","MessageBody":"b"}}"#))
            .send()
            .await
            .expect("answered");
        assert_eq!(answer.status(), 503, "attempt {n}");
        assert_eq!(metric(&node.server, not_sent).await, Some(n), "attempt {n}");
    }
    assert_eq!(passed_straight(&node.server).await, Some(0));
    assert!(bodies(&leader.server, &leader.server.queue_url(&there))
        .await
        .is_empty());
    node.stop().await;
    stale.stop().await;
}
