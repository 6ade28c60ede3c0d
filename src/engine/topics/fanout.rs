//! Publish fan-out: the topic decides (validation, deduplication, sequence), then every
//! subscription gets its copy (a queue, its dead-letter queue, or the webhook outbox), all under
//! the topic's lock; and archive replays the same way.
//!
//! Fan-out holds the topic's lock while it enqueues into each subscribed queue (lock order is
//! always topic, then queue; queue operations never take a topic lock). So concurrent publishers
//! are serialised per topic: every queue receives copies in topic sequence order, and a
//! subscription added or removed concurrently sees a publish entirely or not at all.

use std::sync::Arc;

use crate::engine::body::Body;
use crate::engine::error::EngineResult;
use crate::engine::message::MessageAttributes;
use crate::engine::parcel::{NoteFor, RelayedCopy, Settles};
use crate::engine::queues::{QueueEntry, Queues};
use crate::engine::relay::Relay;
use crate::engine::time::Timestamp;
use crate::engine::topic::captured::{self, CapturedMessage};
use crate::engine::topic::envelope::{self, Notification};
use crate::engine::topic::protocol::protocol_text;
use crate::engine::topic::recent::{DeliveryNote, Fate};
use crate::engine::topic::signing::{self, MessageSigner};
use crate::engine::topic::subscription_copy::SubscriptionCopy;
use crate::engine::topic::{
    check_message, EndpointKind, Publication, PublishRequest, Subscription, Topic,
};
use crate::engine::webhook::delivery::NotificationCopy;
use crate::engine::webhooks::Notified;
use crate::engine::webhooks::Webhooks;

use super::{not_found_topic, Topics};

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
    /// Copies kept for the engines of other shards' queues.
    pub relayed: usize,
    /// What the captured protocols' endpoints would have received (`captured`).
    pub captured: Vec<CapturedMessage>,
}

/// A message on its way to subscriptions: live, or replayed from the archive.
struct Outgoing<'a> {
    publication: &'a Publication,
    request: &'a PublishRequest,
    published_at: Timestamp,
    replayed: bool,
    /// The SQS body parsed as JSON, for body-scope filters: parsed at most once per message.
    body_json: std::cell::OnceCell<Option<serde_json::Value>>,
    /// (version, signature, certificate URL), computed once per message and per text the
    /// message takes (a json-structured message may say something else to sqs, http, https).
    signatures: [std::cell::OnceCell<Option<(String, String, String)>>; 3],
    /// The text as a queue's body with its MD5, per text the message takes: every raw queue
    /// copy of the same text shares one (a copy in each of ten queues hashes it once).
    raw_bodies: [std::cell::OnceCell<Body>; 3],
}

impl Outgoing<'_> {
    fn new<'a>(
        publication: &'a Publication,
        request: &'a PublishRequest,
        published_at: Timestamp,
        replayed: bool,
    ) -> Outgoing<'a> {
        Outgoing {
            publication,
            request,
            published_at,
            replayed,
            body_json: Default::default(),
            signatures: Default::default(),
            raw_bodies: Default::default(),
        }
    }
}

/// Where the signing key comes from: asked for only when an envelope is signed (a FIFO-only
/// workload never needs one).
pub type SignerSource<'a> = &'a dyn Fn() -> Option<Arc<MessageSigner>>;

/// One message addressed to one subscription, with what its envelope needs.
struct Addressed<'a> {
    topic: &'a Topic,
    subscription: &'a Subscription,
    message: &'a Outgoing<'a>,
    text: &'a str,
    text_slot: usize,
    attributes: &'a MessageAttributes,
    unsubscribe_base: &'a str,
}

impl Addressed<'_> {
    /// The JSON notification envelope. Standard topics sign their envelopes (FIFO topics'
    /// envelopes carry no signature, except webhook ones: Orderly's extension signs them so
    /// endpoints can verify).
    fn envelope(&self, signer: SignerSource) -> String {
        let (topic, message) = (self.topic, self.message);
        let signed = !topic.fifo || self.subscription.is_webhook();
        envelope::notification(&Notification {
            message_id: &message.publication.message_id,
            sequence_number: message.publication.sequence_number,
            topic_arn: &topic.arn,
            subject: message.request.subject.as_deref(),
            message: self.text,
            timestamp: message.published_at,
            unsubscribe_url: &format!(
                "{}/?Action=Unsubscribe&SubscriptionArn={}",
                self.unsubscribe_base, self.subscription.arn
            ),
            attributes: self.attributes,
            replayed: message.replayed,
            signature: if signed { self.signature(signer) } else { None },
        })
    }

    /// (version, signature, certificate URL), computed once per message and text.
    fn signature(&self, signer: SignerSource) -> Option<(&str, &str, &str)> {
        let message = self.message;
        message.signatures[self.text_slot]
            .get_or_init(|| {
                let signer = signer()?;
                let version = self.topic.signature_version().to_string();
                let text = signing::notification_string_to_sign(
                    self.text,
                    &message.publication.message_id,
                    message.request.subject.as_deref(),
                    &message.published_at.iso8601(),
                    &self.topic.arn,
                );
                let signature = signer.sign(&version, &text);
                Some((
                    version,
                    signature,
                    format!("{}/{}", self.unsubscribe_base, signer.certificate_file),
                ))
            })
            .as_ref()
            .map(|(v, s, u)| (v.as_str(), s.as_str(), u.as_str()))
    }
}

enum Delivered<W> {
    Queue(Arc<QueueEntry<W>>),
    DeadLetter(Arc<QueueEntry<W>>),
    /// Handed to the webhook outbox.
    Webhook,
    /// Kept for the engine of the queue's shard.
    Relayed,
    /// For the caller to record (`captured`).
    Captured(Box<CapturedMessage>),
    Filtered,
    Dropped,
}

impl Topics {
    /// The rules a publish must pass (message and FIFO rules), for every one of a batch: AWS
    /// fails the whole PublishBatch if one entry breaks them, before publishing any. Each
    /// publish checks again under its lock (settings may change in between).
    pub fn check_publishes<'r>(
        &self,
        topic_arn: &str,
        requests: impl IntoIterator<Item = &'r PublishRequest>,
    ) -> EngineResult<()> {
        let entry = self.get(topic_arn)?;
        let topic = entry.lock();
        for request in requests {
            check_message(request)?;
            topic.check_fifo_rules(request)?;
        }
        Ok(())
    }

    /// Publish: the topic decides (validation, dedup, sequence), then each SQS subscription gets
    /// its copy, all under the topic lock. `unsubscribe_base` is the URL clients reach us at.
    pub fn publish<W: Default>(
        &self,
        to: (&Queues<W>, &Webhooks, &Relay),
        topic_arn: &str,
        req: &PublishRequest,
        unsubscribe_base: &str,
        now: Timestamp,
    ) -> EngineResult<Fanout<W>> {
        check_message(req)?;
        let entry = self.get(topic_arn)?;
        // Every copy, webhook delivery and the topic's dedup entry reach the log in one write,
        // so a crash keeps the whole fan-out or none of it (declared first: dropped last).
        let _atomic = self.atomic();
        let mut topic = entry.lock();
        if topic.deleted {
            return Err(not_found_topic());
        }
        to.2.check_room(queue_endpoints(&topic))?;
        // Logged when the guard drops, after the copies.
        let publication = topic.untouched().accept(req, now)?;
        let mut fanout = Fanout {
            publication,
            delivered_to: Vec::new(),
            failed: 0,
            dead_lettered: 0,
            webhooks: 0,
            relayed: 0,
            captured: Vec::new(),
        };
        if fanout.publication.duplicate {
            return Ok(fanout);
        }
        let message = Outgoing::new(&fanout.publication, req, now, false);
        for subscription in topic.subscriptions.iter().filter(|s| s.live && !s.pending) {
            let fate =
                match self.deliver(to, (&topic, subscription), &message, unsubscribe_base, now) {
                    Delivered::Queue(queue) => {
                        fanout.delivered_to.push(queue);
                        Fate::Queued
                    }
                    Delivered::DeadLetter(queue) => {
                        fanout.dead_lettered += 1;
                        fanout.delivered_to.push(queue);
                        Fate::DeadLettered
                    }
                    Delivered::Webhook => {
                        fanout.webhooks += 1;
                        Fate::ToWebhook
                    }
                    Delivered::Relayed => {
                        fanout.relayed += 1;
                        Fate::Relayed
                    }
                    Delivered::Captured(record) => {
                        fanout.captured.push(*record);
                        Fate::Captured
                    }
                    Delivered::Filtered => Fate::FilteredOut,
                    Delivered::Dropped => {
                        fanout.failed += 1;
                        Fate::Failed
                    }
                };
            subscription.recent.note(DeliveryNote {
                message_id: fanout.publication.message_id.clone(),
                at: now,
                fate,
            });
        }
        Ok(fanout)
    }

    /// One subscription's copy of one message: filter, format (raw or envelope), then the
    /// webhook outbox or the subscribed queue.
    fn deliver<W: Default>(
        &self,
        to: (&Queues<W>, &Webhooks, &Relay),
        (topic, subscription): (&Topic, &Subscription),
        message: &Outgoing,
        unsubscribe_base: &str,
        now: Timestamp,
    ) -> Delivered<W> {
        let signer = || self.signer().ok();
        let signer: SignerSource = &signer;
        addressed(
            topic,
            subscription,
            message,
            unsubscribe_base,
            |addressed| {
                let Some(addressed) = addressed else {
                    return Delivered::Filtered;
                };
                deliver_addressed(to, addressed, signer, now)
            },
        )
    }

    /// Replays a subscription's ReplayPolicy window from the topic's archive into it (filter
    /// applied, envelopes marked as replayed), then marks the replay completed. Returns the
    /// queues that received copies.
    pub fn replay<W: Default>(
        &self,
        to: (&Queues<W>, &Webhooks, &Relay),
        subscription_arn: &str,
        unsubscribe_base: &str,
        now: Timestamp,
    ) -> EngineResult<Vec<Arc<QueueEntry<W>>>> {
        let entry = self.subscription_topic(subscription_arn)?;
        // The copies and the replay's completion reach the log in one write: a crash cannot
        // leave copies made and the replay still pending (to run again).
        let _atomic = self.atomic();
        let mut topic = entry.lock();
        let Some((subscription, replay)) = topic.pending_replay(subscription_arn)? else {
            return Ok(Vec::new());
        };
        to.2.check_room([&*subscription.endpoint])?;
        let archived: Vec<_> = match &topic.archive {
            Some(archive) => archive.window(replay.start, replay.end).cloned().collect(),
            None => Vec::new(),
        };
        let mut touched = Vec::new();
        for item in &archived {
            let message = Outgoing::new(&item.publication, &item.request, item.published_at, true);
            if let Delivered::Queue(q) | Delivered::DeadLetter(q) =
                self.deliver(to, (&topic, &subscription), &message, unsubscribe_base, now)
            {
                touched.push(q);
            }
        }
        topic.complete_replay(subscription_arn, &replay);
        Ok(touched)
    }
}

impl Addressed<'_> {
    /// What a captured protocol's endpoint would have received; `None` for other protocols.
    fn capture(&self, envelope: &dyn Fn() -> String, now: Timestamp) -> Option<CapturedMessage> {
        let subscription = self.subscription;
        if subscription.protocol.kind() != EndpointKind::Captured {
            return None;
        }
        let message = self.message;
        let notified = captured::Notified {
            topic_arn: &self.topic.arn,
            message_id: &message.publication.message_id,
            subject: message.request.subject.as_deref(),
            text: self.text,
            message: &message.request.message,
            attributes: self.attributes,
            structured: message.request.structured,
            envelope,
            at: now,
        };
        Some(captured::notification(subscription, notified))
    }

    /// What an HTTP/S endpoint gets: the text raw, or the envelope `envelope` builds.
    fn webhook_copy<'e>(&'e self, envelope: &'e dyn Fn() -> String) -> NotificationCopy<'e> {
        let message = self.message;
        NotificationCopy {
            message_id: &message.publication.message_id,
            body: if self.subscription.raw_delivery {
                self.text.to_string()
            } else {
                envelope()
            },
            attributes: self.attributes,
            envelope,
            group_id: message.request.group_id.as_deref(),
            dedup_id: message.publication.dedup_id.as_deref(),
            sequence_number: message.publication.sequence_number,
        }
    }

    /// The copy for a queue in another shard: what `queue_copy` made, owned, with the envelope
    /// a dead-letter queue would get if it refused a raw copy.
    fn relayed(
        &self,
        copy: SubscriptionCopy,
        queue_arn: &str,
        dead_letter_arn: Option<&str>,
        dead_letter: bool,
        signer: SignerSource,
    ) -> RelayedCopy {
        let may_dead_letter = dead_letter || dead_letter_arn.is_some();
        RelayedCopy {
            topic_arn: Some(self.topic.arn.clone()),
            // A replay's copies are not noted, so they settle nothing.
            note_for: (!self.message.replayed).then(|| NoteFor {
                subscription_arn: self.subscription.arn.clone(),
                message_id: self.message.publication.message_id.clone(),
                settles: Settles::DELIVERY_NOTE,
            }),
            dead_letter_arn: dead_letter_arn.map(Arc::from),
            dead_letter,
            envelope: (may_dead_letter && self.subscription.raw_delivery)
                .then(|| self.envelope(signer).into()),
            ..RelayedCopy::of(queue_arn, copy)
        }
    }

    /// What the subscribed queue gets: the text raw with its attributes, or the envelope.
    fn queue_copy(&self, signer: SignerSource) -> SubscriptionCopy<'_> {
        let (subscription, message) = (self.subscription, self.message);
        let req = message.request;
        SubscriptionCopy {
            body: if subscription.raw_delivery {
                message.raw_bodies[self.text_slot]
                    .get_or_init(|| Body::new(self.text))
                    .clone()
            } else {
                self.envelope(signer).into()
            },
            attributes: if subscription.raw_delivery {
                self.attributes.clone()
            } else {
                MessageAttributes::default()
            },
            group_id: req.group_id.as_deref(),
            dedup_id: message.publication.dedup_id.as_deref(),
            fifo_topic: self.topic.fifo,
            // A replay re-sends what queues may have deduplicated minutes ago.
            bypass_dedup: message.replayed,
            trace_header: req.trace_header.clone(),
        }
    }
}

/// The queues a publish to `topic` may copy into: its live subscriptions' endpoints and
/// dead-letter queues.
fn queue_endpoints(topic: &Topic) -> impl Iterator<Item = &str> {
    topic
        .subscriptions
        .iter()
        .filter(|s| s.live && !s.pending)
        .flat_map(|s| std::iter::once(&*s.endpoint).chain(s.dead_letter_arn()))
}

/// Filters one message for one subscription and, if it passes, addresses it: calls `then`
/// with the addressed copy, or with `None` when the subscription's filter policy drops it.
fn addressed<R>(
    topic: &Topic,
    subscription: &Subscription,
    message: &Outgoing,
    unsubscribe_base: &str,
    then: impl FnOnce(Option<&Addressed>) -> R,
) -> R {
    let req = message.request;
    let (text, text_slot) = protocol_text(&req.message, req.structured, subscription.protocol);
    // Filtering comes after topic dedup, per subscription; a filtered copy is not an error.
    let parsed = || {
        message
            .body_json
            .get_or_init(|| crate::engine::topic::filter::parse_body(&text))
            .as_ref()
    };
    if !subscription.accepts(&req.attributes, &parsed) {
        return then(None);
    }
    let no_attributes = MessageAttributes::default();
    let addressed = Addressed {
        topic,
        subscription,
        message,
        text: &text,
        text_slot,
        // Message attributes are not delivered with a json message structure.
        attributes: if req.structured {
            &no_attributes
        } else {
            &req.attributes
        },
        unsubscribe_base,
    };
    then(Some(&addressed))
}

fn deliver_addressed<W: Default>(
    (queues, webhooks, relay): (&Queues<W>, &Webhooks, &Relay),
    addressed: &Addressed,
    signer: SignerSource,
    now: Timestamp,
) -> Delivered<W> {
    let (topic, subscription) = (addressed.topic, addressed.subscription);
    let envelope = || addressed.envelope(signer);
    if let Some(record) = addressed.capture(&envelope, now) {
        return Delivered::Captured(Box::new(record));
    }
    if subscription.is_webhook() {
        let copy = addressed.webhook_copy(&envelope);
        let noted = !addressed.message.replayed;
        return match webhooks.notify((queues, relay, noted), (topic, subscription), copy, now) {
            Notified::Queued => Delivered::Webhook,
            Notified::DeadLettered(Some(queue)) => Delivered::DeadLetter(queue),
            Notified::DeadLettered(None) => Delivered::Relayed,
            Notified::Dropped => Delivered::Dropped,
        };
    }
    copy_to_queue((queues, relay), addressed, signer, now)
}

/// Enqueues the copy in the subscribed queue, and on a client-side failure the same payload
/// in the subscription's DLQ. If the DLQ refuses a raw copy too (more than 10 attributes),
/// it gets the envelope, which carries the attributes inside, so the message is kept. A queue
/// of another shard gets its copy through the relay, and its shard does the same.
fn copy_to_queue<W: Default>(
    (queues, relay): (&Queues<W>, &Relay),
    addressed: &Addressed,
    signer: SignerSource,
    now: Timestamp,
) -> Delivered<W> {
    let subscription = addressed.subscription;
    // With the queues' policies enforced, a queue takes the copy only as AWS would.
    let from = Some(&*addressed.topic.arn);
    let mut copy = addressed.queue_copy(signer);
    if let Some(shard) = relay.elsewhere(&subscription.endpoint) {
        let dlq = subscription.dead_letter_arn();
        let relayed = addressed.relayed(copy, &subscription.endpoint, dlq, false, signer);
        relay.send(shard, relayed);
        return Delivered::Relayed;
    }
    if let Ok(queue) = queues.accept_copy(&subscription.endpoint, &copy, now, from) {
        return Delivered::Queue(queue);
    }
    let Some(dlq) = subscription.dead_letter_arn() else {
        return Delivered::Dropped;
    };
    if let Some(shard) = relay.elsewhere(dlq) {
        relay.send(shard, addressed.relayed(copy, dlq, None, true, signer));
        return Delivered::Relayed;
    }
    let mut result = queues.accept_copy(dlq, &copy, now, from);
    if result.is_err() && subscription.raw_delivery {
        copy.body = addressed.envelope(signer).into();
        copy.attributes = MessageAttributes::default();
        result = queues.accept_copy(dlq, &copy, now, from);
    }
    match result {
        Ok(queue) => Delivered::DeadLetter(queue),
        Err(_) => Delivered::Dropped,
    }
}
