//! Moving up and back: `--import-from DIR` copies a data directory's whole state into a database
//! kept with `--storage`, `--export-to DIR` copies it back, checked message by message.

use std::process::Command;

use orderly::app::App;
use serde_json::Value;

use crate::common::{self, Stoppable};
use crate::log_in_database::on_log;

/// Runs the binary with `args`; returns whether it succeeded and what it printed.
pub(crate) fn run(args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_orderly"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run orderly");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), said)
}

/// `orderly FLAG DIR` (`--import-from` or `--export-to`) with the log in the database at `url`.
fn transfer(flag: &str, dir: &std::path::Path, url: &str) -> (bool, String) {
    let dir = dir.display().to_string();
    run(&[flag, &dir, "--storage", url])
}

/// Every message of the queue as the inspection API shows it (ids, bodies, attributes, receive
/// counts, states and times).
pub(crate) async fn messages(server: &common::Server, queue: &str) -> Value {
    let url = format!(
        "{}/_orderly/queues/{queue}/messages?limit=1000",
        server.url()
    );
    let body = reqwest::get(url)
        .await
        .expect("answered")
        .text()
        .await
        .expect("a body");
    let listing: Value = serde_json::from_str(&body).expect("JSON");
    listing["messages"].clone()
}

async fn state(server: &common::Server) -> (Value, Value) {
    (
        messages(server, "prices.fifo").await,
        messages(server, "audit").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_moves_into_the_database_and_back_message_by_message() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = common::manual_clock();
    let first = Stoppable::start(
        App::bind_with_clock(&common::durable(dir.path()), clock.clone())
            .await
            .expect("a data directory"),
    )
    .await;
    let server = &first.server;
    let fifo = common::fifo_queue(
        server,
        "prices.fifo",
        &[("ContentBasedDeduplication", "true")],
    )
    .await;
    let audit = common::create_queue(server, "audit", &[]).await;
    let topic = common::fifo_topic(server, "prices.fifo").await;
    common::subscribe(server, &topic, "prices.fifo", true).await;
    let mut first_id = String::new();
    for i in 0..12 {
        let sent = server
            .sqs
            .send_message()
            .queue_url(&fifo)
            .message_group_id(format!("g{}", i % 3))
            .message_body(format!("p{i}"))
            .send()
            .await
            .expect("send");
        if i == 0 {
            first_id = sent.message_id.unwrap_or_default();
        }
    }
    for i in 0..5 {
        server
            .sqs
            .send_message()
            .queue_url(&audit)
            .message_body(format!("a{i}"))
            .send()
            .await
            .expect("send");
    }
    // A message in flight whose receipt handle must still work after the move.
    let held = server
        .sqs
        .receive_message()
        .queue_url(&fifo)
        .max_number_of_messages(1)
        .send()
        .await
        .expect("receive")
        .messages
        .unwrap_or_default()
        .pop()
        .expect("one message");
    let before = state(server).await;
    assert_eq!(before.0.as_array().map(Vec::len), Some(12), "{}", before.0);
    first.stop().await;

    // Into an empty database it moves; into one that holds a log, it is refused.
    let (moved, said) = transfer("--import-from", dir.path(), &url);
    assert!(moved, "{said}");
    assert!(said.contains("imported 2 queues and 17 messages"), "{said}");
    let (again, said) = transfer("--import-from", dir.path(), &url);
    assert!(!again, "imported twice: {said}");
    assert!(said.contains("already holds a log"), "{said}");

    let second = Stoppable::start(
        App::bind_with_clock(&on_log(&url), clock.clone())
            .await
            .expect("leads"),
    )
    .await;
    let server = &second.server;
    assert_eq!(state(server).await, before, "every message as it was");
    server
        .sqs
        .delete_message()
        .queue_url(&fifo)
        .receipt_handle(held.receipt_handle().unwrap_or_default())
        .send()
        .await
        .expect("a receipt handle from before the move deletes");
    // The deduplication window came along: the same body is the same message.
    let duplicate = server
        .sqs
        .send_message()
        .queue_url(&fifo)
        .message_group_id("g0")
        .message_body("p0")
        .send()
        .await
        .expect("send");
    assert_eq!(duplicate.message_id.unwrap_or_default(), first_id);
    // So did the topic and its subscription.
    let published = server
        .sns
        .publish()
        .topic_arn(&topic)
        .message("from the topic")
        .message_group_id("g9")
        .message_deduplication_id("t1")
        .send()
        .await;
    assert!(published.is_ok(), "{published:?}");
    let after = state(server).await;
    assert_eq!(after.0.as_array().map(Vec::len), Some(12), "{}", after.0);
    // Not while a node leads the database.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let (exported, said) = transfer("--export-to", &elsewhere.path().join("copy"), &url);
    assert!(!exported, "exported beside a leader: {said}");
    assert!(said.contains("leads this database"), "{said}");
    second.stop().await;

    // And back into a new data directory.
    let back = tempfile::tempdir().expect("tempdir");
    let target = back.path().join("orderly-data");
    let (moved, said) = transfer("--export-to", &target, &url);
    assert!(moved, "{said}");
    assert!(said.contains("exported 2 queues and 17 messages"), "{said}");
    let third = Stoppable::start(
        App::bind_with_clock(&common::durable(&target), clock.clone())
            .await
            .expect("the exported directory opens"),
    )
    .await;
    assert_eq!(state(&third.server).await, after, "every message as it was");
    third.stop().await;
}
