//! The queues of an engine, by key: create, look up, delete, list; the receipt key every queue
//! seals its handles with; receives that dead-letter; copies SNS puts into a queue; and the
//! registry's part of snapshots and replay. A queue's own rules are in `queue`.
//!
//! Each queue sits behind its own lock; the registry lock is held only to look a queue up,
//! create or delete one. Queue operations never take a topic's lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use super::changes::{self, Change, ChangeLog};
use super::error::{EngineError, EngineResult};
use super::guard::{Guard, LoggedLock};
use super::message::Message;
use super::namespace::Namespaces;
use super::policy::sns_would_refuse;
use super::queue::changes::{QueueChange, QueueImage};
use super::queue::config::check_dead_letter_target;
use super::queue::receipt::{ReceiptKey, Secret, KEY_BYTES};
use super::queue::{self, Queue, QueueConfig, ReceiveOutcome, ReceiveRequest, Stored};
use super::shard::Shard;
use super::tags::check_tags;
use super::time::Timestamp;
use super::topic::subscription_copy::SubscriptionCopy;

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

/// Queues held by other shards' engines (`relay`): a dead letter for a dead-letter queue in
/// another shard, or a message a move task moves into a queue there, is handed over instead
/// of put in a local queue.
pub trait OtherShards {
    /// Whether another shard holds the queue `arn` names.
    fn hold(&self, arn: &str) -> bool;
    /// Whether more may be handed over now (the relay's bound).
    fn has_room(&self) -> bool;
    /// Hands messages dead-lettered from `source_arn` to the shard of the dead-letter queue
    /// `dlq_arn`, in the log's current write.
    fn dead_letter(&self, dlq_arn: &str, source_arn: &Arc<str>, messages: Vec<Message>);
    /// Hands a message a move task takes out of the dead-letter queue `dlq_arn` to the shard
    /// of the queue `target_arn`, in the log's current write.
    fn redrive(&self, target_arn: &str, dlq_arn: &Arc<str>, message: Message);
}

/// Queue changes held back by `QueueGuard::defer_changes`; `Queues::submit` logs them.
#[must_use]
pub struct Deferred(Option<(Arc<str>, u64, Vec<QueueChange>)>);

/// The registry's own state in a snapshot.
#[derive(Clone, Debug, Default)]
pub struct RegistryImage {
    pub next_uid: u64,
    /// Recently deleted names and when (the CreateQueue cooldown).
    pub deleted: Vec<(String, Timestamp)>,
}

type Registry<W> = HashMap<Arc<str>, Arc<QueueEntry<W>>>;

/// Every queue by key, with what they share.
pub struct Queues<W> {
    namespaces: Namespaces,
    /// The shard of the key space these queues are; a dead-letter target in another is
    /// checked by whoever can ask that shard.
    shard: Shard,
    queues: RwLock<Registry<W>>,
    deleted_at: Mutex<HashMap<String, Timestamp>>,
    next_uid: AtomicU64,
    /// How long a deleted name stays unavailable (AWS: 60 s); 0 turns the rule off.
    pub delete_cooldown_ms: u64,
    /// A topic's copy goes into a queue only if the queue's policy lets SNS send from the topic,
    /// as on AWS (`--enforce-queue-policies`); otherwise it is delivered all the same.
    pub enforce_queue_policies: bool,
    change_log: Option<Arc<dyn ChangeLog>>,
    /// Seals receipt handles: made with the registry, replaced by the one its log keeps
    /// (`restore_receipt_key`); true once the key is in the log.
    receipt_key: RwLock<(Arc<ReceiptKey>, bool)>,
}

impl<W: Default> Queues<W> {
    pub fn new(namespaces: Namespaces) -> Self {
        Queues {
            namespaces,
            shard: Shard::WHOLE,
            queues: RwLock::new(HashMap::new()),
            deleted_at: Mutex::new(HashMap::new()),
            next_uid: AtomicU64::new(1),
            delete_cooldown_ms: 0,
            enforce_queue_policies: false,
            change_log: None,
            receipt_key: RwLock::new((Arc::new(ReceiptKey::generate()), false)),
        }
    }

    /// The queues of one shard of several.
    pub(super) fn in_shard(mut self, shard: Shard) -> Self {
        self.shard = shard;
        self
    }

    /// Logs every later change to `change_log`. Set before the first queue is made.
    pub(super) fn set_log(&mut self, change_log: Arc<dyn ChangeLog>) {
        self.change_log = Some(change_log);
    }

    /// Keeps the changes made while the returned guard lives in one write of the log.
    pub(super) fn atomic(&self) -> changes::Atomic<'_> {
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

    fn receipt_key(&self) -> Arc<ReceiptKey> {
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
                secret: Secret(*key.0.secret()),
            });
        }
    }

    /// The key the log or a snapshot keeps, given to every queue (queues restored before
    /// it were registered with the first key).
    pub fn restore_receipt_key(&self, secret: [u8; KEY_BYTES]) {
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
            secret: Secret(*key.0.secret()),
        })
    }

    pub fn arn(&self, key: &str) -> String {
        self.namespaces.arn("sqs", key)
    }

    /// The queue key of an SQS ARN, in whichever region and account it names.
    pub fn key_in_arn<'a>(&self, arn: &'a str) -> Option<&'a str> {
        self.namespaces.key_in_arn("sqs", arn)
    }

    fn read(&self) -> RwLockReadGuard<'_, Registry<W>> {
        self.queues.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Every queue, in no order.
    pub fn entries(&self) -> Vec<Arc<QueueEntry<W>>> {
        self.read().values().cloned().collect()
    }

    pub fn get(&self, key: &str) -> EngineResult<Arc<QueueEntry<W>>> {
        self.read()
            .get(key)
            .cloned()
            .ok_or(EngineError::QueueDoesNotExist)
    }

    /// The queue an SQS ARN names.
    pub fn get_by_arn(&self, arn: &str) -> EngineResult<Arc<QueueEntry<W>>> {
        self.key_in_arn(arn)
            .ok_or(EngineError::QueueDoesNotExist)
            .and_then(|key| self.get(key))
    }

    /// CreateQueue: creates, or returns the existing queue when every supplied attribute matches.
    /// `config` is what the name and `attrs` make (`QueueConfig::for_create`, checked by the
    /// caller: it needs no stored state).
    pub fn create(
        &self,
        key: &str,
        config: QueueConfig,
        attrs: &[(String, String)],
        tags: &[(String, String)],
        now: Timestamp,
    ) -> EngineResult<Arc<QueueEntry<W>>> {
        self.check_redrive(key, &config)?;
        let mut queues = self.queues.write().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = queues.get(key) {
            let queue = existing.lock();
            if let Some(differs) = queue.config.first_difference(&config, attrs) {
                return Err(EngineError::QueueNameExists(differs));
            }
            return Ok(existing.clone());
        }
        if self.delete_cooldown_ms > 0 {
            let deleted = self.deleted_at.lock().unwrap_or_else(|p| p.into_inner());
            if deleted
                .get(key)
                .is_some_and(|at| now.millis_since(*at) < self.delete_cooldown_ms)
            {
                return Err(EngineError::QueueDeletedRecently(
                    self.delete_cooldown_ms / 1000,
                ));
            }
        }
        check_tags(
            tags.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            tags.len(),
        )?;
        let uid = self.next_uid.fetch_add(1, Ordering::Relaxed);
        let mut queue = Queue::new(key, self.arn(key), uid, config);
        queue.tags.extend(tags.iter().cloned());
        if let Some(change_log) = &self.change_log {
            change_log.submit(&Change::CreateQueue {
                name: key.into(),
                uid,
                config: Box::new(queue.config.clone()),
                tags: queue.tags.clone(),
            });
        }
        Ok(self.register(&mut queues, queue))
    }

    /// `create` with the configuration its key and attributes make (tests' shorthand).
    #[cfg(test)]
    pub fn create_from(
        &self,
        key: &str,
        attrs: &[(String, String)],
        tags: &[(String, String)],
        now: Timestamp,
    ) -> EngineResult<Arc<QueueEntry<W>>> {
        let config = QueueConfig::for_create(key, attrs, now)?;
        self.create(key, config, attrs, tags, now)
    }

    /// Adds a queue to the registry, logging its later changes if there is a log.
    fn register(&self, queues: &mut Registry<W>, mut queue: Queue) -> Arc<QueueEntry<W>> {
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

    /// The dead-letter target must exist and be of the same type as its source. One in another
    /// shard is checked there, by the same rule (`check_dead_letter_target`), before this runs.
    fn check_redrive(&self, key: &str, config: &QueueConfig) -> EngineResult<()> {
        let Some(policy) = &config.redrive_policy else {
            return Ok(());
        };
        // A queue may name itself (observed on AWS). The target must live in the source's
        // region and account (AWS SQS Developer Guide, dead-letter queues).
        let target_key = self
            .key_in_arn(&policy.dead_letter_target_arn)
            .filter(|target| self.namespaces.same_place(target, key));
        if target_key.is_some_and(|target| self.shard.elsewhere(target).is_some()) {
            return Ok(());
        }
        let target = target_key.and_then(|target| self.get(target).ok());
        let target = target.as_ref().map(|entry| entry.lock());
        let source_arn = self.arn(key);
        check_dead_letter_target(config, &source_arn, target.as_ref().map(|q| &q.config))
    }

    /// SetQueueAttributes.
    pub fn set_attributes(
        &self,
        key: &str,
        attrs: &[(String, String)],
        now: Timestamp,
    ) -> EngineResult<()> {
        let entry = self.get(key)?;
        let mut candidate = entry.lock().config.clone();
        candidate.apply(attrs)?;
        self.check_redrive(key, &candidate)?;
        let mut queue = entry.lock();
        let delay_before = queue.config.delay_seconds;
        queue.config.apply(attrs)?;
        queue.config.last_modified_at = now;
        queue.note_config();
        queue.delay_changed(delay_before, now);
        Ok(())
    }

    pub fn delete(&self, key: &str, now: Timestamp) -> EngineResult<Arc<QueueEntry<W>>> {
        let mut queues = self.queues.write().unwrap_or_else(|p| p.into_inner());
        let entry = queues.remove(key).ok_or(EngineError::QueueDoesNotExist)?;
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
            .insert(key.to_string(), now);
        drop(queues);
        Ok(entry)
    }

    /// Deletes every queue; answers them, for the caller to wake their long polls.
    pub fn delete_all(&self, now: Timestamp) -> Vec<Arc<QueueEntry<W>>> {
        let keys: Vec<Arc<str>> = self.read().keys().cloned().collect();
        // A queue deleted meanwhile by a request is gone either way.
        keys.iter()
            .filter_map(|key| self.delete(key, now).ok())
            .collect()
    }

    /// Drops every queue's messages with its deduplication, attempt and purge histories.
    pub fn reset_all(&self) {
        for entry in self.entries() {
            entry.lock().reset();
        }
    }

    /// About how many bytes every queue's messages take in a snapshot: a snapshot is only
    /// worth taking once the log holds more than their growth (see `app::snapshot_when_due`).
    pub fn stored_bytes(&self) -> u64 {
        self.entries().iter().map(|e| e.lock().stored_bytes()).sum()
    }

    /// Messages stored in every queue (visible, in flight or delayed).
    pub fn message_count(&self) -> u64 {
        self.entries().iter().map(|e| e.lock().len() as u64).sum()
    }

    /// The bytes of every queue's message bodies and attributes: the least a snapshot takes.
    pub fn payload_bytes(&self) -> u64 {
        self.entries()
            .iter()
            .map(|e| {
                let queue = e.lock();
                let framing = queue.len() as u64 * queue::LOGGED_BYTES;
                queue.stored_bytes().saturating_sub(framing)
            })
            .sum()
    }

    /// Queue keys with the given prefix, sorted for stable pagination.
    pub fn list(&self, prefix: &str) -> Vec<Arc<str>> {
        let mut keys: Vec<Arc<str>> = self
            .read()
            .keys()
            .filter(|key| key.starts_with(prefix))
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// Queues whose redrive policy targets `dlq_key`, sorted by key.
    pub fn dead_letter_sources(&self, dlq_key: &str) -> EngineResult<Vec<Arc<str>>> {
        self.get(dlq_key)?;
        Ok(self.naming_as_dead_letter_queue(&self.arn(dlq_key)))
    }

    /// Queues here whose redrive policy targets `dlq_arn`, wherever that queue is, sorted by key.
    pub fn naming_as_dead_letter_queue(&self, dlq_arn: &str) -> Vec<Arc<str>> {
        let mut keys: Vec<Arc<str>> = self
            .entries()
            .into_iter()
            .filter(|e| {
                e.lock()
                    .config
                    .redrive_policy
                    .as_ref()
                    .is_some_and(|p| p.dead_letter_target_arn == dlq_arn)
            })
            .map(|e| e.name.clone())
            .collect();
        keys.sort();
        keys
    }

    /// ReceiveMessage on one queue, moving messages past maxReceiveCount to the dead-letter
    /// queue, which is returned when it received any (a dead-letter queue in another shard
    /// gets them through `others`). Locks are taken one at a time (source, then DLQ), never
    /// nested.
    #[allow(clippy::type_complexity)]
    pub fn receive(
        &self,
        entry: &QueueEntry<W>,
        req: &ReceiveRequest,
        now: Timestamp,
        others: &dyn OtherShards,
    ) -> EngineResult<(ReceiveOutcome, Option<Arc<QueueEntry<W>>>)> {
        let policy = {
            let mut queue = entry.lock();
            queue.tick(now);
            queue.config.redrive_policy.clone()
        };
        let elsewhere = policy
            .as_ref()
            .map(|p| &p.dead_letter_target_arn)
            .filter(|arn| others.hold(arn));
        let dlq = policy
            .as_ref()
            .filter(|_| elsewhere.is_none())
            .and_then(|p| self.get_by_arn(&p.dead_letter_target_arn).ok());
        let dead_letter_after = policy
            .as_ref()
            .filter(|_| dlq.is_some() || elsewhere.is_some())
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
        if let Some(dlq_arn) = elsewhere.filter(|_| !outcome.dead_letters.is_empty()) {
            let messages = std::mem::take(&mut outcome.dead_letters);
            outcome.dead_lettered = messages.iter().map(|m| (m.id, m.receive_count)).collect();
            others.dead_letter(dlq_arn, &source_arn, messages);
        }
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

    /// Puts an SNS copy into the queue with this ARN. FIFO queues get the group and dedup id; a
    /// standard queue gets the group only from a standard topic (fair queues), never from a
    /// FIFO topic. With queue policies enforced and `topic_arn` given, only if the queue's
    /// policy lets SNS send from that topic (confirmation messages come from no topic).
    /// Errors: the queue is gone, refuses the sender, or refuses the message (size, attributes).
    pub fn accept_copy(
        &self,
        queue_arn: &str,
        copy: &SubscriptionCopy,
        now: Timestamp,
        topic_arn: Option<&str>,
    ) -> EngineResult<Arc<QueueEntry<W>>> {
        let queue = self.get_by_arn(queue_arn)?;
        let mut state = queue.lock();
        if let Some(topic_arn) = topic_arn.filter(|_| self.enforce_queue_policies) {
            let policy = state.config.policy.as_deref();
            if let Some(refusal) = sns_would_refuse(policy, queue_arn, topic_arn) {
                return Err(EngineError::AuthorizationError(refusal));
            }
        }
        state.tick(now);
        let request = copy.send_request(state.is_fifo())?;
        state.send(request, now)?;
        drop(state);
        Ok(queue)
    }

    /// The registry as of one point in the log: its queues (for a snapshot to visit one at a
    /// time), its own state, and the sequence number of the first change it does not include.
    #[allow(clippy::type_complexity)]
    pub fn cut(&self, next_lsn: impl Fn() -> u64) -> (Vec<Arc<QueueEntry<W>>>, RegistryImage, u64) {
        // Creations and deletions are logged under the write lock, so none is half-seen here.
        let queues = self.read();
        let entries = queues.values().cloned().collect();
        let image = RegistryImage {
            next_uid: self.next_uid.load(Ordering::Relaxed),
            deleted: self
                .deleted_at
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|(key, at)| (key.clone(), *at))
                .collect(),
        };
        (entries, image, next_lsn())
    }

    pub fn restore_registry(&self, image: RegistryImage) {
        self.next_uid.fetch_max(image.next_uid, Ordering::Relaxed);
        self.deleted_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(image.deleted);
    }

    /// Puts a queue back from its snapshot image and messages.
    pub fn restore(&self, image: QueueImage, messages: Vec<(u64, Stored)>) {
        self.next_uid.fetch_max(image.uid + 1, Ordering::Relaxed);
        let mut queue = Queue::from_image(image);
        for (seq, stored) in messages {
            queue.restore_message(seq, stored);
        }
        let mut queues = self.queues.write().unwrap_or_else(|p| p.into_inner());
        self.register(&mut queues, queue);
    }

    /// The uid of the live queue with this key.
    pub fn uid(&self, key: &str) -> Option<u64> {
        self.read().get(key).map(|entry| entry.lock().uid)
    }

    /// Applies a logged queue change (`CreateQueue`, `DeleteQueue`, `Queue`; others are not
    /// this registry's). Changes for a queue incarnation that no longer exists are skipped:
    /// they were made by requests that raced with the queue's deletion.
    pub(super) fn replay_change(&self, change: Change) {
        match change {
            Change::CreateQueue {
                name,
                uid,
                config,
                tags,
            } => {
                self.next_uid.fetch_max(uid + 1, Ordering::Relaxed);
                let mut queue = Queue::new(&name, self.arn(&name), uid, *config);
                queue.tags = tags;
                let mut queues = self.queues.write().unwrap_or_else(|p| p.into_inner());
                self.register(&mut queues, queue);
            }
            Change::DeleteQueue { name, uid, at } => {
                let mut queues = self.queues.write().unwrap_or_else(|p| p.into_inner());
                if queues.get(&name).is_some_and(|e| e.lock().uid == uid) {
                    queues.remove(&name);
                }
                self.deleted_at
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.to_string(), at);
            }
            Change::Queue { name, uid, changes } => {
                let Ok(entry) = self.get(&name) else {
                    return;
                };
                let mut queue = entry.lock();
                if queue.uid != uid {
                    return;
                }
                for change in changes {
                    queue.apply_change(change);
                }
            }
            Change::ReceiptKey { secret } => self.restore_receipt_key(secret.0),
            _ => {}
        }
    }
}
