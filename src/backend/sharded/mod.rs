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

mod across_nodes;
mod deliveries;
mod inspection;
mod messages;
mod move_tasks;
mod notes;
mod pulling;
mod push_and_sms;
mod queues;
mod topics;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::embedded::{relay, Embedded};
use super::{led_elsewhere, Answer, BackendResult, OtherNodes, Work};
use crate::clock::Clock;
use crate::engine::namespace::Namespaces;
use crate::engine::shard::Shard;
use crate::worker::{Backoff, Workers};

/// Parcels carried from one shard to another in one pull.
const CARRIED_AT_ONCE: usize = 256;

/// How long a reset waits for what crosses shards to land before it resets each shard.
const RESET_WAITS_FOR_CARRYING: Duration = Duration::from_secs(2);

pub struct Sharded {
    /// Shard n of `slots.len()` at index n: its backend when this node leads it, `None` when
    /// another node does (`led_elsewhere`).
    slots: Vec<Option<Arc<Embedded>>>,
    /// The shards this node leads, in order.
    here: Vec<Arc<Embedded>>,
    namespaces: Namespaces,
    clock: Arc<dyn Clock>,
    /// Shard n's signal that parcels for it wait somewhere (`Embedded::among_shards`).
    parcels_waiting: Arc<[Notify]>,
    carriers: Workers,
    /// Given after each round of a carrier (`carried` waits on it).
    rounds: Arc<Notify>,
    /// Where the next take of webhook deliveries starts, so no shard's wait behind another's.
    next_taken: std::sync::atomic::AtomicUsize,
    /// Where the parcels of shards led by other nodes come from.
    elsewhere: Option<Arc<dyn OtherNodes>>,
    /// What became of copies taken from other nodes' shards, until told (`pulling`).
    fates_untold: Arc<pulling::Fates>,
}

impl Sharded {
    /// Over `count` shards of which this node leads `here`, each made `among_shards` with
    /// `parcels_waiting`; another node leads the rest.
    pub fn new(
        count: u32,
        here: Vec<Arc<Embedded>>,
        namespaces: Namespaces,
        clock: Arc<dyn Clock>,
        parcels_waiting: Arc<[Notify]>,
    ) -> Sharded {
        let mut slots = vec![None; count as usize];
        for shard in &here {
            slots[shard.shard() as usize] = Some(shard.clone());
        }
        debug_assert!(here.windows(2).all(|w| w[0].shard() < w[1].shard()));
        Sharded {
            slots,
            here,
            namespaces,
            clock,
            parcels_waiting,
            carriers: Workers::default(),
            rounds: Arc::new(Notify::new()),
            next_taken: Default::default(),
            elsewhere: None,
            fates_untold: Default::default(),
        }
    }

    /// Pulls the parcels of shards led by other nodes from `elsewhere`.
    pub fn with_other_nodes(mut self, elsewhere: Arc<dyn OtherNodes>) -> Sharded {
        self.elsewhere = Some(elsewhere);
        self
    }

    /// Each pair of shards' logs agrees on what crossed between them (`relay::agree`): to be
    /// run before anything else does (a request, the webhook worker, an `--init` file) on logs
    /// that may each lose a different tail to a power cut, those of a data directory synced
    /// less often than each change. Logs in a database acknowledge only what is committed in
    /// order, so theirs always agree.
    pub fn agree(&self) {
        for source in &self.here {
            for destination in self.here.iter().filter(|d| d.shard() != source.shard()) {
                relay::agree(source, destination);
            }
        }
    }

    fn count(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Where the carriers note what became of relayed copies.
    fn fates(&self) -> notes::Notes {
        notes::Notes {
            shards: self.slots.clone(),
            namespaces: self.namespaces.clone(),
            elsewhere: self.elsewhere.clone(),
        }
    }

    /// Shard `n`'s backend, or the refusal that sends the request to the node leading it.
    fn shard(&self, n: u32) -> BackendResult<&Arc<Embedded>> {
        match &self.slots[n as usize] {
            Some(shard) => {
                led_elsewhere::touched_here();
                Ok(shard)
            }
            None => Err(led_elsewhere::refuse(n)),
        }
    }

    /// The shard holding the queue or topic `key`.
    fn of_key(&self, key: &str) -> BackendResult<&Arc<Embedded>> {
        self.shard(Shard::of(self.count(), key))
    }

    /// The shard of the queue an ARN names; shard 0 for what names none (its engine answers
    /// with AWS's error).
    fn of_queue_arn(&self, arn: &str) -> BackendResult<&Arc<Embedded>> {
        match self.namespaces.key_in_arn("sqs", arn) {
            Some(key) => self.of_key(key),
            None => self.shard(0),
        }
    }

    /// The shard of the topic an ARN names (a subscription's ARN names its topic's).
    fn of_topic_arn(&self, arn: &str) -> BackendResult<&Arc<Embedded>> {
        match self.namespaces.key_in_arn("sns", arn) {
            Some(key) => self.of_key(key),
            None => self.shard(0),
        }
    }

    /// Shard `n`'s backend for a read made on another shard's behalf (a listing, a dead-letter
    /// queue's configuration): one led by another node is not read across nodes yet, so the
    /// request is refused as storage unavailable, never answered from part of the shards.
    fn read_across(&self, n: u32) -> BackendResult<&Arc<Embedded>> {
        self.slots[n as usize]
            .as_ref()
            .ok_or_else(|| led_elsewhere::across(n))
    }

    /// The key an SNS ARN names, for sorting topics as one engine lists them.
    fn topic_key<'a>(&self, arn: &'a str) -> &'a str {
        self.namespaces.key_in_arn("sns", arn).unwrap_or(arn)
    }

    /// Every shard's answer to `ask`, in shard order, joined; refused while another node
    /// leads one of them (`read_across`).
    async fn gather<'a, T>(
        &'a self,
        ask: impl Fn(&'a Embedded) -> Answer<'a, Vec<T>>,
    ) -> BackendResult<Vec<T>> {
        let mut all = Vec::new();
        for n in 0..self.count() {
            all.extend(ask(self.read_across(n)?).await?);
        }
        Ok(all)
    }

    /// The answers to `ask` of the shards this node leads, in shard order, joined: for what a
    /// node says of itself (its webhook figures, what it has yet to carry).
    async fn gather_here<'a, T>(
        &'a self,
        ask: impl Fn(&'a Embedded) -> Answer<'a, Vec<T>>,
    ) -> BackendResult<Vec<T>> {
        let mut all = Vec::new();
        for shard in &self.here {
            all.extend(ask(shard).await?);
        }
        Ok(all)
    }

    /// The queues of every shard but `of`'s whose redrive policy names `dlq_arn`, here or
    /// asked of the nodes leading them.
    async fn naming_elsewhere(&self, of: u32, dlq_arn: &str) -> BackendResult<Vec<Arc<str>>> {
        let read = super::ShardRead::NamingAsDeadLetterQueue(dlq_arn.to_string());
        let mut named = Vec::new();
        for n in (0..self.count()).filter(|&n| n != of) {
            named.extend(self.read(n, &read).await?);
        }
        Ok(named)
    }
}

/// `ask` of `shard`, or the refusal `shard` is when another node leads it.
fn on<'a, T: Send + 'a>(
    shard: BackendResult<&'a Arc<Embedded>>,
    ask: impl FnOnce(&'a Arc<Embedded>) -> Answer<'a, T>,
) -> Answer<'a, T> {
    match shard {
        Ok(shard) => ask(shard),
        Err(refused) => Box::pin(std::future::ready(Err(refused))),
    }
}

/// Carries parcels into shard `to` from every other this node leads, whenever one of them has
/// some (another node's shards are pulled from: `pulling`).
async fn carry_into(
    notes: notes::Notes,
    (to, parcels_waiting): (usize, Arc<[Notify]>),
    rounds: Arc<Notify>,
) {
    let shards = notes.shards.clone();
    let Some(destination) = &shards[to] else {
        return;
    };
    let settled = std::sync::Mutex::new(Vec::new());
    let settle = |fates: &[crate::engine::relay::Settled]| {
        (settled.lock().unwrap_or_else(|p| p.into_inner())).extend_from_slice(fates)
    };
    let mut backoff = Backoff::new("carrier", Duration::from_millis(50), Duration::from_secs(2));
    let mut applied = vec![0u64; shards.len()];
    for (from, applied) in applied.iter_mut().enumerate() {
        if from != to && shards[from].is_some() {
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
            let Some(source) = source.as_ref().filter(|_| from != to) else {
                continue;
            };
            let pair = (&**source, &**destination);
            let carried = relay::carry(pair, &mut applied[from], CARRIED_AT_ONCE, &settle).await;
            notes.settle(&settled).await;
            match carried {
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
        for shard in &self.here {
            shard.start_work();
        }
        for to in self.here.iter().map(|shard| shard.shard() as usize) {
            let waiting = (to, self.parcels_waiting.clone());
            let carrying = carry_into(self.fates(), waiting, self.rounds.clone());
            self.carriers.start("carrier", carrying);
        }
        self.carry_from_other_nodes();
    }

    fn parcels_for_node(
        &self,
        from: u32,
        to: u32,
        limits: (u64, usize),
        wait: Duration,
    ) -> Answer<'_, Vec<u8>> {
        self.parcels_for(from, to, limits, wait)
    }

    fn parcels_for_pairs(
        &self,
        pairs: Vec<crate::persist::format::between_nodes::PairPull>,
        max: usize,
        wait: Duration,
    ) -> Answer<'_, Vec<u8>> {
        self.parcels_for_pairs(pairs, max, wait)
    }

    fn read_for_node(&self, shard: u32, read: super::ShardRead) -> Answer<'_, Vec<Arc<str>>> {
        self.read_for(shard, read)
    }

    fn queue_target_for_node<'a>(
        &'a self,
        shard: u32,
        key: &'a str,
    ) -> Answer<'a, Option<super::QueueTarget>> {
        self.target_for(shard, key)
    }

    fn reset_for_node(&self, shard: u32, scope: super::ResetScope) -> Answer<'_, ()> {
        Box::pin(async move {
            let Some(Some(here)) = self.slots.get(shard as usize) else {
                return Err(super::BackendError::Across(shard));
            };
            super::Inspection::reset(&**here, scope).await
        })
    }

    fn settled_for_node(&self, shard: u32, notes: &[u8]) -> Answer<'_, ()> {
        let settled = self.settle_for(shard, notes);
        Box::pin(std::future::ready(settled))
    }

    fn carried(&self) -> Answer<'_, ()> {
        Box::pin(async move {
            loop {
                let round = self.rounds.notified();
                tokio::pin!(round);
                round.as_mut().enable();
                if self.here.iter().all(|shard| shard.nothing_to_carry()) {
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
            for shard in &self.here {
                if let Err(error) = shard.stop_work().await {
                    result = Err(error);
                }
            }
            result
        })
    }
}
