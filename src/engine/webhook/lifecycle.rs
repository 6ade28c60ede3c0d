//! HTTP/S subscriptions in the engine: subscribing (pending, with a SubscriptionConfirmation
//! sent), confirming by token, the UnsubscribeConfirmation, queuing notifications into the
//! outbox, and what happens after each attempt (retry, dead-letter, drop). The HTTP sending
//! itself is `crate::delivery`'s. Lock order: topic, then outbox; the token book is never held
//! while a topic lock is taken.

use std::sync::{Arc, MutexGuard};

use super::changes::{OutboxChange, TokenRecord};
use super::delivery::{confirmation_delivery, notification_delivery, ConfirmationFor};
use super::outbox::{Delivery, Finished, Kind, LanePolicy, LaneStats, Outbox, Outcome};
use super::tokens::{self, Grant, TokenBook, TOKEN_LIFETIME_MS};
use super::Attempt;
use crate::engine::error::invalid_parameter as invalid;
use crate::engine::error::EngineResult;
use crate::engine::guard::Guard;
use crate::engine::time::Timestamp;
use crate::engine::topic::fanout::Delivered;
use crate::engine::topic::recent::DeliveryNote;
use crate::engine::topic::subscription::{Subscribed, Subscriber};
use crate::engine::topic::{captured, Subscription, SubscriptionProtocol, Topic};
use crate::engine::TopicEntry;
use crate::engine::{Change, Engine, QueueEntry};

/// What became of one attempt, for the sender's log and wake-ups.
pub enum AttemptResult<W> {
    Delivered,
    Retrying(Timestamp),
    /// The copy went to the subscription's dead-letter queue.
    DeadLettered(Arc<QueueEntry<W>>),
    /// No dead-letter queue took it; counted in the subscription's `dropped`.
    Dropped,
    /// A confirmation message that could not be delivered (never dead-lettered, as on AWS).
    ConfirmationFailed,
    /// The subscription went away meanwhile.
    Gone,
}

/// Checks an HTTP/S endpoint: the scheme must match the protocol and a host must follow.
fn check_endpoint(protocol: SubscriptionProtocol, endpoint: &str) -> EngineResult<()> {
    let rest = endpoint
        .strip_prefix(protocol.name())
        .and_then(|r| r.strip_prefix("://"))
        .ok_or_else(|| invalid("Invalid parameter: Endpoint must match the specified protocol"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || host.contains(char::is_whitespace) || endpoint.len() > 2048 {
        return Err(invalid(
            "Invalid parameter: Endpoint Reason: not a valid URL",
        ));
    }
    Ok(())
}

impl Topic {
    /// Subscribe's change to the topic for an HTTP/S endpoint: a new subscription, pending, or
    /// the existing one of this protocol and endpoint. Answers also the subscription a
    /// SubscriptionConfirmation must go to (a new one, or one still pending).
    pub fn subscribe_webhook(
        &mut self,
        (protocol, endpoint): (SubscriptionProtocol, &str),
        attrs: &[(String, String)],
        subscriber: Subscriber,
        now: Timestamp,
    ) -> EngineResult<(Subscribed, Option<Arc<Subscription>>)> {
        check_endpoint(protocol, endpoint)?;
        self.subscribe_confirmable((protocol, endpoint), attrs, subscriber, (true, now))
    }

    /// Subscribe's change for an endpoint that may have to confirm (HTTP/S, the captured
    /// protocols): the existing subscription of this protocol and endpoint, or a new one,
    /// pending if `pending`. Answers also the subscription a SubscriptionConfirmation must go
    /// to (a new pending one, or one still pending).
    pub fn subscribe_confirmable(
        &mut self,
        (protocol, endpoint): (SubscriptionProtocol, &str),
        attrs: &[(String, String)],
        subscriber: Subscriber,
        (pending, now): (bool, Timestamp),
    ) -> EngineResult<(Subscribed, Option<Arc<Subscription>>)> {
        if let Some(existing) = self
            .subscriptions
            .iter()
            .find(|s| s.protocol == protocol && s.endpoint == endpoint)
            .cloned()
        {
            existing.check_resubscribe(attrs)?;
            let subscribed = Subscribed {
                arn: existing.arn.clone(),
                protocol,
                pending: existing.pending,
                confirmation: None,
            };
            return Ok((subscribed, existing.pending.then_some(existing)));
        }
        let arn: Arc<str> = format!("{}:{}", self.arn, uuid::Uuid::new_v4()).into();
        let mut subscription = Subscription::new(arn, protocol, endpoint, subscriber.owner);
        subscription.principal = subscriber.principal.map(Arc::from);
        subscription.pending = pending;
        subscription.confirmation_authenticated = !pending;
        subscription.apply_all(attrs)?;
        self.check_replay(&subscription, "Attributes Reason: ", now)?;
        self.check_filter_count(&subscription)?;
        let subscription = Arc::new(subscription);
        self.subscriptions.push(subscription.clone());
        let subscribed = Subscribed {
            arn: subscription.arn.clone(),
            protocol,
            pending,
            confirmation: None,
        };
        Ok((subscribed, pending.then_some(subscription)))
    }

    /// What a confirmation token does to this topic (the token's subscription's): confirms a
    /// pending subscription, or restores an unsubscribed one as it was. Answers its ARN.
    pub fn apply_grant(
        &mut self,
        grant: &Grant,
        authenticate_on_unsubscribe: bool,
        authenticated: bool,
    ) -> EngineResult<Arc<str>> {
        match grant {
            Grant::Confirm(arn) => self
                .edit_subscription(arn, |_, sub| {
                    if sub.pending {
                        sub.pending = false;
                        sub.confirmation_authenticated = authenticated;
                    }
                    if authenticate_on_unsubscribe {
                        sub.authenticate_on_unsubscribe = true;
                    }
                    Ok(sub.arn.clone())
                })
                .map_err(|_| invalid("Invalid parameter: Token")),
            Grant::Restore(subscription) => {
                if !self.subscriptions.iter().any(|s| s.arn == subscription.arn) {
                    let mut restored = (**subscription).clone();
                    restored.authenticate_on_unsubscribe |= authenticate_on_unsubscribe;
                    self.subscriptions.push(Arc::new(restored));
                }
                Ok(subscription.arn.clone())
            }
        }
    }
}

impl<W: Default> Engine<W> {
    /// Locks the outbox; its changes are logged when the guard drops.
    pub(in crate::engine) fn outbox(&self) -> Guard<'_, Outbox> {
        self.outbox.lock()
    }

    /// Issues a confirmation token and logs it.
    fn issue_token(&self, grant: Grant, now: Timestamp) -> String {
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

    fn tokens(&self) -> MutexGuard<'_, TokenBook> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the per-subscription cap on pending webhook notifications.
    pub fn set_webhook_max_pending(&self, max: usize) {
        self.outbox().max_pending = max;
    }

    /// Subscribe for http/https: a pending subscription and a SubscriptionConfirmation POST.
    /// Subscribing a pending endpoint again re-sends the confirmation.
    pub(in crate::engine) fn subscribe_webhook(
        &self,
        entry: &TopicEntry,
        (protocol, endpoint, attrs): (SubscriptionProtocol, &str, &[(String, String)]),
        subscriber: Subscriber,
        base_url: &str,
        now: Timestamp,
    ) -> EngineResult<Subscribed> {
        let mut topic = entry.lock();
        let (subscribed, to_confirm) =
            topic.subscribe_webhook((protocol, endpoint), attrs, subscriber, now)?;
        if let Some(subscription) = to_confirm {
            self.send_subscription_confirmation(&topic, &subscription, base_url, now);
        }
        Ok(subscribed)
    }

    /// Subscribe for a captured protocol (`topic::captured`): an email endpoint pends, with
    /// its SubscriptionConfirmation (and a token to confirm with) handed back to be captured.
    pub(in crate::engine) fn subscribe_captured(
        &self,
        entry: &TopicEntry,
        (protocol, endpoint, attrs): (SubscriptionProtocol, &str, &[(String, String)]),
        subscriber: Subscriber,
        base_url: &str,
        now: Timestamp,
    ) -> EngineResult<Subscribed> {
        let mut topic = entry.lock();
        let (mut subscribed, to_confirm) =
            topic.subscribe_captured((protocol, endpoint), attrs, subscriber, now)?;
        if let Some(subscription) = to_confirm {
            let document = self.subscription_confirmation(&topic, &subscription, base_url, now);
            let record = captured::confirmation_record(
                &topic,
                &subscription,
                document.body,
                document.message_id,
                now,
            );
            subscribed.confirmation = Some(Box::new(record));
        }
        Ok(subscribed)
    }

    fn send_subscription_confirmation(
        &self,
        topic: &Topic,
        subscription: &Subscription,
        base_url: &str,
        now: Timestamp,
    ) {
        let delivery = self.subscription_confirmation(topic, subscription, base_url, now);
        // Confirmations are never refused by the cap.
        let _ = self.outbox().push(delivery, LanePolicy::default(), now);
    }

    /// A pending subscription's SubscriptionConfirmation, with a fresh token to confirm it.
    pub(in crate::engine) fn subscription_confirmation(
        &self,
        topic: &Topic,
        subscription: &Subscription,
        base_url: &str,
        now: Timestamp,
    ) -> Delivery {
        let token = self.issue_token(Grant::Confirm(subscription.arn.clone()), now);
        let confirmation = ConfirmationFor {
            kind: Kind::SubscriptionConfirmation,
            token: &token,
            base_url,
        };
        let signer = self.signer().ok();
        confirmation_delivery(topic, subscription, confirmation, signer.as_deref(), now)
    }

    /// After Unsubscribe: the endpoint learns of it, with a SubscribeURL that restores the
    /// subscription as it was.
    pub(in crate::engine) fn send_unsubscribe_confirmation(
        &self,
        topic: &Topic,
        removed: Arc<Subscription>,
        base_url: &str,
        now: Timestamp,
    ) {
        let token = self.issue_token(Grant::Restore(removed.clone()), now);
        let confirmation = ConfirmationFor {
            kind: Kind::UnsubscribeConfirmation,
            token: &token,
            base_url,
        };
        let delivery = confirmation_delivery(
            topic,
            &removed,
            confirmation,
            self.signer().ok().as_deref(),
            now,
        );
        let _ = self.outbox().push(delivery, LanePolicy::default(), now);
    }

    /// A notification for an HTTP/S subscription goes into the outbox. Over the subscription's
    /// cap it goes to the subscription's dead-letter queue, or is dropped and counted.
    pub(in crate::engine) fn queue_notification(
        &self,
        topic: &Topic,
        subscription: &Subscription,
        copy: super::delivery::NotificationCopy,
        now: Timestamp,
    ) -> Delivered<W> {
        let (delivery, lane) = notification_delivery(topic, subscription, copy);
        let mut outbox = self.outbox();
        let Err(refused) = outbox.push(delivery, lane, now) else {
            return Delivered::Webhook;
        };
        drop(outbox);
        match self.dead_letter(&refused, now) {
            Some(queue) => {
                self.outbox().record_failure(&subscription.arn, true);
                Delivered::DeadLetter(queue)
            }
            None => {
                self.outbox().record_failure(&subscription.arn, false);
                Delivered::Dropped
            }
        }
    }

    /// The same payload that would have been POSTed, into the subscription's dead-letter
    /// queue: the envelope, or the raw body with its attributes as SQS message attributes.
    fn dead_letter(&self, delivery: &Delivery, now: Timestamp) -> Option<Arc<QueueEntry<W>>> {
        let dlq = delivery.dead_letter_arn.as_deref()?;
        let (raw, enveloped) = delivery.dead_letter_copies();
        // With the queues' policies enforced, the dead-letter queue too takes it only as AWS would.
        let from = self.enforce_queue_policies.then_some(&*delivery.topic_arn);
        match (self.enqueue_copy_from(dlq, &raw, now, from), enveloped) {
            (Ok(queue), _) => Some(queue),
            (Err(_), Some(envelope)) => self.enqueue_copy_from(dlq, &envelope, now, from).ok(),
            (Err(_), None) => None,
        }
    }

    /// ConfirmSubscription (or a GET of a SubscribeURL). The token alone names the
    /// subscription; `authenticated` says whether the call was signed.
    pub fn confirm_subscription(
        &self,
        topic_arn: &str,
        token: &str,
        authenticate_on_unsubscribe: bool,
        authenticated: bool,
        now: Timestamp,
    ) -> EngineResult<Arc<str>> {
        self.topic_name_from_arn(topic_arn, "Topic")
            .map_err(|_| invalid("Invalid parameter: Topic"))?;
        if !tokens::well_formed(token) {
            return Err(invalid("Invalid token"));
        }
        let unknown = || invalid("Invalid parameter: Token");
        let grant = self.tokens().get(token, now).cloned().ok_or_else(unknown)?;
        let entry = self
            .subscription_topic(grant.subscription_arn())
            .map_err(|_| unknown())?;
        let mut topic = entry.lock();
        topic.apply_grant(&grant, authenticate_on_unsubscribe, authenticated)
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

    /// Deletes subscriptions still pending when their token expires (two days).
    pub fn expire_confirmations(&self, now: Timestamp) {
        let expired = self.tokens().expire(now);
        for grant in expired {
            let Grant::Confirm(arn) = grant else {
                continue;
            };
            let Ok(entry) = self.subscription_topic(&arn) else {
                continue;
            };
            let mut topic = entry.lock();
            let before = topic.subscriptions.len();
            topic.subscriptions.retain(|s| !(s.arn == arn && s.pending));
            if topic.subscriptions.len() < before {
                self.outbox().remove_subscription(&arn);
            }
        }
    }

    /// Up to `limit` webhook deliveries due by `now`, marked in flight.
    pub fn take_deliveries(&self, now: Timestamp, limit: usize) -> Vec<Attempt> {
        if limit == 0 {
            return Vec::new();
        }
        self.outbox().take_due(now, limit)
    }

    /// Hands back attempts taken but never made, due again at `now`.
    pub fn put_back_deliveries(&self, attempts: &[Attempt], now: Timestamp) {
        let mut outbox = self.outbox();
        for attempt in attempts {
            outbox.put_back(attempt, now);
        }
    }

    /// When the next webhook delivery (or retry) is due.
    pub fn next_delivery_due(&self) -> Option<Timestamp> {
        self.outbox().next_due()
    }

    /// Records an attempt's outcome: done, retry later, or (out of retries, or refused for
    /// good) the subscription's dead-letter queue.
    pub fn finish_delivery(
        &self,
        attempt: &Attempt,
        outcome: Outcome,
        now: Timestamp,
    ) -> AttemptResult<W> {
        // A failed notification's dead-letter copy and its removal reach the log in one write.
        let _atomic = self.atomic();
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
                let queue = self.dead_letter(&delivery, now);
                self.log_outbox(held);
                self.outbox()
                    .record_failure(&delivery.subscription_arn, queue.is_some());
                match queue {
                    Some(queue) => AttemptResult::DeadLettered(queue),
                    None => AttemptResult::Dropped,
                }
            }
        }
    }

    /// Delivery counters of every HTTP/S subscription that has had traffic.
    pub fn delivery_stats(&self) -> Vec<(Arc<str>, LaneStats)> {
        self.outbox().all_stats()
    }

    /// Keeps `error` as the subscription's last delivery error: a confirmation's too, so the
    /// inspection API shows why an endpoint never confirmed.
    pub fn note_delivery_error(&self, subscription_arn: &str, error: &str, now: Timestamp) {
        let entry = self.subscription_topic(subscription_arn).ok();
        // Under the topic's lock, as Unsubscribe and DeleteTopic remove a subscription's lane:
        // a lane made here for a subscription they just removed would stay for good.
        let topic = entry.as_ref().map(|entry| entry.lock_unlogged());
        let subscribed = topic.as_ref().is_some_and(|topic| {
            !topic.deleted
                && topic
                    .subscriptions
                    .iter()
                    .any(|s| &*s.arn == subscription_arn)
        });
        self.outbox()
            .untouched()
            .note_error(subscription_arn, error, subscribed, now);
        drop(topic);
    }

    /// The subscription's last delivery error, and when.
    pub fn last_delivery_error(&self, subscription_arn: &str) -> Option<(Timestamp, Arc<str>)> {
        self.outbox().last_error(subscription_arn)
    }

    /// What an HTTP/S subscription's last attempts came to, oldest first.
    pub fn recent_attempts(&self, subscription_arn: &str) -> Vec<DeliveryNote> {
        self.outbox().recent(subscription_arn)
    }
}

impl<W: Default> Engine<W> {
    fn log_outbox(&self, changes: Vec<OutboxChange>) {
        if let (Some(change_log), false) = (&self.change_log, changes.is_empty()) {
            change_log.submit(&Change::Outbox(changes));
        }
    }

    /// Replays a logged outbox change or token.
    pub fn replay_delivery_change(&self, change: Change) {
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
    pub fn delivery_image(
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

#[cfg(test)]
mod tests;
