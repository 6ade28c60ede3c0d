//! The only place the server reads time. The engine gets `now` from here, passed as an argument.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

use crate::engine::Timestamp;

pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;

    /// Completes when the clock jumps (a test moved it), so timers computed from an earlier
    /// `now` are looked at again. A real clock never jumps.
    fn advanced(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::pending())
    }
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
}

/// A clock tests move by hand.
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

    pub fn advance_millis(&self, millis: u64) {
        self.millis.fetch_add(millis, Ordering::Relaxed);
        // One background waiter (the webhook worker); a stored permit if it is busy.
        self.moved.notify_one();
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.millis.load(Ordering::Relaxed))
    }

    fn advanced(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.moved.notified())
    }
}
