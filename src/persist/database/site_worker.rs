//! A connection to one database of the shard map on a thread of its own, running the jobs it is
//! given one after another: whoever gives one waits for its answer no longer than it chooses,
//! so a database that does not answer holds up no work in another (a renewal of the leases
//! kept there, a survey's reading of them).

use std::sync::mpsc;
use std::time::Duration;

use super::connection::Blocking;
use crate::worker::Thread;

type Job = Box<dyn FnOnce(&mut Blocking) + Send>;

/// The thread, and where its jobs go. Dropped, it ends once the jobs given are done, and drops
/// the connection there (it owns a runtime, which must not be dropped inside another).
pub struct SiteWorker {
    jobs: mpsc::Sender<Job>,
    _thread: Thread<()>,
}

/// How often an idle worker looks whether it was told to stop.
const LOOK_EVERY: Duration = Duration::from_millis(200);

impl SiteWorker {
    /// Runs the jobs given to it on `db`, on a thread named `name`.
    pub fn start(name: &'static str, db: Blocking) -> std::io::Result<SiteWorker> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let thread = Thread::start(name, move |stop| {
            let mut db = db;
            loop {
                match queue.recv_timeout(LOOK_EVERY) {
                    // A job that panics ends itself alone: its asker's receiver disconnects.
                    Ok(job) => {
                        let run = std::panic::AssertUnwindSafe(|| job(&mut db));
                        let _ = std::panic::catch_unwind(run);
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    Err(mpsc::RecvTimeoutError::Timeout) if stop.wait(Duration::ZERO) => return,
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                }
            }
        })?;
        Ok(SiteWorker {
            jobs,
            _thread: thread,
        })
    }

    /// Runs `job` after every job given before; its answer comes on the receiver (which
    /// disconnects without one if the job panics or the thread has ended).
    pub fn ask<T: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Blocking) -> T + Send + 'static,
    ) -> mpsc::Receiver<T> {
        let (tell, answer) = mpsc::sync_channel(1);
        let _ = self.jobs.send(Box::new(move |db: &mut Blocking| {
            let _ = tell.send(job(db));
        }));
        answer
    }
}
