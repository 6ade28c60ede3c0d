//! The log writer's batches as rows of `log_batches`: one insert per write, whatever the
//! number of records in it, committed before the writer reports them durable. A write of more
//! than `table_insert::ROW_BYTES` is cut, between records, into rows of at most that size, all
//! inserted by the one statement: a row that fits its page is cheaper for the database than
//! one cut into TOAST chunks with an index entry each.
//!
//! Two inserts may be under way at once (`--database-inserts 2`), each on a connection of its
//! own: while one commits, the next is sent, so a leader's commits are not paid one round trip
//! after another. The second may commit before the first, or the first fail after the second
//! committed: the log then has a gap with one write's rows after it. The writer acknowledges
//! nothing past a gap and writes the missing records again; recovery cuts a gap left by a
//! leader that stopped before it could (`recovery`).
//!
//! The insert reads the lease's row `FOR SHARE` and inserts only while its epoch is this
//! node's: a node taking the lease must wait for an insert already holding the row, and an
//! insert that comes after finds the new epoch and inserts nothing. So every batch a new
//! leader does not see when it reads the log after taking the lease was refused, and the log
//! never forks.
//!
//! In a database cut into shards, a log hands its writes to the node's commit shared by every
//! shard it leads (`shared_commit`), which inserts them with other shards' in one statement;
//! its own connection then asks what the log holds, and inserts the writes of a shard busy
//! enough to fill commits of its own (`LogSink::begin_busy`). The rules above hold per shard.
//!
//! An insert whose outcome is unknown (no answer, a connection lost mid-way), or one that
//! failed beside another, may have been kept: the next try first asks which of this epoch's
//! records the log holds and leaves those out.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use super::connection::{Blocking, Failed, Session};
use super::lease::Fence;
use super::shared_commit::{Outcome, SharedCommit};
use super::table_insert::{lsn_of, Rows, Slot, Write};
use crate::persist::log_error::LogError;
use crate::persist::writer::{Acknowledge, Collector, LogSink, Wake};

/// The most inserts that may be under way at once, each on a connection of its own: recovery
/// knows a torn tail by its one gap (`recovery`).
pub const MOST_INSERTS: usize = 2;

/// Records this large end a batch wait: a commit's fixed cost to the database (about 100 µs
/// of its CPU) is then small beside what the rows cost, so a busy log's clients that send
/// large requests (batches of ten messages) are not held back to fill a commit further, while
/// small records (receives, deletes) still wait to share one. Only for a log of its own (one
/// shard a database): a shard's writer on a node held to a fraction of a core spent a fifth
/// more of it a message, woken more often.
const BATCH_BYTES: u64 = 16 * 1024;

/// A write begun: its insert under way, answered already, or nothing left to insert.
enum UnderWay {
    Inserting {
        outcome: mpsc::Receiver<(Slot, Result<u64, Failed>)>,
        firsts: Vec<i64>,
    },
    Answered {
        answer: Result<u64, Failed>,
        firsts: Vec<i64>,
    },
    /// Handed to the node's shared commit.
    Handed {
        outcome: mpsc::Receiver<Outcome>,
        firsts: Vec<i64>,
    },
    Nothing,
}

pub struct TableLog {
    /// Runs the inserts: on a thread of its own while the writer's thread gathers the next
    /// write (inserts overlapping), or on the writer's thread (one at a time, or, when the
    /// writes go to a shared commit, the question of what the log holds and a busy shard's
    /// own inserts).
    runtime: tokio::runtime::Runtime,
    /// How many inserts may be under way at once.
    overlap: usize,
    /// Connections with no insert under way (with a shared commit, the one that asks what
    /// the log holds and inserts a busy shard's writes).
    idle: Vec<Slot>,
    /// A connection not made yet, to make more like it (one lost with its insert's task).
    like: Session,
    /// The first numbers of the rows of writes not known to be kept. A write tried again
    /// starts a row at each, so that one of them committing late (its answer lost, still
    /// running on the server) collides with it on `first_lsn`, the table's key, rather than
    /// holding records a row of the retry holds too.
    starts: BTreeSet<i64>,
    under_way: VecDeque<UnderWay>,
    fence: Fence,
    /// The sequence number of the first record not yet begun.
    next_lsn: u64,
    /// A failed insert may have been kept, or one beside it: ask what the log holds first.
    unsure: bool,
    deposed: bool,
    batch_wait: Duration,
    /// The node's commit shared by every shard it leads, which then inserts this log's
    /// writes but a busy shard's (`begin_busy`).
    shared: Option<Arc<SharedCommit>>,
}

impl TableLog {
    /// The shard's log led under `fence`, whose next record is numbered `next_lsn`, written
    /// through the connection `db` and, for `inserts` under way at once (at most
    /// `MOST_INSERTS`), more like it.
    pub fn new(
        db: Blocking,
        fence: Fence,
        next_lsn: u64,
        inserts: usize,
    ) -> std::io::Result<TableLog> {
        let overlap = inserts.clamp(1, MOST_INSERTS);
        let runtime = if overlap > 1 {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("orderly-log-insert")
                .enable_all()
                .build()?
        } else {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
        };
        let first = db.into_session();
        let like = first.sibling();
        let mut idle: Vec<Slot> = (1..overlap).map(|_| Slot::new(first.sibling())).collect();
        idle.push(Slot::new(first));
        Ok(TableLog {
            runtime,
            overlap,
            idle,
            like,
            starts: BTreeSet::new(),
            under_way: VecDeque::new(),
            fence,
            next_lsn,
            unsure: false,
            deposed: false,
            batch_wait: Duration::ZERO,
            shared: None,
        })
    }

    /// The shard's log as `new` makes it, its writes inserted by the node's `shared` commit:
    /// at most `inserts` of them under way at once, and `db` kept to ask what the log holds
    /// after a failure and to insert a busy shard's writes itself.
    pub fn sharing(
        db: Blocking,
        fence: Fence,
        next_lsn: u64,
        inserts: usize,
        shared: Arc<SharedCommit>,
    ) -> std::io::Result<TableLog> {
        // One connection of its own, driven on the writer's thread.
        let mut log = TableLog::new(db, fence, next_lsn, 1)?;
        log.overlap = inserts.clamp(1, MOST_INSERTS);
        log.shared = Some(shared);
        Ok(log)
    }

    /// Lets a busy writer wait this long after an insert before the next (`LogSink::batch_wait`),
    /// unless its writes share the node's commit and that commit waits itself
    /// (`--database-commit-wait`): one wait for the node's writes, not one a shard besides.
    pub fn waiting(self, batch_wait: Duration) -> TableLog {
        let batch_wait = match &self.shared {
            Some(shared) if shared.waits() => Duration::ZERO,
            _ => batch_wait,
        };
        TableLog { batch_wait, ..self }
    }

    /// As after an insert whose answer was lost (tests).
    #[cfg(test)]
    pub fn assume_unsure(&mut self) {
        self.unsure = true;
    }

    fn deposed(&mut self) -> LogError {
        self.deposed = true;
        Deposed(self.fence.epoch as u64).into()
    }

    /// The records of `records` the log does not hold yet, asking it first if unsure.
    fn fresh<'r>(&mut self, records: &[&'r [u8]]) -> Result<Vec<&'r [u8]>, LogError> {
        if !self.unsure {
            let next = self.next_lsn;
            return Ok(records
                .iter()
                .copied()
                .filter(|record| lsn_of(record) >= next)
                .collect());
        }
        debug_assert!(self.under_way.is_empty(), "asked with nothing under way");
        let Some(from) = records.first().map(|record| lsn_of(record)) else {
            return Ok(Vec::new());
        };
        let mut slot = self.idle.pop().expect("a connection is idle");
        // Only this epoch's batches: another leader's (after a takeover) hold records of the
        // same numbers that are not these.
        let fence = self.fence;
        let asked = self.runtime.block_on(slot.stored(fence, from));
        self.idle.push(slot);
        let (current, stored) = asked.map_err(failed)?;
        if current != fence.epoch {
            return Err(self.deposed());
        }
        self.unsure = false;
        let covered = |lsn: u64| {
            stored
                .iter()
                .any(|(first, last)| (*first..=*last).contains(&lsn))
        };
        // Below `from` every record was acknowledged: nothing there can still commit.
        self.starts
            .retain(|start| *start as u64 >= from && !covered(*start as u64));
        Ok(records
            .iter()
            .copied()
            .filter(|record| !covered(lsn_of(record)))
            .collect())
    }

    /// `LogSink::begin` (`here`: as `begin_write`), whose failure leaves the log unsure.
    fn begin_on(
        &mut self,
        records: &[&[u8]],
        wake: &Wake,
        acknowledge: Option<Acknowledge>,
        here: bool,
    ) -> Result<(), LogError> {
        let begun = self.begin_write(records, wake, acknowledge, here);
        if begun.is_err() {
            // Whatever was begun or numbered, the next try asks what the table holds.
            self.unsure = true;
        }
        begun
    }

    /// A write begun; `here`, on this log's own connection and thread even where its writes
    /// go to a shared commit.
    fn begin_write(
        &mut self,
        records: &[&[u8]],
        wake: &Wake,
        acknowledge: Option<Acknowledge>,
        here: bool,
    ) -> Result<(), LogError> {
        if self.deposed {
            return Err(Deposed(self.fence.epoch as u64).into());
        }
        let fresh = self.fresh(records)?;
        if let Some(last) = records.last() {
            self.next_lsn = self.next_lsn.max(lsn_of(last) + 1);
        }
        if fresh.is_empty() {
            self.under_way.push_back(UnderWay::Nothing);
            match acknowledge {
                Some(acknowledge) => acknowledge.succeeded(),
                None => wake(),
            }
            return Ok(());
        }
        let cut = Rows::cut(&fresh, &self.starts);
        let fence = self.fence;
        if let Some(shared) = self.shared.as_ref().filter(|_| !here) {
            if self.under_way.len() >= self.overlap {
                return Err(failed("more writes begun than may be under way"));
            }
            let firsts = cut.first.clone();
            self.starts.extend(&firsts);
            let outcome = shared.insert(Write { fence, rows: cut }, wake, acknowledge);
            self.under_way
                .push_back(UnderWay::Handed { outcome, firsts });
            return Ok(());
        }
        let Some(mut slot) = self.idle.pop() else {
            return Err(failed("more writes begun than may be under way"));
        };
        let firsts = cut.first.clone();
        self.starts.extend(&firsts);
        if self.overlap == 1 || here {
            // On this thread: no hand-over to another and back for each insert.
            let answer = self.runtime.block_on(slot.insert(&cut, fence));
            self.idle.push(slot);
            let kept = cut.all_kept(&answer);
            self.under_way
                .push_back(UnderWay::Answered { answer, firsts });
            match acknowledge {
                Some(acknowledge) if kept => acknowledge.succeeded(),
                _ => wake(),
            }
            return Ok(());
        }
        let (told, outcome) = mpsc::sync_channel(1);
        let wake = wake.clone();
        self.runtime.spawn(async move {
            let answer = slot.insert(&cut, fence).await;
            let kept = cut.all_kept(&answer);
            // Sent before the writer is woken, so that it finds the outcome when it looks.
            let _ = told.send((slot, answer));
            match acknowledge {
                Some(acknowledge) if kept => acknowledge.succeeded(),
                _ => wake(),
            }
        });
        self.under_way
            .push_back(UnderWay::Inserting { outcome, firsts });
        Ok(())
    }

    /// What an insert's answer means for the write whose rows start at `firsts`.
    fn judge(&mut self, answer: Result<u64, Failed>, firsts: &[i64]) -> Result<(), LogError> {
        match answer {
            Ok(count) if count == firsts.len() as u64 => {
                for first in firsts {
                    self.starts.remove(first);
                }
                Ok(())
            }
            // The lease's row was not this epoch's: nothing was inserted.
            Ok(_) => Err(self.deposed()),
            // Kept after all, perhaps (its answer lost, or a duplicate of an earlier try that
            // committed late), or another insert beside it was: which records the log holds
            // is asked before the next try.
            Err(failure) => {
                self.unsure = true;
                Err(failed(failure))
            }
        }
    }
}

/// Another node took the lease on the log: this node may never write it again.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("another node leads now: this node's lease on the log (epoch {0}) is over")]
pub struct Deposed(pub u64);

impl From<Deposed> for LogError {
    fn from(deposed: Deposed) -> LogError {
        LogError::Refused(Box::new(deposed))
    }
}

/// The epoch whose lease was over, if `result` is a table log's refusal for that reason.
#[cfg(test)]
pub fn deposed<T>(result: &Result<T, LogError>) -> Option<u64> {
    match result {
        Err(LogError::Refused(cause)) => cause.downcast_ref::<Deposed>().map(|d| d.0),
        _ => None,
    }
}

/// What came on `outcome`, waiting for it if `wait`: `None` while it has not come, `Some(None)`
/// if its sender is gone without sending.
fn received<T>(outcome: &mpsc::Receiver<T>, wait: bool) -> Option<Option<T>> {
    if wait {
        return Some(outcome.recv().ok());
    }
    match outcome.try_recv() {
        Ok(answer) => Some(Some(answer)),
        Err(mpsc::TryRecvError::Empty) => None,
        Err(mpsc::TryRecvError::Disconnected) => Some(None),
    }
}

fn failed(cause: impl std::fmt::Display) -> LogError {
    LogError::Io(std::io::Error::other(cause.to_string()))
}

impl LogSink for TableLog {
    /// One write alone: begun, then waited for (a write tried again after a failure).
    fn append(&mut self, records: &[&[u8]]) -> Result<(), LogError> {
        debug_assert!(self.under_way.is_empty(), "appended with nothing under way");
        self.begin(records, &(std::sync::Arc::new(|| {}) as Wake), None)?;
        self.finish(true).unwrap_or(Ok(()))
    }

    /// An insert is durable once it returns (it commits by itself).
    fn sync(&mut self) -> Result<(), LogError> {
        if self.deposed {
            return Err(Deposed(self.fence.epoch as u64).into());
        }
        Ok(())
    }

    fn overlap(&self) -> usize {
        self.overlap
    }

    /// Writes handed to a shared commit are finished on its thread.
    fn begins(&self) -> bool {
        self.overlap > 1 || self.shared.is_some()
    }

    fn begin(
        &mut self,
        records: &[&[u8]],
        wake: &Wake,
        acknowledge: Option<Acknowledge>,
    ) -> Result<(), LogError> {
        self.begin_on(records, wake, acknowledge, false)
    }

    /// A busy shard's write goes on its own connection, at once, rather than to the node's
    /// shared commit: its batch carries enough to be worth a commit of its own, and the
    /// writer spares the two thread switches of handing it over and being told its outcome
    /// (as a single leader's log writes, one insert at a time on its writer's thread).
    fn begin_busy(
        &mut self,
        records: &[&[u8]],
        wake: &Wake,
        acknowledge: Option<Acknowledge>,
    ) -> Result<(), LogError> {
        let here = self.shared.is_some() && self.under_way.is_empty();
        self.begin_on(records, wake, acknowledge, here)
    }

    fn finish(&mut self, wait: bool) -> Option<Result<(), LogError>> {
        // The oldest write's answer, if it was under way; `None` inside when its insert
        // ended without one (a panic), its connection gone with it.
        let answer = match self.under_way.front()? {
            UnderWay::Inserting { outcome, .. } => match received(outcome, wait)? {
                Some((slot, answer)) => {
                    self.idle.push(slot);
                    Some(answer)
                }
                None => {
                    self.idle.push(Slot::new(self.like.sibling()));
                    None
                }
            },
            UnderWay::Handed { outcome, .. } => received(outcome, wait)?,
            UnderWay::Answered { .. } | UnderWay::Nothing => None,
        };
        Some(match (self.under_way.pop_front()?, answer) {
            (UnderWay::Nothing, _) => Ok(()),
            (UnderWay::Answered { answer, firsts }, _) => self.judge(answer, &firsts),
            (
                UnderWay::Inserting { firsts, .. } | UnderWay::Handed { firsts, .. },
                Some(answer),
            ) => self.judge(answer, &firsts),
            (UnderWay::Inserting { .. } | UnderWay::Handed { .. }, None) => {
                self.unsure = true;
                Err(failed("an insert of the log ended without an answer"))
            }
        })
    }

    fn poisoned(&self) -> bool {
        self.deposed
    }

    /// Batches are numbered by their first record: what a snapshot covers is told by number.
    fn rotate(&mut self) -> Result<u64, LogError> {
        Ok(self.next_lsn)
    }

    /// The snapshot's own transaction drops the batches it covers (`snapshots`).
    fn remove_before(&mut self, _number: u64) -> Result<(), LogError> {
        Ok(())
    }

    fn batch_wait(&self) -> Duration {
        self.batch_wait
    }

    fn batch_bytes(&self) -> u64 {
        match self.shared {
            Some(_) => u64::MAX,
            None => BATCH_BYTES,
        }
    }

    fn durable_once_appended(&self) -> bool {
        true
    }

    /// The node's shared commit collects this log's records while the writer sleeps.
    fn collector(&self) -> Option<Collector> {
        self.shared.as_ref().map(SharedCommit::collector)
    }

    /// Unless the log must first ask what it holds (a blocking question, on the writer's
    /// thread), or may write no more.
    fn collectable(&self) -> bool {
        self.shared.is_some() && !self.unsure && !self.deposed
    }
}
