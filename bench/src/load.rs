//! The scenarios: batched and single sends, the producer/consumer pipeline (optionally paced),
//! and receive throughput under a large backlog.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::report::{percentile, Row};
use crate::server::{own_cpu_micros, ServerProcess};
use crate::Args;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// In memory (`--ephemeral`).
    Orderly,
    /// Durable, as by default: a fresh data directory, fsync before every answer.
    Durable,
    Null,
    /// Another emulator, by its index in `--peer`.
    Peer(usize),
}

impl System {
    pub(crate) fn name(self, args: &Args) -> String {
        match self {
            System::Peer(i) => peer(args, i).0.to_string(),
            own => own.label().into(),
        }
    }

    /// The name of one of Orderly's own systems (a peer's comes from `--peer`).
    pub fn label(self) -> &'static str {
        match self {
            System::Orderly => "orderly --ephemeral",
            System::Durable => "orderly (durable, fsync always)",
            System::Null => "null handler",
            System::Peer(_) => "peer",
        }
    }
}

/// The `i`th `--peer NAME=COMMAND` as (name, command).
fn peer(args: &Args, i: usize) -> (&str, &str) {
    args.peers[i]
        .split_once('=')
        .unwrap_or(("peer", &args.peers[i]))
}

/// Rows are told apart by system name: a peer named like another, or like one of Orderly's
/// own systems, would have its rows taken for theirs.
pub fn check_peer_names(args: &Args) -> Result<(), String> {
    let own = [System::Orderly, System::Durable, System::Null].map(System::label);
    let mut seen: Vec<&str> = Vec::new();
    for i in 0..args.peers.len() {
        let name = peer(args, i).0;
        if own.contains(&name) || seen.contains(&name) {
            return Err(format!(
                "two systems named {name:?}: give each --peer a NAME of its own"
            ));
        }
        seen.push(name);
    }
    Ok(())
}

/// A row for a scenario that could not run on this system.
pub(crate) fn failed_row(args: &Args, scenario: &str, system: System, why: String) -> Row {
    Row {
        scenario: scenario.into(),
        system: system.name(args),
        errors: 1,
        note: format!("did not run: {why}"),
        ..Default::default()
    }
}

/// A fresh data directory for a durable run, removed when the scenario ends.
fn data_dir() -> std::path::PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "orderly-bench-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

async fn start_durable(args: &Args, dir: &std::path::Path) -> ServerProcess {
    let dir = dir.to_str().expect("utf-8 path");
    ServerProcess::start(&args.orderly, &["--bind", "127.0.0.1:0", "--data-dir", dir]).await
}

pub(crate) async fn start(args: &Args, system: System) -> Result<ServerProcess, String> {
    Ok(match system {
        System::Orderly => {
            ServerProcess::start(&args.orderly, &["--bind", "127.0.0.1:0", "--ephemeral"]).await
        }
        System::Durable => {
            let dir = data_dir();
            let mut server = start_durable(args, &dir).await;
            server.data_dir = Some(dir);
            server
        }
        System::Null => {
            let me = std::env::current_exe().expect("own path");
            ServerProcess::start(
                me.to_str().expect("utf-8 path"),
                &["--null-server", "127.0.0.1:0"],
            )
            .await
        }
        System::Peer(i) => {
            let mut server = ServerProcess::start_peer(peer(args, i).1).await?;
            server.database = args.database_pid;
            wait_until_serving(&mut server).await?;
            server
        }
    })
}

/// The database's CPU used since `before` was read, if the server has one.
fn database_cpu_since(server: &ServerProcess, before: Option<u64>) -> Option<u64> {
    Some(server.database_cpu_micros()?.saturating_sub(before?))
}

/// Polls ListQueues until the server answers it (peers print no common "listening" line);
/// a peer whose command ended (a typo in it, a server that failed to start) is not waited for.
async fn wait_until_serving(server: &mut ServerProcess) -> Result<(), String> {
    let client = http_client();
    let deadline = Instant::now() + Duration::from_secs(120);
    let endpoint = server.endpoint.clone();
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(format!(
                "the peer for {endpoint} ended ({status}) before it served"
            ));
        }
        match call(&client, &endpoint, "ListQueues", "{}".into()).await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(format!("{endpoint} not serving after 120 s: {e}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

pub(crate) fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(256)
        .build()
        .expect("http client")
}

/// Posts one JSON-protocol call; returns the body of a 200 response.
pub(crate) async fn call(
    client: &reqwest::Client,
    endpoint: &str,
    action: &str,
    body: String,
) -> Result<String, String> {
    let request = client
        .post(endpoint)
        .header("x-amz-target", format!("AmazonSQS.{action}"))
        .header("content-type", "application/x-amz-json-1.0")
        .header("authorization", authorization("sqs"))
        .body(body);
    send(request).await
}

/// Sends a request; the body of a 2xx response, or the status and body as the error.
async fn send(request: reqwest::RequestBuilder) -> Result<String, String> {
    let response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().await.map_err(|e| e.to_string())?;
    if status.is_success() {
        Ok(text)
    } else {
        Err(format!("{status}: {text}"))
    }
}

/// A SigV4-shaped Authorization header. Signatures are not checked by emulators, but some
/// (moto) route requests by the service named in the credential scope.
fn authorization(service: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential=bench/20260101/us-east-1/{service}/aws4_request, SignedHeaders=host;x-amz-date, Signature=0000"
    )
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

pub(crate) async fn create_fifo_queue(
    client: &reqwest::Client,
    endpoint: &str,
    name: &str,
) -> String {
    let body = format!(r#"{{"QueueName":"{name}","Attributes":{{"FifoQueue":"true"}}}}"#);
    let text = call(client, endpoint, "CreateQueue", body)
        .await
        .expect("create queue");
    let v: Value = serde_json::from_str(&text).expect("json");
    v["QueueUrl"].as_str().expect("queue url").to_string()
}

/// Deletes received messages (`ReceiveMessage`'s `Messages`) in one batch; an entry listed as
/// failed is an error.
pub(crate) async fn delete_received(
    client: &reqwest::Client,
    endpoint: &str,
    queue_url: &str,
    messages: &[Value],
) -> Result<(), String> {
    let entries: Vec<String> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let handle = m["ReceiptHandle"].as_str().unwrap_or("");
            format!(r#"{{"Id":"d{i}","ReceiptHandle":"{handle}"}}"#)
        })
        .collect();
    let delete = format!(
        r#"{{"QueueUrl":"{queue_url}","Entries":[{}]}}"#,
        entries.join(",")
    );
    let text = call(client, endpoint, "DeleteMessageBatch", delete).await?;
    let answer: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    match answer["Failed"]
        .as_array()
        .filter(|failed| !failed.is_empty())
    {
        Some(failed) => Err(format!("DeleteMessageBatch failed for {failed:?}")),
        None => Ok(()),
    }
}

/// A message body: `group:seq:sent_micros:` padded to the requested size.
fn body(group: usize, seq: u64, size: usize) -> String {
    let mut b = format!("{group}:{seq}:{}:", now_micros());
    while b.len() < size {
        b.push('x');
    }
    b
}

/// Sends one batch of `groups.len()` entries (or a single message); returns messages accepted.
pub(crate) async fn send_batch(
    client: &reqwest::Client,
    endpoint: &str,
    queue_url: &str,
    entries: &[(usize, u64)],
    size: usize,
    batch: bool,
) -> Result<u64, String> {
    if !batch {
        let (g, seq) = entries[0];
        let req = format!(
            r#"{{"QueueUrl":"{queue_url}","MessageBody":"{}","MessageGroupId":"g{g}","MessageDeduplicationId":"{g}-{seq}"}}"#,
            body(g, seq, size)
        );
        call(client, endpoint, "SendMessage", req).await?;
        return Ok(1);
    }
    let mut req = format!(r#"{{"QueueUrl":"{queue_url}","Entries":["#);
    for (i, (g, seq)) in entries.iter().enumerate() {
        if i > 0 {
            req.push(',');
        }
        req.push_str(&format!(
            r#"{{"Id":"e{i}","MessageBody":"{}","MessageGroupId":"g{g}","MessageDeduplicationId":"{g}-{seq}"}}"#,
            body(*g, *seq, size)
        ));
    }
    req.push_str("]}");
    let text = call(client, endpoint, "SendMessageBatch", req).await?;
    // Some servers list an empty "Failed" array; only entries in it are failures.
    if text.contains("\"Failed\"") {
        let failed = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["Failed"].as_array().map(|a| !a.is_empty()))
            .unwrap_or(true);
        if failed {
            return Err(format!("partial failure: {text}"));
        }
    }
    Ok(entries.len() as u64)
}

struct ProducerPlan {
    /// The groups this producer owns (so per-group sequence numbers follow send order).
    groups: Vec<usize>,
    batch: bool,
    /// Messages per second for this producer, if paced.
    rate: Option<f64>,
    /// This producer's place among `of` paced producers: each starts its own share of one
    /// interval later, so that together they send evenly rather than all at the same moment.
    slot: (usize, usize),
    /// Stop after this many messages.
    limit: Option<u64>,
}

struct ProducerResult {
    sent: u64,
    errors: u64,
    latencies: Vec<u64>,
}

async fn produce(
    client: reqwest::Client,
    endpoint: String,
    queue_url: String,
    plan: ProducerPlan,
    size: usize,
    stop: Arc<AtomicBool>,
) -> ProducerResult {
    let mut seqs = vec![0u64; plan.groups.len()];
    let mut next = 0usize;
    let per_request = if plan.batch { 10 } else { 1 };
    let mut result = ProducerResult {
        sent: 0,
        errors: 0,
        latencies: Vec::new(),
    };
    let interval = plan
        .rate
        .map(|r| Duration::from_secs_f64(per_request as f64 / r));
    let started = Instant::now();
    let (slot, of) = plan.slot;
    while !stop.load(Ordering::Relaxed) && plan.limit.is_none_or(|l| result.sent < l) {
        if let Some(step) = interval {
            let request = (result.sent / per_request) as f64 + slot as f64 / of as f64;
            let due = started + step.mul_f64(request);
            tokio::time::sleep_until(due.into()).await;
        }
        let entries: Vec<(usize, u64)> = (0..per_request)
            .map(|_| {
                let i = next % plan.groups.len();
                next += 1;
                seqs[i] += 1;
                (plan.groups[i], seqs[i])
            })
            .collect();
        let t0 = Instant::now();
        match send_batch(&client, &endpoint, &queue_url, &entries, size, plan.batch).await {
            Ok(n) => {
                result.sent += n;
                result.latencies.push(t0.elapsed().as_micros() as u64);
            }
            Err(e) => {
                result.errors += 1;
                if result.errors < 3 {
                    eprintln!("send error: {e}");
                }
                // A failed request leaves gaps in sequence numbers; give those back.
                for (g, _) in &entries {
                    if let Some(i) = plan.groups.iter().position(|x| x == g) {
                        seqs[i] -= 1;
                    }
                }
            }
        }
    }
    result
}

/// Spreads `groups` over `producers`, group g going to producer g % producers.
fn owned_groups(producer: usize, producers: usize, groups: usize) -> Vec<usize> {
    (producer..groups).step_by(producers).collect()
}

/// Starts one producer task per connection, each owning its share of `groups`; producer p
/// sends to queue p mod the number of `queue_urls`.
fn spawn_producers(
    args: &Args,
    client: &reqwest::Client,
    endpoint: &str,
    queue_urls: &[&str],
    groups: usize,
    pace: (bool, Option<f64>, Option<u64>),
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<ProducerResult>> {
    let (batch, rate, limit) = pace;
    (0..args.producers)
        .map(|p| {
            let plan = ProducerPlan {
                groups: owned_groups(p, args.producers, groups),
                batch,
                rate,
                slot: (p, args.producers),
                limit,
            };
            tokio::spawn(produce(
                client.clone(),
                endpoint.to_string(),
                queue_urls[p % queue_urls.len()].to_string(),
                plan,
                args.body_size,
                stop.clone(),
            ))
        })
        .collect()
}

pub async fn run_send(args: &Args, system: System, batch: bool) -> Row {
    let kind = if batch {
        "send (batches of 10)"
    } else {
        "send (single)"
    };
    let scenario = match args.share_queues {
        1 => kind.to_string(),
        n => format!("{kind} over {n} queues"),
    };
    let server = match start(args, system).await {
        Ok(server) => server,
        Err(why) => return failed_row(args, &scenario, system, why),
    };
    let client = http_client();
    let mut queue_urls = Vec::new();
    for q in 0..args.share_queues {
        let name = match q {
            0 => "bench.fifo".to_string(),
            q => format!("bench-{q}.fifo"),
        };
        queue_urls.push(create_fifo_queue(&client, &server.endpoint, &name).await);
    }
    let queue_urls: Vec<&str> = queue_urls.iter().map(String::as_str).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let cpu_before = server.cpu_micros();
    let database_cpu_before = server.database_cpu_micros();
    let client_cpu_before = own_cpu_micros();
    let started = Instant::now();
    let tasks = spawn_producers(
        args,
        &client,
        &server.endpoint,
        &queue_urls,
        args.groups,
        (batch, None, None),
        &stop,
    );
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    stop.store(true, Ordering::Relaxed);
    let mut row = Row {
        scenario,
        system: system.name(args),
        ..Default::default()
    };
    let mut latencies = Vec::new();
    for t in tasks {
        let r = t.await.expect("producer");
        row.messages += r.sent;
        row.errors += r.errors;
        latencies.extend(r.latencies);
    }
    row.seconds = started.elapsed().as_secs_f64();
    row.server_cpu_us = server.cpu_micros() - cpu_before;
    row.database_cpu_us = database_cpu_since(&server, database_cpu_before);
    row.client_cpu_us = own_cpu_micros() - client_cpu_before;
    latencies.sort_unstable();
    row.p50_us = percentile(&latencies, 0.5);
    row.p99_us = percentile(&latencies, 0.99);
    row.note = "latency per request".into();
    row
}

pub(crate) struct Tally {
    pub(crate) received: AtomicU64,
    /// ReceiveMessage calls answered, empty ones included.
    pub(crate) receives: AtomicU64,
    /// When the last expected message arrived (consumers may still sit in a long poll after).
    pub(crate) finished_at: Mutex<Option<Instant>>,
    pub(crate) violations: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) last_seq: Vec<Mutex<u64>>,
    pub(crate) latencies: Mutex<Vec<u64>>,
}

impl Tally {
    /// A tally for messages spread over `groups` groups (numbered from 0).
    pub(crate) fn new(groups: usize) -> Tally {
        Tally {
            received: AtomicU64::new(0),
            receives: AtomicU64::new(0),
            finished_at: Mutex::new(None),
            violations: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            last_seq: (0..groups).map(|_| Mutex::new(0)).collect(),
            latencies: Mutex::new(Vec::new()),
        }
    }
}

/// Receives, checks per-group order, deletes; until stopped and everything sent has arrived.
pub(crate) async fn consume(
    client: reqwest::Client,
    endpoint: String,
    (queue_url, wait_seconds): (String, u64),
    tally: Arc<Tally>,
    sent: Arc<AtomicU64>,
    producers_done: Arc<AtomicBool>,
    deadline: Instant,
) {
    let receive = format!(
        r#"{{"QueueUrl":"{queue_url}","MaxNumberOfMessages":10,"WaitTimeSeconds":{wait_seconds}}}"#
    );
    let mut latencies = Vec::new();
    loop {
        let done = producers_done.load(Ordering::SeqCst);
        if (done && tally.received.load(Ordering::Relaxed) >= sent.load(Ordering::Relaxed))
            || Instant::now() > deadline
        {
            break;
        }
        let text = match call(&client, &endpoint, "ReceiveMessage", receive.clone()).await {
            Ok(t) => t,
            Err(_) => {
                tally.errors.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        tally.receives.fetch_add(1, Ordering::Relaxed);
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let Some(messages) = v["Messages"].as_array() else {
            continue;
        };
        let now = now_micros();
        let mut delete = format!(r#"{{"QueueUrl":"{queue_url}","Entries":["#);
        for (i, m) in messages.iter().enumerate() {
            let body = m["Body"].as_str().unwrap_or("");
            let mut parts = body.split(':');
            let group: usize = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
            let seq: u64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
            let sent_at: u64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(now);
            if let Some(slot) = tally.last_seq.get(group) {
                let mut last = slot.lock().expect("lock");
                if seq != *last + 1 {
                    tally.violations.fetch_add(1, Ordering::Relaxed);
                }
                *last = (*last).max(seq);
            }
            latencies.push(now.saturating_sub(sent_at));
            if i > 0 {
                delete.push(',');
            }
            delete.push_str(&format!(
                r#"{{"Id":"d{i}","ReceiptHandle":"{}"}}"#,
                m["ReceiptHandle"].as_str().unwrap_or("")
            ));
        }
        delete.push_str("]}");
        // Kept as they come: a consumer may be stopped at the end of a run.
        (tally.latencies.lock().expect("lock")).append(&mut latencies);
        let total = tally
            .received
            .fetch_add(messages.len() as u64, Ordering::SeqCst)
            + messages.len() as u64;
        if producers_done.load(Ordering::SeqCst) && total >= sent.load(Ordering::Relaxed) {
            tally
                .finished_at
                .lock()
                .expect("lock")
                .get_or_insert_with(Instant::now);
        }
        if call(&client, &endpoint, "DeleteMessageBatch", delete)
            .await
            .is_err()
        {
            tally.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub async fn run_pipeline(args: &Args, system: System, rate: Option<u64>) -> Row {
    let scenario = match rate {
        Some(r) => format!("pipeline paced at {r} msg/s"),
        None => "pipeline".into(),
    };
    let server = match start(args, system).await {
        Ok(server) => server,
        Err(why) => return failed_row(args, &scenario, system, why),
    };
    let client = http_client();
    let queue_url = create_fifo_queue(&client, &server.endpoint, "pipeline.fifo").await;
    pipeline_on(
        args,
        (system, &server),
        (&client, &queue_url),
        rate,
        scenario,
        1,
    )
    .await
}

/// The pipeline on a server already started, into a queue already made; consumers long-poll
/// for `wait_seconds` (0 on a manual clock, where a long poll would wait for the clock).
pub(crate) async fn pipeline_on(
    args: &Args,
    (system, server): (System, &ServerProcess),
    (client, queue_url): (&reqwest::Client, &str),
    rate: Option<u64>,
    scenario: String,
    wait_seconds: u64,
) -> Row {
    let queue_url = queue_url.to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let producers_done = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let tally = Arc::new(Tally::new(args.groups));
    let cpu_before = server.cpu_micros();
    let database_cpu_before = server.database_cpu_micros();
    let client_cpu_before = own_cpu_micros();
    let started = Instant::now();
    let drain_deadline = started + Duration::from_secs(args.duration + PIPELINE_DRAIN_SECS);
    let consumers: Vec<_> = (0..args.consumers)
        .map(|_| {
            tokio::spawn(consume(
                client.clone(),
                server.endpoint.clone(),
                (queue_url.clone(), wait_seconds),
                tally.clone(),
                sent.clone(),
                producers_done.clone(),
                drain_deadline,
            ))
        })
        .collect();
    let per_producer_rate = rate.map(|r| r as f64 / args.producers as f64);
    let producers: Vec<_> = spawn_producers(
        args,
        client,
        &server.endpoint,
        &[queue_url.as_str()],
        args.groups,
        (true, per_producer_rate, None),
        &stop,
    );
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    stop.store(true, Ordering::Relaxed);
    let mut errors = 0;
    for p in producers {
        let r = p.await.expect("producer");
        sent.fetch_add(r.sent, Ordering::Relaxed);
        errors += r.errors;
    }
    // Whether consumers keep up: what they delivered while the producers were sending.
    let producing = started.elapsed().as_secs_f64();
    let delivered_while_producing = tally.received.load(Ordering::Relaxed);
    producers_done.store(true, Ordering::SeqCst);
    if tally.received.load(Ordering::SeqCst) >= sent.load(Ordering::Relaxed) {
        // Everything arrived before the producers were counted: the run ended now.
        tally
            .finished_at
            .lock()
            .expect("lock")
            .get_or_insert_with(Instant::now);
    }
    for c in consumers {
        c.await.expect("consumer");
    }
    let finished = tally
        .finished_at
        .lock()
        .expect("lock")
        .unwrap_or_else(Instant::now);
    let seconds = finished.duration_since(started).as_secs_f64();
    let received = tally.received.load(Ordering::Relaxed);
    let mut latencies = std::mem::take(&mut *tally.latencies.lock().expect("lock"));
    latencies.sort_unstable();
    Row {
        scenario,
        system: system.name(args),
        messages: received,
        seconds,
        p50_us: percentile(&latencies, 0.5),
        p99_us: percentile(&latencies, 0.99),
        errors: errors + tally.errors.load(Ordering::Relaxed),
        order_violations: tally.violations.load(Ordering::Relaxed),
        lost: sent.load(Ordering::Relaxed).saturating_sub(received),
        server_cpu_us: server.cpu_micros() - cpu_before,
        database_cpu_us: database_cpu_since(server, database_cpu_before),
        client_cpu_us: own_cpu_micros() - client_cpu_before,
        connections: 0,
        note: format!(
            "send-to-receive latency; delivered msg/s; while producing, {:.0} sent/s and {:.0} delivered/s ({:.0} %); {:.1} msgs per receive{}",
            sent.load(Ordering::Relaxed) as f64 / producing,
            delivered_while_producing as f64 / producing,
            100.0 * delivered_while_producing as f64 / sent.load(Ordering::Relaxed).max(1) as f64,
            received as f64 / tally.receives.load(Ordering::Relaxed).max(1) as f64,
            undelivered_note(
                sent.load(Ordering::Relaxed).saturating_sub(received),
                PIPELINE_DRAIN_SECS
            )
        ),
    }
}

/// One server of the backlog scenario: its queue preloaded, then drained in windows.
struct Backlog {
    server: ServerProcess,
    client: reqwest::Client,
    queue_url: String,
    scenario: String,
    preload: usize,
    loaded: u64,
    rss_kib: u64,
    tally: Arc<Tally>,
    seconds: f64,
    cpu_us: u64,
    client_cpu_us: u64,
}

impl Backlog {
    async fn load(
        args: &Args,
        system: System,
        preload: usize,
        groups: usize,
    ) -> Result<Backlog, Row> {
        let scenario = format!("receive+delete, backlog {preload} msgs in {groups} groups");
        let server = match start(args, system).await {
            Ok(server) => server,
            Err(why) => return Err(failed_row(args, &scenario, system, why)),
        };
        let client = http_client();
        let queue_url = create_fifo_queue(&client, &server.endpoint, "backlog.fifo").await;
        let (loaded, _) =
            preload_queue(args, &client, &server.endpoint, &queue_url, preload, groups).await;
        let rss_kib = server.rss_kib();
        let tally = Arc::new(Tally::new(groups));
        Ok(Backlog {
            server,
            client,
            queue_url,
            scenario,
            preload,
            loaded,
            rss_kib,
            tally,
            seconds: 0.0,
            cpu_us: 0,
            client_cpu_us: 0,
        })
    }

    /// Receives and deletes about `count` more messages (consumers finish the receive they are
    /// in), adding the time and the server's and load generator's CPU it took.
    async fn drain(&mut self, args: &Args, count: u64, deadline: Duration) {
        let target = self.tally.received.load(Ordering::Relaxed) + count;
        let target = Arc::new(AtomicU64::new(target.min(self.loaded)));
        let done = Arc::new(AtomicBool::new(true));
        *self.tally.finished_at.lock().expect("lock") = None;
        let cpu_before = self.server.cpu_micros();
        let client_cpu_before = own_cpu_micros();
        let started = Instant::now();
        let consumers: Vec<_> = (0..args.consumers)
            .map(|_| {
                tokio::spawn(consume(
                    self.client.clone(),
                    self.server.endpoint.clone(),
                    (self.queue_url.clone(), 1),
                    self.tally.clone(),
                    target.clone(),
                    done.clone(),
                    started + deadline,
                ))
            })
            .collect();
        for c in consumers {
            c.await.expect("consumer");
        }
        // Until the last wanted message arrived: consumers may then sit in a long poll.
        let finished = self
            .tally
            .finished_at
            .lock()
            .expect("lock")
            .unwrap_or_else(Instant::now);
        self.seconds += finished.duration_since(started).as_secs_f64();
        self.cpu_us += self.server.cpu_micros() - cpu_before;
        self.client_cpu_us += own_cpu_micros() - client_cpu_before;
    }

    fn row(&self, args: &Args, system: System) -> Row {
        Row {
            scenario: self.scenario.clone(),
            system: system.name(args),
            messages: self.tally.received.load(Ordering::Relaxed),
            seconds: self.seconds,
            errors: self.tally.errors.load(Ordering::Relaxed),
            order_violations: self.tally.violations.load(Ordering::Relaxed),
            server_cpu_us: self.cpu_us,
            client_cpu_us: self.client_cpu_us,
            note: format!(
                "{BACKLOG_WINDOWS} windows alternating with the other backlog; server RSS after load {} MiB{}",
                self.rss_kib / 1024,
                stopped_loading_note(self.loaded, self.preload)
            ),
            ..Default::default()
        }
    }
}

/// Measuring windows per backlog: each server is drained in this many windows, alternating
/// with the other, so that both see the same moments of a noisy machine.
const BACKLOG_WINDOWS: u64 = 6;

/// Receive throughput from a small backlog and from a large one. Both servers are loaded
/// first and stay up; then `measure` messages are received from each in alternating windows.
pub(crate) async fn run_backlog(
    args: &Args,
    system: System,
    small: (usize, usize),
    measure: u64,
) -> Vec<Row> {
    let big = (args.backlog_messages, args.backlog_groups);
    let mut loaded = Vec::new();
    for (preload, groups) in [small, big] {
        match Backlog::load(args, system, preload, groups).await {
            Ok(backlog) => loaded.push(backlog),
            Err(row) => return vec![row],
        }
    }
    let window = measure.div_ceil(BACKLOG_WINDOWS);
    // A slow server gets at most two minutes in all.
    let deadline = Duration::from_secs(120) / (2 * BACKLOG_WINDOWS as u32);
    for round in 0..BACKLOG_WINDOWS as usize {
        // Alternate which goes first, so neither always follows the other.
        for index in [round % 2, 1 - round % 2] {
            loaded[index].drain(args, window, deadline).await;
        }
    }
    loaded
        .iter()
        .map(|backlog| backlog.row(args, system))
        .collect()
}

/// Sends `messages` in batches spread over `groups`, stopping early after `PRELOAD_LIMIT` (slow
/// servers would take hours to load a million); returns (messages accepted, failed requests).
async fn preload_queue(
    args: &Args,
    client: &reqwest::Client,
    endpoint: &str,
    queue_url: &str,
    messages: usize,
    groups: usize,
) -> (u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let per_producer = (messages / args.producers) as u64;
    let loaders = spawn_producers(
        args,
        client,
        endpoint,
        &[queue_url],
        groups,
        (true, None, Some(per_producer)),
        &stop,
    );
    let limit = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(PRELOAD_LIMIT).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let (mut loaded, mut errors) = (0, 0);
    for l in loaders {
        let result = l.await.expect("loader");
        loaded += result.sent;
        errors += result.errors;
    }
    limit.abort();
    (loaded, errors)
}

/// How long consumers keep draining after the sends stop, in the pipeline and fan-out scenarios.
pub(crate) const PIPELINE_DRAIN_SECS: u64 = 30;
pub(crate) const FANOUT_DRAIN_SECS: u64 = 60;

/// Says that the "lost" count is what had not arrived when the consumers gave up: a slow
/// server may still hold those messages.
pub(crate) fn undelivered_note(missing: u64, drain_secs: u64) -> String {
    if missing == 0 {
        String::new()
    } else {
        format!(
            "; {missing} not delivered when consumers gave up {drain_secs} s after sends stopped"
        )
    }
}

/// Messages queued by the memory scenario, and their body size.
const MEMORY_MESSAGES: usize = 200_000;
const MEMORY_BODY_BYTES: usize = 1024;

/// Resident memory a queued 1 KiB message costs: the server's RSS before and after queueing
/// `MEMORY_MESSAGES` of them (batched sends, 10,000 groups), per message.
pub(crate) async fn run_memory(args: &Args, system: System) -> Row {
    let scenario = format!("memory: {MEMORY_MESSAGES} queued 1 KiB msgs");
    let server = match start(args, system).await {
        Ok(server) => server,
        Err(why) => return failed_row(args, &scenario, system, why),
    };
    let client = http_client();
    let queue_url = create_fifo_queue(&client, &server.endpoint, "memory.fifo").await;
    // Let start-up allocations settle before the baseline.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = server.rss_kib();
    let args = &Args {
        body_size: MEMORY_BODY_BYTES,
        ..args.clone()
    };
    let started = Instant::now();
    let (loaded, errors) = preload_queue(
        args,
        &client,
        &server.endpoint,
        &queue_url,
        MEMORY_MESSAGES,
        10_000,
    )
    .await;
    let seconds = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let grown = server.rss_kib().saturating_sub(before) * 1024;
    let per_message = grown / loaded.max(1);
    Row {
        scenario,
        system: system.name(args),
        messages: loaded,
        seconds,
        errors,
        note: format!(
            "RSS grew {} MiB: {per_message} bytes per message ({:.2}× the body); msg/s is the load rate{}",
            grown >> 20,
            per_message as f64 / MEMORY_BODY_BYTES as f64,
            stopped_loading_note(loaded, MEMORY_MESSAGES)
        ),
        ..Default::default()
    }
}

/// Says that a slow server got fewer messages than asked for within `PRELOAD_LIMIT`.
fn stopped_loading_note(loaded: u64, wanted: usize) -> String {
    if (loaded as usize) < wanted {
        format!(
            "; loading stopped at {loaded} msgs after {} s",
            PRELOAD_LIMIT.as_secs()
        )
    } else {
        String::new()
    }
}

/// How long the backlog scenario keeps loading before it measures what it has.
const PRELOAD_LIMIT: Duration = Duration::from_secs(180);

/// Restart time of a durable server holding `backlog_messages` live messages: load them, kill
/// the server with SIGKILL, and time a fresh start on the same directory until it listens;
/// then check that every message is back.
pub(crate) async fn run_restart(args: &Args) -> Row {
    let dir = data_dir();
    let mut server = start_durable(args, &dir).await;
    let client = http_client();
    let queue_url = create_fifo_queue(&client, &server.endpoint, "restart.fifo").await;
    let stop = Arc::new(AtomicBool::new(false));
    let per_producer = (args.backlog_messages / args.producers) as u64;
    let loaders = spawn_producers(
        args,
        &client,
        &server.endpoint,
        &[queue_url.as_str()],
        args.backlog_groups,
        (true, None, Some(per_producer)),
        &stop,
    );
    let mut loaded = 0;
    for l in loaders {
        loaded += l.await.expect("loader").sent;
    }
    server.child.kill().await.expect("SIGKILL");
    let disk: u64 = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    let started = Instant::now();
    let mut restarted = start_durable(args, &dir).await;
    let seconds = started.elapsed().as_secs_f64();
    let attributes = call(
        &client,
        &restarted.endpoint,
        "GetQueueAttributes",
        serde_json::json!({"QueueUrl": queue_url, "AttributeNames": ["ApproximateNumberOfMessages"]})
            .to_string(),
    )
    .await
    .expect("attributes");
    let back: u64 = serde_json::from_str::<Value>(&attributes)
        .ok()
        .and_then(|v| {
            v["Attributes"]["ApproximateNumberOfMessages"]
                .as_str()?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    restarted.data_dir = Some(dir);
    Row {
        scenario: format!("restart after SIGKILL, {loaded} live msgs"),
        system: System::Durable.name(args),
        messages: back,
        seconds,
        errors: loaded.saturating_sub(back),
        note: format!(
            "restarted in {seconds:.2} s, to listening (msg/s here: messages recovered per second); {back} of {loaded} back; data dir {} MiB",
            disk >> 20
        ),
        ..Default::default()
    }
}

/// A FIFO topic with `queues` raw-delivery FIFO queues subscribed; (topic ARN, queue URLs).
async fn fanout_setup(
    client: &reqwest::Client,
    endpoint: &str,
    queues: usize,
) -> Result<(String, Vec<String>), String> {
    let topic = create_fifo_topic(client, endpoint, "fanout.fifo").await?;
    let mut urls = Vec::new();
    for q in 0..queues {
        let url = create_fifo_queue(client, endpoint, &format!("fan{q}.fifo")).await;
        subscribe_raw(client, endpoint, &topic, &url).await?;
        urls.push(url);
    }
    Ok((topic, urls))
}

/// Makes the FIFO topic `name`; its ARN.
pub(crate) async fn create_fifo_topic(
    client: &reqwest::Client,
    endpoint: &str,
    name: &str,
) -> Result<String, String> {
    let created = sns_call(
        client,
        endpoint,
        &[
            ("Action", "CreateTopic".into()),
            ("Name", name.into()),
            ("Attributes.entry.1.key", "FifoTopic".into()),
            ("Attributes.entry.1.value", "true".into()),
        ],
    )
    .await?;
    Ok(xml_text(&created, "TopicArn")
        .ok_or("no TopicArn")?
        .to_string())
}

/// Subscribes the queue at `url` to `topic` with raw delivery. The queue's ARN is asked for,
/// as emulators use different account ids.
pub(crate) async fn subscribe_raw(
    client: &reqwest::Client,
    endpoint: &str,
    topic: &str,
    url: &str,
) -> Result<(), String> {
    let attributes = call(
        client,
        endpoint,
        "GetQueueAttributes",
        serde_json::json!({"QueueUrl": url, "AttributeNames": ["QueueArn"]}).to_string(),
    )
    .await?;
    let arn = serde_json::from_str::<Value>(&attributes)
        .ok()
        .and_then(|v| Some(v["Attributes"]["QueueArn"].as_str()?.to_string()))
        .ok_or("no QueueArn")?;
    sns_call(
        client,
        endpoint,
        &[
            ("Action", "Subscribe".into()),
            ("TopicArn", topic.into()),
            ("Protocol", "sqs".into()),
            ("Endpoint", arn),
            ("Attributes.entry.1.key", "RawMessageDelivery".into()),
            ("Attributes.entry.1.value", "true".into()),
        ],
    )
    .await?;
    Ok(())
}

/// Percent-encodes a form value (unreserved characters kept).
fn form(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 16);
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// One SNS Query call; returns the XML body of a 200 response.
async fn sns_call(
    client: &reqwest::Client,
    endpoint: &str,
    params: &[(&str, String)],
) -> Result<String, String> {
    let mut body = String::from("Version=2010-03-31");
    for (k, v) in params {
        body.push('&');
        body.push_str(k);
        body.push('=');
        body.push_str(&form(v));
    }
    let request = client
        .post(endpoint)
        .header(
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-8",
        )
        .header("authorization", authorization("sns"))
        .body(body);
    send(request).await
}

fn xml_text<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(&xml[start..end])
}

/// Publishes batches of 10 to a FIFO topic for the phase; returns (published, errors).
pub(crate) async fn publish_batches(
    client: reqwest::Client,
    (endpoint, topic): (String, String),
    groups: Vec<usize>,
    size: usize,
    (pace, stop): (Option<(Duration, f64)>, Arc<AtomicBool>),
) -> (u64, u64) {
    let mut seqs = vec![0u64; groups.len()];
    let (mut published, mut errors) = (0u64, 0u64);
    let mut next = 0;
    let started = Instant::now();
    let mut batches = 0u32;
    while !stop.load(Ordering::Relaxed) {
        // Paced: (interval, this producer's offset as a share of it), so that producers
        // together publish evenly rather than all at the same moment.
        if let Some((step, offset)) = pace {
            let due = started + step.mul_f64(f64::from(batches) + offset);
            tokio::time::sleep_until(due.into()).await;
            batches += 1;
        }
        let mut params = vec![
            ("Action", "PublishBatch".to_string()),
            ("TopicArn", topic.clone()),
        ];
        let mut keys = Vec::with_capacity(40);
        let mut slots = Vec::with_capacity(10);
        for i in 1..=10 {
            let slot = next % groups.len();
            next += 1;
            seqs[slot] += 1;
            slots.push(slot);
            let (g, seq) = (groups[slot], seqs[slot]);
            keys.push((
                format!("PublishBatchRequestEntries.member.{i}.Id"),
                format!("e{i}"),
            ));
            keys.push((
                format!("PublishBatchRequestEntries.member.{i}.Message"),
                body(g, seq, size),
            ));
            keys.push((
                format!("PublishBatchRequestEntries.member.{i}.MessageGroupId"),
                format!("g{g}"),
            ));
            keys.push((
                format!("PublishBatchRequestEntries.member.{i}.MessageDeduplicationId"),
                format!("{g}-{seq}"),
            ));
        }
        params.extend(keys.iter().map(|(k, v)| (k.as_str(), v.clone())));
        match sns_call(&client, &endpoint, &params).await {
            Ok(xml) if !xml.contains("<Failed><member>") => published += 10,
            // Its numbers are used again, so no group has a gap; entries that were taken are
            // taken again as duplicates (the same deduplication ids).
            answer => {
                if errors < 1 {
                    // One a producer: enough to tell a throttled publish from a failure. A
                    // batch partly taken lists its failures after its successes.
                    let said = match answer {
                        Ok(xml) => xml[xml.find("<Failed>").unwrap_or(0)..].to_string(),
                        Err(error) => error,
                    };
                    eprintln!(
                        "publish error: {}",
                        said.chars().take(300).collect::<String>()
                    );
                }
                errors += 1;
                for slot in slots {
                    seqs[slot] -= 1;
                }
            }
        }
    }
    (published, errors)
}

/// PublishBatch into one FIFO topic fanned out to `queues` FIFO queues (raw delivery), one
/// consumer per queue draining and checking per-group order; as fast as the producers go, or
/// paced at `rate` publishes a second in all (the latency is then publish to receive, not
/// backlog).
pub(crate) async fn run_fanout(
    args: &Args,
    system: System,
    queues: usize,
    rate: Option<u64>,
) -> Row {
    let scenario = match rate {
        None => format!("fan-out 1->{queues} FIFO queues (PublishBatch)"),
        Some(rate) => format!("fan-out 1->{queues} FIFO queues paced at {rate} publishes/s"),
    };
    let server = match start(args, system).await {
        Ok(server) => server,
        Err(why) => return failed_row(args, &scenario, system, why),
    };
    let client = http_client();
    let (topic, urls) = match fanout_setup(&client, &server.endpoint, queues).await {
        Ok(setup) => setup,
        Err(why) => return failed_row(args, &scenario, system, why),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let producers_done = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let tallies: Vec<Arc<Tally>> = (0..queues)
        .map(|_| Arc::new(Tally::new(args.groups)))
        .collect();
    let cpu_before = server.cpu_micros();
    let database_cpu_before = server.database_cpu_micros();
    let client_cpu_before = own_cpu_micros();
    let started = Instant::now();
    let consumers: Vec<_> = urls
        .iter()
        .zip(&tallies)
        .map(|(url, tally)| {
            tokio::spawn(consume(
                client.clone(),
                server.endpoint.clone(),
                (url.clone(), 1),
                tally.clone(),
                published.clone(),
                producers_done.clone(),
                started + Duration::from_secs(args.duration + FANOUT_DRAIN_SECS),
            ))
        })
        .collect();
    let producers: Vec<_> = (0..args.producers)
        .map(|p| {
            // Each producer publishes batches of ten at its share of the rate.
            let pace = rate.map(|rate| {
                let step =
                    Duration::from_secs_f64(10.0 * args.producers as f64 / rate.max(1) as f64);
                (step, p as f64 / args.producers as f64)
            });
            tokio::spawn(publish_batches(
                client.clone(),
                (server.endpoint.clone(), topic.clone()),
                owned_groups(p, args.producers, args.groups),
                args.body_size,
                (pace, stop.clone()),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    stop.store(true, Ordering::Relaxed);
    let mut errors = 0;
    for p in producers {
        let (n, e) = p.await.expect("publisher");
        published.fetch_add(n, Ordering::Relaxed);
        errors += e;
    }
    producers_done.store(true, Ordering::SeqCst);
    for t in &tallies {
        if t.received.load(Ordering::SeqCst) >= published.load(Ordering::Relaxed) {
            t.finished_at
                .lock()
                .expect("lock")
                .get_or_insert_with(Instant::now);
        }
    }
    for c in consumers {
        c.await.expect("consumer");
    }
    let finished = tallies
        .iter()
        .map(|t| {
            t.finished_at
                .lock()
                .expect("lock")
                .unwrap_or_else(Instant::now)
        })
        .max()
        .unwrap_or_else(Instant::now);
    let delivered: u64 = tallies
        .iter()
        .map(|t| t.received.load(Ordering::Relaxed))
        .sum();
    let mut latencies: Vec<u64> = tallies
        .iter()
        .flat_map(|t| std::mem::take(&mut *t.latencies.lock().expect("lock")))
        .collect();
    latencies.sort_unstable();
    Row {
        scenario,
        system: system.name(args),
        messages: delivered,
        seconds: finished.duration_since(started).as_secs_f64(),
        p50_us: percentile(&latencies, 0.5),
        p99_us: percentile(&latencies, 0.99),
        errors: errors
            + tallies
                .iter()
                .map(|t| t.errors.load(Ordering::Relaxed))
                .sum::<u64>(),
        order_violations: tallies
            .iter()
            .map(|t| t.violations.load(Ordering::Relaxed))
            .sum(),
        lost: (published.load(Ordering::Relaxed) * queues as u64).saturating_sub(delivered),
        server_cpu_us: server.cpu_micros() - cpu_before,
        database_cpu_us: database_cpu_since(&server, database_cpu_before),
        client_cpu_us: own_cpu_micros() - client_cpu_before,
        connections: 0,
        note: format!(
            "deliveries/s; {} published; one consumer per queue{}",
            published.load(Ordering::Relaxed),
            undelivered_note(
                (published.load(Ordering::Relaxed) * queues as u64).saturating_sub(delivered),
                FANOUT_DRAIN_SECS
            )
        ),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{check_peer_names, System};
    use crate::Args;

    fn with_peers(peers: &[&str]) -> Args {
        let mut argv = vec!["orderly-bench".to_string()];
        for peer in peers {
            argv.push(format!("--peer={peer}"));
        }
        Args::parse_from(argv)
    }

    #[test]
    fn peers_must_have_names_of_their_own() {
        assert!(check_peer_names(&with_peers(&["a=x {port}", "b=y {port}"])).is_ok());
        assert!(check_peer_names(&with_peers(&["a=x {port}", "a=y {port}"])).is_err());
        // Without NAME=, every peer is "peer".
        assert!(check_peer_names(&with_peers(&["x {port}", "y {port}"])).is_err());
        let durable = format!("{}=x {{port}}", System::Durable.label());
        assert!(check_peer_names(&with_peers(&[&durable])).is_err());
    }
}
