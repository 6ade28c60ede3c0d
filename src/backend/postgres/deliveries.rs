//! The webhook outbox on PostgreSQL: not built yet (issue 30). HTTP/S subscriptions are
//! refused on this backend (`topics::not_yet`), so there is never a delivery to take; what is
//! here already is the signing certificate every node shares.

use std::sync::Arc;

use super::publish::stored_signer;
use super::Postgres;
use crate::backend::{Answer, Deliveries, DeliveryResult};
use crate::engine::webhook::outbox::{Attempt, LaneStats, Outcome};
use crate::engine::Timestamp;

impl Deliveries for Postgres {
    fn take_deliveries(&self, _now: Timestamp, _limit: usize) -> Answer<'_, Vec<Attempt>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn finish_delivery<'a>(
        &'a self,
        _attempt: &'a Attempt,
        _outcome: Outcome,
        _now: Timestamp,
    ) -> Answer<'a, DeliveryResult> {
        Box::pin(async { Ok(DeliveryResult::Gone) })
    }

    fn note_delivery_error(&self, _attempt: &Attempt, _error: &str, _now: Timestamp) {}

    fn next_delivery_due(&self) -> Answer<'_, Option<Timestamp>> {
        Box::pin(async { Ok(None) })
    }

    fn delivery_stats(&self) -> Answer<'_, Vec<(Arc<str>, LaneStats)>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// The certificate of the key any node signed with, if one was made yet.
    fn signing_certificate<'a>(&'a self, file: &'a str) -> Answer<'a, Option<String>> {
        Box::pin(async move {
            let client = self.client().await?;
            let signer = stored_signer(&client).await?;
            Ok(signer
                .filter(|s| s.certificate_file == file)
                .map(|s| s.certificate_pem.clone()))
        })
    }
}
