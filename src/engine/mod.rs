//! The pure engine: queues and their rules. No tokio, axum, file I/O or clock reads: every
//! operation takes `now`. Each queue sits behind its own mutex (never held across an await by
//! callers); the registry lock is held only to look a queue up, create or delete one.
//!
//! `W` is a per-queue slot the caller owns (the server keeps a long-poll notifier there), so
//! the engine stays free of any async runtime.

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
pub mod policy;
pub mod queue;
mod redrive;
mod reset;
pub mod restore;
mod tags;
pub mod time;
pub mod topic;
pub mod webhook;
mod window;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub use changes::{Change, ChangeLog};
pub use error::{EngineError, EngineResult};
pub use fast_map::FastMap;
use guard::{Guard, LoggedLock};
pub use message::check_xml_text;
use queue::config::check_dead_letter_target;
use queue::receipt::ReceiptKey;
pub use queue::{Queue, QueueConfig, ReceiveOutcome, ReceiveRequest};
pub use tags::{check_tag_count, check_tag_text, check_tags};
pub use time::Timestamp;

/// A topic; changing it through its guard logs its settings image on unlock, and
/// `untouched` (a publish) changes only what the topic records itself (dedup, sequence,
/// archive). See `engine::guard`.
pub type TopicEntry = LoggedLock<topic::Topic>;

/// One queue and the caller's slot beside it.
pub struct QueueEntry<W> {
    pub name: Arc<str>,
    state: LoggedLock<Queue>,
    pub waiters: W,
}

impl<W> QueueEntry<W> {
    /// Locks the queue; its changes are logged when the guard drops.
    pub fn lock(&self) -> QueueGuard<'_> {
        self.state.lock()
    }
}

/// A locked queue. Unlocking hands the changes made under the lock to the log first, so
/// the log sees each queue's changes in the order they were made.
pub type QueueGuard<'a> = Guard<'a, Queue>;

impl QueueGuard<'_> {
    /// Takes the changes made so far out of the guard, to be submitted after changes to another
    /// queue that must reach the log first (a message is put in its new queue before its removal
    /// from the old one is logged, so a crash between the two cannot lose it).
    pub fn defer_changes(&mut self) -> Deferred {
        let logging = self.logging();
        let queue = self.untouched();
        Deferred(logging.then(|| (queue.name.clone(), queue.uid, queue.take_changes())))
    }
}

/// Queue changes held back by `QueueGuard::defer_changes`; `Engine::submit` logs them.
#[must_use]
pub struct Deferred(Option<(Arc<str>, u64, Vec<queue::changes::QueueChange>)>);

/// Where queues and topics live, by key (`namespace`: a bare name at home).
pub struct Engine<W> {
    pub namespaces: namespace::Namespaces,
    queues: RwLock<HashMap<Arc<str>, Arc<QueueEntry<W>>>>,
    deleted_at: Mutex<HashMap<String, Timestamp>>,
    move_tasks: Mutex<HashMap<String, Vec<move_task::MoveTask>>>,
    topics: RwLock<BTreeMap<Arc<str>, Arc<TopicEntry>>>,
    /// The SNS signing key and certificate, made on first use.
    signer: std::sync::OnceLock<Result<Arc<topic::signing::MessageSigner>, String>>,
    next_uid: AtomicU64,
    /// How long a deleted name stays unavailable (AWS: 60 s); 0 turns the rule off.
    pub delete_cooldown_ms: u64,
    /// Webhook deliveries waiting, in flight or waiting for a retry. Lock order: topic, then outbox.
    outbox: LoggedLock<webhook::Outbox>,
    /// Confirmation tokens. Never held while a topic lock is taken.
    tokens: Mutex<webhook::tokens::TokenBook>,
    /// Orderly extension: accept http/https subscriptions on FIFO topics, delivered in order
    /// per message group (AWS refuses them).
    pub fifo_http_subscriptions: bool,
    /// A topic's copy goes into a queue only if the queue's policy lets SNS send from the topic,
    /// as on AWS (`--enforce-queue-policies`); otherwise it is delivered all the same.
    pub enforce_queue_policies: bool,
    /// Platform applications and endpoints, SMS settings and numbers.
    mobile: LoggedLock<mobile::Mobile>,
    /// Where changes are logged; `None` runs in memory only.
    change_log: Option<Arc<dyn ChangeLog>>,
    /// Seals receipt handles: made with the engine, replaced by the one its log keeps
    /// (`restore_receipt_key`); true once the key is in the log.
    receipt_key: RwLock<(Arc<ReceiptKey>, bool)>,
}

impl<W: Default> Engine<W> {
    pub fn new(account_id: &str, region: &str) -> Self {
        Engine {
            namespaces: namespace::Namespaces::new(namespace::Namespace::new(region, account_id)),
            queues: RwLock::new(HashMap::new()),
            deleted_at: Mutex::new(HashMap::new()),
            move_tasks: Mutex::new(HashMap::new()),
            topics: RwLock::new(BTreeMap::new()),
            signer: std::sync::OnceLock::new(),
            next_uid: AtomicU64::new(1),
            delete_cooldown_ms: 0,
            outbox: LoggedLock::new(webhook::Outbox::default(), None),
            mobile: LoggedLock::new(mobile::Mobile::default(), None),
            tokens: Mutex::new(webhook::tokens::TokenBook::default()),
            fifo_http_subscriptions: false,
            enforce_queue_policies: false,
            change_log: None,
            receipt_key: RwLock::new((Arc::new(ReceiptKey::generate()), false)),
        }
    }

    /// Logs every later change to `change_log`. Set before the first request.
    pub fn set_log(&mut self, change_log: Arc<dyn ChangeLog>) {
        self.outbox.set_log(change_log.clone());
        self.mobile.set_log(change_log.clone());
        self.change_log = Some(change_log);
    }

    pub fn change_log(&self) -> Option<&Arc<dyn ChangeLog>> {
        self.change_log.as_ref()
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

    /// Keeps the changes made while the returned guard lives in one write of the log.
    pub fn atomic(&self) -> changes::Atomic<'_> {
        changes::Atomic::new(self.change_log.as_deref())
    }

    /// Logs changes held back by `QueueGuard::defer_changes`.
    pub fn submit(&self, deferred: Deferred) {
        if let (Some(change_log), Some((name, uid, changes))) = (&self.change_log, deferred.0) {
            if !changes.is_empty() {
                change_log.submit(&Change::Queue { name, uid, changes });
            }
        }
    }

    /// The SNS message signer, generated on first use (key generation takes a moment).
    /// A new key is logged, so signatures stay verifiable with the same certificate after a
    /// restart.
    pub fn signer(&self) -> Result<Arc<topic::signing::MessageSigner>, String> {
        self.signer
            .get_or_init(|| {
                let signer = topic::signing::MessageSigner::generate()?;
                if let Some(change_log) = &self.change_log {
                    change_log.submit(&Change::Signer {
                        private_key_der: signer.private_key_der()?,
                        certificate_pem: signer.certificate_pem.clone(),
                        certificate_file: signer.certificate_file.clone(),
                    });
                }
                Ok(Arc::new(signer))
            })
            .clone()
    }

    /// The signer restored from the log or a snapshot (a damaged key is regenerated on use).
    pub fn restore_signer(
        &self,
        private_key_der: &[u8],
        certificate_pem: String,
        certificate_file: String,
    ) {
        if let Ok(signer) = topic::signing::MessageSigner::from_parts(
            private_key_der,
            certificate_pem,
            certificate_file,
        ) {
            let _ = self.signer.set(Ok(Arc::new(signer)));
        }
    }

    /// The signer, if one was made, as `Change::Signer` records it (for snapshots).
    pub fn signer_record(&self) -> Option<Change> {
        let signer = self.signer.get()?.as_ref().ok()?;
        Some(Change::Signer {
            private_key_der: signer.private_key_der().ok()?,
            certificate_pem: signer.certificate_pem.clone(),
            certificate_file: signer.certificate_file.clone(),
        })
    }

    pub fn receipt_key(&self) -> Arc<ReceiptKey> {
        self.receipt_key
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// Logs the receipt key unless the log already holds one. Called once recovery is done,
    /// before the first request: handles must open after a restart or a takeover.
    pub fn keep_receipt_key(&self) {
        if let Some(change_log) = &self.change_log {
            self.keep_receipt_key_by(|change| {
                change_log.submit(change);
                true
            });
        }
    }

    /// As `keep_receipt_key`, with `write` logging the change (true once it did).
    pub fn keep_receipt_key_by(&self, write: impl FnOnce(&Change) -> bool) {
        let mut key = self.receipt_key.write().unwrap_or_else(|p| p.into_inner());
        if !key.1 {
            key.1 = write(&Change::ReceiptKey {
                secret: queue::receipt::Secret(*key.0.secret()),
            });
        }
    }

    /// The key the log or a snapshot keeps, given to every queue (queues restored before
    /// it were registered with the engine's first key).
    pub fn restore_receipt_key(&self, secret: [u8; queue::receipt::KEY_BYTES]) {
        let key = Arc::new(ReceiptKey::from_secret(secret));
        *self.receipt_key.write().unwrap_or_else(|p| p.into_inner()) = (key.clone(), true);
        for entry in self.read().values() {
            entry.lock().untouched().receipt_key = key.clone();
        }
    }

    /// The receipt key as `Change::ReceiptKey` records it (for snapshots), once logged.
    pub fn receipt_key_record(&self) -> Option<Change> {
        let key = self.receipt_key.read().unwrap_or_else(|p| p.into_inner());
        key.1.then(|| Change::ReceiptKey {
            secret: queue::receipt::Secret(*key.0.secret()),
        })
    }

    pub fn queue_arn(&self, name: &str) -> String {
        self.namespaces.arn("sqs", name)
    }

    /// The queue key of an SQS ARN, in whichever region and account it names.
    pub fn name_from_arn<'a>(&self, arn: &'a str) -> Option<&'a str> {
        self.namespaces.key_in_arn("sqs", arn)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Arc<str>, Arc<QueueEntry<W>>>> {
        self.queues.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn queue(&self, name: &str) -> EngineResult<Arc<QueueEntry<W>>> {
        self.read()
            .get(name)
            .cloned()
            .ok_or(EngineError::QueueDoesNotExist)
    }

    /// CreateQueue: creates, or returns the existing queue when every supplied attribute matches.
    /// `config` is what the name and `attrs` make (`QueueConfig::for_create`, checked by the
    /// caller: it needs no stored state).
    pub fn create_queue(
        &self,
        name: &str,
        config: QueueConfig,
        attrs: &[(String, String)],
        tags: &[(String, String)],
        now: Timestamp,
    ) -> EngineResult<Arc<QueueEntry<W>>> {
        self.check_redrive(name, &config)?;
        let mut queues = self.queues.write().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = queues.get(name) {
            let queue = existing.lock();
            if let Some(differs) = queue.config.first_difference(&config, attrs) {
                return Err(EngineError::QueueNameExists(differs));
            }
            return Ok(existing.clone());
        }
        if self.delete_cooldown_ms > 0 {
            let deleted = self.deleted_at.lock().unwrap_or_else(|p| p.into_inner());
            if deleted
                .get(name)
                .is_some_and(|at| now.millis_since(*at) < self.delete_cooldown_ms)
            {
                return Err(EngineError::QueueDeletedRecently);
            }
        }
        check_tags(
            tags.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            tags.len(),
        )?;
        let uid = self.next_uid.fetch_add(1, Ordering::Relaxed);
        let mut queue = Queue::new(name, self.queue_arn(name), uid, config);
        queue.tags.extend(tags.iter().cloned());
        if let Some(change_log) = &self.change_log {
            change_log.submit(&Change::CreateQueue {
                name: name.into(),
                uid,
                config: Box::new(queue.config.clone()),
                tags: queue.tags.clone(),
            });
        }
        Ok(self.register(&mut queues, queue))
    }

    /// `create_queue` with the configuration its name and attributes make (tests' shorthand).
    #[cfg(test)]
    pub fn create_queue_from(
        &self,
        name: &str,
        attrs: &[(String, String)],
        tags: &[(String, String)],
        now: Timestamp,
    ) -> EngineResult<Arc<QueueEntry<W>>> {
        let config = QueueConfig::for_create(name, attrs, now)?;
        self.create_queue(name, config, attrs, tags, now)
    }

    /// Adds a queue to the registry, logging its later changes if the engine has a log.
    fn register(
        &self,
        queues: &mut HashMap<Arc<str>, Arc<QueueEntry<W>>>,
        mut queue: Queue,
    ) -> Arc<QueueEntry<W>> {
        queue.receipt_key = self.receipt_key();
        let name = queue.name.clone();
        let entry = Arc::new(QueueEntry {
            name: name.clone(),
            state: LoggedLock::new(queue, self.change_log.clone()),
            waiters: W::default(),
        });
        queues.insert(name, entry.clone());
        entry
    }

    /// The dead-letter target must exist and be of the same type as its source.
    fn check_redrive(&self, name: &str, config: &QueueConfig) -> EngineResult<()> {
        let Some(policy) = &config.redrive_policy else {
            return Ok(());
        };
        // A queue may name itself (observed on AWS). The target must live in the source's
        // region and account (AWS SQS Developer Guide, dead-letter queues).
        let target = self
            .name_from_arn(&policy.dead_letter_target_arn)
            .filter(|target| self.namespaces.same_place(target, name))
            .and_then(|target| self.queue(target).ok());
        let target = target.as_ref().map(|entry| entry.lock());
        let source_arn = self.queue_arn(name);
        check_dead_letter_target(config, &source_arn, target.as_ref().map(|q| &q.config))
    }

    /// SetQueueAttributes.
    pub fn set_attributes(
        &self,
        name: &str,
        attrs: &[(String, String)],
        now: Timestamp,
    ) -> EngineResult<()> {
        let entry = self.queue(name)?;
        let mut candidate = entry.lock().config.clone();
        candidate.apply(attrs)?;
        self.check_redrive(name, &candidate)?;
        let mut queue = entry.lock();
        queue.config.apply(attrs)?;
        queue.config.last_modified_at = now;
        queue.note_config();
        Ok(())
    }

    pub fn delete_queue(&self, name: &str, now: Timestamp) -> EngineResult<Arc<QueueEntry<W>>> {
        let mut queues = self.queues.write().unwrap_or_else(|p| p.into_inner());
        let entry = queues.remove(name).ok_or(EngineError::QueueDoesNotExist)?;
        if let Some(change_log) = &self.change_log {
            change_log.submit(&Change::DeleteQueue {
                name: entry.name.clone(),
                uid: entry.lock().uid,
                at: now,
            });
        }
        // Under the registry lock, so a snapshot sees the deletion and its cooldown together.
        self.deleted_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), now);
        drop(queues);
        Ok(entry)
    }

    /// About how many bytes every queue's messages take in a snapshot: a snapshot is only
    /// worth taking once the log holds more than their growth (see `app::snapshot_when_due`).
    pub fn stored_bytes(&self) -> u64 {
        let entries: Vec<_> = self.read().values().cloned().collect();
        entries.iter().map(|e| e.lock().stored_bytes()).sum()
    }

    /// Messages stored in every queue (visible, in flight or delayed).
    pub fn message_count(&self) -> u64 {
        let entries: Vec<_> = self.read().values().cloned().collect();
        entries.iter().map(|e| e.lock().len() as u64).sum()
    }

    /// The bytes of every queue's message bodies and attributes: the least a snapshot takes.
    pub fn payload_bytes(&self) -> u64 {
        let entries: Vec<_> = self.read().values().cloned().collect();
        entries
            .iter()
            .map(|e| {
                let queue = e.lock();
                let framing = queue.len() as u64 * queue::LOGGED_BYTES;
                queue.stored_bytes().saturating_sub(framing)
            })
            .sum()
    }

    /// Queue names with the given prefix, sorted for stable pagination.
    pub fn list_queues(&self, prefix: &str) -> Vec<Arc<str>> {
        let mut names: Vec<Arc<str>> = self
            .read()
            .keys()
            .filter(|name| name.starts_with(prefix))
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// Queues whose redrive policy targets `dlq_name`, sorted by name.
    pub fn dead_letter_sources(&self, dlq_name: &str) -> EngineResult<Vec<Arc<str>>> {
        self.queue(dlq_name)?;
        let arn = self.queue_arn(dlq_name);
        let entries: Vec<_> = self.read().values().cloned().collect();
        let mut names: Vec<Arc<str>> = entries
            .into_iter()
            .filter(|e| {
                e.lock()
                    .config
                    .redrive_policy
                    .as_ref()
                    .is_some_and(|p| p.dead_letter_target_arn == arn)
            })
            .map(|e| e.name.clone())
            .collect();
        names.sort();
        Ok(names)
    }

    /// ReceiveMessage on one queue, moving messages past maxReceiveCount to the dead-letter
    /// queue, which is returned when it received any. Locks are taken one at a time (source,
    /// then DLQ), never nested.
    #[allow(clippy::type_complexity)]
    pub fn receive(
        &self,
        entry: &QueueEntry<W>,
        req: &ReceiveRequest,
        now: Timestamp,
    ) -> EngineResult<(ReceiveOutcome, Option<Arc<QueueEntry<W>>>)> {
        let policy = {
            let mut queue = entry.lock();
            queue.tick(now);
            queue.config.redrive_policy.clone()
        };
        let dlq = policy.as_ref().and_then(|p| {
            let name = self.name_from_arn(&p.dead_letter_target_arn)?;
            self.queue(name).ok()
        });
        let dead_letter_after = dlq
            .as_ref()
            .and(policy.as_ref())
            .map(|p| p.max_receive_count);
        // A message dead-lettered is put in the DLQ and removed here in one write of the log.
        let _atomic = dead_letter_after.map(|_| self.atomic());
        let (mut outcome, source_arn, deferred) = {
            let mut queue = entry.lock();
            let mut outcome = queue.receive(req, dead_letter_after, now)?;
            outcome.expired = queue.take_expired();
            // The removals are logged after the dead-letter queue's puts.
            let deferred = (!outcome.dead_letters.is_empty()).then(|| queue.defer_changes());
            (outcome, queue.arn.clone(), deferred)
        };
        let dlq = dlq.filter(|_| !outcome.dead_letters.is_empty());
        if let Some(dlq) = &dlq {
            let mut target = dlq.lock();
            target.tick(now);
            for message in outcome.dead_letters.drain(..) {
                outcome
                    .dead_lettered
                    .push((message.id, message.receive_count));
                target.accept_moved(message, queue::Moved::DeadLetter(source_arn.clone()), now);
            }
        }
        if let Some(deferred) = deferred {
            self.submit(deferred);
        }
        Ok((outcome, dlq))
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
        let entry = engine.queue(queue).unwrap();
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
        engine.delete_cooldown_ms = 60_000;
        engine
            .create_queue_from("q", &[], &[], Timestamp(0))
            .unwrap();
        engine.delete_queue("q", Timestamp(1_000)).unwrap();
        assert!(matches!(
            engine.create_queue_from("q", &[], &[], Timestamp(60_999)),
            Err(EngineError::QueueDeletedRecently)
        ));
        assert!(engine
            .create_queue_from("q", &[], &[], Timestamp(61_000))
            .is_ok());
    }

    #[test]
    fn move_task_moves_in_budgeted_steps_back_to_the_source() {
        let engine: Engine<()> = Engine::new("000000000000", "us-east-1");
        engine
            .create_queue_from("dlq", &[], &[], Timestamp(0))
            .unwrap();
        let policy = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}"#;
        engine
            .create_queue_from(
                "src",
                &attrs(&[("RedrivePolicy", policy)]),
                &[],
                Timestamp(0),
            )
            .unwrap();
        for i in 0..5 {
            send(&engine, "src", &format!("m{i}"), Timestamp(0));
        }
        let src = engine.queue("src").unwrap();
        let all = ReceiveRequest {
            max_messages: Some(10),
            visibility_timeout: Some(0),
            ..Default::default()
        };
        engine.receive(&src, &all, Timestamp(1)).unwrap();
        let (outcome, dlq) = engine.receive(&src, &all, Timestamp(2)).unwrap();
        assert!(outcome.received.is_empty());
        assert_eq!(dlq.unwrap().lock().len(), 5, "all five were dead-lettered");
        let arn = engine.queue_arn("dlq");
        let task = engine
            .start_move_task(&arn, None, Some(2), Timestamp(3))
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
                .start_move_task(&engine.queue_arn("src"), None, None, Timestamp(8))
                .is_err(),
            "src is not a DLQ"
        );
    }
}
