//! Background work on the runtime, started and stopped one way. Each loop that runs beside
//! requests (the webhook worker, the snapshotter, a move task's pacing, the test hooks) is
//! started in a set under a name, which every log line it writes carries (`worker{name=…}`);
//! a set stops together, each loop between two of its awaits, and `stop` returns once all
//! have ended. A loop that ends by itself is said at debug level (a move task ends when done).
//!
//! The loops that block on I/O (the log writer, lease keeping and following a log in a
//! database) are threads of their own, not tasks: they are not in a set.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};

use tokio::task::JoinSet;
use tracing::Instrument;

/// Loops started together and stopped together.
#[derive(Default)]
pub struct Workers(Mutex<JoinSet<()>>);

impl Workers {
    fn set(&self) -> MutexGuard<'_, JoinSet<()>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts `work` on the runtime under `name`.
    pub fn start(&self, name: &'static str, work: impl Future<Output = ()> + Send + 'static) {
        let mut set = self.set();
        // Loops that ended are let go here, so a set that lives long does not grow.
        while set.try_join_next().is_some() {}
        let span = tracing::info_span!("worker", name);
        set.spawn(
            async move {
                work.await;
                tracing::debug!("ended");
            }
            .instrument(span),
        );
    }

    /// Whether no loop was started since the set last stopped.
    pub fn is_empty(&self) -> bool {
        self.set().is_empty()
    }

    /// Stops every loop between two of its awaits and waits until all have ended.
    pub async fn stop(&self) {
        let mut set = std::mem::take(&mut *self.set());
        set.abort_all();
        while set.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::Workers;

    #[tokio::test]
    async fn a_set_stops_every_loop_and_lets_finished_ones_go() {
        let workers = Workers::default();
        assert!(workers.is_empty());
        let (started, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        // Each loop holds a guard that counts its end, so an abort is seen as well as a return.
        struct Ends(Arc<AtomicUsize>);
        impl Drop for Ends {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        for _ in 0..3 {
            let (started, ends) = (started.clone(), Ends(dropped.clone()));
            workers.start("forever", async move {
                let _ends = ends;
                started.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await;
            });
        }
        workers.start("done at once", async {});
        while started.load(Ordering::SeqCst) < 3 {
            tokio::task::yield_now().await;
        }
        assert!(!workers.is_empty());
        workers.stop().await;
        assert_eq!(dropped.load(Ordering::SeqCst), 3, "every loop ended");
        assert!(workers.is_empty(), "a stopped set holds nothing");
    }
}
