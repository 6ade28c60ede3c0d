//! How long this node may still act as the one that leads, in ways no fence in the database
//! can take back: a webhook sent is sent. A node on a data directory leads for good; a node on
//! a database leads until a little before its lease could have lapsed, counted from when it
//! last asked for a renewal that succeeded (the database's expiry lies at least a lease past
//! that moment), so it stops sending before another node can take over, not when it notices.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Held back from the lease: a request already on its way when the tenure ends still reaches
/// its receiver before the next leader can have recovered and sent anything.
pub const MARGIN: Duration = Duration::from_secs(1);

pub struct Tenure {
    origin: Instant,
    /// Nanoseconds after `origin` at which the tenure ends; `u64::MAX` for good.
    until: AtomicU64,
}

impl Tenure {
    /// A tenure with no end: the only node of its data directory.
    pub fn for_good() -> Tenure {
        Tenure {
            origin: Instant::now(),
            until: AtomicU64::new(u64::MAX),
        }
    }

    /// A tenure not begun: a standby's, until it leads.
    pub fn not_begun() -> Tenure {
        Tenure {
            origin: Instant::now(),
            until: AtomicU64::new(0),
        }
    }

    /// Lets the tenure run to `lease` after `since` (less the margin). A later call may
    /// shorten it: renewals are asked for in order.
    pub fn hold(&self, since: Instant, lease: Duration) {
        let end = (since + lease).checked_sub(MARGIN).unwrap_or(since);
        let nanos = end.saturating_duration_since(self.origin).as_nanos();
        self.until.store(
            u64::try_from(nanos).unwrap_or(u64::MAX - 1),
            Ordering::Release,
        );
    }

    /// Ends the tenure now (the lease lost, given up or abandoned).
    pub fn end(&self) {
        self.until.store(0, Ordering::Release);
    }

    /// Whether this node may still act as the leader.
    pub fn holds(&self) -> bool {
        let until = self.until.load(Ordering::Acquire);
        until == u64::MAX || (self.origin.elapsed().as_nanos() as u64) < until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenure_ends_a_margin_before_the_lease_it_was_given() {
        assert!(Tenure::for_good().holds());
        assert!(!Tenure::not_begun().holds());
        let tenure = Tenure::not_begun();
        let lease = Duration::from_secs(5);
        tenure.hold(Instant::now(), lease);
        assert!(tenure.holds());
        // A renewal asked for long enough ago that its lease, less the margin, has run out.
        tenure.hold(Instant::now() - (lease - MARGIN), lease);
        assert!(!tenure.holds());
        tenure.hold(Instant::now(), lease);
        tenure.end();
        assert!(!tenure.holds());
    }
}
