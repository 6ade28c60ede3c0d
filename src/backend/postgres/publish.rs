//! Publishing on PostgreSQL: in one transaction the topic decides (its rules, topic-wide
//! deduplication, the sequence number) and every subscribed queue gets its copy, or its
//! subscription's dead-letter queue does, and every HTTP/S subscription's delivery enters the
//! webhook outbox, with the engine's own filter, body and envelope (`plan_copies`). The topic's row is locked throughout, so a topic's publishes reach
//! every queue in one order, and a crash keeps a publish whole or not at all.

use std::sync::Arc;

use deadpool_postgres::{GenericClient, Transaction};
use futures_util::future::try_join_all;

use super::deliveries::Queued;
use super::message_store::QueueRow;
use super::queues::millis;
use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::BackendResult;
use crate::engine::queue::send::{prepare, Prepared};
use crate::engine::queue::{SendReceipt, DEDUP_WINDOW_MS};
use crate::engine::topic::archive::Archived;
use crate::engine::topic::fanout::{plan_copies, Planned, PlannedCopy, SubscriptionCopy};
use crate::engine::topic::recent::{DeliveryNote, Fate};
use crate::engine::topic::signing::MessageSigner;
use crate::engine::topic::{check_message, sequence_number, Publication, PublishRequest, Topic};
use crate::engine::{EngineResult, Timestamp};

/// The queues a publish's copies go to, looked up once per publish: `None` if one is gone.
pub(super) type QueueCache = std::collections::HashMap<String, Option<QueueRow>>;

/// Where a copy was stored: its fate, and the queue that took it and its receipt. `None`: no
/// queue took it.
type Stored = Option<(Fate, Option<(i64, SendReceipt)>)>;

/// The copies a publish stores in one queue: where each is in the publish's list of copies,
/// and its send, in the order given.
struct QueueBatch<'q> {
    queue: &'q QueueRow,
    places: Vec<usize>,
    sends: Vec<EngineResult<Prepared>>,
}

impl Postgres {
    /// Publishes each request in turn, in one transaction (run again if a conflict with
    /// another transaction aborts it). The rules every entry must meet are checked for all
    /// before any is published (as PublishBatch fails the whole batch).
    pub(super) async fn publish_all(
        &self,
        topic_arn: &str,
        requests: &[PublishRequest],
        base_url: &str,
    ) -> BackendResult<Vec<EngineResult<Publication>>> {
        super::retrying(|| self.publish_once(topic_arn, requests, base_url)).await
    }

    async fn publish_once(
        &self,
        topic_arn: &str,
        requests: &[PublishRequest],
        base_url: &str,
    ) -> BackendResult<Vec<EngineResult<Publication>>> {
        let name = self.topic_name(topic_arn, "TopicArn")?;
        // Standard topics (their names never end in .fifo) sign their envelopes, and FIFO
        // topics their webhooks' ones when HTTP/S subscriptions are allowed on them. The key is
        // read (on a connection of its own) before this request holds one in a transaction.
        let signer = if name.ends_with(".fifo") && !self.fifo_http_subscriptions {
            None
        } else {
            Some(self.signer().await?)
        };
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        let topic = self.load_topic(&tx, name, true).await?;
        for request in requests {
            check_message(request)?;
            topic.check_fifo_rules(request)?;
        }
        let now = self.clock.now();
        // (queue uid, its receipt) of each stored copy, and each subscription's note.
        let mut stored: Vec<(i64, SendReceipt)> = Vec::new();
        let mut notes: Vec<(Arc<str>, DeliveryNote)> = Vec::new();
        let mut queues = QueueCache::new();
        let mut published = Vec::with_capacity(requests.len());
        let mut to_webhooks = false;
        let mut recorded = Vec::new();
        // The topic decides on every request first, then every queue copy is stored at once:
        // a publish holds the topic's lock until it commits, so its round trips bound the
        // topic's publish rate.
        let publications = self.decide(&tx, &topic, requests, now).await?;
        let mut decided = Vec::with_capacity(requests.len());
        for (request, publication) in requests.iter().zip(publications) {
            let mut plans = Vec::new();
            if !publication.duplicate {
                if topic.archive.is_some() {
                    let archived = Archived {
                        publication: publication.clone(),
                        request: request.clone(),
                        published_at: now,
                    };
                    self.archive(&tx, &topic, &archived).await?;
                }
                let source = || signer.clone();
                plans = plan_copies(
                    &topic,
                    (&publication, request),
                    (now, false),
                    base_url,
                    &source,
                );
            }
            decided.push((publication, plans));
        }
        let queue_plans: Vec<&PlannedCopy> = decided
            .iter()
            .flat_map(|(_, plans)| plans)
            .filter_map(|(_, plan)| match plan {
                Some(Planned::Queue(plan)) => Some(plan),
                _ => None,
            })
            .collect();
        let copies = self
            .deliver_copies(&tx, &queue_plans, &mut queues, now)
            .await?;
        drop(queue_plans);
        let mut copies = copies.into_iter();
        for (publication, plans) in decided {
            for (subscription, plan) in plans {
                let delivered = match plan {
                    None => None,
                    Some(Planned::Queue(_)) => {
                        Some(copies.next().expect("one outcome per queue copy"))
                    }
                    Some(Planned::Webhook(delivery, lane)) => {
                        let queued = (&*delivery, lane);
                        match self
                            .queue_notification(&tx, queued, &mut queues, now)
                            .await?
                        {
                            Queued::Outbox => {
                                to_webhooks = true;
                                Some(Some((Fate::ToWebhook, None)))
                            }
                            Queued::DeadLettered(uid, receipt) => {
                                Some(Some((Fate::DeadLettered, Some((uid, receipt)))))
                            }
                            Queued::Dropped => Some(None),
                        }
                    }
                    Some(Planned::Recorded(record)) => {
                        recorded.push(*record);
                        Some(Some((Fate::Recorded, None)))
                    }
                };
                let fate = match delivered {
                    None => Fate::FilteredOut,
                    Some(Some((fate, stored_copy))) => {
                        stored.extend(stored_copy);
                        fate
                    }
                    Some(None) => {
                        let (id, arn) = (&*publication.message_id, &*subscription.arn);
                        tracing::warn!(topic = topic_arn, message_id = id, subscription = arn,
                            "copy dropped: neither the subscribed queue nor a dead-letter queue took it");
                        Fate::Failed
                    }
                };
                let note = DeliveryNote {
                    message_id: publication.message_id.clone(),
                    at: now,
                    fate,
                };
                notes.push((subscription.arn.clone(), note));
            }
            published.push(Ok(publication));
        }
        // Each copy's `orderly_send` notified its queue's long polls, on commit.
        let mut touched: Vec<i64> = stored.iter().map(|(uid, _)| *uid).collect();
        touched.sort_unstable();
        touched.dedup();
        self.keep_recorded(&tx, &recorded).await?;
        tx.commit().await.map_err(unavailable)?;
        if to_webhooks {
            self.deliveries.notify_one();
        }
        for uid in touched {
            self.wake(uid);
        }
        for (uid, receipt) in stored {
            self.count_sent(uid, std::slice::from_ref(&receipt));
        }
        for (subscription, note) in notes {
            self.activity.note(&subscription, note);
        }
        Ok(published)
    }

    /// What the topic decides for each publish, in one statement: a FIFO duplicate within
    /// five minutes gets the original's ids and is delivered nowhere; anything else gets a new
    /// id (and a FIFO topic the next sequence number).
    async fn decide(
        &self,
        tx: &Transaction<'_>,
        topic: &Topic,
        requests: &[PublishRequest],
        now: Timestamp,
    ) -> BackendResult<Vec<Publication>> {
        let ids: Vec<String> = requests
            .iter()
            .map(|_| uuid::Uuid::new_v4().to_string())
            .collect();
        let name: &str = &topic.name;
        if !topic.fifo {
            tx.run(
                "UPDATE topics SET published = published + $2 WHERE name = $1",
                &[&name, &(requests.len() as i64)],
            )
            .await
            .map_err(unavailable)?;
            let fresh = ids.into_iter().map(|id| Publication {
                message_id: id.into(),
                sequence_number: None,
                dedup_id: None,
                duplicate: false,
            });
            return Ok(fresh.collect());
        }
        let (keys, dedup_ids): (Vec<String>, Vec<_>) =
            requests.iter().map(|r| topic.dedup_key(r)).unzip();
        let rows = tx
            .rows(
                "SELECT entry, message_id, seq, duplicate FROM orderly_decide($1, $2, $3, $4, $5) ORDER BY entry",
                &[
                    &name,
                    &millis(now),
                    &millis(now.plus_millis(DEDUP_WINDOW_MS)),
                    &keys,
                    &ids,
                ],
            )
            .await
            .map_err(unavailable)?;
        if rows.len() != requests.len() {
            return Err(unavailable("a topic decided a different number of entries"));
        }
        let decided = rows
            .iter()
            .zip(dedup_ids)
            .map(|(row, dedup_id)| Publication {
                message_id: row.get::<_, &str>(1).into(),
                sequence_number: Some(sequence_number(row.get::<_, i64>(2) as u64)),
                dedup_id: Some(dedup_id),
                duplicate: row.get(3),
            });
        Ok(decided.collect())
    }

    /// Stores planned copies, each in its queue or, if the queue is gone or refuses it, in
    /// its subscription's dead-letter queue (enveloped if that refuses the raw copy too).
    /// Answers, in order, where each went, the queue that took it and that queue's receipt.
    /// Where a copy goes is known once the queues are looked up, so the look-ups are sent to
    /// the database together, then one send per queue with its copies in the order given:
    /// two round trips, and one `orderly_send` per queue, however many copies.
    pub(super) async fn deliver_copies(
        &self,
        tx: &Transaction<'_>,
        plans: &[&PlannedCopy],
        queues: &mut QueueCache,
        now: Timestamp,
    ) -> BackendResult<Vec<Stored>> {
        let mut arns = Vec::with_capacity(plans.len());
        for plan in plans {
            arns.push(plan.subscription.endpoint.as_str());
            arns.extend(plan.subscription.dead_letter_arn());
        }
        self.look_up_queues(tx, arns, queues).await?;
        let mut fates = vec![None; plans.len()];
        // Per queue, in the order queues are first named: the copies' places and sends.
        let mut batches: Vec<QueueBatch> = Vec::new();
        let mut batch_of: std::collections::HashMap<i64, usize> = Default::default();
        for (at, plan) in plans.iter().enumerate() {
            let Some((fate, queue, prepared)) = place(plan, queues, now) else {
                continue;
            };
            fates[at] = Some(fate);
            let batch = *batch_of.entry(queue.uid).or_insert_with(|| {
                batches.push(QueueBatch {
                    queue,
                    places: Vec::new(),
                    sends: Vec::new(),
                });
                batches.len() - 1
            });
            batches[batch].places.push(at);
            batches[batch].sends.push(Ok(prepared));
        }
        let mut sends = Vec::with_capacity(batches.len());
        for batch in &batches {
            sends.push(self.send_in_one(tx, batch.queue, &batch.sends, now));
        }
        let answers = try_join_all(sends).await?;
        let mut stored: Vec<Stored> = vec![None; plans.len()];
        for (batch, receipts) in batches.iter().zip(answers) {
            for (&at, receipt) in batch.places.iter().zip(receipts) {
                let fate = fates[at].expect("placed");
                stored[at] = Some((fate, Some((batch.queue.uid, receipt?))));
            }
        }
        Ok(stored)
    }

    /// Looks up, together, the queues ARNs name that `queues` does not hold yet.
    async fn look_up_queues(
        &self,
        tx: &Transaction<'_>,
        mut missing: Vec<&str>,
        queues: &mut QueueCache,
    ) -> BackendResult<()> {
        missing.retain(|arn| !queues.contains_key(*arn));
        missing.sort_unstable();
        missing.dedup();
        let mut look_ups = Vec::with_capacity(missing.len());
        for arn in &missing {
            look_ups.push(self.queue_at(tx, arn));
        }
        let found = try_join_all(look_ups).await?;
        queues.extend(missing.into_iter().map(String::from).zip(found));
        Ok(())
    }

    /// Stores a copy in the queue an ARN names, answering that queue's uid and receipt;
    /// `None` if the queue is gone or refuses it (too large for it, too many attributes).
    pub(super) async fn copy_into(
        &self,
        tx: &Transaction<'_>,
        (queue_arn, queues): (&str, &mut QueueCache),
        copy: &SubscriptionCopy<'_>,
        now: Timestamp,
    ) -> BackendResult<Option<(i64, SendReceipt)>> {
        self.look_up_queues(tx, vec![queue_arn], queues).await?;
        let Some((queue, prepared)) = prepared_for(queues, queue_arn, copy, now) else {
            return Ok(None);
        };
        let mut stored = self.send_in_one(tx, queue, &[Ok(prepared)], now).await?;
        let receipt = stored.pop().expect("one receipt per send")?;
        Ok(Some((queue.uid, receipt)))
    }

    /// The key SNS messages are signed with, shared by every node: read from the database,
    /// or made and stored by the first node that needs one.
    pub(super) async fn signer(&self) -> BackendResult<Arc<MessageSigner>> {
        self.signer
            .get_or_try_init(|| async {
                let client = self.client().await?;
                if let Some(found) = stored_signer(&client).await? {
                    return Ok(found);
                }
                let made = MessageSigner::generate().map_err(unavailable)?;
                client
                    .run(
                        "INSERT INTO signing_key (id, private_key_der, certificate_pem, \
                         certificate_file) VALUES (1, $1, $2, $3) ON CONFLICT (id) DO NOTHING",
                        &[
                            &made.private_key_der().map_err(unavailable)?,
                            &made.certificate_pem,
                            &made.certificate_file,
                        ],
                    )
                    .await
                    .map_err(unavailable)?;
                // Another node may have stored its key first: every node signs with that one.
                stored_signer(&client)
                    .await?
                    .ok_or_else(|| unavailable("the signing key was not stored"))
            })
            .await
            .cloned()
    }
}

/// Where a planned copy goes among looked-up `queues`: its queue, else its subscription's
/// dead-letter queue, raw or else enveloped; with the send prepared for it. `None`: nowhere.
fn place<'q>(
    plan: &PlannedCopy,
    queues: &'q QueueCache,
    now: Timestamp,
) -> Option<(Fate, &'q QueueRow, Prepared)> {
    let copy = plan.copy();
    let subscription = &plan.subscription;
    if let Some((queue, prepared)) = prepared_for(queues, &subscription.endpoint, &copy, now) {
        return Some((Fate::Queued, queue, prepared));
    }
    let dlq = subscription.dead_letter_arn()?;
    prepared_for(queues, dlq, &copy, now)
        .or_else(|| prepared_for(queues, dlq, &plan.enveloped()?, now))
        .map(|(queue, prepared)| (Fate::DeadLettered, queue, prepared))
}

/// The looked-up queue an ARN names and `copy` prepared as a send into it, unless the queue
/// is gone or refuses the copy (too large for it, too many attributes).
fn prepared_for<'q>(
    queues: &'q QueueCache,
    arn: &str,
    copy: &SubscriptionCopy<'_>,
    now: Timestamp,
) -> Option<(&'q QueueRow, Prepared)> {
    let queue = queues.get(arn)?.as_ref()?;
    let request = copy.send_request(queue.config.fifo).ok()?;
    let prepared = prepare(&queue.config, request, now, false).ok()?;
    Some((queue, prepared))
}

/// The stored signing key, if one was made.
pub(super) async fn stored_signer(
    client: &impl GenericClient,
) -> BackendResult<Option<Arc<MessageSigner>>> {
    let row = client
        .maybe_row(
            "SELECT private_key_der, certificate_pem, certificate_file FROM signing_key",
            &[],
        )
        .await
        .map_err(unavailable)?;
    let Some(row) = row else { return Ok(None) };
    let signer =
        MessageSigner::from_parts(row.get(0), row.get(1), row.get(2)).map_err(unavailable)?;
    Ok(Some(Arc::new(signer)))
}
