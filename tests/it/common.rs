//! Starts a server on 127.0.0.1:0 and builds SDK clients for it.
//!
//! With `ORDERLY_TEST_STORAGE=postgres` (and `ORDERLY_TEST_POSTGRES` naming a server whose
//! user may create databases), every server a test starts without a data directory keeps its
//! log and snapshots in a fresh PostgreSQL database instead (`--storage`), leading it.
//! `postgres-standby` does the same with a leader started first on the database, so the
//! test's server is a standby that passes every request on to it; with `ORDERLY_TEST_SHARDS=N`
//! the database is cut into N shards. `shards` keeps it in memory as four shards, each with an
//! engine of its own, so a test's queues and topics land in different shards and what crosses
//! them is carried between engines.

use std::net::SocketAddr;

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_smithy_http_client::tls;
use orderly::app::App;
use orderly::config::Config;

pub struct Server {
    pub addr: SocketAddr,
    pub sqs: aws_sdk_sqs::Client,
    pub sns: aws_sdk_sns::Client,
    /// The other nodes of this server's database, each leading its share of the shards
    /// (`postgres-spread`): their URLs. Empty otherwise.
    pub others: Vec<String>,
}

impl Server {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn queue_url(&self, name: &str) -> String {
        format!("http://{}/000000000000/{name}", self.addr)
    }
}

/// The server's answer to a GET of `path`, read as JSON.
pub async fn get_json(server: &Server, path: &str) -> serde_json::Value {
    let text = get_text(&format!("{}{path}", server.url())).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

/// The body of a GET of `url`.
pub async fn get_text(url: &str) -> String {
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

/// Where the queues' figures are: the server itself, or, when it is a standby, the leader it
/// passes requests on to (a standby's metrics are its own, with no queues).
pub async fn leading_node(server: &Server) -> String {
    let cluster = get_json(server, "/_orderly/cluster").await;
    match cluster["role"].as_str() {
        Some("standby") if server.others.is_empty() => {
            cluster["leader"].as_str().unwrap().to_string()
        }
        _ => server.url(),
    }
}

/// Every node whose figures hold some of the server's queues: the leader (`leading_node`), or
/// each node of a database whose shards are spread over several.
pub async fn leading_nodes(server: &Server) -> Vec<String> {
    if server.others.is_empty() {
        return vec![leading_node(server).await];
    }
    let mut nodes = vec![server.url()];
    nodes.extend(server.others.iter().cloned());
    nodes
}

/// Waits, with a bound, until no copy a publish made (or message dead-lettered or moved) waits
/// to cross into another shard's queue on the node that holds them: what a test reads next
/// sees every copy, as a reader on AWS would a moment after a publish. Real time: the
/// carriers run on their own. At once with one shard, where nothing crosses.
pub async fn carried(server: &Server) {
    // Until one pass finds every node with nothing to carry: a node found empty may be handed
    // more while another is waited for (a copy dead-lettered on, a second hop).
    let nodes = leading_nodes(server).await;
    loop {
        let mut waited = false;
        for node in &nodes {
            waited |= carried_at(node).await;
        }
        if !waited {
            return;
        }
    }
}

/// As `carried`, on the node at `node` (its URL); whether it had anything to carry.
pub async fn carried_at(node: &str) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut waited = false;
    loop {
        let text = reqwest::get(format!("{node}/_orderly/cluster"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let cluster: serde_json::Value = serde_json::from_str(&text).unwrap();
        // Nothing waiting to cross, nor a copy's fate to tell its topic's node.
        let untold = cluster["fatesUntold"].as_u64().unwrap_or(0);
        if cluster["relay"] == serde_json::json!([]) && untold == 0 {
            return waited;
        }
        waited = true;
        assert!(
            std::time::Instant::now() < deadline,
            "copies still crossing shards after 10 s: {cluster}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Waits, with a bound, until `n` long polls are parked on the node that holds the queues
/// (its `orderly_long_polls_waiting` gauge): the event a test waits for before it acts on a
/// poll, rather than guessing how long a request takes to arrive. Real time between reads:
/// the request reaches the server on its own time.
pub async fn long_polls_parked(server: &Server, n: u64) {
    let nodes = leading_nodes(server).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut parked = 0;
        for node in &nodes {
            let text = reqwest::get(format!("{node}/metrics"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            parked += text
                .lines()
                .find_map(|line| line.strip_prefix("orderly_long_polls_waiting "))
                .and_then(|value| value.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
        if parked >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{parked} long polls parked, not {n}, after 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Waits, with a bound, until `n` subscriptions show a last delivery error in
/// `GET /_orderly/subscriptions` (a refused or failed attempt, confirmations' too); answers
/// the errors. Real time: attempts are real HTTP requests, made by the server's worker.
pub async fn delivery_errors(server: &Server, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let listing = get_json(server, "/_orderly/subscriptions").await;
        let errors: Vec<String> = listing["subscriptions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["lastError"]["error"].as_str().map(String::from))
            .collect();
        if errors.len() >= n {
            return errors;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} delivery errors, not {n}: {listing}",
            errors.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Starts a server inside the current test's runtime; it stops when the test ends.
pub async fn start() -> Server {
    start_with(Config::ephemeral()).await
}

/// A server whose clock only moves when the test says so.
pub async fn start_with_manual_clock() -> (Server, std::sync::Arc<orderly::clock::ManualClock>) {
    let clock = manual_clock();
    (
        start_with_clock(Config::ephemeral(), clock.clone()).await,
        clock,
    )
}

pub fn manual_clock() -> std::sync::Arc<orderly::clock::ManualClock> {
    std::sync::Arc::new(orderly::clock::ManualClock::new(
        orderly::engine::Timestamp(1_700_000_000_000),
    ))
}

/// A server with these settings and a clock the test moves.
pub async fn start_with_clock(
    config: Config,
    clock: std::sync::Arc<orderly::clock::ManualClock>,
) -> Server {
    let (config, others) = on_test_storage(config, Some(clock.clone())).await;
    let app = App::bind_with_clock(&config, clock).await.expect("bind");
    spread_over(serve(app), others, &config).await
}

pub async fn start_with(config: Config) -> Server {
    let (config, others) = on_test_storage(config, None).await;
    let app = App::bind(&config).await.expect("bind");
    spread_over(serve(app), others, &config).await
}

/// The server, once it and the `others` nodes of its database lead every shard between them,
/// each its share. With `--auth`, Orderly's own endpoints are asked with the key the suite's
/// clients sign with.
async fn spread_over(mut server: Server, others: Others, config: &Config) -> Server {
    if others.is_empty() {
        return server;
    }
    for url in others {
        server
            .others
            .push(url.await.expect("the other node started"));
    }
    let mut nodes = vec![server.url()];
    nodes.extend(server.others.iter().cloned());
    let (shards, auth) = (config.shards as usize, config.auth.is_some());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let mut led: Vec<Vec<u64>> = Vec::new();
        for node in &nodes {
            let mut asked = reqwest::Client::new().get(format!("{node}/_orderly/cluster"));
            if auth {
                asked = asked.basic_auth("AKIDORDERLY", Some("secret"));
            }
            let answer = asked.send().await.unwrap();
            // With a small `--max-connections`, the other nodes' first connections hold a
            // client's slot until their first request shows whose they are: asked again.
            let at_limit = answer.headers().contains_key("x-orderly-not-served");
            let text = answer.text().await.unwrap();
            if at_limit {
                led.push(Vec::new());
                continue;
            }
            let cluster: serde_json::Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
            led.push(
                (cluster["led"].as_array().into_iter().flatten())
                    .filter_map(serde_json::Value::as_u64)
                    .collect(),
            );
        }
        let mut all: Vec<u64> = led.iter().flatten().copied().collect();
        all.sort_unstable();
        let even = shards / nodes.len();
        let shared = led.iter().all(|l| l.len() == even || l.len() == even + 1);
        if shared && all == (0..shards as u64).collect::<Vec<_>>() {
            return server;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the nodes never led their shares: {led:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A server in memory whose queues and topics are cut into `count` shards, whatever this run's
/// storage.
pub async fn start_sharded(count: u32) -> Server {
    let mut config = Config::ephemeral();
    config.shards = count;
    serve(App::bind(&config).await.expect("bind"))
}

/// As `start_sharded`, with these settings and a clock the test moves.
pub async fn start_sharded_with_clock(
    mut config: Config,
    count: u32,
    clock: std::sync::Arc<orderly::clock::ManualClock>,
) -> Server {
    config.shards = count;
    serve(App::bind_with_clock(&config, clock).await.expect("bind"))
}

/// How this run keeps servers' state in PostgreSQL, if it does (`ORDERLY_TEST_STORAGE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestStorage {
    /// `postgres`: the test's server leading the log in the database.
    Log,
    /// `postgres-standby`: the engine's log, the test's server a standby of another.
    Standby,
    /// `shards`: in memory, four shards.
    Shards,
    /// `postgres-spread`: the engine's log, the test's server one of three nodes of the
    /// database, each leading its share of the shards and passing the others' requests on.
    Spread,
}

/// How many shards this run's servers are cut into: four for `shards`, else
/// `ORDERLY_TEST_SHARDS` (a database made with that many) or 1.
pub fn test_shards() -> u32 {
    match test_storage() {
        Some(TestStorage::Shards) => 4,
        _ => std::env::var("ORDERLY_TEST_SHARDS")
            .ok()
            .and_then(|count| count.parse().ok())
            .unwrap_or(1),
    }
}

pub fn test_storage() -> Option<TestStorage> {
    match std::env::var("ORDERLY_TEST_STORAGE").ok()?.as_str() {
        "postgres" => Some(TestStorage::Log),
        "postgres-standby" => Some(TestStorage::Standby),
        "shards" => Some(TestStorage::Shards),
        "postgres-spread" => Some(TestStorage::Spread),
        _ => None,
    }
}

/// The URLs of a test server's other nodes, each told once that node listens.
type Others = Vec<tokio::sync::oneshot::Receiver<String>>;

/// An ephemeral server's settings, moved to a fresh PostgreSQL database when this run asks,
/// and the URLs of the other nodes started on it, which serve it until the test ends (all on
/// `clock`, if given): for a standby, a leader; for a spread database, two nodes leading their
/// shares, as the server will.
async fn on_test_storage(
    mut config: Config,
    clock: Option<std::sync::Arc<orderly::clock::ManualClock>>,
) -> (Config, Others) {
    let Some(storage) = test_storage() else {
        return (config, Vec::new());
    };
    if !config.ephemeral {
        return (config, Vec::new());
    }
    if config.shards == 1 {
        config.shards = test_shards();
    }
    if storage == TestStorage::Shards {
        return (config, Vec::new());
    }
    let url = fresh_database()
        .await
        .expect("ORDERLY_TEST_STORAGE=postgres needs ORDERLY_TEST_POSTGRES (scripts/postgres-cluster start)");
    config.ephemeral = false;
    config.storage = Some(url);
    config.spread_shards = storage == TestStorage::Spread;
    // Nodes leading their shares keep the upper half of the shards in a database of their own,
    // on another server where one is named.
    if config.spread_shards && config.shards > 1 {
        let elsewhere = orderly::persist::database::test_database::fresh_database_elsewhere()
            .await
            .expect("a second database");
        config.shard_databases = vec![orderly::persist::database::shard_map::Placed {
            first: config.shards / 2,
            last: config.shards - 1,
            url: elsewhere,
        }];
    }
    let bind = move |config: Config| async move {
        match clock {
            Some(clock) => App::bind_with_clock(&config, clock).await,
            None => App::bind(&config).await,
        }
    };
    let mut others = Vec::new();
    match storage {
        TestStorage::Standby => {
            let leader = bind(config.clone()).await.expect("the leader");
            tokio::spawn(leader.serve(std::future::pending()));
        }
        // Started together with the test's server, as nodes started at once agree on their
        // shares without starting over.
        TestStorage::Spread => {
            for _ in 0..2 {
                let (told, url) = tokio::sync::oneshot::channel();
                let (config, bind) = (config.clone(), bind.clone());
                tokio::spawn(async move {
                    let node = bind(config).await.expect("another node of the database");
                    let _ = told.send(format!("http://{}", node.local_addr().expect("addr")));
                    node.serve(std::future::pending()).await
                });
                others.push(url);
            }
        }
        _ => {}
    }
    (config, others)
}

pub use orderly::persist::database::test_database::fresh_database;

/// A server the test stops (`Stoppable::stop`), to start another on the same data directory.
pub struct Stoppable {
    pub server: Server,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Stoppable {
    pub async fn start(app: App) -> Stoppable {
        let addr = app.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(app.serve(async {
            let _ = stopped.await;
        }));
        Stoppable {
            server: Server {
                addr,
                sqs: client(addr),
                sns: sns_client(addr),
                others: Vec::new(),
            },
            stop,
            serving,
        }
    }

    /// Stops serving and waits until the data directory is closed.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.serving
            .await
            .expect("served")
            .expect("stopped cleanly");
    }
}

/// Settings that keep state in `dir`.
pub fn durable(dir: &std::path::Path) -> Config {
    let mut config = Config::ephemeral();
    config.ephemeral = false;
    config.data_dir = dir.to_path_buf();
    config
}

fn serve(app: App) -> Server {
    let addr = app.local_addr().expect("addr");
    tokio::spawn(app.serve(std::future::pending()));
    Server {
        addr,
        sqs: client(addr),
        sns: sns_client(addr),
        others: Vec::new(),
    }
}

pub fn http_client() -> aws_sdk_sqs::config::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

pub fn client(addr: SocketAddr) -> aws_sdk_sqs::Client {
    client_as(addr, "AKIDORDERLY", "secret")
}

/// An SQS client signing with this access key and secret.
pub fn client_as(addr: SocketAddr, key: &str, secret: &str) -> aws_sdk_sqs::Client {
    sqs_in(addr, "us-east-1", key, secret)
}

/// An SQS client of this region, signing with this access key and secret.
pub fn sqs_in(addr: SocketAddr, region: &str, key: &str, secret: &str) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_string()))
        .endpoint_url(format!("http://{addr}"))
        .credentials_provider(Credentials::new(key, secret, None, None, "test"))
        .http_client(http_client())
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

pub fn sns_client(addr: SocketAddr) -> aws_sdk_sns::Client {
    sns_in(addr, "us-east-1", "AKIDORDERLY")
}

/// An SNS client of this region, signing with this access key.
pub fn sns_in(addr: SocketAddr, region: &str, key: &str) -> aws_sdk_sns::Client {
    let config = aws_sdk_sns::Config::builder()
        .behavior_version(aws_sdk_sns::config::BehaviorVersion::latest())
        .region(aws_sdk_sns::config::Region::new(region.to_string()))
        .endpoint_url(format!("http://{addr}"))
        .credentials_provider(aws_sdk_sns::config::Credentials::new(
            key, "secret", None, None, "test",
        ))
        .http_client(http_client())
        .build();
    aws_sdk_sns::Client::from_conf(config)
}

/// Creates a queue with the given attributes and returns its URL.
pub async fn create_queue(server: &Server, name: &str, attributes: &[(&str, &str)]) -> String {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let mut req = server.sqs.create_queue().queue_name(name);
    for (k, v) in attributes {
        req = req.attributes(A::from(*k), *v);
    }
    req.send()
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e:?}"))
        .queue_url
        .expect("url")
}

/// Sends `count` messages to a standard queue, bodies `m0`, `m1`, ...
pub async fn send_numbered(server: &Server, url: &str, count: usize) {
    for i in 0..count {
        server
            .sqs
            .send_message()
            .queue_url(url)
            .message_body(format!("m{i}"))
            .send()
            .await
            .unwrap();
    }
}

pub async fn fifo_queue(server: &Server, name: &str, extra: &[(&str, &str)]) -> String {
    let mut attributes = vec![("FifoQueue", "true")];
    attributes.extend_from_slice(extra);
    create_queue(server, name, &attributes).await
}

/// A redrive policy JSON naming `dlq` in the default account and region.
pub fn redrive_to(dlq: &str, max_receive_count: u32) -> String {
    format!(
        r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{dlq}","maxReceiveCount":"{max_receive_count}"}}"#
    )
}

/// A SigV4 Authorization header of the shape SDKs send for `service`; the signature is not
/// checked (Orderly checks signatures only with --auth).
pub fn signed(service: &str) -> String {
    format!("AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=0")
}

/// Posts a signed Query-protocol request and returns (status, body).
pub async fn query(server: &Server, path: &str, params: &[(&str, &str)]) -> (u16, String) {
    let body: String = form_encode(params);
    let sns = params.contains(&("Version", "2010-03-31"));
    let service = if sns { "sns" } else { "sqs" };
    let response = reqwest::Client::new()
        .post(format!("{}{path}", server.url()))
        .header(
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-8",
        )
        .header("authorization", signed(service))
        .body(body)
        .send()
        .await
        .expect("query request");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

pub fn form_encode(params: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (k, v) in params {
        if !out.is_empty() {
            out.push('&');
        }
        out.push_str(&encode(k));
        out.push('=');
        out.push_str(&encode(v));
    }
    out
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The text of the first `<tag>` element in an XML document.
pub fn xml_text<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(&xml[start..end])
}

// ---- SNS helpers ----

use aws_sdk_sqs::types::MessageSystemAttributeName as S;

/// A standard topic's ARN.
pub async fn standard_topic(server: &Server, name: &str) -> String {
    let made = server.sns.create_topic().name(name).send().await.unwrap();
    made.topic_arn.unwrap()
}

pub async fn fifo_topic(server: &Server, name: &str) -> String {
    server
        .sns
        .create_topic()
        .name(name)
        .attributes("FifoTopic", "true")
        .attributes("ContentBasedDeduplication", "true")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap()
}

pub async fn subscribe(server: &Server, topic: &str, queue: &str, raw: bool) -> String {
    let mut req = server
        .sns
        .subscribe()
        .topic_arn(topic)
        .protocol("sqs")
        .endpoint(format!("arn:aws:sqs:us-east-1:000000000000:{queue}"));
    if raw {
        req = req.attributes("RawMessageDelivery", "true");
    }
    req.send().await.unwrap().subscription_arn.unwrap()
}

/// Drains a queue once no copy waits to cross into it from another shard: (body, group id) in
/// delivery order, deleting as it goes.
pub async fn drain(server: &Server, url: &str) -> Vec<(String, Option<String>)> {
    carried(server).await;
    let mut out = Vec::new();
    loop {
        let got = server
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_system_attribute_names(S::All)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            return out;
        }
        for m in messages {
            let group = m
                .attributes()
                .and_then(|a| a.get(&S::MessageGroupId))
                .cloned();
            out.push((m.body().unwrap().to_string(), group));
            server
                .sqs
                .delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
}

/// Subscribes a queue of this account with the given subscription attributes.
pub async fn subscribe_with(
    server: &Server,
    topic: &str,
    queue: &str,
    attributes: &[(&str, &str)],
) -> Result<String, aws_sdk_sns::error::SdkError<aws_sdk_sns::operation::subscribe::SubscribeError>>
{
    let mut req = server
        .sns
        .subscribe()
        .topic_arn(topic)
        .protocol("sqs")
        .endpoint(format!("arn:aws:sqs:us-east-1:000000000000:{queue}"));
    for (k, v) in attributes {
        req = req.attributes(*k, *v);
    }
    Ok(req.send().await?.subscription_arn.unwrap_or_default())
}

/// GetTopicAttributes as a map.
pub async fn topic_attributes(
    server: &Server,
    topic: &str,
) -> std::collections::HashMap<String, String> {
    server
        .sns
        .get_topic_attributes()
        .topic_arn(topic)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()
}

/// A `String` SNS message attribute.
pub fn string_attribute(value: &str) -> aws_sdk_sns::types::MessageAttributeValue {
    aws_sdk_sns::types::MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .unwrap()
}

/// The keys of a JSON object, in order.
pub fn json_keys(value: &serde_json::Value) -> Vec<&str> {
    value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

pub async fn subscription_attributes(
    server: &Server,
    arn: &str,
) -> std::collections::HashMap<String, String> {
    server
        .sns
        .get_subscription_attributes()
        .subscription_arn(arn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()
}

/// Every attribute of a queue.
pub async fn queue_attributes(
    server: &Server,
    url: &str,
) -> std::collections::HashMap<aws_sdk_sqs::types::QueueAttributeName, String> {
    server
        .sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()
}

/// What a load under failure must leave behind (bodies `g{group}-{index:05}`): each message
/// left once, none whose delete was acknowledged, every acknowledged send either left or
/// deleted (or its delete unanswered), and each group's messages in order.
pub fn assert_nothing_lost(
    left: &[String],
    sent: &[String],
    deleted: &std::collections::HashSet<String>,
    unsure_deletes: &std::collections::HashSet<String>,
    groups: usize,
) {
    let left_set: std::collections::HashSet<&String> = left.iter().collect();
    assert_eq!(left_set.len(), left.len(), "a message twice: {left:?}");
    for body in left {
        assert!(!deleted.contains(body), "{body} was deleted, and came back");
    }
    for body in sent {
        assert!(
            deleted.contains(body) || unsure_deletes.contains(body) || left_set.contains(body),
            "{body} was acknowledged, and is lost"
        );
    }
    for group in 0..groups {
        let prefix = format!("g{group}-");
        let order: Vec<&String> = left.iter().filter(|b| b.starts_with(&prefix)).collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "group g{group} out of order");
    }
}

/// `POST /_orderly/clock` of a server with `--clock manual`, moving it an hour on: what was in
/// flight becomes visible again. Panics unless it moved.
pub async fn advance_an_hour(server: &Server) {
    let moved = reqwest::Client::new()
        .post(format!("{}/_orderly/clock", server.url()))
        .body(r#"{"advance": "1h"}"#)
        .send()
        .await
        .expect("the clock answers")
        .status();
    assert!(moved.is_success(), "{moved}");
}
