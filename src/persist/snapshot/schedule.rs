//! When to snapshot: whenever the log holds enough history to be worth compacting, so disk use
//! and restart time follow live data rather than history.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::engine::Engine;
use crate::persist::writer::LogWriter;
use crate::persist::DataDir;
use crate::worker::Backoff;

/// Wait after a failed snapshot before the next try, doubled while snapshots go on failing,
/// up to the longest; and between two looks for room on the disk.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MOST: Duration = Duration::from_secs(16);

/// Where snapshots are kept: the data directory, or the database (`persist::database`).
pub trait SnapshotStore: Send + Sync + 'static {
    /// Writes a snapshot of `engine`, makes it the one recovery reads, and lets the log drop
    /// what it covers; returns where it went and its size in bytes.
    fn take(
        &self,
        engine: &Engine<Notify>,
        log_writer: &LogWriter,
    ) -> std::io::Result<(String, u64)>;
    /// Bytes of room there is for a snapshot, if the store can say.
    fn free_bytes(&self) -> Option<u64> {
        None
    }
    /// The log closed: a data directory notes a clean stop if every record was synced.
    fn log_closed(&self, _log_writer: &LogWriter) {}
}

impl SnapshotStore for DataDir {
    fn take(
        &self,
        engine: &Engine<Notify>,
        log_writer: &LogWriter,
    ) -> std::io::Result<(String, u64)> {
        let path = super::take(&self.path, engine, log_writer)?;
        let size = std::fs::metadata(&path)?.len();
        Ok((path.display().to_string(), size))
    }

    fn free_bytes(&self) -> Option<u64> {
        free_bytes(&self.path)
    }

    fn log_closed(&self, log_writer: &LogWriter) {
        crate::persist::clean_stop::note(&self.path, log_writer);
    }
}

/// Takes the snapshots of one log.
pub struct Snapshotter {
    engine: Arc<Engine<Notify>>,
    log_writer: Arc<LogWriter>,
    store: Box<dyn SnapshotStore>,
    /// `Engine::stored_bytes` as the last snapshot left it (before the log was replayed).
    live_at_snapshot: u64,
    /// `--snapshot-after`: bytes of history that make a snapshot due.
    after: u64,
    /// Held while a snapshot is taken; true once `finish` ran (no snapshot starts after).
    taking: std::sync::Mutex<bool>,
    /// Given by `finish`: the task taking snapshots ends.
    finished: tokio::sync::Notify,
}

impl Snapshotter {
    pub fn new(
        engine: Arc<Engine<Notify>>,
        log_writer: Arc<LogWriter>,
        store: Box<dyn SnapshotStore>,
        live_at_snapshot: u64,
        after: u64,
    ) -> Self {
        Snapshotter {
            engine,
            log_writer,
            store,
            live_at_snapshot,
            after,
            taking: std::sync::Mutex::new(false),
            finished: tokio::sync::Notify::new(),
        }
    }

    /// Waits for a snapshot being taken to end (blocks): a stopping server closes its log only
    /// after, so no snapshot is kept once it has stopped.
    pub fn finish(&self) {
        *self.taking.lock().unwrap_or_else(|p| p.into_inner()) = true;
        // A permit kept for the task if it is not waiting now.
        self.finished.notify_one();
    }

    /// The data directory's snapshots, which keep it locked while they live.
    pub fn of_dir(engine: Arc<Engine<Notify>>, data: DataDir, after: u64) -> Self {
        let log_writer = data.log_writer.clone();
        let live = data.live_at_snapshot;
        Self::new(engine, log_writer, Box::new(data), live, after)
    }

    pub fn log_writer(&self) -> &Arc<LogWriter> {
        &self.log_writer
    }

    /// Closes the log once everything queued is written (blocks).
    pub fn close(&self) {
        self.log_writer.close();
        self.store.log_closed(&self.log_writer);
    }

    /// Writes a snapshot now and lets the log drop what it covers; returns its size in bytes.
    pub fn take(&self) -> std::io::Result<u64> {
        let finished = self.taking.lock().unwrap_or_else(|p| p.into_inner());
        if *finished {
            // The server is stopping: its log may be closed already.
            return Err(std::io::Error::other("the server is stopping"));
        }
        let started = Instant::now();
        let metrics = self.log_writer.metrics();
        let began_at = metrics.bytes.get();
        let (path, size) = self.store.take(&self.engine, &self.log_writer)?;
        metrics.snapshot_kept(began_at);
        metrics.snapshots.inc();
        metrics
            .snapshot_seconds
            .observe(started.elapsed().as_secs_f64());
        tracing::info!(
            path = %path,
            size,
            millis = started.elapsed().as_millis() as u64,
            "snapshot written"
        );
        Ok(size)
    }

    /// Snapshots whenever one is due; runs until aborted or finished (`finish`).
    pub async fn run(self: Arc<Self>) {
        let log_writer = &self.log_writer;
        let mut last_size = 0;
        let mut live_at_last = self.live_at_snapshot;
        // The least log that could make a snapshot due; the writer wakes this task when the
        // log reaches it (no polling).
        let mut wait_for = self.after;
        // Said once for each time the disk runs short.
        let mut short_of_room = false;
        let mut backoff = Backoff::new("snapshots", RETRY_FIRST, RETRY_MOST);
        loop {
            // Finished (its shard handed to another node, or the server stopping): no
            // snapshot is taken from now on.
            tokio::select! {
                biased;
                () = self.finished.notified() => return,
                () = log_writer.log_reaches(wait_for) => {}
            }
            let live = self.engine.queues.stored_bytes();
            let threshold = self.after.max(last_size);
            let log_bytes = log_writer.bytes_since_snapshot();
            let growth = live.saturating_sub(live_at_last);
            if !due(log_bytes, growth, threshold) {
                // History must reach the threshold: at least this much more log is needed.
                let history = log_bytes.saturating_sub(growth);
                wait_for = log_bytes + threshold.saturating_sub(history).max(1);
                continue;
            }
            // A snapshot that cannot fit would only take the log's room while it is written.
            let least = self.engine.queues.payload_bytes();
            if self.store.free_bytes().is_some_and(|free| free < least) {
                log_writer.metrics().snapshot_failed(true);
                if !short_of_room {
                    tracing::warn!(
                        needs_at_least = least,
                        "no room for a snapshot on the data directory's disk; the log keeps \
                         growing until there is"
                    );
                    short_of_room = true;
                }
                // Not a failure of the snapshotter: the room is looked for again each second.
                tokio::time::sleep(RETRY_FIRST).await;
                continue;
            }
            short_of_room = false;
            let taking = self.clone();
            match tokio::task::spawn_blocking(move || taking.take()).await {
                Ok(Ok(size)) => {
                    backoff.succeeded();
                    last_size = size;
                    live_at_last = live;
                    wait_for = self.after.max(last_size);
                }
                Ok(Err(error)) => {
                    log_writer.metrics().snapshot_failed(false);
                    tracing::error!(%error, "snapshot failed; the log keeps growing");
                    // An I/O failure (disk full, say): try again later, not at once.
                    tokio::time::sleep(backoff.failed()).await;
                }
                Err(error) => {
                    log_writer.metrics().snapshot_failed(false);
                    tracing::error!(%error, "snapshot task failed");
                    tokio::time::sleep(backoff.failed()).await;
                }
            }
        }
    }
}

/// Bytes the filesystem holding `dir` has for this process, if it says.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    let stats = rustix::fs::statvfs(dir).ok()?;
    Some(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// A snapshot pays once the log written since the last one holds at least `threshold` bytes
/// of history: records of messages since deleted, and other changes. The part that only
/// added live messages (`live_growth`) is left out: a snapshot would write those messages
/// again, about as many bytes as the log already holds, and shorten neither the disk nor the
/// restart. So a queue filling up is never snapshotted over and over (each snapshot larger
/// than the last), which cost a durable send load a sixth of the server's CPU.
fn due(log_bytes: u64, live_growth: u64, threshold: u64) -> bool {
    log_bytes.saturating_sub(live_growth) >= threshold
}

#[cfg(test)]
mod tests {
    use super::due;

    #[test]
    fn a_snapshot_waits_for_history_not_for_growth() {
        const MIB: u64 = 1 << 20;
        // Steady send and delete: everything logged is history.
        assert!(due(64 * MIB, 0, 64 * MIB));
        assert!(!due(63 * MIB, 0, 64 * MIB));
        // A filling queue: the log is the new messages themselves.
        assert!(!due(500 * MIB, 490 * MIB, 64 * MIB));
        assert!(due(600 * MIB, 500 * MIB, 64 * MIB));
        // More growth than log (estimates are approximate) is no history at all.
        assert!(!due(10 * MIB, 20 * MIB, 1));
    }
}
