//! Parcels between the engines of different shards (`engine::relay`), carried by pull: a
//! shard's engine asks each other shard's for the parcels after the last one it applied,
//! which also tells that shard it may forget those. A source hands out only parcels its log
//! holds; a destination names as applied only what its log holds. So a parcel lost with a log's
//! tail is never applied nor forgotten, and one applied is never applied again.

use crate::backend::BackendResult;
use crate::engine::parcel::{Parcel, Room};
use crate::engine::relay::Settled;

/// Takes what became of relayed copies to the shards of their topics.
pub type Settle<'a> = dyn Fn(&[Settled]) + Send + Sync + 'a;

use super::Embedded;

impl Embedded {
    /// The shard this backend's engine holds.
    pub fn shard(&self) -> u32 {
        self.engine.relay.shard().number
    }

    /// The parcels for shard `to` after number `after` that `room` holds, once this log holds
    /// them. `after` is what `to`'s log holds as applied: parcels up to it are forgotten here.
    pub async fn parcels_for(&self, to: u32, after: u64, room: Room) -> BackendResult<Vec<Parcel>> {
        let admitted = self.admit()?;
        self.engine.relay.forget(to, after);
        let parcels = self.engine.relay.waiting_for(to, room);
        drop(admitted);
        if !parcels.is_empty() {
            // Each was handed to the log under the lock `waiting_for` took: this covers it.
            self.durable().await?;
        }
        Ok(parcels)
    }

    /// Applies parcels from shard `from` (in order, each once); answers the last number
    /// applied once this log holds it, and wakes the queues that took a copy after handing
    /// `settle` what became of the copies whose topics keep a note of them.
    pub async fn take_parcels(
        &self,
        from: u32,
        parcels: &[Parcel],
        settle: &Settle<'_>,
    ) -> BackendResult<u64> {
        let admitted = self.admit()?;
        let received = self.engine.receive_parcels(from, parcels, self.clock.now());
        drop(admitted);
        self.durable().await?;
        if !received.settled.is_empty() {
            settle(&received.settled);
        }
        for queue in &received.delivered_to {
            queue.waiters.notify_one();
        }
        Ok(received.through)
    }

    /// Queues here whose redrive policy names `dlq_arn`, a queue of any shard, sorted by key.
    pub fn naming_as_dead_letter_queue(&self, dlq_arn: &str) -> Vec<std::sync::Arc<str>> {
        self.engine.queues.naming_as_dead_letter_queue(dlq_arn)
    }

    /// The PEM certificate of this shard's SNS signer if it has one and `file` is its name
    /// (a shard that has signed nothing makes no key for the asking).
    pub fn signing_certificate_made(&self, file: &str) -> Option<String> {
        let signer = self.engine.topics.made_signer()?;
        (file == signer.certificate_file).then(|| signer.certificate_pem.clone())
    }

    /// Whether no parcel made here waits for another shard (or to be forgotten there).
    pub fn nothing_to_carry(&self) -> bool {
        self.engine.relay.depths().is_empty()
    }

    /// Notes in this shard's topics, and their webhooks' figures, what became of copies
    /// relayed from them.
    pub fn settle(&self, settled: &Settled) {
        let subscribed = self.engine.topics.settle(settled);
        self.engine.webhooks.settle(settled, subscribed);
    }

    /// The number of the last parcel made here for shard `to` (0: none).
    pub fn last_sent(&self, to: u32) -> u64 {
        self.engine.relay.last_sent(to)
    }

    /// The last parcel from shard `from` this log holds as applied.
    pub async fn applied_from(&self, from: u32) -> BackendResult<u64> {
        self.refuse_if_failed()?;
        let applied = self.engine.relay.applied(from);
        self.durable().await?;
        Ok(applied)
    }
}

/// Makes the logs of `source` and `destination` agree on what crossed between them, before
/// either makes a parcel or carries one: logs synced less often than each change (`--fsync
/// interval` or `never`) may each lose a different tail to a power cut. Parcels the
/// destination applied past what the source kept are forgotten there, so the source numbers
/// its next one past them (else a new parcel would pass for one applied). Parcels the source
/// forgot past what the destination kept applied are gone: the destination passes over them,
/// said at error level, rather than wait for them forever. Answers how many were so lost.
pub fn agree(source: &Embedded, destination: &Embedded) -> u64 {
    let (from, to) = (source.shard(), destination.shard());
    let applied = destination.engine.relay.applied(from);
    source.engine.relay.forget(to, applied);
    let forgotten = source.engine.relay.forgotten(to);
    if forgotten <= applied {
        return 0;
    }
    let lost = forgotten - applied;
    tracing::error!(
        from, to, lost,
        "parcels between shards lost with the tails of both logs (a power cut with --fsync interval or never): passed over"
    );
    destination.engine.relay.pass_over(from, forgotten);
    lost
}

/// Carries up to `max` parcels (within `parcel::MOST_BYTES_AT_ONCE`) from `source`'s engine
/// to `destination`'s. `applied` is the last parcel from `source` that `destination`'s log
/// holds as applied (start from `applied_from`); it moves on as parcels are applied.
/// `settle` gets what became of copies. Answers by how much it moved (0 when nothing waits,
/// or the next parcel is missing).
pub async fn carry(
    (source, destination): (&Embedded, &Embedded),
    applied: &mut u64,
    max: usize,
    settle: &Settle<'_>,
) -> BackendResult<usize> {
    let parcels = source
        .parcels_for(destination.shard(), *applied, Room::at_most(max))
        .await?;
    if parcels.is_empty() {
        return Ok(0);
    }
    let before = *applied;
    *applied = destination
        .take_parcels(source.shard(), &parcels, settle)
        .await?;
    Ok(applied.saturating_sub(before) as usize)
}
