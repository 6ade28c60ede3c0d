//! HTTP/S subscriptions on PostgreSQL: subscribing (pending, with a SubscriptionConfirmation
//! queued in the same transaction), confirming by token on any node, and unsubscribing (an
//! UnsubscribeConfirmation whose token restores the subscription). The topic's rules are the
//! engine's (`Topic::subscribe_webhook`, `Topic::apply_grant`), the messages its builders'
//! (`confirmation_delivery`); tokens live in `webhook_tokens`, shared by every node.

use std::sync::Arc;

use deadpool_postgres::Transaction;

use super::publish::QueueCache;
use super::queues::millis;
use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::{BackendError, BackendResult, Confirm, Subscribe};
use crate::engine::topic::registry::{
    subscription_topic_arn, EndpointKind, Subscribed, Subscriber,
};
use crate::engine::topic::signing::MessageSigner;
use crate::engine::topic::{recorded, Subscription, Topic};
use crate::engine::webhook::changes::TokenRecord;
use crate::engine::webhook::delivery::{confirmation_delivery, ConfirmationFor};
use crate::engine::webhook::tokens::{self, Grant, TOKEN_LIFETIME_MS};
use crate::engine::webhook::Kind;
use crate::engine::{EngineError, Timestamp};
use crate::persist::format::{decode_token, encode_token};

/// Where a confirmation message goes and what its token does.
struct ConfirmationRequest<'a> {
    grant: Grant,
    kind: Kind,
    base_url: &'a str,
    signer: &'a MessageSigner,
}

impl Postgres {
    /// Subscribe for an endpoint that may have to confirm, on the topic named `name`: http/https
    /// (`kind` Webhook: a pending subscription and a SubscriptionConfirmation queued, sent
    /// again for an endpoint still pending), an SQS queue of another account (`kind` Queue: its
    /// SubscriptionConfirmation stored in the queue, `topic::registry::queue_pends`), or a
    /// recorded protocol (`engine::topic::recorded`:
    /// an email endpoint pends, its SubscriptionConfirmation recorded for every node; the others
    /// are confirmed at once). The token confirms on any node.
    pub(super) async fn subscribe_confirmable(
        &self,
        name: &str,
        request: &Subscribe<'_>,
        kind: EndpointKind,
    ) -> BackendResult<Subscribed> {
        let endpoint = request
            .endpoint
            .ok_or_else(|| EngineError::InvalidParameter("Invalid parameter: Endpoint".into()))?;
        // Read before this request holds a connection in a transaction.
        let signer = self.signer().await?;
        let (subscribed, woken) = super::retrying(|| async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(unavailable)?;
            let mut topic = self.load_topic(&tx, name, true).await?;
            let now = self.clock.now();
            let subscriber = Subscriber {
                owner: crate::engine::namespace::account_of_principal(request.principal)
                    .unwrap_or(self.namespaces.place(name).account),
                principal: Some(request.principal),
            };
            let asked = (request.protocol, endpoint);
            let attributes = &request.attributes;
            let (subscribed, to_confirm) = match kind {
                EndpointKind::Webhook => {
                    topic.subscribe_webhook(asked, attributes, subscriber, now)?
                }
                EndpointKind::Queue => {
                    let queue = self.namespaces.key_in_arn("sqs", endpoint).ok_or_else(|| {
                        EngineError::InvalidParameter("Invalid parameter: SQS endpoint ARN".into())
                    })?;
                    topic.subscribe_queue((endpoint, queue), attributes, subscriber, (true, now))?
                }
                _ => topic.subscribe_recorded(asked, attributes, subscriber, now)?,
            };
            self.save_topic(&tx, &topic).await?;
            let mut woken = None;
            if let Some(subscription) = to_confirm {
                let grant = Grant::Confirm(subscription.arn.clone());
                let token = self.issue_token(&tx, grant, now).await?;
                let which = ConfirmationFor {
                    kind: Kind::SubscriptionConfirmation,
                    token: &token,
                    base_url: request.base_url,
                };
                let document =
                    confirmation_delivery(&topic, &subscription, which, Some(&signer), now);
                if kind == EndpointKind::Webhook {
                    self.queue_confirmation(&tx, &document, now).await?;
                } else if kind == EndpointKind::Queue {
                    // A queue that does not exist (yet) loses its confirmation, as on AWS.
                    let copy = document.queue_confirmation_copy();
                    let mut queues = QueueCache::new();
                    let stored = self
                        .copy_into(&tx, (endpoint, &mut queues), &copy, now)
                        .await?;
                    woken = stored.map(|(uid, _)| uid);
                } else {
                    let record = recorded::confirmation_record(
                        &topic,
                        &subscription,
                        document.body,
                        document.message_id,
                        now,
                    );
                    self.keep_recorded(&tx, &[record]).await?;
                }
            }
            tx.commit().await.map_err(unavailable)?;
            Ok((subscribed, woken))
        })
        .await?;
        if kind == EndpointKind::Webhook {
            self.deliveries.notify_one();
        }
        if let Some(uid) = woken {
            self.wake(uid);
        }
        Ok(subscribed)
    }

    /// Issues a confirmation token for `grant`, valid two days, stored for every node.
    async fn issue_token(
        &self,
        tx: &Transaction<'_>,
        grant: Grant,
        now: Timestamp,
    ) -> BackendResult<String> {
        let token = tokens::new_token();
        let expires = now.plus_millis(TOKEN_LIFETIME_MS);
        let pending = match &grant {
            Grant::Confirm(arn) => Some(arn.to_string()),
            Grant::Restore(_) => None,
        };
        let record = TokenRecord {
            token: token.clone(),
            expires,
            grant: grant.image(),
        };
        tx.run(
            "INSERT INTO webhook_tokens (token, pending_subscription, record, expires_at) \
             VALUES ($1, $2, $3, $4)",
            &[&token, &pending, &encode_token(&record), &millis(expires)],
        )
        .await
        .map_err(unavailable)?;
        Ok(token)
    }

    /// Issues a token for `confirmation.grant` and queues the confirmation message carrying it.
    async fn send_confirmation(
        &self,
        tx: &Transaction<'_>,
        topic: &Topic,
        subscription: &Subscription,
        confirmation: ConfirmationRequest<'_>,
        now: Timestamp,
    ) -> BackendResult<()> {
        let token = self.issue_token(tx, confirmation.grant, now).await?;
        let which = ConfirmationFor {
            kind: confirmation.kind,
            token: &token,
            base_url: confirmation.base_url,
        };
        let delivery =
            confirmation_delivery(topic, subscription, which, Some(confirmation.signer), now);
        self.queue_confirmation(tx, &delivery, now).await
    }

    /// ConfirmSubscription (or a GET of a SubscribeURL) on any node: the token alone names the
    /// subscription.
    pub(super) async fn confirm_by_token(&self, request: &Confirm<'_>) -> BackendResult<Arc<str>> {
        self.topic_name(request.topic_arn, "Topic")
            .map_err(|_| EngineError::InvalidParameter("Invalid parameter: Topic".into()))?;
        if !tokens::well_formed(request.token) {
            return Err(EngineError::InvalidParameter("Invalid token".into()).into());
        }
        let unknown = || {
            BackendError::from(EngineError::InvalidParameter(
                "Invalid parameter: Token".into(),
            ))
        };
        let now = self.clock.now();
        let client = self.client().await?;
        let row = client
            .maybe_row(
                "SELECT record FROM webhook_tokens WHERE token = $1 AND expires_at > $2",
                &[&request.token, &millis(now)],
            )
            .await
            .map_err(unavailable)?
            .ok_or_else(unknown)?;
        drop(client);
        let record = decode_token(row.get(0)).map_err(unavailable)?;
        let grant = Grant::from_image(record.grant);
        let topic_arn = subscription_topic_arn(grant.subscription_arn()).map_err(|_| unknown())?;
        let name = self
            .topic_name(&topic_arn, "TopicArn")
            .map_err(|_| unknown())?;
        let (on_unsubscribe, authenticated) =
            (request.authenticate_on_unsubscribe, request.authenticated);
        match self
            .edit_topic(name, |topic| {
                topic.apply_grant(&grant, on_unsubscribe, authenticated)
            })
            .await
        {
            Err(BackendError::Rejected(EngineError::NotFound(_))) => Err(unknown()),
            other => other,
        }
    }

    /// Unsubscribe: idempotent for an unknown subscription. Its notifications waiting in the
    /// outbox go; an HTTP/S endpoint is sent an UnsubscribeConfirmation.
    pub(super) async fn unsubscribe_any(
        &self,
        arn: &str,
        authenticated: bool,
        base_url: &str,
    ) -> BackendResult<()> {
        let topic_arn = subscription_topic_arn(arn)?;
        let Ok(name) = self.topic_name(&topic_arn, "TopicArn") else {
            return Ok(());
        };
        // Only an HTTP/S endpoint's confirmation needs the key: read before the transaction.
        let client = self.client().await?;
        let webhook = match self.load_topic(&client, name, false).await {
            Ok(topic) => topic
                .subscriptions
                .iter()
                .any(|s| &*s.arn == arn && s.is_webhook()),
            Err(BackendError::Rejected(EngineError::NotFound(_))) => return Ok(()),
            Err(other) => return Err(other),
        };
        drop(client);
        let signer = match webhook {
            true => Some(self.signer().await?),
            false => None,
        };
        let removed = super::retrying(|| async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(unavailable)?;
            let mut topic = match self.load_topic(&tx, name, true).await {
                Ok(topic) => topic,
                Err(BackendError::Rejected(EngineError::NotFound(_))) => return Ok(false),
                Err(other) => return Err(other),
            };
            let Some(removed) = topic.remove_subscription(arn, authenticated)? else {
                return Ok(false);
            };
            self.save_topic(&tx, &topic).await?;
            self.remove_lane(&tx, arn).await?;
            if let (true, Some(signer)) = (removed.is_webhook(), &signer) {
                let confirmation = ConfirmationRequest {
                    grant: Grant::Restore(removed.clone()),
                    kind: Kind::UnsubscribeConfirmation,
                    base_url,
                    signer,
                };
                self.send_confirmation(&tx, &topic, &removed, confirmation, self.clock.now())
                    .await?;
            }
            tx.commit().await.map_err(unavailable)?;
            Ok(removed.is_webhook())
        })
        .await?;
        if removed {
            self.deliveries.notify_one();
        }
        Ok(())
    }
}
