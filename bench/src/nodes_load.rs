//! The loads the nodes scenario puts on its nodes, all over the same 32 FIFO queues: batched
//! sends alone; the pipeline (sends, and consumers of each queue receiving and deleting); and fan-out
//! from FIFO topics into those queues, as fast as the publishers go or paced. Topics and queues
//! are named apart, so each lands in a shard of its own name's: with the shards spread, a copy
//! crosses nodes unless its queue's shard and its topic's are led by the same node.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::load::{
    consume, create_fifo_queue, create_fifo_topic, publish_batches, send_batch, subscribe_raw,
    undelivered_note, Tally, FANOUT_DRAIN_SECS, PIPELINE_DRAIN_SECS,
};
use crate::nodes_layout::{busiest, leader_of, queue_names, shard_of, topic_name, Route};
use crate::Args;

/// FIFO queues the loads are spread over.
pub const QUEUES: usize = 32;

/// FIFO topics of the fan-out loads (fewer when there are fewer producers: one topic each at
/// least), each with its share of the queues subscribed.
const TOPICS: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeLoad {
    Send,
    Pipeline,
    Fanout,
    /// Fan-out paced at this many publishes a second in all.
    FanoutPaced(u64),
}

impl NodeLoad {
    /// The load named in `--node-loads`; `rate` paces `fanout-paced`.
    pub fn named(name: &str, rate: u64) -> Option<NodeLoad> {
        match name {
            "send" => Some(NodeLoad::Send),
            "pipeline" => Some(NodeLoad::Pipeline),
            "fanout" => Some(NodeLoad::Fanout),
            "fanout-paced" => Some(NodeLoad::FanoutPaced(rate)),
            _ => None,
        }
    }

    /// Whether its rate is set rather than measured.
    pub fn paced(self) -> bool {
        matches!(self, NodeLoad::FanoutPaced(_))
    }

    /// The scenario's name in the table (a paced one says " paced ", so its rounds are told
    /// apart by latency).
    pub fn scenario(self) -> String {
        match self {
            NodeLoad::Send => "nodes: batched send to 32 FIFO queues".into(),
            NodeLoad::Pipeline => "nodes: pipeline over 32 FIFO queues (delivered)".into(),
            NodeLoad::Fanout => "nodes: fan-out FIFO topics -> 32 FIFO queues (deliveries)".into(),
            NodeLoad::FanoutPaced(rate) => {
                format!("nodes: fan-out FIFO topics -> 32 FIFO queues paced at {rate} publishes/s")
            }
        }
    }
}

/// A node that leads shards: where it is and which it leads.
pub struct Leader {
    pub endpoint: String,
    pub led: Vec<u32>,
}

/// What the load runs against, made before it is measured.
pub struct Setup {
    pub queues: Vec<String>,
    /// Where each queue's requests are sent (`--node-route`).
    queue_at: Vec<String>,
    /// Each topic's ARN with the indexes of the queues subscribed to it.
    topics: Vec<(String, Vec<usize>)>,
    /// Where each topic's publishes are sent.
    topic_at: Vec<String>,
    /// How many of the queues, and of the topics, the busiest node leads.
    pub busiest: (usize, usize),
}

/// What one run of a load measured.
pub struct Outcome {
    pub messages: u64,
    pub seconds: f64,
    /// Sorted, in microseconds: per request for sends, send or publish to receive otherwise.
    pub latencies: Vec<u64>,
    pub errors: u64,
    pub order_violations: u64,
    pub lost: u64,
    /// Receives answered (empty ones included), for the messages a receive.
    pub receives: u64,
    pub note: String,
}

/// Makes the queues (and the topics, for fan-out) through `endpoint`, named as
/// `--node-layout` says over the shards each of `leaders` leads, each to be sent to as
/// `--node-route` says.
pub async fn prepare(
    load: NodeLoad,
    args: &Args,
    client: &reqwest::Client,
    endpoint: &str,
    leaders: &[Leader],
) -> Result<Setup, String> {
    let shards = args.node_shards;
    let led: Vec<Vec<u32>> = leaders.iter().map(|l| l.led.clone()).collect();
    let led = &led[..];
    let at = |name: &str| -> Result<String, String> {
        match args.node_route {
            Route::Balancer => Ok(endpoint.to_string()),
            Route::Leader => leader_of(name, shards, led)
                .map(|node| leaders[node].endpoint.clone())
                .ok_or_else(|| format!("no node said it leads {name}'s shard")),
        }
    };
    let names = queue_names(args.node_layout, QUEUES, shards, led);
    let queue_at = names
        .iter()
        .map(|name| at(name))
        .collect::<Result<_, _>>()?;
    let mut queues = Vec::new();
    for name in &names {
        queues.push(create_fifo_queue(client, endpoint, name).await);
    }
    in_their_shards(client, endpoint, &names, shards).await?;
    let mut topics = Vec::new();
    let mut topic_names = Vec::new();
    let mut topic_at = Vec::new();
    if matches!(load, NodeLoad::Fanout | NodeLoad::FanoutPaced(_)) {
        let count = topic_count(producers(args));
        for t in 0..count {
            let subscribed: Vec<usize> = (t..QUEUES).step_by(count).collect();
            // Named apart from its queues: a topic named as one of them would lie in its shard.
            let name = topic_name(args.node_layout, t, &names, &subscribed, shards, led);
            let topic = create_fifo_topic(client, endpoint, &name).await?;
            for &q in &subscribed {
                subscribe_raw(client, endpoint, &topic, &queues[q]).await?;
            }
            topics.push((topic, subscribed));
            topic_at.push(at(&name)?);
            topic_names.push(name);
        }
    }
    let busiest = (
        busiest(&names, shards, led),
        busiest(&topic_names, shards, led),
    );
    Ok(Setup {
        queues,
        queue_at,
        topics,
        topic_at,
        busiest,
    })
}

impl Setup {
    /// How many topics the load publishes to (none but in fan-out).
    pub fn topics_made(&self) -> usize {
        self.topics.len()
    }
}

/// Checks that the server put each queue in the shard the layout counted on, so that a change
/// to how the server hashes keys cannot leave the layout uneven unseen.
async fn in_their_shards(
    client: &reqwest::Client,
    endpoint: &str,
    names: &[String],
    shards: u32,
) -> Result<(), String> {
    let text = client
        .get(format!("{endpoint}/_orderly/queues"))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| format!("listing the queues: {e}"))?
        .text()
        .await
        .map_err(|e| format!("listing the queues: {e}"))?;
    let listed: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("listing the queues: {e}: {text}"))?;
    let listed = listed["queues"].as_array().map_or(&[][..], Vec::as_slice);
    for name in names {
        let shard = listed
            .iter()
            .find(|q| q["name"] == name.as_str())
            .and_then(|q| q["shard"].as_u64());
        let counted = shard_of(shards, name);
        if shard != Some(u64::from(counted)) {
            return Err(format!(
                "queue {name} lies in shard {shard:?}, not {counted} as the bench counts"
            ));
        }
    }
    Ok(())
}

/// The producers of a run: `--node-producers`' first (a node count's run at each of several
/// is given them one at a time), or `--producers`.
pub fn producers(args: &Args) -> usize {
    args.node_producers
        .first()
        .copied()
        .unwrap_or(args.producers)
        .max(1)
}

fn topic_count(producers: usize) -> usize {
    TOPICS.min(producers)
}

/// Runs `load` for the phase (and, but for sends, until every message is delivered or the
/// drain's time is up).
pub async fn run(
    load: NodeLoad,
    args: &Args,
    client: &reqwest::Client,
    setup: &Setup,
) -> Result<Outcome, String> {
    let targets = match load {
        NodeLoad::Send | NodeLoad::Pipeline => QUEUES,
        NodeLoad::Fanout | NodeLoad::FanoutPaced(_) => setup.topics.len(),
    };
    // Producers sharing a target split its groups: each needs one at least.
    let sharing = producers(args).div_ceil(targets.max(1));
    if args.groups < sharing {
        return Err(format!(
            "--groups {} leaves some of the {} producers without a group: {sharing} share a queue or topic",
            args.groups,
            producers(args)
        ));
    }
    match load {
        NodeLoad::Send => Ok(send(args, client, setup).await),
        NodeLoad::Pipeline => pipeline(args, client, setup).await,
        NodeLoad::Fanout => fanout(args, client, setup, None).await,
        NodeLoad::FanoutPaced(rate) => fanout(args, client, setup, Some(rate)).await,
    }
}

/// Producer `p`'s share of `targets` queues or topics and `groups` groups, so that every
/// (target, group) pair belongs to one producer and its sequence numbers follow send order:
/// with no more producers than targets, whole targets in turn; with more, one target each,
/// its groups split among the producers sharing it.
fn share(p: usize, producers: usize, targets: usize, groups: usize) -> (Vec<usize>, Vec<usize>) {
    if producers <= targets {
        return (
            (p..targets).step_by(producers).collect(),
            (0..groups).collect(),
        );
    }
    let target = p % targets;
    let sharing = (producers - target).div_ceil(targets);
    let owned = (p / targets..groups).step_by(sharing).collect();
    (vec![target], owned)
}

/// Batched sends to the queues in turn, nothing received: the scenario's first load.
async fn send(args: &Args, client: &reqwest::Client, setup: &Setup) -> Outcome {
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let count = producers(args);
    let started = Instant::now();
    let tasks: Vec<_> = (0..count)
        .map(|p| {
            let (targets, groups) = share(p, count, QUEUES, args.groups);
            let queues: Vec<(String, String)> = targets
                .iter()
                .map(|&q| (setup.queue_at[q].clone(), setup.queues[q].clone()))
                .collect();
            let client = client.clone();
            let (stop, errors, size) = (stop.clone(), errors.clone(), args.body_size);
            tokio::spawn(async move {
                let mut producer = Producer::new(queues.len(), groups);
                let (mut sent, mut latencies) = (0u64, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let (queue, entries) = producer.next_batch();
                    let (endpoint, url) = &queues[queue];
                    let asked = Instant::now();
                    match send_batch(&client, endpoint, url, &entries, size, true).await {
                        Ok(n) => {
                            sent += n;
                            latencies.push(asked.elapsed().as_micros() as u64);
                        }
                        Err(e) => {
                            producer.give_back(queue, &entries);
                            if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("nodes: send error: {e}");
                            }
                        }
                    }
                }
                (sent, latencies)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut messages, mut latencies) = (0, Vec::new());
    for task in tasks {
        let (sent, took) = task.await.unwrap_or_default();
        messages += sent;
        latencies.extend(took);
    }
    latencies.sort_unstable();
    Outcome {
        messages,
        seconds: started.elapsed().as_secs_f64(),
        latencies,
        errors: errors.load(Ordering::Relaxed),
        order_violations: 0,
        lost: 0,
        receives: 0,
        note: "latency per request".into(),
    }
}

/// A producer's place in its queues and groups: batches of ten go to its queues in turn, each
/// entry the next of its groups with that (queue, group)'s next sequence number.
struct Producer {
    groups: Vec<usize>,
    /// Per queue of the producer, per group of it: the last sequence number used.
    seqs: Vec<Vec<u64>>,
    next_queue: usize,
    next_group: usize,
}

impl Producer {
    fn new(queues: usize, groups: Vec<usize>) -> Producer {
        Producer {
            seqs: vec![vec![0; groups.len()]; queues],
            groups,
            next_queue: 0,
            next_group: 0,
        }
    }

    /// The next request: the index of the queue among the producer's, and its entries.
    fn next_batch(&mut self) -> (usize, Vec<(usize, u64)>) {
        let queue = self.next_queue;
        self.next_queue = (self.next_queue + 1) % self.seqs.len();
        let entries = (0..10)
            .map(|_| {
                let slot = self.next_group;
                self.next_group = (self.next_group + 1) % self.groups.len();
                self.seqs[queue][slot] += 1;
                (self.groups[slot], self.seqs[queue][slot])
            })
            .collect();
        (queue, entries)
    }

    /// A batch that failed leaves no gap in its groups' sequence numbers.
    fn give_back(&mut self, queue: usize, entries: &[(usize, u64)]) {
        for (group, _) in entries {
            if let Some(slot) = self.groups.iter().position(|g| g == group) {
                self.seqs[queue][slot] -= 1;
            }
        }
    }
}

/// Sends to every queue while each queue's consumers receive (long polls of 1 s) and delete,
/// until everything sent is delivered or the drain's time is up.
async fn pipeline(args: &Args, client: &reqwest::Client, setup: &Setup) -> Result<Outcome, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let sent: Vec<Arc<AtomicU64>> = (0..QUEUES).map(|_| Arc::default()).collect();
    let tallies: Vec<Arc<Tally>> = (0..QUEUES)
        .map(|_| Arc::new(Tally::new(args.groups)))
        .collect();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.duration + PIPELINE_DRAIN_SECS);
    let consumers = spawn_consumers(
        (client, args.node_consumers as usize),
        setup,
        (&tallies, &sent),
        &done,
        deadline,
    );
    let count = producers(args);
    let errors = Arc::new(AtomicU64::new(0));
    let producers: Vec<_> = (0..count)
        .map(|p| {
            let (targets, groups) = share(p, count, QUEUES, args.groups);
            let queues: Vec<(String, String, Arc<AtomicU64>)> = targets
                .iter()
                .map(|&q| {
                    let at = setup.queue_at[q].clone();
                    (at, setup.queues[q].clone(), sent[q].clone())
                })
                .collect();
            let client = client.clone();
            let (stop, errors, size) = (stop.clone(), errors.clone(), args.body_size);
            tokio::spawn(async move {
                let mut producer = Producer::new(queues.len(), groups);
                while !stop.load(Ordering::Relaxed) {
                    let (queue, entries) = producer.next_batch();
                    let (endpoint, url, sent) = &queues[queue];
                    match send_batch(&client, endpoint, url, &entries, size, true).await {
                        Ok(n) => {
                            sent.fetch_add(n, Ordering::Relaxed);
                        }
                        Err(e) => {
                            producer.give_back(queue, &entries);
                            if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("nodes: send error: {e}");
                            }
                        }
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    stop.store(true, Ordering::Relaxed);
    for task in producers {
        task.await.map_err(|e| e.to_string())?;
    }
    let producing = started.elapsed().as_secs_f64();
    let total = |counts: &[Arc<AtomicU64>]| counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    let sent_total: u64 = total(&sent);
    let delivered_while_producing: u64 = tallies
        .iter()
        .map(|t| t.received.load(Ordering::Relaxed))
        .sum();
    let mut outcome = drained(&tallies, &sent, (&done, consumers), (started, deadline)).await?;
    outcome.errors += errors.load(Ordering::Relaxed);
    outcome.note = format!(
        "send-to-receive latency; delivered msg/s; while producing, {:.0} sent/s and {:.0} delivered/s ({:.0} %); {}, {:.1} messages a receive{}",
        sent_total as f64 / producing,
        delivered_while_producing as f64 / producing,
        100.0 * delivered_while_producing as f64 / sent_total.max(1) as f64,
        consumers_said(args),
        outcome.messages as f64 / outcome.receives.max(1) as f64,
        undelivered_note(outcome.lost, PIPELINE_DRAIN_SECS)
    );
    Ok(outcome)
}

/// Publishes batches of ten to the topics (each producer to one), paced at `rate` publishes a
/// second in all if given, while each queue's consumers receive and delete what the topics
/// copied there, until every copy is delivered or the drain's time is up.
async fn fanout(
    args: &Args,
    client: &reqwest::Client,
    setup: &Setup,
    rate: Option<u64>,
) -> Result<Outcome, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    // Each queue expects what its topic published: the topic's count, shared by its queues.
    let published: Vec<Arc<AtomicU64>> = (0..setup.topics.len()).map(|_| Arc::default()).collect();
    let mut expected: Vec<Arc<AtomicU64>> = vec![Arc::default(); QUEUES];
    for (t, (_, subscribed)) in setup.topics.iter().enumerate() {
        for &q in subscribed {
            expected[q] = published[t].clone();
        }
    }
    let tallies: Vec<Arc<Tally>> = (0..QUEUES)
        .map(|_| Arc::new(Tally::new(args.groups)))
        .collect();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.duration + FANOUT_DRAIN_SECS);
    let consumers = spawn_consumers(
        (client, args.node_consumers as usize),
        setup,
        (&tallies, &expected),
        &done,
        deadline,
    );
    let count = producers(args);
    let publishers: Vec<_> = (0..count)
        .map(|p| {
            let (targets, groups) = share(p, count, setup.topics.len(), args.groups);
            let topic = setup.topics[targets[0]].0.clone();
            // Each producer publishes batches of ten at its share of the rate, its own share
            // of an interval after the one before, so together they publish evenly.
            let pace = rate.map(|rate| {
                let step = Duration::from_secs_f64(10.0 * count as f64 / rate.max(1) as f64);
                (step, p as f64 / count as f64)
            });
            let task = tokio::spawn(publish_batches(
                client.clone(),
                (setup.topic_at[targets[0]].clone(), topic),
                groups,
                args.body_size,
                (pace, stop.clone()),
            ));
            (targets[0], task)
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    stop.store(true, Ordering::Relaxed);
    let mut errors = 0;
    let mut publishes = 0;
    for (topic, task) in publishers {
        let (n, failed) = task.await.map_err(|e| e.to_string())?;
        published[topic].fetch_add(n, Ordering::Relaxed);
        publishes += n;
        errors += failed;
    }
    let mut outcome = drained(&tallies, &expected, (&done, consumers), (started, deadline)).await?;
    outcome.errors += errors;
    outcome.note = format!(
        "deliveries/s; publish-to-receive latency; {publishes} published to {} topics, each copied to {}; {}, {:.1} messages a receive{}",
        setup.topics.len(),
        subscribed(setup),
        consumers_said(args),
        outcome.messages as f64 / outcome.receives.max(1) as f64,
        undelivered_note(outcome.lost, FANOUT_DRAIN_SECS)
    );
    Ok(outcome)
}

/// The consumers of each queue, as the note says them.
fn consumers_said(args: &Args) -> String {
    match args.node_consumers {
        1 => "one consumer a queue".into(),
        n => format!("{n} consumers a queue"),
    }
}

/// How many queues each topic copies to: "4 queues", or "4–5 queues" when they differ.
fn subscribed(setup: &Setup) -> String {
    let counts = setup.topics.iter().map(|(_, queues)| queues.len());
    let (least, most) = (counts.clone().min().unwrap_or(0), counts.max().unwrap_or(0));
    if least == most {
        format!("{least} queues")
    } else {
        format!("{least}–{most} queues")
    }
}

/// `--node-consumers` consumers for each queue (long polls of 1 s), sharing its tally and
/// checking each group's order (a group's next messages come to whichever consumer once the
/// last ones are deleted, after their check), until the queue's expected count has arrived
/// once `done` is set, or `deadline`.
fn spawn_consumers(
    (client, per_queue): (&reqwest::Client, usize),
    setup: &Setup,
    (tallies, expected): (&[Arc<Tally>], &[Arc<AtomicU64>]),
    done: &Arc<AtomicBool>,
    deadline: Instant,
) -> Consumers {
    Consumers(
        (0..QUEUES)
            .map(|q| {
                (0..per_queue.max(1))
                    .map(|_| {
                        tokio::spawn(consume(
                            client.clone(),
                            setup.queue_at[q].clone(),
                            (setup.queues[q].clone(), 1),
                            tallies[q].clone(),
                            expected[q].clone(),
                            done.clone(),
                            deadline,
                        ))
                    })
                    .collect()
            })
            .collect(),
    )
}

/// The consumers of a run, each queue's together; stopped when dropped: a run that ends early
/// (a producer failed) leaves none polling the next node count's nodes.
struct Consumers(Vec<Vec<tokio::task::JoinHandle<()>>>);

impl Drop for Consumers {
    fn drop(&mut self) {
        for consumer in self.0.iter().flatten() {
            consumer.abort();
        }
    }
}

/// Once the producers have stopped and counted what each queue expects: waits until every
/// queue has what it expects (or its consumers gave up at the deadline) and sums the tallies,
/// the run ending when the last queue got its last message. The consumers still in a long
/// poll then are stopped (what they measured is in their tallies already), so the caller's
/// readings after end with the run.
async fn drained(
    tallies: &[Arc<Tally>],
    expected: &[Arc<AtomicU64>],
    (done, mut consumers): (&AtomicBool, Consumers),
    (started, deadline): (Instant, Instant),
) -> Result<Outcome, String> {
    // SeqCst, with the consumer's count and look at `done`: one of the two sees the other.
    done.store(true, Ordering::SeqCst);
    for (tally, wanted) in tallies.iter().zip(expected) {
        // Everything arrived before the producers were counted: that queue ended now.
        if tally.received.load(Ordering::SeqCst) >= wanted.load(Ordering::Relaxed) {
            let mut finished = tally.finished_at.lock().map_err(|e| e.to_string())?;
            finished.get_or_insert_with(Instant::now);
        }
    }
    loop {
        let mut ended = true;
        for (tally, consumer) in tallies.iter().zip(&consumers.0) {
            let arrived = tally
                .finished_at
                .lock()
                .map_err(|e| e.to_string())?
                .is_some();
            ended &= arrived || consumer.iter().all(|c| c.is_finished());
        }
        // A consumer stuck past its deadline (an answer that never came) is given up on too.
        if ended || Instant::now() > deadline + Duration::from_secs(5) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut failed = None;
    for consumer in std::mem::take(&mut consumers.0).into_iter().flatten() {
        if !consumer.is_finished() {
            consumer.abort();
        } else if let Err(error) = consumer.await {
            // One that panicked says so, rather than show as messages lost.
            failed.get_or_insert(format!("a consumer failed: {error}"));
        }
    }
    if let Some(failed) = failed {
        return Err(failed);
    }
    let mut finished = started;
    let mut latencies = Vec::new();
    let (mut delivered, mut lost) = (0, 0);
    let (mut errors, mut order_violations, mut receives) = (0, 0, 0);
    for (tally, wanted) in tallies.iter().zip(expected) {
        let ended = *tally.finished_at.lock().map_err(|e| e.to_string())?;
        finished = finished.max(ended.unwrap_or_else(Instant::now));
        latencies.append(&mut *tally.latencies.lock().map_err(|e| e.to_string())?);
        let received = tally.received.load(Ordering::Relaxed);
        delivered += received;
        // Per queue: one queue's redeliveries hide no loss of another's.
        lost += wanted.load(Ordering::Relaxed).saturating_sub(received);
        errors += tally.errors.load(Ordering::Relaxed);
        order_violations += tally.violations.load(Ordering::Relaxed);
        receives += tally.receives.load(Ordering::Relaxed);
    }
    latencies.sort_unstable();
    Ok(Outcome {
        messages: delivered,
        seconds: finished.duration_since(started).as_secs_f64(),
        latencies,
        errors,
        order_violations,
        lost,
        receives,
        note: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::{share, Producer};

    /// Every (target, group) pair belongs to exactly one producer, whatever the counts.
    #[test]
    fn each_target_and_group_has_one_producer() {
        for (producers, targets, groups) in [
            (8, 32, 64),
            (32, 32, 64),
            (64, 32, 64),
            (12, 8, 64),
            (3, 8, 5),
        ] {
            let mut owners = vec![vec![0u32; groups]; targets];
            for p in 0..producers {
                let (mine, owned) = share(p, producers, targets, groups);
                assert!(
                    !mine.is_empty() && !owned.is_empty(),
                    "producer {p} of {producers} idle"
                );
                for &t in &mine {
                    for &g in &owned {
                        owners[t][g] += 1;
                    }
                }
            }
            assert!(
                owners.iter().flatten().all(|&n| n == 1),
                "{producers} producers, {targets} targets, {groups} groups: {owners:?}"
            );
        }
    }

    #[test]
    fn a_producer_numbers_each_queue_and_group_on_and_takes_back_a_failed_batch() {
        let mut producer = Producer::new(2, vec![3, 7]);
        let (queue, first) = producer.next_batch();
        assert_eq!(queue, 0);
        assert_eq!(&first[..4], &[(3, 1), (7, 1), (3, 2), (7, 2)]);
        let (queue, second) = producer.next_batch();
        assert_eq!((queue, second[0]), (1, (3, 1)));
        producer.give_back(1, &second);
        let (_, third) = producer.next_batch();
        assert_eq!(third[0], (3, 6), "queue 0 numbers on from its first batch");
        let (queue, fourth) = producer.next_batch();
        assert_eq!(
            (queue, fourth[0]),
            (1, (3, 1)),
            "the failed batch's numbers are used again"
        );
    }
}
