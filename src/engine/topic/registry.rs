//! Topics in the registry and their subscriptions: lookup, create, delete, subscribe,
//! unsubscribe, tags.
//!
//! Lock order is always topic, then queue (see `fanout`); queue operations never take a topic
//! lock.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::engine::error::invalid_parameter as invalid;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::time::Timestamp;
use crate::engine::topic::changes::TopicChange;
use crate::engine::topic::subscription::{Subscribed, Subscriber};
use crate::engine::topic::{EndpointKind, Subscription, SubscriptionProtocol, Topic};
use crate::engine::{Change, Engine};

/// A topic's publishes since the server started.
pub struct TopicActivity {
    pub arn: Arc<str>,
    pub published: u64,
    pub deduplicated: u64,
}

pub use crate::engine::TopicEntry;

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
    // Which region and account may use the ARN is the service's to judge (`service::access`).
    namespaces
        .key_in_arn("sns", arn)
        .ok_or_else(|| invalid(format!("Invalid parameter: {parameter}")))
}

/// Whether subscribing the queue `queue_key` waits for its owner to confirm: when the queue is
/// another account's than the subscriber's (SNS Developer Guide, "Sending Amazon SNS messages
/// to an Amazon SQS queue in a different account"; shared/spec/sns.md §3.6). A queue's owner
/// subscribing it to another account's topic needs no confirmation.
pub fn queue_pends(
    namespaces: &crate::engine::namespace::Namespaces,
    queue_key: &str,
    subscriber_account: &str,
) -> bool {
    namespaces.place(queue_key).account != subscriber_account
}

/// The topic ARN of a subscription ARN (`<topic arn>:<id>`), with AWS's errors.
pub fn subscription_topic_arn(subscription_arn: &str) -> EngineResult<String> {
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
    Ok(parts[..6].join(":"))
}

pub fn no_such_subscription() -> EngineError {
    EngineError::NotFound("Subscription does not exist".into())
}

/// The SNS tagging APIs' answer for a topic that does not exist.
pub fn no_tagged_resource() -> EngineError {
    EngineError::SnsResourceNotFound("Resource does not exist".into())
}

/// Subscribe's protocol rules: every AWS protocol is known, but Orderly delivers to queues and
/// (on standard topics, or FIFO ones with the ordered extension) HTTP/S. Answers whether it
/// is a webhook.
pub fn check_protocol(
    name: &str,
    fifo_topic: bool,
    fifo_http: bool,
) -> EngineResult<SubscriptionProtocol> {
    let Some(protocol) = SubscriptionProtocol::parse(name) else {
        return Err(invalid(format!(
            "Invalid parameter: Amazon SNS does not support this protocol string: {name}"
        )));
    };
    let kind = protocol.kind();
    // FIFO topics take only queues (sns.md §3.6), and HTTP/S with Orderly's extension.
    let refused = fifo_topic
        && match kind {
            EndpointKind::Queue => false,
            EndpointKind::Webhook => !fifo_http,
            EndpointKind::Captured => true,
        };
    if refused {
        return Err(invalid(format!(
            "Invalid parameter: Invalid protocol type: {protocol}"
        )));
    }
    Ok(protocol)
}

impl Topic {
    /// CreateTopic of a name that exists: the same attributes and tags are no error.
    pub fn check_recreate(
        &self,
        attrs: &[(String, String)],
        tags: &[(String, String)],
    ) -> EngineResult<()> {
        if !self.same_settings(attrs) {
            return Err(invalid("Invalid parameter: Attributes Reason: Topic already exists with different attributes"));
        }
        if !tags.is_empty() && tags.iter().any(|(k, v)| self.tags.get(k) != Some(v)) {
            return Err(invalid(
                "Invalid parameter: Tags Reason: Topic already exists with different tags",
            ));
        }
        Ok(())
    }

    /// Subscribes the queue `endpoint` (keyed `queue_name`), or answers the existing
    /// subscription of the same endpoint. A queue that does not exist yet is allowed (AWS
    /// checks delivery, not subscription); its type is known from its name. A queue of another
    /// account than the subscriber's pends (`queue_pends`): answered too is the subscription
    /// its SubscriptionConfirmation is for.
    pub fn subscribe_queue(
        &mut self,
        (endpoint, queue_name): (&str, &str),
        attrs: &[(String, String)],
        subscriber: Subscriber,
        (pending, now): (bool, Timestamp),
    ) -> EngineResult<(Subscribed, Option<Arc<Subscription>>)> {
        if queue_name.ends_with(".fifo") && !self.fifo {
            return Err(invalid(
                "Invalid parameter: Invalid parameter: Endpoint Reason: FIFO SQS Queues can not be subscribed to standard SNS topics",
            ));
        }
        self.subscribe_confirmable(
            (SubscriptionProtocol::Sqs, endpoint),
            attrs,
            subscriber,
            (pending, now),
        )
    }

    fn subscription_index(&self, subscription_arn: &str) -> Option<usize> {
        self.subscriptions
            .iter()
            .position(|s| &*s.arn == subscription_arn)
    }

    /// Runs `f` on a copy of a subscription, swapped in afterwards (fan-out snapshots taken
    /// before stay valid).
    pub fn edit_subscription<T>(
        &mut self,
        subscription_arn: &str,
        f: impl FnOnce(&Topic, &mut Subscription) -> EngineResult<T>,
    ) -> EngineResult<T> {
        let index = self
            .subscription_index(subscription_arn)
            .ok_or_else(no_such_subscription)?;
        let mut copy = (*self.subscriptions[index]).clone();
        let out = f(self, &mut copy)?;
        self.subscriptions[index] = Arc::new(copy);
        Ok(out)
    }

    /// Unsubscribe's change to the topic: the removed subscription, `None` if unknown.
    /// `authenticated`: the call was signed.
    pub fn remove_subscription(
        &mut self,
        subscription_arn: &str,
        authenticated: bool,
    ) -> EngineResult<Option<Arc<Subscription>>> {
        let Some(index) = self.subscription_index(subscription_arn) else {
            return Ok(None);
        };
        if self.subscriptions[index].authenticate_on_unsubscribe && !authenticated {
            return Err(EngineError::AuthorizationError(
                "Authorization error: this subscription can only be removed by a signed request"
                    .into(),
            ));
        }
        let removed = self.subscriptions.remove(index);
        self.deleted_subscriptions += 1;
        Ok(Some(removed))
    }
}

impl<W: Default> Engine<W> {
    pub fn topic_arn(&self, name: &str) -> String {
        self.namespaces.arn("sns", name)
    }

    /// The topic name of an SNS ARN, with AWS's errors for malformed and foreign ARNs.
    pub fn topic_name_from_arn<'a>(&self, arn: &'a str, parameter: &str) -> EngineResult<&'a str> {
        topic_name_in_arn(arn, parameter, &self.namespaces)
    }

    pub(in crate::engine) fn topics_read(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, BTreeMap<Arc<str>, Arc<TopicEntry>>> {
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
        super::checked_name(name, attrs)?;
        let mut topics = self.topics.write().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = topics.get(name) {
            let topic = existing.lock();
            topic.check_recreate(attrs, tags)?;
            return Ok(topic.arn.clone());
        }
        check_topic_tags(
            tags.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            tags.len(),
        )?;
        let owner = self.namespaces.place(name).account;
        let mut topic = Topic::new(name, self.topic_arn(name), owner, attrs, now)?;
        topic.tags.extend(tags.iter().cloned());
        let arn = topic.arn.clone();
        if let Some(change_log) = &self.change_log {
            change_log.submit(&Change::Topic {
                name: topic.name.clone(),
                changes: vec![TopicChange::Settings(Box::new(topic.image(false)))],
            });
        }
        topics.insert(
            name.into(),
            Arc::new(TopicEntry::new(topic, self.change_log.clone())),
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
            if let Some(change_log) = &self.change_log {
                change_log.submit(&Change::DeleteTopic {
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

    /// Every topic's publish counts, sorted by name.
    pub fn topic_activity(&self) -> Vec<TopicActivity> {
        self.topics_read()
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

    /// Topic ARNs, sorted by name.
    pub fn list_topics(&self) -> Vec<Arc<str>> {
        self.topics_read()
            .values()
            .map(|t| t.lock().arn.clone())
            .collect()
    }

    /// Subscribe: SQS queues in this account (confirmed at once) and HTTP/S endpoints (pending
    /// until confirmed; a SubscriptionConfirmation goes out). Same topic, protocol and endpoint
    /// return the existing subscription. `base_url` is where clients reach this server;
    /// `principal` the subscriber's ARN (`SubscriptionPrincipal`).
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
        let entry = self.topic(topic_arn)?;
        let topic_owner = entry.lock().owner.clone();
        let subscriber = Subscriber {
            owner: principal
                .and_then(crate::engine::namespace::account_of_principal)
                .unwrap_or(&topic_owner),
            principal,
        };
        let fifo_topic = entry.lock().fifo;
        let protocol = check_protocol(protocol, fifo_topic, self.fifo_http_subscriptions)?;
        let endpoint = endpoint.ok_or_else(|| invalid("Invalid parameter: Endpoint"))?;
        let request = (protocol, endpoint, attrs);
        match protocol.kind() {
            EndpointKind::Webhook => {
                return self.subscribe_webhook(&entry, request, subscriber, base_url, now)
            }
            EndpointKind::Captured => {
                return self.subscribe_captured(&entry, request, subscriber, base_url, now)
            }
            EndpointKind::Queue => {}
        }
        let queue_name = self
            .name_from_arn(endpoint)
            .ok_or_else(|| invalid("Invalid parameter: SQS endpoint ARN"))?;
        let pending = queue_pends(&self.namespaces, queue_name, subscriber.owner);
        let mut topic = entry.lock();
        let (subscribed, to_confirm) =
            topic.subscribe_queue((endpoint, queue_name), attrs, subscriber, (pending, now))?;
        if let Some(subscription) = to_confirm {
            let document = self.subscription_confirmation(&topic, &subscription, base_url, now);
            drop(topic);
            // A queue that does not exist (yet) loses its confirmation, as on AWS.
            let _ = self.enqueue_copy(endpoint, &document.queue_confirmation_copy(), now);
        }
        Ok(subscribed)
    }

    /// The topic of a subscription ARN (`<topic arn>:<id>`).
    pub(in crate::engine) fn subscription_topic(
        &self,
        subscription_arn: &str,
    ) -> EngineResult<Arc<TopicEntry>> {
        let topic_arn = subscription_topic_arn(subscription_arn)?;
        self.topic(&topic_arn).map_err(|_| no_such_subscription())
    }

    /// Runs `f` on a subscription (a copy, swapped in afterwards, so fan-out snapshots stay valid).
    pub fn with_subscription<T>(
        &self,
        subscription_arn: &str,
        f: impl FnOnce(&Topic, &mut Subscription) -> EngineResult<T>,
    ) -> EngineResult<T> {
        let entry = self.subscription_topic(subscription_arn)?;
        let mut topic = entry.lock();
        topic.edit_subscription(subscription_arn, f)
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
        let Some(removed) = topic.remove_subscription(subscription_arn, authenticated)? else {
            return Ok(());
        };
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

    /// Tags of a topic (the SNS tagging APIs answer ResourceNotFound for unknown topics).
    pub fn with_topic_tags<T>(
        &self,
        arn: &str,
        f: impl FnOnce(&mut BTreeMap<String, String>) -> EngineResult<T>,
    ) -> EngineResult<T> {
        let entry = self.topic(arn).map_err(|e| match e {
            EngineError::NotFound(_) => no_tagged_resource(),
            other => other,
        })?;
        let mut topic = entry.lock();
        f(&mut topic.tags)
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
