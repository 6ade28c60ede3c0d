//! The only place the server reads time. The engine gets `now` from here, passed as an argument.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

use crate::engine::Timestamp;

pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;

    /// Completes once `now()` has reached `deadline` (at once if it has). Every wait for an
    /// engine deadline goes through here, so a test that moves a manual clock wakes them all.
    fn sleep_until(&self, deadline: Timestamp) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;

    /// A node taking over a log in a database takes up the cluster's time, so that a failover
    /// between machines whose clocks differ moves no deadline: the database's clock (read at
    /// the takeover, as `database` minus this machine's) and no earlier than `floor`, the
    /// latest time the previous leader recorded. Never backwards. Answers this node's clock
    /// minus the database's, as it read before taking up.
    fn take_up(&self, database: DatabaseClock, floor: Timestamp) -> i64;
}

/// The database's clock as a node read it, against the middle of the round trip that read it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatabaseClock {
    /// Milliseconds the database's clock is ahead of this machine's (negative: behind).
    pub ahead_ms: i64,
}

/// This machine's clock in milliseconds since the epoch.
pub fn machine_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Wall-clock time, never going backwards (engine deadlines assume monotonic `now`), shifted
/// to the cluster's once this node takes over a log in a database (`take_up`).
#[derive(Default)]
pub struct SystemClock {
    last: AtomicU64,
    /// Milliseconds added to this machine's clock: the cluster's time less the machine's.
    shift: AtomicI64,
    /// `--test-clock-offset`: a machine clock this far off, for tests of clock skew.
    skew: i64,
}

impl SystemClock {
    /// A clock that reads `skew` milliseconds off the machine's (tests of clock skew only).
    pub fn skewed(skew: i64) -> SystemClock {
        SystemClock {
            skew,
            ..SystemClock::default()
        }
    }

    /// This node's own reading: the machine's clock, as skewed.
    fn own(&self) -> i64 {
        machine_millis().saturating_add(self.skew)
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let wall = self
            .own()
            .saturating_add(self.shift.load(Ordering::Relaxed))
            .max(0) as u64;
        let previous = self.last.fetch_max(wall, Ordering::Relaxed);
        Timestamp(previous.max(wall))
    }

    fn sleep_until(&self, deadline: Timestamp) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let wait = std::time::Duration::from_millis(deadline.millis_since(self.now()));
        Box::pin(tokio::time::sleep(wait))
    }

    fn take_up(&self, database: DatabaseClock, floor: Timestamp) -> i64 {
        let own = self.own();
        let database_now = machine_millis().saturating_add(database.ahead_ms);
        let cluster = database_now.max(floor.0 as i64);
        self.shift
            .store(cluster.saturating_sub(own), Ordering::Relaxed);
        // What this process read before is forgotten: no engine saw it (a standby's follows
        // the log; a leader's of an earlier generation is gone, and what it logged lies below
        // `floor` or a lease behind the database's time). Kept, a clock that was ahead would
        // stand still, holding every deadline, until the cluster's time passed it.
        self.last.store(0, Ordering::Relaxed);
        own.saturating_sub(database_now)
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

/// Where a manual clock's moves are kept, so a restart starts where it was.
type Recorder = Box<dyn Fn(Timestamp) -> std::io::Result<()> + Send + Sync>;

/// A clock moved by hand: by tests, and by `POST /_orderly/clock` with `--clock manual`.
pub struct ManualClock {
    millis: AtomicU64,
    moved: Notify,
    recorder: std::sync::OnceLock<Recorder>,
}

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            millis: AtomicU64::new(start.0),
            moved: Notify::new(),
            recorder: std::sync::OnceLock::new(),
        }
    }

    /// Keeps each move (`record`) with `recorder`, once set.
    pub fn record_moves_with(&self, recorder: Recorder) {
        let _ = self.recorder.set(recorder);
    }

    /// Keeps where the clock stands now, if its moves are kept (blocks on the disk).
    pub fn record(&self) -> std::io::Result<()> {
        match self.recorder.get() {
            Some(recorder) => recorder(self.now()),
            None => Ok(()),
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

    /// Moved only by hand, on whichever node leads: it takes up where the last leader's was,
    /// never going back. What is said is the machine's clock against the database's.
    fn take_up(&self, database: DatabaseClock, floor: Timestamp) -> i64 {
        if floor > self.now() {
            let _ = self.set(floor.min(LATEST));
        }
        -database.ahead_ms
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

    #[test]
    fn a_clock_off_by_minutes_takes_up_the_databases_time_and_never_goes_back() {
        let behind = SystemClock::skewed(-120_000);
        let said = behind.take_up(DatabaseClock { ahead_ms: 0 }, Timestamp(0));
        assert!((said + 120_000).abs() < 1_000, "{said}");
        assert!((behind.now().0 as i64 - machine_millis()).abs() < 1_000);

        let ahead = SystemClock::skewed(120_000);
        let before = ahead.now();
        let said = ahead.take_up(DatabaseClock { ahead_ms: 0 }, Timestamp(0));
        assert!((said - 120_000).abs() < 1_000, "{said}");
        // It keeps the database's time from now on, not standing still where it read before.
        let now = ahead.now();
        assert!(now < before && (now.0 as i64 - machine_millis()).abs() < 1_000);
        assert!(ahead.now() >= now, "and never back after");

        // A floor past the database's time wins: the last leader was further on.
        let floor = Timestamp(machine_millis() as u64 + 60_000);
        let next = SystemClock::default();
        next.take_up(DatabaseClock { ahead_ms: 0 }, floor);
        assert!(next.now() >= floor);
    }

    #[test]
    fn a_manual_clock_takes_up_where_the_last_leader_left_it_and_never_goes_back() {
        let clock = ManualClock::new(Timestamp(1_000));
        clock.take_up(DatabaseClock::default(), Timestamp(5_000));
        assert_eq!(clock.now(), Timestamp(5_000));
        clock.take_up(DatabaseClock::default(), Timestamp(2_000));
        assert_eq!(clock.now(), Timestamp(5_000));
    }

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
