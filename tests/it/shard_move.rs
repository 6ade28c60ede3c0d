//! Moving a range of shards between databases (`--move-shards FIRST-LAST=URL`): a cluster
//! begun on one database moves shards 2-3 into a second, on into a third, splits them there
//! (shard 3 into a fourth), joins them again there and moves them back home, every message,
//! receipt handle and subscription kept, and nodes given the old map refused.

use orderly::app::App;
use orderly::config::Config;
use orderly::persist::database::shard_map::Placed;
use serde_json::Value;
use std::time::Duration;

use crate::common::{self, Stoppable};
use crate::log_in_database::{database, on_log};
use crate::log_transfer::{messages, run};
use crate::multi_node_shards::until_spread;
use crate::shards::{name_in, SHARDS};

type Clock = std::sync::Arc<orderly::clock::ManualClock>;

/// A node of the home at `home`, shards 2-3 kept at `placed` if given; snapshots taken often,
/// so that the range has some to move. It leads its share (all four shards, alone).
fn node(home: &str, placed: Option<&str>) -> Config {
    let ranges: Vec<(u32, u32, &str)> = placed.iter().map(|url| (2, 3, *url)).collect();
    node_on(home, &ranges)
}

/// A node of the home at `home`, each range (first, last, URL) kept where it says.
fn node_on(home: &str, placed: &[(u32, u32, &str)]) -> Config {
    let mut config = on_log(home);
    config.shards = SHARDS;
    config.spread_shards = true;
    config.snapshot_after = 1;
    config.shard_databases = (placed.iter())
        .map(|&(first, last, url)| Placed {
            first,
            last,
            url: url.to_string(),
        })
        .collect();
    config
}

/// Starts a node as `node` says, once it leads every shard.
async fn start(home: &str, placed: Option<&str>, clock: &Clock) -> Stoppable {
    start_on(node(home, placed), clock).await
}

/// Starts a node of `config`, once it leads every shard.
async fn start_on(config: Config, clock: &Clock) -> Stoppable {
    let app = App::bind_with_clock(&config, clock.clone())
        .await
        .expect("leads every shard");
    let started = Stoppable::start(app).await;
    until_spread(&[&started.server], SHARDS, Duration::from_secs(10)).await;
    started
}

/// `orderly --move-shards 2-3=TO --storage HOME [--shard-database 2-3=FROM]`.
fn move_to(home: &str, to: &str, from: Option<&str>) -> (bool, String) {
    let target = format!("2-3={to}");
    let mut args = vec!["--move-shards", &target, "--storage", home];
    let source = from.map(|from| format!("2-3={from}"));
    if let Some(source) = &source {
        args.extend(["--shard-database", source]);
    }
    run(&args)
}

/// Stops `node`, which takes its announcements in the home back as it stops: a move right
/// after need not wait a lease for them to age.
async fn stop(node: Stoppable, home: &str) {
    node.stop().await;
    let client = database(home).await;
    let left = (client
        .query_one("SELECT count(*) FROM log_nodes", &[])
        .await)
        .expect("counted");
    assert_eq!(left.get::<_, i64>(0), 0, "every announcement taken back");
}

/// How many rows of `table` the database at `url` holds for shards 2 and 3.
async fn rows_of_range(url: &str, table: &str) -> i64 {
    let client = database(url).await;
    let query = format!("SELECT count(*) FROM {table} WHERE shard BETWEEN 2 AND 3");
    client.query_one(&query, &[]).await.expect("counted").get(0)
}

/// The nodes that hold shards 2 and 3's leases in the database at `url`.
async fn holders(url: &str) -> Vec<String> {
    let client = database(url).await;
    let rows = client
        .query(
            "SELECT node FROM log_shards WHERE shard BETWEEN 2 AND 3 ORDER BY shard",
            &[],
        )
        .await
        .expect("read");
    rows.iter().map(|row| row.get(0)).collect()
}

/// The number before `word` in what the move said (`12 batches`).
fn count_before(said: &str, word: &str) -> u64 {
    let words: Vec<&str> = said.split_whitespace().collect();
    let at = (words.iter())
        .position(|w| w.trim_end_matches(',') == word)
        .expect(word);
    words[at - 1]
        .trim_start_matches('(')
        .parse()
        .expect("a number")
}

struct Queues {
    moved: String,
    plain: String,
    stays: String,
}

impl Queues {
    async fn state(&self, server: &common::Server) -> Vec<Value> {
        let mut state = Vec::new();
        for queue in [&self.moved, &self.plain, &self.stays] {
            let name = queue.rsplit('/').next().expect("a name");
            state.push(messages(server, name).await);
        }
        state
    }
}

/// Waits until the queue at `url` holds `count` messages (a topic's copy crosses shards a
/// moment after its publish).
async fn until_holds(server: &common::Server, url: &str, count: usize) {
    let name = url.rsplit('/').next().expect("a name");
    let started = std::time::Instant::now();
    while messages(server, name).await.as_array().map(Vec::len) != Some(count) {
        assert!(started.elapsed() < Duration::from_secs(10), "never {count}");
        tokio::task::yield_now().await;
    }
}

async fn publish(server: &common::Server, topic: &str, body: &str) {
    server
        .sns
        .publish()
        .topic_arn(topic)
        .message(body)
        .message_group_id("t")
        .message_deduplication_id(body)
        .send()
        .await
        .expect("published");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_of_shards_moves_into_a_database_of_its_own_on_into_another_and_back_home() {
    let Some(home) = common::fresh_database().await else {
        return;
    };
    let elsewhere = orderly::persist::database::test_database::fresh_database_elsewhere;
    let (Some(second), Some(third), Some(fourth)) =
        (elsewhere().await, elsewhere().await, elsewhere().await)
    else {
        return;
    };
    let clock = common::manual_clock();
    let first = start(&home, None, &clock).await;
    let server = &first.server;
    let content = [("ContentBasedDeduplication", "true")];
    let queues = Queues {
        moved: common::fifo_queue(server, &name_in("moved", ".fifo", 2), &content).await,
        plain: common::create_queue(server, &name_in("plain", "", 3), &[]).await,
        stays: common::create_queue(server, &name_in("stays", "", 1), &[]).await,
    };
    let topic = common::fifo_topic(server, &name_in("feed", ".fifo", 0)).await;
    let moved_name = queues.moved.rsplit('/').next().expect("a name").to_string();
    common::subscribe(server, &topic, &moved_name, true).await;
    for (queue, count) in [(&queues.moved, 6), (&queues.plain, 4), (&queues.stays, 3)] {
        for i in 0..count {
            let mut send = server.sqs.send_message().queue_url(queue.as_str());
            if queue == &queues.moved {
                send = send.message_group_id(format!("g{}", i % 2));
            }
            send.message_body(format!("m{i}"))
                .send()
                .await
                .expect("sent");
        }
    }
    publish(server, &topic, "before").await;
    until_holds(server, &queues.moved, 7).await;
    // In flight across the move: its receipt handle must still work after.
    let held = server
        .sqs
        .receive_message()
        .queue_url(&queues.plain)
        .send()
        .await
        .expect("received")
        .messages
        .unwrap_or_default()
        .pop()
        .expect("a message");
    let before = queues.state(server).await;

    let (moved, said) = move_to(&home, &second, None);
    assert!(!moved, "moved beside a leader: {said}");
    assert!(
        said.contains("announced itself within the last 5 s"),
        "{said}"
    );
    stop(first, &home).await;

    let (moved, said) = move_to(&home, &home, None);
    assert!(!moved, "moved into the home: {said}");
    assert!(said.contains("keeps them already"), "{said}");
    let at_home = format!("0-1={second}");
    let (moved, said) = run(&["--move-shards", &at_home, "--storage", &home]);
    assert!(!moved, "moved shard 0: {said}");
    assert!(said.contains("shard 0 stays"), "{said}");
    let (moved, said) = move_to(&home, &second, None);
    assert!(moved, "{said}");
    assert!(said.contains("moved shards 2-3"), "{said}");
    assert!(count_before(&said, "batches") > 0, "{said}");
    assert!(count_before(&said, "snapshots") > 0, "{said}");
    for table in [
        "log_shards",
        "log_batches",
        "log_snapshots",
        "log_snapshot_chunks",
    ] {
        assert_eq!(rows_of_range(&home, table).await, 0, "{table} left at home");
    }
    assert_eq!(holders(&second).await, ["", ""], "free in the new database");

    // Nodes given the old map are refused; given the new one, everything is there.
    let refused = App::bind_with_clock(&node(&home, None), clock.clone()).await;
    let error = format!("{:#}", refused.err().expect("refused"));
    assert!(error.contains("first used with shards 2-3"), "{error}");
    let again = start(&home, Some(&second), &clock).await;
    let server = &again.server;
    assert_eq!(
        queues.state(server).await,
        before,
        "every message as it was"
    );
    server
        .sqs
        .delete_message()
        .queue_url(&queues.plain)
        .receipt_handle(held.receipt_handle().unwrap_or_default())
        .send()
        .await
        .expect("a receipt handle from before the move deletes");
    publish(server, &topic, "after").await;
    until_holds(server, &queues.moved, 8).await;
    let after = queues.state(server).await;
    stop(again, &home).await;

    // On into a third database: the range's database must be named, as the nodes were given it.
    let (moved, said) = move_to(&home, &third, None);
    assert!(!moved, "moved without its database: {said}");
    assert!(said.contains("name it with --shard-database"), "{said}");
    let (moved, said) = move_to(&home, &second, Some(&second));
    assert!(!moved, "moved onto itself: {said}");
    assert!(said.contains("keeps them already"), "{said}");
    let (moved, said) = move_to(&home, &third, Some(&second));
    assert!(moved, "{said}");
    assert_eq!(
        holders(&second).await,
        ["orderly --move-shards", "orderly --move-shards"],
        "held for good where they were"
    );
    assert_eq!(rows_of_range(&second, "log_batches").await, 0);
    let refused = App::bind_with_clock(&node(&home, Some(&second)), clock.clone()).await;
    let error = format!("{:#}", refused.err().expect("refused"));
    assert!(error.contains("records another database"), "{error}");
    let last = start(&home, Some(&third), &clock).await;
    assert_eq!(
        queues.state(&last.server).await,
        after,
        "every message as it was"
    );
    stop(last, &home).await;

    // Split in place: shard 3 on into a fourth database, the third keeping shard 2 alone.
    let whole = format!("2-3={third}");
    let part = format!("3-3={fourth}");
    let (moved, said) = run(&[
        "--move-shards",
        &part,
        "--storage",
        &home,
        "--shard-database",
        &whole,
    ]);
    assert!(moved, "{said}");
    assert!(
        said.contains("--shard-database 2-2=URL for the database it gave for 2-3"),
        "{said}"
    );
    assert_eq!(
        rows_of_range(&third, "log_shards").await,
        1,
        "shard 2's alone"
    );
    assert_eq!(rows_of_range(&fourth, "log_shards").await, 1, "shard 3's");
    let refused = App::bind_with_clock(&node(&home, Some(&third)), clock.clone()).await;
    let error = format!("{:#}", refused.err().expect("refused"));
    assert!(error.contains("first used with shards 2-2, 3-3"), "{error}");
    let split = [(2, 2, third.as_str()), (3, 3, fourth.as_str())];
    let parts = start_on(node_on(&home, &split), &clock).await;
    assert_eq!(
        queues.state(&parts.server).await,
        after,
        "every message as it was"
    );
    stop(parts, &home).await;

    // Joined again in place: shard 3 into the database of shard 2, then the whole range back
    // into the home, where a node given no range finds it all.
    let (two, three) = (format!("2-2={third}"), format!("3-3={fourth}"));
    let (moved, said) = run(&[
        "--move-shards",
        &format!("3-3={third}"),
        "--storage",
        &home,
        "--shard-database",
        &two,
        "--shard-database",
        &three,
    ]);
    assert!(moved, "{said}");
    assert!(said.contains("--shard-database 2-3=URL for it"), "{said}");
    assert_eq!(rows_of_range(&third, "log_shards").await, 2);
    assert_eq!(rows_of_range(&fourth, "log_batches").await, 0);
    let joined = start(&home, Some(&third), &clock).await;
    assert_eq!(
        queues.state(&joined.server).await,
        after,
        "every message as it was"
    );
    stop(joined, &home).await;
    let (moved, said) = move_to(&home, &home, Some(&third));
    assert!(moved, "{said}");
    assert!(said.contains("without --shard-database 2-3"), "{said}");
    assert_eq!(rows_of_range(&home, "log_shards").await, 2);
    assert_eq!(rows_of_range(&third, "log_batches").await, 0);
    let home_again = start(&home, None, &clock).await;
    assert_eq!(
        queues.state(&home_again.server).await,
        after,
        "every message as it was"
    );
    stop(home_again, &home).await;
}
