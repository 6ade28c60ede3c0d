//! Retention on PostgreSQL: a message enqueued longer ago than its queue's
//! MessageRetentionPeriod is gone, whatever its state. A node removes a queue's expired messages
//! before it receives from the queue or counts it, at most once a second per queue (on the
//! injected clock), so a busy queue pays one indexed look a second for it.

use std::collections::HashMap;
use std::sync::Mutex;

use super::message_store::{refresh_group, QueueRow};
use super::queues::millis;
use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::BackendResult;
use crate::engine::Timestamp;

/// Least time between two sweeps of one queue by one node.
const SWEEP_EVERY_MS: u64 = 1_000;

/// When this node last swept each queue (by uid).
#[derive(Default)]
pub struct Sweeps(Mutex<HashMap<i64, Timestamp>>);

impl Sweeps {
    /// Whether the queue is due a sweep at `now`; if so, it counts as swept from now.
    fn due(&self, uid: i64, now: Timestamp) -> bool {
        let mut swept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let recent = swept
            .get(&uid)
            .is_some_and(|at| *at <= now && now.millis_since(*at) < SWEEP_EVERY_MS);
        if !recent {
            swept.insert(uid, now);
        }
        !recent
    }
}

impl Postgres {
    /// Removes the queue's messages past retention at `now` (if this node has not just done so).
    pub(super) async fn expire(&self, queue: &QueueRow, now: Timestamp) -> BackendResult<()> {
        if !self.sweeps.due(queue.uid, now) {
            return Ok(());
        }
        let retention_ms = u64::from(queue.config.retention_seconds) * 1000;
        let cutoff = millis(now) - i64::try_from(retention_ms).unwrap_or(i64::MAX);
        let mut client = self.client().await?;
        if !queue.config.fifo {
            let expired = client
                .run(
                    "DELETE FROM messages WHERE queue_uid = $1 AND enqueued_at <= $2",
                    &[&queue.uid, &cutoff],
                )
                .await
                .map_err(unavailable)?;
            self.activity.count(queue.uid, |a| a.expired += expired);
            return Ok(());
        }
        let groups = client
            .rows(
                "SELECT DISTINCT group_id FROM messages \
                 WHERE queue_uid = $1 AND enqueued_at <= $2 ORDER BY group_id",
                &[&queue.uid, &cutoff],
            )
            .await
            .map_err(unavailable)?;
        if groups.is_empty() {
            return Ok(());
        }
        let tx = client.transaction().await.map_err(unavailable)?;
        // The lock order: each group's row, then its messages.
        let mut expired = 0;
        for group in &groups {
            let group: &str = group.get(0);
            tx.run(
                "SELECT 1 FROM fifo_groups WHERE queue_uid = $1 AND group_id = $2 FOR UPDATE",
                &[&queue.uid, &group],
            )
            .await
            .map_err(unavailable)?;
            expired += tx
                .run(
                    "DELETE FROM messages WHERE queue_uid = $1 AND group_id = $2 AND enqueued_at <= $3",
                    &[&queue.uid, &group, &cutoff],
                )
                .await
                .map_err(unavailable)?;
            refresh_group(&tx, queue.uid, group).await?;
        }
        tx.commit().await.map_err(unavailable)?;
        self.activity.count(queue.uid, |a| a.expired += expired);
        Ok(())
    }
}
