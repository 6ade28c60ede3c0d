//! What crosses between shards led by different nodes: parcels, and reads made on another
//! shard's behalf (a listing gathered over every shard, the queues naming a dead-letter
//! queue), asked of the node leading the shard read.
//!
//! Parcels between shards led by different nodes. The destination's leader pulls them from the
//! source's leader (`OtherNodes`, over the network), each pull naming the last parcel the
//! destination's log holds as applied, so the source forgets up to it; the source answers a
//! pull from what its log holds, waiting a while for a parcel when it has none. Each pair of
//! shards keeps its order and applies each parcel once, as between shards of one node.

use std::sync::Arc;
use std::time::Duration;

use super::{Sharded, CARRIED_AT_ONCE};
use crate::backend::embedded::Embedded;
use crate::backend::{
    led_elsewhere, Answer, BackendError, BackendResult, OtherNodes, QueueAdmin, QueueTarget,
    ShardRead, Topics,
};
use crate::backend::{Inspection, SubscriptionActivity};
use crate::engine::queue::inspect::QueueOverview;
use crate::engine::relay::Settled;
use crate::engine::shard::Shard;
use crate::engine::topic::Subscription;
use crate::engine::Timestamp;
use crate::persist::format::between_nodes::{
    decode_listed_activity, decode_listed_queue, decode_listed_subscription, decode_parcels,
    decode_settled, encode_listed_activity, encode_listed_queue, encode_listed_subscription,
    encode_parcels,
};
use crate::worker::Backoff;

/// Failures to pull are said once per cause per interval, not once a pull.
static WARNINGS: std::sync::LazyLock<crate::quiet_log::QuietLog> =
    std::sync::LazyLock::new(Default::default);

/// Carries into shard `destination` (led here) the parcels shard `from` (led by another node)
/// holds for it, pull after pull.
async fn carry_from_node(
    (remote, notes): (Arc<dyn OtherNodes>, super::notes::Notes),
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
    let settled = std::sync::Mutex::new(Vec::new());
    let settle = |fates: &[Settled]| {
        (settled.lock().unwrap_or_else(|p| p.into_inner())).extend_from_slice(fates)
    };
    loop {
        notes.settle(&settled).await;
        let pulled = (remote.pull(from, to, applied, CARRIED_AT_ONCE).await).and_then(|bytes| {
            decode_parcels(to, &bytes).map_err(|error| BackendError::Unavailable(error.to_string()))
        });
        let carried = match pulled {
            Ok(parcels) if parcels.is_empty() => Ok(()),
            Ok(parcels) => match destination.take_parcels(from, &parcels, &settle).await {
                // None of them next in line (one missing before them): said, and pulled again
                // after a pause rather than at once.
                Ok(through) if through == applied => Err(BackendError::Unavailable(format!(
                    "parcel {} from shard {from} is missing",
                    applied + 1
                ))),
                Ok(through) => {
                    applied = through;
                    Ok(())
                }
                Err(error) => Err(error),
            },
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

/// The queue `key` of `shard` (led here) as a dead-letter target.
async fn target_here(
    shard: &Embedded,
    key: &str,
    now: Timestamp,
) -> BackendResult<Option<QueueTarget>> {
    match shard.describe_queue(key, now).await {
        Ok(view) => Ok(Some(QueueTarget::of(&view.config))),
        Err(BackendError::Rejected(_)) => Ok(None),
        Err(error) => Err(error),
    }
}

/// `read` of `shard`, led here.
async fn read_here(shard: &Embedded, read: &ShardRead) -> BackendResult<Vec<Arc<str>>> {
    match read {
        ShardRead::Queues(prefix) => shard.list_queues(prefix).await,
        ShardRead::Topics => shard.list_topics().await,
        ShardRead::NamingAsDeadLetterQueue(arn) => Ok(shard.naming_as_dead_letter_queue(arn)),
        ShardRead::Subscriptions => (shard.list_subscriptions(None).await?.iter())
            .map(|(topic, subscription)| encoded(encode_listed_subscription(topic, subscription)))
            .collect(),
        ShardRead::SigningCertificate(file) => Ok(shard
            .signing_certificate_made(file)
            .map(Arc::from)
            .into_iter()
            .collect()),
        ShardRead::QueueOverviews => (shard.queue_overviews().await?.iter())
            .map(|queue| encoded(encode_listed_queue(queue)))
            .collect(),
        ShardRead::SubscriptionActivity => (shard.subscription_activity().await?.iter())
            .map(|a| {
                let (topic, recent, counts) = (&a.topic_arn, &a.recent, &a.counts);
                let last_error = a.last_error.as_ref();
                encoded(encode_listed_activity(
                    topic,
                    &a.subscription,
                    recent,
                    counts,
                    last_error,
                ))
            })
            .collect(),
    }
}

fn encoded(text: postcard::Result<String>) -> BackendResult<Arc<str>> {
    text.map(Arc::from)
        .map_err(|e| BackendError::Unavailable(format!("not encoded: {e}")))
}

/// Each text of a listing read across nodes, decoded.
fn decoded<T>(
    listed: &[Arc<str>],
    decode: impl Fn(&str) -> Result<T, crate::persist::format::FormatError>,
) -> BackendResult<Vec<T>> {
    (listed.iter())
        .map(|text| decode(text).map_err(|e| BackendError::Unavailable(e.to_string())))
        .collect()
}

impl Sharded {
    /// `read` of shard `n`: here, or asked of the node that leads it.
    pub(super) async fn read(&self, n: u32, read: &ShardRead) -> BackendResult<Vec<Arc<str>>> {
        match (&self.slots[n as usize], &self.elsewhere) {
            (Some(shard), _) => read_here(shard, read).await,
            (None, Some(nodes)) => {
                let names = nodes.read(n, read).await?;
                Ok(names.into_iter().map(Arc::from).collect())
            }
            (None, None) => Err(led_elsewhere::across(n)),
        }
    }

    /// The queue `key` as another shard's rules read it, from its shard here or the node
    /// leading it; `None` when it does not exist.
    pub(super) async fn target_of(
        &self,
        key: &str,
        now: Timestamp,
    ) -> BackendResult<Option<QueueTarget>> {
        let n = Shard::of(self.count(), key);
        match (&self.slots[n as usize], &self.elsewhere) {
            (Some(shard), _) => target_here(shard, key, now).await,
            (None, Some(nodes)) => nodes.queue_target(n, key).await,
            (None, None) => Err(led_elsewhere::across(n)),
        }
    }

    /// What `Work::queue_target_for_node` answers: shard `n` must be led here.
    pub(super) fn target_for<'a>(
        &'a self,
        n: u32,
        key: &'a str,
    ) -> Answer<'a, Option<QueueTarget>> {
        Box::pin(async move {
            match self.slots.get(n as usize) {
                Some(Some(shard)) => target_here(shard, key, self.clock.now()).await,
                _ => Err(BackendError::Across(n)),
            }
        })
    }

    /// Shard `n`'s subscriptions, each with its topic's ARN: here, or asked of the node that
    /// leads it.
    pub(super) async fn subscriptions_of(
        &self,
        n: u32,
    ) -> BackendResult<Vec<(Arc<str>, Arc<Subscription>)>> {
        if let Some(shard) = &self.slots[n as usize] {
            return shard.list_subscriptions(None).await;
        }
        let listed = self.read(n, &ShardRead::Subscriptions).await?;
        let listed = decoded(&listed, decode_listed_subscription)?;
        Ok((listed.into_iter())
            .map(|(topic, subscription)| (topic, Arc::new(subscription)))
            .collect())
    }

    /// Shard `n`'s queues at a glance: here, or asked of the node that leads it.
    pub(super) async fn queue_overviews_of(&self, n: u32) -> BackendResult<Vec<QueueOverview>> {
        if let Some(shard) = &self.slots[n as usize] {
            return shard.queue_overviews().await;
        }
        let listed = self.read(n, &ShardRead::QueueOverviews).await?;
        decoded(&listed, decode_listed_queue)
    }

    /// Shard `n`'s subscriptions with their last deliveries: here, or asked of the node that
    /// leads it.
    pub(super) async fn subscription_activity_of(
        &self,
        n: u32,
    ) -> BackendResult<Vec<SubscriptionActivity>> {
        if let Some(shard) = &self.slots[n as usize] {
            return shard.subscription_activity().await;
        }
        let listed = self.read(n, &ShardRead::SubscriptionActivity).await?;
        let listed = decoded(&listed, decode_listed_activity)?;
        Ok((listed.into_iter())
            .map(|a| SubscriptionActivity {
                topic_arn: a.topic_arn,
                subscription: Arc::new(a.subscription),
                recent: a.recent,
                counts: a.counts,
                last_error: a.last_error,
            })
            .collect())
    }

    /// `read` of every shard, in shard order, joined. A listing answered here, whatever it
    /// reads of other nodes' shards: what it meets after is never passed on whole
    /// (`led_elsewhere::touched_here`).
    pub(super) async fn read_all(&self, read: &ShardRead) -> BackendResult<Vec<Arc<str>>> {
        led_elsewhere::touched_here();
        let mut all = Vec::new();
        for n in 0..self.count() {
            all.extend(self.read(n, read).await?);
        }
        Ok(all)
    }

    /// What `Work::read_for_node` answers: shard `n` must be led here.
    pub(super) fn read_for(&self, n: u32, read: ShardRead) -> Answer<'_, Vec<Arc<str>>> {
        Box::pin(async move {
            match self.slots.get(n as usize) {
                Some(Some(shard)) => read_here(shard, &read).await,
                _ => Err(BackendError::Across(n)),
            }
        })
    }

    /// Starts a carrier into each shard led here from each shard another node leads.
    pub(super) fn carry_from_other_nodes(&self) {
        let Some(elsewhere) = &self.elsewhere else {
            return;
        };
        for destination in &self.here {
            for from in (0..self.count()).filter(|&n| self.slots[n as usize].is_none()) {
                let carrying = carry_from_node(
                    (elsewhere.clone(), self.fates()),
                    from,
                    destination.clone(),
                    self.rounds.clone(),
                );
                self.carriers.start("carrier", carrying);
            }
        }
    }

    /// What `Work::settled_for_node` does: notes, in the topics of shard `n` (led here), what
    /// became of copies another node took.
    pub(super) fn settle_for(&self, n: u32, notes: &[u8]) -> BackendResult<()> {
        let Some(Some(shard)) = self.slots.get(n as usize) else {
            return Err(BackendError::Across(n));
        };
        let settled =
            decode_settled(notes).map_err(|e| BackendError::Unavailable(e.to_string()))?;
        for note in &settled {
            shard.settle(note);
        }
        Ok(())
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
            // A destination's log never holds as applied a parcel that was not made: one that
            // says so is refused rather than let it forget parcels not yet sent.
            let sent = source.last_sent(to);
            if after > sent {
                return Err(BackendError::Unavailable(format!(
                    "shard {to} says it applied parcel {after} from shard {from}, which made {sent}"
                )));
            }
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
