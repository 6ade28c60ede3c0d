//! The topics of an engine, by key: create, look up, delete, list, tags; the SNS signing key;
//! and the registry's part of snapshots and replay. A topic's own rules are in `topic`; what a
//! topic sends out is here too: its subscriptions' lifecycle (`subscribing`) and a publish's
//! copies into queues and the webhook outbox (`fanout`).
//!
//! Lock order is always topic, then queue, then outbox; queue operations never take a topic
//! lock.

mod fanout;
pub mod subscribing;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard};

use crate::engine::changes::{self, Change, ChangeLog};
use crate::engine::dedup::HistoryCursor;
use crate::engine::error::invalid_parameter as invalid;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::guard::LoggedLock;
use crate::engine::namespace::Namespaces;
use crate::engine::time::Timestamp;
use crate::engine::topic::changes::{TopicChange, TopicImage};
use crate::engine::topic::signing::MessageSigner;
use crate::engine::topic::Topic;
use crate::engine::webhooks::Webhooks;

pub use fanout::{Fanout, SignerSource};
pub use subscribing::{check_protocol, queue_pends, subscription_topic_arn};

/// A topic; changing it through its guard logs its settings image on unlock, and
/// `untouched` (a publish) changes only what the topic records itself (dedup, sequence,
/// archive). See `engine::guard`.
pub type TopicEntry = LoggedLock<Topic>;

/// A topic's publishes since the server started.
pub struct TopicActivity {
    pub arn: Arc<str>,
    pub published: u64,
    pub deduplicated: u64,
}

pub fn not_found_topic() -> EngineError {
    EngineError::NotFound("Topic does not exist".into())
}

/// The topic name of an SNS ARN, with AWS's errors for malformed and foreign ARNs.
pub fn topic_name_in_arn<'a>(
    arn: &'a str,
    parameter: &str,
    namespaces: &crate::engine::namespace::Namespaces,
) -> EngineResult<&'a str> {
    let parts: Vec<&str> = arn.split(':').collect();
    if parts.len() < 6 {
        return Err(invalid(format!(
            "Invalid parameter: {parameter} Reason: An ARN must have at least 6 elements, not {}",
            parts.len()
        )));
    }
    // A subscription's ARN (a seventh part) names no topic, though it starts with one's.
    if parts.len() > 6 {
        return Err(invalid(format!("Invalid parameter: {parameter}")));
    }
    // Which region and account may use the ARN is the service's to judge (`service::access`).
    namespaces
        .key_in_arn("sns", arn)
        .ok_or_else(|| invalid(format!("Invalid parameter: {parameter}")))
}

/// The SNS tagging APIs' answer for a topic that does not exist.
pub fn no_tagged_resource() -> EngineError {
    EngineError::SnsResourceNotFound("Resource does not exist".into())
}

/// Every topic by key, sorted, with what they share.
pub struct Topics {
    namespaces: Namespaces,
    topics: RwLock<BTreeMap<Arc<str>, Arc<TopicEntry>>>,
    /// The SNS signing key and certificate, made on first use.
    signer: OnceLock<Result<Arc<MessageSigner>, String>>,
    /// Orderly extension: accept http/https subscriptions on FIFO topics, delivered in order
    /// per message group (AWS refuses them).
    pub fifo_http_subscriptions: bool,
    change_log: Option<Arc<dyn ChangeLog>>,
}

impl Topics {
    pub fn new(namespaces: Namespaces) -> Self {
        Topics {
            namespaces,
            topics: RwLock::new(BTreeMap::new()),
            signer: OnceLock::new(),
            fifo_http_subscriptions: false,
            change_log: None,
        }
    }

    /// Logs every later change to `change_log`. Set before the first topic is made.
    pub(in crate::engine) fn set_log(&mut self, change_log: Arc<dyn ChangeLog>) {
        self.change_log = Some(change_log);
    }

    /// Keeps the changes made while the returned guard lives in one write of the log.
    fn atomic(&self) -> changes::Atomic<'_> {
        changes::Atomic::new(self.change_log.as_deref())
    }

    /// The SNS message signer, generated on first use (key generation takes a moment).
    /// A new key is logged, so signatures stay verifiable with the same certificate after a
    /// restart.
    pub fn signer(&self) -> Result<Arc<MessageSigner>, String> {
        self.signer
            .get_or_init(|| {
                let signer = MessageSigner::generate()?;
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

    /// The signer, if one was made (none is made here).
    pub fn made_signer(&self) -> Option<Arc<MessageSigner>> {
        self.signer.get()?.as_ref().ok().cloned()
    }

    /// The signer restored from the log or a snapshot (a damaged key is regenerated on use).
    pub fn restore_signer(
        &self,
        private_key_der: &[u8],
        certificate_pem: String,
        certificate_file: String,
    ) {
        if let Ok(signer) =
            MessageSigner::from_parts(private_key_der, certificate_pem, certificate_file)
        {
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

    pub fn arn(&self, key: &str) -> String {
        self.namespaces.arn("sns", key)
    }

    /// The topic key of an SNS ARN, with AWS's errors for malformed and foreign ARNs.
    pub fn key_in_arn<'a>(&self, arn: &'a str, parameter: &str) -> EngineResult<&'a str> {
        topic_name_in_arn(arn, parameter, &self.namespaces)
    }

    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<Arc<str>, Arc<TopicEntry>>> {
        self.topics.read().unwrap_or_else(|p| p.into_inner())
    }

    fn entries(&self) -> Vec<Arc<TopicEntry>> {
        self.read().values().cloned().collect()
    }

    pub fn get(&self, arn: &str) -> EngineResult<Arc<TopicEntry>> {
        let key = self.key_in_arn(arn, "TopicArn")?;
        self.read().get(key).cloned().ok_or_else(not_found_topic)
    }

    /// CreateTopic: idempotent while the requested attributes and tags match.
    pub fn create(
        &self,
        key: &str,
        attrs: &[(String, String)],
        tags: &[(String, String)],
        now: Timestamp,
    ) -> EngineResult<Arc<str>> {
        crate::engine::topic::checked_name(key, attrs)?;
        let mut topics = self.topics.write().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = topics.get(key) {
            let topic = existing.lock();
            topic.check_recreate(attrs, tags)?;
            return Ok(topic.arn.clone());
        }
        check_topic_tags(
            tags.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            tags.len(),
        )?;
        let owner = self.namespaces.place(key).account;
        let mut topic = Topic::new(key, self.arn(key), owner, attrs, now)?;
        topic.tags.extend(tags.iter().cloned());
        let arn = topic.arn.clone();
        if let Some(change_log) = &self.change_log {
            change_log.submit(&Change::Topic {
                name: topic.name.clone(),
                changes: vec![TopicChange::Settings(Box::new(topic.image(false)))],
            });
        }
        topics.insert(
            key.into(),
            Arc::new(TopicEntry::new(topic, self.change_log.clone())),
        );
        Ok(arn)
    }

    /// DeleteTopic: idempotent; the topic's subscriptions go with it, and so do their
    /// pending webhook deliveries.
    pub fn delete(&self, arn: &str, webhooks: &Webhooks) -> EngineResult<()> {
        let key = self.key_in_arn(arn, "TopicArn")?;
        let mut topics = self.topics.write().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = topics.remove(key) {
            // Marked and logged under both locks: no change to the old topic can follow its
            // deletion in the log, nor be mistaken for a change to a new topic of that name.
            let mut topic = entry.lock();
            topic.deleted = true;
            if let Some(change_log) = &self.change_log {
                change_log.submit(&Change::DeleteTopic {
                    name: topic.name.clone(),
                });
            }
            drop(topics);
            webhooks.remove_subscriptions(topic.subscriptions.iter().map(|s| &*s.arn));
        }
        Ok(())
    }

    /// Deletes every topic with its subscriptions and their pending deliveries.
    pub fn delete_all(&self, webhooks: &Webhooks) -> EngineResult<()> {
        for arn in self.list() {
            self.delete(&arn, webhooks)?;
        }
        Ok(())
    }

    /// Drops every topic's deduplication history and archive.
    pub fn reset_all(&self) {
        for entry in self.entries() {
            // Only the history changes; the topic logs that itself (no settings image).
            entry.lock().untouched().reset();
        }
    }

    /// Every topic's publish counts, sorted by name.
    pub fn activity(&self) -> Vec<TopicActivity> {
        self.read()
            .values()
            .map(|t| {
                let topic = t.lock();
                TopicActivity {
                    arn: topic.arn.clone(),
                    published: topic.published,
                    deduplicated: topic.deduplicated,
                }
            })
            .collect()
    }

    /// Puts in a subscription's note what became of a copy relayed to another shard, if the
    /// copy settles one (nothing if the topic or subscription is gone meanwhile). Answers
    /// whether the subscription still exists.
    pub fn settle(&self, settled: &crate::engine::relay::Settled) -> bool {
        let Ok(entry) = self.get(&settled.topic_arn) else {
            return false;
        };
        let topic = entry.lock();
        let note_for = &settled.note_for;
        let Some(subscription) =
            (topic.subscriptions.iter()).find(|s| s.arn == note_for.subscription_arn)
        else {
            return false;
        };
        if note_for.settles.delivery_note {
            subscription
                .recent
                .settle(&note_for.message_id, settled.fate);
        }
        true
    }

    /// Topic ARNs, sorted by name.
    pub fn list(&self) -> Vec<Arc<str>> {
        self.read().values().map(|t| t.lock().arn.clone()).collect()
    }

    /// Tags of a topic (the SNS tagging APIs answer ResourceNotFound for unknown topics).
    pub fn with_tags<T>(
        &self,
        arn: &str,
        f: impl FnOnce(&mut BTreeMap<String, String>) -> EngineResult<T>,
    ) -> EngineResult<T> {
        let entry = self.get(arn).map_err(|e| match e {
            EngineError::NotFound(_) => no_tagged_resource(),
            other => other,
        })?;
        let mut topic = entry.lock();
        f(&mut topic.tags)
    }

    /// Puts a topic back from its snapshot image.
    pub fn restore(&self, image: TopicImage) {
        let key = image.name.clone();
        let entry = TopicEntry::new(Topic::from_image(image), self.change_log.clone());
        self.topics
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, Arc::new(entry));
    }

    /// Every topic, each with the log position its copy would be consistent with, taken
    /// under the topic's lock, with its archive (snapshots); and the topic with where a read of
    /// its deduplication history as it was then begins.
    pub fn images(
        &self,
        next_lsn: impl Fn() -> u64,
    ) -> Vec<(u64, TopicImage, HistoryCursor, Arc<TopicEntry>)> {
        self.entries()
            .iter()
            .map(|entry| {
                let topic = entry.lock();
                let history = topic.dedup_cursor();
                (next_lsn(), topic.image(true), history, entry.clone())
            })
            .collect()
    }

    /// Applies a logged topic change (`Topic`, `DeleteTopic`, `Signer`; others are not this
    /// registry's). Changes to a topic that no longer exists raced with its deletion.
    pub(in crate::engine) fn replay_change(&self, change: Change) {
        match change {
            Change::Topic { name, changes } => {
                let mut topics = self.topics.write().unwrap_or_else(|p| p.into_inner());
                let mut changes = changes.into_iter();
                let entry = match topics.get(&name) {
                    Some(entry) => entry.clone(),
                    None => {
                        // A topic starts with its settings image; anything else for an unknown
                        // topic raced with its deletion.
                        let Some(TopicChange::Settings(image)) = changes.next() else {
                            return;
                        };
                        let entry = Arc::new(TopicEntry::new(
                            Topic::from_image(*image),
                            self.change_log.clone(),
                        ));
                        topics.insert(name, entry.clone());
                        entry
                    }
                };
                drop(topics);
                // Replayed changes are not logged again (what applying them recorded is dropped).
                let mut topic = entry.lock_unlogged();
                for change in changes {
                    topic.apply_change(change);
                }
                topic.take_changes();
            }
            Change::DeleteTopic { name } => {
                self.topics
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&name);
            }
            Change::Signer {
                private_key_der,
                certificate_pem,
                certificate_file,
            } => self.restore_signer(&private_key_der, certificate_pem, certificate_file),
            _ => {}
        }
    }
}

/// TagResource on a topic: adds or replaces `tags` if the result keeps the rules.
pub fn add_topic_tags(
    existing: &mut BTreeMap<String, String>,
    tags: Vec<(String, String)>,
) -> EngineResult<()> {
    let added = tags
        .iter()
        .filter(|(key, _)| !existing.contains_key(key))
        .count();
    check_topic_tags(
        tags.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        existing.len() + added,
    )?;
    existing.extend(tags);
    Ok(())
}

/// Tags for a topic: the queue rules, with SNS's error codes (InvalidParameter, and
/// TagLimitExceeded past 50 tags).
pub fn check_topic_tags<'a>(
    tags: impl Iterator<Item = (&'a str, &'a str)>,
    total_after: usize,
) -> EngineResult<()> {
    crate::engine::check_tag_text(tags).map_err(|e| match e {
        EngineError::InvalidParameterValue(m) => {
            invalid(format!("Invalid parameter: Tags Reason: {m}"))
        }
        other => other,
    })?;
    crate::engine::check_tag_count(total_after).map_err(|_| {
        EngineError::TagLimitExceeded(
            "Could not complete request: tag quota of per resource exceeded".into(),
        )
    })
}
