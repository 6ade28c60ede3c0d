//! The webhook outbox and the confirmation tokens of an engine: notifications queued (or, over a
//! subscription's cap, dead-lettered or dropped), due attempts taken and put back, what happens
//! after each attempt (retry, dead-letter, drop), tokens issued and redeemed, and their part of
//! snapshots and replay. The HTTP sending itself is `crate::delivery`'s. Lock order: topic,
//! then outbox; the token book is never held while a topic lock is taken.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::engine::changes::{self, Change, ChangeLog};
use crate::engine::guard::{Guard, LoggedLock};
use crate::engine::parcel::{NoteFor, RelayedCopy, Settles};
use crate::engine::queues::{QueueEntry, Queues};
use crate::engine::relay::{Relay, Settled};
use crate::engine::time::Timestamp;
use crate::engine::topic::recent::{DeliveryNote, Fate};
use crate::engine::topic::{Subscription, Topic};
use crate::engine::webhook::changes::{OutboxChange, TokenRecord};
use crate::engine::webhook::delivery::{notification_delivery, NotificationCopy};
use crate::engine::webhook::outbox::{
    Delivery, Finished, Kind, LanePolicy, LaneStats, Outbox, Outcome,
};
use crate::engine::webhook::tokens::{Grant, TokenBook, TOKEN_LIFETIME_MS};
use crate::engine::webhook::Attempt;

/// What became of one attempt, for the sender's log and wake-ups.
pub enum AttemptResult<W> {
    Delivered,
    Retrying(Timestamp),
    /// The copy went to the subscription's dead-letter queue (`None`: to its shard's engine).
    DeadLettered(Option<Arc<QueueEntry<W>>>),
    /// No dead-letter queue took it; counted in the subscription's `dropped`.
    Dropped,
    /// A confirmation message that could not be delivered (never dead-lettered, as on AWS).
    ConfirmationFailed,
    /// The subscription went away meanwhile.
    Gone,
}

/// Where a notification went when a publish handed it over.
pub enum Notified<W> {
    Queued,
    /// Over the subscription's cap, into its dead-letter queue (`None`: to its shard's
    /// engine).
    DeadLettered(Option<Arc<QueueEntry<W>>>),
    /// Over the cap with no dead-letter queue that took it; counted.
    Dropped,
}

/// Webhook deliveries waiting, in flight or waiting for a retry, and the confirmation tokens.
pub struct Webhooks {
    outbox: LoggedLock<Outbox>,
    tokens: Mutex<TokenBook>,
    change_log: Option<Arc<dyn ChangeLog>>,
}

impl Default for Webhooks {
    fn default() -> Self {
        Webhooks {
            outbox: LoggedLock::new(Outbox::default(), None),
            tokens: Mutex::new(TokenBook::default()),
            change_log: None,
        }
    }
}

impl Webhooks {
    /// Logs every later change to `change_log`. Set before the first request.
    pub(in crate::engine) fn set_log(&mut self, change_log: Arc<dyn ChangeLog>) {
        self.outbox.set_log(change_log.clone());
        self.change_log = Some(change_log);
    }

    /// Locks the outbox; its changes are logged when the guard drops.
    fn outbox(&self) -> Guard<'_, Outbox> {
        self.outbox.lock()
    }

    fn tokens(&self) -> MutexGuard<'_, TokenBook> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Issues a confirmation token and logs it.
    pub fn issue_token(&self, grant: Grant, now: Timestamp) -> String {
        let mut tokens = self.tokens();
        let token = tokens.issue(grant.clone(), now);
        if let Some(change_log) = &self.change_log {
            change_log.submit(&Change::Token(TokenRecord {
                token: token.clone(),
                expires: now.plus_millis(TOKEN_LIFETIME_MS),
                grant: grant.image(),
            }));
        }
        token
    }

    /// What a live token grants.
    pub fn grant(&self, token: &str, now: Timestamp) -> Option<Grant> {
        self.tokens().get(token, now).cloned()
    }

    /// Forgets tokens expired by `now`; answers what they granted.
    pub fn expire_tokens(&self, now: Timestamp) -> Vec<Grant> {
        self.tokens().expire(now)
    }

    /// The newest live token that confirms `subscription_arn`, if any.
    pub fn confirmation_token(&self, subscription_arn: &str, now: Timestamp) -> Option<String> {
        self.tokens()
            .all()
            .filter(|(_, expires, grant)| {
                *expires > now && matches!(grant, Grant::Confirm(arn) if &**arn == subscription_arn)
            })
            .max_by_key(|(_, expires, _)| *expires)
            .map(|(token, _, _)| token.to_string())
    }

    /// Sets the per-subscription cap on pending webhook notifications.
    pub fn set_max_pending(&self, max: usize) {
        self.outbox().max_pending = max;
    }

    /// Queues a confirmation message (never refused by the cap).
    pub fn push_confirmation(&self, delivery: Delivery, now: Timestamp) {
        let _ = self.outbox().push(delivery, LanePolicy::default(), now);
    }

    /// Drops the lanes of subscriptions that are gone, with their pending deliveries.
    pub fn remove_subscriptions<'a>(&self, subscription_arns: impl Iterator<Item = &'a str>) {
        let mut outbox = self.outbox();
        for arn in subscription_arns {
            outbox.remove_subscription(arn);
        }
    }

    /// Drops every pending webhook notification (confirmation requests still go out).
    pub fn reset_all(&self) {
        let mut outbox = self.outbox();
        for (arn, _) in outbox.all_stats() {
            outbox.remove_subscription(&arn);
        }
    }

    /// A notification for an HTTP/S subscription goes into the outbox. Over the subscription's
    /// cap it goes to the subscription's dead-letter queue, or is dropped and counted.
    /// `noted`: the subscription notes this copy's fate (a publish's, not a replay's), so a
    /// dead letter relayed to another shard settles that note.
    pub fn notify<W: Default>(
        &self,
        (queues, relay, noted): (&Queues<W>, &Relay, bool),
        (topic, subscription): (&Topic, &Subscription),
        copy: NotificationCopy,
        now: Timestamp,
    ) -> Notified<W> {
        let (delivery, lane) = notification_delivery(topic, subscription, copy);
        let mut outbox = self.outbox();
        let Err(refused) = outbox.push(delivery, lane, now) else {
            return Notified::Queued;
        };
        drop(outbox);
        let queue = dead_letter((queues, relay), &refused, now, noted);
        self.record_failure(&subscription.arn, &queue);
        match queue {
            Some(queue) => Notified::DeadLettered(queue),
            None => Notified::Dropped,
        }
    }

    /// Up to `limit` webhook deliveries due by `now`, marked in flight.
    pub fn take_due(&self, now: Timestamp, limit: usize) -> Vec<Attempt> {
        if limit == 0 {
            return Vec::new();
        }
        self.outbox().take_due(now, limit)
    }

    /// Hands back attempts taken but never made, due again at `now`.
    pub fn put_back(&self, attempts: &[Attempt], now: Timestamp) {
        let mut outbox = self.outbox();
        for attempt in attempts {
            outbox.put_back(attempt, now);
        }
    }

    /// When the next webhook delivery (or retry) is due.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.outbox().next_due()
    }

    /// Records an attempt's outcome: done, retry later, or (out of retries, or refused for
    /// good) the subscription's dead-letter queue.
    pub fn finish<W: Default>(
        &self,
        queues: (&Queues<W>, &Relay),
        attempt: &Attempt,
        outcome: Outcome,
        now: Timestamp,
    ) -> AttemptResult<W> {
        // A failed notification's dead-letter copy and its removal reach the log in one write.
        let _atomic = changes::Atomic::new(self.change_log.as_deref());
        let mut outbox = self.outbox();
        let finished = outbox.finish(attempt.id, outcome, now);
        // The removal is logged after the dead-letter copy, as the copy must exist first.
        let held = match &finished {
            Finished::Failed(delivery) if delivery.kind == Kind::Notification => {
                outbox.take_changes()
            }
            _ => Vec::new(),
        };
        drop(outbox);
        match finished {
            Finished::Delivered => AttemptResult::Delivered,
            Finished::Retrying(at) => AttemptResult::Retrying(at),
            Finished::Gone => AttemptResult::Gone,
            Finished::Failed(delivery) if delivery.kind != Kind::Notification => {
                AttemptResult::ConfirmationFailed
            }
            Finished::Failed(delivery) => {
                // Its fate is the attempts' to note, not the publish's.
                let queue = dead_letter(queues, &delivery, now, false);
                self.log_outbox(held);
                self.record_failure(&delivery.subscription_arn, &queue);
                match queue {
                    Some(queue) => AttemptResult::DeadLettered(queue),
                    None => AttemptResult::Dropped,
                }
            }
        }
    }

    /// Counts a failed notification as dead-lettered or dropped; one handed to its
    /// dead-letter queue's shard is counted once that shard says which (`settle`).
    fn record_failure<W>(&self, subscription_arn: &str, queue: &Option<DeadLetterQueue<W>>) {
        match queue {
            Some(None) => {}
            Some(Some(_)) => self.outbox().record_failure(subscription_arn, true),
            None => self.outbox().record_failure(subscription_arn, false),
        }
    }

    /// Counts a webhook's dead letter that another shard's queue took, or refused, while its
    /// subscription (`subscribed`) still exists. Best effort, as the notes are kept in memory
    /// only: a copy its shard read back from its log after a restart settles nothing.
    pub fn settle(&self, settled: &Settled, subscribed: bool) {
        if !settled.note_for.settles.webhook_figures || !subscribed {
            return;
        }
        let dead_lettered = match settled.fate {
            Fate::DeadLettered | Fate::Queued => true,
            Fate::Failed => false,
            // No other fate is told of a copy placed in a queue.
            _ => return,
        };
        (self.outbox()).record_failure(&settled.note_for.subscription_arn, dead_lettered);
    }

    /// Delivery counters of every HTTP/S subscription that has had traffic.
    pub fn stats(&self) -> Vec<(Arc<str>, LaneStats)> {
        self.outbox().all_stats()
    }

    /// Keeps `error` as the subscription's last delivery error; `subscribed`: the subscription
    /// still exists (checked by the caller under its topic's lock).
    pub fn note_error(
        &self,
        subscription_arn: &str,
        error: &str,
        subscribed: bool,
        now: Timestamp,
    ) {
        self.outbox()
            .untouched()
            .note_error(subscription_arn, error, subscribed, now);
    }

    /// The subscription's last delivery error, and when.
    pub fn last_error(&self, subscription_arn: &str) -> Option<(Timestamp, Arc<str>)> {
        self.outbox().last_error(subscription_arn)
    }

    /// What an HTTP/S subscription's last attempts came to, oldest first.
    pub fn recent_attempts(&self, subscription_arn: &str) -> Vec<DeliveryNote> {
        self.outbox().recent(subscription_arn)
    }

    fn log_outbox(&self, changes: Vec<OutboxChange>) {
        if let (Some(change_log), false) = (&self.change_log, changes.is_empty()) {
            change_log.submit(&Change::Outbox(changes));
        }
    }

    /// Replays a logged outbox change or token (others are not the outbox's).
    pub(in crate::engine) fn replay_change(&self, change: Change) {
        match change {
            Change::Outbox(changes) => {
                let mut outbox = self.outbox.lock_unlogged();
                for change in changes {
                    outbox.apply_change(change);
                }
                outbox.take_changes();
            }
            Change::Token(record) => self.restore_token(record),
            _ => {}
        }
    }

    pub fn restore_deliveries(&self, deliveries: Vec<(u64, Arc<Delivery>, LanePolicy)>) {
        let mut outbox = self.outbox.lock_unlogged();
        for (id, delivery, lane) in deliveries {
            outbox.restore(id, delivery, lane);
        }
    }

    pub fn restore_token(&self, record: TokenRecord) {
        self.tokens().restore(
            record.token,
            record.expires,
            Grant::from_image(record.grant),
        );
    }

    /// The outbox's pending deliveries with the log position they are consistent with, and
    /// the live tokens (replaying a token again is harmless), for a snapshot.
    #[allow(clippy::type_complexity)]
    pub fn image(
        &self,
        next_lsn: impl Fn() -> u64,
    ) -> (u64, Vec<(u64, Arc<Delivery>, LanePolicy)>, Vec<TokenRecord>) {
        let (lsn, deliveries) = {
            let outbox = self.outbox.lock_unlogged();
            (next_lsn(), outbox.image())
        };
        let tokens = self
            .tokens()
            .all()
            .map(|(token, expires, grant)| TokenRecord {
                token: token.to_string(),
                expires,
                grant: grant.image(),
            })
            .collect();
        (lsn, deliveries, tokens)
    }
}

/// The dead-letter queue that took a copy: here, or in another shard (`None`).
type DeadLetterQueue<W> = Option<Arc<QueueEntry<W>>>;

/// The same payload that would have been POSTed, into the subscription's dead-letter
/// queue: the envelope, or the raw body with its attributes as SQS message attributes.
/// `None`: no queue took it; `Some(None)`: handed to the engine of the queue's shard.
fn dead_letter<W: Default>(
    (queues, relay): (&Queues<W>, &Relay),
    delivery: &Delivery,
    now: Timestamp,
    noted: bool,
) -> Option<DeadLetterQueue<W>> {
    let dlq = delivery.dead_letter_arn.as_deref()?;
    let (raw, enveloped) = delivery.dead_letter_copies();
    if let Some(shard) = relay.elsewhere(dlq) {
        let copy = RelayedCopy {
            topic_arn: Some(delivery.topic_arn.clone()),
            dead_letter: true,
            envelope: enveloped.map(|envelope| envelope.body),
            // Its fate settles the webhook's figures, and the publish's note when the
            // publish noted it.
            note_for: Some(NoteFor {
                subscription_arn: delivery.subscription_arn.clone(),
                message_id: delivery.message_id.clone(),
                settles: Settles {
                    delivery_note: noted,
                    webhook_figures: true,
                },
            }),
            ..RelayedCopy::of(dlq, raw)
        };
        relay.send(shard, copy);
        return Some(None);
    }
    // With the queues' policies enforced, the dead-letter queue too takes it only as AWS would.
    let from = Some(&*delivery.topic_arn);
    match (queues.accept_copy(dlq, &raw, now, from), enveloped) {
        (Ok(queue), _) => Some(Some(queue)),
        (Err(_), Some(envelope)) => queues.accept_copy(dlq, &envelope, now, from).ok().map(Some),
        (Err(_), None) => None,
    }
}
