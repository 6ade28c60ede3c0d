//! Queue administration on PostgreSQL: the `queues` and `deleted_queues` tables.

use std::collections::BTreeMap;
use std::sync::Arc;

use deadpool_postgres::GenericClient;
use serde_json::Value;
use tokio_postgres::Row;

use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::{Answer, BackendResult, CreateQueue, PolicyEdit, QueueAdmin, QueueView};
use crate::engine::queue::config::{check_dead_letter_target, DedupScope};
use crate::engine::queue::{Counts, PURGE_INTERVAL_MS};
use crate::engine::{check_tags, EngineError, QueueConfig, Timestamp};

/// The columns `config_of` reads.
const CONFIG: &str = "fifo, attributes, created_at, last_modified_at";

pub(super) fn millis(at: Timestamp) -> i64 {
    i64::try_from(at.millis()).unwrap_or(i64::MAX)
}

pub(super) fn timestamp(millis: i64) -> Timestamp {
    Timestamp(u64::try_from(millis).unwrap_or(0))
}

/// A JSON object of strings (attributes, tags) as pairs; anything else in it is skipped.
fn pairs_of(value: Value) -> Vec<(String, String)> {
    match value {
        Value::Object(map) => map
            .into_iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k, s)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn object_of<'a>(pairs: impl IntoIterator<Item = (&'a String, &'a String)>) -> Value {
    Value::Object(
        pairs
            .into_iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

pub(super) fn config_of(row: &Row) -> BackendResult<QueueConfig> {
    let attributes = pairs_of(row.try_get("attributes").map_err(unavailable)?);
    QueueConfig::from_stored(
        row.try_get("fifo").map_err(unavailable)?,
        &attributes,
        timestamp(row.try_get("created_at").map_err(unavailable)?),
        timestamp(row.try_get("last_modified_at").map_err(unavailable)?),
    )
    .map_err(|error| unavailable(format!("a stored queue configuration is refused: {error}")))
}

fn dead_letter_target(config: &QueueConfig) -> Option<&str> {
    config
        .redrive_policy
        .as_ref()
        .map(|p| p.dead_letter_target_arn.as_str())
}

impl Postgres {
    /// The queue's configuration, its row locked for the rest of the transaction.
    async fn locked_config(
        &self,
        tx: &impl GenericClient,
        name: &str,
    ) -> BackendResult<QueueConfig> {
        let sql = format!("SELECT {CONFIG} FROM queues WHERE name = $1 FOR UPDATE");
        let row = tx.maybe_row(&sql, &[&name]).await.map_err(unavailable)?;
        config_of(&row.ok_or(EngineError::QueueDoesNotExist)?)
    }

    /// The redrive policy's target must exist, be of the same type and let this queue in.
    async fn check_redrive(
        &self,
        client: &impl GenericClient,
        name: &str,
        config: &QueueConfig,
    ) -> BackendResult<()> {
        // A queue may name itself (issue 32, item 6); its row is read as any other. The target
        // must live in the source's region and account.
        let target_name = dead_letter_target(config)
            .and_then(|arn| self.namespaces.key_in_arn("sqs", arn))
            .filter(|target| self.namespaces.same_place(target, name));
        let target = match target_name {
            Some(target) => {
                let sql = format!("SELECT {CONFIG} FROM queues WHERE name = $1");
                let row = client
                    .maybe_row(&sql, &[&target])
                    .await
                    .map_err(unavailable)?;
                row.as_ref().map(config_of).transpose()?
            }
            None => None,
        };
        Ok(check_dead_letter_target(
            config,
            &self.queue_arn(name),
            target.as_ref(),
        )?)
    }

    /// Refuses a name deleted less than the cooldown ago.
    async fn check_cooldown(&self, client: &impl GenericClient, name: &str) -> BackendResult<()> {
        if self.delete_cooldown_ms == 0 {
            return Ok(());
        }
        let row = client
            .maybe_row(
                "SELECT deleted_at FROM deleted_queues WHERE name = $1",
                &[&name],
            )
            .await
            .map_err(unavailable)?;
        let now = self.clock.now();
        match row {
            Some(row) if now.millis_since(timestamp(row.get(0))) < self.delete_cooldown_ms => {
                Err(EngineError::QueueDeletedRecently.into())
            }
            _ => Ok(()),
        }
    }

    async fn create(&self, request: &CreateQueue) -> BackendResult<Arc<str>> {
        let mut client = self.client().await?;
        // Two nodes creating the same name: one inserts, the other finds its row on the retry.
        loop {
            let tx = client.transaction().await.map_err(unavailable)?;
            self.check_redrive(&tx, &request.name, &request.config)
                .await?;
            let sql = format!("SELECT {CONFIG} FROM queues WHERE name = $1 FOR UPDATE");
            let existing = tx
                .maybe_row(&sql, &[&request.name])
                .await
                .map_err(unavailable)?;
            if let Some(row) = existing {
                let config = config_of(&row)?;
                if let Some(differs) = config.first_difference(&request.config, &request.attributes)
                {
                    return Err(EngineError::QueueNameExists(differs).into());
                }
                return Ok(request.name.as_str().into());
            }
            self.check_cooldown(&tx, &request.name).await?;
            let tags = &request.tags;
            check_tags(
                tags.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                tags.len(),
            )?;
            let config = &request.config;
            let attributes = config.stored_attributes();
            let inserted = tx
                .run(
                    "INSERT INTO queues (name, fifo, attributes, tags, created_at, \
                     last_modified_at, dead_letter_target_arn, dedup_by_group) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO NOTHING",
                    &[
                        &request.name,
                        &config.fifo,
                        &object_of(attributes.iter().map(|(k, v)| (k, v))),
                        &object_of(tags.iter().map(|(k, v)| (k, v))),
                        &millis(config.created_at),
                        &millis(config.last_modified_at),
                        &dead_letter_target(config),
                        &(config.dedup_scope == DedupScope::MessageGroup),
                    ],
                )
                .await
                .map_err(unavailable)?;
            if inserted == 1 {
                tx.commit().await.map_err(unavailable)?;
                return Ok(request.name.as_str().into());
            }
        }
    }

    async fn describe(&self, name: &str, now: Timestamp) -> BackendResult<QueueView> {
        let client = self.client().await?;
        let queue = self.queue_row(&client, name).await?;
        self.expire(&queue, now).await?;
        let uid = queue.uid;
        // Approximate on AWS too; a scan of the queue's messages (not a hot path).
        let counts = client
            .row(
                "SELECT count(*) FILTER (WHERE visible_at <= $2), \
                 count(*) FILTER (WHERE visible_at > $2 AND received), \
                 count(*) FILTER (WHERE visible_at > $2 AND NOT received) \
                 FROM messages WHERE queue_uid = $1",
                &[&uid, &millis(now)],
            )
            .await
            .map_err(unavailable)?;
        let count = |i: usize| usize::try_from(counts.get::<_, i64>(i)).unwrap_or(0);
        Ok(QueueView {
            arn: self.queue_arn(name).into(),
            config: queue.config,
            counts: Counts {
                visible: count(0),
                in_flight: count(1),
                delayed: count(2),
            },
        })
    }

    async fn set_attributes(
        &self,
        name: &str,
        attributes: &[(String, String)],
        now: Timestamp,
    ) -> BackendResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        let mut config = self.locked_config(&tx, name).await?;
        config.apply(attributes)?;
        self.check_redrive(&tx, name, &config).await?;
        config.last_modified_at = now;
        self.store_config(&tx, name, &config).await?;
        tx.commit().await.map_err(unavailable)
    }

    async fn store_config(
        &self,
        client: &impl GenericClient,
        name: &str,
        config: &QueueConfig,
    ) -> BackendResult<()> {
        let attributes = config.stored_attributes();
        client
            .run(
                "UPDATE queues SET attributes = $2, last_modified_at = $3, \
                 dead_letter_target_arn = $4 WHERE name = $1",
                &[
                    &name,
                    &object_of(attributes.iter().map(|(k, v)| (k, v))),
                    &millis(config.last_modified_at),
                    &dead_letter_target(config),
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn delete(&self, name: &str, now: Timestamp) -> BackendResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        let deleted = tx
            .maybe_row("DELETE FROM queues WHERE name = $1 RETURNING uid", &[&name])
            .await
            .map_err(unavailable)?
            .ok_or(EngineError::QueueDoesNotExist)?;
        tx.run(
            "INSERT INTO deleted_queues (name, deleted_at) VALUES ($1, $2) \
             ON CONFLICT (name) DO UPDATE SET deleted_at = EXCLUDED.deleted_at",
            &[&name, &millis(now)],
        )
        .await
        .map_err(unavailable)?;
        // Other nodes' long polls on it look again, find it gone and answer.
        super::message_store::notify(&tx, deleted.get("uid")).await?;
        tx.commit().await.map_err(unavailable)?;
        self.wakers.forget(deleted.get("uid"));
        self.activity.forget(deleted.get("uid"));
        Ok(())
    }

    async fn purge(&self, name: &str, now: Timestamp) -> BackendResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        let row = tx
            .maybe_row(
                "SELECT uid, last_purge FROM queues WHERE name = $1 FOR UPDATE",
                &[&name],
            )
            .await
            .map_err(unavailable)?
            .ok_or(EngineError::QueueDoesNotExist)?;
        let (uid, last): (i64, Option<i64>) = (row.get(0), row.get(1));
        if last.is_some_and(|last| now.millis_since(timestamp(last)) < PURGE_INTERVAL_MS) {
            return Err(EngineError::PurgeQueueInProgress(name.to_string()).into());
        }
        // Every message, and with them the groups, the deduplication history and receive attempts.
        for table in ["messages", "fifo_groups", "dedup", "receive_attempts"] {
            let sql = format!("DELETE FROM {table} WHERE queue_uid = $1");
            tx.run(&sql, &[&uid]).await.map_err(unavailable)?;
        }
        tx.run(
            "UPDATE queues SET last_purge = $2 WHERE name = $1",
            &[&name, &millis(now)],
        )
        .await
        .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)
    }

    async fn locked_tags(
        &self,
        client: &impl GenericClient,
        name: &str,
    ) -> BackendResult<BTreeMap<String, String>> {
        let row = client
            .maybe_row(
                "SELECT tags FROM queues WHERE name = $1 FOR UPDATE",
                &[&name],
            )
            .await
            .map_err(unavailable)?
            .ok_or(EngineError::QueueDoesNotExist)?;
        Ok(pairs_of(row.get(0)).into_iter().collect())
    }

    /// Applies `edit` to the queue's tags, in one transaction.
    async fn edit_tags(
        &self,
        name: &str,
        edit: impl FnOnce(&mut BTreeMap<String, String>) -> BackendResult<()>,
    ) -> BackendResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        let mut tags = self.locked_tags(&tx, name).await?;
        edit(&mut tags)?;
        tx.run(
            "UPDATE queues SET tags = $2 WHERE name = $1",
            &[&name, &object_of(tags.iter())],
        )
        .await
        .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)
    }

    async fn edit_policy(&self, name: &str, edit: PolicyEdit) -> BackendResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        let mut config = self.locked_config(&tx, name).await?;
        config.policy = edit(config.policy.as_deref(), &self.queue_arn(name))?;
        self.store_config(&tx, name, &config).await?;
        tx.commit().await.map_err(unavailable)
    }

    async fn names(&self, sql: &str, value: &str) -> BackendResult<Vec<Arc<str>>> {
        let client = self.client().await?;
        let rows = client.rows(sql, &[&value]).await.map_err(unavailable)?;
        Ok(rows
            .iter()
            .map(|row| Arc::from(row.get::<_, &str>(0)))
            .collect())
    }
}

impl QueueAdmin for Postgres {
    fn create_queue(&self, request: CreateQueue) -> Answer<'_, Arc<str>> {
        Box::pin(async move { self.create(&request).await })
    }

    fn find_queue<'a>(&'a self, name: &'a str) -> Answer<'a, Arc<str>> {
        Box::pin(async move {
            let found = self
                .names("SELECT name FROM queues WHERE name = $1", name)
                .await?;
            found
                .into_iter()
                .next()
                .ok_or_else(|| EngineError::QueueDoesNotExist.into())
        })
    }

    fn list_queues<'a>(&'a self, prefix: &'a str) -> Answer<'a, Vec<Arc<str>>> {
        Box::pin(self.names(
            "SELECT name FROM queues WHERE starts_with(name, $1) ORDER BY name",
            prefix,
        ))
    }

    fn delete_queue<'a>(&'a self, name: &'a str, now: Timestamp) -> Answer<'a, ()> {
        Box::pin(self.delete(name, now))
    }

    fn describe_queue<'a>(&'a self, name: &'a str, now: Timestamp) -> Answer<'a, QueueView> {
        Box::pin(self.describe(name, now))
    }

    fn set_queue_attributes<'a>(
        &'a self,
        name: &'a str,
        attributes: Vec<(String, String)>,
        now: Timestamp,
    ) -> Answer<'a, ()> {
        Box::pin(async move { self.set_attributes(name, &attributes, now).await })
    }

    fn purge_queue<'a>(&'a self, name: &'a str, now: Timestamp) -> Answer<'a, ()> {
        Box::pin(self.purge(name, now))
    }

    fn tag_queue<'a>(&'a self, name: &'a str, tags: BTreeMap<String, String>) -> Answer<'a, ()> {
        Box::pin(self.edit_tags(name, move |current| {
            let added = tags.keys().filter(|k| !current.contains_key(*k)).count();
            check_tags(
                tags.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                current.len() + added,
            )?;
            current.extend(tags);
            Ok(())
        }))
    }

    fn untag_queue<'a>(&'a self, name: &'a str, keys: Vec<String>) -> Answer<'a, ()> {
        Box::pin(self.edit_tags(name, move |current| {
            for key in &keys {
                current.remove(key);
            }
            Ok(())
        }))
    }

    fn queue_tags<'a>(&'a self, name: &'a str) -> Answer<'a, BTreeMap<String, String>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = client
                .maybe_row("SELECT tags FROM queues WHERE name = $1", &[&name])
                .await
                .map_err(unavailable)?
                .ok_or(EngineError::QueueDoesNotExist)?;
            Ok(pairs_of(row.get(0)).into_iter().collect())
        })
    }

    fn edit_queue_policy<'a>(&'a self, name: &'a str, edit: PolicyEdit) -> Answer<'a, ()> {
        Box::pin(self.edit_policy(name, edit))
    }

    fn dead_letter_sources<'a>(&'a self, name: &'a str) -> Answer<'a, Vec<Arc<str>>> {
        Box::pin(async move {
            self.find_queue(name).await?;
            let arn = self.queue_arn(name);
            self.names(
                "SELECT name FROM queues WHERE dead_letter_target_arn = $1 ORDER BY name",
                &arn,
            )
            .await
        })
    }
}
