//! The embedded backend: the in-process engine, durable through its write-ahead log. Each
//! change is made under the engine's locks (which record it, see `engine::changes`) and
//! answered once the log holds it.

mod deliveries;
mod inspection;
mod messages;
mod move_tasks;
mod push_and_sms;
mod queues;
pub mod relay;
mod topics;

use std::sync::Arc;

use tokio::sync::Notify;

use super::{Answer, BackendError, BackendResult};
use crate::clock::Clock;
use crate::engine::{ChangeLog, Engine, EngineResult, Queue, QueueEntry, Timestamp};
use crate::persist::tenure::Tenure;
use crate::persist::writer::LogWriter;

type Entry = Arc<QueueEntry<Notify>>;

pub struct Embedded {
    engine: Arc<Engine<Notify>>,
    /// `None` when ephemeral: changes are done once made.
    log_writer: Option<Arc<LogWriter>>,
    clock: Arc<dyn Clock>,
    /// Signalled when webhook deliveries were queued (the webhook worker waits on it).
    deliveries: Arc<Notify>,
    /// The tasks pacing running message move tasks, stopped before the log closes.
    /// The tasks pacing move tasks, stopped before the backend closes.
    move_runners: crate::worker::Workers,
    /// ReceiveMessage calls waiting now (`GET /metrics`).
    long_polls: prometheus_client::metrics::gauge::Gauge,
    /// What the captured protocols' endpoints would have received (in memory only; shared by
    /// the shards of one process).
    captured: Arc<crate::backend::captured::CapturedMessages>,
    /// One signal per shard, given when parcels for it wait here (the shards of one process).
    parcels_waiting: Option<Arc<[Notify]>>,
    /// How long this node may send webhooks as the leader.
    tenure: Arc<Tenure>,
    /// Whether changes are let in: false once the shard is handed to another node (`shut`).
    /// Read-held while a change is made in the engine and given to the log.
    open: std::sync::RwLock<bool>,
}

fn log_failed() -> BackendError {
    BackendError::Unavailable("the write-ahead log cannot be written".into())
}

impl Embedded {
    pub fn new(
        engine: Arc<Engine<Notify>>,
        log_writer: Option<Arc<LogWriter>>,
        clock: Arc<dyn Clock>,
        deliveries: Arc<Notify>,
    ) -> Self {
        Embedded {
            engine,
            log_writer,
            clock,
            deliveries,
            move_runners: Default::default(),
            long_polls: Default::default(),
            captured: Default::default(),
            parcels_waiting: None,
            tenure: Arc::new(Tenure::for_good()),
            open: std::sync::RwLock::new(true),
        }
    }

    /// Sends webhooks only while `tenure` holds (a node whose lease is in a database).
    pub fn within(mut self, tenure: Arc<Tenure>) -> Self {
        self.tenure = tenure;
        self
    }

    /// One shard of several in this process: keeps its captured messages in `captured`, and
    /// gives shard N's signal in `parcels_waiting` whenever a change leaves parcels for N.
    pub fn among_shards(
        mut self,
        captured: Arc<crate::backend::captured::CapturedMessages>,
        parcels_waiting: Arc<[Notify]>,
    ) -> Self {
        self.captured = captured;
        self.parcels_waiting = Some(parcels_waiting);
        self
    }

    /// Keeps `gauge` at the number of receives waiting for a message.
    pub fn counting_long_polls(mut self, gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        self.long_polls = gauge;
        self
    }

    /// Completes once every change given to the log so far is durable (at once when
    /// ephemeral).
    pub async fn submitted_durable(&self) -> BackendResult<()> {
        match &self.log_writer {
            Some(log_writer) => (log_writer.submitted_durable().await).map_err(|_| log_failed()),
            None => Ok(()),
        }
    }

    /// Lets no change in from now on, once those being made have given the log what they make,
    /// and wakes every receive waiting here, which then ends empty: the shard is handed to
    /// another node, whose requests go there.
    pub fn shut(&self) {
        *self.open.write().unwrap_or_else(|p| p.into_inner()) = false;
        // No webhook is taken from here after: the next leader sends what is left.
        self.tenure.end();
        for entry in self.engine.queues.entries() {
            entry.waiters.notify_waiters();
        }
    }

    /// The gate a change holds while it is made in the engine and given to the log; `None`
    /// once the shard is shut.
    fn gate(&self) -> Option<std::sync::RwLockReadGuard<'_, bool>> {
        let open = self.open.read().unwrap_or_else(|p| p.into_inner());
        (*open).then_some(open)
    }

    /// Lets one change in, or refuses it before anything is done: as led elsewhere once the
    /// shard is shut (passed to its next leader if the request changed nothing here yet), or
    /// while the log cannot be written.
    fn admit(&self) -> BackendResult<std::sync::RwLockReadGuard<'_, bool>> {
        use crate::backend::led_elsewhere;
        let open = (self.gate()).ok_or_else(|| led_elsewhere::refuse_unchanged(self.shard()))?;
        self.refuse_if_failed()?;
        led_elsewhere::changed_here();
        Ok(open)
    }

    /// Changes are refused while the log cannot be written: made in memory only, they would
    /// vanish on restart.
    fn refuse_if_failed(&self) -> BackendResult<()> {
        match &self.log_writer {
            Some(log_writer) if log_writer.failed() => Err(log_failed()),
            _ => Ok(()),
        }
    }

    /// Runs `f` on the named queue under its lock, after applying the deadlines due by now (read
    /// under the lock, so a queue's times never run backwards).
    fn on_queue<T>(
        &self,
        name: &str,
        f: impl FnOnce(&mut Queue, Timestamp) -> EngineResult<T>,
    ) -> BackendResult<(Entry, T)> {
        let entry = self.engine.queues.get(name)?;
        let (answer, expired) = {
            let mut queue = entry.lock();
            let now = self.clock.now();
            queue.tick(now);
            let answer = f(&mut queue, now);
            (answer, queue.take_expired())
        };
        super::log_expired(&entry.name, expired);
        Ok((entry, answer?))
    }

    /// Logs what retention dropped from the queue (outside its lock).
    fn log_expired(&self, entry: &Entry) {
        let expired = entry.lock().take_expired();
        super::log_expired(&entry.name, expired);
    }

    /// Waits until everything changed so far is in the log; then, among shards, signals those
    /// that parcels made here wait for (every change that makes one comes through here).
    async fn durable(&self) -> BackendResult<()> {
        if let Some(log_writer) = &self.log_writer {
            log_writer
                .wait(log_writer.next_lsn())
                .await
                // The change is made in memory: the log may still write it (a failed write is
                // tried again), and a snapshot would keep it.
                .map_err(|_| BackendError::Unconfirmed("the write-ahead log failed".into()))?;
        }
        signal_parcels(&self.engine, self.parcels_waiting.as_deref());
        Ok(())
    }

    /// Runs `change` on the engine, then waits for the log. A refused change waits too: it may
    /// have stored part of its work (a subscription whose replay then failed).
    fn changing<'a, T: Send + 'a>(
        &'a self,
        change: impl FnOnce(&Engine<Notify>) -> BackendResult<T> + Send + 'a,
    ) -> Answer<'a, T> {
        Box::pin(async move {
            let answer = {
                let _admitted = self.admit()?;
                change(&self.engine)
            };
            self.durable().await?;
            answer
        })
    }

    /// Runs `read` on the engine.
    fn reading<'a, T: Send + 'a>(
        &'a self,
        read: impl FnOnce(&Engine<Notify>) -> BackendResult<T> + Send + 'a,
    ) -> Answer<'a, T> {
        Box::pin(async move { read(&self.engine) })
    }
}

/// Gives the signal of each shard that parcels from `engine` wait for.
fn signal_parcels(engine: &Engine<Notify>, signals: Option<&[Notify]>) {
    let Some(signals) = signals else {
        return;
    };
    for (to, _) in engine.relay.depths() {
        if let Some(signal) = signals.get(to as usize) {
            // One waiter keeps the permit (a shard's carrier here); every pull waiting for a
            // shard another node leads, whichever source it pulls from, looks (each pull
            // enables its wait before it looks).
            signal.notify_one();
            signal.notify_waiters();
        }
    }
}

#[cfg(test)]
mod relay_tests;
#[cfg(test)]
mod tests;
