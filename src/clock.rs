//! The only place the server reads time. The engine gets `now` from here, passed as an argument.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::engine::Timestamp;

pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
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
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock(AtomicU64::new(start.0))
    }

    pub fn advance_millis(&self, millis: u64) {
        self.0.fetch_add(millis, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::Relaxed))
    }
}
