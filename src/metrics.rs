//! `GET /metrics`: Prometheus metrics (OpenMetrics text), with prometheus-client.
//!
//! Per request (kept as they happen, at the cost of an atomic add and a histogram bucket: the
//! counters of each action are looked up once, at start): requests and their duration per
//! action, errors per action and code. Per queue and per webhook subscription (read from the
//! backend at scrape time, so the hot paths pay nothing for them): messages by state, age of
//! the oldest message, FIFO groups and locked groups; webhook deliveries pending, in flight,
//! delivered, retried, dead-lettered and dropped.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::backend::{SubscriptionActivity, TopicActivity};
use crate::engine::queue::inspect::QueueOverview;
use crate::engine::webhook::outbox::LaneStats;
use crate::engine::Timestamp;
use crate::persist::log_metrics::LogMetrics;
use crate::protocol::{Action, SnsAction, SqsAction};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    service: &'static str,
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    service: &'static str,
    action: &'static str,
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
    fifo: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueStateLabels {
    queue: String,
    fifo: &'static str,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeadLetterLabels {
    queue: String,
    target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SubscriptionLabels {
    subscription: String,
}

fn duration_histogram() -> Histogram {
    // 0.5 ms to about 33 s: fast answers through long polls of up to 20 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 17))
}

/// One action's request counter and duration histogram, resolved once.
#[derive(Clone)]
struct ActionMetrics {
    requests: Counter,
    duration: Histogram,
}

/// What a scrape reads from the backend.
pub struct Scraped {
    pub queues: Vec<QueueOverview>,
    pub topics: Vec<TopicActivity>,
    pub subscriptions: Vec<SubscriptionActivity>,
    pub webhooks: Vec<(std::sync::Arc<str>, LaneStats)>,
    /// Parcels waiting to cross between shards, by (from, to).
    pub relay: Vec<crate::backend::RelayWaiting>,
    /// This node's role among nodes (`leader`, `standby` or `single`), the lease's epoch and
    /// the records it has still to apply.
    pub role: &'static str,
    pub epoch: u64,
    pub lag: u64,
    /// How many shards the key space is cut into, and how many of them this node leads.
    pub shards: u32,
    pub shards_led: usize,
    /// Each shard's log this node writes or follows.
    pub logs: Vec<ShardLogFigures>,
    /// On a leader: whether an acknowledged write survives a failover of the database.
    pub synchronous_replication: Option<bool>,
    /// Queue subscriptions whose queue's policy would keep SNS's copies out on AWS.
    pub aws_would_refuse: Vec<std::sync::Arc<str>>,
}

/// One shard's log as this node has it: the epoch of its lease on it (a leader's), the records
/// written or applied here, and those its leader has that this node has not applied.
pub struct ShardLogFigures {
    pub shard: u32,
    pub epoch: Option<u64>,
    pub applied: u64,
    pub lag: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerLabels {
    worker: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RelayLabels {
    from: u32,
    to: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    shard: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabels {
    role: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// How a request a standby passed on to the leader ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForwardOutcome {
    /// The leader's answer, whatever it said, was handed back.
    Answered,
    /// No leader was reached: nothing of the request was kept.
    NotSent,
    /// The leader was reached but its answer was lost: the outcome is unknown.
    Unknown,
}

impl ForwardOutcome {
    const ALL: [ForwardOutcome; 3] = [Self::Answered, Self::NotSent, Self::Unknown];

    fn label(self) -> &'static str {
        match self {
            Self::Answered => "answered",
            Self::NotSent => "not_sent",
            Self::Unknown => "unknown",
        }
    }
}

/// Requests this node passed on to the leader while a standby, by outcome (all at zero on a
/// node that never was one).
/// And the attempts made on a link between nodes rather than as HTTP requests, the writes that
/// carried their frames, and the requests sent straight to their queue's or topic's shard as
/// learned.
#[derive(Clone)]
pub struct Forwarded(Family<OutcomeLabels, Counter>, Counter, Counter, Counter);

impl Default for Forwarded {
    fn default() -> Self {
        let family = Family::<OutcomeLabels, Counter>::default();
        for outcome in ForwardOutcome::ALL {
            let _at_zero = family.get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            });
        }
        Forwarded(
            family,
            Counter::default(),
            Counter::default(),
            Counter::default(),
        )
    }
}

impl Forwarded {
    pub fn count(&self, outcome: ForwardOutcome) {
        self.0
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .inc();
    }

    /// An attempt to pass a request on was made on a link (`http::link_client`), whatever
    /// became of it.
    pub fn count_link(&self) {
        self.1.inc();
    }

    /// What counts the writes of requests' frames on links (`http::link_client`).
    pub fn link_writes(&self) -> Counter {
        self.2.clone()
    }

    /// A request was sent straight to the node leading its queue's or topic's shard, as
    /// learned from an earlier one (`http::learned_routes`), not run here first, and that node
    /// took it.
    pub fn count_straight(&self) {
        self.3.inc();
    }
}

/// The figures of the logs kept here, each with its shard's number.
pub type ShardLogs = Vec<(u32, std::sync::Arc<LogMetrics>)>;

pub struct Metrics {
    /// Connections open now (the HTTP server keeps it).
    pub open_connections: Gauge,
    /// Of them, those other nodes hold in slots of their own, outside `--max-connections`
    /// (the HTTP server keeps it).
    pub peer_connections: Gauge,
    /// ReceiveMessage calls waiting for a message now (the backend keeps it).
    pub long_polls_waiting: Gauge,
    /// Set once the logs are open (a data directory, or a database this node leads): the key
    /// space's shard count, and the logs of the shards kept here by number, changed as a node
    /// hands shards off and takes others.
    logs: std::sync::RwLock<Option<(u32, ShardLogs)>>,
    /// Kept by the standby's forwarding (`http::standby`).
    pub forwarded: Forwarded,
    /// This node's clock minus the database's, as read when it last took the lease.
    pub clock_skew_ms: Gauge,
    /// Generations a node on a database has started (`app::succession`).
    pub generations: Counter,
    /// Sends answered after the requests ready meanwhile, their queue's consumers behind
    /// (`service::pace`).
    pub sends_paced: Counter,
    requests: Family<ActionLabels, Counter>,
    durations: Family<ActionLabels, Histogram, fn() -> Histogram>,
    errors: Family<ErrorLabels, Counter>,
    sqs: Vec<ActionMetrics>,
    sns: Vec<ActionMetrics>,
}

impl Default for Metrics {
    fn default() -> Self {
        let requests = Family::<ActionLabels, Counter>::default();
        let durations: Family<ActionLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(duration_histogram);
        let resolve = |service: &'static str, action: &'static str| {
            let labels = ActionLabels { service, action };
            ActionMetrics {
                requests: requests.get_or_create(&labels).clone(),
                duration: durations.get_or_create(&labels).clone(),
            }
        };
        // Indexed by the action's position in its enum (declaration order).
        let sqs = SqsAction::ALL
            .iter()
            .map(|a| resolve("sqs", a.name()))
            .collect();
        let sns = SnsAction::ALL
            .iter()
            .map(|a| resolve("sns", a.name()))
            .collect();
        Metrics {
            open_connections: Gauge::default(),
            peer_connections: Gauge::default(),
            long_polls_waiting: Gauge::default(),
            logs: Default::default(),
            forwarded: Forwarded::default(),
            clock_skew_ms: Gauge::default(),
            generations: Counter::default(),
            sends_paced: Counter::default(),
            requests,
            durations,
            errors: Family::default(),
            sqs,
            sns,
        }
    }
}

fn labels(action: Action) -> (&'static str, &'static str) {
    match action {
        Action::Sqs(a) => ("sqs", a.name()),
        Action::Sns(a) => ("sns", a.name()),
    }
}

impl Metrics {
    /// The figures of a node's next service (after it stepped down): the counters carry on,
    /// so a scrape never sees them go back; the long polls and the log are the new service's.
    pub fn continuing(previous: &Metrics) -> Metrics {
        Metrics {
            open_connections: previous.open_connections.clone(),
            peer_connections: previous.peer_connections.clone(),
            long_polls_waiting: Gauge::default(),
            logs: Default::default(),
            forwarded: previous.forwarded.clone(),
            clock_skew_ms: previous.clock_skew_ms.clone(),
            generations: previous.generations.clone(),
            sends_paced: previous.sends_paced.clone(),
            requests: previous.requests.clone(),
            durations: previous.durations.clone(),
            errors: previous.errors.clone(),
            sqs: previous.sqs.clone(),
            sns: previous.sns.clone(),
        }
    }

    /// The figures of the logs of the shards this node keeps, each with its shard's number,
    /// reported from now on: as they are when the key space is one shard, labelled with
    /// `shard` when it is cut into several.
    pub fn set_logs(&self, shards: u32, logs: ShardLogs) {
        let mut set = self.logs.write().unwrap_or_else(|p| p.into_inner());
        if set.is_none() {
            *set = Some((shards, logs));
        }
    }

    /// The figures of the log of shard `shard`, taken while the node serves, reported too
    /// (once `set_logs` said how many shards there are).
    pub fn add_log(&self, shard: u32, log: std::sync::Arc<LogMetrics>) {
        let mut set = self.logs.write().unwrap_or_else(|p| p.into_inner());
        if let Some((_, logs)) = set.as_mut() {
            logs.retain(|(kept, _)| *kept != shard);
            logs.push((shard, log));
            logs.sort_by_key(|(kept, _)| *kept);
        }
    }

    /// The figures of the log of shard `shard`, handed to another node, reported no more.
    pub fn remove_log(&self, shard: u32) {
        let mut set = self.logs.write().unwrap_or_else(|p| p.into_inner());
        if let Some((_, logs)) = set.as_mut() {
            logs.retain(|(kept, _)| *kept != shard);
        }
    }

    /// One request answered, with its error code if it failed.
    pub fn record(&self, action: Action, took: Duration, error: Option<&'static str>) {
        let slot = match action {
            Action::Sqs(a) => self.sqs.get(a as usize),
            Action::Sns(a) => self.sns.get(a as usize),
        };
        if let Some(slot) = slot {
            slot.requests.inc();
            slot.duration.observe(took.as_secs_f64());
        }
        if let Some(code) = error {
            let (service, action) = labels(action);
            self.errors
                .get_or_create(&ErrorLabels {
                    service,
                    action,
                    code,
                })
                .inc();
        }
    }

    /// The text a scrape answers: the request metrics, and the queues, topics and
    /// subscriptions as they are at `now`.
    pub fn render(&self, state: &Scraped, now: Timestamp) -> String {
        let mut registry = Registry::with_prefix("orderly");
        registry.register(
            "requests",
            "Requests answered, per action",
            self.requests.clone(),
        );
        registry.register(
            "request_errors",
            "Requests answered with an error, per action and error code",
            self.errors.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from a decoded request to its answer, per action (long polls included)",
            self.durations.clone(),
        );
        registry.register(
            "open_connections",
            "HTTP connections open",
            self.open_connections.clone(),
        );
        registry.register(
            "peer_connections",
            "Of the connections open, those other nodes hold outside --max-connections",
            self.peer_connections.clone(),
        );
        registry.register(
            "long_polls_waiting",
            "ReceiveMessage calls waiting for a message",
            self.long_polls_waiting.clone(),
        );
        registry.register(
            "sends_paced",
            "Sends answered after the requests ready meanwhile, their queue's receives coming back full",
            self.sends_paced.clone(),
        );
        match &*self.logs.read().unwrap_or_else(|p| p.into_inner()) {
            Some((1, logs)) => (logs.iter()).for_each(|(_, log)| log.register(&mut registry)),
            Some((_, logs)) => crate::persist::log_metrics::register_shards(logs, &mut registry),
            None => {}
        }
        let role = Family::<RoleLabels, Gauge>::default();
        for name in ["leader", "standby", "single"] {
            role.get_or_create(&RoleLabels { role: name })
                .set(i64::from(name == state.role));
        }
        registry.register("cluster_role", "1 for this node's role among nodes", role);
        let value = |n: u64| {
            let gauge = Gauge::<i64>::default();
            gauge.set(i64::try_from(n).unwrap_or(i64::MAX));
            gauge
        };
        registry.register(
            "cluster_epoch",
            "The epoch of the lease on the log (0 without one)",
            value(state.epoch),
        );
        registry.register(
            "cluster_lag_records",
            "Log records the leader has that this node has not applied",
            value(state.lag),
        );
        registry.register(
            "cluster_shards",
            "How many shards the key space is cut into, each with a log and a lease of its own",
            value(u64::from(state.shards)),
        );
        registry.register(
            "cluster_shards_led",
            "How many shards this node leads (all of them when single, none on a standby)",
            value(state.shards_led as u64),
        );
        let (applied, lag, epoch) = (
            Family::<ShardLabels, Gauge>::default(),
            Family::<ShardLabels, Gauge>::default(),
            Family::<ShardLabels, Gauge>::default(),
        );
        let set = |family: &Family<ShardLabels, Gauge>, shard: u32, n: u64| {
            (family.get_or_create(&ShardLabels { shard }))
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        };
        for log in &state.logs {
            set(&applied, log.shard, log.applied);
            set(&lag, log.shard, log.lag);
            if let Some(at) = log.epoch {
                set(&epoch, log.shard, at);
            }
        }
        if !state.logs.is_empty() {
            registry.register(
                "shard_log_records",
                "Records of each shard's log written here (a leader, or single) or applied (a \
                 standby)",
                applied,
            );
            registry.register(
                "shard_lag_records",
                "Records each shard's leader has that this node has not applied",
                lag,
            );
        }
        if state.logs.iter().any(|log| log.epoch.is_some()) {
            registry.register(
                "shard_epoch",
                "The epoch of this node's lease on each shard it leads",
                epoch,
            );
        }
        let relay = Family::<RelayLabels, Gauge>::default();
        for waiting in &state.relay {
            let labels = RelayLabels {
                from: waiting.from,
                to: waiting.to,
            };
            relay
                .get_or_create(&labels)
                .set(i64::try_from(waiting.parcels).unwrap_or(i64::MAX));
        }
        registry.register(
            "relay_waiting_parcels",
            "Parcels (a topic's copies, dead letters, moved messages) one shard made for another \
             that the other has not applied yet",
            relay,
        );
        if let Some(promise) = state.synchronous_replication {
            let synchronous = Gauge::<i64>::default();
            synchronous.set(i64::from(promise));
            registry.register(
                "cluster_synchronous_replication",
                "On a leader: 1 while an acknowledged write survives a failover of the database \
                 (a synchronous standby and commits that wait for it), else 0",
                synchronous,
            );
        }
        registry.register(
            "clock_skew_milliseconds",
            "This node's clock minus the database's, read when it last took the lease (0 \
             before); the engine keeps the database's time, so a failover moves no deadline",
            self.clock_skew_ms.clone(),
        );
        registry.register(
            "generations",
            "Times this node started serving anew on its database, its first start included: \
             as a standby, as a leader, or once its share of the shards moved (0 on a data \
             directory or in memory)",
            self.generations.clone(),
        );
        registry.register(
            "forwarded_requests",
            "Requests passed on to the leader while this node was a standby, or to the leader of \
             a shard this node does not lead, by outcome",
            self.forwarded.0.clone(),
        );
        registry.register(
            "forwarded_on_link_requests",
            "Attempts to pass a request on made on a link between nodes (--node-link) rather than \
             as HTTP requests, whatever their outcome",
            self.forwarded.1.clone(),
        );
        registry.register(
            "link_writes",
            "Writes that carried requests' frames on links between nodes: requests passed on \
             together share one, so forwarded_on_link_requests over this is the frames a write",
            self.forwarded.2.clone(),
        );
        registry.register(
            "forwarded_straight_requests",
            "Requests passed on straight, without running them here first, that the node \
             passed to took (answered, or of unknown outcome): their queue's or topic's shard learned from an earlier request on \
             it (sends, receives, deletes and changes of visibility, publishes); one that no \
             node took is run here and not counted",
            self.forwarded.3.clone(),
        );
        register_workers(&mut registry);
        // A standby's engine follows the leader's: its figures would count each queue twice in
        // a sum over nodes, so only the leader (or a single node) reports them.
        if state.role != "standby" {
            register_queues(&mut registry, &state.queues, now);
            register_topics(&mut registry, &state.topics, &state.subscriptions);
            register_webhooks(&mut registry, &state.webhooks);
            let refused = Family::<SubscriptionLabels, Gauge>::default();
            for arn in &state.aws_would_refuse {
                let labels = SubscriptionLabels {
                    subscription: arn.to_string(),
                };
                refused.get_or_create(&labels).set(1);
            }
            registry.register(
                "subscription_aws_would_refuse",
                "1 for a queue subscription whose queue's policy would keep SNS's copies out on AWS (delivered here unless --enforce-queue-policies)",
                refused,
            );
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

/// This process's background loops: how many of each run, and how often they failed.
fn register_workers(registry: &mut Registry) {
    let running = Family::<WorkerLabels, Gauge>::default();
    let failures = Family::<WorkerLabels, Counter>::default();
    for (worker, figures) in crate::worker::figures() {
        let labels = WorkerLabels { worker };
        running
            .get_or_create(&labels)
            .set(i64::try_from(figures.running).unwrap_or(i64::MAX));
        failures.get_or_create(&labels).inc_by(figures.failures);
    }
    registry.register(
        "workers_running",
        "Background loops of this process running now, by worker",
        running,
    );
    registry.register(
        "worker_failures",
        "Failures background loops waited out before trying again, by worker",
        failures,
    );
}

fn register_queues(registry: &mut Registry, queues: &[QueueOverview], now: Timestamp) {
    let messages = Family::<QueueStateLabels, Gauge>::default();
    let oldest = Family::<QueueLabels, Gauge>::default();
    let groups = Family::<QueueLabels, Gauge>::default();
    let locked = Family::<QueueLabels, Gauge>::default();
    let dead_letter = Family::<DeadLetterLabels, Gauge>::default();
    let activity: [(&str, &str, Family<QueueLabels, Counter>); 6] = [
        (
            "queue_sent",
            "Messages stored by a send or publish",
            Family::default(),
        ),
        (
            "queue_deduplicated",
            "Sends suppressed as duplicates",
            Family::default(),
        ),
        (
            "queue_received",
            "Messages handed to a receive",
            Family::default(),
        ),
        ("queue_deleted", "Messages deleted", Family::default()),
        (
            "queue_dead_lettered",
            "Messages moved to the dead-letter queue",
            Family::default(),
        ),
        (
            "queue_expired",
            "Messages dropped at the end of their retention",
            Family::default(),
        ),
    ];
    for q in queues {
        let counts = [
            q.activity.sent,
            q.activity.deduplicated,
            q.activity.received,
            q.activity.deleted,
            q.activity.dead_lettered,
            q.activity.expired,
        ];
        let labels = QueueLabels {
            queue: q.name.to_string(),
            fifo: if q.fifo { "true" } else { "false" },
        };
        for ((_, _, family), count) in activity.iter().zip(counts) {
            family.get_or_create(&labels).inc_by(count);
        }
        if let Some(target) = q.dead_letter_target_arn.as_deref() {
            let labels = DeadLetterLabels {
                queue: q.name.to_string(),
                target: target.rsplit(':').next().unwrap_or(target).to_string(),
            };
            dead_letter.get_or_create(&labels).set(1);
        }
        let fifo = if q.fifo { "true" } else { "false" };
        let queue = QueueLabels {
            queue: q.name.to_string(),
            fifo,
        };
        for (state, count) in [
            ("visible", q.counts.visible),
            ("in_flight", q.counts.in_flight),
            ("delayed", q.counts.delayed),
        ] {
            let labels = QueueStateLabels {
                queue: queue.queue.clone(),
                fifo,
                state,
            };
            messages.get_or_create(&labels).set(gauge(count as u64));
        }
        let age = q
            .oldest_enqueued_at
            .map_or(0, |at| now.millis_since(at) / 1000);
        oldest.get_or_create(&queue).set(gauge(age));
        if q.fifo {
            groups.get_or_create(&queue).set(gauge(q.groups as u64));
            locked
                .get_or_create(&queue)
                .set(gauge(q.locked_groups as u64));
        }
    }
    registry.register("queue_messages", "Messages in a queue, by state", messages);
    for (name, help, family) in activity {
        registry.register(name, help, family);
    }
    registry.register(
        "queue_oldest_message_age_seconds",
        "Age of the longest-held message (0 when empty)",
        oldest,
    );
    registry.register("queue_groups", "FIFO groups holding messages", groups);
    registry.register(
        "queue_dead_letter_target",
        "1 for each queue (queue) whose redrive policy names a dead-letter queue (target)",
        dead_letter,
    );
    registry.register(
        "queue_locked_groups",
        "FIFO groups with a message in flight",
        locked,
    );
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TopicLabels {
    topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CopyLabels {
    topic: String,
    subscription: String,
    fate: &'static str,
}

fn last_part(arn: &str) -> String {
    arn.rsplit(':').next().unwrap_or(arn).to_string()
}

fn register_topics(
    registry: &mut Registry,
    topics: &[TopicActivity],
    subscriptions: &[SubscriptionActivity],
) {
    let published = Family::<TopicLabels, Counter>::default();
    let deduplicated = Family::<TopicLabels, Counter>::default();
    for t in topics {
        let labels = TopicLabels {
            topic: last_part(&t.arn),
        };
        published.get_or_create(&labels).inc_by(t.published);
        deduplicated.get_or_create(&labels).inc_by(t.deduplicated);
    }
    let copies = Family::<CopyLabels, Counter>::default();
    for s in subscriptions {
        for (fate, count) in &s.counts {
            let labels = CopyLabels {
                topic: last_part(&s.topic_arn),
                subscription: s.subscription.arn.to_string(),
                fate: fate.name(),
            };
            copies.get_or_create(&labels).inc_by(*count);
        }
    }
    registry.register("topic_published", "Publishes accepted", published);
    registry.register(
        "topic_deduplicated",
        "FIFO publishes suppressed as duplicates",
        deduplicated,
    );
    registry.register(
        "subscription_copies",
        "What became of each published message for a subscription: queued, deadLettered, filteredOut, failed, toWebhook",
        copies,
    );
}

fn register_webhooks(registry: &mut Registry, webhooks: &[(std::sync::Arc<str>, LaneStats)]) {
    let pending = Family::<SubscriptionLabels, Gauge>::default();
    let in_flight = Family::<SubscriptionLabels, Gauge>::default();
    let delivered = Family::<SubscriptionLabels, Counter>::default();
    let retried = Family::<SubscriptionLabels, Counter>::default();
    let dead_lettered = Family::<SubscriptionLabels, Counter>::default();
    let dropped = Family::<SubscriptionLabels, Counter>::default();
    for (arn, stats) in webhooks {
        let labels = SubscriptionLabels {
            subscription: arn.to_string(),
        };
        pending
            .get_or_create(&labels)
            .set(gauge(stats.pending as u64));
        in_flight
            .get_or_create(&labels)
            .set(gauge(stats.in_flight as u64));
        delivered.get_or_create(&labels).inc_by(stats.delivered);
        retried.get_or_create(&labels).inc_by(stats.retries);
        dead_lettered
            .get_or_create(&labels)
            .inc_by(stats.dead_lettered);
        dropped.get_or_create(&labels).inc_by(stats.dropped);
    }
    registry.register("webhook_pending", "Webhook notifications waiting", pending);
    registry.register("webhook_in_flight", "Webhook requests in flight", in_flight);
    registry.register(
        "webhook_delivered",
        "Webhook notifications delivered",
        delivered,
    );
    registry.register("webhook_retried", "Webhook attempts retried", retried);
    registry.register(
        "webhook_dead_lettered",
        "Webhook notifications moved to a dead-letter queue",
        dead_lettered,
    );
    registry.register(
        "webhook_dropped",
        "Webhook notifications given up with no dead-letter queue",
        dropped,
    );
}

fn gauge(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
