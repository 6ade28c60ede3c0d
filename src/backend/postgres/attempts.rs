//! FIFO receive attempts (ReceiveRequestAttemptId) on PostgreSQL: a receive retried with the
//! same id within five minutes gets the same messages and handles, with fresh visibility, while
//! none of them was deleted, received again or had its visibility changed; otherwise it is a
//! new receive (the `receive_attempts` table).

use deadpool_postgres::{GenericClient, Transaction};
use serde_json::Value;

use super::message_store::{message_of, refresh_group, QueueRow, RECEIVED};
use super::queues::millis;
use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::BackendResult;
use crate::engine::queue::receipt::Receipt;
use crate::engine::queue::{Received, DEDUP_WINDOW_MS};
use crate::engine::Timestamp;

/// (position, receive number, visibility epoch) of each message an attempt returned.
type Entries = Vec<(i64, i64, i32)>;

fn entries_of(value: &Value) -> Option<Entries> {
    value
        .as_array()?
        .iter()
        .map(|entry| {
            let entry = entry.as_array()?;
            Some((
                entry.first()?.as_i64()?,
                entry.get(1)?.as_i64()?,
                i32::try_from(entry.get(2)?.as_i64()?).ok()?,
            ))
        })
        .collect()
}

impl Postgres {
    /// The messages a retried attempt returned, in flight again until `deadline`, if every one
    /// still stands as the attempt left it; `None` (and the attempt forgotten) otherwise.
    pub(super) async fn replay_attempt(
        &self,
        tx: &Transaction<'_>,
        queue: &QueueRow,
        attempt_id: &str,
        deadline: Timestamp,
        now: Timestamp,
    ) -> BackendResult<Option<Vec<Received>>> {
        let row = tx
            .maybe_row(
                "SELECT entries, expires_at FROM receive_attempts \
                 WHERE queue_uid = $1 AND attempt_id = $2 FOR UPDATE",
                &[&queue.uid, &attempt_id],
            )
            .await
            .map_err(unavailable)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let live = row.get::<_, i64>("expires_at") > millis(now);
        let entries = entries_of(&row.get::<_, Value>("entries")).filter(|_| live);
        let replayed = match entries {
            Some(entries) => self.put_back(tx, queue, &entries, deadline, now).await?,
            None => None,
        };
        if replayed.is_none() {
            tx.run(
                "DELETE FROM receive_attempts WHERE queue_uid = $1 AND attempt_id = $2",
                &[&queue.uid, &attempt_id],
            )
            .await
            .map_err(unavailable)?;
        }
        Ok(replayed)
    }

    /// Puts an attempt's messages in flight again until `deadline`, with their handles, if each
    /// is still in flight from that receive with its visibility untouched.
    async fn put_back(
        &self,
        tx: &Transaction<'_>,
        queue: &QueueRow,
        entries: &Entries,
        deadline: Timestamp,
        now: Timestamp,
    ) -> BackendResult<Option<Vec<Received>>> {
        let seqs: Vec<i64> = entries.iter().map(|(seq, _, _)| *seq).collect();
        // The lock order: the groups' rows, then the messages'.
        let groups = tx
            .rows(
                "SELECT DISTINCT group_id FROM messages WHERE queue_uid = $1 AND seq = ANY($2) \
                 ORDER BY group_id",
                &[&queue.uid, &seqs],
            )
            .await
            .map_err(unavailable)?;
        let groups: Vec<String> = groups.iter().filter_map(|r| r.get(0)).collect();
        tx.run(
            "SELECT 1 FROM fifo_groups WHERE queue_uid = $1 AND group_id = ANY($2) \
             ORDER BY group_id FOR UPDATE",
            &[&queue.uid, &groups],
        )
        .await
        .map_err(unavailable)?;
        let standing = tx
            .rows(
                "SELECT seq, receive_no, visibility_epoch, received, visible_at FROM messages \
                 WHERE queue_uid = $1 AND seq = ANY($2) FOR UPDATE",
                &[&queue.uid, &seqs],
            )
            .await
            .map_err(unavailable)?;
        let intact = entries.iter().all(|(seq, receive_no, epoch)| {
            standing.iter().any(|row| {
                row.get::<_, i64>("seq") == *seq
                    && row.get::<_, i64>("receive_no") == *receive_no
                    && row.get::<_, i32>("visibility_epoch") == *epoch
                    && row.get::<_, bool>("received")
                    && row.get::<_, i64>("visible_at") > millis(now)
            })
        });
        if !intact {
            return Ok(None);
        }
        let sql = format!(
            "UPDATE messages SET visible_at = $3 WHERE queue_uid = $1 AND seq = ANY($2) \
             RETURNING {RECEIVED}"
        );
        let rows = tx
            .rows(&sql, &[&queue.uid, &seqs, &millis(deadline)])
            .await
            .map_err(unavailable)?;
        for group in &groups {
            refresh_group(tx, queue.uid, group).await?;
        }
        let mut received = Vec::with_capacity(entries.len());
        for (seq, receive_no, _) in entries {
            let row = rows
                .iter()
                .find(|row| row.get::<_, i64>("seq") == *seq)
                .ok_or_else(|| unavailable("a replayed message vanished"))?;
            let receipt = Receipt {
                queue_uid: queue.uid as u64,
                seq: *seq as u64,
                receive_no: *receive_no as u64,
            };
            received.push(Received {
                message: message_of(row)?,
                receipt_handle: receipt.encode(),
            });
        }
        Ok(Some(received))
    }

    /// Remembers what a receive with an attempt id returned, for its retries.
    pub(super) async fn record_attempt(
        &self,
        tx: &impl GenericClient,
        queue: &QueueRow,
        attempt_id: &str,
        received: &[Received],
        now: Timestamp,
    ) -> BackendResult<()> {
        let receipts: Vec<Receipt> = received
            .iter()
            .filter_map(|r| Receipt::decode(&r.receipt_handle))
            .collect();
        let seqs: Vec<i64> = receipts.iter().map(|r| r.seq as i64).collect();
        let epochs = tx
            .rows(
                "SELECT seq, visibility_epoch FROM messages WHERE queue_uid = $1 AND seq = ANY($2)",
                &[&queue.uid, &seqs],
            )
            .await
            .map_err(unavailable)?;
        let entries: Vec<Value> = receipts
            .iter()
            .map(|r| {
                let epoch = epochs
                    .iter()
                    .find(|row| row.get::<_, i64>(0) == r.seq as i64)
                    .map_or(0, |row| row.get::<_, i32>(1));
                serde_json::json!([r.seq, r.receive_no, epoch])
            })
            .collect();
        tx.run(
            "INSERT INTO receive_attempts (queue_uid, attempt_id, entries, expires_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (queue_uid, attempt_id) \
             DO UPDATE SET entries = EXCLUDED.entries, expires_at = EXCLUDED.expires_at",
            &[
                &queue.uid,
                &attempt_id,
                &Value::Array(entries),
                &millis(now.plus_millis(DEDUP_WINDOW_MS)),
            ],
        )
        .await
        .map_err(unavailable)?;
        Ok(())
    }
}
