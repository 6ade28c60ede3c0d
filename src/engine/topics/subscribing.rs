//! Subscriptions over their life: Subscribe (queues at once or pending, HTTP/S and the
//! captured protocols pending with a SubscriptionConfirmation), confirming by token,
//! Unsubscribe with its UnsubscribeConfirmation, expiry of unconfirmed subscriptions, and the
//! last delivery error kept per subscription. What each step changes in the topic is
//! `topic::subscription_edits`; the outbox and tokens are `webhook::Webhooks`'. Lock order:
//! topic, then outbox; the token book is never held while a topic lock is taken.

use std::sync::Arc;

use super::{TopicEntry, Topics};
use crate::engine::error::invalid_parameter as invalid;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::namespace::{account_of_principal, Namespaces};
use crate::engine::queues::Queues;
use crate::engine::time::Timestamp;
use crate::engine::topic::subscription::{Subscribed, Subscriber};
use crate::engine::topic::subscription_edits::no_such_subscription;
use crate::engine::topic::{captured, EndpointKind, Subscription, SubscriptionProtocol, Topic};
use crate::engine::webhook::delivery::{confirmation_delivery, ConfirmationFor};
use crate::engine::webhook::tokens::{self, Grant};
use crate::engine::webhook::{Delivery, Kind};
use crate::engine::webhooks::Webhooks;

/// Whether subscribing the queue `queue_key` waits for its owner to confirm: when the queue is
/// another account's than the subscriber's (SNS Developer Guide, "Sending Amazon SNS messages
/// to an Amazon SQS queue in a different account"; shared/spec/sns.md §3.6). A queue's owner
/// subscribing it to another account's topic needs no confirmation.
pub fn queue_pends(namespaces: &Namespaces, queue_key: &str, subscriber_account: &str) -> bool {
    namespaces.place(queue_key).account != subscriber_account
}

/// The topic ARN of a subscription ARN (`<topic arn>:<id>`), with AWS's errors.
pub fn subscription_topic_arn(subscription_arn: &str) -> EngineResult<String> {
    let parts: Vec<&str> = subscription_arn.split(':').collect();
    if parts.len() < 6 {
        return Err(invalid(format!(
            "Invalid parameter: SubscriptionArn Reason: An ARN must have at least 6 elements, not {}",
            parts.len()
        )));
    }
    if parts.len() < 7 {
        return Err(invalid("Invalid parameter: SubscriptionId"));
    }
    Ok(parts[..6].join(":"))
}

/// Subscribe's protocol rules: every AWS protocol is known, but Orderly delivers to queues and
/// (on standard topics, or FIFO ones with the ordered extension) HTTP/S. Answers whether it
/// is a webhook.
pub fn check_protocol(
    name: &str,
    fifo_topic: bool,
    fifo_http: bool,
) -> EngineResult<SubscriptionProtocol> {
    let Some(protocol) = SubscriptionProtocol::parse(name) else {
        return Err(invalid(format!(
            "Invalid parameter: Amazon SNS does not support this protocol string: {name}"
        )));
    };
    let kind = protocol.kind();
    // FIFO topics take only queues (sns.md §3.6), and HTTP/S with Orderly's extension.
    let refused = fifo_topic
        && match kind {
            EndpointKind::Queue => false,
            EndpointKind::Webhook => !fifo_http,
            EndpointKind::Captured => true,
        };
    if refused {
        return Err(invalid(format!(
            "Invalid parameter: Invalid protocol type: {protocol}"
        )));
    }
    Ok(protocol)
}

/// What a confirmation token does to its subscription's topic: confirms a pending
/// subscription, or restores an unsubscribed one as it was. Answers its ARN.
fn apply_grant(
    topic: &mut Topic,
    grant: &Grant,
    authenticate_on_unsubscribe: bool,
    authenticated: bool,
) -> EngineResult<Arc<str>> {
    match grant {
        Grant::Confirm(arn) => topic
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
            if !topic
                .subscriptions
                .iter()
                .any(|s| s.arn == subscription.arn)
            {
                let mut restored = (**subscription).clone();
                restored.authenticate_on_unsubscribe |= authenticate_on_unsubscribe;
                topic.subscriptions.push(Arc::new(restored));
            }
            Ok(subscription.arn.clone())
        }
    }
}

/// Subscribe's topic ARN, protocol, endpoint and attributes.
pub type SubscribeRequest<'a> = (&'a str, &'a str, Option<&'a str>, &'a [(String, String)]);

/// Where a confirmation is sent from and with what: the outbox and tokens, and the URL clients
/// reach this server at.
#[derive(Clone, Copy)]
pub struct Confirming<'a> {
    pub webhooks: &'a Webhooks,
    /// Where a confirmation for a queue of another shard goes.
    pub relay: &'a crate::engine::relay::Relay,
    pub base_url: &'a str,
}

impl Topics {
    /// Subscribe: SQS queues (confirmed at once unless another account's) and HTTP/S endpoints
    /// (pending until confirmed; a SubscriptionConfirmation goes out). Same topic, protocol and
    /// endpoint return the existing subscription. `principal` is the subscriber's ARN
    /// (`SubscriptionPrincipal`).
    pub fn subscribe<W: Default>(
        &self,
        (queues, confirming): (&Queues<W>, Confirming),
        (topic_arn, protocol, endpoint, attrs): SubscribeRequest,
        principal: Option<&str>,
        now: Timestamp,
    ) -> EngineResult<Subscribed> {
        let entry = self.get(topic_arn)?;
        let topic_owner = entry.lock().owner.clone();
        let subscriber = Subscriber {
            owner: principal
                .and_then(account_of_principal)
                .unwrap_or(&topic_owner),
            principal,
        };
        let fifo_topic = entry.lock().fifo;
        let protocol = check_protocol(protocol, fifo_topic, self.fifo_http_subscriptions)?;
        let endpoint = endpoint.ok_or_else(|| invalid("Invalid parameter: Endpoint"))?;
        let request = (protocol, endpoint, attrs);
        match protocol.kind() {
            EndpointKind::Webhook => {
                return self.subscribe_webhook(&entry, request, subscriber, confirming, now)
            }
            EndpointKind::Captured => {
                return self.subscribe_captured(&entry, request, subscriber, confirming, now)
            }
            EndpointKind::Queue => {}
        }
        let queue_key = queues
            .key_in_arn(endpoint)
            .ok_or_else(|| invalid("Invalid parameter: SQS endpoint ARN"))?;
        let pending = queue_pends(&self.namespaces, queue_key, subscriber.owner);
        // The subscription and its confirmation's parcel for another shard reach the log in
        // one write (declared first: dropped last).
        let _atomic = self.atomic();
        let mut topic = entry.lock();
        let (subscribed, to_confirm) =
            topic.subscribe_queue((endpoint, queue_key), attrs, subscriber, (pending, now))?;
        if let Some(subscription) = to_confirm {
            let document = self.subscription_confirmation(&topic, &subscription, &confirming, now);
            drop(topic);
            let copy = document.queue_confirmation_copy();
            if let Some(shard) = confirming.relay.elsewhere(endpoint) {
                let copy = crate::engine::parcel::RelayedCopy::of(endpoint, copy);
                confirming.relay.send(shard, copy);
            } else {
                // A queue that does not exist (yet) loses its confirmation, as on AWS.
                let _ = queues.accept_copy(endpoint, &copy, now, None);
            }
        }
        Ok(subscribed)
    }

    /// Subscribe for http/https: a pending subscription and a SubscriptionConfirmation POST.
    /// Subscribing a pending endpoint again re-sends the confirmation.
    fn subscribe_webhook(
        &self,
        entry: &TopicEntry,
        (protocol, endpoint, attrs): (SubscriptionProtocol, &str, &[(String, String)]),
        subscriber: Subscriber,
        confirming: Confirming,
        now: Timestamp,
    ) -> EngineResult<Subscribed> {
        let mut topic = entry.lock();
        let (subscribed, to_confirm) =
            topic.subscribe_webhook((protocol, endpoint), attrs, subscriber, now)?;
        if let Some(subscription) = to_confirm {
            let delivery = self.subscription_confirmation(&topic, &subscription, &confirming, now);
            confirming.webhooks.push_confirmation(delivery, now);
        }
        Ok(subscribed)
    }

    /// Subscribe for a captured protocol (`topic::captured`): an email endpoint pends, with
    /// its SubscriptionConfirmation (and a token to confirm with) handed back to be captured.
    fn subscribe_captured(
        &self,
        entry: &TopicEntry,
        (protocol, endpoint, attrs): (SubscriptionProtocol, &str, &[(String, String)]),
        subscriber: Subscriber,
        confirming: Confirming,
        now: Timestamp,
    ) -> EngineResult<Subscribed> {
        let mut topic = entry.lock();
        let (mut subscribed, to_confirm) =
            topic.subscribe_captured((protocol, endpoint), attrs, subscriber, now)?;
        if let Some(subscription) = to_confirm {
            let document = self.subscription_confirmation(&topic, &subscription, &confirming, now);
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

    /// A pending subscription's SubscriptionConfirmation, with a fresh token to confirm it.
    fn subscription_confirmation(
        &self,
        topic: &Topic,
        subscription: &Subscription,
        confirming: &Confirming,
        now: Timestamp,
    ) -> Delivery {
        let grant = Grant::Confirm(subscription.arn.clone());
        let token = confirming.webhooks.issue_token(grant, now);
        let confirmation = ConfirmationFor {
            kind: Kind::SubscriptionConfirmation,
            token: &token,
            base_url: confirming.base_url,
        };
        let signer = self.signer().ok();
        confirmation_delivery(topic, subscription, confirmation, signer.as_deref(), now)
    }

    /// The topic of a subscription ARN (`<topic arn>:<id>`).
    pub(super) fn subscription_topic(
        &self,
        subscription_arn: &str,
    ) -> EngineResult<Arc<TopicEntry>> {
        let topic_arn = subscription_topic_arn(subscription_arn)?;
        self.get(&topic_arn).map_err(|_| no_such_subscription())
    }

    /// Runs `f` on a subscription (a copy, swapped in afterwards, so fan-out snapshots stay valid).
    pub fn with_subscription<T>(
        &self,
        subscription_arn: &str,
        f: impl FnOnce(&Topic, &mut Subscription) -> EngineResult<T>,
    ) -> EngineResult<T> {
        let entry = self.subscription_topic(subscription_arn)?;
        let mut topic = entry.lock();
        topic.edit_subscription(subscription_arn, f)
    }

    /// Unsubscribe: idempotent for an unknown subscription. An HTTP/S endpoint is sent an
    /// UnsubscribeConfirmation whose SubscribeURL restores the subscription. `authenticated`:
    /// the call was signed (the UnsubscribeURL GET is not).
    pub fn unsubscribe(
        &self,
        confirming: Confirming,
        subscription_arn: &str,
        authenticated: bool,
        now: Timestamp,
    ) -> EngineResult<()> {
        let entry = match self.subscription_topic(subscription_arn) {
            Ok(entry) => entry,
            Err(EngineError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut topic = entry.lock();
        let Some(removed) = topic.remove_subscription(subscription_arn, authenticated)? else {
            return Ok(());
        };
        confirming
            .webhooks
            .remove_subscriptions([subscription_arn].into_iter());
        if removed.is_webhook() {
            self.send_unsubscribe_confirmation(&topic, removed, confirming, now);
        }
        Ok(())
    }

    /// After Unsubscribe: the endpoint learns of it, with a SubscribeURL that restores the
    /// subscription as it was.
    fn send_unsubscribe_confirmation(
        &self,
        topic: &Topic,
        removed: Arc<Subscription>,
        confirming: Confirming,
        now: Timestamp,
    ) {
        let token = confirming
            .webhooks
            .issue_token(Grant::Restore(removed.clone()), now);
        let confirmation = ConfirmationFor {
            kind: Kind::UnsubscribeConfirmation,
            token: &token,
            base_url: confirming.base_url,
        };
        let signer = self.signer().ok();
        let delivery = confirmation_delivery(topic, &removed, confirmation, signer.as_deref(), now);
        confirming.webhooks.push_confirmation(delivery, now);
    }

    /// Every subscription as (topic ARN, subscription), topics by name, then subscription order.
    pub fn list_subscriptions(
        &self,
        topic_arn: Option<&str>,
    ) -> EngineResult<Vec<(Arc<str>, Arc<Subscription>)>> {
        let entries: Vec<Arc<TopicEntry>> = match topic_arn {
            Some(arn) => vec![self.get(arn)?],
            None => self.entries(),
        };
        Ok(entries
            .iter()
            .flat_map(|e| {
                let topic = e.lock();
                topic
                    .subscriptions
                    .iter()
                    .map(|s| (topic.arn.clone(), s.clone()))
                    .collect::<Vec<_>>()
            })
            .collect())
    }

    /// ConfirmSubscription (or a GET of a SubscribeURL). The token alone names the
    /// subscription; `authenticated` says whether the call was signed.
    pub fn confirm_subscription(
        &self,
        webhooks: &Webhooks,
        topic_arn: &str,
        token: &str,
        (authenticate_on_unsubscribe, authenticated): (bool, bool),
        now: Timestamp,
    ) -> EngineResult<Arc<str>> {
        self.key_in_arn(topic_arn, "Topic")
            .map_err(|_| invalid("Invalid parameter: Topic"))?;
        if !tokens::well_formed(token) {
            return Err(invalid("Invalid token"));
        }
        let unknown = || invalid("Invalid parameter: Token");
        let grant = webhooks.grant(token, now).ok_or_else(unknown)?;
        let entry = self
            .subscription_topic(grant.subscription_arn())
            .map_err(|_| unknown())?;
        let mut topic = entry.lock();
        apply_grant(
            &mut topic,
            &grant,
            authenticate_on_unsubscribe,
            authenticated,
        )
    }

    /// Deletes subscriptions still pending when their token expires (two days).
    pub fn expire_confirmations(&self, webhooks: &Webhooks, now: Timestamp) {
        for grant in webhooks.expire_tokens(now) {
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
                webhooks.remove_subscriptions([&*arn].into_iter());
            }
        }
    }

    /// Keeps `error` as the subscription's last delivery error: a confirmation's too, so the
    /// inspection API shows why an endpoint never confirmed.
    pub fn note_delivery_error(
        &self,
        webhooks: &Webhooks,
        subscription_arn: &str,
        error: &str,
        now: Timestamp,
    ) {
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
        webhooks.note_error(subscription_arn, error, subscribed, now);
        drop(topic);
    }
}

#[cfg(test)]
mod tests;
