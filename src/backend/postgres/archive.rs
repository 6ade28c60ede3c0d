//! Topic archives and replay on PostgreSQL (schema: `migrations/009_topic_archive.sql`). A
//! publish to a topic with an ArchivePolicy stores itself in `topic_archive` in its own
//! transaction; a subscription whose ReplayPolicy is pending gets the window's publishes
//! again (its filter applied, envelopes marked as replayed) in one transaction that also
//! marks the replay completed, so a replay runs once, whole or not at all.

use deadpool_postgres::{GenericClient, Transaction};

use super::deliveries::Queued;
use super::publish::QueueCache;
use super::queues::millis;
use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::BackendResult;
use crate::engine::topic::archive::Archived;
use crate::engine::topic::fanout::{plan_replayed_copy, Planned};
use crate::engine::topic::registry::subscription_topic_arn;
use crate::engine::topic::Topic;
use crate::engine::Timestamp;
use crate::persist::format::{decode_archived, encode_archived};

const DAY_MS: u64 = 86_400_000;

impl Postgres {
    /// Keeps a publish in its topic's archive (if the topic has one), dropping what has
    /// passed the archive's retention.
    pub(super) async fn archive(
        &self,
        tx: &Transaction<'_>,
        topic: &Topic,
        archived: &Archived,
    ) -> BackendResult<()> {
        let Some(archive) = &topic.archive else {
            return Ok(());
        };
        let name: &str = &topic.name;
        let now = archived.published_at;
        let keep_from = Timestamp(now.0.saturating_sub(archive.retention_days * DAY_MS));
        tx.run(
            "DELETE FROM topic_archive WHERE topic = $1 AND published_at < $2",
            &[&name, &millis(keep_from)],
        )
        .await
        .map_err(unavailable)?;
        tx.run(
            "INSERT INTO topic_archive (topic, published_at, record) VALUES ($1, $2, $3)",
            &[&name, &millis(now), &encode_archived(archived)],
        )
        .await
        .map_err(unavailable)?;
        Ok(())
    }

    /// Empties a topic's archive (its ArchivePolicy was switched off).
    pub(super) async fn drop_archive(
        &self,
        client: &impl GenericClient,
        topic: &str,
    ) -> BackendResult<()> {
        client
            .run("DELETE FROM topic_archive WHERE topic = $1", &[&topic])
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Runs a subscription's pending ReplayPolicy, if it has one.
    pub(super) async fn replay(&self, subscription_arn: &str, base_url: &str) -> BackendResult<()> {
        let topic_arn = subscription_topic_arn(subscription_arn)?;
        let name = self.topic_name(&topic_arn, "TopicArn")?;
        // Webhook envelopes are signed: the key is read before a transaction holds a connection.
        let signer = Some(self.signer().await?);
        let stored = super::retrying(|| async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(unavailable)?;
            let mut topic = self.load_topic(&tx, name, true).await?;
            let Some((subscription, replay)) = topic.pending_replay(subscription_arn)? else {
                return Ok(Vec::new());
            };
            // The window's publishes, in publish order (the whole window at once, as the
            // embedded engine's archive holds it).
            let end = replay.end.map(millis);
            let rows = tx
                .rows(
                    "SELECT record FROM topic_archive WHERE topic = $1 AND published_at >= $2 \
                     AND ($3::bigint IS NULL OR published_at <= $3) ORDER BY id",
                    &[&name, &millis(replay.start), &end],
                )
                .await
                .map_err(unavailable)?;
            let now = self.clock.now();
            let source = || signer.clone();
            let mut queues = QueueCache::new();
            let mut stored = Vec::new();
            for row in rows {
                let archived = decode_archived(row.get(0)).map_err(unavailable)?;
                let plan = plan_replayed_copy(&topic, &subscription, &archived, base_url, &source);
                match plan {
                    None => {}
                    Some(Planned::Queue(copy)) => {
                        let delivered = self
                            .deliver_copies(&tx, &[&copy], &mut queues, now)
                            .await?
                            .pop()
                            .expect("one outcome per copy");
                        stored.extend(delivered.and_then(|(_, stored)| stored));
                    }
                    Some(Planned::Webhook(delivery, lane)) => {
                        let queued = (&*delivery, lane);
                        if let Queued::DeadLettered(uid, receipt) = self
                            .queue_notification(&tx, queued, &mut queues, now)
                            .await?
                        {
                            stored.push((uid, receipt));
                        }
                    }
                    // Archives are FIFO topics', which take no recorded protocols.
                    Some(Planned::Recorded(_)) => {}
                }
            }
            topic.complete_replay(subscription_arn, &replay);
            self.save_topic(&tx, &topic).await?;
            tx.commit().await.map_err(unavailable)?;
            Ok(stored)
        })
        .await?;
        let mut touched: Vec<i64> = stored.iter().map(|(uid, _)| *uid).collect();
        touched.sort_unstable();
        touched.dedup();
        for uid in touched {
            self.wake(uid);
        }
        for (uid, receipt) in stored {
            self.count_sent(uid, std::slice::from_ref(&receipt));
        }
        self.deliveries.notify_one();
        Ok(())
    }
}
