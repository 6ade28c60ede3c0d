//! Crash recovery with the real binary: sustained send / receive / delete load on a FIFO queue
//! with many groups, and publishes to a FIFO topic fanned out into two more FIFO queues; SIGKILL
//! at a random moment, restart on the same data directory, verify.
//! Rounds: 20 by default; `ORDERLY_CRASH_ROUNDS=200 cargo test crash` runs a longer campaign.
//!
//! After each restart:
//! - every acknowledged send is there unless a delete removed it (an acknowledged one, or one
//!   whose answer the crash cut off);
//! - no acknowledged delete comes back;
//! - each group's messages arrive in send order, none twice;
//! - messages received (acknowledged) before the crash stay invisible until their deadline,
//!   and their receipt handles still work;
//! - sequence numbers are never reused, and deduplication ids are remembered;
//! - every acknowledged publish reached each subscribed queue once, in group order, and the
//!   topic still remembers the last one's deduplication id;
//! - every publish, acknowledged or cut off by the crash, reached both subscribed queues or
//!   neither (a fan-out is logged in one write).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};

use crate::binary::{self, Process};

const QUEUE: &str = "crash.fifo";
const TOPIC: &str = "crash-topic.fifo";
const FANOUT_QUEUES: [&str; 2] = ["crash-fanout.fifo", "crash-fanout-2.fifo"];
const SENDERS: usize = 4;
const GROUPS_PER_SENDER: usize = 4;
const RECEIVERS: usize = 2;
/// The visibility timeout of the receives under load. The servers run on a manual clock that
/// stands still under load, so nothing comes back by itself: each check after a restart moves
/// the clock past every deadline (`round_time`).
const VISIBILITY: i32 = 2;
/// How far the clock moves at each check: past every deadline and deduplication window of the
/// round before.
const CLOCK_STEP_MS: u64 = 10 * 60_000;

fn start(dir: &std::path::Path) -> Process {
    start_with(dir, &[])
}

/// As `start`, with `extra` flags.
fn start_with(dir: &std::path::Path, extra: &[&str]) -> Process {
    // Small, so snapshots (and segment removal) happen under load too.
    let mut args = vec!["--snapshot-after", "20000", "--clock", "manual"];
    args.extend_from_slice(extra);
    binary::start(dir, &args, "warn")
}

/// As `start`, on the machine's clock: a move task paces its moves by the server's clock, and
/// this test waits for one to run on its own across a SIGKILL (polling, with a bound).
fn start_on_real_time(dir: &std::path::Path) -> Process {
    binary::start(dir, &["--snapshot-after", "20000"], "warn")
}

/// The server's time during round `round`'s load: `base` (ms since the epoch, ahead of the
/// machine's clock) and a step more per round. A restarted server's manual clock starts where
/// the last server's stood (the data directory's `CLOCK`); each restart sets it there all the
/// same (a clock that had gone back would be moved forward; one gone further is refused), and
/// the check then sets it one step on.
fn round_time(base: u64, round: usize) -> u64 {
    base + round as u64 * CLOCK_STEP_MS
}

async fn set_clock(addr: SocketAddr, to: u64) {
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/_orderly/clock"))
        .body(format!(r#"{{"set":{to}}}"#))
        .send()
        .await
        .expect("the clock endpoint answers");
    assert_eq!(answer.status(), 200, "{:?}", answer.text().await);
}

/// Milliseconds since the epoch, now.
fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// A client that never retries and gives up after 5 s: a crash must show as a failed call.
pub fn client(addr: SocketAddr) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(format!("http://{addr}"))
        .credentials_provider(Credentials::new("AKID", "secret", None, None, "test"))
        .http_client(crate::common::http_client())
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            aws_sdk_sqs::config::timeout::TimeoutConfig::builder()
                .operation_timeout(Duration::from_secs(5))
                .build(),
        )
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// What the clients were told, across rounds.
#[derive(Default)]
struct Model {
    /// Acknowledged sends still expected: body -> (group, number in group).
    present: HashMap<String, (String, u64)>,
    /// Sends whose answer never came: they may or may not be there.
    maybe: HashSet<String>,
    /// Acknowledged deletes: must never come back.
    deleted: HashSet<String>,
    /// Deletes whose answer never came.
    maybe_deleted: HashSet<String>,
    /// Acknowledged receives not deleted: body -> handle. None is due before the check after
    /// the crash moves the clock.
    in_flight: HashMap<String, String>,
    max_sequence: u128,
    /// An acknowledged send to resend after the restart: (dedup id, body, group, message id).
    last_send: Option<(String, String, String, String)>,
    /// Acknowledged publishes not yet seen in the subscribed queue: body -> (group, order).
    published: HashMap<String, (String, u64)>,
    /// Publishes whose answer never came.
    maybe_published: HashSet<String>,
    /// The last acknowledged publish: (dedup id, body, group, message id).
    last_publish: Option<(String, String, String, String)>,
}

fn sns_client(addr: SocketAddr) -> aws_sdk_sns::Client {
    let config = aws_sdk_sns::Config::builder()
        .behavior_version(aws_sdk_sns::config::BehaviorVersion::latest())
        .region(aws_sdk_sns::config::Region::new("us-east-1"))
        .endpoint_url(format!("http://{addr}"))
        .credentials_provider(aws_sdk_sns::config::Credentials::new(
            "AKID", "secret", None, None, "test",
        ))
        .http_client(crate::common::http_client())
        .retry_config(aws_sdk_sns::config::retry::RetryConfig::disabled())
        .timeout_config(
            aws_sdk_sns::config::timeout::TimeoutConfig::builder()
                .operation_timeout(Duration::from_secs(5))
                .build(),
        )
        .build();
    aws_sdk_sns::Client::from_conf(config)
}

async fn publisher(
    sns: aws_sdk_sns::Client,
    topic: String,
    model: Arc<Mutex<Model>>,
    round: usize,
) {
    for n in 1u64.. {
        let group = format!("p-g{}", n % 3);
        let body = format!("{group}:{round}:{n}");
        let dedup = format!("r{round}-{body}");
        model.lock().unwrap().maybe_published.insert(body.clone());
        let published = sns
            .publish()
            .topic_arn(&topic)
            .message(&body)
            .message_group_id(&group)
            .message_deduplication_id(&dedup)
            .send()
            .await;
        let Ok(published) = published else { return };
        let mut m = model.lock().unwrap();
        m.maybe_published.remove(&body);
        m.published
            .insert(body.clone(), (group.clone(), round as u64 * 1_000_000 + n));
        let id = published.message_id().unwrap().to_string();
        m.last_publish = Some((dedup, body, group, id));
    }
}

/// Each subscribed queue holds every acknowledged publish once, in group order, and both
/// hold the same publishes; the topic still deduplicates the last one.
async fn verify_fanout(
    sqs: &aws_sdk_sqs::Client,
    sns: &aws_sdk_sns::Client,
    topic: &str,
    urls: &[String],
    model: &mut Model,
    round: usize,
) {
    if let Some((dedup, body, group, message_id)) = model.last_publish.take() {
        let again = sns
            .publish()
            .topic_arn(topic)
            .message(&body)
            .message_group_id(&group)
            .message_deduplication_id(&dedup)
            .send()
            .await
            .expect("publish again");
        assert_eq!(
            again.message_id(),
            Some(message_id.as_str()),
            "round {round}: topic dedup forgot {dedup}"
        );
    }
    let mut copies = Vec::new();
    for url in urls {
        let bodies = drain(sqs, url, round).await;
        check_copies(&bodies, model, round);
        copies.push(bodies.into_iter().collect::<HashSet<String>>());
    }
    assert!(
        copies.windows(2).all(|w| w[0] == w[1]),
        "round {round}: a publish reached one subscribed queue and not the other: {:?}",
        copies[0]
            .symmetric_difference(&copies[1])
            .collect::<Vec<_>>()
    );
    model.published.clear();
    model.maybe_published.clear();
}

/// One subscribed queue's copies: nothing unexpected, no acknowledged publish missing, each
/// group in order.
fn check_copies(bodies: &[String], model: &Model, round: usize) {
    let all: HashSet<&String> = bodies.iter().collect();
    let mut seen: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for body in bodies {
        assert!(
            model.published.contains_key(body) || model.maybe_published.contains(body),
            "round {round}: unexpected publish {body}"
        );
        let (group, order) = order_of(body);
        seen.entry(group).or_default().push(order);
    }
    for body in model.published.keys() {
        assert!(
            all.contains(body),
            "round {round}: acknowledged publish {body} lost"
        );
    }
    for (group, orders) in &seen {
        assert!(
            orders.windows(2).all(|w| w[0] < w[1]),
            "round {round}: published group {group} out of order: {orders:?}"
        );
    }
}

/// Receives and deletes everything the queue holds; bodies in the order they came, each once.
async fn drain(sqs: &aws_sdk_sqs::Client, url: &str, round: usize) -> Vec<String> {
    let bodies = drain_all(sqs, url).await;
    let mut all = HashSet::new();
    for body in &bodies {
        assert!(all.insert(body), "round {round}: {body} received twice");
    }
    bodies
}

/// Receives and deletes everything the queue holds; bodies in the order they came.
async fn drain_all(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    let mut bodies = Vec::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(120)
            .send()
            .await
            .expect("drain");
        if out.messages().is_empty() {
            return bodies;
        }
        for message in out.messages() {
            let body = message.body().unwrap().to_string();
            sqs.delete_message()
                .queue_url(url)
                .receipt_handle(message.receipt_handle().unwrap())
                .send()
                .await
                .expect("delete while draining");
            bodies.push(body);
        }
    }
}

/// Bodies are `group:round:n`; their order within a group is (round, n).
fn order_of(body: &str) -> (String, u64) {
    let (group, rest) = body.split_once(':').unwrap();
    let (r, n) = rest.split_once(':').unwrap();
    (
        group.to_string(),
        r.parse::<u64>().unwrap() * 1_000_000 + n.parse::<u64>().unwrap(),
    )
}

async fn sender(
    sqs: aws_sdk_sqs::Client,
    url: String,
    model: Arc<Mutex<Model>>,
    id: usize,
    round: usize,
) {
    let mut numbers = [0u64; GROUPS_PER_SENDER];
    for n in 0.. {
        let g = n % GROUPS_PER_SENDER;
        let group = format!("s{id}-g{g}");
        numbers[g] += 1;
        let body = format!("{group}:{round}:{}", numbers[g]);
        let dedup = format!("r{round}-{body}");
        model.lock().unwrap().maybe.insert(body.clone());
        let sent = sqs
            .send_message()
            .queue_url(&url)
            .message_body(&body)
            .message_group_id(&group)
            .message_deduplication_id(&dedup)
            .send()
            .await;
        let Ok(sent) = sent else { return };
        let sequence: u128 = sent.sequence_number().unwrap().parse().unwrap();
        let mut m = model.lock().unwrap();
        m.maybe.remove(&body);
        m.max_sequence = m.max_sequence.max(sequence);
        let order = round as u64 * 1_000_000 + numbers[g];
        // A receiver may have got (and deleted) the message before this answer was read.
        if !m.deleted.contains(&body) && !m.maybe_deleted.contains(&body) {
            m.present.insert(body.clone(), (group.clone(), order));
        }
        m.last_send = Some((dedup, body, group, sent.message_id().unwrap().to_string()));
    }
}

async fn receiver(sqs: aws_sdk_sqs::Client, url: String, model: Arc<Mutex<Model>>) {
    let mut keep = false;
    loop {
        let Ok(out) = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .visibility_timeout(VISIBILITY)
            .send()
            .await
        else {
            return;
        };
        for message in out.messages() {
            let body = message.body().unwrap().to_string();
            let handle = message.receipt_handle().unwrap().to_string();
            // Every other message stays in flight, to check its invisibility after the crash.
            keep = !keep;
            if keep {
                model.lock().unwrap().in_flight.insert(body, handle);
                continue;
            }
            model.lock().unwrap().maybe_deleted.insert(body.clone());
            let deleted = sqs
                .delete_message()
                .queue_url(&url)
                .receipt_handle(&handle)
                .send()
                .await;
            let mut m = model.lock().unwrap();
            if deleted.is_err() {
                return;
            }
            m.maybe_deleted.remove(&body);
            m.present.remove(&body);
            m.deleted.insert(body);
        }
    }
}

/// Checks the restarted server against the model, its clock where the crashed server's stood,
/// then sets the clock to `next.1` (past every deadline) and empties the queue for the next
/// round.
async fn verify(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    model: &mut Model,
    round: usize,
    next: (SocketAddr, u64),
) {
    // In flight before the crash: must stay invisible (the clock has not moved since), their
    // handles still valid.
    let hidden: HashSet<String> = model.in_flight.keys().cloned().collect();
    let early = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .send()
        .await
        .expect("receive after restart");
    for message in early.messages() {
        assert!(
            !hidden.contains(message.body().unwrap()),
            "round {round}: in-flight message {:?} visible before its deadline",
            message.body()
        );
    }
    for (body, handle) in &model.in_flight {
        let changed = sqs
            .change_message_visibility()
            .queue_url(url)
            .receipt_handle(handle)
            .visibility_timeout(VISIBILITY)
            .send()
            .await;
        assert!(
            changed.is_ok() || model.deleted.contains(body) || model.maybe_deleted.contains(body),
            "round {round}: receipt handle for {body} rejected after restart: {changed:?}"
        );
    }
    // Dedup survives the restart: resending the last acknowledged message is a no-op.
    if let Some((dedup, body, group, message_id)) = model.last_send.take() {
        let again = sqs
            .send_message()
            .queue_url(url)
            .message_body(&body)
            .message_group_id(&group)
            .message_deduplication_id(&dedup)
            .send()
            .await
            .expect("resend");
        assert_eq!(
            again.message_id(),
            Some(message_id.as_str()),
            "round {round}: dedup forgot {dedup}"
        );
    }
    // Everything still in flight comes back once its deadline has passed; drain the queue.
    set_clock(next.0, next.1).await;
    let bodies = drain(sqs, url, round).await;
    let all: HashSet<&String> = bodies.iter().collect();
    let mut seen: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for body in &bodies {
        assert!(
            !model.deleted.contains(body),
            "round {round}: deleted {body} came back"
        );
        let (group, order) = match model.present.get(body) {
            Some(known) => known.clone(),
            None => {
                assert!(
                    model.maybe.contains(body) || model.maybe_deleted.contains(body),
                    "round {round}: unexpected {body}"
                );
                order_of(body)
            }
        };
        seen.entry(group).or_default().push((order, body.clone()));
    }
    for body in model.present.keys() {
        // A delete whose answer the crash cut off may have been applied and made durable.
        assert!(
            all.contains(body) || model.maybe_deleted.contains(body),
            "round {round}: acknowledged {body} lost"
        );
    }
    for (group, messages) in &seen {
        assert!(
            messages.windows(2).all(|w| w[0].0 < w[1].0),
            "round {round}: group {group} out of order: {messages:?}"
        );
    }
    // Fresh sequence numbers are above every acknowledged one.
    let probe = sqs
        .send_message()
        .queue_url(url)
        .message_body("probe")
        .message_group_id("probe")
        .message_deduplication_id(format!("probe-{round}"))
        .send()
        .await
        .expect("probe send");
    let sequence: u128 = probe.sequence_number().unwrap().parse().unwrap();
    assert!(
        sequence > model.max_sequence,
        "round {round}: sequence number reused"
    );
    model.max_sequence = sequence;
    let drained = sqs
        .receive_message()
        .queue_url(url)
        .send()
        .await
        .expect("probe receive");
    for message in drained.messages() {
        sqs.delete_message()
            .queue_url(url)
            .receipt_handle(message.receipt_handle().unwrap())
            .send()
            .await
            .expect("probe delete");
    }
    model.present.clear();
    model.maybe.clear();
    model.maybe_deleted.clear();
    model.in_flight.clear();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_work_survives_sigkill_at_random_moments() {
    campaign(&[]).await;
}

/// The same over three shards, each with a log of its own: the topic's shard holds one of
/// its subscribed queues, and the other queue lies in another shard, which gets its copies
/// as parcels logged with the publish (so a publish still reaches both queues or neither).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_work_survives_sigkill_over_three_shards() {
    use orderly::engine::shard::Shard;
    assert_eq!(Shard::of(3, TOPIC), Shard::of(3, FANOUT_QUEUES[0]));
    assert_ne!(Shard::of(3, TOPIC), Shard::of(3, FANOUT_QUEUES[1]));
    campaign(&["--shards", "3"]).await;
}

/// Rounds of load, each ended by a SIGKILL, on servers started with `extra` flags.
async fn campaign(extra: &[&str]) {
    let sharded = !extra.is_empty();
    let rounds: usize = std::env::var("ORDERLY_CRASH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::default();
    let mut rng_state = 0x9e37_79b9_7f4a_7c15u64 ^ std::process::id() as u64;
    let mut random = move |below: u64| {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        rng_state % below
    };
    let mut url = String::new();
    let mut fanout_urls = Vec::new();
    let mut topic = String::new();
    let mut acknowledged = 0;
    let mut publishes = 0;
    // Ahead of the machine's clock, so that the first server's clock can be set to it.
    let clock_base = epoch_ms() + 60_000;
    for round in 0..rounds {
        let mut process = start_with(dir.path(), extra);
        let sqs = client(process.addr);
        let sns = sns_client(process.addr);
        if round == 0 {
            set_clock(process.addr, round_time(clock_base, 0)).await;
            (topic, fanout_urls) = create_topic(&sqs, &sns).await;
            url = create_fifo_queue(&sqs, QUEUE).await;
        } else {
            set_clock(process.addr, round_time(clock_base, round - 1)).await;
            crate::common::carried_at(&format!("http://{}", process.addr)).await;
            // The topic's check first: the queue's moves the clock past its dedup window.
            verify_fanout(&sqs, &sns, &topic, &fanout_urls, &mut model, round).await;
            let next = round_time(clock_base, round);
            verify(&sqs, &url, &mut model, round, (process.addr, next)).await;
        }
        let shared = Arc::new(Mutex::new(std::mem::take(&mut model)));
        let mut tasks = Vec::new();
        for id in 0..SENDERS {
            tasks.push(tokio::spawn(sender(
                sqs.clone(),
                url.clone(),
                shared.clone(),
                id,
                round,
            )));
        }
        for _ in 0..RECEIVERS {
            tasks.push(tokio::spawn(receiver(
                sqs.clone(),
                url.clone(),
                shared.clone(),
            )));
        }
        tasks.push(tokio::spawn(publisher(
            sns.clone(),
            topic.clone(),
            shared.clone(),
            round,
        )));
        tokio::time::sleep(Duration::from_millis(150 + random(600))).await;
        process.child.kill().expect("SIGKILL");
        process.child.wait().expect("reaped");
        for task in tasks {
            task.await.unwrap();
        }
        model = Arc::try_unwrap(shared).ok().unwrap().into_inner().unwrap();
        acknowledged += model.present.len() + model.deleted.len();
        publishes += model.published.len();
    }
    let mut process = start_with(dir.path(), extra);
    let sqs = client(process.addr);
    set_clock(process.addr, round_time(clock_base, rounds - 1)).await;
    crate::common::carried_at(&format!("http://{}", process.addr)).await;
    let sns = sns_client(process.addr);
    verify_fanout(&sqs, &sns, &topic, &fanout_urls, &mut model, rounds).await;
    let next = round_time(clock_base, rounds);
    verify(&sqs, &url, &mut model, rounds, (process.addr, next)).await;
    // Stopped cleanly: a kill between keeping a new snapshot and removing the one before
    // leaves both, which the next snapshot tidies.
    crate::log_in_database::signal(&process, "-TERM");
    process.child.wait().expect("stopped");
    drop(process);
    eprintln!(
        "{rounds} rounds, {acknowledged} acknowledged sends and deletes, {publishes} publishes"
    );
    assert!(
        acknowledged > rounds * 10,
        "the load did some work: {acknowledged}"
    );
    assert!(publishes > rounds * 5, "publishes happened: {publishes}");
    let snapshots_in = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "snap")
            })
            .count()
    };
    if sharded {
        // Each shard's log is snapshotted on its own; the busiest were under the load.
        let counts: Vec<usize> = (0..3)
            .map(|n| snapshots_in(&dir.path().join(format!("shard-{n}"))))
            .collect();
        assert!(counts.iter().all(|&n| n <= 1), "{counts:?}");
        assert!(counts.contains(&1), "snapshots were taken: {counts:?}");
    } else {
        assert_eq!(
            snapshots_in(dir.path()),
            1,
            "snapshots were taken under the load"
        );
    }
}

async fn create_fifo_queue(sqs: &aws_sdk_sqs::Client, name: &str) -> String {
    sqs.create_queue()
        .queue_name(name)
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .expect("create queue")
        .queue_url
        .unwrap()
}

/// A FIFO topic with two raw-delivery FIFO queues subscribed; returns (topic ARN, queue URLs).
async fn create_topic(
    sqs: &aws_sdk_sqs::Client,
    sns: &aws_sdk_sns::Client,
) -> (String, Vec<String>) {
    let topic = sns
        .create_topic()
        .name(TOPIC)
        .attributes("FifoTopic", "true")
        .send()
        .await
        .expect("create topic")
        .topic_arn
        .unwrap();
    let mut urls = Vec::new();
    for queue in FANOUT_QUEUES {
        let url = create_fifo_queue(sqs, queue).await;
        sns.subscribe()
            .topic_arn(&topic)
            .protocol("sqs")
            .endpoint(format!("arn:aws:sqs:us-east-1:000000000000:{queue}"))
            .attributes("RawMessageDelivery", "true")
            .send()
            .await
            .expect("subscribe");
        urls.push(url);
    }
    (topic, urls)
}

/// A warning logged at startup (here: a torn log tail being dropped) goes to stderr, so the
/// first stdout line is still the listening line that scripts and `start` read. It used to be
/// the warning, which failed the SIGKILL test whenever a kill had torn a record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_startup_warning_does_not_displace_the_listening_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut process = start(dir.path());
    client(process.addr)
        .create_queue()
        .queue_name("kept")
        .send()
        .await
        .expect("create");
    process.child.kill().expect("SIGKILL");
    process.child.wait().expect("reaped");
    let newest = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .filter(|p| std::fs::metadata(p).unwrap().len() > 0)
        .max()
        .expect("a log segment");
    // A write cut off mid-way where the next one would start (the segment is zero-filled
    // ahead; writes start on 512-byte boundaries): the start of a batch header only.
    let mut bytes = std::fs::read(&newest).unwrap();
    let end = (bytes.iter().rposition(|b| *b != 0).unwrap() + 1).next_multiple_of(512);
    bytes[end..end + 7].copy_from_slice(b"ORDLYSB");
    std::fs::write(&newest, &bytes).unwrap();
    let process = start(dir.path());
    let url = client(process.addr)
        .get_queue_url()
        .queue_name("kept")
        .send()
        .await
        .expect("the queue survived");
    assert!(url.queue_url().unwrap().ends_with("/kept"));
}

/// A DLQ redrive task running when the server is killed picks up where it was after the
/// restart and finishes: every message ends up back in the source queue, none left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_move_task_resumes_after_sigkill() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut process = start_on_real_time(dir.path());
    let sqs = client(process.addr);
    let dlq_url = sqs
        .create_queue()
        .queue_name("moves-dlq")
        .send()
        .await
        .expect("create dlq")
        .queue_url
        .unwrap();
    let redrive = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:moves-dlq","maxReceiveCount":"3"}"#;
    let source_url = sqs
        .create_queue()
        .queue_name("moves-src")
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy,
            redrive,
        )
        .send()
        .await
        .expect("create source")
        .queue_url
        .unwrap();
    let bodies: HashSet<String> = (0..6).map(|i| format!("m{i}")).collect();
    for body in &bodies {
        sqs.send_message()
            .queue_url(&dlq_url)
            .message_body(body)
            .send()
            .await
            .expect("send to dlq");
    }
    let dlq_arn = "arn:aws:sqs:us-east-1:000000000000:moves-dlq";
    sqs.start_message_move_task()
        .source_arn(dlq_arn)
        .destination_arn("arn:aws:sqs:us-east-1:000000000000:moves-src")
        .max_number_of_messages_per_second(2)
        .send()
        .await
        .expect("start task");
    let moved = |sqs: aws_sdk_sqs::Client| async move {
        let out = sqs
            .list_message_move_tasks()
            .source_arn(dlq_arn)
            .send()
            .await
            .expect("list tasks");
        let task = out.results()[0].clone();
        (
            task.status().unwrap_or_default().to_string(),
            task.approximate_number_of_messages_moved,
        )
    };
    let fence_url = sqs
        .create_queue()
        .queue_name("fence")
        .send()
        .await
        .expect("create fence")
        .queue_url
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while moved(sqs.clone()).await.1 < 2 {
        assert!(Instant::now() < deadline, "the task moved nothing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A step is visible before its log write is synced (nobody waits for it). A send answered
    // after it is synced after it, and with it everything logged before: what the list showed.
    sqs.send_message()
        .queue_url(&fence_url)
        .message_body("fence")
        .send()
        .await
        .expect("send the fence");
    process.child.kill().expect("SIGKILL");
    process.child.wait().expect("reaped");

    let process = start_on_real_time(dir.path());
    let sqs = client(process.addr);
    let (status, count) = moved(sqs.clone()).await;
    assert!(
        status == "RUNNING" && (2..6).contains(&count),
        "after the restart the task is still running, part done: {status} {count}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, count) = moved(sqs.clone()).await;
        if status == "COMPLETED" {
            // A step's puts, removals and new count reach the log in one write: a kill keeps
            // the whole step or none of it, so the count is exact.
            assert_eq!(count, bodies.len() as i64, "moved count");
            break;
        }
        assert_eq!(status, "RUNNING");
        assert!(Instant::now() < deadline, "the resumed task never finished");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(drain(&sqs, &dlq_url, 0).await.is_empty(), "left in the DLQ");
    // Nor can a kill leave a message both moved and still in the DLQ: none lost, none twice.
    let mut back = drain_all(&sqs, &source_url).await;
    back.sort();
    let mut expected: Vec<String> = bodies.into_iter().collect();
    expected.sort();
    assert_eq!(back, expected);
}
