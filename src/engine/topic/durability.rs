//! A topic's side of durability: its settings and subscriptions as snapshot images, rebuilt
//! from them, and the change records read back at recovery applied.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::archive::{Archive, Archived, Replay};
use super::changes::{SubscriptionImage, TopicChange, TopicImage};
use super::{FilterPolicy, Scope, Subscription, Topic, SEQUENCE_BASE};
use crate::engine::dedup::{DedupDigest, DedupRecord, HistoryChunk, HistoryCursor};
use crate::engine::message::{MessageId, SequenceNumber};
use crate::engine::time::Timestamp;
use crate::engine::topic::delivery_policy::{SubscriptionPolicy, TopicPolicy};

const REPLAY_STATUSES: [&str; 4] = ["Pending", "In progress", "Completed", "Failed"];

impl Subscription {
    pub fn image(&self) -> SubscriptionImage {
        SubscriptionImage {
            arn: self.arn.clone(),
            protocol: self.protocol,
            endpoint: self.endpoint.clone(),
            owner: self.owner.clone(),
            raw_delivery: self.raw_delivery,
            attributes: self.attributes.clone(),
            message_body_scope: self.filter_scope == Scope::MessageBody,
            replay: self
                .replay
                .as_ref()
                .map(|r| (r.start, r.end, r.status.to_string())),
            live: self.live,
            pending: self.pending,
            confirmation_authenticated: self.confirmation_authenticated,
            authenticate_on_unsubscribe: self.authenticate_on_unsubscribe,
            principal: self.principal.clone(),
        }
    }

    /// Rebuilds a subscription, compiling its policies again (they were valid when stored).
    pub fn from_image(image: SubscriptionImage) -> Subscription {
        let mut sub = Subscription::new(image.arn, image.protocol, &image.endpoint, &image.owner);
        sub.raw_delivery = image.raw_delivery;
        sub.filter_scope = if image.message_body_scope {
            Scope::MessageBody
        } else {
            Scope::MessageAttributes
        };
        sub.filter = image
            .attributes
            .get("FilterPolicy")
            .and_then(|text| FilterPolicy::parse(text, sub.filter_scope).ok())
            .map(Arc::new);
        if sub.is_webhook() {
            sub.delivery_policy = image
                .attributes
                .get("DeliveryPolicy")
                .and_then(|text| SubscriptionPolicy::parse(text).ok());
        }
        sub.attributes = image.attributes;
        sub.replay = image.replay.map(|(start, end, status)| Replay {
            start,
            end,
            status: REPLAY_STATUSES
                .into_iter()
                .find(|s| *s == status)
                .unwrap_or("Failed"),
        });
        sub.live = image.live;
        sub.pending = image.pending;
        sub.confirmation_authenticated = image.confirmation_authenticated;
        sub.authenticate_on_unsubscribe = image.authenticate_on_unsubscribe;
        sub.principal = image.principal;
        sub
    }
}

impl Topic {
    /// Settings, tags and subscriptions; `with_history` adds the archive. The deduplication
    /// history is read in chunks by `read_dedup` (it can hold millions of ids).
    pub fn image(&self, with_history: bool) -> TopicImage {
        TopicImage {
            name: self.name.clone(),
            arn: self.arn.clone(),
            fifo: self.fifo,
            owner: self.owner.clone(),
            settings: self.settings.clone(),
            tags: self.tags.clone(),
            subscriptions: self.subscriptions.iter().map(|s| s.image()).collect(),
            deleted_subscriptions: self.deleted_subscriptions,
            next_seq: self.next_seq,
            archive_since: self.archive.as_ref().map(|a| a.since),
            dedup: Vec::new(),
            archive: match (&self.archive, with_history) {
                (Some(archive), true) => archive.all().cloned().collect(),
                _ => Vec::new(),
            },
        }
    }

    /// Where a read of the deduplication history as it is now begins.
    pub fn dedup_cursor(&self) -> HistoryCursor {
        self.dedup.cursor()
    }

    /// A chunk of the deduplication history: see `DedupHistory::read`.
    pub fn read_dedup(&self, cursor: HistoryCursor, positions: usize) -> HistoryChunk {
        self.dedup.read(cursor, positions)
    }

    pub fn from_image(image: TopicImage) -> Topic {
        let mut topic = Topic::empty(image.name, image.arn, image.fifo, image.owner);
        topic.tags = image.tags;
        topic.restore_settings(
            image.settings,
            image.subscriptions,
            image.deleted_subscriptions,
            image.next_seq,
            image.archive_since,
        );
        for (key, value, expires_at) in image.dedup {
            topic.dedup.insert(key, value, expires_at);
        }
        if let Some(archive) = &mut topic.archive {
            for item in image.archive {
                archive.push(item);
            }
        }
        topic
    }

    /// Applies a settings image to a live topic, keeping its history.
    fn restore_settings(
        &mut self,
        settings: BTreeMap<String, String>,
        subscriptions: Vec<SubscriptionImage>,
        deleted_subscriptions: u64,
        next_seq: u64,
        archive_since: Option<Timestamp>,
    ) {
        self.delivery_policy = settings
            .get("DeliveryPolicy")
            .and_then(|text| TopicPolicy::parse(text).ok());
        let days = settings
            .get("ArchivePolicy")
            .and_then(|text| super::archive::parse_archive_policy(text).ok().flatten());
        match (days, archive_since) {
            (Some(days), Some(since)) => match &mut self.archive {
                Some(archive) => archive.retention_days = days,
                None => self.archive = Some(Archive::new(days, since)),
            },
            _ => self.archive = None,
        }
        self.settings = settings;
        self.subscriptions = subscriptions
            .into_iter()
            .map(|s| Arc::new(Subscription::from_image(s)))
            .collect();
        self.deleted_subscriptions = deleted_subscriptions;
        self.next_seq = self.next_seq.max(next_seq);
    }

    /// Starts keeping changes for the log.
    pub fn enable_log(&mut self) {
        self.changes.get_or_insert_with(Vec::new);
    }

    pub fn take_changes(&mut self) -> Vec<TopicChange> {
        self.changes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// `POST /_orderly/reset`: forgets the deduplication history, empties the archive and
    /// drops the subscriptions' notes of their last deliveries; settings and subscriptions
    /// stay.
    pub fn reset(&mut self) {
        if let Some(changes) = &mut self.changes {
            changes.push(TopicChange::Reset);
        }
        self.clear_history();
        for subscription in &self.subscriptions {
            subscription.recent.forget();
        }
    }

    fn clear_history(&mut self) {
        self.dedup.clear();
        if let Some(archive) = &mut self.archive {
            archive.clear();
        }
    }

    pub(super) fn note_published(
        &mut self,
        key: &str,
        message_id: &Arc<str>,
        sequence_number: u128,
        expires_at: Timestamp,
        archived: Option<&Archived>,
    ) {
        if let Some(changes) = &mut self.changes {
            changes.push(TopicChange::Published {
                key: key.to_string(),
                message_id: message_id.clone(),
                sequence_number,
                expires_at,
                archived: archived.map(|a| Box::new(a.clone())),
            });
        }
    }

    /// Replays one logged change.
    pub fn apply_change(&mut self, change: TopicChange) {
        match change {
            TopicChange::Settings(image) => {
                let image = *image;
                self.tags = image.tags;
                self.restore_settings(
                    image.settings,
                    image.subscriptions,
                    image.deleted_subscriptions,
                    image.next_seq,
                    image.archive_since,
                );
            }
            TopicChange::Published {
                key,
                message_id,
                sequence_number,
                expires_at,
                archived,
            } => {
                let counter = (sequence_number.saturating_sub(SEQUENCE_BASE) / 1000) as u64;
                self.next_seq = self.next_seq.max(counter + 1);
                // Every id this engine (or an earlier version) gave a publish is a UUID; a
                // record with anything else cannot be answered to a duplicate.
                if let Some(message_id) = MessageId::parse(&message_id) {
                    let original = DedupRecord {
                        message_id,
                        sequence_number: SequenceNumber::exact(sequence_number),
                    };
                    self.dedup
                        .insert(DedupDigest::of(&key), original, expires_at);
                }
                if let (Some(archive), Some(item)) = (&mut self.archive, archived) {
                    archive.push(*item);
                }
            }
            TopicChange::Reset => self.clear_history(),
        }
    }
}
