//! Looking inside and starting over, on PostgreSQL: plain reads of the message table (states
//! from the times, as everywhere in this backend) and one transaction per reset.

use super::message_store::{message_of, QueueRow};
use super::queues::{millis, timestamp};
use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::{
    Answer, BackendResult, Inspection, ResetScope, SubscriptionActivity, TopicActivity,
};
use crate::engine::queue::inspect::{GroupView, Peeked, QueueOverview, StateFilter, PEEK_BYTES};
use crate::engine::queue::{Counts, State};
use crate::engine::topic::recorded::RecordedMessage;
use crate::engine::Timestamp;

impl Postgres {
    async fn overview(&self, queue: &QueueRow, now: Timestamp) -> BackendResult<QueueOverview> {
        self.expire(queue, now).await?;
        let client = self.client().await?;
        // A scan of the queue's messages, as GetQueueAttributes does (not a hot path).
        let row = client
            .row(
                "SELECT count(*) FILTER (WHERE visible_at <= $2), \
                 count(*) FILTER (WHERE visible_at > $2 AND received), \
                 count(*) FILTER (WHERE visible_at > $2 AND NOT received), \
                 count(DISTINCT group_id), \
                 count(DISTINCT group_id) FILTER (WHERE visible_at > $2 AND received), \
                 min(enqueued_at) \
                 FROM messages WHERE queue_uid = $1",
                &[&queue.uid, &millis(now)],
            )
            .await
            .map_err(unavailable)?;
        let count = |i: usize| usize::try_from(row.get::<_, i64>(i)).unwrap_or(0);
        let fifo = queue.config.fifo;
        Ok(QueueOverview {
            name: queue.name.as_str().into(),
            arn: self.queue_arn(&queue.name).into(),
            fifo,
            counts: Counts {
                visible: count(0),
                in_flight: count(1),
                delayed: count(2),
            },
            groups: if fifo { count(3) } else { 0 },
            locked_groups: if fifo { count(4) } else { 0 },
            oldest_enqueued_at: row.get::<_, Option<i64>>(5).map(timestamp),
            dead_letter_target_arn: queue
                .config
                .redrive_policy
                .as_ref()
                .map(|p| p.dead_letter_target_arn.clone()),
            // This node's share, since it started (as a Prometheus counter is).
            activity: self.activity.of(queue.uid),
        })
    }

    async fn peek(
        &self,
        name: &str,
        filter: StateFilter,
        limit: usize,
    ) -> BackendResult<Vec<Peeked>> {
        let now = self.clock.now();
        let client = self.client().await?;
        let queue = self.queue_row(&client, name).await?;
        self.expire(&queue, now).await?;
        let rows = client
            .rows(
                // The running total of content sizes keeps the answer within PEEK_BYTES (the
                // first message always comes).
                "SELECT seq, visible_at, received, receive_count, first_receive_at, content FROM ( \
                   SELECT *, sum(length(content)) OVER (ORDER BY enqueued_at, seq) AS running \
                   FROM (SELECT * FROM messages WHERE queue_uid = $1 \
                     AND ((visible_at <= $2 AND $3) OR (visible_at > $2 AND received AND $4) \
                          OR (visible_at > $2 AND NOT received AND $5)) \
                     ORDER BY enqueued_at, seq LIMIT $6) AS admitted \
                 ) AS sized WHERE running <= $7 OR running = length(content) \
                 ORDER BY enqueued_at, seq",
                &[
                    &queue.uid,
                    &millis(now),
                    &filter.visible,
                    &filter.in_flight,
                    &filter.delayed,
                    &i64::try_from(limit).unwrap_or(i64::MAX),
                    &(PEEK_BYTES as i64),
                ],
            )
            .await
            .map_err(unavailable)?;
        rows.iter()
            .map(|row| {
                let at: i64 = row.get("visible_at");
                let state = match (at <= millis(now), row.get::<_, bool>("received")) {
                    (true, _) => State::Visible,
                    (false, true) => State::InFlight(timestamp(at)),
                    (false, false) => State::Delayed(timestamp(at)),
                };
                Ok(Peeked {
                    message: message_of(row)?,
                    state,
                })
            })
            .collect()
    }

    async fn reset_all(&self, scope: ResetScope) -> BackendResult<()> {
        let now = self.clock.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        // Every node's records go, as the embedded engine's do on either reset.
        tx.run("DELETE FROM recorded_messages", &[])
            .await
            .map_err(unavailable)?;
        let gone = match scope {
            ResetScope::Messages => {
                for table in [
                    "messages",
                    "fifo_groups",
                    "dedup",
                    "receive_attempts",
                    "topic_dedup",
                    "topic_archive",
                    "webhook_lanes",
                ] {
                    let sql = format!("DELETE FROM {table}");
                    tx.run(&sql, &[]).await.map_err(unavailable)?;
                }
                // Pending notifications go; confirmations still go out, as on the embedded engine.
                tx.run("DELETE FROM webhook_deliveries WHERE notification", &[])
                    .await
                    .map_err(unavailable)?;
                tx.run("UPDATE queues SET last_purge = NULL", &[])
                    .await
                    .map_err(unavailable)?;
                Vec::new()
            }
            ResetScope::Everything => {
                // As DeleteQueue of each: the names cool down if --deleted-queue-cooldown asks.
                tx.run(
                    "INSERT INTO deleted_queues (name, deleted_at) SELECT name, $1 FROM queues \
                     ON CONFLICT (name) DO UPDATE SET deleted_at = EXCLUDED.deleted_at",
                    &[&millis(now)],
                )
                .await
                .map_err(unavailable)?;
                for table in ["webhook_deliveries", "webhook_lanes", "webhook_tokens"] {
                    let sql = format!("DELETE FROM {table}");
                    tx.run(&sql, &[]).await.map_err(unavailable)?;
                }
                tx.run("DELETE FROM topics", &[])
                    .await
                    .map_err(unavailable)?;
                tx.rows("DELETE FROM queues RETURNING uid", &[])
                    .await
                    .map_err(unavailable)?
            }
        };
        tx.commit().await.map_err(unavailable)?;
        for row in gone {
            self.wakers.forget(row.get("uid"));
        }
        Ok(())
    }
}

impl Inspection for Postgres {
    fn queue_overviews(&self) -> Answer<'_, Vec<QueueOverview>> {
        Box::pin(async move {
            let now = self.clock.now();
            let client = self.client().await?;
            let names = client
                .rows("SELECT name FROM queues ORDER BY name", &[])
                .await
                .map_err(unavailable)?;
            let mut overviews = Vec::with_capacity(names.len());
            for row in names {
                let name: String = row.get(0);
                // A queue deleted since the listing is left out.
                let Ok(queue) = self.queue_row(&client, &name).await else {
                    continue;
                };
                overviews.push(self.overview(&queue, now).await?);
            }
            Ok(overviews)
        })
    }

    fn peek_messages<'a>(
        &'a self,
        queue: &'a str,
        filter: StateFilter,
        limit: usize,
    ) -> Answer<'a, Vec<Peeked>> {
        Box::pin(self.peek(queue, filter, limit))
    }

    fn queue_groups<'a>(&'a self, queue: &'a str, limit: usize) -> Answer<'a, Vec<GroupView>> {
        Box::pin(async move {
            let now = self.clock.now();
            let client = self.client().await?;
            let queue = self.queue_row(&client, queue).await?;
            self.expire(&queue, now).await?;
            let rows = client
                .rows(
                    "SELECT group_id, count(*), count(*) FILTER (WHERE visible_at > $2 AND received) \
                     FROM messages WHERE queue_uid = $1 AND group_id IS NOT NULL \
                     GROUP BY group_id ORDER BY min(seq) LIMIT $3",
                    &[&queue.uid, &millis(now), &i64::try_from(limit).unwrap_or(i64::MAX)],
                )
                .await
                .map_err(unavailable)?;
            let count = |row: &tokio_postgres::Row, i: usize| {
                usize::try_from(row.get::<_, i64>(i)).unwrap_or(0)
            };
            Ok(rows
                .iter()
                .map(|row| GroupView {
                    group: row.get::<_, String>(0).into(),
                    messages: count(row, 1),
                    in_flight: count(row, 2),
                })
                .collect())
        })
    }

    /// Every subscription, with what became of the last messages this node published to it.
    fn subscription_activity(&self) -> Answer<'_, Vec<SubscriptionActivity>> {
        Box::pin(async {
            use crate::backend::Topics;
            let subscriptions = self.list_subscriptions(None).await?;
            Ok(subscriptions
                .into_iter()
                .map(|(topic_arn, subscription)| {
                    let (mut recent, counts) = self.activity.recent(&subscription.arn);
                    let (attempts, last_error) = self.activity.attempts(&subscription.arn);
                    if !attempts.is_empty() {
                        recent.extend(attempts);
                        // Stable: a publish's note stays ahead of its attempts at one instant.
                        recent.sort_by_key(|note| note.at);
                    }
                    SubscriptionActivity {
                        topic_arn,
                        subscription,
                        recent,
                        counts,
                        last_error,
                    }
                })
                .collect())
        })
    }

    fn confirmation_token<'a>(&'a self, subscription_arn: &'a str) -> Answer<'a, Option<String>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = client
                .maybe_row(
                    "SELECT token FROM webhook_tokens WHERE pending_subscription = $1 \
                     AND expires_at > $2 ORDER BY expires_at DESC LIMIT 1",
                    &[&subscription_arn, &millis(self.clock.now())],
                )
                .await
                .map_err(unavailable)?;
            Ok(row.map(|row| row.get(0)))
        })
    }

    /// Every topic's publishes and suppressed duplicates, across all nodes.
    fn topic_activity(&self) -> Answer<'_, Vec<TopicActivity>> {
        Box::pin(async {
            let client = self.client().await?;
            let rows = client
                .rows(
                    "SELECT name, published, deduplicated FROM topics ORDER BY name",
                    &[],
                )
                .await
                .map_err(unavailable)?;
            Ok(rows
                .iter()
                .map(|row| TopicActivity {
                    arn: self.namespaces.arn("sns", row.get::<_, &str>(0)).into(),
                    published: row.get::<_, i64>(1) as u64,
                    deduplicated: row.get::<_, i64>(2) as u64,
                })
                .collect())
        })
    }

    fn reset(&self, scope: ResetScope) -> Answer<'_, ()> {
        Box::pin(self.reset_all(scope))
    }

    fn recorded_messages(&self) -> Answer<'_, crate::backend::recorded::Listed> {
        Box::pin(self.list_recorded())
    }

    fn record(&self, records: Vec<RecordedMessage>) -> Answer<'_, ()> {
        Box::pin(async move {
            let client = self.client().await?;
            self.keep_recorded(&client, &records).await
        })
    }

    fn forget_recorded(&self, ids: Vec<u64>) -> Answer<'_, ()> {
        Box::pin(self.forget_recorded_ids(ids))
    }
}
