//! Background work, started and stopped one way. Each loop that runs beside requests (the
//! webhook worker, the snapshotter, a move task's pacing, the test hooks) is started in a set
//! under a name, which every log line it writes carries (`worker{name=…}`); a set stops
//! together, each loop between two of its awaits, and `stop` returns once all have ended. A
//! loop that ends by itself is said at debug level (a move task ends when done).
//!
//! The loops that block on I/O (the log writer, lease keeping, following a log in a database)
//! are threads of their own, started one way too (`Thread`), under the same span. A loop that
//! fails waits before it tries again (`Backoff`). While each runs it is counted by name, with
//! the failures it reported (`figures`, read by `/metrics`).

mod backoff;
mod figures;
mod thread;

pub use backoff::Backoff;
pub use figures::{figures, WorkerFigures};
pub use thread::{Stop, Thread};

use std::future::Future;
use std::sync::{Mutex, MutexGuard};

use tokio::task::JoinSet;
use tracing::Instrument;

/// The span a worker's log lines carry: its own, never inside the span of the code that
/// started it (a generation's workers are started by the steward).
fn span_of(name: &'static str) -> tracing::Span {
    tracing::info_span!(parent: None, "worker", name)
}

/// Starts `work` on the runtime under `name`, on its own: its owner awaits its end (or its
/// answer) through the handle, and dropping the handle leaves it running.
pub fn spawn<T: Send + 'static>(
    name: &'static str,
    work: impl Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    tokio::spawn(
        async move {
            let _running = figures::Running::new(name);
            work.await
        }
        .instrument(span_of(name)),
    )
}

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
        set.spawn(
            async move {
                let _running = figures::Running::new(name);
                work.await;
                tracing::debug!("ended");
            }
            .instrument(span_of(name)),
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
    use std::time::Duration;

    use super::{figures, Backoff, Thread, WorkerFigures, Workers};

    fn figures_of(name: &str) -> WorkerFigures {
        figures()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| f)
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn a_spawned_loop_is_counted_until_it_answers() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let answer = super::spawn("test-spawned", async move { rx.await.unwrap() + 1 });
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while figures_of("test-spawned").running != 1 {
            assert!(std::time::Instant::now() < deadline, "the loop started");
            tokio::task::yield_now().await;
        }
        tx.send(41).unwrap();
        assert_eq!(answer.await.unwrap(), 42);
        assert_eq!(figures_of("test-spawned").running, 0);
    }

    #[test]
    fn a_thread_runs_until_told_and_answers() {
        let thread = Thread::start("test-told", |stop| {
            let mut looks = 0;
            while !stop.wait(Duration::from_secs(60)) {
                looks += 1;
            }
            looks
        })
        .unwrap();
        assert_eq!(thread.stop(), Some(0), "told at once, it looked no more");
        assert_eq!(thread.stop(), None, "joined once");
        assert!(thread.is_finished());
        assert_eq!(figures_of("test-told").running, 0, "no longer counted");
    }

    #[test]
    fn a_running_thread_is_counted_and_a_dropped_one_is_told() {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = Thread::start("test-dropped", move |stop| {
            tx.send(()).unwrap();
            stop.wait(Duration::from_secs(60))
        })
        .unwrap();
        rx.recv().unwrap();
        assert_eq!(figures_of("test-dropped").running, 1);
        drop(thread);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while figures_of("test-dropped").running != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the dropped thread ended"
            );
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_backoff_doubles_to_its_most_and_starts_over_after_a_success() {
        let mut backoff = Backoff::new(
            "test-backoff",
            Duration::from_secs(1),
            Duration::from_secs(5),
        );
        let waits: Vec<u64> = (0..5).map(|_| backoff.failed().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 5, 5]);
        backoff.succeeded();
        assert_eq!(backoff.failed(), Duration::from_secs(1));
        assert_eq!(figures_of("test-backoff").failures, 6);
    }

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
