//! How long a loop waits after a failure before it tries again.

use std::time::Duration;

use super::figures::note_failure;

/// `first` after a failure, doubled with each failure in a row up to `most`, and `first` again
/// once a try succeeds. Each failure is counted under the worker's name (`/metrics`).
#[derive(Debug)]
pub struct Backoff {
    name: &'static str,
    first: Duration,
    most: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(name: &'static str, first: Duration, most: Duration) -> Backoff {
        Backoff {
            name,
            first,
            most: most.max(first),
            next: first,
        }
    }

    /// A try failed: counts it and answers how long to wait before the next.
    pub fn failed(&mut self) -> Duration {
        note_failure(self.name);
        let wait = self.next;
        self.next = (self.next * 2).min(self.most);
        wait
    }

    /// A try succeeded: the next failure waits `first` again.
    pub fn succeeded(&mut self) {
        self.next = self.first;
    }
}
