//! Engine time: milliseconds since the Unix epoch, always passed in by the caller.
//!
//! The engine never reads a clock, so every timeout rule can be tested by choosing `now`.

use std::fmt;

/// A point in time, in milliseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub fn millis(self) -> u64 {
        self.0
    }

    /// Whole seconds since the epoch (AWS reports queue timestamps in seconds).
    pub fn seconds(self) -> u64 {
        self.0 / 1000
    }

    pub fn plus_seconds(self, seconds: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(seconds.saturating_mul(1000)))
    }

    pub fn plus_millis(self, millis: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(millis))
    }

    /// Milliseconds from `earlier` to `self`, zero if `earlier` is later.
    pub fn millis_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
