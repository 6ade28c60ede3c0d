//! The message actions on PostgreSQL, each one transaction (`message_store.rs` has the SQL).
//!
//! A long poll looks for messages, then waits until a send wakes it (`wakeup.rs`: at once on
//! this node, by notification from others), the look-again interval passes (`LOOK_AGAIN`, in
//! case a notification was lost), or its wait time ends, on the injected clock.

use std::time::Duration;

use super::message_store::{decode_handle, QueueRow, SEQUENCE_PLACEHOLDER};
use super::queues::{millis, timestamp};
use super::statements::Cached;
use super::{retrying, unavailable, Postgres};
use crate::backend::BackendResult;
use crate::backend::{Answer, Messages};
use crate::engine::message::MessageId;
use crate::engine::queue::receipt::Receipt;
use crate::engine::queue::send::{self, check_batch, prepare, Prepared};
use crate::engine::queue::{check_receive, ReceiveRequest, Received, SendReceipt, SendRequest};
use crate::engine::queue::{
    check_visibility, expired_handle, DEDUP_WINDOW_MS, MAX_VISIBILITY_SECONDS,
};
use crate::engine::{EngineError, EngineResult, Timestamp};
use crate::persist::format::encode_message;

/// How often a waiting long poll looks again without being woken.
const LOOK_AGAIN: Duration = Duration::from_millis(500);

impl Messages for Postgres {
    fn send<'a>(&'a self, queue: &'a str, request: SendRequest) -> Answer<'a, SendReceipt> {
        Box::pin(async move {
            let queue = {
                let client = self.client().await?;
                self.queue_row(&client, queue).await?
            };
            let now = self.clock.now();
            let prepared = vec![Ok(prepare(&queue.config, request, now, false)?)];
            let mut stored = self.store_sends(&queue, &prepared, now).await?;
            Ok(stored.pop().expect("one receipt per send")?)
        })
    }

    fn send_batch<'a>(
        &'a self,
        queue: &'a str,
        requests: Vec<SendRequest>,
    ) -> Answer<'a, Vec<EngineResult<SendReceipt>>> {
        Box::pin(async move {
            let queue = {
                let client = self.client().await?;
                self.queue_row(&client, queue).await?
            };
            check_batch(&queue.config, &requests)?;
            let now = self.clock.now();
            let prepared: Vec<_> = requests
                .into_iter()
                .map(|request| prepare(&queue.config, request, now, true))
                .collect();
            self.store_sends(&queue, &prepared, now).await
        })
    }

    fn receive<'a>(
        &'a self,
        queue: &'a str,
        request: ReceiveRequest,
        wait_seconds: Option<u64>,
    ) -> Answer<'a, Vec<Received>> {
        Box::pin(async move {
            let queue = {
                let client = self.client().await?;
                self.queue_row(&client, queue).await?
            };
            let (max, visibility) = check_receive(&queue.config, &request)?;
            let wait_seconds = wait_seconds.unwrap_or(u64::from(queue.config.receive_wait_seconds));
            let until = self.clock.now().plus_seconds(wait_seconds);
            let waker = self.wakers.waker(queue.uid);
            loop {
                let woken = waker.notified();
                tokio::pin!(woken);
                woken.as_mut().enable();
                let now = self.clock.now();
                self.expire(&queue, now).await?;
                let asked = (max, request.attempt_id.as_deref());
                let received = self
                    .receive_now(&queue, asked, now.plus_seconds(visibility), now)
                    .await?;
                if !received.is_empty() || now >= until {
                    if !received.is_empty() {
                        // Others waiting may find what this one left.
                        waker.notify_one();
                    }
                    return Ok(received);
                }
                // Woken by a send or a change, by the look-again interval, or when a message
                // in flight or delayed here becomes visible, whichever is first.
                let mut wake_at = now.plus_millis(LOOK_AGAIN.as_millis() as u64).min(until);
                if let Some(next) = self.next_visible(queue.uid, now, wake_at).await? {
                    wake_at = next;
                }
                let _waiting = crate::backend::Waiting::start(&self.long_polls);
                let woke = tokio::select! {
                    _ = woken => true,
                    _ = self.clock.sleep_until(wake_at) => false,
                };
                if woke && !self.queue_exists(queue.uid).await? {
                    // Deleted while waiting: answered empty, and the next poll on it is woken.
                    waker.notify_one();
                    return Ok(Vec::new());
                }
            }
        })
    }

    fn delete<'a>(
        &'a self,
        queue: &'a str,
        handles: Vec<&'a str>,
    ) -> Answer<'a, Vec<EngineResult<()>>> {
        Box::pin(self.delete_handles(queue, handles))
    }

    fn change_visibility<'a>(
        &'a self,
        queue: &'a str,
        changes: Vec<(&'a str, i64)>,
    ) -> Answer<'a, Vec<EngineResult<()>>> {
        Box::pin(self.change_visibilities(queue, changes))
    }
}

impl Postgres {
    /// When the next of the queue's messages in flight or delayed becomes visible, if that is
    /// before `before`. Bounded so the index scan stays short: entries of messages deleted in
    /// flight keep their visibility's end until vacuumed, so an open range from `now` would
    /// walk every message deleted within the last visibility timeout.
    async fn next_visible(
        &self,
        uid: i64,
        now: Timestamp,
        before: Timestamp,
    ) -> BackendResult<Option<Timestamp>> {
        let client = self.client().await?;
        let row = client
            .row(
                "SELECT min(visible_at) FROM messages \
                 WHERE queue_uid = $1 AND visible_at > $2 AND visible_at < $3",
                &[&uid, &millis(now), &millis(before)],
            )
            .await
            .map_err(unavailable)?;
        Ok(row.get::<_, Option<i64>>(0).map(timestamp))
    }

    /// Whether this incarnation of a queue still exists.
    async fn queue_exists(&self, uid: i64) -> BackendResult<bool> {
        let client = self.client().await?;
        let row = client
            .maybe_row("SELECT 1 FROM queues WHERE uid = $1", &[&uid])
            .await
            .map_err(unavailable)?;
        Ok(row.is_some())
    }

    /// ChangeMessageVisibility(Batch) in two round trips: the look-ups (`handle_context`), then
    /// `orderly_change_visibility` (run again if a conflict aborts it); each handle answered
    /// in place. Then wakes the queue's long polls (a message made visible may be the next).
    async fn change_visibilities(
        &self,
        queue: &str,
        changes: Vec<(&str, i64)>,
    ) -> BackendResult<Vec<EngineResult<()>>> {
        let handles: Vec<&str> = changes.iter().map(|(h, _)| *h).collect();
        let (queue, last_seq, order) = self.handle_context(queue, &handles).await?;
        let now = self.clock.now();
        let mut results: Vec<EngineResult<()>> = vec![Ok(()); changes.len()];
        let (mut entries, mut seqs, mut receive_nos, mut deadlines) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for &i in &order {
            let (handle, timeout) = changes[i];
            let Some(receipt) = decode_handle(&queue, handle, last_seq) else {
                results[i] = Err(EngineError::ReceiptHandleIsInvalid(handle.to_string()));
                continue;
            };
            match check_visibility(timeout) {
                Ok(seconds) => {
                    entries.push(i);
                    seqs.push(receipt.seq as i64);
                    receive_nos.push(receipt.receive_no as i64);
                    deadlines.push(millis(now.plus_seconds(seconds)));
                }
                Err(error) => results[i] = Err(error),
            }
        }
        if entries.is_empty() {
            return Ok(results);
        }
        let limit = MAX_VISIBILITY_SECONDS * 1000;
        let rows = retrying(|| async {
            let client = self.client().await?;
            client
                .rows(
                    "SELECT entry, outcome FROM orderly_change_visibility($1, $2, $3, $4, $5, $6, $7)",
                    &[
                        &queue.uid,
                        &queue.config.fifo,
                        &millis(now),
                        &seqs,
                        &receive_nos,
                        &deadlines,
                        &limit,
                    ],
                )
                .await
                .map_err(unavailable)
        })
        .await?;
        for row in &rows {
            let i = entries[row.get::<_, i32>(0) as usize - 1];
            let (handle, timeout) = changes[i];
            results[i] = match row.get::<_, &str>(1) {
                "gone" => Err(EngineError::invalid(format!(
                    "Value {handle} for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change."
                ))),
                "expired" => Err(expired_handle(handle)),
                "beyond" => Err(EngineError::invalid(format!(
                    "Value {timeout} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [{MAX_VISIBILITY_SECONDS} seconds]"
                ))),
                _ => Ok(()),
            };
        }
        self.wake(queue.uid);
        Ok(results)
    }

    /// DeleteMessage(Batch) in two round trips: the look-ups (`handle_context`), then
    /// `orderly_delete` (run again if a conflict aborts it); each handle answered in place.
    async fn delete_handles(
        &self,
        queue: &str,
        handles: Vec<&str>,
    ) -> BackendResult<Vec<EngineResult<()>>> {
        let (queue, last_seq, order) = self.handle_context(queue, &handles).await?;
        let mut results: Vec<EngineResult<()>> = vec![Ok(()); handles.len()];
        let (mut entries, mut seqs, mut receive_nos) = (Vec::new(), Vec::new(), Vec::new());
        for &i in &order {
            match decode_handle(&queue, handles[i], last_seq) {
                Some(receipt) => {
                    entries.push(i);
                    seqs.push(receipt.seq as i64);
                    receive_nos.push(receipt.receive_no as i64);
                }
                None => {
                    results[i] = Err(EngineError::ReceiptHandleIsInvalid(handles[i].to_string()))
                }
            }
        }
        let now = self.clock.now();
        let rows = retrying(|| async {
            let client = self.client().await?;
            client
                .rows(
                    "SELECT entry, expired FROM orderly_delete($1, $2, $3, $4, $5)",
                    &[
                        &queue.uid,
                        &queue.config.fifo,
                        &millis(now),
                        &seqs,
                        &receive_nos,
                    ],
                )
                .await
                .map_err(unavailable)
        })
        .await?;
        let mut deleted = 0;
        for row in &rows {
            let i = entries[row.get::<_, i32>(0) as usize - 1];
            if row.get::<_, bool>(1) {
                results[i] = Err(expired_handle(handles[i]));
            } else {
                deleted += 1;
            }
        }
        self.wake(queue.uid);
        self.activity.count(queue.uid, |a| a.deleted += deleted);
        Ok(results)
    }

    /// What acting on receipt handles needs, asked in one round trip (the statements are
    /// pipelined): the queue, the last position handed out (handles naming a later one were
    /// never issued), and the order to act in: a FIFO queue's by its messages' groups (the
    /// lock order every transaction keeps). Groups are looked up by the handles' own queue,
    /// before the queue's row is in, only for a FIFO name; handles of another queue are
    /// refused later, and any naming no stored message lock no group.
    async fn handle_context(
        &self,
        name: &str,
        handles: &[&str],
    ) -> BackendResult<(QueueRow, i64, Vec<usize>)> {
        let receipts: Vec<Option<Receipt>> = handles.iter().map(|h| Receipt::decode(h)).collect();
        let (uids, seqs): (Vec<i64>, Vec<i64>) = receipts
            .iter()
            .flatten()
            .map(|r| (r.queue_uid as i64, r.seq as i64))
            .unzip();
        let client = self.client().await?;
        let groups = async {
            if handles.len() < 2 || !name.ends_with(".fifo") {
                return Ok(Vec::new());
            }
            client
                .rows(
                    "SELECT m.seq, m.group_id FROM unnest($1::bigint[], $2::bigint[]) AS h(uid, seq) \
                     JOIN messages m ON m.queue_uid = h.uid AND m.seq = h.seq",
                    &[&uids, &seqs],
                )
                .await
                .map_err(unavailable)
        };
        let (queue, last_seq, rows) = tokio::try_join!(
            self.queue_row(&client, name),
            super::message_store::last_seq(&client),
            groups,
        )?;
        let mut order: Vec<usize> = (0..handles.len()).collect();
        if queue.config.fifo {
            let groups: std::collections::HashMap<i64, Option<String>> =
                rows.iter().map(|row| (row.get(0), row.get(1))).collect();
            let group_of = |i: usize| {
                let receipt = receipts[i].as_ref()?;
                if receipt.queue_uid != queue.uid as u64 {
                    return None;
                }
                groups.get(&(receipt.seq as i64)).cloned().flatten()
            };
            // `None` sorts first; handles without a group take no group lock, so any place works.
            order.sort_by_cached_key(|&i| group_of(i));
        }
        Ok((queue, last_seq, order))
    }

    /// Stores the checked sends in one round trip (`orderly_send`, one statement, so one
    /// transaction; run again if a conflict aborts it), each answered in place (one that
    /// failed its checks keeps its error). Sends go in order of their groups, a group's in
    /// the order given, so group rows are locked in one order by every transaction (a delete
    /// batch's too) and two never wait on each other.
    async fn store_sends(
        &self,
        queue: &QueueRow,
        prepared: &[EngineResult<Prepared>],
        now: Timestamp,
    ) -> BackendResult<Vec<EngineResult<SendReceipt>>> {
        let results = retrying(|| async {
            let client = self.client().await?;
            self.send_in_one(&client, queue, prepared, now).await
        })
        .await?;
        if results.iter().any(Result::is_ok) {
            self.wake(queue.uid);
        }
        let stored: Vec<SendReceipt> = results.iter().flatten().cloned().collect();
        self.count_sent(queue.uid, &stored);
        Ok(results)
    }

    /// `orderly_send` for these checked sends on `client` (a pooled connection, or the
    /// transaction a publish holds), each answered in place. Sends go in order of their
    /// groups, a group's in the order given (the lock order).
    pub(super) async fn send_in_one(
        &self,
        client: &impl deadpool_postgres::GenericClient,
        queue: &QueueRow,
        prepared: &[EngineResult<Prepared>],
        now: Timestamp,
    ) -> BackendResult<Vec<EngineResult<SendReceipt>>> {
        let mut order: Vec<usize> = (0..prepared.len())
            .filter(|&i| prepared[i].is_ok())
            .collect();
        order.sort_by_key(|&i| {
            prepared[i]
                .as_ref()
                .ok()
                .and_then(|p| p.message.group_id.clone())
        });
        let batch = SendBatch::new(queue, prepared, &order, now);
        let rows = client
            .rows(
                "SELECT entry, message_id, seq, duplicate FROM orderly_send(\
                 $1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                &[
                    &queue.uid,
                    &queue.config.fifo,
                    &millis(now),
                    &millis(now.plus_millis(DEDUP_WINDOW_MS)),
                    &batch.groups,
                    &batch.keys,
                    &batch.ids,
                    &batch.visible_at,
                    &batch.bypass,
                    &batch.contents,
                ],
            )
            .await
            .map_err(unavailable)?;
        let mut results: Vec<EngineResult<SendReceipt>> = prepared
            .iter()
            .map(|p| match p {
                Ok(_) => Err(EngineError::QueueDoesNotExist),
                Err(error) => Err(error.clone()),
            })
            .collect();
        for row in &rows {
            let entry = order[row.get::<_, i32>(0) as usize - 1];
            let mut message = prepared[entry]
                .as_ref()
                .expect("only checked sends are stored")
                .message
                .clone();
            let seq = row.get::<_, i64>(2) as u64;
            let original = if row.get::<_, bool>(3) {
                let id = MessageId::parse(row.get(1))
                    .ok_or_else(|| unavailable("a stored deduplication record is damaged"))?;
                Some((id, Some(send::sequence_number(seq))))
            } else {
                if queue.config.fifo {
                    message.sequence_number = Some(send::sequence_number(seq));
                }
                None
            };
            results[entry] = Ok(send::receipt(&message, original));
        }
        Ok(results)
    }

    /// Counts stored sends and suppressed duplicates, once committed.
    pub(super) fn count_sent(&self, uid: i64, receipts: &[SendReceipt]) {
        let duplicates = receipts.iter().filter(|r| r.duplicate).count() as u64;
        self.activity.count(uid, |a| {
            a.deduplicated += duplicates;
            a.sent += receipts.len() as u64 - duplicates;
        });
    }
}

/// A batch of checked sends as `orderly_send`'s arrays, in the order they are stored.
struct SendBatch {
    groups: Vec<Option<String>>,
    keys: Vec<Option<String>>,
    ids: Vec<String>,
    visible_at: Vec<i64>,
    bypass: Vec<bool>,
    contents: Vec<Vec<u8>>,
}

impl SendBatch {
    fn new(
        queue: &QueueRow,
        prepared: &[EngineResult<Prepared>],
        order: &[usize],
        now: Timestamp,
    ) -> SendBatch {
        let mut batch = SendBatch {
            groups: Vec::with_capacity(order.len()),
            keys: Vec::with_capacity(order.len()),
            ids: Vec::with_capacity(order.len()),
            visible_at: Vec::with_capacity(order.len()),
            bypass: Vec::with_capacity(order.len()),
            contents: Vec::with_capacity(order.len()),
        };
        for &i in order {
            let Ok(send) = &prepared[i] else { continue };
            let mut message = send.message.clone();
            let key = queue
                .config
                .fifo
                .then(|| send::dedup_key(queue.dedup_scope, &message).to_string());
            if queue.config.fifo {
                message.sequence_number = Some(SEQUENCE_PLACEHOLDER);
            }
            batch
                .groups
                .push(message.group_id.as_deref().map(String::from));
            batch.keys.push(key);
            batch.ids.push(message.id.text().as_str().to_string());
            batch
                .visible_at
                .push(millis(now.plus_seconds(u64::from(send.delay_seconds))));
            batch.bypass.push(send.bypass_dedup);
            batch.contents.push(encode_message(&message));
        }
        batch
    }
}
