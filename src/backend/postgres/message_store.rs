//! Messages in PostgreSQL's tables: storing a send, one receive, deleting and changing the
//! visibility of one message, with FIFO groups, their lock and deduplication (schema:
//! `migrations/002_messages.sql`). `messages.rs` builds the actions on these.
//!
//! Lock order, the same in every transaction so two never wait on each other: a send's
//! deduplication row, then FIFO group rows, then message rows.

use std::sync::Arc;

use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::Row;

use super::queues::{config_of, millis, timestamp};
use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::{BackendError, BackendResult};
use crate::engine::message::Message;
use crate::engine::queue::config::DedupScope;
use crate::engine::queue::receipt::Receipt;
use crate::engine::queue::send;
use crate::engine::queue::{QueueConfig, Received};
use crate::engine::{EngineError, Timestamp};
use crate::persist::format::{decode_message, encode_message};

/// A queue as message operations need it.
pub(super) struct QueueRow {
    pub uid: i64,
    pub name: String,
    pub config: QueueConfig,
    pub dedup_scope: DedupScope,
}

/// The sequence number a FIFO message's content carries when `orderly_send` stored it: that of
/// position 0, which no message has (positions start at 1). Its real one is its position's.
pub(super) const SEQUENCE_PLACEHOLDER: crate::engine::message::SequenceNumber =
    crate::engine::message::SequenceNumber::BASE;

/// The columns `received_of` reads.
pub(super) const RECEIVED: &str = "seq, receive_no, receive_count, first_receive_at, content";

pub(super) fn message_of(row: &Row) -> BackendResult<Message> {
    let content: &[u8] = row.try_get("content").map_err(unavailable)?;
    let mut message = decode_message(content).map_err(unavailable)?;
    // Stored by `orderly_send`: the position gives the sequence number.
    if message.sequence_number == Some(SEQUENCE_PLACEHOLDER) {
        let seq: i64 = row.try_get("seq").map_err(unavailable)?;
        message.sequence_number = Some(send::sequence_number(seq as u64));
    }
    message.receive_count = u32::try_from(row.get::<_, i32>("receive_count")).unwrap_or(0);
    message.first_receive_at = row.get::<_, Option<i64>>("first_receive_at").map(timestamp);
    Ok(message)
}

impl Postgres {
    pub(super) async fn queue_row(
        &self,
        client: &impl GenericClient,
        name: &str,
    ) -> BackendResult<QueueRow> {
        let row = client
            .maybe_row(
                "SELECT uid, fifo, attributes, created_at, last_modified_at, dedup_by_group \
                 FROM queues WHERE name = $1",
                &[&name],
            )
            .await
            .map_err(unavailable)?
            .ok_or(EngineError::QueueDoesNotExist)?;
        Ok(QueueRow {
            uid: row.get("uid"),
            name: name.to_string(),
            config: config_of(&row)?,
            dedup_scope: if row.get("dedup_by_group") {
                DedupScope::MessageGroup
            } else {
                DedupScope::Queue
            },
        })
    }

    /// The queue an ARN names, if it is one of this region and account and exists.
    pub(super) async fn queue_at(
        &self,
        tx: &impl GenericClient,
        arn: &str,
    ) -> BackendResult<Option<QueueRow>> {
        let Some(name) = self.namespaces.key_in_arn("sqs", arn) else {
            return Ok(None);
        };
        match self.queue_row(tx, name).await {
            Ok(queue) => Ok(Some(queue)),
            Err(BackendError::Rejected(EngineError::QueueDoesNotExist)) => Ok(None),
            Err(other) => Err(other),
        }
    }

    async fn insert(
        &self,
        tx: &impl GenericClient,
        uid: i64,
        seq: i64,
        message: &Message,
        visible_at: Timestamp,
        enqueued_at: Timestamp,
    ) -> BackendResult<()> {
        tx.run(
            "INSERT INTO messages (queue_uid, seq, group_id, visible_at, receive_count, \
             first_receive_at, enqueued_at, content) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &uid,
                &seq,
                &message.group_id.as_deref(),
                &millis(visible_at),
                &i32::try_from(message.receive_count).unwrap_or(i32::MAX),
                &message.first_receive_at.map(millis),
                &millis(enqueued_at),
                &encode_message(message),
            ],
        )
        .await
        .map_err(unavailable)?;
        Ok(())
    }

    /// One receive, without waiting: up to `max` messages put in flight until `deadline`;
    /// messages received as often as the redrive policy allows go to the dead-letter queue
    /// instead. A FIFO retry of `attempt_id` gets what that attempt got, if it still stands.
    /// Run again if a conflict with another transaction aborts it.
    pub(super) async fn receive_now(
        &self,
        queue: &QueueRow,
        asked: (usize, Option<&str>),
        deadline: Timestamp,
        now: Timestamp,
    ) -> BackendResult<Vec<Received>> {
        // Attempt ids are a FIFO feature; standard queues ignore them.
        if asked.1.filter(|_| queue.config.fifo).is_none() {
            let fast = super::retrying(|| self.receive_in_one(queue, asked.0, deadline, now));
            if let Some(received) = fast.await? {
                return Ok(received);
            }
        }
        super::retrying(|| self.receive_once(queue, asked, deadline, now)).await
    }

    /// A receive without an attempt id in one round trip (`orderly_receive`); `None` when a
    /// message is due its dead-letter queue, which the full path (`receive_once`) moves.
    async fn receive_in_one(
        &self,
        queue: &QueueRow,
        max: usize,
        deadline: Timestamp,
        now: Timestamp,
    ) -> BackendResult<Option<Vec<Received>>> {
        let client = self.client().await?;
        let room = self.in_flight_room(&client, queue.uid, now).await?;
        if room == 0 && !queue.config.fifo {
            return Err(EngineError::OverLimit(format!(
                "Maximum number of inflight messages reached for queue {}.",
                queue.name
            ))
            .into());
        }
        let max_receives = self
            .dead_letter_target(&client, queue)
            .await?
            .map(|(_, max_receives)| i32::try_from(max_receives).unwrap_or(i32::MAX));
        let taken = client
            .rows(
                "SELECT seq, receive_no, receive_count, first_receive_at, content \
                 FROM orderly_receive($1, $2, $3, $4, $5, $6)",
                &[
                    &queue.uid,
                    &queue.config.fifo,
                    &millis(now),
                    &millis(deadline),
                    &(max.min(room) as i32),
                    &max_receives,
                ],
            )
            .await;
        let rows = match taken {
            Ok(rows) => rows,
            Err(error)
                if error.code() == Some(&tokio_postgres::error::SqlState::RAISE_EXCEPTION) =>
            {
                return Ok(None)
            }
            Err(error) => return Err(unavailable(error)),
        };
        let received = rows
            .iter()
            .map(|row| {
                let receipt = Receipt {
                    queue_uid: queue.uid as u64,
                    seq: row.get::<_, i64>("seq") as u64,
                    receive_no: row.get::<_, i64>("receive_no") as u64,
                };
                Ok(Received {
                    message: message_of(row)?,
                    receipt_handle: receipt.encode(),
                })
            })
            .collect::<BackendResult<Vec<_>>>()?;
        self.in_flight.add(queue.uid, received.len());
        self.activity
            .count(queue.uid, |a| a.received += received.len() as u64);
        Ok(Some(received))
    }

    async fn receive_once(
        &self,
        queue: &QueueRow,
        (max, attempt_id): (usize, Option<&str>),
        deadline: Timestamp,
        now: Timestamp,
    ) -> BackendResult<Vec<Received>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        // Attempt ids are a FIFO feature; standard queues ignore them.
        let attempt_id = attempt_id.filter(|_| queue.config.fifo);
        if let Some(id) = attempt_id {
            if let Some(replayed) = self.replay_attempt(&tx, queue, id, deadline, now).await? {
                tx.commit().await.map_err(unavailable)?;
                return Ok(replayed);
            }
        }
        let room = self.in_flight_room(&tx, queue.uid, now).await?;
        if room == 0 && !queue.config.fifo {
            return Err(EngineError::OverLimit(format!(
                "Maximum number of inflight messages reached for queue {}.",
                queue.name
            ))
            .into());
        }
        let max = max.min(room);
        let dead_letter = self.dead_letter_target(&tx, queue).await?;
        let mut taken = Taken::default();
        if queue.config.fifo {
            let groups = tx
                .rows(
                    "SELECT group_id FROM fifo_groups WHERE queue_uid = $1 AND available_at <= $2 \
                     ORDER BY available_at, head_seq LIMIT $3 FOR UPDATE SKIP LOCKED",
                    &[&queue.uid, &millis(now), &(max as i64)],
                )
                .await
                .map_err(unavailable)?;
            for group in &groups {
                let room = max - taken.received.len();
                if room == 0 {
                    break;
                }
                let group: &str = group.get(0);
                let rows = tx
                    .rows(
                        "SELECT seq, visible_at, receive_count FROM messages \
                         WHERE queue_uid = $1 AND group_id = $2 ORDER BY seq LIMIT $3",
                        &[&queue.uid, &group, &(room as i64)],
                    )
                    .await
                    .map_err(unavailable)?;
                // The group lock: nothing behind a message that is not visible.
                let run: Vec<&Row> = rows
                    .iter()
                    .take_while(|r| r.get::<_, i64>("visible_at") <= millis(now))
                    .collect();
                self.take(&tx, queue, &run, &dead_letter, deadline, now, &mut taken)
                    .await?;
                refresh_group(&tx, queue.uid, group).await?;
            }
        } else {
            let rows = tx
                .rows(
                    "SELECT seq, visible_at, receive_count FROM messages \
                     WHERE queue_uid = $1 AND visible_at <= $2 ORDER BY visible_at, seq \
                     LIMIT $3 FOR UPDATE SKIP LOCKED",
                    &[&queue.uid, &millis(now), &(max as i64)],
                )
                .await
                .map_err(unavailable)?;
            let run: Vec<&Row> = rows.iter().collect();
            self.take(&tx, queue, &run, &dead_letter, deadline, now, &mut taken)
                .await?;
        }
        let dead_lettered: Vec<_> = taken
            .dead_letters
            .iter()
            .map(|(m, _)| (m.id, m.receive_count))
            .collect();
        if let (Some(target), false) = (&dead_letter, taken.dead_letters.is_empty()) {
            self.dead_letter(&tx, queue, target, taken.dead_letters, now)
                .await?;
            notify(&tx, target.0.uid).await?;
        }
        if let (Some(id), false) = (attempt_id, taken.received.is_empty()) {
            self.record_attempt(&tx, queue, id, &taken.received, now)
                .await?;
        }
        tx.commit().await.map_err(unavailable)?;
        self.in_flight.add(queue.uid, taken.received.len());
        self.activity.count(queue.uid, |a| {
            a.received += taken.received.len() as u64;
            a.dead_lettered += dead_lettered.len() as u64;
        });
        if let Some((target, _)) = &dead_letter {
            for (id, receive_count) in dead_lettered {
                crate::backend::log_dead_lettered(&queue.name, &target.name, id, receive_count);
            }
        }
        Ok(taken.received)
    }

    /// The dead-letter queue and maxReceiveCount, if the queue has a redrive policy whose
    /// target exists.
    async fn dead_letter_target(
        &self,
        client: &impl GenericClient,
        queue: &QueueRow,
    ) -> BackendResult<Option<(QueueRow, u32)>> {
        let Some(policy) = &queue.config.redrive_policy else {
            return Ok(None);
        };
        let Some(name) = self
            .namespaces
            .key_in_arn("sqs", &policy.dead_letter_target_arn)
            .filter(|target| self.namespaces.same_place(target, &queue.name))
        else {
            return Ok(None);
        };
        match self.queue_row(client, name).await {
            Ok(target) => Ok(Some((target, policy.max_receive_count))),
            Err(BackendError::Rejected(EngineError::QueueDoesNotExist)) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// Puts `run` in flight, in order, except those received often enough to be dead-lettered
    /// (removed here, handed back in `taken.dead_letters`).
    #[allow(clippy::too_many_arguments)]
    async fn take(
        &self,
        tx: &Transaction<'_>,
        queue: &QueueRow,
        run: &[&Row],
        dead_letter: &Option<(QueueRow, u32)>,
        deadline: Timestamp,
        now: Timestamp,
        taken: &mut Taken,
    ) -> BackendResult<()> {
        let limit = dead_letter.as_ref().map(|(_, max)| *max);
        let (mut expired, mut live) = (Vec::new(), Vec::new());
        for row in run {
            let seq: i64 = row.get("seq");
            let count: i32 = row.get("receive_count");
            if limit.is_some_and(|max| count as u32 >= max) {
                expired.push(seq);
            } else {
                live.push(seq);
            }
        }
        if !expired.is_empty() {
            let sql = format!(
                "DELETE FROM messages WHERE queue_uid = $1 AND seq = ANY($2) RETURNING {RECEIVED}, enqueued_at"
            );
            let rows = tx
                .rows(&sql, &[&queue.uid, &expired])
                .await
                .map_err(unavailable)?;
            for row in &rows {
                taken
                    .dead_letters
                    .push((message_of(row)?, timestamp(row.get("enqueued_at"))));
            }
        }
        if live.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "UPDATE messages SET visible_at = $3, received = true, \
             receive_no = nextval('receive_no'), receive_count = receive_count + 1, \
             first_receive_at = COALESCE(first_receive_at, $4), received_at = $4 \
             WHERE queue_uid = $1 AND seq = ANY($2) RETURNING {RECEIVED}"
        );
        let mut rows = tx
            .rows(&sql, &[&queue.uid, &live, &millis(deadline), &millis(now)])
            .await
            .map_err(unavailable)?;
        // In the order they were chosen (a group's in sequence).
        rows.sort_by_key(|row| {
            let seq: i64 = row.get("seq");
            live.iter().position(|s| *s == seq)
        });
        for row in &rows {
            let receipt = Receipt {
                queue_uid: queue.uid as u64,
                seq: row.get::<_, i64>("seq") as u64,
                receive_no: row.get::<_, i64>("receive_no") as u64,
            };
            taken.received.push(Received {
                message: message_of(row)?,
                receipt_handle: receipt.encode(),
            });
        }
        Ok(())
    }

    /// Stores messages received too often in the dead-letter queue: they keep their id, body,
    /// attributes and receive count and name their source. A FIFO target gives each a new
    /// position and restarts its retention; a standard one keeps the original send time.
    async fn dead_letter(
        &self,
        tx: &Transaction<'_>,
        source: &QueueRow,
        (target, _): &(QueueRow, u32),
        messages: Vec<(Message, Timestamp)>,
        now: Timestamp,
    ) -> BackendResult<()> {
        let source_arn: Arc<str> = self.queue_arn(&source.name).into();
        for (mut message, _) in messages {
            message.set_dead_letter_source_arn(Some(source_arn.clone()));
            self.put_moved(tx, target, message, now).await?;
        }
        Ok(())
    }

    /// Stores a message moved from another queue (dead-lettered or redriven), visible at once,
    /// as the embedded engine's `accept_moved` does: a FIFO target gives it a new position and
    /// restarts its retention; a standard one keeps the original send time.
    pub(super) async fn put_moved(
        &self,
        tx: &impl GenericClient,
        target: &QueueRow,
        mut message: Message,
        now: Timestamp,
    ) -> BackendResult<()> {
        let seq = match (&message.group_id, target.config.fifo) {
            (Some(group), true) => {
                let group = group.clone();
                let head = lock_group(tx, target.uid, &group).await?;
                let seq = next_seq(tx).await?;
                if head.is_none() {
                    set_group_head(tx, target.uid, &group, seq, now).await?;
                }
                message.sequence_number = Some(send::sequence_number(seq as u64));
                seq
            }
            _ => {
                message.sequence_number = None;
                next_seq(tx).await?
            }
        };
        let enqueued_at = if target.config.fifo {
            now
        } else {
            message.sent_at
        };
        self.insert(tx, target.uid, seq, &message, now, enqueued_at)
            .await
    }
}

/// What one receive took.
#[derive(Default)]
struct Taken {
    received: Vec<Received>,
    /// Removed for the dead-letter queue, with when each was enqueued.
    dead_letters: Vec<(Message, Timestamp)>,
}

/// Tells every node's long polls on the queue to look, once this transaction commits.
pub(super) async fn notify(tx: &impl GenericClient, uid: i64) -> BackendResult<()> {
    tx.run(
        "SELECT pg_notify($1, $2)",
        &[&super::wakeup::CHANNEL, &uid.to_string()],
    )
    .await
    .map_err(unavailable)?;
    Ok(())
}

async fn next_seq(tx: &impl GenericClient) -> BackendResult<i64> {
    let row = tx
        .row("SELECT nextval('message_seq')", &[])
        .await
        .map_err(unavailable)?;
    Ok(row.get(0))
}

/// Locks a FIFO group's row, creating it if the group has no messages; answers its head if
/// it had one. Held until commit, so sends to one group take positions in commit order.
async fn lock_group(tx: &impl GenericClient, uid: i64, group: &str) -> BackendResult<Option<i64>> {
    let row = tx
        .row(
            "INSERT INTO fifo_groups (queue_uid, group_id, head_seq, available_at) \
             VALUES ($1, $2, 0, 0) ON CONFLICT (queue_uid, group_id) \
             DO UPDATE SET head_seq = fifo_groups.head_seq RETURNING head_seq",
            &[&uid, &group],
        )
        .await
        .map_err(unavailable)?;
    let head: i64 = row.get(0);
    Ok((head != 0).then_some(head))
}

async fn set_group_head(
    tx: &impl GenericClient,
    uid: i64,
    group: &str,
    seq: i64,
    available_at: Timestamp,
) -> BackendResult<()> {
    tx.run(
        "UPDATE fifo_groups SET head_seq = $3, available_at = $4 \
         WHERE queue_uid = $1 AND group_id = $2",
        &[&uid, &group, &seq, &millis(available_at)],
    )
    .await
    .map_err(unavailable)?;
    Ok(())
}

/// Points a group's row at its first message (the group can be received when that one is
/// visible), or drops the row when the group is empty.
pub(super) async fn refresh_group(
    tx: &impl GenericClient,
    uid: i64,
    group: &str,
) -> BackendResult<()> {
    let head = tx
        .maybe_row(
            "SELECT seq, visible_at FROM messages WHERE queue_uid = $1 AND group_id = $2 \
             ORDER BY seq LIMIT 1",
            &[&uid, &group],
        )
        .await
        .map_err(unavailable)?;
    match head {
        Some(row) => {
            let available_at = timestamp(row.get(1));
            set_group_head(tx, uid, group, row.get(0), available_at).await
        }
        None => {
            tx.run(
                "DELETE FROM fifo_groups WHERE queue_uid = $1 AND group_id = $2",
                &[&uid, &group],
            )
            .await
            .map_err(unavailable)?;
            Ok(())
        }
    }
}

/// The handle, if this queue issued it: its queue incarnation, and a position already given.
pub(super) fn decode_handle(queue: &QueueRow, handle: &str, last_seq: i64) -> Option<Receipt> {
    Receipt::decode(handle)
        .filter(|r| r.queue_uid == queue.uid as u64 && r.seq as i64 <= last_seq && r.seq > 0)
}

/// The last position handed out (handles naming a later one were never issued).
pub(super) async fn last_seq(client: &impl GenericClient) -> BackendResult<i64> {
    let row = client
        .row(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM message_seq",
            &[],
        )
        .await
        .map_err(unavailable)?;
    Ok(row.get(0))
}
