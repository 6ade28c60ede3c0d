//! What this process's background loops are doing, by worker name: how many run now and how
//! often they failed, read by `/metrics`. Kept per process, as threads and tasks are.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// One worker name's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerFigures {
    /// Loops of this name running now.
    pub running: u64,
    /// Failures they reported (each one a wait before trying again), since the process started.
    pub failures: u64,
}

static FIGURES: Mutex<BTreeMap<&'static str, WorkerFigures>> = Mutex::new(BTreeMap::new());

fn figures_mut() -> MutexGuard<'static, BTreeMap<&'static str, WorkerFigures>> {
    FIGURES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every worker name that has run in this process, sorted, with its figures.
pub fn figures() -> Vec<(&'static str, WorkerFigures)> {
    figures_mut().iter().map(|(name, f)| (*name, *f)).collect()
}

pub(super) fn note_failure(name: &'static str) {
    figures_mut().entry(name).or_default().failures += 1;
}

/// Counts a loop as running from its start until it is dropped (returned, aborted or panicked).
pub(super) struct Running(&'static str);

impl Running {
    pub(super) fn new(name: &'static str) -> Running {
        figures_mut().entry(name).or_default().running += 1;
        Running(name)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut figures = figures_mut();
        let entry = figures.entry(self.0).or_default();
        entry.running = entry.running.saturating_sub(1);
    }
}
