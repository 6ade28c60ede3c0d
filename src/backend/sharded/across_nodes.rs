//! Parcels between shards led by different nodes. The destination's leader pulls them from the
//! source's leader (`ParcelsElsewhere`, over the network), each pull naming the last parcel the
//! destination's log holds as applied, so the source forgets up to it; the source answers a
//! pull from what its log holds, waiting a while for a parcel when it has none. Each pair of
//! shards keeps its order and applies each parcel once, as between shards of one node.

use std::sync::Arc;
use std::time::Duration;

use super::{Sharded, CARRIED_AT_ONCE};
use crate::backend::embedded::Embedded;
use crate::backend::{Answer, BackendError, ParcelsElsewhere};
use crate::persist::format::between_nodes::{decode_parcels, encode_parcels};
use crate::worker::Backoff;

/// Failures to pull are said once per cause per interval, not once a pull.
static WARNINGS: std::sync::LazyLock<crate::quiet_log::QuietLog> =
    std::sync::LazyLock::new(Default::default);

/// Carries into shard `destination` (led here) the parcels shard `from` (led by another node)
/// holds for it, pull after pull.
async fn carry_from_node(
    remote: Arc<dyn ParcelsElsewhere>,
    from: u32,
    destination: Arc<Embedded>,
    rounds: Arc<tokio::sync::Notify>,
) {
    let to = destination.shard();
    let mut backoff = Backoff::new("carrier", Duration::from_millis(50), Duration::from_secs(2));
    let mut applied = loop {
        match destination.applied_from(from).await {
            Ok(applied) => break applied,
            Err(error) => {
                tracing::warn!(%error, from, to, "cannot read what was applied");
                tokio::time::sleep(backoff.failed()).await;
            }
        }
    };
    // Copies pulled from another node carry no note for their topic's shard (as after a
    // restart): nothing to settle.
    let settle = |_: &[crate::engine::relay::Settled]| {};
    loop {
        let pulled = (remote.pull(from, to, applied, CARRIED_AT_ONCE).await).and_then(|bytes| {
            decode_parcels(to, &bytes).map_err(|error| BackendError::Unavailable(error.to_string()))
        });
        let carried = match pulled {
            Ok(parcels) if parcels.is_empty() => Ok(()),
            Ok(parcels) => (destination.take_parcels(from, &parcels, &settle).await)
                .map(|through| applied = through),
            Err(error) => Err(error),
        };
        match carried {
            Ok(()) => backoff.succeeded(),
            Err(error) => {
                // A shard between leaders fails each pull for a few seconds: said once a while.
                let cause = error.to_string();
                if let Some(held_back) = WARNINGS.admit(&cause, std::time::Instant::now()) {
                    tracing::warn!(%cause, held_back, from, to, "parcels from another node not carried; trying again");
                }
                tokio::time::sleep(backoff.failed()).await;
            }
        }
        rounds.notify_waiters();
    }
}

impl Sharded {
    /// Starts a carrier into each shard led here from each shard another node leads.
    pub(super) fn carry_from_other_nodes(&self) {
        let Some(elsewhere) = &self.elsewhere else {
            return;
        };
        for destination in &self.here {
            for from in (0..self.count()).filter(|&n| self.slots[n as usize].is_none()) {
                let carrying = carry_from_node(
                    elsewhere.clone(),
                    from,
                    destination.clone(),
                    self.rounds.clone(),
                );
                self.carriers.start("carrier", carrying);
            }
        }
    }

    /// What `Work::parcels_for_node` answers: shard `from` must be led here, and `to` not.
    pub(super) fn parcels_for(
        &self,
        from: u32,
        to: u32,
        (after, max): (u64, usize),
        wait: Duration,
    ) -> Answer<'_, Vec<u8>> {
        Box::pin(async move {
            let (Some(Some(source)), Some(None)) =
                (self.slots.get(from as usize), self.slots.get(to as usize))
            else {
                return Err(BackendError::Across(from));
            };
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                let signal = self.parcels_waiting[to as usize].notified();
                tokio::pin!(signal);
                signal.as_mut().enable();
                let parcels = source.parcels_for(to, after, max).await?;
                if !parcels.is_empty() || tokio::time::Instant::now() >= deadline {
                    return encode_parcels(to, &parcels).map_err(|error| {
                        BackendError::Unavailable(format!("parcels not encoded: {error}"))
                    });
                }
                let _ = tokio::time::timeout_at(deadline, signal).await;
            }
        })
    }
}
