//! Queue administration over shards: each queue's own shard, with a dead-letter target in
//! another shard checked against that shard's queue first, and listings gathered.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{on, Sharded};
use crate::backend::{
    Answer, BackendResult, CreateQueue, PolicyEdit, QueueAdmin, QueueView, ShardRead,
};
use crate::engine::queue::config::check_dead_letter_target;
use crate::engine::shard::Shard;
use crate::engine::{QueueConfig, Timestamp};

impl Sharded {
    /// A redrive policy naming a queue in another shard: the rule (`check_dead_letter_target`)
    /// with that queue's configuration, which the source's engine cannot see.
    async fn check_target_elsewhere(
        &self,
        key: &str,
        config: &QueueConfig,
        now: Timestamp,
    ) -> BackendResult<()> {
        let Some(policy) = &config.redrive_policy else {
            return Ok(());
        };
        let Some(target) = self
            .namespaces
            .key_in_arn("sqs", &policy.dead_letter_target_arn)
        else {
            return Ok(());
        };
        let count = self.count();
        if !self.namespaces.same_place(target, key)
            || Shard::of(count, target) == Shard::of(count, key)
        {
            return Ok(());
        }
        let found = (self.target_of(target, now).await?).map(|found| found.config(now));
        let source_arn = self.namespaces.arn("sqs", key);
        Ok(check_dead_letter_target(
            config,
            &source_arn,
            found.as_ref(),
        )?)
    }
}

impl QueueAdmin for Sharded {
    fn create_queue(&self, request: CreateQueue) -> Answer<'_, Arc<str>> {
        Box::pin(async move {
            // Passed to the queue's leader before anything else is asked.
            let home = self.of_key(&request.name)?;
            self.check_target_elsewhere(&request.name, &request.config, request.now)
                .await?;
            home.create_queue(request).await
        })
    }

    fn find_queue<'a>(&'a self, key: &'a str) -> Answer<'a, Arc<str>> {
        on(self.of_key(key), move |shard| shard.find_queue(key))
    }

    fn list_queues<'a>(&'a self, prefix: &'a str) -> Answer<'a, Vec<Arc<str>>> {
        Box::pin(async move {
            let mut keys = self
                .read_all(&ShardRead::Queues(prefix.to_string()))
                .await?;
            keys.sort();
            Ok(keys)
        })
    }

    fn delete_queue<'a>(&'a self, key: &'a str, now: Timestamp) -> Answer<'a, ()> {
        on(self.of_key(key), move |shard| shard.delete_queue(key, now))
    }

    fn describe_queue<'a>(&'a self, key: &'a str, now: Timestamp) -> Answer<'a, QueueView> {
        on(self.of_key(key), move |shard| {
            shard.describe_queue(key, now)
        })
    }

    fn set_queue_attributes<'a>(
        &'a self,
        key: &'a str,
        attributes: Vec<(String, String)>,
        now: Timestamp,
    ) -> Answer<'a, ()> {
        Box::pin(async move {
            let shard = self.of_key(key)?;
            // The queue as it would be, its redrive policy checked whatever changes, as one
            // engine checks it; an attribute it refuses is the engine's to answer.
            let mut candidate = shard.describe_queue(key, now).await?.config;
            if candidate.apply(&attributes).is_ok() {
                self.check_target_elsewhere(key, &candidate, now).await?;
            }
            shard.set_queue_attributes(key, attributes, now).await
        })
    }

    fn purge_queue<'a>(&'a self, key: &'a str, now: Timestamp) -> Answer<'a, ()> {
        on(self.of_key(key), move |shard| shard.purge_queue(key, now))
    }

    fn tag_queue<'a>(&'a self, key: &'a str, tags: BTreeMap<String, String>) -> Answer<'a, ()> {
        on(self.of_key(key), move |shard| shard.tag_queue(key, tags))
    }

    fn untag_queue<'a>(&'a self, key: &'a str, keys: Vec<String>) -> Answer<'a, ()> {
        on(self.of_key(key), move |shard| shard.untag_queue(key, keys))
    }

    fn queue_tags<'a>(&'a self, key: &'a str) -> Answer<'a, BTreeMap<String, String>> {
        on(self.of_key(key), move |shard| shard.queue_tags(key))
    }

    fn edit_queue_policy<'a>(&'a self, key: &'a str, edit: PolicyEdit) -> Answer<'a, ()> {
        on(self.of_key(key), move |shard| {
            shard.edit_queue_policy(key, edit)
        })
    }

    fn queue_target<'a>(
        &'a self,
        key: &'a str,
        now: Timestamp,
    ) -> Answer<'a, Option<crate::backend::QueueTarget>> {
        Box::pin(self.target_of(key, now))
    }

    fn dead_letter_sources<'a>(&'a self, key: &'a str) -> Answer<'a, Vec<Arc<str>>> {
        Box::pin(async move {
            let home = self.of_key(key)?;
            let mut sources = home.dead_letter_sources(key).await?;
            let arn = self.namespaces.arn("sqs", key);
            sources.extend(self.naming_elsewhere(home.shard(), &arn).await?);
            sources.sort();
            Ok(sources)
        })
    }
}
