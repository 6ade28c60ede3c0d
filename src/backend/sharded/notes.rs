//! Where what became of a relayed copy is noted: in the shard of the topic that made it, here
//! or at the node leading that shard. The carriers gather the fates of the copies they place
//! and hand them here after each round.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::backend::embedded::Embedded;
use crate::backend::{BackendError, OtherNodes};
use crate::engine::namespace::Namespaces;
use crate::engine::relay::Settled;
use crate::engine::shard::Shard;
use crate::persist::format::between_nodes::encode_settled;

/// Longest a carrier waits to tell another node what became of its copies.
const TELL_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Failures to tell another node are said once per cause per interval.
static WARNINGS: std::sync::LazyLock<crate::quiet_log::QuietLog> =
    std::sync::LazyLock::new(Default::default);

/// Where the fates are noted: each topic's shard (a copy may cross from a shard other than
/// its topic's: one a queue's shard dead-letters on).
#[derive(Clone)]
pub(super) struct Notes {
    /// Each shard's backend while this node leads it (`Sharded::slots`).
    pub(super) slots: Arc<super::slots::Slots>,
    pub(super) namespaces: Namespaces,
    pub(super) elsewhere: Option<Arc<dyn OtherNodes>>,
}

impl Notes {
    /// Each shard's backend while this node leads it, as it stands now (shard n's at index n).
    pub(super) fn led(&self) -> Vec<Option<Arc<Embedded>>> {
        (0..self.slots.count()).map(|n| self.slots.get(n)).collect()
    }

    /// Notes in each topic's shard the fates `settled` gathered, and empties it. A fate that
    /// cannot be told is lost, as the notes are after a restart (they are kept in memory).
    pub(super) async fn settle(&self, settled: &Mutex<Vec<Settled>>) {
        let fates = std::mem::take(&mut *settled.lock().unwrap_or_else(|p| p.into_inner()));
        if fates.is_empty() {
            return;
        }
        let count = self.slots.count();
        let led = self.led();
        let mut elsewhere: BTreeMap<u32, Vec<Settled>> = BTreeMap::new();
        for fate in fates {
            let key = self.namespaces.key_in_arn("sns", &fate.topic_arn);
            let shard = key.map_or(0, |key| Shard::of(count, key));
            match &led[shard as usize] {
                Some(topic_shard) => topic_shard.settle(&fate),
                None => elsewhere.entry(shard).or_default().push(fate),
            }
        }
        let Some(remote) = &self.elsewhere else {
            return;
        };
        for (shard, fates) in elsewhere {
            // Bounded: the carrier waits on it, and places copies meanwhile for no one.
            let told = match encode_settled(&fates) {
                Ok(bytes) => tokio::time::timeout(TELL_WAIT, remote.settled(shard, bytes))
                    .await
                    .unwrap_or_else(|_| {
                        Err(BackendError::Unavailable(format!(
                            "shard {shard}'s leader did not take the notes within 1 s"
                        )))
                    }),
                Err(error) => Err(BackendError::Unavailable(format!("not encoded: {error}"))),
            };
            if let Err(error) = told {
                let cause = error.to_string();
                if let Some(held_back) = WARNINGS.admit(&cause, std::time::Instant::now()) {
                    tracing::warn!(%cause, held_back, shard, "what became of copies was not told to their topic's node");
                }
            }
        }
    }
}
