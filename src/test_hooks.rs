//! Points where a test of the binary holds the server from outside, to make a crash or a
//! freeze happen exactly there (hidden `--test-hooks DIR`). Each point is a file in DIR: the
//! test creates one to ask for something and waits for one the server creates to say it got
//! there. Without the setting nothing here touches the disk.
//!
//! - `hold-log`: while it exists the log writes nothing (records queue, none is durable);
//!   `log-held` says the hold began.
//! - `take-snapshot`: removed, and a snapshot started, by the leader.
//! - `snapshot-cut`: every part of a snapshot is cut; it waits for the log to reach its cuts.
//! - `pause-snapshot-keep`: a snapshot kept in a database stops inside its transaction, the
//!   lease's row locked, until it is removed; `snapshot-keep-paused` says it stopped there.
//! - `snapshot-keep-failed` says a snapshot's keep in a database failed and what it leaves
//!   behind (its chunks, if the keep may have committed) is settled.
//! - `pause-promotion`: a standby that came to lead stops once it leads its first shard,
//!   before it recovers the others or serves, until it is removed; `promotion-paused` says
//!   it stopped there.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

static DIR: OnceLock<PathBuf> = OnceLock::new();

/// How often a held point looks again.
pub const POLL: Duration = Duration::from_millis(10);

/// Turns the hooks on for the life of the process (the binary's setting; in-process tests
/// never do, since several servers share one process).
pub fn enable(dir: PathBuf) {
    let _ = DIR.set(dir);
}

pub fn enabled() -> bool {
    DIR.get().is_some()
}

/// Whether the test asks for `point` now.
pub fn asked(point: &str) -> bool {
    DIR.get().is_some_and(|dir| dir.join(point).exists())
}

/// Whether the test asked for `point`, answering it (once).
pub fn take(point: &str) -> bool {
    DIR.get()
        .is_some_and(|dir| std::fs::remove_file(dir.join(point)).is_ok())
}

/// Tells the test the server got to `point`.
pub fn reached(point: &str) {
    if let Some(dir) = DIR.get() {
        if let Err(error) = std::fs::write(dir.join(point), b"") {
            tracing::error!(point, %error, "a test hook could not say it was reached");
        }
    }
}

/// Stops here, saying `paused`, while the test asks for `point`.
pub async fn pause_while(point: &str, paused: &str) {
    if !asked(point) {
        return;
    }
    reached(paused);
    while asked(point) {
        tokio::time::sleep(POLL).await;
    }
}

/// `pause_while`, for a blocking thread.
pub fn hold_while(point: &str, paused: &str) {
    if !asked(point) {
        return;
    }
    reached(paused);
    while asked(point) {
        std::thread::sleep(POLL);
    }
}
