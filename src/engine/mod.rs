//! The pure engine: queues and their rules. No tokio, axum, file I/O or clock reads: every
//! operation takes `now`. Each queue sits behind its own mutex (never held across an await by
//! callers); the registry lock is held only to look a queue up, create or delete one.
//!
//! `W` is a per-queue slot the caller owns (the server keeps a long-poll notifier there), so
//! the engine stays free of any async runtime.
//!
//! An `Engine` is made of parts, each with its own state and its methods in one place: the
//! queues (`queues`), the topics with their subscriptions and fan-out (`topics`), the webhook
//! outbox and tokens (`webhooks`), the message move tasks (`redrive`) and the mobile
//! state (`mobile`). A part that needs another takes it as an argument; the engine itself only
//! holds them, hands each the log, and answers for the operations that span parts.

pub mod body;
pub mod changes;
pub mod dedup;
mod digest;
pub mod error;
mod fast_map;
pub mod guard;
mod logged;
pub mod message;
pub mod mobile;
pub mod move_task;
pub mod namespace;
pub mod parcel;
pub mod policy;
pub mod queue;
pub mod queues;
pub mod redrive;
pub mod relay;
pub mod shard;
mod tags;
pub mod time;
pub mod topic;
pub mod topics;
pub mod webhook;
pub mod webhooks;
mod window;

use std::sync::Arc;

pub use changes::{Change, ChangeLog};
pub use error::{EngineError, EngineResult};
pub use fast_map::FastMap;
use guard::{Guard, LoggedLock};
pub use message::check_xml_text;
pub use queue::{Queue, QueueConfig, ReceiveOutcome, ReceiveRequest};
pub use queues::{Deferred, QueueEntry, QueueGuard, Queues};
use redrive::MoveTasks;
pub use tags::{check_tag_count, check_tag_text, check_tags};
pub use time::Timestamp;
use topic::subscription::Subscribed;
use topic::PublishRequest;
use topics::subscribing::Confirming;
pub use topics::{Fanout, TopicEntry, Topics};
use webhook::{Attempt, Outcome};
pub use webhooks::{AttemptResult, Webhooks};

/// Where queues and topics live, by key (`namespace`: a bare name at home).
pub struct Engine<W> {
    pub namespaces: namespace::Namespaces,
    pub queues: Queues<W>,
    pub topics: Topics,
    pub webhooks: Webhooks,
    pub move_tasks: MoveTasks,
    /// Copies for queues in other shards, and those other shards' engines handed this one.
    pub relay: relay::Relay,
    /// Platform applications and endpoints, SMS settings and numbers.
    mobile: LoggedLock<mobile::Mobile>,
    /// Where changes are logged; `None` runs in memory only.
    change_log: Option<Arc<dyn ChangeLog>>,
}

impl<W: Default> Engine<W> {
    pub fn new(account_id: &str, region: &str) -> Self {
        Engine::for_shard(account_id, region, shard::Shard::WHOLE)
    }

    /// The engine of one shard of a key space: a publish's copy for a queue of another shard
    /// is kept for that shard's engine (`relay`).
    pub fn for_shard(account_id: &str, region: &str, shard: shard::Shard) -> Self {
        let namespaces = namespace::Namespaces::new(namespace::Namespace::new(region, account_id));
        Engine {
            queues: Queues::new(namespaces.clone()).in_shard(shard),
            topics: Topics::new(namespaces.clone()),
            webhooks: Webhooks::default(),
            move_tasks: MoveTasks::new(namespaces.clone()),
            relay: relay::Relay::new(shard, namespaces.clone()),
            namespaces,
            mobile: LoggedLock::new(mobile::Mobile::default(), None),
            change_log: None,
        }
    }

    /// Logs every later change to `change_log`. Set before the first request.
    pub fn set_log(&mut self, change_log: Arc<dyn ChangeLog>) {
        self.queues.set_log(change_log.clone());
        self.topics.set_log(change_log.clone());
        self.webhooks.set_log(change_log.clone());
        self.move_tasks.set_log(change_log.clone());
        self.mobile.set_log(change_log.clone());
        self.relay.set_log(change_log.clone());
        self.change_log = Some(change_log);
    }

    /// Keeps the changes made while the returned guard lives in one write of the log.
    fn atomic(&self) -> changes::Atomic<'_> {
        changes::Atomic::new(self.change_log.as_deref())
    }

    /// Platform applications, endpoints and SMS state; what changes is logged on release.
    pub fn mobile(&self) -> Guard<'_, mobile::Mobile> {
        self.mobile.lock()
    }

    /// The mobile state as changes that make it, and the log position they are cut at.
    pub fn mobile_image(&self, next_lsn: impl Fn() -> u64) -> (u64, Vec<mobile::MobileChange>) {
        let mobile = self.mobile.lock_unlogged();
        (next_lsn(), mobile.image())
    }

    /// Applies mobile changes read back from the log or a snapshot (not logged again).
    pub fn restore_mobile(&self, changes: Vec<mobile::MobileChange>) {
        let mut mobile = self.mobile.lock_unlogged();
        for change in changes {
            mobile.apply(change);
        }
    }

    /// Applies one logged change to the part it belongs to (never logged again).
    pub fn replay_change(&self, change: Change) {
        match change {
            change @ (Change::CreateQueue { .. }
            | Change::DeleteQueue { .. }
            | Change::Queue { .. }
            | Change::ReceiptKey { .. }) => self.queues.replay_change(change),
            change
            @ (Change::Topic { .. } | Change::DeleteTopic { .. } | Change::Signer { .. }) => {
                self.topics.replay_change(change)
            }
            change @ (Change::Outbox(_) | Change::Token(_)) => self.webhooks.replay_change(change),
            Change::MoveTask(task) => self.move_tasks.restore(*task),
            Change::Mobile(changes) => self.restore_mobile(changes),
            Change::Relay(changes) => self.relay.restore(changes),
        }
    }

    /// Publish: the topic decides (validation, dedup, sequence), then each subscription gets
    /// its copy, all under the topic lock. `unsubscribe_base` is the URL clients reach us at.
    pub fn publish(
        &self,
        topic_arn: &str,
        req: &PublishRequest,
        unsubscribe_base: &str,
        now: Timestamp,
    ) -> EngineResult<Fanout<W>> {
        let to = (&self.queues, &self.webhooks, &self.relay);
        self.topics
            .publish(to, topic_arn, req, unsubscribe_base, now)
    }

    /// Replays a subscription's ReplayPolicy window from its topic's archive; answers the
    /// queues that received copies.
    pub fn replay(
        &self,
        subscription_arn: &str,
        unsubscribe_base: &str,
        now: Timestamp,
    ) -> EngineResult<Vec<Arc<QueueEntry<W>>>> {
        let to = (&self.queues, &self.webhooks, &self.relay);
        self.topics
            .replay(to, subscription_arn, unsubscribe_base, now)
    }

    /// ReceiveMessage on one queue (`Queues::receive`), its dead letters handed to the relay
    /// when its dead-letter queue is in another shard.
    #[allow(clippy::type_complexity)]
    pub fn receive(
        &self,
        entry: &QueueEntry<W>,
        req: &ReceiveRequest,
        now: Timestamp,
    ) -> EngineResult<(ReceiveOutcome, Option<Arc<QueueEntry<W>>>)> {
        self.queues.receive(entry, req, now, &self.relay)
    }

    /// Applies parcels another shard's engine kept for this one (`Relay::receive`).
    pub fn receive_parcels(
        &self,
        from: u32,
        parcels: &[parcel::Parcel],
        now: Timestamp,
    ) -> relay::Received<W> {
        self.relay.receive(&self.queues, from, parcels, now)
    }

    /// Subscribe (`Topics::subscribe`); `base_url` is where clients reach this server.
    #[allow(clippy::too_many_arguments)]
    pub fn subscribe(
        &self,
        topic_arn: &str,
        protocol: &str,
        endpoint: Option<&str>,
        attrs: &[(String, String)],
        base_url: &str,
        principal: Option<&str>,
        now: Timestamp,
    ) -> EngineResult<Subscribed> {
        let parts = (&self.queues, self.confirming(base_url));
        let request = (topic_arn, protocol, endpoint, attrs);
        self.topics.subscribe(parts, request, principal, now)
    }

    /// Unsubscribe (`Topics::unsubscribe`).
    pub fn unsubscribe(
        &self,
        subscription_arn: &str,
        authenticated: bool,
        base_url: &str,
        now: Timestamp,
    ) -> EngineResult<()> {
        let confirming = self.confirming(base_url);
        self.topics
            .unsubscribe(confirming, subscription_arn, authenticated, now)
    }

    fn confirming<'a>(&'a self, base_url: &'a str) -> Confirming<'a> {
        Confirming {
            webhooks: &self.webhooks,
            relay: &self.relay,
            base_url,
        }
    }

    /// ConfirmSubscription (`Topics::confirm_subscription`).
    pub fn confirm_subscription(
        &self,
        topic_arn: &str,
        token: &str,
        authenticate_on_unsubscribe: bool,
        authenticated: bool,
        now: Timestamp,
    ) -> EngineResult<Arc<str>> {
        let how = (authenticate_on_unsubscribe, authenticated);
        self.topics
            .confirm_subscription(&self.webhooks, topic_arn, token, how, now)
    }

    /// Deletes subscriptions still pending when their token expires.
    pub fn expire_confirmations(&self, now: Timestamp) {
        self.topics.expire_confirmations(&self.webhooks, now);
    }

    /// Keeps `error` as the subscription's last delivery error.
    pub fn note_delivery_error(&self, subscription_arn: &str, error: &str, now: Timestamp) {
        self.topics
            .note_delivery_error(&self.webhooks, subscription_arn, error, now);
    }

    /// DeleteTopic, with its subscriptions' pending deliveries.
    pub fn delete_topic(&self, arn: &str) -> EngineResult<()> {
        self.topics.delete(arn, &self.webhooks)
    }

    /// Records a webhook attempt's outcome (`Webhooks::finish`).
    pub fn finish_delivery(
        &self,
        attempt: &Attempt,
        outcome: Outcome,
        now: Timestamp,
    ) -> AttemptResult<W> {
        let queues = (&self.queues, &self.relay);
        self.webhooks.finish(queues, attempt, outcome, now)
    }

    pub fn start_move_task(
        &self,
        source_arn: &str,
        destination: (Option<&str>, redrive::Elsewhere),
        rate: Option<i64>,
        now: Timestamp,
    ) -> EngineResult<move_task::MoveTask> {
        self.move_tasks
            .start(&self.queues, source_arn, destination, rate, now)
    }

    /// Moves up to `budget` messages for a running task (`MoveTasks::step`).
    pub fn move_step(
        &self,
        task_id: &str,
        source_arn: &str,
        budget: usize,
        now: Timestamp,
    ) -> (Vec<Arc<str>>, bool) {
        let parts = (&self.queues, &self.relay as &dyn queues::OtherShards);
        self.move_tasks
            .step(parts, task_id, source_arn, budget, now)
    }

    pub fn list_move_tasks(&self, source_arn: &str) -> EngineResult<Vec<move_task::MoveTask>> {
        self.move_tasks.list(&self.queues, source_arn)
    }

    pub fn cancel_move_task(&self, handle: &str) -> EngineResult<u64> {
        self.move_tasks.cancel(&self.queues, handle)
    }

    /// DeleteQueue. A move task still running from the queue fails with it, in the same
    /// atomic group: a task must never go on to take a later queue of that name for its own.
    pub fn delete_queue(&self, key: &str, now: Timestamp) -> EngineResult<Arc<QueueEntry<W>>> {
        let _atomic = self.atomic();
        let entry = self.queues.delete(key, now)?;
        self.move_tasks.fail_source(&self.queues.arn(key));
        Ok(entry)
    }

    /// `POST /_orderly/reset` of messages, for test suites that share one server: every
    /// queue's messages with their deduplication, attempt and purge histories, every topic's
    /// deduplication history and archive, and every pending webhook notification (confirmation
    /// requests still go out). Queues, topics and subscriptions stay. One atomic group of
    /// ordinary logged changes, so a crash keeps the whole reset or none of it.
    pub fn reset_messages(&self) {
        let _atomic = self.atomic();
        self.queues.reset_all();
        self.topics.reset_all();
        self.webhooks.reset_all();
    }

    /// Deletes every queue and every topic (their subscriptions and deliveries go with them),
    /// every platform application and endpoint, and the SMS settings and numbers, in one
    /// atomic group. Answers the deleted queues, whose long polls the caller wakes.
    pub fn reset_everything(&self, now: Timestamp) -> EngineResult<Vec<Arc<QueueEntry<W>>>> {
        let _atomic = self.atomic();
        let deleted = self.queues.delete_all(now);
        for entry in &deleted {
            self.move_tasks.fail_source(&self.queues.arn(&entry.name));
        }
        self.topics.delete_all(&self.webhooks)?;
        self.mobile().clear();
        Ok(deleted)
    }

    /// Each confirmed webhook subscription's delivery figures, by ARN: one that has had no
    /// delivery yet is listed with zeros, so a listing of webhooks shows every one.
    pub fn delivery_stats(&self) -> Vec<(Arc<str>, webhook::LaneStats)> {
        let mut stats = self.webhooks.stats();
        let idle: Vec<Arc<str>> = self
            .topics
            .list_subscriptions(None)
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, s)| s.protocol.kind() == topic::protocol::EndpointKind::Webhook)
            .filter(|(_, s)| !s.pending)
            .map(|(_, s)| s.arn.clone())
            .filter(|arn| stats.binary_search_by(|(known, _)| known.cmp(arn)).is_err())
            .collect();
        stats.extend(idle.into_iter().map(|arn| (arn, Default::default())));
        stats.sort_by(|a, b| a.0.cmp(&b.0));
        stats
    }

    /// Every queue's full state as text, sorted, for tests that compare two engines.
    #[cfg(test)]
    pub fn state_for_tests(&self) -> Vec<String> {
        let mut queues: Vec<String> = self
            .queues
            .cut(|| 0)
            .0
            .iter()
            .map(|entry| {
                let q = entry.lock();
                let mut messages = q.stored_messages();
                messages.sort_unstable_by_key(|(seq, _)| *seq);
                let history = q.read_dedup(q.dedup_cursor(), usize::MAX);
                format!("{:?}\n{history:?}\n{messages:?}", q.image())
            })
            .collect();
        queues.sort();
        // Topics are kept sorted by name; with their histories.
        queues.extend(
            self.topics
                .images(|| 0)
                .into_iter()
                .map(|(_, image, at, entry)| {
                    let history = entry.lock().read_dedup(at, usize::MAX);
                    format!("{image:?}\n{history:?}")
                }),
        );
        let mut tasks: Vec<String> = self
            .move_tasks
            .image(|| 0)
            .1
            .iter()
            .map(|t| format!("{t:?}"))
            .collect();
        tasks.sort();
        queues.extend(tasks);
        queues
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn tags_must_fit_in_an_xml_answer() {
        let ok = check_tags([("team", "prices é ✓")].into_iter(), 1);
        assert!(ok.is_ok());
        for (key, value) in [("a\u{1}", "v"), ("k", "v\u{fffe}"), ("k", "\u{0}")] {
            let refused = check_tags([(key, value)].into_iter(), 1);
            assert!(
                matches!(&refused, Err(EngineError::InvalidParameterValue(m)) if m.contains("invalid character")),
                "{key:?}={value:?}: {refused:?}"
            );
        }
    }

    fn send(engine: &Engine<()>, queue: &str, body: &str, now: Timestamp) {
        let entry = engine.queues.get(queue).unwrap();
        let mut q = entry.lock();
        q.tick(now);
        let req = queue::SendRequest {
            body: body.into(),
            sender_id: "t".into(),
            ..Default::default()
        };
        q.send(req, now).unwrap();
    }

    #[test]
    fn deleted_names_are_held_back_for_the_cooldown() {
        let mut engine: Engine<()> = Engine::new("000000000000", "us-east-1");
        engine.queues.delete_cooldown_ms = 60_000;
        engine
            .queues
            .create_from("q", &[], &[], Timestamp(0))
            .unwrap();
        engine.queues.delete("q", Timestamp(1_000)).unwrap();
        assert!(matches!(
            engine.queues.create_from("q", &[], &[], Timestamp(60_999)),
            Err(EngineError::QueueDeletedRecently(60))
        ));
        assert!(engine
            .queues
            .create_from("q", &[], &[], Timestamp(61_000))
            .is_ok());
        // The error says how long this server holds a name back.
        engine.queues.delete_cooldown_ms = 600_000;
        engine.queues.delete("q", Timestamp(62_000)).unwrap();
        let held = engine.queues.create_from("q", &[], &[], Timestamp(63_000));
        assert_eq!(
            held.err().map(|error| error.to_string()).as_deref(),
            Some(
                "You must wait 600 seconds after deleting a queue before you can create another \
             with the same name."
            )
        );
    }

    /// An engine with queue `src` dead-lettering into `dlq` after one receive.
    fn with_dead_letter_queue() -> Engine<()> {
        let engine: Engine<()> = Engine::new("000000000000", "us-east-1");
        engine
            .queues
            .create_from("dlq", &[], &[], Timestamp(0))
            .unwrap();
        let policy = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}"#;
        engine
            .queues
            .create_from(
                "src",
                &attrs(&[("RedrivePolicy", policy)]),
                &[],
                Timestamp(0),
            )
            .unwrap();
        engine
    }

    #[test]
    fn a_dead_letter_queue_keeps_its_latest_ten_move_tasks() {
        let engine = with_dead_letter_queue();
        let arn = engine.queues.arn("dlq");
        let mut started = Vec::new();
        for at in 1..=25 {
            let task = engine
                .start_move_task(&arn, (None, Default::default()), None, Timestamp(at))
                .unwrap();
            engine.cancel_move_task(&task.handle()).unwrap();
            started.push(task.id);
        }
        // One still running is kept beside them.
        let running = engine
            .start_move_task(&arn, (None, Default::default()), None, Timestamp(26))
            .unwrap();
        let listed: Vec<String> = engine
            .list_move_tasks(&arn)
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        let mut latest: Vec<String> = started[16..].iter().rev().cloned().collect();
        latest.insert(0, running.id.clone());
        assert_eq!(
            listed, latest,
            "the running one and the latest nine finished, newest first"
        );
    }

    #[test]
    fn move_task_moves_in_budgeted_steps_back_to_the_source() {
        let engine = with_dead_letter_queue();
        for i in 0..5 {
            send(&engine, "src", &format!("m{i}"), Timestamp(0));
        }
        let src = engine.queues.get("src").unwrap();
        let all = ReceiveRequest {
            max_messages: Some(10),
            visibility_timeout: Some(0),
            ..Default::default()
        };
        engine.receive(&src, &all, Timestamp(1)).unwrap();
        let (outcome, dlq) = engine.receive(&src, &all, Timestamp(2)).unwrap();
        assert!(outcome.received.is_empty());
        assert_eq!(dlq.unwrap().lock().len(), 5, "all five were dead-lettered");
        let arn = engine.queues.arn("dlq");
        let task = engine
            .start_move_task(&arn, (None, Default::default()), Some(2), Timestamp(3))
            .unwrap();
        assert_eq!(task.to_move, 5);
        let (touched, running) = engine.move_step(&task.id, &arn, 2, Timestamp(4));
        assert_eq!((touched.len(), running), (1, true));
        assert_eq!(src.lock().len(), 2);
        engine.move_step(&task.id, &arn, 2, Timestamp(5));
        let (_, running) = engine.move_step(&task.id, &arn, 2, Timestamp(6));
        assert!(!running);
        assert_eq!(src.lock().len(), 5);
        let tasks = engine.list_move_tasks(&arn).unwrap();
        assert_eq!(
            (tasks[0].status, tasks[0].moved),
            (move_task::MoveStatus::Completed, 5)
        );
        // Moved back as if never received: the source does not dead-letter them again at once.
        let (outcome, _) = engine.receive(&src, &all, Timestamp(7)).unwrap();
        assert_eq!(outcome.received.len(), 5);
        assert!(
            engine
                .start_move_task(
                    &engine.queues.arn("src"),
                    (None, Default::default()),
                    None,
                    Timestamp(8)
                )
                .is_err(),
            "src is not a DLQ"
        );
    }
}

#[cfg(test)]
mod relay_tests;
