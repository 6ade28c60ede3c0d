//! A shard map over two clusters (`--shard-database`): the databases fail apart. While the
//! cluster keeping half the shards is down, a node leading its share serves the shards kept in
//! the home database on and answers for the others that no leader can be reached; once the
//! cluster is back, it leads them again with what they held, without starting over.

use std::process::Command;
use std::time::{Duration, Instant};

use orderly::config::Config;
use orderly::persist::database::shard_map::{shown, Placed};

use crate::common::{self, Stoppable};
use crate::log_in_database::cluster;
use crate::multi_node_shards::until_spread;
use crate::multi_node_spread_load::generations;
use crate::shards::{name_in, SHARDS};

/// A throwaway cluster of this test's own (`scripts/postgres-cluster`), stopped when dropped.
struct OwnCluster {
    url: String,
    dir: String,
}

impl OwnCluster {
    fn script(args: &[&str]) -> std::process::Output {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/postgres-cluster");
        let output = Command::new(script).args(args).output().expect("it runs");
        assert!(
            output.status.success(),
            "postgres-cluster {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    /// None (the test passes vacuously, saying so) where PostgreSQL's server binaries are not
    /// installed, outside CI; CI installs them, so there a missing one fails the test.
    fn start() -> Option<OwnCluster> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/postgres-cluster");
        let output = Command::new(script).arg("start").output().expect("it runs");
        if output.status.code() == Some(3) {
            assert!(std::env::var_os("CI").is_none(), "CI must have PostgreSQL");
            eprintln!("skipped: no PostgreSQL server binaries to start a cluster of its own");
            return None;
        }
        assert!(
            output.status.success(),
            "the cluster did not start: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let printed = String::from_utf8(output.stdout).expect("UTF-8");
        let (url, dir) = printed.trim().split_once(' ').expect("URL DIR");
        Some(OwnCluster {
            url: url.into(),
            dir: dir.into(),
        })
    }

    fn down(&self) {
        Self::script(&["down", &self.dir]);
    }

    fn up(&self) {
        Self::script(&["up", &self.dir]);
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/postgres-cluster");
        let _ = Command::new(script).args(["stop", &self.dir]).output();
    }
}

/// Waits (`bound` at most, polling) until `server` leads exactly `led` (a standby: none).
async fn until_led(server: &common::Server, led: &[u64], bound: Duration) {
    let started = Instant::now();
    loop {
        let state = cluster(server).await;
        let now: Vec<u64> = (state["led"].as_array().expect("led").iter())
            .filter_map(serde_json::Value::as_u64)
            .collect();
        if now == led {
            let role = if led.is_empty() { "standby" } else { "leader" };
            assert_eq!(state["role"], role, "{state}");
            return;
        }
        assert!(started.elapsed() < bound, "never led {led:?}: {state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A node leading its share of shards kept in the home database and, from shard 2 on, in
/// `other`'s.
fn spread_over(home: &str, other: &str) -> Config {
    let mut config = Config::ephemeral();
    config.ephemeral = false;
    config.storage = Some(home.to_string());
    config.shards = SHARDS;
    config.spread_shards = true;
    config.leader_wait = 1;
    config.shard_databases = vec![Placed {
        first: 2,
        last: SHARDS - 1,
        url: other.to_string(),
    }];
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_kept_in_a_cluster_that_goes_down_are_let_go_the_rest_served_and_led_again_once_it_is_back(
) {
    let Some(home) = common::fresh_database().await else {
        return;
    };
    let home_url = home.clone();
    let Some(other) = OwnCluster::start() else {
        return;
    };
    let config = spread_over(&home, &other.url);
    let node = Stoppable::start(orderly::app::App::bind(&config).await.expect("bind")).await;
    let server = &node.server;
    until_spread(&[server], SHARDS, Duration::from_secs(10)).await;
    // Each shard's log names the database keeping it: user, host, port and name only.
    let state = cluster(server).await;
    let kept_in: Vec<(u64, &str)> = (state["logs"].as_array().expect("logs").iter())
        .map(|log| {
            (
                log["shard"].as_u64().expect("shard"),
                log["database"].as_str().expect("database"),
            )
        })
        .collect();
    let (home_shown, other_shown) = (shown(&home_url), shown(&other.url));
    let expected: Vec<(u64, &str)> = (0..u64::from(SHARDS))
        .map(|shard| {
            (
                shard,
                if shard < 2 {
                    &*home_shown
                } else {
                    &*other_shown
                },
            )
        })
        .collect();
    assert_eq!(kept_in, expected, "{state}");
    // And each shard's, whatever node leads it: where the console says a queue is kept.
    let databases: Vec<&str> = expected.iter().map(|(_, shown)| *shown).collect();
    assert_eq!(state["databases"], serde_json::json!(databases), "{state}");
    let url = server.url();
    assert_eq!(
        state["leaders"],
        serde_json::json!(vec![url; SHARDS as usize]),
        "{state}"
    );
    let at_home = common::fifo_queue(server, &name_in("home", ".fifo", 0), &[]).await;
    let elsewhere = common::fifo_queue(server, &name_in("other", ".fifo", 2), &[]).await;
    let send = |url: String, body: String| async move {
        (server.sqs.send_message().queue_url(url))
            .message_group_id("g")
            .message_deduplication_id(&body)
            .message_body(body)
            .send()
            .await
    };
    for url in [&at_home, &elsewhere] {
        send(url.clone(), "before".into()).await.expect("sent");
    }
    let before = generations(server).await;
    // Its durability is that of both databases, the weakest named (neither cluster has a
    // synchronous standby: the home's, first in the shard map).
    let promise = &cluster(server).await["replication"];
    assert_eq!(promise["synchronous"], false, "{promise}");
    let detail = promise["detail"].as_str().expect("detail");
    assert!(detail.starts_with("the --storage database: "), "{promise}");

    other.down();
    let down = Instant::now();
    // Shard 0's queue is served throughout; the keeper lets go of shards 2 and 3 once their
    // leases could not be renewed for a lease's length.
    let mut sent = vec!["before".to_string()];
    let mut longest = Duration::ZERO;
    loop {
        let state = cluster(server).await;
        if state["led"] == serde_json::json!([0, 1]) {
            break;
        }
        assert!(down.elapsed() < Duration::from_secs(15), "{state}");
        let body = format!("during-{}", sent.len());
        let asked = Instant::now();
        send(at_home.clone(), body.clone())
            .await
            .expect("served on");
        longest = longest.max(asked.elapsed());
        sent.push(body);
    }
    eprintln!(
        "shards 2 and 3 let go of {} ms after their cluster went down; the longest send to \
         shard 0 meanwhile took {} ms",
        down.elapsed().as_millis(),
        longest.as_millis()
    );
    assert!(longest < Duration::from_secs(3), "{longest:?}");
    // The database it leads no shard in any more no longer speaks for it: the home's promise
    // alone, unnamed.
    let promise = &cluster(server).await["replication"];
    let detail = promise["detail"].as_str().expect("detail");
    assert!(detail.starts_with("no synchronous standby"), "{promise}");
    let refused = send(elsewhere.clone(), "while-down".into()).await;
    let refused = refused.expect_err("no leader to reach");
    let status = refused.raw_response().map(|r| r.status().as_u16());
    assert_eq!(status, Some(503), "{refused:?}");
    send(at_home.clone(), "after".into())
        .await
        .expect("served on");
    sent.push("after".into());
    assert_eq!(generations(server).await, before, "the node started over");

    // Its last leases taken by another node, it starts over while the cluster is still down,
    // and leads the home's shards again once they are free: the database it cannot reach
    // costs its later starts nothing.
    let hold = |shard| crate::multi_node_shards::hold_lease(&home_url, shard, "usurper", "1 hour");
    let (usurper, _) = (hold(0).await, hold(1).await);
    until_led(server, &[], Duration::from_secs(15)).await;
    let given_up = "UPDATE log_shards SET expires = '-infinity' WHERE node = 'usurper'";
    usurper.execute(given_up, &[]).await.expect("given up");
    until_led(server, &[0, 1], Duration::from_secs(20)).await;
    let restarted = generations(server).await;
    assert!(
        restarted > before,
        "{restarted} generations, {before} before"
    );
    send(at_home.clone(), "restarted".into())
        .await
        .expect("served by the next generation");
    sent.push("restarted".into());

    other.up();
    until_led(server, &[0, 1, 2, 3], Duration::from_secs(20)).await;
    assert_eq!(
        generations(server).await,
        restarted,
        "the node started over"
    );
    send(elsewhere.clone(), "back".into()).await.expect("sent");
    for (url, expected) in [
        (at_home, sent),
        (elsewhere, vec!["before".into(), "back".into()]),
    ] {
        let got = crate::shards::drain(server, &url, expected.len()).await;
        let bodies: Vec<String> = got.into_iter().map(|(_, body)| body).collect();
        assert_eq!(bodies, expected, "{url}");
        let more = (server.sqs.receive_message().queue_url(&url))
            .send()
            .await
            .expect("received");
        assert!(more.messages.unwrap_or_default().is_empty(), "{url}");
    }
    node.stop().await;
}

/// A node started while the cluster keeping shards 2 and 3 is down (its database never used
/// yet): it starts and leads the home's shards, answers for the others that no leader can be
/// reached, and once the cluster answers checks its database against the home, makes it ready
/// and leads its shards too, without starting over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_while_a_placed_cluster_is_down_leads_the_rest_and_its_shards_once_it_answers(
) {
    let Some(home) = common::fresh_database().await else {
        return;
    };
    let Some(other) = OwnCluster::start() else {
        return;
    };
    other.down();
    let config = spread_over(&home, &other.url);
    let node = Stoppable::start(orderly::app::App::bind(&config).await.expect("bind")).await;
    let server = &node.server;
    until_led(server, &[0, 1], Duration::from_secs(10)).await;
    let at_home = common::fifo_queue(server, &name_in("home", ".fifo", 0), &[]).await;
    let send = |url: String, body: &str| {
        (server.sqs.send_message().queue_url(url))
            .message_group_id("g")
            .message_deduplication_id(body)
            .message_body(body)
            .send()
    };
    send(at_home.clone(), "while-down").await.expect("sent");
    let elsewhere = name_in("other", ".fifo", 2);
    let refused = (server.sqs.create_queue().queue_name(&elsewhere))
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .expect_err("no leader to reach");
    let status = refused.raw_response().map(|r| r.status().as_u16());
    assert_eq!(status, Some(503), "{refused:?}");
    let before = generations(server).await;

    other.up();
    until_led(server, &[0, 1, 2, 3], Duration::from_secs(20)).await;
    assert_eq!(generations(server).await, before, "the node started over");
    let state = cluster(server).await;
    let promise = state["replication"]["detail"].as_str().expect("detail");
    assert!(promise.starts_with("the --storage database: "), "{state}");
    let elsewhere = common::fifo_queue(server, &elsewhere, &[]).await;
    send(elsewhere.clone(), "once-up").await.expect("sent");
    for (url, expected) in [(at_home, "while-down"), (elsewhere, "once-up")] {
        let got = crate::shards::drain(server, &url, 1).await;
        let bodies: Vec<String> = got.into_iter().map(|(_, body)| body).collect();
        assert_eq!(bodies, [expected], "{url}");
    }
    node.stop().await;
}
