//! Topics and subscriptions on PostgreSQL (schema: `migrations/004_topics.sql`). Each change
//! locks the topic's row, applies the engine's own topic rules to the stored image and writes
//! it back, so both backends refuse and answer alike. Publishing is in `publish.rs`.
//!
//! HTTP/S subscriptions' confirmation and unsubscribe messages are in `webhooks.rs`, archives
//! and replay in `archive.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;

use deadpool_postgres::GenericClient;

use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::{
    Answer, BackendError, BackendResult, Confirm, CreateTopic, Subscribe, TopicPolicyEdit, Topics,
};
use crate::engine::namespace::account_of_principal;
use crate::engine::topic::registry::{
    add_topic_tags, check_protocol, check_topic_tags, no_such_subscription, no_tagged_resource,
    not_found_topic, queue_pends, subscription_topic_arn, topic_name_in_arn, EndpointKind,
    Subscribed, Subscriber,
};
use crate::engine::topic::{Publication, PublishRequest, Subscription, Topic};
use crate::engine::{EngineError, EngineResult};
use crate::persist::format::{decode_topic, encode_topic};

impl Postgres {
    fn topic_arn(&self, name: &str) -> String {
        self.namespaces.arn("sns", name)
    }

    /// The topic name an ARN parameter names, with AWS's errors.
    pub(super) fn topic_name<'a>(&self, arn: &'a str, parameter: &str) -> EngineResult<&'a str> {
        topic_name_in_arn(arn, parameter, &self.namespaces)
    }

    /// The topic named `name`; with `lock`, its row is locked until the transaction ends.
    pub(super) async fn load_topic(
        &self,
        client: &impl GenericClient,
        name: &str,
        lock: bool,
    ) -> BackendResult<Topic> {
        let sql = if lock {
            "SELECT image, next_seq FROM topics WHERE name = $1 FOR UPDATE"
        } else {
            "SELECT image, next_seq FROM topics WHERE name = $1"
        };
        let row = client
            .maybe_row(sql, &[&name])
            .await
            .map_err(unavailable)?
            .ok_or_else(not_found_topic)?;
        topic_of(row.get("image"), row.get("next_seq"))
    }

    pub(super) async fn save_topic(
        &self,
        client: &impl GenericClient,
        topic: &Topic,
    ) -> BackendResult<()> {
        client
            .run(
                "UPDATE topics SET image = $2 WHERE name = $1",
                &[&&*topic.name, &encode_topic(&topic.image(false))],
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Runs `edit` on the topic named `name`, its row locked, and stores the result.
    pub(super) async fn edit_topic<T>(
        &self,
        name: &str,
        edit: impl FnOnce(&mut Topic) -> EngineResult<T>,
    ) -> BackendResult<T> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        let mut topic = self.load_topic(&tx, name, true).await?;
        let archived = topic.archive.is_some();
        let out = edit(&mut topic)?;
        self.save_topic(&tx, &topic).await?;
        if archived && topic.archive.is_none() {
            self.drop_archive(&tx, &topic.name).await?;
        }
        tx.commit().await.map_err(unavailable)?;
        Ok(out)
    }

    async fn create_topic_row(&self, request: &CreateTopic) -> BackendResult<Arc<str>> {
        let now = self.clock.now();
        let name = &request.name;
        let mut topic = Topic::new(
            name,
            self.topic_arn(name),
            self.namespaces.place(name).account,
            &request.attributes,
            now,
        )?;
        let tags = &request.tags;
        check_topic_tags(
            tags.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            tags.len(),
        )?;
        topic.tags.extend(tags.iter().cloned());
        let client = self.client().await?;
        let inserted = client
            .run(
                "INSERT INTO topics (name, fifo, image) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO NOTHING",
                &[&&**name, &topic.fifo, &encode_topic(&topic.image(false))],
            )
            .await
            .map_err(unavailable)?;
        if inserted == 0 {
            let existing = self.load_topic(&client, name, false).await?;
            existing.check_recreate(&request.attributes, tags)?;
            return Ok(existing.arn.clone());
        }
        Ok(topic.arn.clone())
    }

    async fn subscribe_endpoint(&self, request: &Subscribe<'_>) -> BackendResult<Subscribed> {
        let name = self.topic_name(request.topic_arn, "TopicArn")?;
        let client = self.client().await?;
        let fifo = self.load_topic(&client, name, false).await?.fifo;
        drop(client);
        match check_protocol(request.protocol, fifo, self.fifo_http_subscriptions)? {
            EndpointKind::Queue => {}
            kind => return self.subscribe_confirmable(name, request, kind).await,
        }
        let endpoint = request
            .endpoint
            .ok_or_else(|| EngineError::InvalidParameter("Invalid parameter: Endpoint".into()))?;
        let queue_name = self.namespaces.key_in_arn("sqs", endpoint).ok_or_else(|| {
            EngineError::InvalidParameter("Invalid parameter: SQS endpoint ARN".into())
        })?;
        let owner =
            account_of_principal(request.principal).unwrap_or(self.namespaces.place(name).account);
        if queue_pends(&self.namespaces, queue_name, owner) {
            return self
                .subscribe_confirmable(name, request, EndpointKind::Queue)
                .await;
        }
        let now = self.clock.now();
        self.edit_topic(name, |topic| {
            let subscriber = Subscriber {
                owner,
                principal: Some(request.principal),
            };
            let asked = (endpoint, queue_name);
            let (subscribed, _) =
                topic.subscribe_queue(asked, &request.attributes, subscriber, (false, now))?;
            Ok(subscribed)
        })
        .await
    }

    /// The topic of a subscription, `NotFound` ("Subscription does not exist") if it is gone.
    async fn subscription_home(
        &self,
        client: &impl GenericClient,
        subscription_arn: &str,
    ) -> BackendResult<Topic> {
        let topic_arn = subscription_topic_arn(subscription_arn)?;
        let found = match self.topic_name(&topic_arn, "TopicArn") {
            Ok(name) => self.load_topic(client, name, false).await,
            Err(_) => Err(not_found_topic().into()),
        };
        match found {
            Err(BackendError::Rejected(EngineError::NotFound(_))) => {
                Err(no_such_subscription().into())
            }
            other => other,
        }
    }

    /// Runs `edit` on a topic's tags (the tagging APIs answer ResourceNotFound for a topic
    /// that does not exist).
    async fn edit_topic_tags<T>(
        &self,
        arn: &str,
        edit: impl FnOnce(&mut BTreeMap<String, String>) -> EngineResult<T>,
    ) -> BackendResult<T> {
        let name = self.topic_name(arn, "TopicArn")?;
        match self.edit_topic(name, |topic| edit(&mut topic.tags)).await {
            Err(BackendError::Rejected(EngineError::NotFound(_))) => {
                Err(no_tagged_resource().into())
            }
            other => other,
        }
    }
}

/// A topic from its stored image and its row's sequence count.
pub(super) fn topic_of(image: &[u8], next_seq: i64) -> BackendResult<Topic> {
    let mut image = decode_topic(image).map_err(unavailable)?;
    image.next_seq = next_seq as u64;
    Ok(Topic::from_image(image))
}

impl Topics for Postgres {
    fn create_topic(&self, request: CreateTopic) -> Answer<'_, Arc<str>> {
        Box::pin(async move { self.create_topic_row(&request).await })
    }

    fn delete_topic<'a>(&'a self, arn: &'a str) -> Answer<'a, ()> {
        Box::pin(async move {
            let name = self.topic_name(arn, "TopicArn")?;
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(unavailable)?;
            let topic = match self.load_topic(&tx, name, true).await {
                Ok(topic) => topic,
                Err(BackendError::Rejected(EngineError::NotFound(_))) => return Ok(()),
                Err(other) => return Err(other),
            };
            // Its webhooks' pending notifications go with it (confirmations still go out).
            for subscription in topic.subscriptions.iter().filter(|s| s.is_webhook()) {
                self.remove_lane(&tx, &subscription.arn).await?;
            }
            tx.run("DELETE FROM topics WHERE name = $1", &[&name])
                .await
                .map_err(unavailable)?;
            tx.commit().await.map_err(unavailable)?;
            Ok(())
        })
    }

    fn list_topics(&self) -> Answer<'_, Vec<Arc<str>>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = client
                .rows("SELECT name FROM topics ORDER BY name", &[])
                .await
                .map_err(unavailable)?;
            Ok(rows
                .iter()
                .map(|row| self.topic_arn(row.get(0)).into())
                .collect())
        })
    }

    fn topic_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Vec<(String, String)>> {
        Box::pin(async move {
            let name = self.topic_name(arn, "TopicArn")?;
            let client = self.client().await?;
            let topic = self.load_topic(&client, name, false).await?;
            Ok(topic.attributes(self.clock.now()))
        })
    }

    fn set_topic_attribute<'a>(
        &'a self,
        arn: &'a str,
        name: &'a str,
        value: &'a str,
    ) -> Answer<'a, ()> {
        Box::pin(async move {
            let topic_name = self.topic_name(arn, "TopicArn")?;
            let now = self.clock.now();
            self.edit_topic(topic_name, |topic| topic.set(name, value, "", now))
                .await
        })
    }

    fn edit_topic_policy<'a>(&'a self, arn: &'a str, edit: TopicPolicyEdit) -> Answer<'a, ()> {
        Box::pin(async move {
            let name = self.topic_name(arn, "TopicArn")?;
            let now = self.clock.now();
            self.edit_topic(name, |topic| {
                let policy = edit(&topic.policy(), &topic.arn)?;
                topic.set("Policy", &policy, "", now)
            })
            .await
        })
    }

    fn subscribe<'a>(&'a self, request: Subscribe<'a>) -> Answer<'a, Subscribed> {
        Box::pin(async move {
            let subscribed = self.subscribe_endpoint(&request).await?;
            if request
                .attributes
                .iter()
                .any(|(name, _)| name == "ReplayPolicy")
            {
                self.replay(&subscribed.arn, request.base_url).await?;
            }
            Ok(subscribed)
        })
    }

    fn confirm_subscription<'a>(&'a self, request: Confirm<'a>) -> Answer<'a, Arc<str>> {
        Box::pin(async move { self.confirm_by_token(&request).await })
    }

    fn unsubscribe<'a>(
        &'a self,
        arn: &'a str,
        authenticated: bool,
        base_url: &'a str,
    ) -> Answer<'a, ()> {
        Box::pin(self.unsubscribe_any(arn, authenticated, base_url))
    }

    fn list_subscriptions<'a>(
        &'a self,
        topic_arn: Option<&'a str>,
    ) -> Answer<'a, Vec<(Arc<str>, Arc<Subscription>)>> {
        Box::pin(async move {
            let client = self.client().await?;
            let topics = match topic_arn {
                Some(arn) => {
                    let name = self.topic_name(arn, "TopicArn")?;
                    vec![self.load_topic(&client, name, false).await?]
                }
                None => {
                    let rows = client
                        .rows("SELECT image, next_seq FROM topics ORDER BY name", &[])
                        .await
                        .map_err(unavailable)?;
                    rows.iter()
                        .map(|row| topic_of(row.get("image"), row.get("next_seq")))
                        .collect::<BackendResult<_>>()?
                }
            };
            Ok(topics
                .iter()
                .flat_map(|topic| {
                    topic
                        .subscriptions
                        .iter()
                        .map(|s| (topic.arn.clone(), s.clone()))
                })
                .collect())
        })
    }

    fn subscription_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Vec<(String, String)>> {
        Box::pin(async move {
            let client = self.client().await?;
            let topic = self.subscription_home(&client, arn).await?;
            let subscription = topic
                .subscriptions
                .iter()
                .find(|s| &*s.arn == arn)
                .ok_or_else(no_such_subscription)?;
            Ok(topic.subscription_attributes(subscription))
        })
    }

    fn set_subscription_attribute<'a>(
        &'a self,
        arn: &'a str,
        name: &'a str,
        value: &'a str,
        base_url: &'a str,
    ) -> Answer<'a, ()> {
        Box::pin(async move {
            let client = self.client().await?;
            let topic_name = self.subscription_home(&client, arn).await?.name;
            drop(client);
            let now = self.clock.now();
            let edited = self
                .edit_topic(&topic_name, |topic| {
                    topic.edit_subscription(arn, |topic, sub| {
                        sub.set(name, value, "")?;
                        topic.check_filter_count(sub)?;
                        topic.check_replay(sub, "", now)
                    })
                })
                .await;
            match edited {
                Err(BackendError::Rejected(EngineError::NotFound(_))) => {
                    Err(no_such_subscription().into())
                }
                Err(other) => Err(other),
                Ok(()) if name == "ReplayPolicy" => self.replay(arn, base_url).await,
                Ok(()) => Ok(()),
            }
        })
    }

    fn publish<'a>(
        &'a self,
        topic_arn: &'a str,
        request: PublishRequest,
        base_url: &'a str,
    ) -> Answer<'a, Publication> {
        Box::pin(async move {
            let mut published = self
                .publish_all(topic_arn, std::slice::from_ref(&request), base_url)
                .await?;
            Ok(published.pop().expect("one publication per request")?)
        })
    }

    fn publish_batch<'a>(
        &'a self,
        topic_arn: &'a str,
        requests: Vec<PublishRequest>,
        base_url: &'a str,
    ) -> Answer<'a, Vec<EngineResult<Publication>>> {
        Box::pin(async move { self.publish_all(topic_arn, &requests, base_url).await })
    }

    fn tag_topic<'a>(&'a self, arn: &'a str, tags: Vec<(String, String)>) -> Answer<'a, ()> {
        Box::pin(async move {
            self.edit_topic_tags(arn, |existing| add_topic_tags(existing, tags))
                .await
        })
    }

    fn untag_topic<'a>(&'a self, arn: &'a str, keys: Vec<String>) -> Answer<'a, ()> {
        Box::pin(async move {
            self.edit_topic_tags(arn, |existing| {
                for key in &keys {
                    existing.remove(key);
                }
                Ok(())
            })
            .await
        })
    }

    fn put_data_protection_policy<'a>(&'a self, arn: &'a str, policy: String) -> Answer<'a, ()> {
        Box::pin(async move {
            let name = self.topic_name(arn, "ResourceArn")?;
            self.edit_topic(name, |topic| topic.set_data_protection_policy(&policy))
                .await
        })
    }

    fn data_protection_policy<'a>(&'a self, arn: &'a str) -> Answer<'a, String> {
        Box::pin(async move {
            let name = self.topic_name(arn, "ResourceArn")?;
            let client = self.client().await?;
            let topic = self.load_topic(&client, name, false).await?;
            Ok(topic.data_protection_policy())
        })
    }

    fn topic_tags<'a>(&'a self, arn: &'a str) -> Answer<'a, BTreeMap<String, String>> {
        Box::pin(async move {
            let name = self.topic_name(arn, "TopicArn")?;
            let client = self.client().await?;
            match self.load_topic(&client, name, false).await {
                Ok(topic) => Ok(topic.tags),
                Err(BackendError::Rejected(EngineError::NotFound(_))) => {
                    Err(no_tagged_resource().into())
                }
                Err(other) => Err(other),
            }
        })
    }
}
