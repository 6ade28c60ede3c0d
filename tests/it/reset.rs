//! `POST /_orderly/reset`: a suite that reuses one server resets it between test cases. Messages
//! and every history that would leak into the next case go; queues, topics and subscriptions stay.
//! `?all=true` removes those too. Both survive a restart.

use crate::common::{
    durable, fifo_queue, fifo_topic, get_json, start_with, subscribe, Server, Stoppable,
};

async fn reset(server: &Server, query: &str) -> serde_json::Value {
    let response = reqwest::Client::new()
        .post(format!("{}/_orderly/reset{query}", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    serde_json::from_str(&response.text().await.unwrap()).unwrap()
}

/// One test case of the suite: publishes `body` through the topic with a fixed deduplication
/// id, purges the queue, publishes again, and answers what the queue then holds.
async fn case(server: &Server, topic: &str, queue: &str, body: &str) -> Vec<String> {
    let publish = || {
        server
            .sns
            .publish()
            .topic_arn(topic)
            .message(body)
            .message_group_id("g")
            .message_deduplication_id("same-id-every-case")
            .send()
    };
    publish().await.unwrap();
    server
        .sqs
        .purge_queue()
        .queue_url(queue)
        .send()
        .await
        .unwrap();
    server
        .sqs
        .send_message()
        .queue_url(queue)
        .message_body(body)
        .message_group_id("g")
        .message_deduplication_id("same-id-every-case")
        .send()
        .await
        .unwrap();
    let received = server
        .sqs
        .receive_message()
        .queue_url(queue)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    received
        .messages
        .unwrap_or_default()
        .iter()
        .map(|m| m.body().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_suite_resets_between_cases_and_the_reset_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let app = orderly::app::App::bind(&durable(dir.path())).await.unwrap();
    let running = Stoppable::start(app).await;
    let server = &running.server;
    let queue = fifo_queue(server, "prices.fifo", &[]).await;
    let topic = fifo_topic(server, "prices.fifo").await;
    subscribe(server, &topic, "prices.fifo", true).await;

    // The first case: the purge empties the queue, then its own send is stored.
    assert_eq!(case(server, &topic, &queue, "case one").await, ["case one"]);
    // Without a reset the next case would be deduplicated and refused its purge.
    let refused = server.sqs.purge_queue().queue_url(&queue).send().await;
    assert!(refused.is_err(), "a second purge within 60 s is refused");

    assert_eq!(reset(server, "").await["reset"], "messages");
    assert_eq!(case(server, &topic, &queue, "case two").await, ["case two"]);
    // The subscription stayed: a publish still reaches the queue.
    reset(server, "").await;
    server
        .sns
        .publish()
        .topic_arn(&topic)
        .message("fanned")
        .message_group_id("g")
        .message_deduplication_id("same-id-every-case")
        .send()
        .await
        .unwrap();
    // The subscription's notes of its last deliveries speak of messages the reset drops: gone
    // with them.
    let notes = |listing: serde_json::Value| {
        let notes = listing["subscriptions"][0]["lastDeliveries"]
            .as_array()
            .cloned();
        notes.unwrap_or_default().len()
    };
    crate::common::carried(server).await;
    assert_eq!(notes(get_json(server, "/_orderly/subscriptions").await), 1);
    reset(server, "").await;
    assert_eq!(notes(get_json(server, "/_orderly/subscriptions").await), 0);

    // After a restart: still empty, and the histories still forgotten.
    running.stop().await;
    let server = start_with(durable(dir.path())).await;
    let depth = server
        .sqs
        .get_queue_attributes()
        .queue_url(server.queue_url("prices.fifo"))
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap();
    assert_eq!(
        depth.attributes().unwrap()
            [&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages],
        "0"
    );
    let queue = server.queue_url("prices.fifo");
    assert_eq!(
        case(&server, &topic, &queue, "case three").await,
        ["case three"]
    );

    assert_eq!(reset(&server, "?all=true").await["reset"], "everything");
    let queues = server.sqs.list_queues().send().await.unwrap();
    assert!(queues.queue_urls().is_empty());
    let topics = server.sns.list_topics().send().await.unwrap();
    assert!(topics.topics().is_empty());
    // The names are free again at once.
    fifo_queue(&server, "prices.fifo", &[]).await;
}

#[tokio::test]
async fn reset_takes_no_other_argument_and_only_post() {
    let server = crate::common::start().await;
    let response = reqwest::Client::new()
        .post(format!("{}/_orderly/reset?all=maybe", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let get = reqwest::get(format!("{}/_orderly/reset", server.url()))
        .await
        .unwrap();
    assert_eq!(get.status(), 405, "only POST resets");
    // Refused before the handler, and still in JSON, as the endpoint's own refusals are.
    assert_eq!(
        get.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let said: serde_json::Value = serde_json::from_str(&get.text().await.unwrap()).unwrap();
    assert_eq!(said["message"], "Method Not Allowed");
}

/// A dead-letter queue made again under its name after `?all=true` starts with no move tasks:
/// one still running from the queue the reset deleted failed with it, so it neither blocks a
/// new task nor goes on moving the new queue's messages, and once the clock has moved it is
/// not listed as the new queue's.
#[tokio::test]
async fn after_a_full_reset_a_queue_of_the_same_name_has_no_move_tasks() {
    let (server, clock) = crate::common::start_with_manual_clock().await;
    let dlq_arn = "arn:aws:sqs:us-east-1:000000000000:dlq";
    // The queues, and three messages dead-lettered from `src` into `dlq`.
    let make = || async {
        crate::common::create_queue(&server, "dlq", &[]).await;
        let policy = crate::common::redrive_to("dlq", 1);
        let src = crate::common::create_queue(&server, "src", &[("RedrivePolicy", &policy)]).await;
        for body in ["a", "b", "c"] {
            server
                .sqs
                .send_message()
                .queue_url(&src)
                .message_body(body)
                .send()
                .await
                .unwrap();
        }
        for _ in 0..2 {
            server
                .sqs
                .receive_message()
                .queue_url(&src)
                .max_number_of_messages(10)
                .visibility_timeout(0)
                .send()
                .await
                .unwrap();
        }
        // With the queues in two shards, the dead letters cross between them.
        crate::common::carried(&server).await;
    };
    let statuses = || async {
        let listed = server
            .sqs
            .list_message_move_tasks()
            .source_arn(dlq_arn)
            .max_results(10)
            .send()
            .await
            .unwrap()
            .results
            .unwrap_or_default();
        listed
            .iter()
            .map(|t| t.status().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    // One message a second: still running when the reset comes, the clock not moved.
    let start_slow = || async {
        server
            .sqs
            .start_message_move_task()
            .source_arn(dlq_arn)
            .max_number_of_messages_per_second(1)
            .send()
            .await
    };
    make().await;
    start_slow().await.unwrap();
    assert_eq!(statuses().await, ["RUNNING"]);
    reset(&server, "?all=true").await;
    make().await;
    // Started in the very millisecond the new queue was made, it is listed: failed.
    assert_eq!(statuses().await, ["FAILED"]);
    start_slow().await.expect("nothing runs from the new queue");
    assert_eq!(statuses().await, ["RUNNING", "FAILED"]);
    clock.advance_millis(1_000);
    reset(&server, "?all=true").await;
    clock.advance_millis(1_000);
    make().await;
    assert!(
        statuses().await.is_empty(),
        "the deleted queue's tasks are not listed"
    );
}
