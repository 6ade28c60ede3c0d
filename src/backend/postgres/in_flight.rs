//! The in-flight limit (120,000 messages a queue, as on AWS): a receive takes no more than the
//! room left, and a standard queue at the limit answers OverLimit. Counting a queue's messages
//! in flight costs a scan of them, so each node counts at most once a second per queue (never
//! past the limit) and adds what it received itself since; like AWS's, the limit is
//! approximate: nodes together may pass it by what they received within that second.

use std::collections::HashMap;
use std::sync::Mutex;

use deadpool_postgres::GenericClient;

use super::queues::millis;
use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::BackendResult;
use crate::engine::Timestamp;

/// How long a count stands before the next receive counts again.
const RECOUNT_MS: u64 = 1_000;

/// Per queue (by uid): messages in flight as last counted plus received here since, and when
/// that count was made.
#[derive(Default)]
pub struct InFlight(Mutex<HashMap<i64, (usize, Timestamp)>>);

impl InFlight {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<i64, (usize, Timestamp)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts `received` messages this node just put in flight.
    pub fn add(&self, uid: i64, received: usize) {
        if let Some((count, _)) = self.map().get_mut(&uid) {
            *count += received;
        }
    }
}

impl Postgres {
    /// How many more messages the queue may have in flight.
    pub(super) async fn in_flight_room(
        &self,
        client: &impl GenericClient,
        uid: i64,
        now: Timestamp,
    ) -> BackendResult<usize> {
        let limit = self.in_flight_limit;
        let known = self.in_flight.map().get(&uid).copied();
        let count = match known {
            Some((count, at)) if at <= now && now.millis_since(at) < RECOUNT_MS => count,
            _ => {
                let row = client
                    .row(
                        "SELECT count(*) FROM (SELECT 1 FROM messages WHERE queue_uid = $1 \
                         AND visible_at > $2 AND received LIMIT $3) AS held",
                        &[&uid, &millis(now), &(limit as i64)],
                    )
                    .await
                    .map_err(unavailable)?;
                let count = row.get::<_, i64>(0) as usize;
                self.in_flight.map().insert(uid, (count, now));
                count
            }
        };
        Ok(limit.saturating_sub(count))
    }
}
