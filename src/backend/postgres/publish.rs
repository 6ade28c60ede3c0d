//! Publishing on PostgreSQL: in one transaction the topic decides (its rules, topic-wide
//! deduplication, the sequence number) and every subscribed queue gets its copy, or its
//! subscription's dead-letter queue does, and every HTTP/S subscription's delivery enters the
//! webhook outbox, with the engine's own filter, body and envelope (`plan_copies`). The topic's row is locked throughout, so a topic's publishes reach
//! every queue in one order, and a crash keeps a publish whole or not at all.

use std::sync::Arc;

use deadpool_postgres::{GenericClient, Transaction};

use super::deliveries::Queued;
use super::message_store::QueueRow;
use super::queues::millis;
use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::BackendResult;
use crate::engine::queue::send::prepare;
use crate::engine::queue::{SendReceipt, DEDUP_WINDOW_MS};
use crate::engine::topic::archive::Archived;
use crate::engine::topic::fanout::{plan_copies, Planned, PlannedCopy, SubscriptionCopy};
use crate::engine::topic::recent::{DeliveryNote, Fate};
use crate::engine::topic::signing::MessageSigner;
use crate::engine::topic::{check_message, sequence_number, Publication, PublishRequest, Topic};
use crate::engine::{EngineResult, Timestamp};

/// The queues a publish's copies go to, looked up once per publish: `None` if one is gone.
pub(super) type QueueCache = std::collections::HashMap<String, Option<QueueRow>>;

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
        for request in requests {
            let publication = self.decide(&tx, &topic, request, now).await?;
            if !publication.duplicate && topic.archive.is_some() {
                let archived = Archived {
                    publication: publication.clone(),
                    request: request.clone(),
                    published_at: now,
                };
                self.archive(&tx, &topic, &archived).await?;
            }
            if !publication.duplicate {
                let source = || signer.clone();
                let plans = plan_copies(
                    &topic,
                    (&publication, request),
                    (now, false),
                    base_url,
                    &source,
                );
                for (subscription, plan) in plans {
                    let delivered = match plan {
                        None => None,
                        Some(Planned::Queue(plan)) => {
                            Some(self.deliver_copy(&tx, &plan, &mut queues, now).await?)
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

    /// What the topic decides for one publish: a FIFO duplicate within five minutes gets the
    /// original's ids and is delivered nowhere; anything else gets a new id (and a FIFO topic
    /// the next sequence number).
    async fn decide(
        &self,
        tx: &Transaction<'_>,
        topic: &Topic,
        request: &PublishRequest,
        now: Timestamp,
    ) -> BackendResult<Publication> {
        let message_id: Arc<str> = uuid::Uuid::new_v4().to_string().into();
        let name: &str = &topic.name;
        if !topic.fifo {
            tx.run(
                "UPDATE topics SET published = published + 1 WHERE name = $1",
                &[&name],
            )
            .await
            .map_err(unavailable)?;
            return Ok(Publication {
                message_id,
                sequence_number: None,
                dedup_id: None,
                duplicate: false,
            });
        }
        let (key, dedup_id) = topic.dedup_key(request);
        let claimed = tx
            .maybe_row(
                "INSERT INTO topic_dedup (topic, key, message_id, seq, expires_at) \
                 VALUES ($1, $2, $3, 0, $4) ON CONFLICT (topic, key) DO UPDATE \
                 SET message_id = EXCLUDED.message_id, seq = 0, expires_at = EXCLUDED.expires_at \
                 WHERE topic_dedup.expires_at <= $5 RETURNING 1",
                &[
                    &name,
                    &key,
                    &&*message_id,
                    &millis(now.plus_millis(DEDUP_WINDOW_MS)),
                    &millis(now),
                ],
            )
            .await
            .map_err(unavailable)?;
        if claimed.is_none() {
            let row = tx
                .row(
                    "SELECT message_id, seq FROM topic_dedup WHERE topic = $1 AND key = $2",
                    &[&name, &key],
                )
                .await
                .map_err(unavailable)?;
            tx.run(
                "UPDATE topics SET deduplicated = deduplicated + 1 WHERE name = $1",
                &[&name],
            )
            .await
            .map_err(unavailable)?;
            return Ok(Publication {
                message_id: row.get::<_, &str>(0).into(),
                sequence_number: Some(sequence_number(row.get::<_, i64>(1) as u64)),
                dedup_id: Some(dedup_id),
                duplicate: true,
            });
        }
        let seq: i64 = tx
            .row(
                "UPDATE topics SET next_seq = next_seq + 1, published = published + 1 \
                 WHERE name = $1 RETURNING next_seq - 1",
                &[&name],
            )
            .await
            .map_err(unavailable)?
            .get(0);
        tx.run(
            "UPDATE topic_dedup SET seq = $3 WHERE topic = $1 AND key = $2",
            &[&name, &key, &seq],
        )
        .await
        .map_err(unavailable)?;
        Ok(Publication {
            message_id,
            sequence_number: Some(sequence_number(seq as u64)),
            dedup_id: Some(dedup_id),
            duplicate: false,
        })
    }

    /// Stores a planned copy in its queue; if the queue is gone or refuses it, in the
    /// subscription's dead-letter queue (enveloped if it refuses the raw copy too). Answers
    /// where it went, the queue that took it and that queue's receipt.
    pub(super) async fn deliver_copy(
        &self,
        tx: &Transaction<'_>,
        plan: &PlannedCopy,
        queues: &mut QueueCache,
        now: Timestamp,
    ) -> BackendResult<Option<(Fate, Option<(i64, SendReceipt)>)>> {
        let copy = plan.copy();
        let subscription = &plan.subscription;
        let queued = self
            .copy_into(tx, (&subscription.endpoint, queues), &copy, now)
            .await?;
        if let Some(stored) = queued {
            return Ok(Some((Fate::Queued, Some(stored))));
        }
        let Some(dlq) = subscription.dead_letter_arn() else {
            return Ok(None);
        };
        let mut dead_lettered = self.copy_into(tx, (dlq, queues), &copy, now).await?;
        if let (None, Some(enveloped)) = (&dead_lettered, plan.enveloped()) {
            dead_lettered = self.copy_into(tx, (dlq, queues), &enveloped, now).await?;
        }
        Ok(dead_lettered.map(|stored| (Fate::DeadLettered, Some(stored))))
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
        if !queues.contains_key(queue_arn) {
            let found = self.queue_at(tx, queue_arn).await?;
            queues.insert(queue_arn.to_string(), found);
        }
        let Some(queue) = &queues[queue_arn] else {
            return Ok(None);
        };
        let Ok(prepared) = copy
            .send_request(queue.config.fifo)
            .and_then(|request| prepare(&queue.config, request, now, false))
        else {
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
