//! One clock across leaders: nodes whose clocks are minutes apart take over from each other
//! without moving a deduplication window, a visibility timeout or a timestamp, and a manual
//! clock moved on the leader is where the next leader starts. Real processes on a real
//! PostgreSQL; the clocks are made to differ by a test-only offset.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{MessageSystemAttributeName as Sys, QueueAttributeName as A};

use crate::binary::{start, Process};
use crate::common::{self, Server};
use crate::log_in_database::{cluster, database, process_server, until_it_leads};

/// Three minutes: two nodes this far off each way are six minutes apart, past the five-minute
/// deduplication window and the visibility timeout used here.
const OFF_MS: i64 = 180_000;

const MESSAGES: usize = 6;

/// A node on `url` whose clock reads `offset` ms off the machine's.
fn node(dir: &std::path::Path, url: &str, offset: i64) -> Process {
    let offset = offset.to_string();
    let args = ["--storage", url, "--test-clock-offset", offset.as_str()];
    start(dir, &args, "warn")
}

/// Sends message `i` (its own group, its own deduplication id); answers its MessageId.
async fn send(server: &Server, queue: &str, i: usize) -> String {
    let sent = (server.sqs.send_message())
        .queue_url(queue)
        .message_group_id(format!("g{i}"))
        .message_deduplication_id(format!("d{i}"))
        .message_body(format!("m{i}"))
        .send()
        .await
        .expect("sent");
    sent.message_id().expect("an id").to_string()
}

/// Receives what is visible now, hiding it for two minutes: body to SentTimestamp.
async fn receive(server: &Server, queue: &str) -> HashMap<String, u64> {
    let got = (server.sqs.receive_message())
        .queue_url(queue)
        .max_number_of_messages(10)
        .visibility_timeout(120)
        .message_system_attribute_names(Sys::SentTimestamp)
        .send()
        .await
        .expect("received");
    got.messages
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            let attributes = m.attributes.unwrap_or_default();
            let sent = attributes[&Sys::SentTimestamp].parse().expect("a number");
            (m.body.unwrap_or_default(), sent)
        })
        .collect()
}

/// `orderly_clock_skew_milliseconds` of a node.
async fn skew(server: &Server) -> i64 {
    let text = reqwest::get(format!("{}/metrics", server.url()))
        .await
        .expect("answered")
        .text()
        .await
        .expect("a body");
    let line = text
        .lines()
        .find(|l| l.starts_with("orderly_clock_skew_milliseconds "))
        .unwrap_or_else(|| panic!("no skew in {text}"));
    line.rsplit(' ')
        .next()
        .unwrap_or("")
        .parse()
        .expect("a number")
}

/// The node at `survivor` leads once `leader` is killed; it says how far off its clock is.
fn take_over(runtime: &tokio::runtime::Runtime, leader: &mut Process, survivor: &Server, off: i64) {
    leader.child.kill().expect("SIGKILL");
    let _ = leader.child.wait();
    runtime.block_on(until_it_leads(survivor));
    let measured = runtime.block_on(skew(survivor));
    assert!(
        (measured - off).abs() < 2_000,
        "skew {measured} ms, off {off}"
    );
}

#[test]
fn multi_node_clocks_minutes_apart_take_over_from_each_other_without_moving_a_deadline() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(url) = runtime.block_on(common::fresh_database()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut behind = node(dir.path(), &url, -OFF_MS);
    let ahead = node(dir.path(), &url, OFF_MS);
    let (on_behind, on_ahead) = (process_server(behind.addr), process_server(ahead.addr));
    assert_eq!(runtime.block_on(cluster(&on_ahead))["role"], "standby");
    let queue = runtime.block_on(common::fifo_queue(&on_ahead, "skew.fifo", &[]));
    let ids: Vec<String> = (0..MESSAGES)
        .map(|i| runtime.block_on(send(&on_ahead, &queue, i)))
        .collect();
    let first = runtime.block_on(receive(&on_ahead, &queue));
    assert_eq!(first.len(), MESSAGES);

    // The node ahead takes over from the one behind.
    take_over(&runtime, &mut behind, &on_ahead, OFF_MS);
    for (i, id) in ids.iter().enumerate() {
        let again = runtime.block_on(send(&on_ahead, &queue, i));
        assert_eq!(&again, id, "a duplicate of d{i} accepted inside the window");
    }
    let early = runtime.block_on(receive(&on_ahead, &queue));
    assert!(early.is_empty(), "redelivered early: {early:?}");

    // And the node behind (started again) from the one ahead.
    let mut ahead = ahead;
    let behind = node(dir.path(), &url, -OFF_MS);
    let on_behind_again = process_server(behind.addr);
    runtime.block_on(async {
        let started = Instant::now();
        while cluster(&on_behind_again).await["role"] != "standby" {
            assert!(started.elapsed() < Duration::from_secs(20));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    take_over(&runtime, &mut ahead, &on_behind_again, -OFF_MS);
    for (i, id) in ids.iter().enumerate() {
        let again = runtime.block_on(send(&on_behind_again, &queue, i));
        assert_eq!(&again, id, "a duplicate of d{i} accepted inside the window");
    }
    let early = runtime.block_on(receive(&on_behind_again, &queue));
    assert!(early.is_empty(), "redelivered early: {early:?}");
    // Time went on: what is sent now is sent after what was sent before.
    runtime.block_on(send(&on_behind_again, &queue, MESSAGES));
    let later = runtime.block_on(receive(&on_behind_again, &queue));
    let latest_before = first.values().max().copied().unwrap_or_default();
    let sent_now = later[&format!("m{MESSAGES}")];
    assert!(
        sent_now >= latest_before,
        "sent at {sent_now}, before {latest_before} of the earlier leader"
    );
    drop(on_behind);
}

/// `--clock manual` with `--auth`: the clock moved through a standby moves the leader's, and the
/// next leader starts where it was; signatures stay fresh on the machines' clocks throughout.
#[test]
fn multi_node_a_manual_clock_is_where_the_next_leader_starts() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(url) = runtime.block_on(common::fresh_database()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = dir.path().join("keys.json");
    std::fs::write(
        &keys,
        r#"{"Keys": [{"AccessKeyId": "AKIDCLOCK", "SecretAccessKey": "secret"}]}"#,
    )
    .expect("key file");
    let keys = keys.to_string_lossy().into_owned();
    let args = [
        "--storage",
        url.as_str(),
        "--clock",
        "manual",
        "--auth",
        keys.as_str(),
    ];
    let mut first = start(dir.path(), &args, "warn");
    let second = start(dir.path(), &args, "warn");
    let on_second = Arc::new(Server {
        addr: second.addr,
        sqs: common::client_as(second.addr, "AKIDCLOCK", "secret"),
        sns: common::sns_client(second.addr),
        others: Vec::new(),
    });
    let operator = reqwest::Client::new();
    let clock = |body: Option<&'static str>| {
        let request = match body {
            Some(body) => operator
                .post(format!("{}/_orderly/clock", on_second.url()))
                .body(body),
            None => operator.get(format!("{}/_orderly/clock", on_second.url())),
        };
        async move {
            let answer = request
                .basic_auth("AKIDCLOCK", Some("secret"))
                .send()
                .await
                .expect("answered");
            assert!(answer.status().is_success(), "{}", answer.status());
            let text = answer.text().await.expect("a body");
            let state: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            state["epochMillis"].as_i64().expect("a time")
        }
    };
    let queue = runtime.block_on(common::fifo_queue(&on_second, "manual.fifo", &[]));
    let moved = runtime.block_on(clock(Some(r#"{"advance":"1h"}"#)));
    // Written into the lease before the move was answered, not at the next renewal: a leader
    // killed right after a move leaves the next one starting there.
    let recorded = runtime.block_on(async {
        let db = database(&url).await;
        let row = db.query_one("SELECT clock_ms FROM log_shards", &[]).await;
        row.expect("the lease row").get::<_, i64>(0)
    });
    runtime.block_on(async {
        (on_second.sqs.send_message())
            .queue_url(&queue)
            .message_group_id("g")
            .message_deduplication_id("one")
            .message_body("after an hour")
            .send()
            .await
            .expect("signed on the machine's clock: fresh");
    });
    assert!(recorded >= moved, "not recorded: {recorded} < {moved}");
    first.child.kill().expect("SIGKILL");
    runtime.block_on(async {
        let started = Instant::now();
        loop {
            let answer = (operator.get(format!("{}/_orderly/cluster", on_second.url())))
                .basic_auth("AKIDCLOCK", Some("secret"))
                .send()
                .await
                .expect("answered");
            if answer
                .text()
                .await
                .expect("a body")
                .contains(r#""role":"leader""#)
            {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "never led");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let now = runtime.block_on(clock(None));
    assert!(now >= moved, "the clock went back: {now} < {moved}");
    let received = runtime.block_on(async {
        (on_second.sqs.receive_message())
            .queue_url(&queue)
            .message_system_attribute_names(Sys::All)
            .send()
            .await
            .expect("signed on the machine's clock: fresh")
    });
    let message = &received.messages.unwrap_or_default()[0];
    let attributes = message.attributes.clone().unwrap_or_default();
    let sent: i64 = attributes[&Sys::SentTimestamp].parse().expect("a number");
    let first_received: i64 = attributes[&Sys::ApproximateFirstReceiveTimestamp]
        .parse()
        .expect("a number");
    assert!(
        sent <= first_received,
        "sent {sent}, first received {first_received}"
    );
    let attributes = runtime.block_on(common::queue_attributes(&on_second, &queue));
    assert_eq!(attributes[&A::ApproximateNumberOfMessagesNotVisible], "1");
}
