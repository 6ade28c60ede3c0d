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
mod slots;
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

/// Longest a hand-off waits for the logs of the shards it hands off to make what they were
/// given durable.
const HAND_OFF_WAIT: Duration = Duration::from_secs(5);

/// How long a reset waits for what crosses shards to land before it resets each shard.
const RESET_WAITS_FOR_CARRYING: Duration = Duration::from_secs(2);

/// Makes the backend of a shard taken while the router serves: its engine (recovered from its
/// log), the log that keeps its changes, and the tenure its lease keeps.
pub type MakeShard = Arc<
    dyn Fn(
            Arc<crate::engine::Engine<Notify>>,
            Arc<crate::persist::writer::LogWriter>,
            Arc<crate::persist::tenure::Tenure>,
        ) -> Arc<Embedded>
        + Send
        + Sync,
>;

pub struct Sharded {
    /// Each shard's backend while this node leads it; another node leads the others
    /// (`led_elsewhere`).
    slots: Arc<slots::Slots>,
    /// Makes the backend of a shard taken while the router serves (`Work::take_shard`), as
    /// the router's first shards were made.
    make: Option<MakeShard>,
    /// Whether the carriers run (between `start_work` and `stop_work`), so a hand-off or a
    /// take starts them again only then.
    working: std::sync::Mutex<bool>,
    /// Held while shards are handed off or taken and the carriers stopped and started again,
    /// so one change is made at a time.
    restarting: tokio::sync::Mutex<()>,
    namespaces: Namespaces,
    clock: Arc<dyn Clock>,
    /// Shard n's signal that parcels for it wait somewhere (`Embedded::among_shards`).
    parcels_waiting: Arc<[Notify]>,
    carriers: Workers,
    /// Tells other nodes what became of the copies taken from their shards (`pulling`): apart
    /// from the carriers, which a hand-off starts again, so no batch being told is cut off.
    telling: Workers,
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
        Sharded {
            slots: Arc::new(slots::Slots::new(count, here)),
            make: None,
            working: Default::default(),
            restarting: Default::default(),
            namespaces,
            clock,
            parcels_waiting,
            carriers: Workers::default(),
            telling: Workers::default(),
            rounds: Arc::new(Notify::new()),
            next_taken: Default::default(),
            elsewhere: None,
            fates_untold: Default::default(),
        }
    }

    /// Makes the backends of shards taken while it serves with `make`.
    pub fn making_shards_with(mut self, make: MakeShard) -> Sharded {
        self.make = Some(make);
        self
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
        for source in self.here() {
            for destination in self.here().filter(|d| d.shard() != source.shard()) {
                relay::agree(&source, &destination);
            }
        }
    }

    fn count(&self) -> u32 {
        self.slots.count()
    }

    /// Shard `n`'s backend while this node leads it.
    fn slot(&self, n: u32) -> Option<Arc<Embedded>> {
        self.slots.get(n)
    }

    /// Whether shard `n` is one of the key space's and another node leads it.
    fn led_elsewhere(&self, n: u32) -> bool {
        n < self.count() && self.slot(n).is_none()
    }

    /// The shards this node leads, in order.
    fn here(&self) -> impl Iterator<Item = Arc<Embedded>> + '_ {
        self.slots.here()
    }

    /// Stops the carriers and starts them again over the shards led here now, if they run:
    /// what crosses from or into a shard handed off or taken is pulled from, or by, its
    /// leader, each pair from where its destination's log says it stands.
    async fn carry_anew(&self) {
        let working = *self.working.lock().unwrap_or_else(|p| p.into_inner());
        if working {
            self.carriers.stop().await;
            self.start_carrying();
        }
    }

    /// Starts a carrier into each shard this node leads, from the others it leads, and one
    /// from the shards other nodes lead.
    fn start_carrying(&self) {
        for to in self.here().map(|shard| shard.shard() as usize) {
            let waiting = (to, self.parcels_waiting.clone());
            let carrying = carry_into(self.fates(), waiting, self.rounds.clone());
            self.carriers.start("carrier", carrying);
        }
        self.carry_from_other_nodes();
    }

    /// Where the carriers note what became of relayed copies.
    fn fates(&self) -> notes::Notes {
        notes::Notes {
            slots: self.slots.clone(),
            namespaces: self.namespaces.clone(),
            elsewhere: self.elsewhere.clone(),
        }
    }

    /// Shard `n`'s backend, or the refusal that sends the request to the node leading it.
    fn shard(&self, n: u32) -> BackendResult<Arc<Embedded>> {
        match self.slot(n) {
            Some(shard) => {
                led_elsewhere::touched_shard(n);
                Ok(shard)
            }
            None => Err(led_elsewhere::refuse(n)),
        }
    }

    /// The shard holding the queue or topic `key`.
    fn of_key(&self, key: &str) -> BackendResult<Arc<Embedded>> {
        self.shard(Shard::of(self.count(), key))
    }

    /// The shard of the queue an ARN names; shard 0 for what names none (its engine answers
    /// with AWS's error).
    fn of_queue_arn(&self, arn: &str) -> BackendResult<Arc<Embedded>> {
        match self.namespaces.key_in_arn("sqs", arn) {
            Some(key) => self.of_key(key),
            None => self.shard(0),
        }
    }

    /// The shard of the topic an ARN names (a subscription's ARN names its topic's).
    fn of_topic_arn(&self, arn: &str) -> BackendResult<Arc<Embedded>> {
        match self.namespaces.key_in_arn("sns", arn) {
            Some(key) => self.of_key(key),
            None => self.shard(0),
        }
    }

    /// Shard `n`'s backend for a read made on another shard's behalf (a listing, a dead-letter
    /// queue's configuration): one led by another node is not read across nodes yet, so the
    /// request is refused as storage unavailable, never answered from part of the shards.
    fn read_across(&self, n: u32) -> BackendResult<Arc<Embedded>> {
        self.slot(n).ok_or_else(|| led_elsewhere::across(n))
    }

    /// The key an SNS ARN names, for sorting topics as one engine lists them.
    fn topic_key<'a>(&self, arn: &'a str) -> &'a str {
        self.namespaces.key_in_arn("sns", arn).unwrap_or(arn)
    }

    /// Every shard's answer to `ask`, in shard order, joined; refused while another node
    /// leads one of them (`read_across`).
    async fn gather<'a, T>(
        &'a self,
        ask: impl for<'s> Fn(&'s Held<'a>) -> Answer<'s, Vec<T>>,
    ) -> BackendResult<Vec<T>> {
        let mut all = Vec::new();
        for n in 0..self.count() {
            let held = Held(self.read_across(n)?, std::marker::PhantomData);
            all.extend(ask(&held).await?);
        }
        Ok(all)
    }

    /// The answers to `ask` of the shards this node leads, in shard order, joined: for what a
    /// node says of itself (its webhook figures, what it has yet to carry).
    async fn gather_here<'a, T>(
        &'a self,
        ask: impl for<'s> Fn(&'s Held<'a>) -> Answer<'s, Vec<T>>,
    ) -> BackendResult<Vec<T>> {
        let mut all = Vec::new();
        for shard in self.here() {
            let held = Held(shard, std::marker::PhantomData);
            all.extend(ask(&held).await?);
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

/// `ask` of `shard`, or the refusal `shard` is when another node leads it. The answer holds
/// the shard's backend until it is ready, so a hand-off meanwhile cannot let go of it.
fn on<'a, T: Send + 'a>(
    shard: BackendResult<Arc<Embedded>>,
    ask: impl for<'s> FnOnce(&'s Held<'a>) -> Answer<'s, T> + Send + 'a,
) -> Answer<'a, T> {
    match shard {
        Ok(shard) => {
            let held = Held(shard, std::marker::PhantomData);
            Box::pin(async move { ask(&held).await })
        }
        Err(refused) => Box::pin(std::future::ready(Err(refused))),
    }
}

/// A shard's backend held for a request whose borrows live for `'a`. A borrow of it
/// (`&'s Held<'a>`) lives no longer than the request's, so what is asked of the shard through
/// it may borrow both (`on`, `gather`).
struct Held<'a>(Arc<Embedded>, std::marker::PhantomData<&'a ()>);

impl std::ops::Deref for Held<'_> {
    type Target = Embedded;

    fn deref(&self) -> &Embedded {
        &self.0
    }
}

/// Carries parcels into shard `to` from every other this node leads, whenever one of them has
/// some (another node's shards are pulled from: `pulling`).
async fn carry_into(
    notes: notes::Notes,
    (to, parcels_waiting): (usize, Arc<[Notify]>),
    rounds: Arc<Notify>,
) {
    let shards = notes.led();
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
        for shard in self.here() {
            shard.start_work();
        }
        *self.working.lock().unwrap_or_else(|p| p.into_inner()) = true;
        if self.elsewhere.is_some() {
            let fates = self.fates_untold.clone();
            let telling = pulling::tell_fates(self.fates(), fates);
            self.telling.start("carrier", telling);
        }
        self.start_carrying();
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
            let Some(here) = self.slot(shard) else {
                return Err(super::BackendError::Across(shard));
            };
            super::Inspection::reset(&*here, scope).await
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
                if self.here().all(|shard| shard.nothing_to_carry()) {
                    return Ok(());
                }
                round.await;
            }
        })
    }

    fn hand_off<'a>(&'a self, shards: &'a [u32]) -> Answer<'a, ()> {
        Box::pin(async move {
            let restarting = self.restarting.lock().await;
            if let Some(&n) = shards.iter().find(|&&n| self.slot(n).is_none()) {
                return Err(super::BackendError::Across(n));
            }
            let leaving: Vec<Arc<Embedded>> = (shards.iter())
                .filter_map(|&n| self.slots.hand_off(n))
                .collect();
            self.carry_anew().await;
            drop(restarting);
            // Requests that found a shard here just before are let finish giving its log what
            // they make; none is let in after.
            for shard in &leaving {
                shard.shut();
            }
            let mut result = Ok(());
            for shard in &leaving {
                if let Err(error) = shard.stop_work().await {
                    result = Err(error);
                }
            }
            let deadline = tokio::time::Instant::now() + HAND_OFF_WAIT;
            for shard in &leaving {
                match tokio::time::timeout_at(deadline, shard.submitted_durable()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => result = Err(error),
                    Err(_) => {
                        return Err(super::BackendError::Unavailable(format!(
                            "shard {}'s log did not make what it was given durable within {} s",
                            shard.shard(),
                            HAND_OFF_WAIT.as_secs()
                        )))
                    }
                }
            }
            result
        })
    }

    fn take_shard(
        &self,
        engine: Arc<crate::engine::Engine<Notify>>,
        log_writer: Arc<crate::persist::writer::LogWriter>,
        tenure: Arc<crate::persist::tenure::Tenure>,
    ) -> Answer<'_, ()> {
        Box::pin(async move {
            let n = engine.relay.shard().number;
            let make = (self.make.as_ref()).ok_or_else(|| {
                super::BackendError::Unavailable(format!(
                    "shard {n} not taken: this router takes no shard while it serves"
                ))
            })?;
            let backend = make(engine, log_writer, tenure);
            let restarting = self.restarting.lock().await;
            if let Err(not) = self.slots.take(backend.clone()) {
                let why = match not {
                    slots::NotTaken::Led => "this node leads it already",
                    slots::NotTaken::NoSuchShard => "no such shard",
                };
                return Err(super::BackendError::Unavailable(format!(
                    "shard {n} not taken: {why}"
                )));
            }
            let working = *self.working.lock().unwrap_or_else(|p| p.into_inner());
            if working {
                backend.start_work();
            }
            self.carry_anew().await;
            drop(restarting);
            Ok(())
        })
    }

    fn stop_work(&self) -> Answer<'_, ()> {
        Box::pin(async move {
            let restarting = self.restarting.lock().await;
            *self.working.lock().unwrap_or_else(|p| p.into_inner()) = false;
            self.carriers.stop().await;
            self.telling.stop().await;
            drop(restarting);
            let mut result: BackendResult<()> = Ok(());
            // Those handed off too: a hand-off cut short may not have stopped their work.
            for shard in self.slots.every_one() {
                if let Err(error) = shard.stop_work().await {
                    result = Err(error);
                }
            }
            result
        })
    }
}
