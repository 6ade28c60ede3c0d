//! What crosses between shards led by different nodes: parcels, and reads made on another
//! shard's behalf (a listing gathered over every shard, the queues naming a dead-letter
//! queue), asked of the node leading the shard read.
//!
//! Parcels between shards led by different nodes: the destination's leader pulls them from the
//! source's leader (`pulling`, over the network), one pull for every pair of shards between
//! two nodes; the source answers a pull from what its log holds, waiting a while for a parcel
//! when it has none (`parcels_for_pairs`; `parcels_for` answers a node of an earlier build,
//! which pulls each pair on its own).

use std::sync::Arc;
use std::time::Duration;

use super::Sharded;
use crate::backend::embedded::Embedded;
use crate::backend::{
    led_elsewhere, Answer, BackendError, BackendResult, QueueAdmin, QueueTarget, ShardRead, Topics,
};
use crate::backend::{Inspection, SubscriptionActivity};
use crate::engine::parcel::{Parcel, Room};
use crate::engine::queue::inspect::QueueOverview;
use crate::engine::shard::Shard;
use crate::engine::topic::Subscription;
use crate::engine::Timestamp;
use crate::persist::format::between_nodes::{
    decode_listed_activity, decode_listed_queue, decode_listed_subscription, decode_settled,
    encode_listed_activity, encode_listed_queue, encode_listed_subscription, encode_parcels,
    encode_pulled, PairPull, Pulled,
};

/// The queue `key` of `shard` (led here) as another shard's rules read it.
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
        match (self.slot(n), &self.elsewhere) {
            (Some(shard), _) => read_here(&shard, read).await,
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
        match (self.slot(n), &self.elsewhere) {
            (Some(shard), _) => target_here(&shard, key, now).await,
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
            match self.slot(n) {
                Some(shard) => target_here(&shard, key, self.clock.now()).await,
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
        if let Some(shard) = self.slot(n) {
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
        if let Some(shard) = self.slot(n) {
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
        if let Some(shard) = self.slot(n) {
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
            match self.slot(n) {
                Some(shard) => read_here(&shard, &read).await,
                _ => Err(BackendError::Across(n)),
            }
        })
    }

    /// Starts the carrier of the parcels shards other nodes lead hold for shards led here
    /// (`pulling`).
    pub(super) fn carry_from_other_nodes(&self) {
        let Some(elsewhere) = &self.elsewhere else {
            return;
        };
        let from: Vec<u32> = (0..self.count())
            .filter(|&n| self.slot(n).is_none())
            .collect();
        let here: Vec<Arc<Embedded>> = self.here().collect();
        if from.is_empty() || here.is_empty() {
            return;
        }
        let fates = self.fates_untold.clone();
        let carrying = super::pulling::carry_from_nodes(
            (elsewhere.clone(), fates),
            here,
            from,
            self.rounds.clone(),
        );
        self.carriers.start("carrier", carrying);
    }

    /// What `Work::settled_for_node` does: notes, in the topics of shard `n` (led here), what
    /// became of copies another node took.
    pub(super) fn settle_for(&self, n: u32, notes: &[u8]) -> BackendResult<()> {
        let Some(shard) = self.slot(n) else {
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
            let (Some(source), true) = (self.slot(from), self.led_elsewhere(to)) else {
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
                let parcels = source.parcels_for(to, after, Room::at_most(max)).await?;
                if !parcels.is_empty() || tokio::time::Instant::now() >= deadline {
                    return encode_parcels(to, &parcels).map_err(|error| {
                        BackendError::Unavailable(format!("parcels not encoded: {error}"))
                    });
                }
                let _ = tokio::time::timeout_at(deadline, signal).await;
            }
        })
    }
    /// What `Work::parcels_for_pairs` answers: for each pair whose source shard is led here
    /// and destination is not, the parcels after the one the destination applied, up to
    /// `max` in all and `parcel::MOST_BYTES_AT_ONCE` of them (first an even share of each
    /// to every pair, then what is left in the pairs' order, which the asking node turns
    /// from pull to pull), at once when any pair has some or is refused, else once one
    /// is made or `wait` passes. Pairs with nothing to carry are left out of the answer.
    pub(super) fn parcels_for_pairs(
        &self,
        pairs: Vec<PairPull>,
        max: usize,
        wait: Duration,
    ) -> Answer<'_, Vec<u8>> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + wait;
            // Woken by a parcel made for a destination led elsewhere: one led here has a
            // carrier of its own, whose wake-up a pull's wait must not take.
            let mut tos: Vec<u32> = (pairs.iter())
                .map(|pair| pair.to)
                .filter(|&to| self.led_elsewhere(to))
                .collect();
            tos.sort_unstable();
            tos.dedup();
            let whole = Room::at_most(max);
            // An even share of the count and of the bytes each, so that no pair's large
            // copies take the whole answer while the others wait for the next pull.
            let share = whole.shared_by(pairs.len());
            loop {
                let mut signals: Vec<_> = (tos.iter())
                    .map(|&to| Box::pin(self.parcels_waiting[to as usize].notified()))
                    .collect();
                for signal in &mut signals {
                    signal.as_mut().enable();
                }
                let mut answers = Vec::with_capacity(pairs.len());
                let mut room = whole;
                for pair in &pairs {
                    let asked = share.within(room);
                    let parcels = self.parcels_of_pair(pair, asked).await;
                    if let Ok(parcels) = &parcels {
                        room = room.less(parcels);
                    }
                    answers.push(parcels);
                }
                // What is left, to the pairs that filled their share, in order (each asked
                // again for what it took and the rest of the room).
                for (pair, parcels) in pairs.iter().zip(&mut answers) {
                    let Ok(taken) = parcels else {
                        continue;
                    };
                    let taken_bytes = taken.iter().map(Parcel::size).sum::<usize>();
                    // Its share held no more: as many as it was given, or no room in its
                    // bytes for another as large as its last.
                    let filled = taken.len() >= share.parcels
                        || (taken.last())
                            .is_some_and(|last| taken_bytes + last.size() > share.bytes);
                    if room.is_empty() || !filled {
                        continue;
                    }
                    let asked = Room {
                        parcels: taken.len() + room.parcels,
                        bytes: room.bytes + taken_bytes,
                    };
                    let more = self.parcels_of_pair(pair, asked).await;
                    if let Ok(more) = more {
                        room = asked.less(&more);
                        *taken = more;
                    }
                }
                let refused = answers.iter().any(Result::is_err);
                if room != whole || refused || tokio::time::Instant::now() >= deadline {
                    let pulled: Vec<Pulled> = (pairs.iter().zip(answers))
                        .filter(|(_, parcels)| !matches!(parcels, Ok(p) if p.is_empty()))
                        .map(|(pair, parcels)| {
                            let parcels =
                                parcels
                                    .map_err(|error| error.to_string())
                                    .and_then(|parcels| {
                                        encode_parcels(pair.to, &parcels).map_err(|error| {
                                            format!("parcels not encoded: {error}")
                                        })
                                    });
                            pulled(pair, parcels)
                        })
                        .collect();
                    return encode_pulled(&pulled).map_err(|error| {
                        BackendError::Unavailable(format!("parcels not encoded: {error}"))
                    });
                }
                // Woken by a parcel made for any of the pairs' destinations.
                let any = std::future::poll_fn(|cx| {
                    for signal in &mut signals {
                        if std::future::Future::poll(signal.as_mut(), cx).is_ready() {
                            return std::task::Poll::Ready(());
                        }
                    }
                    std::task::Poll::Pending
                });
                let _ = tokio::time::timeout_at(deadline, any).await;
            }
        })
    }

    /// The parcels of one pair of a pull that `room` holds, if its source is led here and its
    /// destination is not.
    async fn parcels_of_pair(&self, pair: &PairPull, room: Room) -> BackendResult<Vec<Parcel>> {
        let (from, to) = (pair.from, pair.to);
        let (Some(source), true) = (self.slot(from), self.led_elsewhere(to)) else {
            return Err(BackendError::Across(from));
        };
        // A destination's log never holds as applied a parcel that was not made: one that
        // says so is refused rather than let it forget parcels not yet sent.
        let sent = source.last_sent(to);
        if pair.after > sent {
            return Err(BackendError::Unavailable(format!(
                "shard {to} says it applied parcel {} from shard {from}, which made {sent}",
                pair.after
            )));
        }
        if room.is_empty() {
            return Ok(Vec::new());
        }
        source.parcels_for(to, pair.after, room).await
    }
}

/// One pair's part of a pull's answer.
fn pulled(pair: &PairPull, parcels: Result<Vec<u8>, String>) -> Pulled {
    Pulled {
        from: pair.from,
        to: pair.to,
        parcels: parcels.map(bytes::Bytes::from),
    }
}
