//! The one way engine state reaches the log: a value behind a mutex (`LoggedLock`) whose guard
//! hands what changed under the lock to the log when it is released, so the log holds each
//! value's changes in the order they were made and no caller has to remember to log. Queues,
//! topics and the webhook outbox are all kept this way.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};

use super::changes::{Change, ChangeLog};

/// State that hands its own changes to the log once logging starts.
pub trait Logged {
    /// Starts keeping change records for the log (without a log nothing is kept).
    fn start_logging(&mut self);
    /// The record of what changed under the lock, if anything. `touched`: the holder had
    /// mutable access through the guard (a topic then logs its settings).
    fn take_record(&mut self, touched: bool) -> Option<Change>;
    /// The record back once the log took it, to reuse its allocation.
    fn recycle(&mut self, _record: Change) {}
}

/// A value whose changes are logged when its lock is released.
pub struct LoggedLock<T> {
    state: Mutex<T>,
    change_log: Option<Arc<dyn ChangeLog>>,
}

impl<T: Logged> LoggedLock<T> {
    pub fn new(mut state: T, change_log: Option<Arc<dyn ChangeLog>>) -> Self {
        if change_log.is_some() {
            state.start_logging();
        }
        LoggedLock {
            state: Mutex::new(state),
            change_log,
        }
    }

    /// Logs every later change to `change_log`.
    pub fn set_log(&mut self, change_log: Arc<dyn ChangeLog>) {
        self.state
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .start_logging();
        self.change_log = Some(change_log);
    }

    /// Locks the value. A panic elsewhere must not take it down with it, so a poisoned lock is
    /// recovered: every method leaves the state consistent before it can fail.
    pub fn lock(&self) -> Guard<'_, T> {
        Guard {
            state: self.state.lock().unwrap_or_else(|p| p.into_inner()),
            change_log: self.change_log.as_deref(),
            touched: false,
        }
    }

    /// Locks the value without logging: for applying changes read back from the log, which
    /// must not be logged again.
    pub fn lock_unlogged(&self) -> MutexGuard<'_, T> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A locked value. Releasing it hands its changes to the log.
pub struct Guard<'a, T: Logged> {
    state: MutexGuard<'a, T>,
    change_log: Option<&'a dyn ChangeLog>,
    touched: bool,
}

impl<T: Logged> Guard<'_, T> {
    /// Mutable access that does not count as touching: for changes the value records itself
    /// (a publish changes a topic's dedup window and archive, never its settings).
    pub fn untouched(&mut self) -> &mut T {
        &mut self.state
    }

    /// Whether changes are being logged.
    pub fn logging(&self) -> bool {
        self.change_log.is_some()
    }
}

impl<T: Logged> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.state
    }
}

impl<T: Logged> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.touched = true;
        &mut self.state
    }
}

impl<T: Logged> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        let Some(change_log) = self.change_log else {
            return;
        };
        if let Some(record) = self.state.take_record(self.touched) {
            change_log.submit(&record);
            self.state.recycle(record);
        }
    }
}
