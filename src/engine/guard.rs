//! The one way engine state reaches the log: a value behind a mutex (`Journaling`) whose guard
//! hands what changed under the lock to the journal when it is released, so the log holds each
//! value's changes in the order they were made and no caller has to remember to log. Queues,
//! topics and the webhook outbox are all kept this way.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};

use super::changes::{Change, Journal};

/// State that hands its own changes to the journal once journaling starts.
pub trait Journaled {
    /// Starts keeping change records for the journal (without a journal nothing is kept).
    fn start_journaling(&mut self);
    /// The record of what changed under the lock, if anything. `touched`: the holder had
    /// mutable access through the guard (a topic then logs its settings).
    fn take_record(&mut self, touched: bool) -> Option<Change>;
    /// The record back once the journal took it, to reuse its allocation.
    fn recycle(&mut self, _record: Change) {}
}

/// A value whose changes are logged when its lock is released.
pub struct Journaling<T> {
    state: Mutex<T>,
    journal: Option<Arc<dyn Journal>>,
}

impl<T: Journaled> Journaling<T> {
    pub fn new(mut state: T, journal: Option<Arc<dyn Journal>>) -> Self {
        if journal.is_some() {
            state.start_journaling();
        }
        Journaling {
            state: Mutex::new(state),
            journal,
        }
    }

    /// Logs every later change to `journal`.
    pub fn set_journal(&mut self, journal: Arc<dyn Journal>) {
        self.state
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .start_journaling();
        self.journal = Some(journal);
    }

    /// Locks the value. A panic elsewhere must not take it down with it, so a poisoned lock is
    /// recovered: every method leaves the state consistent before it can fail.
    pub fn lock(&self) -> Guard<'_, T> {
        Guard {
            state: self.state.lock().unwrap_or_else(|p| p.into_inner()),
            journal: self.journal.as_deref(),
            touched: false,
        }
    }

    /// Locks the value without logging: for applying changes read back from the log, which
    /// must not be logged again.
    pub fn lock_unjournaled(&self) -> MutexGuard<'_, T> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A locked value. Releasing it hands its changes to the journal.
pub struct Guard<'a, T: Journaled> {
    state: MutexGuard<'a, T>,
    journal: Option<&'a dyn Journal>,
    touched: bool,
}

impl<T: Journaled> Guard<'_, T> {
    /// Mutable access that does not count as touching: for changes the value records itself
    /// (a publish changes a topic's dedup window and archive, never its settings).
    pub fn untouched(&mut self) -> &mut T {
        &mut self.state
    }

    /// Whether changes are being logged.
    pub fn journaling(&self) -> bool {
        self.journal.is_some()
    }
}

impl<T: Journaled> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.state
    }
}

impl<T: Journaled> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.touched = true;
        &mut self.state
    }
}

impl<T: Journaled> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        let Some(journal) = self.journal else {
            return;
        };
        if let Some(record) = self.state.take_record(self.touched) {
            journal.submit(&record);
            self.state.recycle(record);
        }
    }
}
