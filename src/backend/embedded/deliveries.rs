//! The webhook outbox on the embedded engine.

use std::sync::Arc;

use super::Embedded;
use crate::backend::{Answer, BackendError, Deliveries, DeliveryResult};
use crate::engine::webhook::lifecycle::AttemptResult;
use crate::engine::webhook::outbox::{Attempt, LaneStats, Outcome};
use crate::engine::Timestamp;

impl Deliveries for Embedded {
    fn take_deliveries(&self, now: Timestamp, limit: usize) -> Answer<'_, Vec<Attempt>> {
        self.reading(move |engine| {
            engine.expire_confirmations(now);
            Ok(engine.take_deliveries(now, limit))
        })
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
                AttemptResult::DeadLettered(queue) => {
                    queue.waiters.notify_one();
                    DeliveryResult::DeadLettered
                }
                AttemptResult::Dropped => DeliveryResult::Dropped,
                AttemptResult::ConfirmationFailed => DeliveryResult::ConfirmationFailed,
                AttemptResult::Gone => DeliveryResult::Gone,
            };
            self.durable().await?;
            Ok(result)
        })
    }

    fn next_delivery_due(&self) -> Answer<'_, Option<Timestamp>> {
        self.reading(|engine| Ok(engine.next_delivery_due()))
    }

    fn delivery_stats(&self) -> Answer<'_, Vec<(Arc<str>, LaneStats)>> {
        self.reading(|engine| Ok(engine.delivery_stats()))
    }

    fn signing_certificate<'a>(&'a self, file: &'a str) -> Answer<'a, Option<String>> {
        self.reading(move |engine| {
            let signer = engine.signer().map_err(BackendError::Unavailable)?;
            Ok((file == signer.certificate_file).then(|| signer.certificate_pem.clone()))
        })
    }
}
