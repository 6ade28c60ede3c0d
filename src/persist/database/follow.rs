//! A standby following the log: a thread of its own loads the snapshot into the standby's
//! engine, then applies each batch the leader writes, looking every `POLL`. Coming to lead
//! then reads only what was written since the last look. The engine is fresh until the thread
//! first touches it; once it has, only the follower that touched it knows where it stands, so a
//! follower that cannot go on (a snapshot dropped batches it had not read yet, damage) asks for
//! a fresh engine rather than leaving one half applied.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::Client;

use super::connection::{Blocking, Work};
use super::recovery::Follower;
use crate::engine::Engine;
use crate::persist::RecoveryError;
use crate::worker::{Backoff, Stop, Thread};

/// How often a standby looks for batches it has not applied.
pub const POLL: Duration = Duration::from_millis(200);
/// The longest wait after the database failed to answer several times in a row (the first
/// is `POLL`).
const RETRY_MOST: Duration = Duration::from_secs(8);

/// Failures to follow are said once per cause per interval, not once a look.
static WARNINGS: std::sync::LazyLock<crate::quiet_log::QuietLog> =
    std::sync::LazyLock::new(Default::default);

/// Where a follower stands, for `GET /_orderly/cluster` and `/metrics`.
#[derive(Default)]
pub struct Progress {
    /// The sequence number of the next record to apply.
    applied: AtomicU64,
    /// One past the last record written, as last seen.
    written: AtomicU64,
}

impl Progress {
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    pub fn lag(&self) -> u64 {
        self.written
            .load(Ordering::Acquire)
            .saturating_sub(self.applied())
    }
}

/// What the thread left when it stopped.
pub enum Stopped {
    /// It never touched the engine: recovery starts from scratch.
    Untouched,
    /// Where it stood: recovery goes on from there.
    Following(Box<Follower>),
    /// It touched the engine and could not go on: only a fresh engine recovers.
    Spoiled,
}

/// The thread following the log into one engine.
pub struct Following {
    thread: Thread<Stopped>,
    pub progress: Arc<Progress>,
    /// Told when the engine is spoiled and the node should start over with a fresh one.
    pub spoiled: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Following {
    /// Follows the log of `shard` into `engine`. Dropped without `stop` (a standby's generation
    /// ended), the thread ends at its next look.
    pub fn start(
        config: tokio_postgres::Config,
        shard: i32,
        engine: Arc<Engine<Notify>>,
    ) -> std::io::Result<Following> {
        let progress = Arc::new(Progress::default());
        let spoiled = Arc::new(tokio::sync::watch::Sender::new(false));
        let thread = {
            let (progress, spoiled) = (progress.clone(), spoiled.clone());
            Thread::start("follower", move |stop| {
                let stopped = follow(config, shard, &engine, stop, &progress);
                if matches!(stopped, Stopped::Spoiled) {
                    spoiled.send_replace(true);
                }
                stopped
            })?
        };
        Ok(Following {
            thread,
            progress,
            spoiled,
        })
    }

    /// Stops following and says where it stood. Blocks until the thread is done.
    pub fn stop(&self) -> Stopped {
        // Stopped before, or the thread panicked (the engine then is in no known state).
        self.thread.stop().unwrap_or(Stopped::Spoiled)
    }
}

fn follow(
    config: tokio_postgres::Config,
    shard: i32,
    engine: &Engine<Notify>,
    stop: &Stop,
    progress: &Progress,
) -> Stopped {
    // Connecting and reading again after a failure wait longer each time, up to a few seconds.
    let mut backoff = Backoff::new("follower", POLL, RETRY_MOST);
    let warn = |cause: String| {
        if let Some(held_back) = WARNINGS.admit(&cause, std::time::Instant::now()) {
            tracing::warn!(%cause, held_back, "a standby could not follow the log");
        }
    };
    let mut db = loop {
        match Blocking::new(config.clone()) {
            Ok(db) => break db,
            Err(error) => warn(error.to_string()),
        }
        if stop.wait(backoff.failed()) {
            return Stopped::Untouched;
        }
    };
    backoff.succeeded();
    let mut follower = match Follower::start(&mut db, shard, engine) {
        Ok(follower) => follower,
        Err(error) => {
            warn(format!("loading the snapshot: {error}"));
            return Stopped::Spoiled;
        }
    };
    loop {
        let mut wait = POLL;
        match follower.catch_up(&mut db, engine) {
            Ok(_) => {
                backoff.succeeded();
                progress
                    .applied
                    .store(follower.next_lsn(), Ordering::Release);
                if let Some(written) = written(&mut db, shard) {
                    progress.written.store(written, Ordering::Release);
                }
            }
            // The database did not answer: nothing was applied; look again, later each time.
            Err(RecoveryError::Io(error)) => {
                warn(error.to_string());
                wait = backoff.failed();
            }
            Err(RecoveryError::LeftBehind { .. }) => {
                tracing::info!(
                    "a snapshot dropped batches this standby had not applied yet: starting \
                     over from it"
                );
                return Stopped::Spoiled;
            }
            Err(error) => {
                if follower.fell_behind(&mut db) {
                    tracing::info!(
                        "a snapshot dropped batches this standby had not applied yet: \
                         starting over from it"
                    );
                } else {
                    warn(format!("the log cannot be followed: {error}"));
                }
                return Stopped::Spoiled;
            }
        }
        if stop.wait(wait) {
            return Stopped::Following(Box::new(follower));
        }
    }
}

/// One past the last record the shard's log holds, if the database says.
fn written(db: &mut Blocking, shard: i32) -> Option<u64> {
    let last = db.run(
        super::connection::STARTUP_TIMEOUT,
        move |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                let row = client
                    .query_opt(
                        "SELECT last_lsn FROM log_batches WHERE shard = $1 \
                         ORDER BY first_lsn DESC LIMIT 1",
                        &[&shard],
                    )
                    .await?;
                Ok(row.map(|row| row.get::<_, i64>(0)))
            })
        },
    );
    match last {
        Ok(Some(last)) => Some(last as u64 + 1),
        _ => None,
    }
}
