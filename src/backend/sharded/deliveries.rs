//! The webhook outbox over shards: each subscription's deliveries are its topic's shard's; the
//! worker takes from every shard in turn.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{on, Sharded};
use crate::backend::embedded::Embedded;
use crate::backend::{Answer, Deliveries, DeliveryResult};
use crate::engine::webhook::outbox::{Attempt, LaneStats, Outcome};
use crate::engine::Timestamp;

impl Deliveries for Sharded {
    fn take_deliveries(&self, now: Timestamp, limit: usize) -> Answer<'_, Vec<Attempt>> {
        Box::pin(async move {
            let here: Vec<Arc<Embedded>> = self.here().collect();
            let count = here.len();
            if count == 0 {
                return Ok(Vec::new());
            }
            let first = self.next_taken.fetch_add(1, Ordering::Relaxed) % count;
            let (mut taken, mut failed) = (Vec::new(), None);
            for n in 0..count {
                // Every shard is asked, with nothing left to take too: it expires confirmations.
                let shard = &here[(first + n) % count];
                match shard
                    .take_deliveries(now, limit.saturating_sub(taken.len()))
                    .await
                {
                    Ok(attempts) => taken.extend(attempts),
                    // The others are asked all the same; what was taken is sent.
                    Err(error) => failed = failed.or(Some(error)),
                }
            }
            match failed {
                Some(error) if taken.is_empty() => Err(error),
                _ => Ok(taken),
            }
        })
    }

    fn may_deliver(&self) -> bool {
        self.here().all(|shard| shard.may_deliver())
    }

    fn put_back_delivery(&self, attempt: &Attempt, now: Timestamp) {
        // Deliveries are taken from the shards this node leads only.
        if let Ok(shard) = self.of_topic_arn(&attempt.delivery.topic_arn) {
            shard.put_back_delivery(attempt, now);
        }
    }

    fn finish_delivery<'a>(
        &'a self,
        attempt: &'a Attempt,
        outcome: Outcome,
        now: Timestamp,
    ) -> Answer<'a, DeliveryResult> {
        on(
            self.of_topic_arn(&attempt.delivery.topic_arn),
            move |shard| shard.finish_delivery(attempt, outcome, now),
        )
    }

    fn note_delivery_error(&self, attempt: &Attempt, error: &str, now: Timestamp) {
        if let Ok(shard) = self.of_topic_arn(&attempt.delivery.topic_arn) {
            shard.note_delivery_error(attempt, error, now);
        }
    }

    fn next_delivery_due(&self) -> Answer<'_, Option<Timestamp>> {
        Box::pin(async move {
            let mut next = None;
            for shard in self.here() {
                if let Some(due) = shard.next_delivery_due().await? {
                    next = Some(next.map_or(due, |next: Timestamp| next.min(due)));
                }
            }
            Ok(next)
        })
    }

    fn delivery_stats(&self) -> Answer<'_, Vec<(Arc<str>, LaneStats)>> {
        Box::pin(async move {
            let mut stats = self.gather_here(|shard| shard.delivery_stats()).await?;
            // As one engine lists them: by subscription.
            stats.sort_by(|(a, _), (b, _)| a.cmp(b));
            Ok(stats)
        })
    }

    fn signing_certificate<'a>(&'a self, file: &'a str) -> Answer<'a, Option<String>> {
        Box::pin(async move {
            let found = self
                .here()
                .find_map(|shard| shard.signing_certificate_made(file));
            if found.is_some() || !is_certificate_file(file) {
                return Ok(found);
            }
            // Signed by a shard another node leads: the envelope names whichever node took
            // the publish, so that node asks the others.
            let read = crate::backend::ShardRead::SigningCertificate(file.to_string());
            let mut unread = None;
            let deadline = tokio::time::Instant::now() + CERTIFICATE_WAIT;
            for n in (0..self.count()).filter(|&n| self.slot(n).is_none()) {
                let asked = tokio::time::timeout_at(deadline, self.read(n, &read)).await;
                match asked {
                    Ok(Ok(found)) => {
                        if let Some(pem) = found.first() {
                            return Ok(Some(pem.to_string()));
                        }
                    }
                    Ok(Err(error)) => unread = Some(error),
                    Err(_) => {
                        let late =
                            format!("the other nodes were not all asked within 2 s (shard {n})");
                        return Err(crate::backend::BackendError::Unavailable(late));
                    }
                }
            }
            // Missing only if every shard that could hold it said so.
            match unread {
                Some(error) => Err(error),
                None => Ok(None),
            }
        })
    }
}

/// Longest the other nodes' shards are asked for a signing certificate, all told.
const CERTIFICATE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether `file` has the shape of a signer's certificate file (`SimpleNotificationService-`,
/// 32 hex digits, `.pem`): only such a name is asked of other nodes.
fn is_certificate_file(file: &str) -> bool {
    (file.strip_prefix("SimpleNotificationService-"))
        .and_then(|rest| rest.strip_suffix(".pem"))
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}
