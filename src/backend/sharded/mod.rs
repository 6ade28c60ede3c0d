//! The backend over several shards of one key space (`engine::shard`), each an embedded
//! backend with an engine of its own: every request goes to the shard of its queue or topic,
//! listings gather every shard's in the order one engine gives, and the reads a rule needs
//! from another shard (a dead-letter queue's configuration, whether a queue is some queue's
//! dead-letter queue) are made here before the rule runs. What crosses shards (a publish's
//! copies, dead letters, moved messages) is carried as parcels by a worker per shard that pulls
//! them from every other (`embedded::relay::carry`), woken whenever a change leaves parcels.
//!
//! Values a process keeps once (the captured protocols' messages) are shared by the shards;
//! mobile push and SMS state, kept per region and account rather than per queue or topic,
//! lives in shard 0. Each shard keeps its own receipt-handle key and SNS signing key.

mod deliveries;
mod inspection;
mod messages;
mod move_tasks;
mod push_and_sms;
mod queues;
mod topics;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::embedded::{relay, Embedded};
use super::{Answer, BackendResult, Work};
use crate::clock::Clock;
use crate::engine::namespace::Namespaces;
use crate::engine::shard::Shard;
use crate::worker::{Backoff, Workers};

/// Parcels carried from one shard to another in one pull.
const CARRIED_AT_ONCE: usize = 256;

/// How long a reset waits for what crosses shards to land before it resets each shard.
const RESET_WAITS_FOR_CARRYING: Duration = Duration::from_secs(2);

pub struct Sharded {
    /// Shard n of `shards.len()` at index n.
    shards: Vec<Arc<Embedded>>,
    namespaces: Namespaces,
    clock: Arc<dyn Clock>,
    /// Shard n's signal that parcels for it wait somewhere (`Embedded::among_shards`).
    parcels_waiting: Arc<[Notify]>,
    carriers: Workers,
    /// Given after each round of a carrier (`carried` waits on it).
    rounds: Arc<Notify>,
    /// Where the next take of webhook deliveries starts, so no shard's wait behind another's.
    next_taken: std::sync::atomic::AtomicUsize,
}

impl Sharded {
    /// Over `shards`, shard n at index n, each made `among_shards` with `parcels_waiting`.
    pub fn new(
        shards: Vec<Arc<Embedded>>,
        namespaces: Namespaces,
        clock: Arc<dyn Clock>,
        parcels_waiting: Arc<[Notify]>,
    ) -> Sharded {
        debug_assert!(shards
            .iter()
            .enumerate()
            .all(|(n, s)| s.shard() == n as u32));
        Sharded {
            shards,
            namespaces,
            clock,
            parcels_waiting,
            carriers: Workers::default(),
            rounds: Arc::new(Notify::new()),
            next_taken: Default::default(),
        }
    }

    /// Each pair of shards' logs agrees on what crossed between them (`relay::agree`): to be
    /// run before anything else does (a request, the webhook worker, an `--init` file) on logs
    /// that may each lose a different tail to a power cut, those of a data directory synced
    /// less often than each change. Logs in a database acknowledge only what is committed in
    /// order, so theirs always agree.
    pub fn agree(&self) {
        for source in &self.shards {
            for destination in self.shards.iter().filter(|d| d.shard() != source.shard()) {
                relay::agree(source, destination);
            }
        }
    }

    fn count(&self) -> u32 {
        self.shards.len() as u32
    }

    /// The shard holding the queue or topic `key`.
    fn of_key(&self, key: &str) -> &Arc<Embedded> {
        &self.shards[Shard::of(self.count(), key) as usize]
    }

    /// The shard of the queue an ARN names; shard 0 for what names none (its engine answers
    /// with AWS's error).
    fn of_queue_arn(&self, arn: &str) -> &Arc<Embedded> {
        match self.namespaces.key_in_arn("sqs", arn) {
            Some(key) => self.of_key(key),
            None => &self.shards[0],
        }
    }

    /// The shard of the topic an ARN names (a subscription's ARN names its topic's).
    fn of_topic_arn(&self, arn: &str) -> &Arc<Embedded> {
        match self.namespaces.key_in_arn("sns", arn) {
            Some(key) => self.of_key(key),
            None => &self.shards[0],
        }
    }

    /// The key an SNS ARN names, for sorting topics as one engine lists them.
    fn topic_key<'a>(&self, arn: &'a str) -> &'a str {
        self.namespaces.key_in_arn("sns", arn).unwrap_or(arn)
    }

    /// Every shard's answer to `ask`, in shard order, joined.
    async fn gather<'a, T>(
        &'a self,
        ask: impl Fn(&'a Embedded) -> Answer<'a, Vec<T>>,
    ) -> BackendResult<Vec<T>> {
        let mut all = Vec::new();
        for shard in &self.shards {
            all.extend(ask(shard).await?);
        }
        Ok(all)
    }

    /// Every shard but `of`'s.
    fn others(&self, of: &Arc<Embedded>) -> impl Iterator<Item = &Arc<Embedded>> {
        let of = of.shard();
        self.shards.iter().filter(move |s| s.shard() != of)
    }
}

/// Carries parcels into shard `to` from every other, whenever one of them has some.
async fn carry_into(
    (shards, namespaces): (Vec<Arc<Embedded>>, Namespaces),
    (to, parcels_waiting): (usize, Arc<[Notify]>),
    rounds: Arc<Notify>,
) {
    let destination = &shards[to];
    let count = shards.len() as u32;
    let settle = |settled: &[crate::engine::relay::Settled]| {
        for settled in settled {
            let key = namespaces.key_in_arn("sns", &settled.topic_arn);
            let shard = key.map_or(0, |key| Shard::of(count, key));
            shards[shard as usize].settle(settled);
        }
    };
    let mut backoff = Backoff::new("carrier", Duration::from_millis(50), Duration::from_secs(2));
    let mut applied = vec![0u64; shards.len()];
    for (from, applied) in applied.iter_mut().enumerate() {
        if from != to {
            *applied = loop {
                match destination.applied_from(from as u32).await {
                    Ok(applied) => break applied,
                    Err(error) => {
                        tracing::warn!(%error, from, to, "cannot read what was applied");
                        tokio::time::sleep(backoff.failed()).await;
                    }
                }
            };
        }
    }
    loop {
        let mut moved = 0;
        for (from, source) in shards.iter().enumerate() {
            if from == to {
                continue;
            }
            let pair = (&**source, &**destination);
            match relay::carry(pair, &mut applied[from], CARRIED_AT_ONCE, &settle).await {
                Ok(carried) => {
                    moved += carried;
                    backoff.succeeded();
                }
                Err(error) => {
                    tracing::warn!(%error, from, to, "parcels not carried; trying again");
                    tokio::time::sleep(backoff.failed()).await;
                    moved += 1;
                }
            }
        }
        rounds.notify_waiters();
        if moved == 0 {
            parcels_waiting[to].notified().await;
        }
    }
}

impl Work for Sharded {
    fn start_work(&self) {
        for shard in &self.shards {
            shard.start_work();
        }
        for to in 0..self.shards.len() {
            let shards = (self.shards.clone(), self.namespaces.clone());
            let waiting = (to, self.parcels_waiting.clone());
            let carrying = carry_into(shards, waiting, self.rounds.clone());
            self.carriers.start("carrier", carrying);
        }
    }

    fn carried(&self) -> Answer<'_, ()> {
        Box::pin(async move {
            loop {
                let round = self.rounds.notified();
                tokio::pin!(round);
                round.as_mut().enable();
                if self.shards.iter().all(|shard| shard.nothing_to_carry()) {
                    return Ok(());
                }
                round.await;
            }
        })
    }

    fn stop_work(&self) -> Answer<'_, ()> {
        Box::pin(async move {
            self.carriers.stop().await;
            let mut result: BackendResult<()> = Ok(());
            for shard in &self.shards {
                if let Err(error) = shard.stop_work().await {
                    result = Err(error);
                }
            }
            result
        })
    }
}
