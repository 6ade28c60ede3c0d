//! Topics in the registry, subscriptions, and publish fan-out into queues.
//!
//! Fan-out holds the topic's lock while it enqueues into each subscribed queue (lock order is
//! always topic, then queue; queue operations never take a topic lock). So concurrent publishers
//! are serialised per topic: every queue receives copies in topic sequence order, and a
//! subscription added or removed concurrently sees a publish entirely or not at all.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::body::Body;
use super::error::{EngineError, EngineResult};
use super::message::MessageAttributes;
use super::queue::SendRequest;
use super::time::Timestamp;
use super::topic::changes::TopicChange;
use super::topic::envelope::{self, Notification};
use super::topic::signing;
use super::topic::{archive, check_message, Publication, PublishRequest, Subscription, Topic};
use super::{Change, Engine, Journal, QueueEntry};

pub struct TopicEntry {
    state: Mutex<Topic>,
    journal: Option<Arc<dyn Journal>>,
}

impl TopicEntry {
    pub(super) fn new(mut topic: Topic, journal: Option<Arc<dyn Journal>>) -> Self {
        if journal.is_some() {
            topic.enable_journal();
        }
        TopicEntry {
            state: Mutex::new(topic),
            journal,
        }
    }

    /// Locks the topic. Changing it through the guard logs its settings image on unlock;
    /// `publishing` changes only what the topic itself records (dedup, sequence, archive).
    pub fn lock(&self) -> TopicGuard<'_> {
        TopicGuard {
            topic: self.state.lock().unwrap_or_else(|p| p.into_inner()),
            journal: self.journal.as_deref(),
            settings_changed: false,
        }
    }
}

/// A locked topic. Unlocking hands its changes to the journal, so the log holds each topic's
/// changes in the order they were made.
pub struct TopicGuard<'a> {
    topic: MutexGuard<'a, Topic>,
    journal: Option<&'a dyn Journal>,
    settings_changed: bool,
}

impl TopicGuard<'_> {
    /// The topic, for a publish: nothing in its settings changes.
    pub(super) fn publishing(&mut self) -> &mut Topic {
        &mut self.topic
    }
}

impl std::ops::Deref for TopicGuard<'_> {
    type Target = Topic;
    fn deref(&self) -> &Topic {
        &self.topic
    }
}

impl std::ops::DerefMut for TopicGuard<'_> {
    fn deref_mut(&mut self) -> &mut Topic {
        self.settings_changed = true;
        &mut self.topic
    }
}

impl Drop for TopicGuard<'_> {
    fn drop(&mut self) {
        let Some(journal) = self.journal else {
            return;
        };
        let mut changes = self.topic.take_changes();
        if self.topic.deleted {
            return;
        }
        if self.settings_changed {
            changes.push(TopicChange::Settings(Box::new(self.topic.image(false))));
        }
        if !changes.is_empty() {
            journal.submit(&Change::Topic {
                name: self.topic.name.clone(),
                changes,
            });
        }
    }
}

/// What a publish did: the ids to answer with and the queues that received a copy.
pub struct Fanout<W> {
    pub publication: Publication,
    pub delivered_to: Vec<Arc<QueueEntry<W>>>,
    /// Copies no queue accepted (queue gone, message too large for it, ...) and no DLQ took.
    pub failed: usize,
    /// Copies that went to a subscription's dead-letter queue instead.
    pub dead_lettered: usize,
    /// Copies handed to the webhook outbox.
    pub webhooks: usize,
}

/// One subscription's copy of a publish, before a queue decides how much of it to keep.
pub(super) struct Copy<'a> {
    pub body: Body,
    pub attributes: MessageAttributes,
    pub group_id: Option<&'a str>,
    pub dedup_id: Option<&'a str>,
    pub fifo_topic: bool,
    pub bypass_dedup: bool,
}

/// A message on its way to subscriptions: live, or replayed from the archive.
struct Message<'a> {
    publication: &'a Publication,
    request: &'a PublishRequest,
    published_at: Timestamp,
    replayed: bool,
    /// The SQS body parsed as JSON, for body-scope filters: parsed at most once per message.
    body_json: std::cell::OnceCell<Option<serde_json::Value>>,
    /// (version, signature, certificate URL), computed once per message and per text the
    /// message takes (a json-structured message may say something else to sqs, http, https).
    signatures: [std::cell::OnceCell<Option<(String, String, String)>>; 3],
}

impl Message<'_> {
    fn new<'a>(
        publication: &'a Publication,
        request: &'a PublishRequest,
        published_at: Timestamp,
        replayed: bool,
    ) -> Message<'a> {
        Message {
            publication,
            request,
            published_at,
            replayed,
            body_json: Default::default(),
            signatures: Default::default(),
        }
    }
}

/// What Subscribe did.
pub struct Subscribed {
    pub arn: Arc<str>,
    /// HTTP/S: waiting for the endpoint to confirm.
    pub pending: bool,
}

pub(super) enum Delivered<W> {
    Queue(Arc<QueueEntry<W>>),
    DeadLetter(Arc<QueueEntry<W>>),
    /// Handed to the webhook outbox.
    Webhook,
    Filtered,
    Dropped,
}

fn invalid(message: impl Into<String>) -> EngineError {
    EngineError::InvalidParameter(message.into())
}

fn not_found_topic() -> EngineError {
    EngineError::NotFound("Topic does not exist".into())
}

impl<W: Default> Engine<W> {
    pub fn topic_arn(&self, name: &str) -> String {
        format!("arn:aws:sns:{}:{}:{}", self.region, self.account_id, name)
    }

    /// The topic name of an SNS ARN, with AWS's errors for malformed and foreign ARNs.
    pub fn topic_name_from_arn<'a>(&self, arn: &'a str, parameter: &str) -> EngineResult<&'a str> {
        let parts: Vec<&str> = arn.split(':').collect();
        if parts.len() < 6 {
            return Err(invalid(format!(
                "Invalid parameter: {parameter} Reason: An ARN must have at least 6 elements, not {}",
                parts.len()
            )));
        }
        if parts[0] != "arn"
            || parts[2] != "sns"
            || parts[3] != self.region
            || parts[4] != self.account_id
        {
            return Err(invalid(format!("Invalid parameter: {parameter}")));
        }
        Ok(parts[5])
    }

    fn topics_read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Arc<str>, Arc<TopicEntry>>> {
        self.topics.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn topic(&self, arn: &str) -> EngineResult<Arc<TopicEntry>> {
        let name = self.topic_name_from_arn(arn, "TopicArn")?;
        self.topics_read()
            .get(name)
            .cloned()
            .ok_or_else(not_found_topic)
    }

    /// CreateTopic: idempotent while the requested attributes and tags match.
    pub fn create_topic(
        &self,
        name: &str,
        attrs: &[(String, String)],
        tags: &[(String, String)],
        now: Timestamp,
    ) -> EngineResult<Arc<str>> {
        let mut topics = self.topics.write().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = topics.get(name) {
            let topic = existing.lock();
            if !topic.same_settings(attrs) {
                return Err(invalid("Invalid parameter: Attributes Reason: Topic already exists with different attributes"));
            }
            if !tags.is_empty() && tags.iter().any(|(k, v)| topic.tags.get(k) != Some(v)) {
                return Err(invalid(
                    "Invalid parameter: Tags Reason: Topic already exists with different tags",
                ));
            }
            return Ok(topic.arn.clone());
        }
        check_topic_tags(
            tags.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            tags.len(),
        )?;
        let mut topic = Topic::new(name, self.topic_arn(name), &self.account_id, attrs, now)?;
        topic.tags.extend(tags.iter().cloned());
        let arn = topic.arn.clone();
        if let Some(journal) = &self.journal {
            journal.submit(&Change::Topic {
                name: topic.name.clone(),
                changes: vec![TopicChange::Settings(Box::new(topic.image(false)))],
            });
        }
        topics.insert(
            name.into(),
            Arc::new(TopicEntry::new(topic, self.journal.clone())),
        );
        Ok(arn)
    }

    /// DeleteTopic: idempotent; the topic's subscriptions go with it, and so do their
    /// pending webhook deliveries.
    pub fn delete_topic(&self, arn: &str) -> EngineResult<()> {
        let name = self.topic_name_from_arn(arn, "TopicArn")?;
        let mut topics = self.topics.write().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = topics.remove(name) {
            // Marked and logged under both locks: no change to the old topic can follow its
            // deletion in the log, nor be mistaken for a change to a new topic of that name.
            let mut topic = entry.lock();
            topic.deleted = true;
            if let Some(journal) = &self.journal {
                journal.submit(&Change::DeleteTopic {
                    name: topic.name.clone(),
                });
            }
            drop(topics);
            let mut outbox = self.outbox();
            for subscription in &topic.subscriptions {
                outbox.remove_subscription(&subscription.arn);
            }
        }
        Ok(())
    }

    /// Topic ARNs, sorted by name.
    pub fn list_topics(&self) -> Vec<Arc<str>> {
        self.topics_read()
            .values()
            .map(|t| t.lock().arn.clone())
            .collect()
    }

    /// Subscribe: SQS queues in this account (confirmed at once) and HTTP/S endpoints (pending
    /// until confirmed; a SubscriptionConfirmation goes out). Same topic, protocol and endpoint
    /// return the existing subscription. `base_url` is where clients reach this server.
    pub fn subscribe(
        &self,
        topic_arn: &str,
        protocol: &str,
        endpoint: Option<&str>,
        attrs: &[(String, String)],
        base_url: &str,
        now: Timestamp,
    ) -> EngineResult<Subscribed> {
        const KNOWN: &[&str] = &[
            "http",
            "https",
            "email",
            "email-json",
            "sms",
            "sqs",
            "application",
            "lambda",
            "firehose",
        ];
        if !KNOWN.contains(&protocol) {
            return Err(invalid(format!(
                "Invalid parameter: Amazon SNS does not support this protocol string: {protocol}"
            )));
        }
        let entry = self.topic(topic_arn)?;
        let fifo_topic = entry.lock().fifo;
        let webhook = matches!(protocol, "http" | "https");
        let refused = if fifo_topic {
            protocol != "sqs" && !(webhook && self.fifo_http_subscriptions)
        } else {
            protocol != "sqs" && !webhook
        };
        if refused {
            return Err(invalid(if fifo_topic {
                format!("Invalid parameter: Invalid protocol type: {protocol}")
            } else {
                format!("Invalid parameter: Orderly does not deliver to {protocol} endpoints (only sqs, http and https)")
            }));
        }
        let endpoint = endpoint.ok_or_else(|| invalid("Invalid parameter: Endpoint"))?;
        if webhook {
            return self.subscribe_webhook(&entry, protocol, endpoint, attrs, base_url, now);
        }
        let queue_name = self
            .name_from_arn(endpoint)
            .ok_or_else(|| invalid("Invalid parameter: SQS endpoint ARN"))?;
        // A queue that does not exist yet is allowed (AWS checks delivery, not subscription);
        // its type is known from its name.
        if queue_name.ends_with(".fifo") && !fifo_topic {
            return Err(invalid(
                "Invalid parameter: Invalid parameter: Endpoint Reason: FIFO SQS Queues can not be subscribed to standard SNS topics",
            ));
        }
        let mut topic = entry.lock();
        if let Some(existing) = topic
            .subscriptions
            .iter()
            .find(|s| s.protocol == protocol && s.endpoint == endpoint)
        {
            existing.check_resubscribe(attrs)?;
            return Ok(Subscribed {
                arn: existing.arn.clone(),
                pending: existing.pending,
            });
        }
        let arn: Arc<str> = format!("{}:{}", topic.arn, uuid::Uuid::new_v4()).into();
        let mut subscription = Subscription::new(arn, protocol, endpoint, &self.account_id);
        subscription.apply_all(attrs)?;
        topic.check_replay(&subscription, "Attributes Reason: ", now)?;
        topic.check_filter_count(&subscription)?;
        let arn = subscription.arn.clone();
        topic.subscriptions.push(Arc::new(subscription));
        Ok(Subscribed {
            arn,
            pending: false,
        })
    }

    /// The topic of a subscription ARN (`<topic arn>:<id>`).
    pub(super) fn subscription_topic(
        &self,
        subscription_arn: &str,
    ) -> EngineResult<Arc<TopicEntry>> {
        let parts: Vec<&str> = subscription_arn.split(':').collect();
        if parts.len() < 6 {
            return Err(invalid(format!(
                "Invalid parameter: SubscriptionArn Reason: An ARN must have at least 6 elements, not {}",
                parts.len()
            )));
        }
        if parts.len() < 7 {
            return Err(invalid("Invalid parameter: SubscriptionId"));
        }
        let topic_arn = parts[..6].join(":");
        self.topic(&topic_arn)
            .map_err(|_| EngineError::NotFound("Subscription does not exist".into()))
    }

    /// Runs `f` on a subscription (a copy, swapped in afterwards, so fan-out snapshots stay valid).
    pub fn with_subscription<T>(
        &self,
        subscription_arn: &str,
        f: impl FnOnce(&Topic, &mut Subscription) -> EngineResult<T>,
    ) -> EngineResult<T> {
        let entry = self.subscription_topic(subscription_arn)?;
        let mut topic = entry.lock();
        let index = topic
            .subscriptions
            .iter()
            .position(|s| &*s.arn == subscription_arn)
            .ok_or_else(|| EngineError::NotFound("Subscription does not exist".into()))?;
        let mut copy = (*topic.subscriptions[index]).clone();
        let out = f(&topic, &mut copy)?;
        topic.subscriptions[index] = Arc::new(copy);
        Ok(out)
    }

    /// Unsubscribe: idempotent for an unknown subscription. An HTTP/S endpoint is sent an
    /// UnsubscribeConfirmation whose SubscribeURL restores the subscription. `authenticated`:
    /// the call was signed (the UnsubscribeURL GET is not).
    pub fn unsubscribe(
        &self,
        subscription_arn: &str,
        authenticated: bool,
        base_url: &str,
        now: Timestamp,
    ) -> EngineResult<()> {
        let entry = match self.subscription_topic(subscription_arn) {
            Ok(entry) => entry,
            Err(EngineError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut topic = entry.lock();
        let Some(index) = topic
            .subscriptions
            .iter()
            .position(|s| &*s.arn == subscription_arn)
        else {
            return Ok(());
        };
        if topic.subscriptions[index].authenticate_on_unsubscribe && !authenticated {
            return Err(EngineError::AuthorizationError(
                "Authorization error: this subscription can only be removed by a signed request"
                    .into(),
            ));
        }
        let removed = topic.subscriptions.remove(index);
        topic.deleted_subscriptions += 1;
        self.outbox().remove_subscription(subscription_arn);
        if removed.is_webhook() {
            self.send_unsubscribe_confirmation(&topic, removed, base_url, now);
        }
        Ok(())
    }

    /// Every subscription as (topic ARN, subscription), topics by name, then subscription order.
    pub fn list_subscriptions(
        &self,
        topic_arn: Option<&str>,
    ) -> EngineResult<Vec<(Arc<str>, Arc<Subscription>)>> {
        let entries: Vec<Arc<TopicEntry>> = match topic_arn {
            Some(arn) => vec![self.topic(arn)?],
            None => self.topics_read().values().cloned().collect(),
        };
        Ok(entries
            .iter()
            .flat_map(|e| {
                let topic = e.lock();
                topic
                    .subscriptions
                    .iter()
                    .map(|s| (topic.arn.clone(), s.clone()))
                    .collect::<Vec<_>>()
            })
            .collect())
    }

    /// Publish: the topic decides (validation, dedup, sequence), then each SQS subscription gets
    /// its copy, all under the topic lock. `unsubscribe_base` is the URL clients reach us at.
    pub fn publish(
        &self,
        topic_arn: &str,
        req: &PublishRequest,
        unsubscribe_base: &str,
        now: Timestamp,
    ) -> EngineResult<Fanout<W>> {
        check_message(req)?;
        let entry = self.topic(topic_arn)?;
        // Every copy, webhook delivery and the topic's dedup entry reach the log in one write,
        // so a crash keeps the whole fan-out or none of it (declared first: dropped last).
        let _atomic = self.atomic();
        let mut topic = entry.lock();
        if topic.deleted {
            return Err(not_found_topic());
        }
        // Logged when the guard drops, after the copies.
        let publication = topic.publishing().accept(req, now)?;
        let mut fanout = Fanout {
            publication,
            delivered_to: Vec::new(),
            failed: 0,
            dead_lettered: 0,
            webhooks: 0,
        };
        if fanout.publication.duplicate {
            return Ok(fanout);
        }
        let message = Message::new(&fanout.publication, req, now, false);
        for subscription in topic.subscriptions.iter().filter(|s| s.live && !s.pending) {
            match self.deliver(&topic, subscription, &message, unsubscribe_base, now) {
                Delivered::Queue(queue) => fanout.delivered_to.push(queue),
                Delivered::DeadLetter(queue) => {
                    fanout.dead_lettered += 1;
                    fanout.delivered_to.push(queue);
                }
                Delivered::Webhook => fanout.webhooks += 1,
                Delivered::Filtered => {}
                Delivered::Dropped => fanout.failed += 1,
            }
        }
        Ok(fanout)
    }

    /// One subscription's copy of one message: filter, format (raw or envelope), enqueue, and
    /// on a client-side failure the same payload to the subscription's DLQ. If the DLQ refuses a
    /// raw copy too (more than 10 attributes), it gets the envelope, which carries the
    /// attributes inside, so the message is kept.
    fn deliver(
        &self,
        topic: &Topic,
        subscription: &Subscription,
        message: &Message,
        unsubscribe_base: &str,
        now: Timestamp,
    ) -> Delivered<W> {
        let req = message.request;
        let structured: Option<serde_json::Value> = req
            .structured
            .then(|| serde_json::from_str(&req.message).unwrap_or_default());
        // A json-structured message says what each protocol gets, "default" otherwise.
        let text = match &structured {
            Some(json) => json
                .get(subscription.protocol.as_str())
                .and_then(|v| v.as_str())
                .or_else(|| json.get("default").and_then(|v| v.as_str()))
                .unwrap_or_default(),
            None => &req.message,
        };
        let text_slot = match (req.structured, subscription.protocol.as_str()) {
            (false, _) | (true, "sqs") => 0,
            (true, "http") => 1,
            _ => 2,
        };
        // Filtering comes after topic dedup, per subscription; a filtered copy is not an error.
        let parsed = || {
            message
                .body_json
                .get_or_init(|| serde_json::from_str(text).ok())
                .as_ref()
        };
        if !subscription.accepts(&req.attributes, &parsed) {
            return Delivered::Filtered;
        }
        let no_attributes = MessageAttributes::default();
        // Message attributes are not delivered with a json message structure.
        let attributes = if req.structured {
            &no_attributes
        } else {
            &req.attributes
        };
        let unsubscribe_url = format!(
            "{unsubscribe_base}/?Action=Unsubscribe&SubscriptionArn={}",
            subscription.arn
        );
        // Standard topics sign their envelopes (FIFO topics' envelopes carry no signature,
        // except webhook ones: Orderly's extension signs them so endpoints can verify).
        let signature = || {
            message.signatures[text_slot]
                .get_or_init(|| {
                    let signer = self.signer().ok()?;
                    let version = topic.signature_version().to_string();
                    let text = signing::notification_string_to_sign(
                        text,
                        &message.publication.message_id,
                        req.subject.as_deref(),
                        &message.published_at.iso8601(),
                        &topic.arn,
                    );
                    let signature = signer.sign(&version, &text);
                    Some((
                        version,
                        signature,
                        format!("{unsubscribe_base}/{}", signer.certificate_file),
                    ))
                })
                .as_ref()
                .map(|(v, s, u)| (v.as_str(), s.as_str(), u.as_str()))
        };
        let envelope = || {
            envelope::notification(&Notification {
                message_id: &message.publication.message_id,
                sequence_number: message.publication.sequence_number,
                topic_arn: &topic.arn,
                subject: req.subject.as_deref(),
                message: text,
                timestamp: message.published_at,
                unsubscribe_url: &unsubscribe_url,
                attributes,
                replayed: message.replayed,
                signature: if topic.fifo && !subscription.is_webhook() {
                    None
                } else {
                    signature()
                },
            })
        };
        if subscription.is_webhook() {
            return self.queue_notification(
                topic,
                subscription,
                super::webhook::lifecycle::NotificationCopy {
                    message_id: &message.publication.message_id,
                    body: if subscription.raw_delivery {
                        text.to_string()
                    } else {
                        envelope()
                    },
                    attributes,
                    envelope: &envelope,
                    group_id: req.group_id.as_deref(),
                    dedup_id: message.publication.dedup_id.as_deref(),
                    sequence_number: message.publication.sequence_number,
                },
                now,
            );
        }
        let mut copy = Copy {
            body: if subscription.raw_delivery {
                Body::new(text)
            } else {
                envelope().into()
            },
            attributes: if subscription.raw_delivery {
                attributes.clone()
            } else {
                MessageAttributes::default()
            },
            group_id: req.group_id.as_deref(),
            dedup_id: message.publication.dedup_id.as_deref(),
            fifo_topic: topic.fifo,
            // A replay re-sends what queues may have deduplicated minutes ago.
            bypass_dedup: message.replayed,
        };
        if let Ok(queue) = self.enqueue_copy(&subscription.endpoint, &copy, now) {
            return Delivered::Queue(queue);
        }
        let Some(dlq) = subscription.dead_letter_arn() else {
            return Delivered::Dropped;
        };
        let mut result = self.enqueue_copy(dlq, &copy, now);
        if result.is_err() && subscription.raw_delivery {
            copy.body = envelope().into();
            copy.attributes = MessageAttributes::default();
            result = self.enqueue_copy(dlq, &copy, now);
        }
        match result {
            Ok(queue) => Delivered::DeadLetter(queue),
            Err(_) => Delivered::Dropped,
        }
    }

    /// Replays a subscription's ReplayPolicy window from the topic's archive into it (filter
    /// applied, envelopes marked as replayed), then marks the replay completed. Returns the
    /// queues that received copies.
    pub fn replay(
        &self,
        subscription_arn: &str,
        unsubscribe_base: &str,
        now: Timestamp,
    ) -> EngineResult<Vec<Arc<QueueEntry<W>>>> {
        let entry = self.subscription_topic(subscription_arn)?;
        // The copies and the replay's completion reach the log in one write: a crash cannot
        // leave copies made and the replay still pending (to run again).
        let _atomic = self.atomic();
        let mut topic = entry.lock();
        let Some(index) = topic
            .subscriptions
            .iter()
            .position(|s| &*s.arn == subscription_arn)
        else {
            return Err(EngineError::NotFound("Subscription does not exist".into()));
        };
        let subscription = topic.subscriptions[index].clone();
        let Some(replay) = subscription
            .replay
            .clone()
            .filter(|r| r.status == "Pending")
        else {
            return Ok(Vec::new());
        };
        let archived: Vec<_> = match &topic.archive {
            Some(archive) => archive.window(replay.start, replay.end).cloned().collect(),
            None => Vec::new(),
        };
        let mut touched = Vec::new();
        for item in &archived {
            let message = Message::new(&item.publication, &item.request, item.published_at, true);
            if let Delivered::Queue(q) | Delivered::DeadLetter(q) =
                self.deliver(&topic, &subscription, &message, unsubscribe_base, now)
            {
                touched.push(q);
            }
        }
        let mut updated = (*subscription).clone();
        updated.replay = Some(archive::Replay {
            status: "Completed",
            ..replay.clone()
        });
        // With an EndingPoint the subscription stops after the replay (AWS's model).
        updated.live = replay.end.is_none();
        topic.subscriptions[index] = Arc::new(updated);
        Ok(touched)
    }

    /// Puts a copy into the queue with this ARN. FIFO queues get the group and dedup id; a
    /// standard queue gets the group only from a standard topic (fair queues), never from a
    /// FIFO topic. Errors: the queue is gone, or refuses the message (size, attribute count).
    pub(super) fn enqueue_copy(
        &self,
        queue_arn: &str,
        copy: &Copy,
        now: Timestamp,
    ) -> EngineResult<Arc<QueueEntry<W>>> {
        let queue = self
            .name_from_arn(queue_arn)
            .ok_or(EngineError::QueueDoesNotExist)
            .and_then(|n| self.queue(n))?;
        let mut state = queue.lock();
        state.tick(now);
        let fifo_queue = state.is_fifo();
        if fifo_queue && copy.dedup_id.is_none() {
            // Only a standard topic could send this, and Subscribe refuses that pairing.
            return Err(EngineError::invalid(
                "a FIFO queue needs a deduplication id",
            ));
        }
        state.send(
            SendRequest {
                body: copy.body.clone(),
                attributes: copy.attributes.clone(),
                trace_header: None,
                group_id: (fifo_queue || !copy.fifo_topic)
                    .then(|| copy.group_id.map(Arc::from))
                    .flatten(),
                dedup_id: fifo_queue.then(|| copy.dedup_id.map(Arc::from)).flatten(),
                delay_seconds: None,
                sender_id: "sns.amazonaws.com".into(),
                bypass_dedup: copy.bypass_dedup,
            },
            now,
        )?;
        drop(state);
        Ok(queue)
    }

    /// Tags of a topic (the SNS tagging APIs answer ResourceNotFound for unknown topics).
    pub fn with_topic_tags<T>(
        &self,
        arn: &str,
        f: impl FnOnce(&mut BTreeMap<String, String>) -> EngineResult<T>,
    ) -> EngineResult<T> {
        let entry = self.topic(arn).map_err(|e| match e {
            EngineError::NotFound(_) => {
                EngineError::TagResourceNotFound("Resource does not exist".into())
            }
            other => other,
        })?;
        let mut topic = entry.lock();
        f(&mut topic.tags)
    }
}

/// Tags for a topic: the queue rules, with SNS's error codes (InvalidParameter, and
/// TagLimitExceeded past 50 tags).
pub fn check_topic_tags<'a>(
    tags: impl Iterator<Item = (&'a str, &'a str)>,
    total_after: usize,
) -> EngineResult<()> {
    super::check_tag_text(tags).map_err(|e| match e {
        EngineError::InvalidParameterValue(m) => {
            invalid(format!("Invalid parameter: Tags Reason: {m}"))
        }
        other => other,
    })?;
    super::check_tag_count(total_after).map_err(|_| {
        EngineError::TagLimitExceeded(
            "Could not complete request: tag quota of per resource exceeded".into(),
        )
    })
}
