//! A database whose key space is cut into shards, each with its own lease, log and snapshots:
//! one node leads them all, a standby follows every shard's log and passes requests on, and
//! takes every shard over when the leader stops. What crossed shards before the hand-over
//! (a topic's copies into queues of other shards) is delivered once and in order after it.

use std::time::{Duration, Instant};

use orderly::config::Config;

use crate::common::{self, Server, Stoppable};
use crate::log_in_database::cluster;
use crate::multi_node_spread_load::generations;
use crate::shards::{drain, name_in, topic_into, SHARDS};

/// A node's settings on the database at `url`, cut into `shards`.
fn on_database(url: &str, shards: u32) -> Config {
    let mut config = Config::ephemeral();
    config.ephemeral = false;
    config.storage = Some(url.to_string());
    config.shards = shards;
    config
}

async fn node(url: &str, shards: u32) -> Stoppable {
    let config = on_database(url, shards);
    Stoppable::start(orderly::app::App::bind(&config).await.expect("bind")).await
}

/// The epoch of each shard's lease, as a leader's `/_orderly/cluster` gives them.
fn epochs(state: &serde_json::Value) -> Vec<serde_json::Value> {
    (state["logs"].as_array().expect("logs").iter())
        .map(|log| log["epoch"].clone())
        .collect()
}

/// Waits (20 s at most; a standby asks for the lease on real time) until `server` leads.
async fn until_leading(server: &Server) -> serde_json::Value {
    until_role(server, "leader", Duration::from_secs(20)).await
}

/// Waits (`bound` at most, polling) until `server` says it has `role`; its state then.
pub(crate) async fn until_role(server: &Server, role: &str, bound: Duration) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let state = cluster(server).await;
        if state["role"] == role {
            return state;
        }
        assert!(started.elapsed() < bound, "never {role}: {state}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Publishes `numbers` to the FIFO topic through `server`, in one group, each with its own
/// deduplication id.
pub(crate) async fn publish(server: &Server, topic: &str, numbers: std::ops::Range<u32>) {
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

pub(crate) fn bodies(got: Vec<(String, String)>) -> Vec<String> {
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
    // Every shard's requests go to the leader, in the one database.
    let leader_url = leader.server.url();
    assert_eq!(
        state["leaders"],
        serde_json::json!(vec![leader_url; SHARDS as usize]),
        "{state}"
    );
    let shown = orderly::persist::database::shard_map::shown(&url);
    assert_eq!(
        state["databases"],
        serde_json::json!(vec![shown; SHARDS as usize]),
        "{state}"
    );
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
    let epochs = epochs(&state);
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

/// Publishes `group`'s messages through `server` until `stop`, each retried with its
/// deduplication id until acknowledged (an answer of unknown outcome, or none while the
/// leader is replaced, is asked again, as an SDK's retries would): the topic's deduplication
/// keeps a retried publish to one copy. Answers the bodies acknowledged, in order.
async fn publish_until_stopped(
    server: std::sync::Arc<Server>,
    topic: String,
    group: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<String> {
    let mut acknowledged = Vec::new();
    for i in 0.. {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return acknowledged;
        }
        let body = format!("g{group}-{i:05}");
        let began = Instant::now();
        loop {
            let published = (server.sns.publish().topic_arn(&topic))
                .message(&body)
                .message_group_id(format!("g{group}"))
                .message_deduplication_id(&body)
                .send()
                .await;
            if published.is_ok() {
                break;
            }
            assert!(
                began.elapsed() < Duration::from_secs(60),
                "{body} never acknowledged: {published:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        acknowledged.push(body);
    }
    unreachable!()
}

/// The leader of a database of three shards killed while a FIFO topic in shard 0 fans out to
/// queues in shards 1 and 2, publishes going through the two other nodes: the next leader
/// takes every shard over and carries what was waiting to cross, so each queue gets every
/// acknowledged publish once and in group order.
#[test]
fn a_topics_copies_across_shards_survive_their_leader_killed_once_and_in_order() {
    const GROUPS: usize = 3;
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(url) = runtime.block_on(common::fresh_database()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let shards = 3u32;
    let named = |stem: &str, shard: u32| {
        (0..)
            .map(|n| format!("{stem}-{n}.fifo"))
            .find(|name| orderly::engine::shard::Shard::of(shards, name) == shard)
            .expect("a name in every shard")
    };
    let args = ["--storage", url.as_str(), "--shards", "3"];
    let mut first = crate::binary::start(dir.path(), &args, "warn");
    let others = [
        crate::binary::start(dir.path(), &args, "warn"),
        crate::binary::start(dir.path(), &args, "warn"),
    ];
    let nodes: Vec<std::sync::Arc<Server>> = [first.addr, others[0].addr, others[1].addr]
        .into_iter()
        .map(|addr| std::sync::Arc::new(crate::log_in_database::process_server(addr)))
        .collect();
    let queues = [named("desk", 1), named("audit", 2)];
    let (topic, urls) = runtime.block_on(topic_into(&nodes[1], &named("prices", 0), &queues));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producers: Vec<_> = (0..GROUPS)
        .map(|group| {
            let server = nodes[1 + group % 2].clone();
            runtime.spawn(publish_until_stopped(
                server,
                topic.clone(),
                group,
                stop.clone(),
            ))
        })
        .collect();
    // Killed once publishes flow, then the load goes on past the takeover.
    let queue_depth = |server: &Server, url: &str| {
        let url = url.to_string();
        let sqs = server.sqs.clone();
        async move {
            let got = (sqs.get_queue_attributes().queue_url(url))
                .attribute_names(
                    aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages,
                )
                .send()
                .await;
            got.ok()
                .and_then(|got| got.attributes)
                .and_then(|a| {
                    a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
                        .and_then(|n| n.parse::<u64>().ok())
                })
                .unwrap_or(0)
        }
    };
    let waited = Instant::now();
    while runtime.block_on(queue_depth(&nodes[2], &urls[1])) < 60 {
        assert!(waited.elapsed() < Duration::from_secs(60), "no publishes");
        std::thread::sleep(Duration::from_millis(20));
    }
    first.child.kill().expect("SIGKILL");
    let killed = Instant::now();
    let before = runtime.block_on(queue_depth(&nodes[1], &urls[0]));
    while runtime.block_on(queue_depth(&nodes[1], &urls[0])) < before + 60 {
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "no copies after the takeover"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acknowledged: Vec<String> = Vec::new();
    for producer in producers {
        acknowledged.extend(runtime.block_on(producer).expect("no producer panicked"));
    }
    let took = killed.elapsed();
    eprintln!(
        "{} publishes acknowledged; the load went on {} ms past the kill",
        acknowledged.len(),
        took.as_millis()
    );
    for url in &urls {
        let got = runtime.block_on(drain(&nodes[1], url, acknowledged.len()));
        let mut by_group: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (group, body) in got {
            by_group.entry(group).or_default().push(body);
        }
        for group in 0..GROUPS {
            let expected: Vec<String> = (acknowledged.iter())
                .filter(|body| body.starts_with(&format!("g{group}-")))
                .cloned()
                .collect();
            assert_eq!(
                by_group.remove(&format!("g{group}")).unwrap_or_default(),
                expected,
                "{url}: group {group} once each and in order"
            );
        }
        // Nothing more waits: every copy was one acknowledged publish's.
        let more = runtime.block_on(
            (nodes[1].sqs.receive_message().queue_url(url))
                .wait_time_seconds(1)
                .send(),
        );
        assert!(
            more.unwrap().messages.unwrap_or_default().is_empty(),
            "{url}"
        );
    }
}

/// Takes `shard`'s lease for a node named `node` that renews nothing, for `lasting` (an
/// interval in SQL): one more epoch, as another node taking it would. The database's client.
pub(crate) async fn hold_lease(
    url: &str,
    shard: i32,
    node: &str,
    lasting: &str,
) -> tokio_postgres::Client {
    let client = crate::log_in_database::database(url).await;
    let statement = format!(
        "UPDATE log_shards SET epoch = epoch + 1, node = '{node}', url = 'http://{node}', \
         expires = now() + interval '{lasting}' WHERE shard = {shard}"
    );
    client
        .execute(&statement, &[])
        .await
        .expect("take the lease");
    client
}

/// Another node takes one shard's lease from a leader of three: the leader steps down whole
/// (it leads every shard or none; its keeper stops every shard's log from acknowledging, as
/// `one_keeper_holds_every_shard_of_a_node_and_loses_them_together` checks); once that lease is
/// free again, it leads every shard again, from what was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_one_shard_steps_down_whole_and_leads_again() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let shards = 3;
    let first = node(&url, shards).await;
    let server = &first.server;
    let named = |stem: &str, shard: u32| {
        (0..)
            .map(|n| format!("{stem}-{n}.fifo"))
            .find(|name| orderly::engine::shard::Shard::of(shards, name) == shard)
            .expect("a name in every shard")
    };
    let kept = common::fifo_queue(server, &named("kept", 0), &[]).await;
    let usurped = common::fifo_queue(server, &named("usurped", 2), &[]).await;
    for url in [&kept, &usurped] {
        (server.sqs.send_message().queue_url(url))
            .message_group_id("g")
            .message_deduplication_id("before")
            .message_body("before")
            .send()
            .await
            .unwrap();
    }
    let client = hold_lease(&url, 2, "usurper", "1 hour").await;
    // At its keeper's next renewal, the node finds shard 2's lease gone and steps down whole.
    let state = until_role(server, "standby", Duration::from_secs(10)).await;
    assert_eq!(state["led"], serde_json::json!([]), "{state}");
    // The usurper goes away: the node leads every shard again, each lease taken once more
    // (shard 2's after the usurper's epoch).
    client
        .execute(
            "UPDATE log_shards SET expires = '-infinity' WHERE shard = 2",
            &[],
        )
        .await
        .expect("lapse");
    let state = until_leading(server).await;
    assert_eq!(state["led"], serde_json::json!([0, 1, 2]), "{state}");
    let epochs = epochs(&state);
    assert_eq!(epochs, [2, 2, 3], "{state}");
    for url in [kept, usurped] {
        let got = (server.sqs.receive_message().queue_url(url))
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        let bodies: Vec<_> = (got.messages.unwrap_or_default().iter())
            .map(|m| m.body().unwrap().to_string())
            .collect();
        assert_eq!(bodies, ["before"], "what was acknowledged, in both shards");
    }
    first.stop().await;
}

/// A node starting takes shard 0's lease while another shard's is still held (by a node that
/// stopped without giving it up, say): it waits 15 s for it, gives up what it took, and starts
/// again with fresh engines, leading every shard once that lease lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_starting_while_a_shard_is_held_starts_again_until_it_leads_every_shard() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    // The database made, every lease free, then shard 1's held for 20 s more by no one alive.
    node(&url, 3).await.stop().await;
    hold_lease(&url, 1, "gone", "20 seconds").await;
    let began = Instant::now();
    let second = node(&url, 3).await;
    let waited = began.elapsed();
    assert!(
        waited >= Duration::from_secs(15),
        "led before shard 1's lease lapsed: {waited:?}"
    );
    let state = cluster(&second.server).await;
    assert_eq!(state["led"], serde_json::json!([0, 1, 2]), "{state}");
    let epochs = epochs(&state);
    // Shard 0 taken twice (given up after the first try), shard 1 after the holder's epoch.
    assert_eq!(epochs, [3, 3, 2], "{state}");
    second.stop().await;
}

/// A node starting on a database one of whose shards another node holds for longer than the
/// node's tries last gives up and does not start, saying which shard it could not lead; what it
/// took meanwhile it gave up, so shard 0's lease is free for whoever comes next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_lead_a_shard_after_three_tries_does_not_start() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    node(&url, 2).await.stop().await;
    let client = hold_lease(&url, 1, "elsewhere", "1 hour").await;
    let began = Instant::now();
    let refused = match orderly::app::App::bind(&on_database(&url, 2)).await {
        Ok(_) => panic!("started without shard 1's lease"),
        Err(error) => error.to_string(),
    };
    // Three tries, each waiting up to 15 s (less the last pause it would not finish).
    assert!(
        began.elapsed() >= Duration::from_secs(39),
        "{:?}",
        began.elapsed()
    );
    assert!(refused.contains("shard 1's lease"), "{refused}");
    let free = client
        .query_one(
            "SELECT count(*) FROM log_shards WHERE shard = 0 AND expires = '-infinity'",
            &[],
        )
        .await
        .expect("a row")
        .get::<_, i64>(0);
    assert_eq!(free, 1, "shard 0's lease given up");
}

/// A node's settings on the database at `url`, cut into `shards`, each node leading its share.
pub(crate) fn spread_on(url: &str, shards: u32) -> Config {
    let mut config = on_database(url, shards);
    config.spread_shards = true;
    config
}

/// Waits (`bound` at most, polling) until the nodes lead every shard between them, each its
/// share (within one of even); their `led` lists then.
pub(crate) async fn until_spread(nodes: &[&Server], shards: u32, bound: Duration) -> Vec<Vec<u64>> {
    let started = Instant::now();
    loop {
        let mut led = Vec::new();
        for node in nodes {
            let state = cluster(node).await;
            let shards: Vec<u64> = (state["led"].as_array().expect("led").iter())
                .filter_map(serde_json::Value::as_u64)
                .collect();
            led.push(shards);
        }
        let mut all: Vec<u64> = led.iter().flatten().copied().collect();
        all.sort_unstable();
        let even = shards as usize / nodes.len();
        let spread = led.iter().all(|l| l.len() == even || l.len() == even + 1);
        if all == (0..u64::from(shards)).collect::<Vec<_>>() && spread {
            return led;
        }
        assert!(started.elapsed() < bound, "never spread: {led:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two nodes leading their shares of the database at `url`, the second started once the first
/// leads every shard alone; the shards each leads once they are spread.
async fn two_spread_nodes(url: &str) -> (Stoppable, Stoppable, Vec<Vec<u64>>) {
    two_spread_nodes_with(url, |_| {}).await
}

/// `two_spread_nodes`, each node's settings changed by `change` first.
pub(crate) async fn two_spread_nodes_with(
    url: &str,
    change: impl Fn(&mut Config),
) -> (Stoppable, Stoppable, Vec<Vec<u64>>) {
    let start = |mut config: Config| {
        change(&mut config);
        async move { Stoppable::start(orderly::app::App::bind(&config).await.expect("bind")).await }
    };
    let first = start(spread_on(url, SHARDS)).await;
    let led = until_spread(&[&first.server], SHARDS, Duration::from_secs(10)).await;
    assert_eq!(led, [vec![0, 1, 2, 3]]);
    let before = generations(&first.server).await;
    let second = start(spread_on(url, SHARDS)).await;
    let led = until_spread(
        &[&first.server, &second.server],
        SHARDS,
        Duration::from_secs(30),
    )
    .await;
    // The first handed the second's half off and led its own on, without starting over.
    assert_eq!(generations(&first.server).await, before);
    // Both come to name each shard's leader, the console's "led by", as the node leading it.
    let urls = [first.server.url(), second.server.url()];
    let expected: Vec<&str> = (0..u64::from(SHARDS))
        .map(|shard| &*urls[usize::from(!led[0].contains(&shard))])
        .collect();
    let expected = serde_json::json!(expected);
    let started = Instant::now();
    for node in [&first.server, &second.server] {
        loop {
            let state = cluster(node).await;
            if state["leaders"] == expected {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{state} / {expected}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    (first, second, led)
}

/// Another node takes one shard's lease from a node leading its share: the node lets go of that
/// shard alone and serves the others on, without starting over; once the lease is free again,
/// it takes the shard back in place, with what was acknowledged in it. Five times over, as a
/// flapping lease would: each take serves from all the takes before it, and none starts the
/// node over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_leading_its_share_lets_go_of_a_shard_another_takes_and_takes_it_back() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let node = Stoppable::start(
        orderly::app::App::bind(&spread_on(&url, SHARDS))
            .await
            .expect("bind"),
    )
    .await;
    let server = &node.server;
    let led = until_spread(&[server], SHARDS, Duration::from_secs(10)).await;
    assert_eq!(led, [vec![0, 1, 2, 3]]);
    let kept = common::fifo_queue(server, &name_in("kept", ".fifo", 0), &[]).await;
    let usurped = common::fifo_queue(server, &name_in("usurped", ".fifo", 1), &[]).await;
    let send = |url: String, body: String| async move {
        (server.sqs.send_message().queue_url(url))
            .message_group_id(&body)
            .message_deduplication_id(&body)
            .message_body(body)
            .send()
            .await
    };
    let mut expected = [vec!["before".to_string()], vec!["before".to_string()]];
    for url in [&kept, &usurped] {
        send(url.clone(), "before".into()).await.expect("sent");
    }
    let before = generations(server).await;
    for round in 0..5 {
        let client = hold_lease(&url, 1, "usurper", "1 hour").await;
        // At the keeper's next renewal the node finds shard 1's lease gone and lets go of it.
        let started = Instant::now();
        loop {
            let state = cluster(server).await;
            if state["led"] == serde_json::json!([0, 2, 3]) {
                assert_eq!(state["role"], "leader", "{state}");
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "{state}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let during = format!("during-{round}");
        (send(kept.clone(), during.clone()).await).expect("shard 0 served on");
        expected[0].push(during);
        // The usurper goes away: the node takes shard 1 back beside the others.
        client
            .execute(
                "UPDATE log_shards SET expires = '-infinity' WHERE shard = 1",
                &[],
            )
            .await
            .expect("lapse");
        let led = until_spread(&[server], SHARDS, Duration::from_secs(10)).await;
        assert_eq!(led, [vec![0, 1, 2, 3]], "round {round}");
        let back = format!("back-{round}");
        (send(usurped.clone(), back.clone()).await).expect("shard 1 served again");
        expected[1].push(back);
        assert_eq!(
            generations(server).await,
            before,
            "the node started over at round {round}"
        );
    }
    for (url, mut expected) in [kept, usurped].into_iter().zip(expected) {
        let got = (server.sqs.receive_message().queue_url(&url))
            .max_number_of_messages(10)
            .send()
            .await
            .expect("received");
        let mut bodies: Vec<_> = (got.messages.unwrap_or_default().iter())
            .map(|m| m.body().unwrap_or_default().to_string())
            .collect();
        bodies.sort();
        expected.sort();
        assert_eq!(bodies, expected, "{url}");
    }
    node.stop().await;
}

/// Two nodes leading their shares of one database: the first leads every shard alone; once the
/// second joins, each leads half (the first gives its lease of the other's half up), and
/// either serves every queue, passing requests for the other's shards to it. The second
/// stops: the first leads every shard again, with what the second's shards held.
#[tokio::test]
async fn two_nodes_lead_half_the_shards_each_and_serve_every_queue() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let (first, second, led) = two_spread_nodes(&url).await;
    assert_eq!(
        led.iter().map(Vec::len).collect::<Vec<_>>(),
        [2, 2],
        "{led:?}"
    );
    let state = cluster(&second.server).await;
    assert_eq!(state["role"], "leader", "{state}");
    // A queue in each shard, made and fed through the first node, read through the second.
    let names: Vec<String> = (0..SHARDS).map(|s| name_in("spread", ".fifo", s)).collect();
    let mut urls = Vec::new();
    for name in &names {
        let made = (first.server.sqs.create_queue().queue_name(name))
            .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
            .attributes(
                aws_sdk_sqs::types::QueueAttributeName::ContentBasedDeduplication,
                "true",
            )
            .send()
            .await
            .expect("created");
        urls.push(made.queue_url.expect("a URL"));
    }
    // What nodes ask one another is refused to anyone else, a made-up node name included.
    let client = reqwest::Client::new();
    for path in [
        "/_orderly/parcels?from=0&to=1&after=0&max=1",
        "/_orderly/shard-read?shard=0&read=topics",
    ] {
        for name in [None, Some("survey 00000000-0000-0000-0000-000000000000")] {
            let mut asked = client.get(format!("{}{path}", first.server.url()));
            if let Some(name) = name {
                asked = asked.header("x-orderly-node", name);
            }
            let status = asked.send().await.expect("answered").status();
            assert_eq!(status, 403, "{path} as {name:?}");
        }
    }
    // Listed whole through either node: each asks the other for its shards' part.
    let mut sorted = names.clone();
    sorted.sort();
    let mut topics: Vec<String> = (0..SHARDS).map(|s| name_in("listed", "", s)).collect();
    topics.sort();
    for topic in &topics {
        (second.server.sns.create_topic().name(topic).send())
            .await
            .expect("a topic");
    }
    for server in [&first.server, &second.server] {
        let listed = (server.sqs.list_queues().queue_name_prefix("spread").send())
            .await
            .expect("listed");
        let listed: Vec<&str> = (listed.queue_urls().iter())
            .filter_map(|url| url.rsplit('/').next())
            .collect();
        assert_eq!(listed, sorted, "ListQueues through {}", server.url());
        let listed = server.sns.list_topics().send().await.expect("listed");
        let mut listed: Vec<&str> = (listed.topics().iter())
            .filter_map(|topic| topic.topic_arn()?.rsplit(':').next())
            .collect();
        listed.sort_unstable();
        assert_eq!(listed, topics, "ListTopics through {}", server.url());
    }
    for (url, name) in urls.iter().zip(&names) {
        for body in ["one", "two"] {
            (first.server.sqs.send_message().queue_url(url))
                .message_body(format!("{name} {body}"))
                .message_group_id("g")
                .send()
                .await
                .expect("sent");
        }
    }
    for (url, name) in urls.iter().zip(&names) {
        let got = (second.server.sqs.receive_message().queue_url(url))
            .send()
            .await
            .expect("received")
            .messages
            .unwrap_or_default();
        assert_eq!(got.len(), 1, "{name}");
        assert_eq!(got[0].body(), Some(format!("{name} one").as_str()));
        (second.server.sqs.delete_message().queue_url(url))
            .receipt_handle(got[0].receipt_handle().unwrap())
            .send()
            .await
            .expect("deleted");
    }
    // The second stops, giving its leases up: the first takes them beside its own, without
    // starting over, and leads every shard, with what the second's shards held.
    let before = generations(&first.server).await;
    second.stop().await;
    let led = until_spread(&[&first.server], SHARDS, Duration::from_secs(30)).await;
    assert_eq!(led, [vec![0, 1, 2, 3]]);
    assert_eq!(generations(&first.server).await, before);
    for (url, name) in urls.iter().zip(&names) {
        let got = (first.server.sqs.receive_message().queue_url(url))
            .send()
            .await
            .expect("received")
            .messages
            .unwrap_or_default();
        let bodies: Vec<_> = got.iter().filter_map(|m| m.body()).collect();
        assert_eq!(bodies, [format!("{name} two")], "{name}");
    }
    first.stop().await;
}

/// A FIFO topic led by one node fanning out to queues the other node leads (and one it leads
/// itself), published to through the other node: the queues' leader pulls the copies from the
/// topic's, and each queue gets every publish once and in order, the topic's deduplication
/// holding.
#[tokio::test]
async fn a_topics_copies_cross_to_queues_another_node_leads_once_and_in_order() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let (first, second, led) = two_spread_nodes(&url).await;
    let (of_first, of_second) = (&led[0], &led[1]);
    let shard = |n: u64| n as u32;
    let topic = name_in("prices", ".fifo", shard(of_first[0]));
    let queues = [
        name_in("desk", ".fifo", shard(of_second[0])),
        name_in("audit", ".fifo", shard(of_second[1])),
        name_in("local", ".fifo", shard(of_first[1])),
    ];
    let (topic, urls) = topic_into(&second.server, &topic, &queues).await;
    publish(&second.server, &topic, 0..10).await;
    // Published again under the same deduplication ids: dropped at the topic.
    publish(&first.server, &topic, 5..10).await;
    let expected: Vec<String> = (0..10).map(|n| n.to_string()).collect();
    for (url, queue) in urls.iter().zip(&queues) {
        assert_eq!(
            bodies(drain(&first.server, url, 10).await),
            expected,
            "{queue}: each copy once and in order"
        );
    }
    second.stop().await;
    first.stop().await;
}

/// One of two nodes leading their shares is killed (SIGKILL): once its leases lapse, the other
/// leads every shard, and every message acknowledged into the killed node's shards is there.
#[test]
fn the_shards_of_a_killed_node_are_led_by_the_other_with_what_they_held() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(url) = runtime.block_on(common::fresh_database()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let shards = SHARDS.to_string();
    let args = [
        "--storage",
        url.as_str(),
        "--shards",
        &shards,
        "--spread-shards",
    ];
    let first = crate::binary::start(dir.path(), &args, "warn");
    let mut second = crate::binary::start(dir.path(), &args, "warn");
    let servers = [first.addr, second.addr].map(crate::log_in_database::process_server);
    let led = runtime.block_on(until_spread(
        &[&servers[0], &servers[1]],
        SHARDS,
        Duration::from_secs(30),
    ));
    // A queue in each of the second node's shards, fed through the first node.
    let names: Vec<String> = (led[1].iter())
        .map(|&shard| name_in("kept", ".fifo", shard as u32))
        .collect();
    let urls: Vec<String> = runtime.block_on(async {
        let mut urls = Vec::new();
        for name in &names {
            urls.push(common::fifo_queue(&servers[0], name, &[]).await);
        }
        for url in &urls {
            for n in 0..5 {
                (servers[0].sqs.send_message().queue_url(url))
                    .message_body(format!("m{n}"))
                    .message_group_id("g")
                    .message_deduplication_id(format!("m{n}"))
                    .send()
                    .await
                    .expect("acknowledged");
            }
        }
        urls
    });
    second.child.kill().expect("SIGKILL");
    let killed = Instant::now();
    let led = runtime.block_on(until_spread(
        &[&servers[0]],
        SHARDS,
        Duration::from_secs(30),
    ));
    assert_eq!(led, [vec![0, 1, 2, 3]]);
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(20), "led again after {took:?}");
    for (url, name) in urls.iter().zip(&names) {
        let got = runtime.block_on(drain(&servers[0], url, 5));
        let expected: Vec<String> = (0..5).map(|n| format!("m{n}")).collect();
        assert_eq!(bodies(got), expected, "{name}");
    }
}

/// A queue whose dead-letter queue another node leads: the redrive policy is checked against
/// that queue (missing, or of another type, it is refused as AWS refuses it), a message
/// received too often lands there, and either node lists the source as the dead-letter
/// queue's.
#[tokio::test]
async fn a_dead_letter_queue_another_node_leads_is_checked_and_takes_dead_letters() {
    use aws_sdk_sqs::error::ProvideErrorMetadata;
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let (first, second, led) = two_spread_nodes(&url).await;
    let (here, there) = (led[0][0] as u32, led[1][0] as u32);
    let (source, dlq) = (
        name_in("work", ".fifo", here),
        name_in("dead", ".fifo", there),
    );
    let via = &first.server;
    // Not made yet: refused, as AWS refuses a target that does not exist.
    let refused = (via.sqs.create_queue().queue_name(&source))
        .attributes(A::FifoQueue, "true")
        .attributes(A::RedrivePolicy, common::redrive_to(&dlq, 1))
        .send()
        .await;
    let refused = refused.expect_err("no such dead-letter queue");
    assert_eq!(refused.code(), Some("InvalidParameterValue"), "{refused:?}");
    assert!(
        format!("{refused:?}").contains("does not exist"),
        "{refused:?}"
    );
    // A standard queue is no dead-letter queue for a FIFO one.
    let standard = name_in("plain", "", there);
    common::create_queue(via, &standard, &[]).await;
    let refused = (via.sqs.create_queue().queue_name(&source))
        .attributes(A::FifoQueue, "true")
        .attributes(A::RedrivePolicy, common::redrive_to(&standard, 1))
        .send()
        .await
        .expect_err("another type");
    assert!(format!("{refused:?}").contains("same type"), "{refused:?}");
    let dlq_url = common::fifo_queue(via, &dlq, &[]).await;
    let source_url = common::fifo_queue(
        via,
        &source,
        &[("RedrivePolicy", &common::redrive_to(&dlq, 1))],
    )
    .await;
    (via.sqs.send_message().queue_url(&source_url))
        .message_body("poison")
        .message_group_id("g")
        .message_deduplication_id("p")
        .send()
        .await
        .expect("sent");
    // Received once and not deleted; the next receive moves it on, to the other node's queue.
    for _ in 0..2 {
        (via.sqs.receive_message().queue_url(&source_url))
            .visibility_timeout(0)
            .send()
            .await
            .expect("received");
    }
    let got = drain(&second.server, &dlq_url, 1).await;
    assert_eq!(bodies(got), ["poison"]);
    for server in [&first.server, &second.server] {
        let sources = (server
            .sqs
            .list_dead_letter_source_queues()
            .queue_url(&dlq_url))
        .send()
        .await
        .expect("listed");
        let names: Vec<&str> = (sources.queue_urls().iter())
            .filter_map(|url| url.rsplit('/').next())
            .collect();
        assert_eq!(names, [source.as_str()], "through {}", server.url());
    }
    second.stop().await;
    first.stop().await;
}

/// A reset through one node resets every shard, the other node's too (each at its leader): its
/// messages, then with `all=true` its queues. Only a node of the database may reset one shard.
#[tokio::test]
async fn a_reset_through_one_node_resets_the_shards_the_other_leads_too() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let (first, second, _) = two_spread_nodes(&url).await;
    let names: Vec<String> = (0..SHARDS).map(|s| name_in("reset", "", s)).collect();
    let mut urls = Vec::new();
    for name in &names {
        let made = (first.server.sqs.create_queue().queue_name(name).send()).await;
        let url = made.expect("created").queue_url.expect("a URL");
        (first
            .server
            .sqs
            .send_message()
            .queue_url(&url)
            .message_body("kept?"))
        .send()
        .await
        .expect("sent");
        urls.push(url);
    }
    let client = reqwest::Client::new();
    let shard_reset = format!(
        "{}/_orderly/shard-reset?shard=0&scope=everything",
        first.server.url()
    );
    let status = client
        .post(&shard_reset)
        .send()
        .await
        .expect("answered")
        .status();
    assert_eq!(status, 403, "only for the nodes of the database");
    let depth = |url: String| {
        let sqs = first.server.sqs.clone();
        async move {
            let attributes = (sqs.get_queue_attributes().queue_url(url))
                .attribute_names(
                    aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages,
                )
                .send()
                .await
                .expect("read");
            let attributes = attributes.attributes.expect("attributes");
            attributes[&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages].clone()
        }
    };
    for url in &urls {
        assert_eq!(depth(url.clone()).await, "1", "{url} before the reset");
    }
    let reset = |server: &Server, query: &str| {
        let asked = client.post(format!("{}/_orderly/reset{query}", server.url()));
        async move {
            let answer = asked.send().await.expect("answered");
            let status = answer.status();
            (status, answer.text().await.unwrap_or_default())
        }
    };
    let (status, said) = reset(&second.server, "").await;
    assert_eq!(status, 200, "{said}");
    for url in &urls {
        assert_eq!(depth(url.clone()).await, "0", "{url} after the reset");
    }
    let (status, said) = reset(&first.server, "?all=true").await;
    assert_eq!(status, 200, "{said}");
    let listed = (second
        .server
        .sqs
        .list_queues()
        .queue_name_prefix("reset")
        .send())
    .await
    .expect("listed");
    assert!(listed.queue_urls().is_empty(), "{listed:?}");
    second.stop().await;
    first.stop().await;
}

/// Temporary credentials one node issues are kept in the database: the other node admits a
/// request signed with them, in the role's account, and goes on admitting them once the node
/// that issued them stops.
#[tokio::test]
async fn temporary_credentials_issued_by_one_node_act_on_the_other_and_outlive_it() {
    use crate::sts::{ask, GET_CALLER_IDENTITY};
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let (first, second, _) = two_spread_nodes(&url).await;
    let assume = "Action=AssumeRole&Version=2011-06-15&RoleSessionName=tester\
                  &RoleArn=arn%3Aaws%3Aiam%3A%3A111122223333%3Arole%2Fdeployer";
    let (status, issued) = ask(&first.server, "sts", "AKIDORDERLY", (None, assume)).await;
    assert_eq!(status, 200, "{issued}");
    let key = common::xml_text(&issued, "AccessKeyId").expect("a key");
    let (status, who) = ask(&second.server, "sts", key, (None, GET_CALLER_IDENTITY)).await;
    assert_eq!(status, 200, "{who}");
    assert_eq!(common::xml_text(&who, "Account"), Some("111122223333"));
    first.stop().await;
    until_spread(&[&second.server], SHARDS, Duration::from_secs(30)).await;
    let create = "Action=CreateQueue&QueueName=assumed&Version=2012-11-05";
    let (status, created) = ask(&second.server, "sqs", key, (None, create)).await;
    assert_eq!(status, 200, "{created}");
    assert!(created.contains("/111122223333/assumed"), "{created}");
    second.stop().await;
}
