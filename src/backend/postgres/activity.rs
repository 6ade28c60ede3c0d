//! What this node did since it started: per queue (by uid) the counts `/metrics` and the
//! inspection API show, per subscription what became of its last messages, and per HTTP/S
//! subscription its last attempts and error. Kept in memory
//! and per node, as Prometheus counters are: each node exports its own share and a query sums
//! them across instances. Counted after the transaction commits, so nothing rolled back counts.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::engine::queue::Activity;
use crate::engine::topic::recent::{self, DeliveryNote, Fate, Recent};
use crate::engine::Timestamp;

/// An HTTP/S subscription's last attempts from this node, and what went wrong last.
#[derive(Default)]
struct Attempts {
    notes: VecDeque<DeliveryNote>,
    last_error: Option<(Timestamp, Arc<str>)>,
}

#[derive(Default)]
pub struct NodeActivity {
    queues: Mutex<HashMap<i64, Activity>>,
    subscriptions: Mutex<HashMap<Arc<str>, Recent>>,
    attempts: Mutex<HashMap<Arc<str>, Attempts>>,
}

impl NodeActivity {
    /// Counts on the queue with this uid.
    pub fn count(&self, uid: i64, change: impl FnOnce(&mut Activity)) {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        change(queues.entry(uid).or_default());
    }

    pub fn of(&self, uid: i64) -> Activity {
        let queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        queues.get(&uid).copied().unwrap_or_default()
    }

    /// Forgets a deleted queue (its uid is never used again).
    pub fn forget(&self, uid: i64) {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        queues.remove(&uid);
    }

    pub fn note(&self, subscription: &Arc<str>, note: DeliveryNote) {
        let mut subscriptions = self.subscriptions.lock().unwrap_or_else(|p| p.into_inner());
        subscriptions
            .entry(subscription.clone())
            .or_default()
            .note(note);
    }

    /// A subscription's last notes and its counts by fate.
    pub fn recent(&self, subscription: &str) -> (Vec<DeliveryNote>, Vec<(Fate, u64)>) {
        let subscriptions = self.subscriptions.lock().unwrap_or_else(|p| p.into_inner());
        match subscriptions.get(subscription) {
            Some(recent) => (recent.list(), recent.counts()),
            None => (Vec::new(), Vec::new()),
        }
    }

    /// What one webhook attempt of this node came to.
    pub fn note_attempt(&self, subscription: &Arc<str>, note: DeliveryNote) {
        let mut attempts = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let entry = attempts.entry(subscription.clone()).or_default();
        recent::push(&mut entry.notes, note);
    }

    pub fn note_error(&self, subscription: &Arc<str>, error: &str, now: Timestamp) {
        let mut attempts = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let entry = attempts.entry(subscription.clone()).or_default();
        entry.last_error = Some((now, error.into()));
    }

    /// An HTTP/S subscription's last attempts (oldest first) and last error, from this node.
    pub fn attempts(
        &self,
        subscription: &str,
    ) -> (Vec<DeliveryNote>, Option<(Timestamp, Arc<str>)>) {
        let attempts = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        match attempts.get(subscription) {
            Some(a) => (a.notes.iter().cloned().collect(), a.last_error.clone()),
            None => (Vec::new(), None),
        }
    }
}
