//! The webhook outbox on PostgreSQL (schema: `migrations/008_webhooks.sql`), shared by every
//! node: any node's delivery worker takes due deliveries, each under a lease, so a delivery is
//! in flight on one node at a time and one that a dead node held is taken again when its lease
//! ends. The rules are the embedded outbox's: retries per the delivery policy, one delivery
//! per message group in flight for ordered lanes (FIFO topics) in publish order, throttled
//! send slots, the per-subscription cap, and the dead-letter queue for notifications that fail
//! for good.
//!
//! Lock order: a delivery's row, then its lane's row, then queue rows (a dead-letter copy).
//! Queuing takes the lane's row before inserting, so queuing and finishing a group's delivery
//! take turns and a group's next delivery is never left waiting.

use std::sync::Arc;

use deadpool_postgres::{GenericClient, Transaction};

use super::publish::{stored_signer, QueueCache};
use super::queues::millis;
use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::{Answer, BackendResult, Deliveries, DeliveryResult};
use crate::engine::queue::SendReceipt;
use crate::engine::topic::recent::{DeliveryNote, Fate};
use crate::engine::topic::registry::subscription_topic_arn;
use crate::engine::webhook::outbox::{Attempt, Delivery, Kind, LanePolicy, LaneStats, Outcome};
use crate::engine::{EngineError, Timestamp};
use crate::persist::format::{decode_delivery, encode_delivery};

/// Where a notification queued for a webhook went: the outbox, or (over its subscription's
/// cap) the dead-letter queue or nowhere.
pub(super) enum Queued {
    Outbox,
    DeadLettered(i64, SendReceipt),
    Dropped,
}

impl Postgres {
    /// Queues a notification for an HTTP/S subscription in the caller's transaction. Over the
    /// subscription's cap it goes to the subscription's dead-letter queue, or is dropped; both
    /// are counted.
    pub(super) async fn queue_notification(
        &self,
        tx: &Transaction<'_>,
        (delivery, lane): (&Delivery, LanePolicy),
        queues: &mut QueueCache,
        now: Timestamp,
    ) -> BackendResult<Queued> {
        let group = lane
            .ordered
            .then(|| delivery.group_id.clone().unwrap_or_default());
        let throttle = lane.throttle.map(|rate| rate as i32);
        let max_pending = i32::try_from(self.webhook_max_pending).unwrap_or(i32::MAX);
        let queued: bool = tx
            .row(
                "SELECT orderly_queue_notification($1, $2, $3, $4, $5, $6)",
                &[
                    &&*delivery.subscription_arn,
                    &throttle,
                    &max_pending,
                    &group,
                    &encode_delivery(delivery),
                    &millis(now),
                ],
            )
            .await
            .map_err(unavailable)?
            .get(0);
        if queued {
            return Ok(Queued::Outbox);
        }
        self.dead_letter_notification(tx, delivery, queues, now)
            .await
    }

    /// Queues a confirmation message (never capped, never ordered) in the caller's transaction.
    pub(super) async fn queue_confirmation(
        &self,
        tx: &Transaction<'_>,
        delivery: &Delivery,
        now: Timestamp,
    ) -> BackendResult<()> {
        tx.run(
            "INSERT INTO webhook_deliveries (subscription, notification, delivery, due_at) \
             VALUES ($1, false, $2, $3)",
            &[
                &&*delivery.subscription_arn,
                &encode_delivery(delivery),
                &millis(now),
            ],
        )
        .await
        .map_err(unavailable)?;
        Ok(())
    }

    /// A failed notification into its subscription's dead-letter queue (enveloped if the queue
    /// refuses it raw), counted in its lane as dead-lettered, or as dropped if no queue took it.
    async fn dead_letter_notification(
        &self,
        tx: &Transaction<'_>,
        delivery: &Delivery,
        queues: &mut QueueCache,
        now: Timestamp,
    ) -> BackendResult<Queued> {
        let mut stored = None;
        if let Some(dlq) = delivery.dead_letter_arn.as_deref() {
            let (raw, enveloped) = delivery.dead_letter_copies();
            stored = self.copy_into(tx, (dlq, queues), &raw, now).await?;
            if let (None, Some(enveloped)) = (&stored, enveloped) {
                stored = self.copy_into(tx, (dlq, queues), &enveloped, now).await?;
            }
        }
        let counter = if stored.is_some() {
            "UPDATE webhook_lanes SET dead_lettered = dead_lettered + 1 WHERE subscription = $1"
        } else {
            "UPDATE webhook_lanes SET dropped = dropped + 1 WHERE subscription = $1"
        };
        tx.run(counter, &[&&*delivery.subscription_arn])
            .await
            .map_err(unavailable)?;
        Ok(match stored {
            Some((uid, receipt)) => Queued::DeadLettered(uid, receipt),
            None => Queued::Dropped,
        })
    }

    /// Forgets a subscription's notifications and counters (it was unsubscribed, expired or
    /// its topic deleted); its confirmation messages still go out.
    pub(super) async fn remove_lane(
        &self,
        client: &impl GenericClient,
        subscription_arn: &str,
    ) -> BackendResult<()> {
        client
            .run(
                "DELETE FROM webhook_deliveries WHERE subscription = $1 AND notification",
                &[&subscription_arn],
            )
            .await
            .map_err(unavailable)?;
        client
            .run(
                "DELETE FROM webhook_lanes WHERE subscription = $1",
                &[&subscription_arn],
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Deletes subscriptions still pending when their confirmation token expires.
    async fn expire_confirmations(&self, now: Timestamp) -> BackendResult<()> {
        let client = self.client().await?;
        let expired = client
            .rows(
                "DELETE FROM webhook_tokens WHERE expires_at <= $1 RETURNING pending_subscription",
                &[&millis(now)],
            )
            .await
            .map_err(unavailable)?;
        drop(client);
        for row in expired {
            let Some(arn) = row.get::<_, Option<&str>>(0) else {
                continue;
            };
            self.drop_if_pending(arn).await?;
        }
        Ok(())
    }

    async fn drop_if_pending(&self, arn: &str) -> BackendResult<()> {
        let Ok(topic_arn) = subscription_topic_arn(arn) else {
            return Ok(());
        };
        let Ok(name) = self.topic_name(&topic_arn, "TopicArn") else {
            return Ok(());
        };
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        let mut topic = match self.load_topic(&tx, name, true).await {
            Ok(topic) => topic,
            Err(crate::backend::BackendError::Rejected(EngineError::NotFound(_))) => return Ok(()),
            Err(other) => return Err(other),
        };
        let before = topic.subscriptions.len();
        topic
            .subscriptions
            .retain(|s| !(&*s.arn == arn && s.pending));
        if topic.subscriptions.len() < before {
            self.save_topic(&tx, &topic).await?;
            self.remove_lane(&tx, arn).await?;
        }
        tx.commit().await.map_err(unavailable)?;
        Ok(())
    }

    async fn take_once(&self, now: Timestamp, limit: usize) -> BackendResult<Vec<Attempt>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        // Rows another node is taking right now are skipped, not waited for.
        let rows = tx
            .rows(
                "SELECT d.id, d.delivery, d.attempts, d.reserved, l.throttle \
                 FROM webhook_deliveries d LEFT JOIN webhook_lanes l \
                 ON d.notification AND l.subscription = d.subscription \
                 WHERE d.due_at <= $1 ORDER BY d.due_at, d.id LIMIT $2 \
                 FOR UPDATE OF d SKIP LOCKED",
                &[&millis(now), &(limit as i64)],
            )
            .await
            .map_err(unavailable)?;
        let mut taken = Vec::with_capacity(rows.len());
        let mut attempts = Vec::with_capacity(rows.len());
        for row in rows {
            let id: i64 = row.get(0);
            let throttle: Option<i32> = row.get(4);
            if let (Some(rate), false) = (throttle, row.get::<_, bool>(3)) {
                let interval = (1000 / rate.max(1) as i64).max(1);
                let slot: i64 = tx
                    .row(
                        "UPDATE webhook_lanes SET next_slot = GREATEST(next_slot, $2) + $3 \
                         FROM webhook_deliveries d WHERE d.id = $1 \
                         AND webhook_lanes.subscription = d.subscription \
                         RETURNING next_slot - $3",
                        &[&id, &millis(now), &interval],
                    )
                    .await
                    .map_err(unavailable)?
                    .get(0);
                if slot > millis(now) {
                    // Its turn in the throttle is reserved: sent then, without asking again.
                    tx.run(
                        "UPDATE webhook_deliveries SET due_at = $2, reserved = true WHERE id = $1",
                        &[&id, &slot],
                    )
                    .await
                    .map_err(unavailable)?;
                    continue;
                }
            }
            let delivery = decode_delivery(row.get(1)).map_err(unavailable)?;
            taken.push(id);
            attempts.push(Attempt {
                id: id as u64,
                delivery: Arc::new(delivery),
                number: row.get::<_, i32>(2) as u32 + 1,
            });
        }
        // In flight under this node's lease: no other node takes them before it ends.
        let lease_end = now.plus_millis(self.webhook_lease_ms);
        tx.run(
            "UPDATE webhook_deliveries SET attempts = attempts + 1, in_flight = true, \
             reserved = false, due_at = $2 WHERE id = ANY($1)",
            &[&taken, &millis(lease_end)],
        )
        .await
        .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        Ok(attempts)
    }

    async fn finish_once(
        &self,
        attempt: &Attempt,
        outcome: Outcome,
        now: Timestamp,
    ) -> BackendResult<(DeliveryResult, Option<(i64, SendReceipt)>)> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        let id = attempt.id as i64;
        let row = tx
            .maybe_row(
                "SELECT attempts, group_id FROM webhook_deliveries WHERE id = $1 FOR UPDATE",
                &[&id],
            )
            .await
            .map_err(unavailable)?;
        // Gone (unsubscribed meanwhile), or taken again by another node after this node's lease
        // ended: that node's attempt decides.
        let Some(row) = row.filter(|row| row.get::<_, i32>(0) as u32 == attempt.number) else {
            return Ok((DeliveryResult::Gone, None));
        };
        let group: Option<String> = row.get(1);
        let delivery = &attempt.delivery;
        let subscription: &str = &delivery.subscription_arn;
        let notification = delivery.kind == Kind::Notification;
        let retry_delay = match outcome {
            Outcome::Retryable => delivery.retry.delay_before(attempt.number),
            _ => None,
        };
        if let Some(delay) = retry_delay {
            let at = now.plus_millis(delay);
            tx.run(
                "UPDATE webhook_deliveries SET due_at = $2, in_flight = false WHERE id = $1",
                &[&id, &millis(at)],
            )
            .await
            .map_err(unavailable)?;
            if notification {
                tx.run(
                    "UPDATE webhook_lanes SET retries = retries + 1 WHERE subscription = $1",
                    &[&subscription],
                )
                .await
                .map_err(unavailable)?;
            }
            tx.commit().await.map_err(unavailable)?;
            return Ok((DeliveryResult::Retrying(at), None));
        }
        let delivered = outcome == Outcome::Delivered;
        if notification {
            // The lane's row first: a publish queuing into this group waits, then sees this
            // delivery gone (and schedules its own), or is seen by the lookup below.
            let counter = if delivered {
                "UPDATE webhook_lanes SET pending = pending - 1, delivered = delivered + 1 \
                 WHERE subscription = $1"
            } else {
                "UPDATE webhook_lanes SET pending = pending - 1 WHERE subscription = $1"
            };
            tx.run(counter, &[&subscription])
                .await
                .map_err(unavailable)?;
        }
        tx.run("DELETE FROM webhook_deliveries WHERE id = $1", &[&id])
            .await
            .map_err(unavailable)?;
        if let Some(group) = &group {
            tx.run(
                "UPDATE webhook_deliveries SET due_at = $3 WHERE id = (SELECT id \
                 FROM webhook_deliveries WHERE subscription = $1 AND group_id = $2 \
                 ORDER BY id LIMIT 1)",
                &[&subscription, group, &millis(now)],
            )
            .await
            .map_err(unavailable)?;
        }
        let (result, stored) = match (delivered, notification) {
            (true, _) => (DeliveryResult::Delivered, None),
            (false, false) => (DeliveryResult::ConfirmationFailed, None),
            (false, true) => {
                let mut queues = QueueCache::new();
                match self
                    .dead_letter_notification(&tx, delivery, &mut queues, now)
                    .await?
                {
                    Queued::DeadLettered(uid, receipt) => {
                        (DeliveryResult::DeadLettered, Some((uid, receipt)))
                    }
                    _ => (DeliveryResult::Dropped, None),
                }
            }
        };
        tx.commit().await.map_err(unavailable)?;
        Ok((result, stored))
    }
}

impl Deliveries for Postgres {
    fn take_deliveries(&self, now: Timestamp, limit: usize) -> Answer<'_, Vec<Attempt>> {
        Box::pin(async move {
            self.expire_confirmations(now).await?;
            if limit == 0 {
                return Ok(Vec::new());
            }
            super::retrying(|| self.take_once(now, limit)).await
        })
    }

    fn finish_delivery<'a>(
        &'a self,
        attempt: &'a Attempt,
        outcome: Outcome,
        now: Timestamp,
    ) -> Answer<'a, DeliveryResult> {
        Box::pin(async move {
            let (result, stored) =
                super::retrying(|| self.finish_once(attempt, outcome, now)).await?;
            if let Some((uid, receipt)) = stored {
                self.wake(uid);
                self.count_sent(uid, std::slice::from_ref(&receipt));
            }
            // Notifications' attempts are noted (a confirmation is no message of the topic's).
            let fate = match result {
                _ if attempt.delivery.kind != Kind::Notification => None,
                DeliveryResult::Delivered => Some(Fate::Delivered),
                DeliveryResult::Retrying(_) => Some(Fate::Retrying),
                DeliveryResult::DeadLettered | DeliveryResult::Dropped => Some(Fate::GaveUp),
                DeliveryResult::ConfirmationFailed | DeliveryResult::Gone => None,
            };
            if let Some(fate) = fate {
                let note = DeliveryNote {
                    message_id: attempt.delivery.message_id.clone(),
                    at: now,
                    fate,
                };
                self.activity
                    .note_attempt(&attempt.delivery.subscription_arn, note);
            }
            Ok(result)
        })
    }

    fn note_delivery_error(&self, attempt: &Attempt, error: &str, now: Timestamp) {
        self.activity
            .note_error(&attempt.delivery.subscription_arn, error, now);
    }

    fn next_delivery_due(&self) -> Answer<'_, Option<Timestamp>> {
        Box::pin(async {
            let client = self.client().await?;
            let due: Option<i64> = client
                .row("SELECT min(due_at) FROM webhook_deliveries", &[])
                .await
                .map_err(unavailable)?
                .get(0);
            Ok(due.map(|at| Timestamp(at.max(0) as u64)))
        })
    }

    fn delivery_stats(&self) -> Answer<'_, Vec<(Arc<str>, LaneStats)>> {
        Box::pin(async {
            let client = self.client().await?;
            let rows = client
                .rows(
                    "SELECT l.subscription, l.pending, (SELECT count(*) FROM webhook_deliveries d \
                     WHERE d.subscription = l.subscription AND d.notification AND d.in_flight), \
                     l.delivered, l.retries, l.dead_lettered, l.dropped \
                     FROM webhook_lanes l ORDER BY l.subscription",
                    &[],
                )
                .await
                .map_err(unavailable)?;
            Ok(rows
                .iter()
                .map(|row| {
                    let stats = LaneStats {
                        pending: row.get::<_, i32>(1).max(0) as usize,
                        in_flight: row.get::<_, i64>(2) as usize,
                        delivered: row.get::<_, i64>(3) as u64,
                        retries: row.get::<_, i64>(4) as u64,
                        dead_lettered: row.get::<_, i64>(5) as u64,
                        dropped: row.get::<_, i64>(6) as u64,
                    };
                    (Arc::from(row.get::<_, &str>(0)), stats)
                })
                .collect())
        })
    }

    /// The certificate of the key any node signed with, if one was made yet.
    fn signing_certificate<'a>(&'a self, file: &'a str) -> Answer<'a, Option<String>> {
        Box::pin(async move {
            let client = self.client().await?;
            let signer = stored_signer(&client).await?;
            Ok(signer
                .filter(|s| s.certificate_file == file)
                .map(|s| s.certificate_pem.clone()))
        })
    }
}
