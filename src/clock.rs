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

    /// Moves the clock to `to`; refused if that is earlier (queue deadlines assume time never
    /// runs backwards) or past `LATEST`.
    pub fn set(&self, to: Timestamp) -> Result<(), Refused> {
        if to > LATEST {
            return Err(Refused::PastLatest);
        }
        self.millis
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                (to.0 >= now).then_some(to.0)
            })
            .map_err(|stays| Refused::Backwards(Timestamp(stays)))?;
        self.moved.notify_waiters();
        Ok(())
    }

    /// Moves the clock forward; refused, leaving it where it is, if that would pass `LATEST`.
    pub fn try_advance_millis(&self, millis: u64) -> Result<(), Refused> {
        self.millis
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                now.checked_add(millis).filter(|to| *to <= LATEST.0)
            })
            .map_err(|_| Refused::PastLatest)?;
        // Every sleeper looks again; one that is about to sleep registered before it read the
        // time (`sleep_until`), so none misses this.
        self.moved.notify_waiters();
        Ok(())
    }

    /// Moves the clock forward, stopping at `LATEST` (tests).
    pub fn advance_millis(&self, millis: u64) {
        let left = LATEST.0.saturating_sub(self.now().0);
        let _ = self.try_advance_millis(millis.min(left));
    }
}

/// The latest time a manual clock may show: 9999-12-01T00:00:00Z. RFC 3339, as SNS envelopes
/// and the inspection endpoints write times, has four-digit years, and the month left over
/// keeps every deadline counted from the clock (retention is at most 14 days) writable too.
pub const LATEST: Timestamp = Timestamp(253_399_622_400_000);

/// Why a manual clock did not move.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The time asked for is before the clock's, which stays at this.
    Backwards(Timestamp),
    /// The time asked for is past `LATEST`.
    PastLatest,
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
