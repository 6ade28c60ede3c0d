//! A server whose queues and topics are cut into shards, each with an engine of its own, seen
//! through the SDKs: what crosses shards (a topic's copies, dead letters, a move task's
//! messages) arrives once and in order, the rules that need another shard's queue still hold,
//! and listings gather every shard.

use std::collections::BTreeMap;

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::QueueAttributeName as A;
use orderly::engine::shard::Shard;

use crate::common::{create_queue, fifo_queue, get_json, redrive_to, start_sharded, Server};

pub(crate) const SHARDS: u32 = 4;

/// The first name `{stem}-N{suffix}` that falls in `shard`.
pub(crate) fn name_in(stem: &str, suffix: &str, shard: u32) -> String {
    (0..)
        .map(|n| format!("{stem}-{n}{suffix}"))
        .find(|name| Shard::of(SHARDS, name) == shard)
        .expect("some name falls in every shard")
}

/// Receives from a FIFO queue until `expected` messages came (never more), deleting each batch
/// to free its group; long polls, as a copy from another shard arrives a moment after its
/// publish.
pub(crate) async fn drain(server: &Server, url: &str, expected: usize) -> Vec<(String, String)> {
    let mut got = Vec::new();
    while got.len() < expected {
        let messages = server
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages((expected - got.len()).min(10) as i32)
            .wait_time_seconds(5)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default();
        assert!(!messages.is_empty(), "{} of {expected} arrived", got.len());
        for message in messages {
            let group = message.attributes().unwrap()
                [&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId]
                .clone();
            got.push((group, message.body().unwrap().to_string()));
            server
                .sqs
                .delete_message()
                .queue_url(url)
                .receipt_handle(message.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    got
}

/// A FIFO topic named `topic` with raw subscriptions for the FIFO queues `queues`, made here;
/// the topic's ARN and the queues' URLs.
pub(crate) async fn topic_into(
    server: &Server,
    topic: &str,
    queues: &[String],
) -> (String, Vec<String>) {
    let topic = server
        .sns
        .create_topic()
        .name(topic)
        .attributes("FifoTopic", "true")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let mut urls = Vec::new();
    for queue in queues {
        urls.push(fifo_queue(server, queue, &[]).await);
        server
            .sns
            .subscribe()
            .topic_arn(&topic)
            .protocol("sqs")
            .endpoint(format!("arn:aws:sqs:us-east-1:000000000000:{queue}"))
            .attributes("RawMessageDelivery", "true")
            .send()
            .await
            .unwrap();
    }
    (topic, urls)
}

#[tokio::test]
async fn a_topics_copies_reach_queues_of_other_shards_once_and_in_group_order() {
    let server = start_sharded(SHARDS).await;
    let topic_name = name_in("prices", ".fifo", 0);
    let queues = [name_in("desk", ".fifo", 1), name_in("audit", ".fifo", 2)];
    let (topic, urls) = topic_into(&server, &topic_name, &queues).await;
    // Three groups interleaved; every publish's id is repeated once, which the topic's
    // deduplication keeps from both queues.
    for n in 0..30 {
        for _ in 0..2 {
            server
                .sns
                .publish()
                .topic_arn(&topic)
                .message(format!("{n}"))
                .message_group_id(format!("g{}", n % 3))
                .message_deduplication_id(format!("d{n}"))
                .send()
                .await
                .unwrap();
        }
    }
    for url in &urls {
        let got = drain(&server, url, 30).await;
        let mut by_group: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for (group, body) in got {
            by_group
                .entry(group)
                .or_default()
                .push(body.parse().unwrap());
        }
        for (group, bodies) in &by_group {
            let start: u32 = group[1..].parse().unwrap();
            let expected: Vec<u32> = (start..30).step_by(3).collect();
            assert_eq!(
                bodies, &expected,
                "{url} {group}: each once, in publish order"
            );
        }
        let empty = server
            .sqs
            .receive_message()
            .queue_url(url)
            .send()
            .await
            .unwrap();
        assert!(empty.messages.is_none(), "no copy twice in {url}");
    }
    // The topic's shard knows what became of each copy once the queues' shards placed it.
    let listing = get_json(&server, "/_orderly/subscriptions").await;
    for subscription in listing["subscriptions"].as_array().unwrap() {
        let fates: Vec<&str> = subscription["lastDeliveries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|note| note["fate"].as_str().unwrap())
            .collect();
        assert!(
            !fates.is_empty() && fates.iter().all(|fate| *fate == "queued"),
            "{subscription}"
        );
    }
}

/// Sends "poison" to `url` and receives it once, visible again at once: the next receive
/// dead-letters it (the queues' maxReceiveCount is 1).
async fn send_and_receive_once(server: &Server, url: &str) {
    server
        .sqs
        .send_message()
        .queue_url(url)
        .message_body("poison")
        .send()
        .await
        .unwrap();
    let first = server
        .sqs
        .receive_message()
        .queue_url(url)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    assert_eq!(first.messages.unwrap().len(), 1);
}

#[tokio::test]
async fn dead_letters_and_move_tasks_cross_shards() {
    let server = start_sharded(SHARDS).await;
    let dlq = name_in("dead", "", 3);
    let source = name_in("orders", "", 1);
    // The dead-letter queue is another shard's: that it does not exist is still known.
    let refused = server
        .sqs
        .create_queue()
        .queue_name(&source)
        .attributes(A::RedrivePolicy, redrive_to(&dlq, 1))
        .send()
        .await
        .unwrap_err();
    let refused = refused.into_service_error();
    assert_eq!(refused.code(), Some("InvalidParameterValue"), "{refused:?}");
    assert!(
        (refused.message().unwrap_or("")).contains("Dead letter target does not exist"),
        "{refused:?}"
    );
    let dlq_url = create_queue(&server, &dlq, &[]).await;
    let source_url =
        create_queue(&server, &source, &[("RedrivePolicy", &redrive_to(&dlq, 1))]).await;
    // A FIFO dead-letter queue for a standard source is refused, across shards too.
    let fifo_dlq = name_in("dead", ".fifo", 2);
    fifo_queue(&server, &fifo_dlq, &[]).await;
    let mismatched = server
        .sqs
        .set_queue_attributes()
        .queue_url(&source_url)
        .attributes(A::RedrivePolicy, redrive_to(&fifo_dlq, 1))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(mismatched.code(), Some("InvalidParameterValue"));
    send_and_receive_once(&server, &source_url).await;
    let second = server
        .sqs
        .receive_message()
        .queue_url(&source_url)
        .send()
        .await
        .unwrap();
    assert!(second.messages.is_none(), "dead-lettered instead");
    let dead = server
        .sqs
        .receive_message()
        .queue_url(&dlq_url)
        .wait_time_seconds(5)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(dead.len(), 1, "the dead letter reached the other shard");
    assert_eq!(dead[0].body(), Some("poison"));
    let sources = server
        .sqs
        .list_dead_letter_source_queues()
        .queue_url(&dlq_url)
        .send()
        .await
        .unwrap();
    assert_eq!(sources.queue_urls, vec![source_url.clone()]);
    // Moved back to where it came from, in the first shard.
    server
        .sqs
        .start_message_move_task()
        .source_arn(format!("arn:aws:sqs:us-east-1:000000000000:{dlq}"))
        .send()
        .await
        .unwrap();
    let back = server
        .sqs
        .receive_message()
        .queue_url(&source_url)
        .wait_time_seconds(5)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(back.len(), 1, "moved back across shards");
    assert_eq!(back[0].body(), Some("poison"));
}

#[tokio::test]
async fn listings_gather_every_shard_in_order() {
    let server = start_sharded(SHARDS).await;
    let mut names: Vec<String> = (0..SHARDS)
        .flat_map(|shard| [name_in("q", "", shard), name_in("r", "", shard)])
        .collect();
    for name in &names {
        create_queue(&server, name, &[]).await;
        server.sns.create_topic().name(name).send().await.unwrap();
    }
    names.sort();
    let mut listed = Vec::new();
    let mut token = None;
    loop {
        let page = server
            .sqs
            .list_queues()
            .max_results(3)
            .set_next_token(token)
            .send()
            .await
            .unwrap();
        listed.extend(page.queue_urls.unwrap_or_default());
        token = page.next_token;
        if token.is_none() {
            break;
        }
    }
    let expected: Vec<String> = names.iter().map(|n| server.queue_url(n)).collect();
    assert_eq!(
        listed, expected,
        "every shard's queues, in AWS's order, page by page"
    );
    let topics = server
        .sns
        .list_topics()
        .send()
        .await
        .unwrap()
        .topics
        .unwrap();
    let topic_names: Vec<&str> = topics
        .iter()
        .map(|t| t.topic_arn().unwrap().rsplit(':').next().unwrap())
        .collect();
    assert_eq!(topic_names, names);
    let cluster = get_json(&server, "/_orderly/cluster").await;
    assert_eq!(cluster["shards"], SHARDS, "{cluster}");
    assert_eq!(cluster["led"], serde_json::json!([0, 1, 2, 3]), "{cluster}");
    // The inspection API (and the console) says where each queue lives.
    let inspected = get_json(&server, "/_orderly/queues").await;
    let inspected = inspected["queues"].as_array().unwrap();
    assert_eq!(inspected.len(), names.len());
    for queue in inspected {
        let name = queue["name"].as_str().unwrap();
        assert_eq!(queue["shard"], Shard::of(SHARDS, name), "{queue}");
    }
    // Nothing crosses shards here: no parcel waits.
    assert_eq!(cluster["relay"], serde_json::json!([]), "{cluster}");
}

#[tokio::test]
async fn shards_keep_their_state_in_a_data_directory_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::common::durable(dir.path());
    config.shards = SHARDS;
    let start = |config: orderly::config::Config| async move {
        crate::common::Stoppable::start(orderly::app::App::bind(&config).await.expect("bind")).await
    };
    let first = start(config.clone()).await;
    let server = &first.server;
    let topic_name = name_in("prices", ".fifo", 0);
    let queue = name_in("desk", ".fifo", 1);
    let (topic, urls) = topic_into(server, &topic_name, &[queue]).await;
    let url = &urls[0];
    let publish = |server: &Server, n: u32| {
        server
            .sns
            .publish()
            .topic_arn(&topic)
            .message(format!("{n}"))
            .message_group_id("g")
            .message_deduplication_id(format!("d{n}"))
            .send()
    };
    for n in 0..5 {
        publish(server, n).await.unwrap();
    }
    // The first two are received and deleted before the stop.
    let bodies: Vec<String> = drain(server, url, 2)
        .await
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    assert_eq!(bodies, ["0", "1"]);
    // Each shard's log, written here: the topic's shard has its publishes.
    let cluster = get_json(server, "/_orderly/cluster").await;
    let logs = cluster["logs"].as_array().expect("logs");
    assert_eq!(logs.len(), SHARDS as usize, "{cluster}");
    assert!(logs[0]["applied"].as_u64() > Some(0), "{cluster}");
    first.stop().await;
    // Each shard's log kept its part: the queue's messages, the topic's deduplication.
    let second = start(config.clone()).await;
    let server = &second.server;
    publish(server, 4).await.unwrap();
    publish(server, 5).await.unwrap();
    let rest: Vec<String> = drain(server, url, 4)
        .await
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    assert_eq!(
        rest,
        ["2", "3", "4", "5"],
        "after the restart, once each and in order"
    );
    second.stop().await;
    // A key's shard depends on the count: the directory opens only with the one it was cut into.
    for other in [1, 2] {
        let mut config = config.clone();
        config.shards = other;
        let refused = orderly::app::App::bind(&config)
            .await
            .err()
            .expect("refused");
        assert!(refused.to_string().contains("--shards 4"), "{refused}");
    }
    // Nor moved into a database: the directory, or one shard of it, is refused before any
    // connection.
    let mut on_database = orderly::config::Config::ephemeral();
    on_database.ephemeral = false;
    on_database.storage = Some("postgres://orderly@127.0.0.1:1/none".into());
    for from in [dir.path().to_path_buf(), dir.path().join("shard-1")] {
        let mut importing = on_database.clone();
        importing.shards = 1;
        importing.import_from = Some(from);
        let refused = orderly::app::transfer(&importing)
            .await
            .expect("asked")
            .unwrap_err();
        assert!(refused.to_string().contains("cut into shards"), "{refused}");
    }
}

#[tokio::test]
async fn a_dead_letter_made_by_a_waiting_receive_is_carried_at_once() {
    let server = start_sharded(SHARDS).await;
    let dlq = name_in("dead", "", 2);
    let source = name_in("jobs", "", 0);
    let dlq_url = create_queue(&server, &dlq, &[]).await;
    let source_url =
        create_queue(&server, &source, &[("RedrivePolicy", &redrive_to(&dlq, 1))]).await;
    send_and_receive_once(&server, &source_url).await;
    // This receive dead-letters the message and then waits on, with nothing to return.
    let waiting = server
        .sqs
        .receive_message()
        .queue_url(&source_url)
        .wait_time_seconds(20)
        .send();
    let waiting = tokio::spawn(waiting);
    let dead = server
        .sqs
        .receive_message()
        .queue_url(&dlq_url)
        .wait_time_seconds(5)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(dead.len(), 1, "carried while the receive still waits");
    waiting.abort();
    // One engine checks a queue's redrive policy at every SetQueueAttributes; so do shards,
    // with its dead-letter queue in another.
    server
        .sqs
        .delete_queue()
        .queue_url(&dlq_url)
        .send()
        .await
        .unwrap();
    let refused = server
        .sqs
        .set_queue_attributes()
        .queue_url(&source_url)
        .attributes(A::VisibilityTimeout, "5")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(refused.code(), Some("InvalidParameterValue"), "{refused:?}");
}
