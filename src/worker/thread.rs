//! Loops that block on I/O (the log writer, lease keeping, following a log in a database, a
//! segment made ready ahead) run on threads of their own, started one way: named
//! `orderly-<name>`, inside the `worker{name=…}` span their log lines carry, counted in the
//! worker figures while they run, told to stop through a `Stop` they wait on, and joined.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::figures::Running;

/// Tells a thread's loop to stop, and lets it wait for that between its steps.
#[derive(Default)]
pub struct Stop {
    told: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    /// Waits up to `wait`; true once told to stop (at once if told before).
    pub fn wait(&self, wait: Duration) -> bool {
        let told = self.told.lock().unwrap_or_else(|p| p.into_inner());
        let (told, _) = self
            .wake
            .wait_timeout_while(told, wait, |told| !*told)
            .unwrap_or_else(|p| p.into_inner());
        *told
    }

    fn tell(&self) {
        *self.told.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.wake.notify_all();
    }
}

/// A loop on a thread of its own, answering `T` when it ends.
pub struct Thread<T> {
    stop: Arc<Stop>,
    handle: Mutex<Option<JoinHandle<T>>>,
}

impl<T: Send + 'static> Thread<T> {
    /// Starts `work` on a new thread; it is handed the `Stop` its owner tells.
    pub fn start(
        name: &'static str,
        work: impl FnOnce(&Stop) -> T + Send + 'static,
    ) -> std::io::Result<Thread<T>> {
        let stop = Arc::new(Stop::default());
        let told = stop.clone();
        let handle = std::thread::Builder::new()
            .name(format!("orderly-{name}"))
            .spawn(move || {
                let _running = Running::new(name);
                let _span = tracing::info_span!(parent: None, "worker", name).entered();
                work(&told)
            })?;
        Ok(Thread {
            stop,
            handle: Mutex::new(Some(handle)),
        })
    }

    /// Tells the loop to stop and waits until it has; what it answered, unless it was joined
    /// before or panicked.
    pub fn stop(&self) -> Option<T> {
        self.stop.tell();
        self.join()
    }

    /// Waits until the loop ends by itself (its owner ended it some other way).
    pub fn join(&self) -> Option<T> {
        let handle = self.handle.lock().unwrap_or_else(|p| p.into_inner()).take();
        handle?.join().ok()
    }

    /// Whether the loop has ended (or was joined).
    pub fn is_finished(&self) -> bool {
        let handle = self.handle.lock().unwrap_or_else(|p| p.into_inner());
        handle.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl<T> Drop for Thread<T> {
    /// Dropped without `stop`: the loop is told, and ends at its next look.
    fn drop(&mut self) {
        self.stop.tell();
    }
}
