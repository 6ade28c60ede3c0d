//! The work a serving node runs beside requests, and the order it stops in.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::Notify;

use crate::engine::Engine;
use crate::persist::snapshot::Snapshotter;
use crate::persist::writer::LogWriter;
use crate::service::Service;
use crate::worker::Workers;

/// The log of a shard a generation leads, its snapshots and its engine.
pub(super) struct LedLog {
    pub shard: u32,
    pub log_writer: Arc<LogWriter>,
    pub snapshotter: Arc<Snapshotter>,
    pub engine: Arc<Engine<Notify>>,
}

/// The work a serving node runs beside requests, started at once or when a standby comes to
/// lead, and stopped in order when the server stops.
pub(super) struct Started {
    workers: Workers,
    /// One per log (one per shard when the key space is cut into several), those of shards
    /// taken while the node serves among them.
    snapshots: Arc<std::sync::Mutex<Vec<Arc<Snapshotter>>>>,
    /// The leases this node leads under (one per shard), once it does.
    lease: tokio::sync::watch::Sender<Vec<Arc<crate::persist::database::Keeper>>>,
    /// Set as the node stops, before its leases are given up: a keeper added after is given
    /// up at once.
    stopped: std::sync::atomic::AtomicBool,
}

impl Default for Started {
    fn default() -> Self {
        Started {
            workers: Workers::default(),
            snapshots: Default::default(),
            lease: tokio::sync::watch::Sender::new(Vec::new()),
            stopped: Default::default(),
        }
    }
}

impl Started {
    /// Starts the webhook worker, the snapshotters and the backend's work.
    pub(super) fn begin(
        &self,
        service: &Arc<Service>,
        snapshots: Vec<Arc<Snapshotter>>,
        lease: Vec<Arc<crate::persist::database::Keeper>>,
    ) {
        let workers = &self.workers;
        workers.start(
            "webhooks",
            crate::delivery::run(
                service.backend.clone(),
                service.clock.clone(),
                service.webhooks.clone(),
            ),
        );
        if !snapshots.is_empty() {
            for snapshotter in &snapshots {
                workers.start("snapshots", snapshotter.clone().run());
            }
            *self.snapshots.lock().unwrap_or_else(|p| p.into_inner()) = snapshots;
            if crate::test_hooks::enabled() {
                workers.start("test hooks", answer_test_hooks(self.snapshots.clone()));
            }
        }
        if !lease.is_empty() {
            self.lease.send_replace(lease);
        }
        service.backend.start_work();
    }

    /// Takes the snapshots of the log of a shard taken while the node serves, and closes that
    /// log when the node stops.
    pub(super) fn add_log(&self, snapshotter: Arc<Snapshotter>) {
        self.workers.start("snapshots", snapshotter.clone().run());
        (self.snapshots.lock().unwrap_or_else(|p| p.into_inner())).push(snapshotter);
    }

    /// Leaves out the snapshots of a log handed off or let go of (`snapshotter`, finished and
    /// closed by whoever let go of it): the generation no longer holds its engine.
    fn remove_log(&self, snapshotter: &Arc<Snapshotter>) {
        let mut snapshots = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
        snapshots.retain(|kept| !Arc::ptr_eq(kept, snapshotter));
    }

    /// Lets go of `logs`, shards handed off or taken away: closes them as `close_logs` does
    /// (off the runtime: it blocks), then leaves their snapshots out, so that the generation
    /// holds their engines no more; answers what `give_up` said of each shard. Logs not closed
    /// (the close panicked, or the node stopped meanwhile) are left to the generation, which
    /// closes them as it stops.
    pub(super) async fn let_go(
        &self,
        logs: Vec<LedLog>,
        give_up: impl FnOnce(&[u32]) -> Vec<bool> + Send + 'static,
    ) -> Result<Vec<(u32, bool)>, String> {
        let closing: Vec<_> = logs.iter().map(|log| log.snapshotter.clone()).collect();
        let closed = tokio::task::spawn_blocking(move || close_logs(&logs, give_up))
            .await
            .map_err(|error| error.to_string())?;
        for snapshotter in &closing {
            self.remove_log(snapshotter);
        }
        Ok(closed)
    }

    /// Watches `keeper` too (a node that led no shard took one), and gives its leases up when
    /// the node stops, or at once if it has stopped. Blocks then: call it off the runtime.
    pub(super) fn add_keeper(&self, keeper: Arc<crate::persist::database::Keeper>) {
        self.lease.send_modify(|held| {
            if !held.iter().any(|k| Arc::ptr_eq(k, &keeper)) {
                held.push(keeper.clone());
            }
        });
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            keeper.release();
        }
    }

    /// Completes once this node, having come to lead, loses a lease: it leads every shard of
    /// its database or none.
    pub(super) async fn deposed(&self) {
        let mut lease = self.lease.subscribe();
        let keepers = match lease.wait_for(|held| !held.is_empty()).await {
            Ok(keepers) => keepers.clone(),
            Err(_) => Vec::new(),
        };
        if keepers.is_empty() {
            return std::future::pending().await;
        }
        let mut lost: Vec<_> = keepers.iter().map(|k| Box::pin(k.lost())).collect();
        std::future::poll_fn(
            |cx| match lost.iter_mut().any(|l| l.as_mut().poll(cx).is_ready()) {
                true => std::task::Poll::Ready(()),
                false => std::task::Poll::Pending,
            },
        )
        .await
    }

    /// Background work stops before the log closes (a snapshot already writing on a blocking
    /// thread is not interrupted, but waited for); the lease is given up last.
    pub(super) async fn stop(&self, service: &Service) {
        let began = !self.workers.is_empty();
        self.workers.stop().await;
        if began {
            let _ = service.backend.stop_work().await;
        }
        // Every answered request is durable already; this flushes background changes too,
        // once a snapshot still being written is done.
        let snapshots = self
            .snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if !snapshots.is_empty() {
            let _ = tokio::task::spawn_blocking(move || {
                for snapshotter in &snapshots {
                    snapshotter.finish();
                    snapshotter.close();
                }
            })
            .await;
        }
        // Given up only once nothing more is written, so the next leader reads it all.
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let leases = self.lease.borrow().clone();
        if !leases.is_empty() {
            let _ =
                tokio::task::spawn_blocking(move || leases.iter().for_each(|l| l.release())).await;
        }
    }
}

/// Ends the snapshots of `logs` (one under way first), gives the shards' leases up with
/// `give_up` (all at once; it says of each whether it was this node's to give up), and closes
/// the logs; answers what `give_up` said of each shard. Blocking.
pub(super) fn close_logs(
    logs: &[LedLog],
    give_up: impl FnOnce(&[u32]) -> Vec<bool>,
) -> Vec<(u32, bool)> {
    for log in logs {
        log.snapshotter.finish();
    }
    let shards: Vec<u32> = logs.iter().map(|log| log.shard).collect();
    let said = give_up(&shards).into_iter().chain(std::iter::repeat(false));
    let given_up: Vec<(u32, bool)> = shards.iter().copied().zip(said).collect();
    // Closed once failed: the writer ends, with the connection it holds.
    for log in logs {
        log.snapshotter.close();
    }
    // Requests under way on a shard let go of may hold its engine a while yet (the router
    // holds it no more); its messages are let go of now, once its log refuses every change
    // (so this reaches no log).
    for (log, (_, given_up)) in logs.iter().zip(&given_up) {
        if *given_up && log.log_writer.failed() {
            log.engine.reset_messages();
        }
    }
    given_up
}

/// What a leader does for a test holding it from outside (`test_hooks`): hold its logs'
/// writes, or take a snapshot of each now; those it leads when asked.
async fn answer_test_hooks(led: Arc<std::sync::Mutex<Vec<Arc<Snapshotter>>>>) {
    use crate::test_hooks;
    let mut held = false;
    loop {
        let snapshots = led.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let hold = test_hooks::asked("hold-log");
        if hold != held {
            for snapshotter in &snapshots {
                snapshotter.log_writer().hold_writes(hold);
            }
            held = hold;
            if hold {
                test_hooks::reached("log-held");
            }
        }
        if test_hooks::take("take-snapshot") {
            let taking = snapshots.clone();
            tokio::task::spawn_blocking(move || {
                for snapshotter in &taking {
                    if let Err(error) = snapshotter.take() {
                        tracing::error!(%error, "the snapshot a test asked for failed");
                    }
                }
            });
        }
        tokio::time::sleep(test_hooks::POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::Notify;

    use super::{LedLog, Started};
    use crate::engine::Engine;
    use crate::persist::segment_log::SegmentLog;
    use crate::persist::snapshot::{SnapshotStore, Snapshotter};
    use crate::persist::storage::MemStorage;
    use crate::persist::writer::{FsyncMode, LogWriter};

    /// A store no snapshot is taken in: the test never makes one due.
    struct Nowhere;

    impl SnapshotStore for Nowhere {
        fn take(
            &self,
            _engine: &Engine<Notify>,
            _log_writer: &LogWriter,
        ) -> std::io::Result<(String, u64)> {
            Err(std::io::Error::other("no snapshots here"))
        }
    }

    /// A shard handed off (or taken away) is closed, its lease given up as the hand-off says,
    /// and leaves the generation holding nothing of its engine; one still led is held on.
    #[tokio::test]
    async fn a_log_let_go_of_is_closed_and_leaves_the_generation_its_engine() {
        let started = Started::default();
        let mut engines = Vec::new();
        let mut logs = Vec::new();
        for shard in 0..2 {
            let (log, _) = SegmentLog::open(MemStorage::default(), 1 << 20).unwrap();
            let log_writer = LogWriter::new();
            log_writer.start(log, 1, FsyncMode::Always);
            let engine = Arc::new(Engine::new("000000000000", "us-east-1"));
            engines.push(Arc::downgrade(&engine));
            let snapshotter = Snapshotter::new(
                engine.clone(),
                log_writer.clone(),
                Box::new(Nowhere),
                0,
                1 << 30,
            );
            let snapshotter = Arc::new(snapshotter);
            started.add_log(snapshotter.clone());
            logs.push(LedLog {
                shard,
                log_writer,
                snapshotter,
                engine,
            });
        }
        let kept = logs.pop().expect("shard 1");
        // As a hand-off lets go of a log: the keeper fails it for good as it gives the lease up.
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (asking, failing) = (asked.clone(), logs[0].log_writer.clone());
        let closed = started.let_go(logs, move |shards| {
            asking.lock().unwrap().extend_from_slice(shards);
            failing.fail_for_good();
            vec![true]
        });
        assert_eq!(closed.await, Ok(vec![(0, true)]));
        assert_eq!(
            *asked.lock().unwrap(),
            [0],
            "the lease given up is the shard's"
        );
        let limit = std::time::Duration::from_secs(10);
        let gone = async {
            while engines[0].upgrade().is_some() {
                tokio::task::yield_now().await;
            }
        };
        (tokio::time::timeout(limit, gone).await).expect("the engine let go of is held no more");
        // Held by the generation alone now.
        drop(kept);
        assert!(
            engines[1].upgrade().is_some(),
            "the shard still led keeps its engine"
        );
        started.workers.stop().await;
    }
}
