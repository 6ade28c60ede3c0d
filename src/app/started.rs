//! The work a serving node runs beside requests, and the order it stops in.

use std::future::Future;
use std::sync::Arc;

use crate::persist::snapshot::Snapshotter;
use crate::service::Service;
use crate::worker::Workers;

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
    pub(super) fn remove_log(&self, snapshotter: &Arc<Snapshotter>) {
        let mut snapshots = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
        snapshots.retain(|kept| !Arc::ptr_eq(kept, snapshotter));
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

    use super::Started;
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

    /// A shard handed off leaves the generation holding nothing of its engine; one still led
    /// is held on.
    #[tokio::test]
    async fn a_log_removed_from_the_generation_lets_its_engine_go() {
        let started = Started::default();
        let mut engines = Vec::new();
        let mut snapshotters = Vec::new();
        for _ in 0..2 {
            let (log, _) = SegmentLog::open(MemStorage::default(), 1 << 20).unwrap();
            let log_writer = LogWriter::new();
            log_writer.start(log, 1, FsyncMode::Always);
            let engine = Arc::new(Engine::new("000000000000", "us-east-1"));
            engines.push(Arc::downgrade(&engine));
            let snapshotter = Snapshotter::new(engine, log_writer, Box::new(Nowhere), 0, 1 << 30);
            let snapshotter = Arc::new(snapshotter);
            started.add_log(snapshotter.clone());
            snapshotters.push(snapshotter);
        }
        let kept = snapshotters.remove(1);
        let left = snapshotters.remove(0);
        // As a hand-off lets go of a log: its snapshot task ends, then the generation drops it.
        left.finish();
        started.remove_log(&left);
        drop(left);
        let limit = std::time::Duration::from_secs(10);
        let gone = async {
            while engines[0].upgrade().is_some() {
                tokio::task::yield_now().await;
            }
        };
        (tokio::time::timeout(limit, gone).await).expect("the engine handed off was let go of");
        // Held by the generation alone now.
        drop(kept);
        assert!(
            engines[1].upgrade().is_some(),
            "the shard still led keeps its engine"
        );
        started.workers.stop().await;
    }
}
