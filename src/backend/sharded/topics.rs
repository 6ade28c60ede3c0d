//! Topics over shards: each topic's own shard, with its subscriptions; listings gathered in
//! the order one engine gives (topics by key, then each topic's subscriptions in order).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{on, Sharded};
use crate::backend::led_elsewhere;
use crate::backend::{
    Answer, BackendResult, Confirm, CreateTopic, Subscribe, TopicPolicyEdit, Topics,
};
use crate::engine::topic::subscription::Subscribed;
use crate::engine::topic::{Publication, PublishRequest, Subscription};
use crate::engine::EngineResult;

impl Topics for Sharded {
    fn check_topic_led_here(&self, arn: &str) -> BackendResult<()> {
        self.of_topic_arn(arn).map(|_| ())
    }

    fn create_topic(&self, request: CreateTopic) -> Answer<'_, Arc<str>> {
        on(self.of_key(&request.name), move |shard| {
            shard.create_topic(request)
        })
    }

    fn delete_topic<'a>(&'a self, arn: &'a str) -> Answer<'a, ()> {
        on(self.of_topic_arn(arn), move |shard| shard.delete_topic(arn))
    }

    fn list_topics(&self) -> Answer<'_, Vec<Arc<str>>> {
        Box::pin(async move {
            let mut arns = self.read_all(&crate::backend::ShardRead::Topics).await?;
            arns.sort_by(|a, b| self.topic_key(a).cmp(self.topic_key(b)));
            Ok(arns)
        })
    }

    fn topic_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Vec<(String, String)>> {
        on(self.of_topic_arn(arn), move |shard| {
            shard.topic_attributes(arn)
        })
    }

    fn set_topic_attribute<'a>(
        &'a self,
        arn: &'a str,
        name: &'a str,
        value: &'a str,
    ) -> Answer<'a, ()> {
        on(self.of_topic_arn(arn), move |shard| {
            shard.set_topic_attribute(arn, name, value)
        })
    }

    fn edit_topic_policy<'a>(&'a self, arn: &'a str, edit: TopicPolicyEdit) -> Answer<'a, ()> {
        on(self.of_topic_arn(arn), move |shard| {
            shard.edit_topic_policy(arn, edit)
        })
    }

    fn subscribe<'a>(&'a self, request: Subscribe<'a>) -> Answer<'a, Subscribed> {
        on(self.of_topic_arn(request.topic_arn), move |shard| {
            shard.subscribe(request)
        })
    }

    fn confirm_subscription<'a>(&'a self, request: Confirm<'a>) -> Answer<'a, Arc<str>> {
        on(self.of_topic_arn(request.topic_arn), move |shard| {
            shard.confirm_subscription(request)
        })
    }

    fn unsubscribe<'a>(
        &'a self,
        arn: &'a str,
        authenticated: bool,
        base_url: &'a str,
    ) -> Answer<'a, ()> {
        on(self.of_topic_arn(arn), move |shard| {
            shard.unsubscribe(arn, authenticated, base_url)
        })
    }

    fn list_subscriptions<'a>(
        &'a self,
        topic_arn: Option<&'a str>,
    ) -> Answer<'a, Vec<(Arc<str>, Arc<Subscription>)>> {
        if let Some(arn) = topic_arn {
            return on(self.of_topic_arn(arn), move |shard| {
                shard.list_subscriptions(Some(arn))
            });
        }
        Box::pin(async move {
            // Answered here, whatever it reads of other nodes' shards (`read_all`).
            led_elsewhere::touched_here();
            let mut all = Vec::new();
            for n in 0..self.count() {
                all.extend(self.subscriptions_of(n).await?);
            }
            // Stable: each topic's subscriptions keep their order.
            all.sort_by(|(a, _), (b, _)| self.topic_key(a).cmp(self.topic_key(b)));
            Ok(all)
        })
    }

    fn subscription_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Vec<(String, String)>> {
        on(self.of_topic_arn(arn), move |shard| {
            shard.subscription_attributes(arn)
        })
    }

    fn set_subscription_attribute<'a>(
        &'a self,
        arn: &'a str,
        name: &'a str,
        value: &'a str,
        base_url: &'a str,
    ) -> Answer<'a, ()> {
        on(self.of_topic_arn(arn), move |shard| {
            shard.set_subscription_attribute(arn, name, value, base_url)
        })
    }

    fn publish<'a>(
        &'a self,
        topic_arn: &'a str,
        request: PublishRequest,
        base_url: &'a str,
    ) -> Answer<'a, Publication> {
        on(self.of_topic_arn(topic_arn), move |shard| {
            shard.publish(topic_arn, request, base_url)
        })
    }

    fn publish_batch<'a>(
        &'a self,
        topic_arn: &'a str,
        requests: Vec<PublishRequest>,
        base_url: &'a str,
    ) -> Answer<'a, Vec<EngineResult<Publication>>> {
        on(self.of_topic_arn(topic_arn), move |shard| {
            shard.publish_batch(topic_arn, requests, base_url)
        })
    }

    fn tag_topic<'a>(&'a self, arn: &'a str, tags: Vec<(String, String)>) -> Answer<'a, ()> {
        on(self.of_topic_arn(arn), move |shard| {
            shard.tag_topic(arn, tags)
        })
    }

    fn untag_topic<'a>(&'a self, arn: &'a str, keys: Vec<String>) -> Answer<'a, ()> {
        on(self.of_topic_arn(arn), move |shard| {
            shard.untag_topic(arn, keys)
        })
    }

    fn topic_tags<'a>(&'a self, arn: &'a str) -> Answer<'a, BTreeMap<String, String>> {
        on(self.of_topic_arn(arn), move |shard| shard.topic_tags(arn))
    }

    fn put_data_protection_policy<'a>(&'a self, arn: &'a str, policy: String) -> Answer<'a, ()> {
        on(self.of_topic_arn(arn), move |shard| {
            shard.put_data_protection_policy(arn, policy)
        })
    }

    fn data_protection_policy<'a>(&'a self, arn: &'a str) -> Answer<'a, String> {
        on(self.of_topic_arn(arn), move |shard| {
            shard.data_protection_policy(arn)
        })
    }
}
