//! A database whose key space is cut into shards, each with its own lease, log and snapshots:
//! one node leads them all, a standby follows every shard's log and passes requests on, and
//! takes every shard over when the leader stops. What crossed shards before the hand-over
//! (a topic's copies into queues of other shards) is delivered once and in order after it.

use std::time::{Duration, Instant};

use orderly::config::Config;

use crate::common::{self, Server, Stoppable};
use crate::log_in_database::cluster;
use crate::shards::{drain, name_in, topic_into, SHARDS};

async fn node(url: &str, shards: u32) -> Stoppable {
    let mut config = Config::ephemeral();
    config.ephemeral = false;
    config.storage = Some(url.to_string());
    config.shards = shards;
    Stoppable::start(orderly::app::App::bind(&config).await.expect("bind")).await
}

/// Waits (20 s at most; a standby asks for the lease on real time) until `server` leads.
async fn until_leading(server: &Server) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let state = cluster(server).await;
        if state["role"] == "leader" {
            return state;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never led: {state}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Publishes `numbers` to the FIFO topic through `server`, in one group, each with its own
/// deduplication id.
async fn publish(server: &Server, topic: &str, numbers: std::ops::Range<u32>) {
    for n in numbers {
        server
            .sns
            .publish()
            .topic_arn(topic)
            .message(format!("{n}"))
            .message_group_id("g")
            .message_deduplication_id(format!("d{n}"))
            .send()
            .await
            .unwrap();
    }
}

fn bodies(got: Vec<(String, String)>) -> Vec<String> {
    got.into_iter().map(|(_, body)| body).collect()
}

#[tokio::test]
async fn a_standby_takes_over_every_shard_of_its_database_at_once() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let leader = node(&url, SHARDS).await;
    let standby = node(&url, SHARDS).await;
    let state = cluster(&leader.server).await;
    assert_eq!(state["role"], "leader", "{state}");
    assert_eq!(state["shards"], SHARDS, "{state}");
    assert_eq!(state["led"], serde_json::json!([0, 1, 2, 3]), "{state}");
    // Each shard's log, led under a lease of its own.
    let logs = state["logs"].as_array().expect("logs");
    assert_eq!(logs.len(), SHARDS as usize, "{state}");
    for (shard, log) in logs.iter().enumerate() {
        assert_eq!(log["shard"], shard, "{state}");
        assert_eq!(log["epoch"], 1, "{state}");
    }
    let metrics = reqwest::get(format!("{}/metrics", leader.server.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("orderly_shard_epoch{shard=\"3\"} 1"),
        "{metrics}"
    );
    let state = cluster(&standby.server).await;
    assert_eq!(state["role"], "standby", "{state}");
    assert_eq!(state["led"], serde_json::json!([]), "{state}");
    // Following every shard's log, under no lease.
    let logs = state["logs"].as_array().expect("logs");
    assert_eq!(logs.len(), SHARDS as usize, "{state}");
    assert!(logs.iter().all(|log| log.get("epoch").is_none()), "{state}");
    // Made and used through the standby: its requests are passed on to the leader.
    let via = &standby.server;
    let queues = [name_in("desk", ".fifo", 1), name_in("audit", ".fifo", 2)];
    let (topic, urls) = topic_into(via, &name_in("prices", ".fifo", 0), &queues).await;
    publish(via, &topic, 0..6).await;
    for url in &urls {
        assert_eq!(bodies(drain(via, url, 2).await), ["0", "1"]);
    }
    // The leader stops (giving every lease up): the standby takes every shard over.
    leader.stop().await;
    let state = until_leading(&standby.server).await;
    assert_eq!(state["led"], serde_json::json!([0, 1, 2, 3]), "{state}");
    assert_eq!(state["leader"], standby.server.url(), "{state}");
    // Every shard's lease taken a second time.
    let epochs: Vec<_> = (state["logs"].as_array().expect("logs").iter())
        .map(|log| log["epoch"].clone())
        .collect();
    assert_eq!(epochs, [2, 2, 2, 2], "{state}");
    // Each shard's log held its part: the queues' messages, the topic's deduplication (4 and
    // 5 again are dropped), the parcels' numbering (6 and 7 are carried after 2 to 5).
    let server = &standby.server;
    publish(server, &topic, 4..8).await;
    for url in &urls {
        assert_eq!(
            bodies(drain(server, url, 6).await),
            ["2", "3", "4", "5", "6", "7"],
            "each copy once and in order, across the hand-over"
        );
    }
    // A node asking for another count is refused with the count the database records.
    let mut config = Config::ephemeral();
    config.ephemeral = false;
    config.storage = Some(url.clone());
    config.shards = 2;
    let refused = orderly::app::App::bind(&config)
        .await
        .err()
        .expect("refused");
    assert!(
        refused.to_string().contains("cut into 4 shards, not 2")
            && refused.to_string().contains("--shards 4"),
        "{refused}"
    );
    standby.stop().await;
}
