//! One commit for the writes of every shard a node leads. Each shard's log has a writer of its
//! own, and a request's batch seldom finds its shard's writer busy, so with a log per shard a
//! node would commit about once per request, paying a round trip and a wake-up for each.
//! Instead every shard's writer hands its write here (but a shard busy enough to fill commits
//! of its own, which inserts on its own connection), and one committer, a task on the node's
//! runtime, inserts whatever writes have come meanwhile in one statement
//! (`table_insert::Slot::insert_all`), each shard's rows fenced by its own lease: a shard
//! taken by another node has its rows refused while the others' are kept.
//!
//! At most as many statements are under way as the node's connections here
//! (`--database-inserts`); while they run, the next writes gather. A shard still has at most
//! `table_log::MOST_INSERTS` writes under way, so a torn tail stays one gap.
//!
//! With `--database-commit-wait`, while writes come steadily (one was handed over before the
//! last statement ended, or while another is under way), the next statement waits until that
//! long after the last one ended, so that more writes share it and the database commits less
//! often a message; a write that finds the commit idle goes at once. The wait is then the
//! node's, not each shard's: a shard's own writer waits for nothing when it hands its writes
//! here, since few shards are busy enough on their own to wait for, and the database pays per
//! commit whoever's writes it carries. Off by default: where the nodes' CPU rather than the
//! database's is short, the requests held longer cost more than the commits saved.
//!
//! A write handed over while its shard had no other under way is acknowledged here once every
//! row of it is kept (`writer::Acknowledge`): the log's durable point is raised by the
//! committer, and the shard's writer, asleep with nothing to write, is not woken for it. Nor is
//! it woken for the shard's next records while it sleeps so: the committer collects them
//! (`writer::Collect`), taking them from the shard's log and beginning their write itself, as
//! it gathers the next statement.

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::connection::{Failed, Session};
use super::table_insert::{Slot, Write};
use crate::persist::writer::{Acknowledge, Collect, Collector, Wake};

/// The outcome of a write: the number of its rows inserted.
pub(super) type Outcome = Result<u64, Failed>;

/// A write handed over, and whom to tell its outcome.
struct Handed {
    write: Write,
    /// When it was handed over: before the statement under way ended, or after.
    at: Instant,
    /// Declared before `answer`, so dropped first: a writer woken by an answer dropped untold
    /// finds the outcome gone, not yet to come.
    told: mpsc::SyncSender<Outcome>,
    answer: Answer,
}

/// What comes to the committer: a write, or a shard's log to collect records from
/// (and when that was asked).
enum Handing {
    Write(Handed),
    Collect(Collecting, Instant),
}

/// How a writer learns its write's outcome has come, beside the outcome itself. Dropped
/// untold (the committer gone with its runtime, and the write with it), it wakes the writer,
/// which finds the outcome's sender gone (`Handed::told`, dropped first) and fails the write,
/// rather than sleep on with it under way.
struct Answer {
    wake: Wake,
    /// Called in place of `wake` when the write was kept whole.
    acknowledge: Option<Acknowledge>,
    told: bool,
}

impl Answer {
    fn new(wake: Wake, acknowledge: Option<Acknowledge>) -> Answer {
        Answer {
            wake,
            acknowledge,
            told: false,
        }
    }

    /// Acknowledges the write where it was kept whole; otherwise wakes its writer to look.
    fn tell(mut self, kept: bool) {
        self.told = true;
        match self.acknowledge.take() {
            Some(acknowledge) if kept => acknowledge.succeeded(),
            _ => (self.wake)(),
        }
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if !self.told {
            (self.wake)();
        }
    }
}

/// A collect asked for. Dropped unrun (the committer gone with its runtime), it runs then: it
/// begins the shard's write, which finds the committer gone and wakes the writer, or leaves
/// the records to the writer, woken; either way the writer does not sleep on with them.
struct Collecting(Option<Collect>);

impl Collecting {
    fn run(mut self) {
        if let Some(collect) = self.0.take() {
            collect();
        }
    }
}

impl Drop for Collecting {
    fn drop(&mut self) {
        if let Some(collect) = self.0.take() {
            collect();
        }
    }
}

/// What comes to the committer, emptied when the committer goes (with its runtime). Dropped,
/// tokio's receiver empties its channel of what has landed, but a send under way at that
/// moment lands after, and stays as long as a sender lives (the shards' logs hold theirs): a
/// write there would never wake its writer. So this closes the channel, then takes what lands
/// until nothing more can.
pub(super) struct Inbox<T>(pub(super) UnboundedReceiver<T>);

impl<T> Drop for Inbox<T> {
    fn drop(&mut self) {
        self.0.close();
        loop {
            match self.0.try_recv() {
                Ok(handing) => drop(handing),
                // Closed, but a send begun before is still landing: it takes moments.
                Err(TryRecvError::Empty) => std::thread::yield_now(),
                Err(TryRecvError::Disconnected) => return,
            }
        }
    }
}

/// The node's committer of its shards' writes; it ends when the last handle goes.
pub struct SharedCommit {
    writes: UnboundedSender<Handing>,
    /// Whether its statements wait for more writes while they come steadily.
    waits: bool,
}

impl SharedCommit {
    /// Starts the committer, with `connections` connections like `session`, each statement
    /// waiting while writes come steadily until `wait` after the one before ended (no wait: at
    /// once). Called within a runtime (a node's, from its blocking pool), it commits on that
    /// runtime; outside one (tests, tools), on a thread of its own.
    pub fn start(
        session: Session,
        connections: usize,
        wait: Duration,
    ) -> std::io::Result<Arc<SharedCommit>> {
        let slots: Vec<Slot> = (0..connections.max(1))
            .map(|_| Slot::new(session.sibling()))
            .collect();
        let (writes, handed) = unbounded_channel();
        let committing = commit(Inbox(handed), slots, wait);
        // On the node's runtime a write handed over and its answer are tasks woken, where a
        // thread of its own was switched in for each: on nodes held to a quarter of a core, a
        // node spent about 1-9 % less CPU a message without that thread (measured).
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(committing)),
            Err(_) => {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                std::thread::Builder::new()
                    .name("orderly-log-commit".into())
                    .spawn(move || runtime.block_on(committing))?;
            }
        }
        Ok(Arc::new(SharedCommit {
            writes,
            waits: !wait.is_zero(),
        }))
    }

    /// Whether its statements wait for more writes while they come steadily
    /// (`--database-commit-wait`): the shards' writers then wait for nothing themselves.
    pub fn waits(&self) -> bool {
        self.waits
    }

    /// Hands `write` over; its outcome comes on the answer, after which `acknowledge` is
    /// called if given and the write was kept whole, `wake` otherwise.
    pub(super) fn insert(
        &self,
        write: Write,
        wake: &Wake,
        acknowledge: Option<Acknowledge>,
    ) -> mpsc::Receiver<Outcome> {
        let (told, outcome) = mpsc::sync_channel(1);
        let handed = Handed {
            write,
            at: Instant::now(),
            told,
            answer: Answer::new(wake.clone(), acknowledge),
        };
        if let Err(refused) = self.writes.send(Handing::Write(handed)) {
            // The committer is gone (its runtime failed or stopped): the write was never sent.
            let Handing::Write(Handed { told, answer, .. }) = refused.0 else {
                unreachable!("a write was sent");
            };
            let _ = told.send(Err(Failed {
                cause: "the node's committer of the log has stopped".into(),
                unknown_outcome: false,
                code: None,
                refused_at_connect: None,
            }));
            answer.tell(false);
        }
        outcome
    }

    /// Where a shard's log asks the committer to collect its records (`LogSink::collector`):
    /// held weakly, so that the logs do not keep the committer.
    pub(super) fn collector(shared: &Arc<SharedCommit>) -> Collector {
        let shared = Arc::downgrade(shared);
        Box::new(move |collect| {
            let Some(shared) = shared.upgrade() else {
                return false;
            };
            let asked = Handing::Collect(Collecting(Some(collect)), Instant::now());
            match shared.writes.send(asked) {
                Ok(()) => true,
                // Refused, it is the asker's to leave to the writer: not run here.
                Err(refused) => {
                    if let Handing::Collect(mut collecting, _) = refused.0 {
                        collecting.0.take();
                    }
                    false
                }
            }
        })
    }
}

/// The next write handed over, running the collects that come before it (each hands its
/// write over behind them); `None` once every handle is gone. A write a collect began counts
/// as handed over when the collect was asked for.
async fn next_write(handed: &mut UnboundedReceiver<Handing>) -> Option<Handed> {
    let mut asked: Option<Instant> = None;
    loop {
        match handed.recv().await? {
            Handing::Write(mut write) => {
                write.at = write.at.min(asked.unwrap_or(write.at));
                return Some(write);
            }
            Handing::Collect(collect, at) => {
                asked = Some(asked.map_or(at, |asked| asked.min(at)));
                collect.run();
            }
        }
    }
}

/// `next_write` without waiting: `None` once nothing more has come.
fn next_ready(handed: &mut UnboundedReceiver<Handing>) -> Option<Handed> {
    loop {
        match handed.try_recv().ok()? {
            Handing::Write(write) => return Some(write),
            Handing::Collect(collect, _) => collect.run(),
        }
    }
}

/// The most bytes of rows one statement carries: whatever came meanwhile beyond it waits for
/// the next, so that shards writing their backlogs at once after an outage are not sent as
/// one statement too large to finish within the insert's timeout, round after round.
const STATEMENT_BYTES: usize = 16 * 1024 * 1024;

/// A connection given back (`None`: its insert panicked, and it went with it), and when the
/// statement on it ended (`None`: it had none yet).
type Freed = (Option<Slot>, Option<Instant>);

/// Takes a free connection, then the writes handed over until then (up to `STATEMENT_BYTES`;
/// having waited for more as the module says when some were waiting already), and inserts them
/// in one statement on a task of its own, so the next writes gather while it runs.
async fn commit(mut handed: Inbox<Handing>, slots: Vec<Slot>, wait: Duration) {
    let Some(like) = slots.first().map(Slot::sibling) else {
        return;
    };
    let (freed, mut free) = unbounded_channel::<Freed>();
    for slot in slots {
        let _ = freed.send((Some(slot), None));
    }
    let mut carried: Option<Handed> = None;
    // Statements sent and not yet given back, and when the last one given back ended: with
    // two connections, the one just given back may not be the node's last.
    let mut under_way = 0usize;
    let mut last_ended: Option<Instant> = None;
    loop {
        // A slot whose insert panicked comes back as `None`: its connection went with it.
        let (slot, ended) = match free.recv().await {
            Some((Some(slot), ended)) => (slot, ended),
            Some((None, ended)) => (Slot::new(like.sibling()), ended),
            None => return,
        };
        if let Some(ended) = ended {
            under_way = under_way.saturating_sub(1);
            last_ended = last_ended.max(Some(ended));
        }
        let (first, full) = match carried.take() {
            Some(first) => (first, true),
            None => match next_write(&mut handed.0).await {
                Some(first) => (first, false),
                None => return,
            },
        };
        // Handed over before the last statement ended, or beside one under way, writes come
        // steadily: this one waits for more (the timer rounds up to its next millisecond). A
        // statement already filled by what was carried over waits for nothing.
        let steady = under_way > 0 || last_ended.is_some_and(|ended| first.at < ended);
        if let Some(ended) = last_ended.filter(|_| steady && !full && !wait.is_zero()) {
            tokio::time::sleep_until((ended + wait).into()).await;
        }
        let mut bytes = first.write.rows.bytes();
        let mut batch = vec![first];
        while let Some(more) = next_ready(&mut handed.0) {
            bytes += more.write.rows.bytes();
            if bytes > STATEMENT_BYTES {
                carried = Some(more);
                break;
            }
            batch.push(more);
        }
        under_way += 1;
        tokio::spawn(insert(slot, batch, freed.clone()));
    }
}

/// Inserts `batch` on `slot`, gives the slot back on `freed` and tells each writer its
/// outcome.
async fn insert(mut slot: Slot, batch: Vec<Handed>, freed: UnboundedSender<Freed>) {
    let (writes, answers): (Vec<Write>, Vec<_>) = batch
        .into_iter()
        .map(|handed| (handed.write, (handed.told, handed.answer)))
        .unzip();
    let count = writes.len();
    // On a task of its own, so that a panic there still gives the slot's place back and
    // answers the writers.
    let inserted = tokio::spawn(async move {
        let outcomes = slot.insert_all(&writes).await;
        let kept: Vec<bool> = outcomes
            .iter()
            .zip(&writes)
            .map(|(outcome, write)| write.rows.all_kept(outcome))
            .collect();
        (slot, outcomes, kept)
    })
    .await;
    let (outcomes, kept) = match inserted {
        Ok((slot, outcomes, kept)) => {
            // Freed before the writers are told, so their next writes find it.
            let _ = freed.send((Some(slot), Some(Instant::now())));
            (outcomes, kept)
        }
        Err(panicked) => {
            let _ = freed.send((None, Some(Instant::now())));
            let failed = Failed {
                cause: format!("an insert of the log ended without an answer: {panicked}"),
                unknown_outcome: true,
                code: None,
                refused_at_connect: None,
            };
            (vec![Err(failed); count], vec![false; count])
        }
    };
    for (((told, answer), outcome), kept) in answers.into_iter().zip(outcomes).zip(kept) {
        // Sent first, so that the writer finds the outcome when it looks.
        let _ = told.send(outcome);
        answer.tell(kept);
    }
}
