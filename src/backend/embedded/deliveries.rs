//! The webhook outbox on the embedded engine.

use std::sync::Arc;

use super::Embedded;
use crate::backend::{Answer, BackendError, Deliveries, DeliveryResult};
use crate::engine::webhook::outbox::{Attempt, LaneStats, Outcome};
use crate::engine::webhooks::AttemptResult;
use crate::engine::Timestamp;

fn not_leading() -> BackendError {
    BackendError::Unavailable(
        "this node may no longer lead (its lease could lapse soon): it sends no webhook".into(),
    )
}

impl Deliveries for Embedded {
    fn take_deliveries(&self, now: Timestamp, limit: usize) -> Answer<'_, Vec<Attempt>> {
        Box::pin(async move {
            // Shut (handed to another node): the next leader sends what is left.
            if !self.tenure.holds() || self.gate().is_none() {
                return Err(not_leading());
            }
            self.engine.expire_confirmations(now);
            let attempts = self.engine.webhooks.take_due(now, limit);
            if attempts.is_empty() {
                return Ok(attempts);
            }
            // A delivery is in the outbox once its change was handed to the log, not once the
            // log holds it: a POST before then could carry a publish a crash then loses (and
            // whose sequence number the next leader gives another message).
            if let Err(error) = self.durable().await {
                self.engine.webhooks.put_back(&attempts, now);
                return Err(error);
            }
            Ok(attempts)
        })
    }

    fn may_deliver(&self) -> bool {
        self.tenure.holds() && self.gate().is_some()
    }

    fn put_back_delivery(&self, attempt: &Attempt, now: Timestamp) {
        self.engine
            .webhooks
            .put_back(std::slice::from_ref(attempt), now);
    }

    fn note_delivery_error(&self, attempt: &Attempt, error: &str, now: Timestamp) {
        self.engine
            .note_delivery_error(&attempt.delivery.subscription_arn, error, now);
    }

    fn finish_delivery<'a>(
        &'a self,
        attempt: &'a Attempt,
        outcome: Outcome,
        now: Timestamp,
    ) -> Answer<'a, DeliveryResult> {
        // Not refused while the log is down: the attempt happened, and forgetting its outcome
        // would leave the delivery in flight for good. It reaches the log with the next write.
        Box::pin(async move {
            let result = match self.engine.finish_delivery(attempt, outcome, now) {
                AttemptResult::Delivered => DeliveryResult::Delivered,
                AttemptResult::Retrying(at) => DeliveryResult::Retrying(at),
                AttemptResult::DeadLettered(Some(queue)) => {
                    queue.waiters.notify_one();
                    DeliveryResult::DeadLettered
                }
                AttemptResult::DeadLettered(None) => DeliveryResult::ToDeadLetterShard,
                AttemptResult::Dropped => DeliveryResult::Dropped,
                AttemptResult::ConfirmationFailed => DeliveryResult::ConfirmationFailed,
                AttemptResult::Gone => DeliveryResult::Gone,
            };
            self.durable().await?;
            Ok(result)
        })
    }

    fn next_delivery_due(&self) -> Answer<'_, Option<Timestamp>> {
        self.reading(|engine| Ok(engine.webhooks.next_due()))
    }

    fn delivery_stats(&self) -> Answer<'_, Vec<(Arc<str>, LaneStats)>> {
        self.reading(|engine| Ok(engine.delivery_stats()))
    }

    fn signing_certificate<'a>(&'a self, file: &'a str) -> Answer<'a, Option<String>> {
        self.reading(move |engine| {
            let signer = engine.topics.signer().map_err(BackendError::Unavailable)?;
            Ok((file == signer.certificate_file).then(|| signer.certificate_pem.clone()))
        })
    }
}
