//! Webhook delivery: one tokio task takes due deliveries from the engine's outbox and runs
//! each attempt on its own task, at most `--webhook-concurrency` at a time, through one pooled
//! reqwest client. Everything about order, retries and dead-lettering is decided by the engine
//! (`engine::webhook::lifecycle`); this module only moves bytes and reads the clock.

pub mod allow;
pub mod sender;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};

use crate::clock::Clock;
use crate::engine::webhook::lifecycle::AttemptResult;
use crate::engine::Engine;
pub use allow::AllowList;
pub use sender::{Sender, SenderConfig};

/// Longest the worker sleeps without looking, on the server's clock (pending confirmations
/// expire meanwhile).
const MAX_IDLE: Duration = Duration::from_secs(60);

/// The service's handle on webhook delivery.
pub struct Webhooks {
    pub allow_list: Arc<AllowList>,
    /// Signalled when deliveries were queued or an attempt finished.
    work: Arc<Notify>,
    sender: Sender,
    concurrency: usize,
}

impl Webhooks {
    pub fn new(
        allow_list: AllowList,
        sender: &SenderConfig,
        concurrency: usize,
    ) -> Result<Webhooks, reqwest::Error> {
        let allow_list = Arc::new(allow_list);
        Ok(Webhooks {
            sender: Sender::new(allow_list.clone(), sender)?,
            allow_list,
            work: Arc::new(Notify::new()),
            concurrency: concurrency.max(1),
        })
    }

    /// Tells the worker to look for due deliveries (a stored permit if it is busy: no wake is lost).
    pub fn wake(&self) {
        self.work.notify_one();
    }

    /// What `wake` signals, for storage to signal once it has queued deliveries.
    pub fn wake_signal(&self) -> Arc<Notify> {
        self.work.clone()
    }
}

/// The delivery loop; runs for the server's lifetime. It needs the engine's outbox, the clock
/// and the sender, nothing of the service.
pub async fn run(engine: Arc<Engine<Notify>>, clock: Arc<dyn Clock>, webhooks: Arc<Webhooks>) {
    let permits = Arc::new(Semaphore::new(webhooks.concurrency));
    loop {
        let now = clock.now();
        engine.expire_confirmations(now);
        let attempts = engine.take_deliveries(now, permits.available_permits());
        for attempt in attempts {
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                // Only this loop acquires, and it took no more than were available.
                tracing::error!("webhook permits exhausted unexpectedly");
                break;
            };
            let (engine, clock, webhooks) = (engine.clone(), clock.clone(), webhooks.clone());
            tokio::spawn(async move {
                let outcome = webhooks.sender.send(&attempt).await;
                let now = clock.now();
                let delivery = &attempt.delivery;
                match engine.finish_delivery(&attempt, outcome, now) {
                    AttemptResult::Delivered | AttemptResult::Gone => {}
                    AttemptResult::Retrying(at) => tracing::debug!(
                        endpoint = %delivery.endpoint,
                        attempt = attempt.number,
                        retry_in_ms = at.millis_since(now),
                        "webhook delivery will be retried"
                    ),
                    AttemptResult::DeadLettered(queue) => {
                        tracing::info!(subscription = %delivery.subscription_arn, message = %delivery.message_id, "webhook delivery failed; moved to the dead-letter queue");
                        queue.waiters.notify_one();
                    }
                    AttemptResult::Dropped => tracing::warn!(
                        subscription = %delivery.subscription_arn,
                        message = %delivery.message_id,
                        "webhook delivery failed and the subscription has no dead-letter queue; message dropped"
                    ),
                    AttemptResult::ConfirmationFailed => tracing::warn!(
                        endpoint = %delivery.endpoint,
                        kind = delivery.kind.wire_name(),
                        "confirmation message could not be delivered"
                    ),
                }
                drop(permit);
                webhooks.wake();
            });
        }
        let idle_until = now.plus_millis(MAX_IDLE.as_millis() as u64);
        let wake_at = match engine.next_delivery_due() {
            // Due already: only a finished attempt (freeing a permit) can help; it wakes us.
            Some(at) if at <= now => idle_until,
            Some(at) => at.min(idle_until),
            None => idle_until,
        };
        tokio::select! {
            _ = webhooks.work.notified() => {}
            _ = clock.sleep_until(wake_at) => {}
        }
    }
}
