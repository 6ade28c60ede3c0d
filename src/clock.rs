//! The only place the server reads time. The engine gets `now` from here, passed as an argument.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

use crate::engine::Timestamp;

pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;

    /// Completes once `now()` has reached `deadline` (at once if it has). Every wait for an
    /// engine deadline goes through here, so a test that moves a manual clock wakes them all.
    fn sleep_until(&self, deadline: Timestamp) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// Wall-clock time, never going backwards (engine deadlines assume monotonic `now`).
#[derive(Default)]
pub struct SystemClock {
    last: AtomicU64,
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let previous = self.last.fetch_max(wall, Ordering::Relaxed);
        Timestamp(previous.max(wall))
    }

    fn sleep_until(&self, deadline: Timestamp) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let wait = std::time::Duration::from_millis(deadline.millis_since(self.now()));
        Box::pin(tokio::time::sleep(wait))
    }
}

/// How the server keeps time: `--clock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClockMode {
    /// The machine's clock.
    System,
    /// Starts at the machine's time and moves only when told (`POST /_orderly/clock`).
    Manual,
}

/// A clock moved by hand: by tests, and by `POST /_orderly/clock` with `--clock manual`.
pub struct ManualClock {
    millis: AtomicU64,
    moved: Notify,
}

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            millis: AtomicU64::new(start.0),
            moved: Notify::new(),
        }
    }

    /// Moves the clock to `to`; refused (answering the time it stays at) if that is earlier:
    /// queue deadlines assume time never runs backwards.
    pub fn set(&self, to: Timestamp) -> Result<(), Timestamp> {
        self.millis
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                (to.0 >= now).then_some(to.0)
            })
            .map_err(Timestamp)?;
        self.moved.notify_waiters();
        Ok(())
    }

    pub fn advance_millis(&self, millis: u64) {
        self.millis.fetch_add(millis, Ordering::SeqCst);
        // Every sleeper looks again; one that is about to sleep registered before it read the
        // time (`sleep_until`), so none misses this.
        self.moved.notify_waiters();
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.millis.load(Ordering::SeqCst))
    }

    fn sleep_until(&self, deadline: Timestamp) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            loop {
                let moved = self.moved.notified();
                tokio::pin!(moved);
                moved.as_mut().enable();
                if self.now() >= deadline {
                    return;
                }
                moved.await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_sleeper_wakes_when_the_manual_clock_reaches_its_deadline_and_not_before() {
        let clock = std::sync::Arc::new(ManualClock::new(Timestamp(1_000)));
        let sleepers: Vec<_> = [1_500, 2_000, 2_000]
            .into_iter()
            .map(|at| {
                let clock = clock.clone();
                tokio::spawn(async move { clock.sleep_until(Timestamp(at)).await })
            })
            .collect();
        tokio::task::yield_now().await;
        clock.advance_millis(499);
        tokio::task::yield_now().await;
        assert!(sleepers.iter().all(|s| !s.is_finished()));
        clock.advance_millis(1);
        tokio::task::yield_now().await;
        assert!(sleepers[0].is_finished());
        assert!(!sleepers[1].is_finished() && !sleepers[2].is_finished());
        clock.advance_millis(500);
        for sleeper in sleepers {
            tokio::time::timeout(std::time::Duration::from_secs(5), sleeper)
                .await
                .expect("both later sleepers wake on one move")
                .unwrap();
        }
        // A deadline already passed does not wait at all.
        clock.sleep_until(Timestamp(0)).await;
    }
}
