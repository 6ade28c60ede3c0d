//! Webhook delivery: one tokio task takes due deliveries from storage's outbox
//! (`backend::Deliveries`) and runs each attempt on its own task, at most
//! `--webhook-concurrency` at a time, through one pooled reqwest client. Everything about
//! order, retries and dead-lettering is decided by storage (on the embedded backend,
//! `engine::webhooks`); this module only moves bytes and reads the clock.

pub mod allow;
pub mod sender;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};

use crate::backend::{Backend, DeliveryResult};
use crate::clock::Clock;
use crate::engine::webhook::outbox::Attempt;
use crate::engine::Timestamp;
use crate::worker::Backoff;
pub use allow::AllowList;
pub use sender::{NodeUrls, Sender, SenderConfig};

/// Longest the worker sleeps without looking, on the server's clock (pending confirmations
/// expire meanwhile).
const MAX_IDLE: Duration = Duration::from_secs(60);

/// Wait before asking storage again after it failed to answer or refused, doubled while it
/// goes on failing, up to the longest.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MOST: Duration = Duration::from_secs(4);

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

/// The delivery loop; runs for the server's lifetime. It needs storage's outbox, the clock and
/// the sender, nothing of the service.
pub async fn run(backend: Arc<dyn Backend>, clock: Arc<dyn Clock>, webhooks: Arc<Webhooks>) {
    let permits = Arc::new(Semaphore::new(webhooks.concurrency));
    let mut backoff = Backoff::new("webhooks", RETRY_FIRST, RETRY_MOST);
    loop {
        let now = clock.now();
        let available = permits.available_permits();
        let (attempts, refused) = match backend.take_deliveries(now, available).await {
            Ok(attempts) => {
                backoff.succeeded();
                (attempts, None)
            }
            Err(error) => {
                tracing::debug!(%error, "webhook deliveries could not be taken; trying again");
                (Vec::new(), Some(backoff.failed()))
            }
        };
        for attempt in attempts {
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                // Only this loop acquires, and it took no more than were available.
                tracing::error!("webhook permits exhausted unexpectedly");
                break;
            };
            let (backend, clock, webhooks) = (backend.clone(), clock.clone(), webhooks.clone());
            tokio::spawn(async move {
                // The last look before the request leaves: a node frozen since it took the
                // attempt may have been replaced meanwhile.
                if !backend.may_deliver() {
                    backend.put_back_delivery(&attempt, clock.now());
                    drop(permit);
                    return;
                }
                let (outcome, error) = webhooks.sender.send(&attempt).await;
                let now = clock.now();
                if let Some(error) = error {
                    backend.note_delivery_error(&attempt, &error, now);
                }
                match backend.finish_delivery(&attempt, outcome, now).await {
                    Ok(result) => log_result(&attempt, result, now),
                    Err(error) => {
                        tracing::warn!(%error, "a webhook attempt's outcome may not be durable")
                    }
                }
                drop(permit);
                webhooks.wake();
            });
        }
        // Refused (the log failing, or this node no longer sure it leads): asked again after
        // the back-off in real time, which passes on a manual clock too; new work changes
        // nothing meanwhile.
        if let Some(wait) = refused {
            tokio::time::sleep(wait).await;
            continue;
        }
        let idle_until = now.plus_millis(MAX_IDLE.as_millis() as u64);
        let wake_at = match backend.next_delivery_due().await {
            // Due already: only a finished attempt (freeing a permit) can help; it wakes us.
            Ok(Some(at)) if at <= now => idle_until,
            Ok(Some(at)) => at.min(idle_until),
            Ok(None) => idle_until,
            Err(_) => {
                tokio::time::sleep(backoff.failed()).await;
                continue;
            }
        };
        tokio::select! {
            _ = webhooks.work.notified() => {}
            _ = clock.sleep_until(wake_at) => {}
        }
    }
}

/// What the operator is told of an attempt: failures once, with their reason.
fn log_result(attempt: &Attempt, result: DeliveryResult, now: Timestamp) {
    let delivery = &attempt.delivery;
    match result {
        DeliveryResult::Delivered | DeliveryResult::Gone => {}
        DeliveryResult::Retrying(at) => tracing::debug!(
            endpoint = %delivery.endpoint,
            attempt = attempt.number,
            retry_in_ms = at.millis_since(now),
            "webhook delivery will be retried"
        ),
        DeliveryResult::DeadLettered => tracing::info!(
            subscription = %delivery.subscription_arn,
            message_id = %delivery.message_id,
            "webhook delivery failed; moved to the dead-letter queue"
        ),
        DeliveryResult::ToDeadLetterShard => tracing::info!(
            subscription = %delivery.subscription_arn,
            message_id = %delivery.message_id,
            "webhook delivery failed; handed to the dead-letter queue's shard"
        ),
        DeliveryResult::Dropped => tracing::warn!(
            subscription = %delivery.subscription_arn,
            message_id = %delivery.message_id,
            "webhook delivery failed and the subscription has no dead-letter queue; message dropped"
        ),
        DeliveryResult::ConfirmationFailed => tracing::warn!(
            endpoint = %delivery.endpoint,
            kind = delivery.kind.wire_name(),
            "confirmation message could not be delivered"
        ),
    }
}
