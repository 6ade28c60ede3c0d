//! Messages on the embedded engine. Long polls park on the queue's notifier, holding no lock,
//! and sleep on the injected clock, so a test moves time instead of waiting.

use std::sync::Arc;

use super::{Embedded, Entry};
use crate::backend::{Answer, Messages};
use crate::engine::queue::{ReceiveRequest, Received, SendReceipt, SendRequest};
use crate::engine::EngineResult;

/// Wakes the longest-waiting long poll on a queue after something became receivable. One is
/// enough: a poll that leaves receivable messages behind wakes the next (see `receive`), so
/// waiters are served in arrival order without a thundering herd.
fn wake(entry: &Entry) {
    entry.waiters.notify_one();
}

impl Messages for Embedded {
    fn send<'a>(&'a self, queue: &'a str, request: SendRequest) -> Answer<'a, SendReceipt> {
        self.changing(move |_| {
            let (entry, receipt) = self.on_queue(queue, |queue, now| queue.send(request, now))?;
            wake(&entry);
            Ok(receipt)
        })
    }

    fn send_batch<'a>(
        &'a self,
        queue: &'a str,
        requests: Vec<SendRequest>,
    ) -> Answer<'a, Vec<EngineResult<SendReceipt>>> {
        self.changing(move |_| {
            let (entry, results) =
                self.on_queue(queue, |queue, now| queue.send_batch(requests, now))?;
            if results.iter().any(Result::is_ok) {
                wake(&entry);
            }
            Ok(results)
        })
    }

    fn receive<'a>(
        &'a self,
        queue: &'a str,
        request: ReceiveRequest,
        wait_seconds: Option<u64>,
    ) -> Answer<'a, Vec<Received>> {
        Box::pin(async move {
            drop(self.admit()?);
            let entry = self.engine.queues.get(queue)?;
            let wait_seconds =
                wait_seconds.unwrap_or_else(|| entry.lock().config().receive_wait_seconds as u64);
            let deadline = self.clock.now().plus_seconds(wait_seconds);
            loop {
                let notified = entry.waiters.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let now = self.clock.now();
                // Shut while it waited (handed to another node): it ends empty, and the next
                // receive goes to the shard's next leader.
                let Some(admitted) = self.gate() else {
                    return Ok(Vec::new());
                };
                let (mut outcome, dead_letter_queue) =
                    self.engine.receive(&entry, &request, now)?;
                drop(admitted);
                crate::backend::log_expired(&entry.name, std::mem::take(&mut outcome.expired));
                if !outcome.dead_lettered.is_empty() {
                    // Dead letters for another shard's queue are carried now, not when this
                    // poll ends.
                    super::signal_parcels(&self.engine, self.parcels_waiting.as_deref());
                }
                if let Some(dlq) = dead_letter_queue {
                    wake(&dlq);
                    for (id, receive_count) in &outcome.dead_lettered {
                        crate::backend::log_dead_lettered(
                            &entry.name,
                            &dlq.name,
                            *id,
                            *receive_count,
                        );
                    }
                }
                let gone = self
                    .engine
                    .queues
                    .get(&entry.name)
                    .map_or(true, |current| !Arc::ptr_eq(&current, &entry));
                if !outcome.received.is_empty() || now >= deadline || gone {
                    if !outcome.received.is_empty() && entry.lock().has_receivable() {
                        wake(&entry);
                    }
                    self.durable().await?;
                    return Ok(outcome.received);
                }
                let wake_at = entry
                    .lock()
                    .next_deadline()
                    .map_or(deadline, |d| d.min(deadline));
                // Counted while it waits, and uncounted however the wait ends (a client that
                // hangs up drops this future mid-wait).
                let _waiting = crate::backend::Waiting::start(&self.long_polls);
                tokio::select! {
                    _ = notified => {}
                    _ = self.clock.sleep_until(wake_at.max(now.plus_millis(1))) => {}
                }
            }
        })
    }

    fn delete<'a>(
        &'a self,
        queue: &'a str,
        handles: Vec<&'a str>,
    ) -> Answer<'a, Vec<EngineResult<()>>> {
        self.changing(move |_| {
            let mut removed = false;
            let (entry, results) = self.on_queue(queue, |queue, now| {
                Ok(handles
                    .into_iter()
                    .map(|handle| {
                        removed |= queue.delete(handle, now)?;
                        Ok(())
                    })
                    .collect::<Vec<_>>())
            })?;
            // Deleting a FIFO group's head unlocks the group.
            if removed {
                wake(&entry);
            }
            Ok(results)
        })
    }

    fn change_visibility<'a>(
        &'a self,
        queue: &'a str,
        changes: Vec<(&'a str, i64)>,
    ) -> Answer<'a, Vec<EngineResult<()>>> {
        self.changing(move |_| {
            let (entry, results) = self.on_queue(queue, |queue, now| {
                Ok(changes
                    .into_iter()
                    .map(|(handle, timeout)| queue.change_visibility(handle, timeout, now))
                    .collect::<Vec<_>>())
            })?;
            // A message made visible again may be the next receivable one.
            wake(&entry);
            Ok(results)
        })
    }
}
