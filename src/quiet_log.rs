//! Warnings that can repeat for every request while something is down (storage refusing
//! changes, a leader not answering) are said once per cause per interval, with how many were
//! held back since: an outage must not bury the log under identical lines.
//!
//! Real time, on purpose: this is about the operator's log, not about the engine's clock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often one cause is said at most.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Causes remembered at once; past it the oldest are forgotten (they are said again).
const MAX_CAUSES: usize = 64;

#[derive(Default)]
pub struct QuietLog {
    causes: Mutex<HashMap<String, (Instant, u64)>>,
}

impl QuietLog {
    /// Whether `cause` should be said at `now`, and how many times it was held back since it
    /// was last said.
    pub fn admit(&self, cause: &str, now: Instant) -> Option<u64> {
        let mut causes = self.causes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((said, held)) = causes.get_mut(cause) {
            if now.saturating_duration_since(*said) < INTERVAL {
                *held += 1;
                return None;
            }
            let held_back = std::mem::take(held);
            *said = now;
            return Some(held_back);
        }
        if causes.len() >= MAX_CAUSES {
            if let Some(oldest) = causes
                .iter()
                .min_by_key(|(_, (said, _))| *said)
                .map(|(cause, _)| cause.clone())
            {
                causes.remove(&oldest);
            }
        }
        causes.insert(cause.to_string(), (now, 0));
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_is_said_once_per_interval_with_what_was_held_back() {
        let log = QuietLog::default();
        let start = Instant::now();
        assert_eq!(log.admit("down", start), Some(0));
        assert_eq!(log.admit("down", start + Duration::from_secs(1)), None);
        assert_eq!(log.admit("down", start + Duration::from_secs(9)), None);
        // Another cause is said at once.
        assert_eq!(log.admit("other", start + Duration::from_secs(9)), Some(0));
        assert_eq!(log.admit("down", start + INTERVAL), Some(2));
        assert_eq!(log.admit("down", start + INTERVAL), None);
    }

    #[test]
    fn the_causes_remembered_are_bounded() {
        let log = QuietLog::default();
        let start = Instant::now();
        for n in 0..(MAX_CAUSES as u64 + 10) {
            let at = start + Duration::from_millis(n);
            assert_eq!(log.admit(&format!("cause {n}"), at), Some(0));
        }
        assert!(log.causes.lock().unwrap().len() <= MAX_CAUSES);
        // The newest are still held back.
        let last = format!("cause {}", MAX_CAUSES + 9);
        assert_eq!(log.admit(&last, start + Duration::from_secs(1)), None);
    }
}
