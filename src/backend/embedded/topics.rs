//! Topics, subscriptions and publishing on the embedded engine. A publish stores its copies in
//! the subscribed queues and its webhook deliveries in the outbox in one write of the log, then
//! wakes the queues' long polls and the webhook worker.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Embedded;
use crate::backend::{
    Answer, BackendResult, Confirm, CreateTopic, Subscribe, TopicPolicyEdit, Topics,
};
use crate::engine::topic::subscription::Subscribed;
use crate::engine::topic::{Publication, PublishRequest, Subscription, SubscriptionProtocol};
use crate::engine::topics::add_topic_tags;
use crate::engine::{EngineResult, Timestamp};

impl Embedded {
    /// Replays a subscription's pending ReplayPolicy window, if it has one, and wakes what it
    /// filled.
    fn replay(&self, subscription_arn: &str, base_url: &str, now: Timestamp) -> BackendResult<()> {
        for queue in self.engine.replay(subscription_arn, base_url, now)? {
            queue.waiters.notify_one();
        }
        self.deliveries.notify_one();
        Ok(())
    }

    fn publish_one(
        &self,
        topic_arn: &str,
        request: &PublishRequest,
        base_url: &str,
    ) -> EngineResult<Publication> {
        let mut fanout = self
            .engine
            .publish(topic_arn, request, base_url, self.clock.now())?;
        self.captured.keep(std::mem::take(&mut fanout.captured));
        for queue in &fanout.delivered_to {
            queue.waiters.notify_one();
        }
        if fanout.webhooks > 0 {
            self.deliveries.notify_one();
        }
        if fanout.failed > 0 {
            tracing::warn!(
                topic = topic_arn,
                message_id = &*fanout.publication.message_id,
                failed = fanout.failed,
                "copies dropped: no subscribed queue nor dead-letter queue took them"
            );
        }
        Ok(fanout.publication)
    }
}

impl Topics for Embedded {
    fn create_topic(&self, request: CreateTopic) -> Answer<'_, Arc<str>> {
        self.changing(move |engine| {
            Ok(engine.topics.create(
                &request.name,
                &request.attributes,
                &request.tags,
                self.clock.now(),
            )?)
        })
    }

    fn delete_topic<'a>(&'a self, arn: &'a str) -> Answer<'a, ()> {
        self.changing(move |engine| Ok(engine.delete_topic(arn)?))
    }

    fn list_topics(&self) -> Answer<'_, Vec<Arc<str>>> {
        self.reading(move |engine| Ok(engine.topics.list()))
    }

    fn topic_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Vec<(String, String)>> {
        self.reading(move |engine| Ok(engine.topics.get(arn)?.lock().attributes(self.clock.now())))
    }

    fn set_topic_attribute<'a>(
        &'a self,
        arn: &'a str,
        name: &'a str,
        value: &'a str,
    ) -> Answer<'a, ()> {
        self.changing(move |engine| {
            let entry = engine.topics.get(arn)?;
            let mut topic = entry.lock();
            Ok(topic.set(name, value, "", self.clock.now())?)
        })
    }

    fn edit_topic_policy<'a>(&'a self, arn: &'a str, edit: TopicPolicyEdit) -> Answer<'a, ()> {
        self.changing(move |engine| {
            let entry = engine.topics.get(arn)?;
            let mut topic = entry.lock();
            let policy = edit(&topic.policy(), &topic.arn)?;
            Ok(topic.set("Policy", &policy, "", self.clock.now())?)
        })
    }

    fn subscribe<'a>(&'a self, request: Subscribe<'a>) -> Answer<'a, Subscribed> {
        self.changing(move |engine| {
            let now = self.clock.now();
            let mut subscribed = engine.subscribe(
                request.topic_arn,
                request.protocol,
                request.endpoint,
                &request.attributes,
                request.base_url,
                Some(request.principal),
                now,
            )?;
            self.replay(&subscribed.arn, request.base_url, now)?;
            if let Some(confirmation) = subscribed.confirmation.take() {
                self.captured.keep([*confirmation]);
            }
            // A queue of another account may have been sent its SubscriptionConfirmation.
            let confirming = (subscribed.pending
                && subscribed.protocol == SubscriptionProtocol::Sqs)
                .then_some(request.endpoint)
                .flatten()
                .and_then(|arn| engine.queues.get_by_arn(arn).ok());
            if let Some(queue) = confirming {
                queue.waiters.notify_one();
            }
            Ok(subscribed)
        })
    }

    fn confirm_subscription<'a>(&'a self, request: Confirm<'a>) -> Answer<'a, Arc<str>> {
        self.changing(move |engine| {
            Ok(engine.confirm_subscription(
                request.topic_arn,
                request.token,
                request.authenticate_on_unsubscribe,
                request.authenticated,
                self.clock.now(),
            )?)
        })
    }

    fn unsubscribe<'a>(
        &'a self,
        arn: &'a str,
        authenticated: bool,
        base_url: &'a str,
    ) -> Answer<'a, ()> {
        self.changing(move |engine| {
            engine.unsubscribe(arn, authenticated, base_url, self.clock.now())?;
            // An HTTP/S endpoint is sent an UnsubscribeConfirmation.
            self.deliveries.notify_one();
            Ok(())
        })
    }

    fn list_subscriptions<'a>(
        &'a self,
        topic_arn: Option<&'a str>,
    ) -> Answer<'a, Vec<(Arc<str>, Arc<Subscription>)>> {
        self.reading(move |engine| Ok(engine.topics.list_subscriptions(topic_arn)?))
    }

    fn subscription_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Vec<(String, String)>> {
        self.reading(move |engine| {
            Ok(engine
                .topics
                .with_subscription(arn, |topic, sub| Ok(topic.subscription_attributes(sub)))?)
        })
    }

    fn set_subscription_attribute<'a>(
        &'a self,
        arn: &'a str,
        name: &'a str,
        value: &'a str,
        base_url: &'a str,
    ) -> Answer<'a, ()> {
        self.changing(move |engine| {
            let now = self.clock.now();
            engine.topics.with_subscription(arn, |topic, sub| {
                sub.set(name, value, "")?;
                topic.check_filter_count(sub)?;
                topic.check_replay(sub, "", now)
            })?;
            self.replay(arn, base_url, now)
        })
    }

    fn publish<'a>(
        &'a self,
        topic_arn: &'a str,
        request: PublishRequest,
        base_url: &'a str,
    ) -> Answer<'a, Publication> {
        self.changing(move |_| Ok(self.publish_one(topic_arn, &request, base_url)?))
    }

    fn publish_batch<'a>(
        &'a self,
        topic_arn: &'a str,
        requests: Vec<PublishRequest>,
        base_url: &'a str,
    ) -> Answer<'a, Vec<EngineResult<Publication>>> {
        self.changing(move |engine| {
            engine.topics.check_publishes(topic_arn, &requests)?;
            Ok(requests
                .iter()
                .map(|request| self.publish_one(topic_arn, request, base_url))
                .collect())
        })
    }

    fn tag_topic<'a>(&'a self, arn: &'a str, tags: Vec<(String, String)>) -> Answer<'a, ()> {
        self.changing(move |engine| {
            Ok(engine
                .topics
                .with_tags(arn, |existing| add_topic_tags(existing, tags))?)
        })
    }

    fn untag_topic<'a>(&'a self, arn: &'a str, keys: Vec<String>) -> Answer<'a, ()> {
        self.changing(move |engine| {
            Ok(engine.topics.with_tags(arn, |existing| {
                for key in &keys {
                    existing.remove(key);
                }
                Ok(())
            })?)
        })
    }

    fn topic_tags<'a>(&'a self, arn: &'a str) -> Answer<'a, BTreeMap<String, String>> {
        self.reading(move |engine| {
            Ok(engine
                .topics
                .with_tags(arn, |existing| Ok(existing.clone()))?)
        })
    }

    fn put_data_protection_policy<'a>(&'a self, arn: &'a str, policy: String) -> Answer<'a, ()> {
        self.changing(move |engine| {
            engine.topics.key_in_arn(arn, "ResourceArn")?;
            let entry = engine.topics.get(arn)?;
            let mut topic = entry.lock();
            Ok(topic.set_data_protection_policy(&policy)?)
        })
    }

    fn data_protection_policy<'a>(&'a self, arn: &'a str) -> Answer<'a, String> {
        self.reading(move |engine| {
            engine.topics.key_in_arn(arn, "ResourceArn")?;
            Ok(engine.topics.get(arn)?.lock().data_protection_policy())
        })
    }
}
