//! What Subscribe, Unsubscribe and the subscription attributes change in one topic: new
//! subscriptions (queue, HTTP/S, pending or not), edits, removal. The registry around topics and
//! what it sends out (confirmations) is `engine::topics`.

use std::sync::Arc;

use super::subscription::{Subscribed, Subscriber};
use super::{Subscription, SubscriptionProtocol, Topic};
use crate::engine::error::invalid_parameter as invalid;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::time::Timestamp;

pub fn no_such_subscription() -> EngineError {
    EngineError::NotFound("Subscription does not exist".into())
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

    /// CreateTopic of a name that exists: the same attributes and tags are no error.
    pub fn check_recreate(
        &self,
        attrs: &[(String, String)],
        tags: &[(String, String)],
    ) -> EngineResult<()> {
        if !self.same_settings(attrs) {
            return Err(invalid("Invalid parameter: Attributes Reason: Topic already exists with different attributes"));
        }
        if !tags.is_empty() && tags.iter().any(|(k, v)| self.tags.get(k) != Some(v)) {
            return Err(invalid(
                "Invalid parameter: Tags Reason: Topic already exists with different tags",
            ));
        }
        Ok(())
    }

    /// Subscribes the queue `endpoint` (keyed `queue_key`), or answers the existing
    /// subscription of the same endpoint. A queue that does not exist yet is allowed (AWS
    /// checks delivery, not subscription); its type is known from its name. A queue of another
    /// account than the subscriber's pends (`queue_pends`): answered too is the subscription
    /// its SubscriptionConfirmation is for.
    pub fn subscribe_queue(
        &mut self,
        (endpoint, queue_key): (&str, &str),
        attrs: &[(String, String)],
        subscriber: Subscriber,
        (pending, now): (bool, Timestamp),
    ) -> EngineResult<(Subscribed, Option<Arc<Subscription>>)> {
        if queue_key.ends_with(".fifo") && !self.fifo {
            return Err(invalid(
                "Invalid parameter: Invalid parameter: Endpoint Reason: FIFO SQS Queues can not be subscribed to standard SNS topics",
            ));
        }
        self.subscribe_confirmable(
            (SubscriptionProtocol::Sqs, endpoint),
            attrs,
            subscriber,
            (pending, now),
        )
    }

    fn subscription_index(&self, subscription_arn: &str) -> Option<usize> {
        self.subscriptions
            .iter()
            .position(|s| &*s.arn == subscription_arn)
    }

    /// Runs `f` on a copy of a subscription, swapped in afterwards (fan-out snapshots taken
    /// before stay valid).
    pub fn edit_subscription<T>(
        &mut self,
        subscription_arn: &str,
        f: impl FnOnce(&Topic, &mut Subscription) -> EngineResult<T>,
    ) -> EngineResult<T> {
        let index = self
            .subscription_index(subscription_arn)
            .ok_or_else(no_such_subscription)?;
        let mut copy = (*self.subscriptions[index]).clone();
        let out = f(self, &mut copy)?;
        self.subscriptions[index] = Arc::new(copy);
        Ok(out)
    }

    /// Unsubscribe's change to the topic: the removed subscription, `None` if unknown.
    /// `authenticated`: the call was signed.
    pub fn remove_subscription(
        &mut self,
        subscription_arn: &str,
        authenticated: bool,
    ) -> EngineResult<Option<Arc<Subscription>>> {
        let Some(index) = self.subscription_index(subscription_arn) else {
            return Ok(None);
        };
        if self.subscriptions[index].authenticate_on_unsubscribe && !authenticated {
            return Err(EngineError::AuthorizationError(
                "Authorization error: this subscription can only be removed by a signed request"
                    .into(),
            ));
        }
        let removed = self.subscriptions.remove(index);
        self.deleted_subscriptions += 1;
        Ok(Some(removed))
    }
}
