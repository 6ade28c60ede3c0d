//! Nodes leading their shares of one database's shards (`--spread-shards`, real processes)
//! under a load that spans every shard: a FIFO queue in each shard sent to, received from and
//! deleted from, and a FIFO topic fanning out to queues in two other shards. One node is
//! killed, or a node joins; either way every acknowledged send is there once and in order, no
//! acknowledged delete comes back, every acknowledged publish lands in each subscribed queue
//! once and in group order, and sends and publishes wait no longer than a bound: the
//! hand-off's for a join; for a kill, the lease's for the killed node's shards and a few
//! seconds for the others.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::binary::Process;
use crate::common::{self, Server};
use crate::log_in_database::process_server;
use crate::multi_node_shards::until_spread;

const SHARDS: u32 = 6;

/// The first name `{stem}-N.fifo` that falls in `shard`.
fn named(stem: &str, shard: u32) -> String {
    (0..)
        .map(|n| format!("{stem}-{n}.fifo"))
        .find(|name| orderly::engine::shard::Shard::of(SHARDS, name) == shard)
        .expect("a name in every shard")
}

/// A node leading its share of the shards kept where `storage` (the settings) says, as a
/// process.
fn start_node(dir: &std::path::Path, storage: &[String]) -> Process {
    let shards = SHARDS.to_string();
    let mut args: Vec<&str> = storage.iter().map(String::as_str).collect();
    args.extend(["--shards", &shards, "--spread-shards"]);
    crate::binary::start(dir, &args, "warn")
}

/// Where the shards are kept.
#[derive(Clone, Copy)]
enum Databases {
    /// All in one database.
    One,
    /// Shards 3 to 5 in a database of their own, on a second server where one is named.
    Two,
}

/// A client of the same node whose SDK does not retry: the load sees every failure (and asks
/// again itself), so what it measures is the server's.
fn without_retries(server: &Server) -> Arc<Server> {
    let sqs = (server.sqs.config().to_builder())
        .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
        .build();
    let sns = (server.sns.config().to_builder())
        .retry_config(aws_sdk_sns::config::retry::RetryConfig::disabled())
        .build();
    Arc::new(Server {
        addr: server.addr,
        sqs: aws_sdk_sqs::Client::from_conf(sqs),
        sns: aws_sdk_sns::Client::from_conf(sns),
        others: Vec::new(),
    })
}

/// The longest a call took from its first attempt to its acknowledgement (the SDK's own
/// retries and this load's included), and the last failure it met on the way, if any.
#[derive(Default)]
struct Worst {
    longest: Mutex<(Duration, String)>,
}

impl Worst {
    /// `call`, made again every 50 ms until it succeeds (60 s at most); an answer of unknown
    /// outcome is asked again, as an SDK's retries would, which is safe for what the load asks
    /// (sends and publishes carry their deduplication ids).
    async fn until_acknowledged<T, E: std::fmt::Debug, F>(&self, mut call: impl FnMut() -> F) -> T
    where
        F: std::future::Future<Output = Result<T, E>>,
    {
        let began = Instant::now();
        let mut failure = String::new();
        loop {
            match call().await {
                Ok(answer) => {
                    self.noted(began.elapsed(), failure);
                    return answer;
                }
                Err(error) => {
                    assert!(
                        began.elapsed() < Duration::from_secs(60),
                        "never acknowledged: {error:?}"
                    );
                    failure = format!("{error:?}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn noted(&self, took: Duration, failure: String) {
        let mut longest = self.longest.lock().expect("worst");
        if took > longest.0 {
            *longest = (took, failure);
        }
    }
}

/// What happened to one queue, in the order its one consumer saw it.
#[derive(Default)]
struct Ledger {
    sent: Vec<String>,
    /// Every receipt and every acknowledged delete, in order.
    seen: Vec<Seen>,
}

#[derive(Clone, Debug, PartialEq)]
enum Seen {
    /// A message's id and body.
    Received(String, String),
    Deleted(String),
}

/// The load's shared parts.
#[derive(Clone)]
struct Load {
    stop: Arc<AtomicBool>,
    worst: Arc<Worst>,
}

impl Load {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Sends to one group of the FIFO queue at `url` until stopped, each send repeated under its
/// deduplication id until acknowledged.
async fn send(load: Load, server: Arc<Server>, url: String, ledger: Arc<Mutex<Ledger>>) {
    for i in 0.. {
        if load.stopped() {
            return;
        }
        let body = format!("m{i:05}");
        load.worst
            .until_acknowledged(|| {
                (server.sqs.send_message().queue_url(&url))
                    .message_group_id("g")
                    .message_deduplication_id(&body)
                    .message_body(&body)
                    .send()
            })
            .await;
        ledger.lock().expect("ledger").sent.push(body);
    }
}

/// Receives from the queue at `url` and deletes what it got, until stopped (`stop`, so the
/// last of the queue can be received once the sends have stopped). A delete that fails is not
/// repeated: its message comes back once its visibility ends, as it may.
async fn consume(
    stop: Arc<AtomicBool>,
    server: Arc<Server>,
    url: String,
    ledger: Arc<Mutex<Ledger>>,
) {
    while !stop.load(Ordering::Relaxed) {
        if receive_and_delete(&server, &url, &ledger).await.is_none() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One receive from the queue at `url` (a second's long poll), each message got deleted at
/// once, both noted in `ledger`; how many came, `None` when the receive failed.
async fn receive_and_delete(server: &Server, url: &str, ledger: &Mutex<Ledger>) -> Option<usize> {
    let got = (server.sqs.receive_message().queue_url(url))
        .max_number_of_messages(5)
        .wait_time_seconds(1)
        .send()
        .await
        .ok()?;
    let messages = got.messages.unwrap_or_default();
    for message in &messages {
        let body = message.body().unwrap_or_default().to_string();
        let id = message.message_id().unwrap_or_default().to_string();
        let received = Seen::Received(id, body.clone());
        ledger.lock().expect("ledger").seen.push(received);
        let deleted = (server.sqs.delete_message().queue_url(url))
            .receipt_handle(message.receipt_handle().unwrap_or_default())
            .send()
            .await;
        if deleted.is_ok() {
            ledger
                .lock()
                .expect("ledger")
                .seen
                .push(Seen::Deleted(body));
        }
    }
    Some(messages.len())
}

/// Publishes to group `group` of the FIFO topic until stopped, each publish repeated under its
/// deduplication id until acknowledged; the bodies acknowledged, in order.
async fn publish(load: Load, server: Arc<Server>, topic: String, group: usize) -> Vec<String> {
    let mut acknowledged = Vec::new();
    for i in 0.. {
        if load.stopped() {
            break;
        }
        let body = format!("g{group}-{i:05}");
        load.worst
            .until_acknowledged(|| {
                (server.sns.publish().topic_arn(&topic))
                    .message(&body)
                    .message_group_id(format!("g{group}"))
                    .message_deduplication_id(&body)
                    .send()
            })
            .await;
        acknowledged.push(body);
    }
    acknowledged
}

/// Every queue's ledger holds: each acknowledged send received, the first receipts in the
/// order sent and nothing else, each body under one message id (kept once); no message
/// received again once its delete was acknowledged.
fn check_queue(name: &str, ledger: &Ledger) {
    let mut first_receipts = Vec::new();
    let mut ids: HashMap<&str, &str> = HashMap::new();
    let mut deleted = HashSet::new();
    for seen in &ledger.seen {
        match seen {
            Seen::Received(id, body) => {
                assert!(
                    !deleted.contains(body),
                    "{name}: {body} came back once deleted"
                );
                match ids.insert(body, id) {
                    None => first_receipts.push(body.clone()),
                    Some(first) => assert_eq!(first, id, "{name}: {body} kept twice"),
                }
            }
            Seen::Deleted(body) => {
                deleted.insert(body.clone());
            }
        }
    }
    assert_eq!(
        first_receipts, ledger.sent,
        "{name}: every acknowledged send once, in order"
    );
}

/// Each subscribed queue holds every acknowledged publish once, in group order, and nothing
/// else.
async fn check_copies(server: &Server, urls: &[String], published: &[Vec<String>]) {
    let total: usize = published.iter().map(Vec::len).sum();
    for url in urls {
        let got = crate::shards::drain(server, url, total).await;
        for (group, expected) in published.iter().enumerate() {
            let bodies: Vec<String> = (got.iter())
                .filter(|(of, _)| *of == format!("g{group}"))
                .map(|(_, body)| body.clone())
                .collect();
            assert_eq!(
                &bodies, expected,
                "{url}: group {group} once each, in order"
            );
        }
        let more = (server.sqs.receive_message().queue_url(url))
            .wait_time_seconds(1)
            .send()
            .await
            .expect("received");
        assert!(
            more.messages.unwrap_or_default().is_empty(),
            "{url}: more than published"
        );
    }
}

/// The load running: a queue in every shard with a sender and a consumer, and a topic with
/// two groups of publishes, all through `through` (nodes that stay up).
struct Running {
    load: Load,
    /// How long the sends to the queues of a killed node's shards took.
    worst_affected: Arc<Worst>,
    consumers_stop: Arc<AtomicBool>,
    /// Each queue's URL, ledger, and the node its consumer asks.
    queues: Vec<(String, Arc<Mutex<Ledger>>, Arc<Server>)>,
    senders: Vec<tokio::task::JoinHandle<()>>,
    consumers: Vec<tokio::task::JoinHandle<()>>,
    publishers: Vec<tokio::task::JoinHandle<Vec<String>>>,
}

impl Running {
    /// `affected`: the queues whose sends are measured apart (`worst_affected`).
    async fn start(
        through: &[Arc<Server>],
        (urls, affected): (&[String], &[String]),
        topic: &str,
    ) -> Running {
        let through: Vec<Arc<Server>> = through.iter().map(|s| without_retries(s)).collect();
        let load = Load {
            stop: Arc::new(AtomicBool::new(false)),
            worst: Arc::new(Worst::default()),
        };
        let consumers_stop = Arc::new(AtomicBool::new(false));
        let worst_affected = Arc::new(Worst::default());
        let mut running = Running {
            load: load.clone(),
            worst_affected: worst_affected.clone(),
            consumers_stop: consumers_stop.clone(),
            queues: Vec::new(),
            senders: Vec::new(),
            consumers: Vec::new(),
            publishers: Vec::new(),
        };
        for (i, url) in urls.iter().enumerate() {
            let ledger = Arc::new(Mutex::new(Ledger::default()));
            let (sending, consuming) = (
                &through[i % through.len()],
                &through[(i + 1) % through.len()],
            );
            let mut sends = load.clone();
            if affected.contains(url) {
                sends.worst = worst_affected.clone();
            }
            running.senders.push(tokio::spawn(send(
                sends,
                sending.clone(),
                url.clone(),
                ledger.clone(),
            )));
            running.consumers.push(tokio::spawn(consume(
                consumers_stop.clone(),
                consuming.clone(),
                url.clone(),
                ledger.clone(),
            )));
            running
                .queues
                .push((url.clone(), ledger, consuming.clone()));
        }
        for group in 0..2 {
            let server = through[group % through.len()].clone();
            running.publishers.push(tokio::spawn(publish(
                load.clone(),
                server,
                topic.to_string(),
                group,
            )));
        }
        running
    }

    /// The fewest sends acknowledged to one queue, and deletes acknowledged from one queue.
    fn least(&self) -> (usize, usize) {
        let ledgers = self
            .queues
            .iter()
            .map(|(_, ledger, _)| ledger.lock().expect("ledger"));
        ledgers.fold((usize::MAX, usize::MAX), |(sent, deleted), ledger| {
            let deletes = ledger
                .seen
                .iter()
                .filter(|s| matches!(s, Seen::Deleted(_)))
                .count();
            (sent.min(ledger.sent.len()), deleted.min(deletes))
        })
    }

    /// Waits (`bound` at most) until every queue has `sent` more sends acknowledged than now and
    /// `deleted` more deletes.
    async fn until_more(&self, (sent, deleted): (usize, usize), bound: Duration) {
        let (from_sent, from_deleted) = self.least();
        let began = Instant::now();
        loop {
            let (now_sent, now_deleted) = self.least();
            if now_sent >= from_sent + sent && now_deleted >= from_deleted + deleted {
                return;
            }
            assert!(
                began.elapsed() < bound,
                "the load stalled: {now_sent} sent, {now_deleted} deleted"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the load, lets the consumers receive what is left, and checks every queue and the
    /// topic's copies; the longest a send or publish took to be acknowledged, apart from the
    /// sends to `affected` queues, and the longest of those.
    async fn stop_and_check(self, server: &Server, subscribed: &[String]) -> (Duration, Duration) {
        self.load.stop.store(true, Ordering::Relaxed);
        for sender in self.senders {
            sender.await.expect("no sender panicked");
        }
        let mut published = Vec::new();
        for publisher in self.publishers {
            published.push(publisher.await.expect("no publisher panicked"));
        }
        // The consumers go on until each has seen every acknowledged send (a message whose
        // delete failed comes back once its visibility ends).
        let began = Instant::now();
        loop {
            let behind: Vec<&String> = (self.queues.iter())
                .filter(|(_, ledger, _)| {
                    let ledger = ledger.lock().expect("ledger");
                    let received: HashSet<&String> = (ledger.seen.iter())
                        .filter_map(|s| match s {
                            Seen::Received(_, body) => Some(body),
                            Seen::Deleted(_) => None,
                        })
                        .collect();
                    ledger.sent.iter().any(|body| !received.contains(body))
                })
                .map(|(url, _, _)| url)
                .collect();
            if behind.is_empty() {
                break;
            }
            assert!(
                began.elapsed() < Duration::from_secs(60),
                "never received all of {behind:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.consumers_stop.store(true, Ordering::Relaxed);
        for consumer in self.consumers {
            consumer.await.expect("no consumer panicked");
        }
        // Past the visibility (2 s) of any message whose delete failed, what is left is read
        // too: only those may come back, each under the id it had.
        let sweeps: Vec<_> = (self.queues.iter())
            .map(|(url, ledger, server)| {
                let (url, ledger, server) = (url.clone(), ledger.clone(), server.clone());
                tokio::spawn(async move {
                    let until = Instant::now() + Duration::from_secs(4);
                    while Instant::now() < until {
                        receive_and_delete(&server, &url, &ledger).await;
                    }
                })
            })
            .collect();
        for sweep in sweeps {
            sweep.await.expect("no sweep panicked");
        }
        for (url, ledger, _) in &self.queues {
            check_queue(url, &ledger.lock().expect("ledger"));
        }
        check_copies(server, subscribed, &published).await;
        let sent: usize = (self.queues.iter())
            .map(|(_, l, _)| l.lock().expect("ledger").sent.len())
            .sum();
        let publishes: usize = published.iter().map(Vec::len).sum();
        eprintln!("{sent} sends and {publishes} publishes acknowledged");
        let mut longest = Vec::new();
        for (worst, which) in [
            (&self.load.worst, "sends and publishes"),
            (&self.worst_affected, "sends to the killed node's shards"),
        ] {
            let (took, failure) = worst.longest.lock().expect("worst").clone();
            if !took.is_zero() {
                eprintln!(
                    "{which}: the longest took {} ms (failed on the way: {failure:?})",
                    took.as_millis()
                );
            }
            longest.push(took);
        }
        (longest[0], longest[1])
    }
}

/// A queue in every shard and a FIFO topic in `topic_shard` subscribed by queues in
/// `subscribed` (two other shards), made through `server`: the queues' URLs, the topic's ARN
/// and the subscribed queues' URLs.
async fn made(
    server: &Server,
    topic_shard: u32,
    subscribed: [u32; 2],
) -> (Vec<String>, String, Vec<String>) {
    let mut urls = Vec::new();
    for shard in 0..SHARDS {
        urls.push(
            common::fifo_queue(server, &named("load", shard), &[("VisibilityTimeout", "2")]).await,
        );
    }
    let queues = subscribed.map(|shard| named("copies", shard));
    let (topic, copies) =
        crate::shards::topic_into(server, &named("prices", topic_shard), &queues).await;
    (urls, topic, copies)
}

/// Nodes started on fresh databases, with what the test needs to go on.
struct Nodes {
    runtime: tokio::runtime::Runtime,
    /// The settings that say where the shards are kept.
    storage: Vec<String>,
    dir: tempfile::TempDir,
    processes: Vec<Process>,
    /// Each process's clients, in the same order.
    servers: Vec<Arc<Server>>,
}

impl Nodes {
    /// `count` nodes on fresh databases; `None` without a database server.
    fn start(count: usize, databases: Databases) -> Option<Nodes> {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let url = runtime.block_on(common::fresh_database())?;
        let mut storage = vec!["--storage".to_string(), url];
        if let Databases::Two = databases {
            let elsewhere = orderly::persist::database::test_database::fresh_database_elsewhere();
            let elsewhere = runtime.block_on(elsewhere)?;
            storage.push("--shard-database".into());
            storage.push(format!("3-{}={elsewhere}", SHARDS - 1));
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let processes: Vec<Process> = (0..count)
            .map(|_| start_node(dir.path(), &storage))
            .collect();
        let servers = (processes.iter())
            .map(|p| Arc::new(process_server(p.addr)))
            .collect();
        Some(Nodes {
            runtime,
            storage,
            dir,
            processes,
            servers,
        })
    }
}

/// How many generations `server` has started (`orderly_generations_total`): each time it
/// started over on its database.
pub(crate) async fn generations(server: &Server) -> u64 {
    let scraped = reqwest::get(format!("{}/metrics", server.url()))
        .await
        .expect("scraped");
    let status = scraped.status();
    let metrics = scraped.text().await.expect("a body");
    assert_eq!(status, 200, "{metrics}");
    (metrics.lines())
        .find_map(|line| line.strip_prefix("orderly_generations_total "))
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no orderly_generations_total in {metrics}"))
}

/// Each of `servers`' generations since `before` (since it started, for one past the end of
/// `before`): a node whose share
/// moves starts over once or twice (it gives way, then takes leases as they come free, one
/// holder's at a time), never over and over.
async fn few_starts(servers: &[&Server], before: &[u64]) {
    for (at, server) in servers.iter().enumerate() {
        let started = generations(server).await - before.get(at).copied().unwrap_or(0);
        eprintln!("{}: {started} generations started", server.url());
        assert!(started <= 3, "{}: {started} generations", server.url());
    }
}

/// Each of `servers` moved its shards in place, handing off and taking what placement moved
/// between `led` and `led_after` (theirs at each index), without starting a generation since
/// `before`.
async fn moved_in_place(
    servers: &[&Server],
    before: &[u64],
    (led, led_after): (&[Vec<u32>], &[Vec<u32>]),
) {
    for (at, server) in servers.iter().enumerate() {
        let started = generations(server).await - before[at];
        eprintln!(
            "{}: led {:?}, then {:?}",
            server.url(),
            led[at],
            led_after[at]
        );
        assert_eq!(
            started,
            0,
            "{} started over rather than move shards in place",
            server.url()
        );
    }
}

/// The shards each of `servers` leads, as numbers.
fn led_by(led: &[Vec<u64>]) -> Vec<Vec<u32>> {
    led.iter()
        .map(|l| l.iter().map(|&s| s as u32).collect())
        .collect()
}

/// One of three nodes killed (SIGKILL) under the load, the topic led by a survivor and one of
/// its subscribed queues in a shard the killed node led: the survivors lead its shards within
/// the lease and a few seconds, calls to the other shards wait a few seconds at most, and
/// nothing acknowledged is lost, duplicated or reordered.
#[test]
fn one_of_three_nodes_killed_under_load_loses_nothing_acknowledged() {
    killed_under_load(Databases::One);
}

/// The same with half the shards kept in a database of their own (in a second cluster), so
/// the killed node's shards lapse in both.
#[test]
fn one_of_three_nodes_with_shards_in_two_clusters_killed_under_load_loses_nothing_acknowledged() {
    killed_under_load(Databases::Two);
}

fn killed_under_load(databases: Databases) {
    // The directory is the processes' data directory: held until they are done.
    let Some(Nodes {
        runtime,
        storage,
        dir: _dir,
        mut processes,
        servers,
    }) = Nodes::start(3, databases)
    else {
        return;
    };
    runtime.block_on(async {
        let all: Vec<&Server> = servers.iter().map(|s| s.as_ref()).collect();
        let led = led_by(&until_spread(&all, SHARDS, Duration::from_secs(30)).await);
        let (urls, topic, copies) = made(&servers[0], led[0][0], [led[2][0], led[1][0]]).await;
        let survivors = [servers[0].clone(), servers[1].clone()];
        let affected: Vec<String> = led[2]
            .iter()
            .map(|&shard| urls[shard as usize].clone())
            .collect();
        let running = Running::start(&survivors, (&urls, &affected), &topic).await;
        running.until_more((20, 10), Duration::from_secs(60)).await;
        let before = [
            generations(&servers[0]).await,
            generations(&servers[1]).await,
        ];
        processes[2].child.kill().expect("SIGKILL");
        let killed = Instant::now();
        let both = [servers[0].as_ref(), servers[1].as_ref()];
        let led_after = led_by(&until_spread(&both, SHARDS, Duration::from_secs(40)).await);
        let took = killed.elapsed();
        eprintln!(
            "the killed node's shards were led again in {} ms",
            took.as_millis()
        );
        let bound = orderly::persist::database::lease::LEASE + Duration::from_secs(6);
        assert!(took < bound, "led again after {took:?}");
        running.until_more((20, 10), Duration::from_secs(60)).await;
        let (others, affected) = running.stop_and_check(&servers[0], &copies).await;
        assert!(
            affected < bound,
            "a send to the killed node's shards took {affected:?}"
        );
        // The survivors take the killed node's shards beside their own: their own shards wait
        // a reading or two, not for the lease.
        assert!(others < Duration::from_secs(4), "a call took {others:?}");
        few_starts(&both, &before).await;
        // The survivors took the killed node's shards (and any placement moved between them)
        // without starting over.
        moved_in_place(&both, &before, (&led, &led_after)).await;
        kept_where_placed(&storage).await;
    });
}

/// Each database given in `storage` keeps the leases and logs of its own shards only: the
/// home 0 to 2 with a range placed elsewhere, every shard without.
async fn kept_where_placed(storage: &[String]) {
    // The --storage URL, then each range's (`FIRST-LAST=URL`).
    let urls: Vec<&str> = (storage.iter())
        .filter(|arg| !arg.starts_with("--"))
        .map(|arg| match arg.starts_with("postgres") {
            true => arg.as_str(),
            false => arg.split_once('=').map_or(arg.as_str(), |(_, url)| url),
        })
        .collect();
    let expected: Vec<Vec<i32>> = match urls.len() {
        1 => vec![(0..SHARDS as i32).collect()],
        _ => vec![(0..3).collect(), (3..SHARDS as i32).collect()],
    };
    for (url, expected) in urls.iter().zip(expected) {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connected");
        tokio::spawn(connection);
        let shards = |table: &str| format!("SELECT DISTINCT shard FROM {table} ORDER BY shard");
        let found = |rows: Vec<tokio_postgres::Row>| -> Vec<i32> {
            rows.iter().map(|row| row.get(0)).collect()
        };
        let leases = client
            .query(&shards("log_shards"), &[])
            .await
            .expect("read");
        assert_eq!(found(leases), expected, "leases in {url}");
        // A shard whose log a snapshot covered since has no batch left: none of another's.
        let batches = client
            .query(&shards("log_batches"), &[])
            .await
            .expect("read");
        let batches = found(batches);
        assert!(!batches.is_empty(), "no log in {url}");
        assert!(
            batches.iter().all(|shard| expected.contains(shard)),
            "batches of {batches:?} in {url}"
        );
    }
}

/// A third node joins two under the load: it takes its share of the shards, and nothing
/// acknowledged is lost, duplicated or reordered, and no send or publish waits longer than the
/// hand-off.
#[test]
fn a_node_joining_under_load_takes_its_share_and_loses_nothing() {
    joining_under_load(Databases::One);
}

/// The same with half the shards kept in a database of their own (in a second cluster): the
/// hand-off gives leases up in both.
#[test]
fn a_node_joining_under_load_with_shards_in_two_clusters_takes_its_share_and_loses_nothing() {
    joining_under_load(Databases::Two);
}

fn joining_under_load(databases: Databases) {
    let Some(Nodes {
        runtime,
        storage,
        dir,
        mut processes,
        servers,
    }) = Nodes::start(2, databases)
    else {
        return;
    };
    runtime.block_on(async {
        let both = [servers[0].as_ref(), servers[1].as_ref()];
        let led = led_by(&until_spread(&both, SHARDS, Duration::from_secs(30)).await);
        let (urls, topic, copies) = made(&servers[0], led[0][0], [led[1][0], led[0][1]]).await;
        let running = Running::start(&servers, (&urls, &[]), &topic).await;
        running.until_more((20, 10), Duration::from_secs(60)).await;
        let before = [
            generations(&servers[0]).await,
            generations(&servers[1]).await,
        ];
        let joined = Instant::now();
        processes.push(start_node(dir.path(), &storage));
        let third = process_server(processes[2].addr);
        let all = [servers[0].as_ref(), servers[1].as_ref(), &third];
        let led_after = led_by(&until_spread(&all, SHARDS, Duration::from_secs(40)).await);
        let took = joined.elapsed();
        eprintln!(
            "a third node led its share {} ms after it started",
            took.as_millis()
        );
        running.until_more((20, 10), Duration::from_secs(60)).await;
        let (longest, _) = running.stop_and_check(&servers[0], &copies).await;
        // The hand-off: each old node gives the leases of the new node's share up and leads the
        // rest on, and the new node takes them at its next reading of the database (once a
        // second).
        assert!(longest < Duration::from_secs(5), "a call took {longest:?}");
        few_starts(&all, &before).await;
        // The old nodes handed shards off (and took any placement moved between them) without
        // starting over; the new node, which led none at first, took its share as it came
        // free, in its first generation.
        let old = [servers[0].as_ref(), servers[1].as_ref()];
        moved_in_place(&old, &before, (&led, &led_after)).await;
        assert_eq!(
            generations(&third).await,
            1,
            "the new node took its share in its first generation"
        );
    });
}
