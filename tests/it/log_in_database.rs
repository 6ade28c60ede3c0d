//! The engine's log and snapshots in PostgreSQL (`--storage`): what a restart, a
//! takeover, a deposed leader and a damaged log do, against a real database.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orderly::app::App;
use orderly::config::Config;

use crate::common::{self, Stoppable};

/// Settings that keep the log in the database at `url`.
pub(crate) fn on_log(url: &str) -> Config {
    let mut config = Config::ephemeral();
    config.ephemeral = false;
    config.storage = Some(url.to_string());
    config
}

pub(crate) async fn database(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("the test database answers");
    tokio::spawn(connection);
    client
}

async fn text(url: &str) -> String {
    let answer = reqwest::get(url).await.expect("answered");
    answer.text().await.expect("a body")
}

async fn leader(client: &tokio_postgres::Client) -> (i64, String) {
    let row = client
        .query_one("SELECT epoch, url FROM log_shards", &[])
        .await
        .expect("the lease row");
    (row.get(0), row.get(1))
}

/// A FIFO queue deduplicating by content.
async fn fifo(server: &common::Server, name: &str) -> String {
    common::fifo_queue(server, name, &[("ContentBasedDeduplication", "true")]).await
}

async fn send(server: &common::Server, queue: &str, group: &str, body: &str) {
    server
        .sqs
        .send_message()
        .queue_url(queue)
        .message_group_id(group)
        .message_body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("send {body}: {e:?}"));
}

/// Receives up to ten and deletes them; returns their bodies.
async fn take(server: &common::Server, queue: &str, count: i32) -> Vec<String> {
    let got = server
        .sqs
        .receive_message()
        .queue_url(queue)
        .max_number_of_messages(count)
        .send()
        .await
        .expect("receive");
    let mut bodies = Vec::new();
    for message in got.messages.unwrap_or_default() {
        bodies.push(message.body().unwrap_or_default().to_string());
        server
            .sqs
            .delete_message()
            .queue_url(queue)
            .receipt_handle(message.receipt_handle().unwrap_or_default())
            .send()
            .await
            .expect("delete");
    }
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_leader_recovers_every_message_from_snapshots_and_batches() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let clock = common::manual_clock();
    let mut config = on_log(&url);
    // A snapshot as soon as there is any history, so several are taken and kept mid-load.
    config.snapshot_after = 1;
    let first = Stoppable::start(
        App::bind_with_clock(&config, clock.clone())
            .await
            .expect("leads"),
    )
    .await;
    let server = &first.server;
    let fifo = fifo(server, "prices.fifo").await;
    let standard = common::create_queue(server, "audit", &[]).await;
    let mut sent = Vec::new();
    for i in 0..40 {
        let body = format!("p{i}");
        send(server, &fifo, &format!("g{}", i % 4), &body).await;
        sent.push(body);
    }
    for i in 0..10 {
        server
            .sqs
            .send_message()
            .queue_url(&standard)
            .message_body(format!("a{i}"))
            .send()
            .await
            .expect("send");
    }
    // Twelve deleted, four more received and left in flight.
    let mut deleted = Vec::new();
    while deleted.len() < 12 {
        deleted.extend(take(server, &fifo, 4).await);
    }
    let in_flight = server
        .sqs
        .receive_message()
        .queue_url(&fifo)
        .max_number_of_messages(4)
        .send()
        .await
        .expect("receive")
        .messages
        .unwrap_or_default();
    assert!(!in_flight.is_empty());
    first.stop().await;

    let client = database(&url).await;
    let snapshots: i64 = client
        .query_one("SELECT count(*) FROM log_snapshots", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(snapshots, 1, "one snapshot is kept, the older ones dropped");
    let (epoch, _) = leader(&client).await;

    let second = Stoppable::start(
        App::bind_with_clock(&config, clock.clone())
            .await
            .expect("leads again"),
    )
    .await;
    assert_eq!(
        leader(&client).await.0,
        epoch + 1,
        "each leader a new epoch"
    );
    let server = &second.server;
    // What was in flight is still in flight; once its visibility ends it comes back.
    let none = server
        .sqs
        .receive_message()
        .queue_url(&fifo)
        .max_number_of_messages(10)
        .send()
        .await
        .expect("receive")
        .messages
        .unwrap_or_default();
    let held: Vec<_> = in_flight
        .iter()
        .map(|m| m.body().unwrap_or_default())
        .collect();
    for message in &none {
        assert!(
            !held.contains(&message.body().unwrap_or_default()),
            "a message in flight came back early"
        );
    }
    let mut rest: Vec<(String, Option<String>)> = none
        .iter()
        .map(|m| (m.body().unwrap_or_default().to_string(), None))
        .collect();
    for message in &none {
        server
            .sqs
            .delete_message()
            .queue_url(&fifo)
            .receipt_handle(message.receipt_handle().unwrap_or_default())
            .send()
            .await
            .expect("delete");
    }
    clock.advance_millis(3_600_000);
    rest.extend(common::drain(server, &fifo).await);
    let mut expected: Vec<String> = sent
        .iter()
        .filter(|b| !deleted.contains(b))
        .cloned()
        .collect();
    let mut got: Vec<String> = rest.iter().map(|(b, _)| b.clone()).collect();
    // Within each group, in the order sent.
    for group in 0..4 {
        let order: Vec<usize> = got
            .iter()
            .map(|b| b[1..].parse::<usize>().expect("numbered"))
            .filter(|n| n % 4 == group)
            .collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(order, sorted, "group g{group} out of order");
    }
    got.sort();
    expected.sort();
    assert_eq!(
        got, expected,
        "every message not deleted, once; none deleted"
    );
    let audit = common::drain(server, &standard).await;
    assert_eq!(audit.len(), 10);
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_acknowledges_nothing_more_steps_down_and_leads_again() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let config = on_log(&url);
    let first = Stoppable::start(App::bind(&config).await.expect("leads")).await;
    let fifo = fifo(&first.server, "orders.fifo").await;
    send(&first.server, &fifo, "g", "kept").await;

    // Another node takes the lease, as one does once it lapses: one more epoch.
    let client = database(&url).await;
    client
        .execute(
            "UPDATE log_shards SET epoch = epoch + 1, node = 'usurper', url = 'http://usurper', \
             expires = now() + interval '1 hour'",
            &[],
        )
        .await
        .expect("take the lease");
    for body in ["refused", "refused again"] {
        let answer = first
            .server
            .sqs
            .send_message()
            .queue_url(&fifo)
            .message_group_id("g")
            .message_body(body)
            .send()
            .await;
        let error = answer.expect_err("a deposed leader acknowledged a send");
        if body == "refused again" {
            // Refused before anything was changed: a temporary failure, for SDKs to retry.
            use aws_sdk_sqs::error::ProvideErrorMetadata;
            assert_eq!(error.code(), Some("ServiceUnavailable"), "{error:?}");
        }
    }
    let stored: i64 = client
        .query_one(
            "SELECT count(*) FROM log_batches WHERE epoch <> (SELECT epoch FROM log_shards)",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    let kept: i64 = client
        .query_one("SELECT count(*) FROM log_batches", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(stored, kept, "only the first epoch ever wrote");

    // It steps down: a standby of the usurper, without a restart.
    let started = Instant::now();
    let state = loop {
        let state = cluster(&first.server).await;
        // Right away a standby of no one known; once started over, of the usurper.
        if state["role"] == "standby" && state["leader"] == "http://usurper" {
            break state;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never stepped down: {state}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (usurped, _) = leader(&client).await;
    assert_eq!(state["epoch"], usurped, "{state}");

    // The usurper goes away; the same node leads again, from what was acknowledged only.
    client
        .execute("UPDATE log_shards SET expires = '-infinity'", &[])
        .await
        .expect("lapse");
    until_it_leads(&first.server).await;
    assert_eq!(leader(&client).await, (usurped + 1, first.server.url()));
    assert_eq!(bodies(&first.server, &fifo).await, ["kept"]);
    send(&first.server, &fifo, "g", "after").await;
    first.stop().await;
    let next = Stoppable::start(App::bind(&config).await.expect("leads")).await;
    // "kept" was deleted before the restart: only "after" comes back.
    assert_eq!(bodies(&next.server, &fifo).await, ["after"]);
    next.stop().await;
}

/// `GET /_orderly/cluster` of a node.
pub(crate) async fn cluster(server: &common::Server) -> serde_json::Value {
    let state = reqwest::get(format!("{}/_orderly/cluster", server.url()))
        .await
        .expect("answered")
        .text()
        .await
        .expect("a body");
    serde_json::from_str(&state).expect("JSON")
}

/// Waits (a bound of 20 s, polling: a standby looks for new batches on real time) until the
/// standby has applied every record the leader has written.
async fn until_caught_up(standby: &common::Server, leader: &common::Server) {
    let started = Instant::now();
    loop {
        let (followed, written) = (cluster(standby).await, cluster(leader).await);
        assert_eq!(followed["role"], "standby", "{followed}");
        if followed["applied"] == written["applied"] && followed["lag"] == 0 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never caught up: {followed} against {written}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (a bound of 20 s, polling: the lease runs on real time) until `server` leads; returns
/// how long that took.
pub(crate) async fn until_it_leads(server: &common::Server) -> Duration {
    let started = Instant::now();
    loop {
        if cluster(server).await["role"] == "leader" {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never led");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_passes_requests_on_and_leads_once_the_leader_gives_up_its_lease() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let config = on_log(&url);
    let first = Stoppable::start(App::bind(&config).await.expect("leads")).await;
    let client = database(&url).await;
    let (epoch, first_url) = leader(&client).await;
    assert_eq!(first_url, first.server.url());

    // Another node serves at once, as a standby.
    let second = Stoppable::start(App::bind(&config).await.expect("a standby")).await;
    let state = cluster(&second.server).await;
    assert_eq!(state["role"], "standby", "{state}");
    assert_eq!(state["leader"], first_url, "{state}");
    assert_eq!(state["epoch"], epoch, "{state}");
    // Every request through it is the leader's, and the URLs handed out name the standby.
    let fifo = fifo(&second.server, "handover.fifo").await;
    assert!(fifo.starts_with(&second.server.url()), "{fifo}");
    for i in 0..5 {
        send(&second.server, &fifo, "g", &format!("m{i}")).await;
    }
    let on_leader = reqwest::get(format!(
        "{}/_orderly/queues/handover.fifo/messages",
        first.server.url()
    ))
    .await
    .expect("answered")
    .text()
    .await
    .expect("a body");
    assert!(on_leader.contains("\"m4\""), "{on_leader}");
    assert_eq!(leader(&client).await, (epoch, first_url));
    // It follows the log: its engine applies what the leader writes.
    until_caught_up(&second.server, &first.server).await;
    // The standby's metrics are its own: its role, and what it passed on (the queue's
    // creation and five sends at least); the leader counts the requests themselves.
    let metrics = text(&format!("{}/metrics", second.server.url())).await;
    let answered = metrics
        .lines()
        .find_map(|l| l.strip_prefix("orderly_forwarded_requests_total{outcome=\"answered\"} "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(answered.is_some_and(|n| n >= 6), "{metrics}");
    for line in [
        "orderly_cluster_role{role=\"standby\"} 1",
        "orderly_forwarded_requests_total{outcome=\"not_sent\"} 0",
        "orderly_forwarded_requests_total{outcome=\"unknown\"} 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line} in\n{metrics}"
        );
    }
    // A receipt handle the first leader issued, used once the second leads.
    let held = second
        .server
        .sqs
        .receive_message()
        .queue_url(&fifo)
        .max_number_of_messages(5)
        .visibility_timeout(600)
        .send()
        .await
        .expect("receive")
        .messages
        .unwrap_or_default();
    assert_eq!(held.len(), 5, "the group's run");
    first.stop().await;

    // Given up, not lapsed: no need to wait out the lease.
    let took = until_it_leads(&second.server).await;
    assert!(took < orderly::persist::database::lease::LEASE, "{took:?}");
    assert_eq!(leader(&client).await, (epoch + 1, second.server.url()));
    let state = cluster(&second.server).await;
    assert_eq!(state["role"], "leader", "{state}");
    assert_eq!(state["epoch"], epoch + 1, "{state}");
    assert_eq!(state["leader"], second.server.url(), "{state}");
    assert_eq!(state["lag"], 0, "{state}");
    // The queue's creation and five sends were logged before this leader took over.
    assert!(state["applied"].as_u64().is_some_and(|n| n >= 6), "{state}");
    let metrics = text(&format!("{}/metrics", second.server.url())).await;
    for line in [
        "orderly_cluster_role{role=\"leader\"} 1".to_string(),
        "orderly_cluster_role{role=\"single\"} 0".to_string(),
        format!("orderly_cluster_epoch {}", epoch + 1),
        "orderly_cluster_lag_records 0".to_string(),
        "orderly_cluster_shards 1".to_string(),
        "orderly_cluster_shards_led 1".to_string(),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line} in\n{metrics}"
        );
    }
    second
        .server
        .sqs
        .delete_message()
        .queue_url(&fifo)
        .receipt_handle(held[0].receipt_handle().unwrap_or_default())
        .send()
        .await
        .expect("a handle issued before the takeover deletes after it");
    for message in &held[1..] {
        second
            .server
            .sqs
            .change_message_visibility()
            .queue_url(&fifo)
            .receipt_handle(message.receipt_handle().unwrap_or_default())
            .visibility_timeout(0)
            .send()
            .await
            .expect("a handle issued before the takeover changes visibility after it");
    }
    assert_eq!(
        bodies(&second.server, &fifo).await,
        ["m1", "m2", "m3", "m4"]
    );
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_host_that_never_answers_is_left_for_the_next() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let (stem, database) = url.rsplit_once('/').expect("a database in the URL");
    let (user_part, host) = stem.rsplit_once('@').expect("a user in the URL");
    let (_, port) = host.rsplit_once(':').expect("a port in the URL");
    // Accepted by the kernel, never answered: a frozen primary.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let hung_port = hung.local_addr().expect("bound").port();
    let both = format!("{user_part}@127.0.0.1:{hung_port},{host}/{database}");
    let started = Instant::now();
    let first = Stoppable::start(App::bind(&on_log(&both)).await.expect("leads")).await;
    let took = started.elapsed();
    eprintln!("led past a hung first host in {} ms", took.as_millis());
    assert!(took < Duration::from_secs(15), "{took:?}");
    let queue = fifo(&first.server, "hosts.fifo").await;
    send(&first.server, &queue, "g", "through the second host").await;
    first.stop().await;

    // The key-value form names the same hosts.
    let user = user_part.rsplit('/').next().unwrap_or("orderly");
    let key_value =
        format!("host=127.0.0.1,127.0.0.1 port={hung_port},{port} user={user} dbname={database}");
    let second = Stoppable::start(App::bind(&on_log(&key_value)).await.expect("leads")).await;
    assert_eq!(
        bodies(&second.server, &queue).await,
        ["through the second host"]
    );
    second.stop().await;
    drop(hung);
}

/// Starts a leader, sends `count` messages, stops it; returns the queue's URL.
async fn some_history(config: &Config, count: usize) {
    let server = Stoppable::start(App::bind(config).await.expect("leads")).await;
    let fifo = fifo(&server.server, "history.fifo").await;
    for i in 0..count {
        send(&server.server, &fifo, "g", &format!("h{i}")).await;
    }
    server.stop().await;
}

async fn refused(config: &Config) -> String {
    match App::bind(config).await {
        Ok(_) => panic!("started on a damaged log"),
        Err(error) => error.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_batch_is_refused_with_where_it_was() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let mut config = on_log(&url);
    config.snapshot_after = u64::MAX;
    some_history(&config, 6).await;
    let client = database(&url).await;
    let gone: i64 = client
        .query_one(
            "DELETE FROM log_batches WHERE first_lsn = \
             (SELECT first_lsn FROM log_batches ORDER BY first_lsn OFFSET 3 LIMIT 1) \
             RETURNING first_lsn",
            &[],
        )
        .await
        .expect("delete a batch")
        .get(0);
    let said = refused(&config).await;
    assert!(
        said.contains("log_batches row (shard 0, first_lsn "),
        "{said}"
    );
    assert!(said.contains(&format!("records {gone} to")), "{said}");
    assert!(said.contains("missing"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_snapshot_or_chunk_is_refused() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let mut config = on_log(&url);
    config.snapshot_after = 1;
    some_history(&config, 20).await;
    let client = database(&url).await;
    let first_lsn: i64 = client
        .query_one("SELECT first_lsn FROM log_snapshots", &[])
        .await
        .expect("a snapshot was kept")
        .get(0);
    assert!(first_lsn > 0);
    // A chunk gone.
    let chunk: Vec<u8> = client
        .query_one(
            "DELETE FROM log_snapshot_chunks WHERE chunk = 0 RETURNING bytes",
            &[],
        )
        .await
        .expect("a chunk")
        .get(0);
    let said = refused(&config).await;
    assert!(said.contains("chunk 0 of 1 is missing"), "{said}");
    client
        .execute(
            "INSERT INTO log_snapshot_chunks (snapshot, chunk, bytes, shard) \
             SELECT id, 0, $1, shard FROM log_snapshots",
            &[&chunk],
        )
        .await
        .expect("put it back");
    // The whole snapshot gone: the log it covered is gone too, and cannot replace it.
    client
        .execute("DELETE FROM log_snapshots", &[])
        .await
        .expect("delete the snapshot");
    let said = refused(&config).await;
    let missing = "the snapshot the log starts from (log_shards.snapshot) is missing";
    assert!(said.contains(missing), "{said}");
    // So is a log left with no batch either, which would look like a log never written.
    client
        .execute("DELETE FROM log_batches", &[])
        .await
        .expect("delete the batches");
    let said = refused(&config).await;
    assert!(said.contains(missing), "{said}");
}

/// Tables of version 1 (which kept no record of the snapshot the log starts from) open,
/// upgraded in place through version 2 to shards, with everything they held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_of_version_1_are_upgraded_in_place() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    // The fixture's pending webhooks must not reach another test's receiver.
    let _port = crate::format_upgrade::RECEIVER_PORT.lock().await;
    let config = on_log(&url);
    let client = crate::format_upgrade::replay_dump(
        &url,
        crate::format_upgrade::DATABASE_VERSION_2_SNAPSHOT,
    )
    .await;
    client
        .batch_execute("ALTER TABLE log_home DROP COLUMN snapshot; UPDATE log_home SET version = 1")
        .await
        .expect("the layout of version 1");
    // Not while a node of version 1 leads them: it would keep snapshots without recording them.
    client
        .execute(
            "UPDATE log_leader SET expires = now() + interval '1 hour'",
            &[],
        )
        .await
        .expect("a leader of version 1");
    let said = refused(&config).await;
    assert!(
        said.contains("stop every node of the earlier version"),
        "{said}"
    );
    client
        .execute("UPDATE log_leader SET expires = '-infinity'", &[])
        .await
        .expect("it stopped");
    // The fixture's messages are days old: on today's clock their retention has run out.
    let written_at =
        crate::format_upgrade::written_at(crate::format_upgrade::DATABASE_VERSION_2, "snapshot");
    let clock = Arc::new(orderly::clock::ManualClock::new(
        orderly::engine::Timestamp(written_at + 1_000),
    ));
    let app = App::bind_with_clock(&config, clock).await.expect("leads");
    let server = Stoppable::start(app).await;
    let row = client
        .query_one(
            "SELECT version, (SELECT snapshot = (SELECT id FROM log_snapshots) FROM log_shards \
             WHERE shard = 0) FROM log_home",
            &[],
        )
        .await
        .expect("the home row");
    assert_eq!(
        (row.get::<_, i32>(0), row.get::<_, Option<bool>>(1)),
        (4, Some(true))
    );
    let listed = server.server.sqs.list_queues().send().await.unwrap();
    assert_eq!(listed.queue_urls().len(), 9, "{listed:?}");
    let prices = format!("{}/000000000000/prices.fifo", server.server.url());
    let kept: Vec<String> = bodies(&server.server, &prices).await;
    assert!(kept.contains(&"m1".to_string()), "{kept:?}");
    server.stop().await;
    // A snapshot the shard's row does not name (as a node of version 1 would have kept one
    // after the upgrade) is refused, not taken for the log's start or passed over.
    client
        .execute("UPDATE log_shards SET snapshot = NULL", &[])
        .await
        .expect("forget which snapshot");
    let said = refused(&config).await;
    assert!(said.contains("does not name"), "{said}");
}

/// Bodies left in the queue, each deleted once received.
async fn bodies(server: &common::Server, queue: &str) -> Vec<String> {
    common::drain(server, queue)
        .await
        .into_iter()
        .map(|(body, _)| body)
        .collect()
}

/// A server started as a process, for the SDK helpers.
pub(crate) fn process_server(addr: std::net::SocketAddr) -> common::Server {
    common::Server {
        addr,
        sqs: common::client(addr),
        sns: common::sns_client(addr),
        others: Vec::new(),
    }
}

#[derive(Default)]
struct Ledger {
    sent: Vec<String>,
    deleted: Vec<String>,
    /// Deletes whose answer never came: they may or may not have taken effect.
    unanswered: Vec<String>,
    /// Calls that failed, by the node they were made to.
    failed: Vec<(usize, String)>,
}

/// The load's place: the node it asks, its queue, what it noted, and when to stop.
#[derive(Clone)]
struct Load {
    server: Arc<common::Server>,
    node: usize,
    queue: String,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Load {
    fn stopped(&self) -> bool {
        self.stop.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn failed(&self, call: &str, error: impl std::fmt::Debug) {
        let failure = (self.node, format!("{call}: {error:?}"));
        self.ledger.lock().expect("ledger").failed.push(failure);
    }
}

const GROUPS: usize = 4;

/// Sends to `group` until stopped or a send fails, noting each one acknowledged.
async fn produce(load: Load, group: usize) {
    for i in 0.. {
        if load.stopped() {
            return;
        }
        let body = format!("g{group}-{i:05}");
        let sent = (load.server.sqs.send_message())
            .queue_url(&load.queue)
            .message_group_id(format!("g{group}"))
            .message_body(&body)
            .send()
            .await;
        if let Err(error) = sent {
            return load.failed("SendMessage", error);
        }
        load.ledger.lock().expect("ledger").sent.push(body);
    }
}

/// Receives and deletes until stopped or a call fails, noting each delete acknowledged.
async fn consume(load: Load) {
    while !load.stopped() {
        let got = (load.server.sqs.receive_message())
            .queue_url(&load.queue)
            .max_number_of_messages(3)
            .send()
            .await;
        let got = match got {
            Ok(got) => got,
            Err(error) => return load.failed("ReceiveMessage", error),
        };
        for message in got.messages.unwrap_or_default() {
            let deleted = (load.server.sqs.delete_message())
                .queue_url(&load.queue)
                .receipt_handle(message.receipt_handle().unwrap_or_default())
                .send()
                .await;
            let body = message.body().unwrap_or_default().to_string();
            if let Err(error) = deleted {
                load.ledger.lock().expect("ledger").unanswered.push(body);
                return load.failed("DeleteMessage", error);
            }
            load.ledger.lock().expect("ledger").deleted.push(body);
        }
    }
}

/// The leader killed under load: another node leads within the lease, nothing acknowledged is
/// lost, and not one call made through the other nodes fails: they wait for the next leader.
#[test]
fn a_killed_leader_is_replaced_within_the_lease_and_loses_nothing_acknowledged() {
    killed_leader(1);
}

/// The same over a database cut into three shards, the queue in the last: the next leader
/// takes every shard's lease, the first one's to lapse and then the others.
#[test]
fn a_killed_leader_of_three_shards_is_replaced_whole_and_loses_nothing_acknowledged() {
    killed_leader(3);
}

fn killed_leader(shards: u32) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(url) = runtime.block_on(common::fresh_database()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // A manual clock, so the survivor can pass the visibility of what was in flight at once.
    let count = shards.to_string();
    let args = [
        "--storage",
        url.as_str(),
        "--clock",
        "manual",
        "--shards",
        &count,
    ];
    // Three nodes: the first leads, the others pass requests on to it.
    let mut first = crate::binary::start(dir.path(), &args, "warn");
    let others = [
        crate::binary::start(dir.path(), &args, "warn"),
        crate::binary::start(dir.path(), &args, "warn"),
    ];
    let nodes: Vec<Arc<common::Server>> = [first.addr, others[0].addr, others[1].addr]
        .into_iter()
        .map(|addr| Arc::new(process_server(addr)))
        .collect();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let name = (0..)
        .map(|n| format!("kill-{n}.fifo"))
        .find(|name| orderly::engine::shard::Shard::of(shards, name) == shards - 1)
        .expect("a name in the last shard");
    let queue = runtime.block_on(fifo(&nodes[1], &name));
    // The load spread over the three nodes.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = |node: usize| Load {
        server: nodes[node].clone(),
        node,
        queue: queue.clone(),
        ledger: ledger.clone(),
        stop: stop.clone(),
    };
    let mut work = Vec::new();
    for group in 0..GROUPS {
        work.push(runtime.spawn(produce(load(group % 3), group)));
    }
    for consumer in 0..2 {
        work.push(runtime.spawn(consume(load(consumer + 1))));
    }
    // Killed under load, once there is something of each kind to lose (polled with a bound:
    // the load runs against real processes).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (sent, deleted) = {
            let ledger = ledger.lock().expect("ledger");
            (ledger.sent.len(), ledger.deleted.len())
        };
        if sent >= 200 && deleted >= 50 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no load: {sent} sent, {deleted} deleted"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    first.child.kill().expect("SIGKILL");
    let killed = Instant::now();
    // One of the others leads within the lease; the third passes requests on to it.
    let (new_leader, standby) = runtime.block_on(async {
        loop {
            let roles = [
                cluster(&nodes[1]).await["role"].clone(),
                cluster(&nodes[2]).await["role"].clone(),
            ];
            match roles.iter().position(|role| role == "leader") {
                Some(at) => break (nodes[at + 1].clone(), nodes[2 - at].clone()),
                None => {
                    assert!(killed.elapsed() < Duration::from_secs(30), "nobody leads");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    });
    let took = killed.elapsed();
    eprintln!("a killed leader was replaced in {} ms", took.as_millis());
    assert!(
        took < orderly::persist::database::lease::LEASE + Duration::from_secs(10),
        "{took:?}"
    );
    // The load goes on past the takeover (a few dozen sends more), then stops.
    let during = ledger.lock().expect("ledger").sent.len();
    while ledger.lock().expect("ledger").sent.len() < during + 30 {
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "no sends after the takeover"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    runtime.block_on(async {
        for task in work {
            task.await.expect("no task panicked");
        }
    });
    let ledger = ledger.lock().expect("ledger");
    let through_others: Vec<_> = ledger
        .failed
        .iter()
        .filter(|(node, _)| *node != 0)
        .collect();
    assert!(
        through_others.is_empty(),
        "calls through the surviving nodes failed: {through_others:?}"
    );
    // The standby learns who leads now at its next look at the lease (within a second).
    runtime.block_on(async {
        while cluster(&standby).await["leader"] != new_leader.url() {
            assert!(
                killed.elapsed() < Duration::from_secs(30),
                "the standby follows no one"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    // What was received and not deleted when the leader died is still in flight: let its
    // visibility pass (through the standby, which passes it on).
    runtime.block_on(common::advance_an_hour(&standby));
    let left = runtime.block_on(bodies(&standby, &queue));
    let deleted = ledger.deleted.iter().cloned().collect();
    let unanswered = ledger.unanswered.iter().cloned().collect();
    common::assert_nothing_lost(&left, &ledger.sent, &deleted, &unanswered, GROUPS);
}

/// Waits (a bound of 20 s, polling) until `node` is a standby of `leader`: a leader that
/// lost its lease has stepped down.
pub(crate) async fn until_standby_of(node: &common::Server, leader: &common::Server) {
    let started = Instant::now();
    loop {
        let state = cluster(node).await;
        if state["role"] == "standby" && state["leader"] == leader.url() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never stepped down: {state}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `kill -SIGNAL pid`.
pub(crate) fn signal(process: &crate::binary::Process, signal: &str) {
    let sent = std::process::Command::new("kill")
        .args([signal, &process.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill {signal}");
}

/// Split brain: the leader frozen (SIGSTOP) past its lease while a standby takes over, then
/// woken (SIGCONT). It acknowledges nothing of what it was asked while frozen, steps down and
/// passes requests on to the new leader; the log never forks.
#[test]
fn a_frozen_leader_woken_after_a_takeover_acknowledges_nothing_and_steps_down() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(url) = runtime.block_on(common::fresh_database()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let args = ["--storage", url.as_str()];
    let old = crate::binary::start(dir.path(), &args, "warn");
    let new = crate::binary::start(dir.path(), &args, "warn");
    let (on_old, on_new) = (
        Arc::new(process_server(old.addr)),
        Arc::new(process_server(new.addr)),
    );
    let queue = runtime.block_on(fifo(&on_old, "split.fifo"));
    runtime.block_on(send(&on_old, &queue, "g", "before"));

    signal(&old, "-STOP");
    // A client asks the frozen leader; its request waits in the socket. Its own answer is
    // wanted, so the SDK does not try again.
    let asked_frozen = {
        let (server, queue) = (on_old.clone(), queue.clone());
        runtime.spawn(async move {
            let once = aws_sdk_sqs::config::Config::builder()
                .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled());
            let sent = server.sqs.send_message().queue_url(&queue);
            let sent = sent.message_group_id("g").message_body("while frozen");
            sent.customize().config_override(once).send().await
        })
    };
    let took = runtime.block_on(until_it_leads(&on_new));
    eprintln!("a frozen leader was replaced in {} ms", took.as_millis());
    // The lease runs from its last renewal, up to a second before the freeze.
    let lease = orderly::persist::database::lease::LEASE;
    assert!(took < lease + Duration::from_secs(10), "{took:?}");
    runtime.block_on(send(&on_new, &queue, "g", "after the takeover"));

    signal(&old, "-CONT");
    let answered_frozen = runtime
        .block_on(asked_frozen)
        .expect("no task panicked")
        .is_ok();
    eprintln!("the send asked of the frozen leader was answered with success: {answered_frozen}");
    // It steps down: a standby of the new leader.
    runtime.block_on(until_standby_of(&on_old, &on_new));
    runtime.block_on(send(&on_old, &queue, "g", "through the old leader"));

    // The log: each batch right after the one before, epochs never going back.
    let batches = runtime.block_on(async {
        let client = database(&url).await;
        let rows = client
            .query(
                "SELECT first_lsn, last_lsn, epoch FROM log_batches ORDER BY first_lsn",
                &[],
            )
            .await
            .expect("the batches");
        rows.iter()
            .map(|row| {
                (
                    row.get::<_, i64>(0),
                    row.get::<_, i64>(1),
                    row.get::<_, i64>(2),
                )
            })
            .collect::<Vec<_>>()
    });
    for pair in batches.windows(2) {
        let ((_, last, epoch), (first, _, next_epoch)) = (pair[0], pair[1]);
        assert_eq!(first, last + 1, "a gap or an overlap: {batches:?}");
        assert!(
            next_epoch >= epoch,
            "an older epoch wrote after a newer: {batches:?}"
        );
    }
    let epochs: std::collections::BTreeSet<i64> = batches.iter().map(|b| b.2).collect();
    assert_eq!(
        epochs.into_iter().collect::<Vec<_>>(),
        [1, 2],
        "{batches:?}"
    );

    // Only what was acknowledged, in order; the frozen leader's answer was true either way
    // (a success can only have been passed on to the new leader once it stepped down).
    let mut expected = vec!["before", "after the takeover"];
    if answered_frozen {
        expected.push("while frozen");
    }
    expected.push("through the old leader");
    assert_eq!(runtime.block_on(bodies(&on_new, &queue)), expected);
    drop((old, new));
}

/// A standby frozen while the leader keeps snapshots that drop the batches it has not applied
/// yet: woken, it starts over from the newest snapshot with a fresh engine, catches up, and
/// leads with every message once the leader is killed.
#[test]
fn a_standby_left_behind_by_a_snapshot_starts_over_and_catches_up() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(url) = runtime.block_on(common::fresh_database()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // A snapshot as soon as anything was written since the last.
    let leading = ["--storage", url.as_str(), "--snapshot-after", "1"];
    let mut first = crate::binary::start(dir.path(), &leading, "warn");
    let standby = crate::binary::start(dir.path(), &["--storage", url.as_str()], "warn");
    let (on_first, on_standby) = (process_server(first.addr), process_server(standby.addr));
    let queue = runtime.block_on(fifo(&on_first, "behind.fifo"));
    let bodies_sent: Vec<String> = (0..60).map(|i| format!("m{i:02}")).collect();
    for body in &bodies_sent[..20] {
        runtime.block_on(send(&on_first, &queue, "g", body));
    }
    runtime.block_on(until_caught_up(&on_standby, &on_first));
    let applied = runtime.block_on(cluster(&on_standby))["applied"]
        .as_i64()
        .expect("a position");

    signal(&standby, "-STOP");
    for body in &bodies_sent[20..] {
        runtime.block_on(send(&on_first, &queue, "g", body));
    }
    // A snapshot kept from past where the standby stopped: the batches it needs are gone.
    let client = runtime.block_on(database(&url));
    let started = Instant::now();
    loop {
        let kept: Option<i64> = runtime
            .block_on(client.query_opt(
                "SELECT s.first_lsn FROM log_shards l JOIN log_snapshots s ON s.id = l.snapshot",
                &[],
            ))
            .expect("the snapshot kept")
            .map(|row| row.get(0));
        if kept.is_some_and(|first_lsn| first_lsn > applied + 1) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no snapshot past {applied}"
        );
        runtime.block_on(send(&on_first, &queue, "h", "nudge"));
        std::thread::sleep(Duration::from_millis(100));
    }
    signal(&standby, "-CONT");
    runtime.block_on(until_caught_up(&on_standby, &on_first));

    first.child.kill().expect("SIGKILL");
    let _ = first.child.wait();
    runtime.block_on(until_it_leads(&on_standby));
    let left = runtime.block_on(bodies(&on_standby, &queue));
    let in_group: Vec<&String> = left.iter().filter(|b| b.starts_with('m')).collect();
    assert_eq!(in_group, bodies_sent.iter().collect::<Vec<_>>());
}

/// A single PostgreSQL with no standby: an acknowledged write survives its crash but not a
/// failover to a replica. The leader says so (`/_orderly/cluster`, `/metrics`), and a node
/// asked to require synchronous replication refuses to lead.
#[test]
fn a_leader_says_whether_a_database_failover_could_lose_what_it_acknowledged() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(url) = runtime.block_on(common::fresh_database()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let refused = crate::binary::refused(
        dir.path(),
        &[
            "--storage",
            url.as_str(),
            "--require-synchronous-replication",
        ],
    );
    assert!(
        refused.contains("--require-synchronous-replication"),
        "{refused}"
    );
    assert!(
        refused.contains("synchronous_standby_names is empty"),
        "{refused}"
    );
    let leader = crate::binary::start(dir.path(), &["--storage", url.as_str()], "warn");
    let server = process_server(leader.addr);
    let state = runtime.block_on(cluster(&server));
    // The refusal gave the lease up: this node leads at once, not waiting out a lease.
    assert_eq!(state["role"], "leader", "{state}");
    assert_eq!(state["replication"]["synchronous"], false, "{state}");
    let metrics = runtime.block_on(text(&format!("{}/metrics", server.url())));
    assert!(
        metrics.contains("orderly_cluster_synchronous_replication 0"),
        "{metrics}"
    );
}

/// Every node announces itself in the database about every second: each lists the live
/// nodes, itself among them. A node that stops takes its announcement back as it stops (a
/// standby and a leader alike), so the others' next readings leave it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_lists_the_live_nodes_and_forgets_one_that_stopped() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let config = on_log(&url);
    let first = Stoppable::start(App::bind(&config).await.expect("leads")).await;
    let second = Stoppable::start(App::bind(&config).await.expect("a standby")).await;
    let mut both = vec![first.server.url(), second.server.url()];
    both.sort();
    let lists = |server: &common::Server, expected: serde_json::Value| {
        let server = server.url();
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let state: serde_json::Value =
                    serde_json::from_str(&text(&format!("{server}/_orderly/cluster")).await)
                        .expect("json");
                if state["nodes"] == expected {
                    return;
                }
                assert!(Instant::now() < deadline, "{state} never listed {expected}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    lists(&first.server, serde_json::json!(both)).await;
    lists(&second.server, serde_json::json!(both)).await;
    let announced = |url: String| {
        let home = config.storage.clone().expect("a database");
        async move {
            let client = database(&home).await;
            let row = (client.query_one("SELECT count(*) FROM log_nodes WHERE url = $1", &[&url]))
                .await
                .expect("counted");
            row.get::<_, i64>(0)
        }
    };
    // The standby, asking for the lease each second, and announcing itself as it asks.
    let (first_url, second_url) = (first.server.url(), second.server.url());
    assert_eq!(announced(second_url.clone()).await, 1);
    second.stop().await;
    assert_eq!(announced(second_url).await, 0, "taken back");
    lists(&first.server, serde_json::json!([first_url])).await;
    first.stop().await;
    assert_eq!(announced(first_url).await, 0, "the leader's too");
}
