//! Moving messages out of a dead-letter queue: the engine's message move tasks started,
//! stepped at their pace, cancelled and listed. A task's own state and rules are in
//! `move_task`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::changes::{self, Change, ChangeLog};
use super::error::EngineResult;
use super::message::Message;
use super::move_task::{
    already_running, check_source, check_start, decode_handle, invalid_handle, no_such_task,
    not_found, queue_in_arn, MoveStatus, MoveTask, NO_QUEUE,
};
use super::namespace::Namespaces;
use super::queue::Moved;
use super::queues::{OtherShards, QueueEntry, Queues};
use super::time::Timestamp;

/// What only other shards can tell a move task's start: whether a queue there names the source
/// as its dead-letter queue, and whether a destination held there is FIFO (`None`: no such
/// queue there). With one shard, nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Elsewhere {
    pub dead_letter_sources: bool,
    pub destination_fifo: Option<bool>,
}

/// Every message move task, by source queue ARN, in start order.
pub struct MoveTasks {
    namespaces: Namespaces,
    tasks: Mutex<HashMap<String, Vec<MoveTask>>>,
    change_log: Option<Arc<dyn ChangeLog>>,
}

impl MoveTasks {
    pub fn new(namespaces: Namespaces) -> Self {
        MoveTasks {
            namespaces,
            tasks: Mutex::new(HashMap::new()),
            change_log: None,
        }
    }

    /// Logs every later change to `change_log`. Set before the first request.
    pub(super) fn set_log(&mut self, change_log: Arc<dyn ChangeLog>) {
        self.change_log = Some(change_log);
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<String, Vec<MoveTask>>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn queue_key_in_arn<'a>(&self, arn: &'a str, parameter: &str) -> EngineResult<&'a str> {
        queue_in_arn(arn, parameter, &self.namespaces)
    }

    pub fn start<W: Default>(
        &self,
        queues: &Queues<W>,
        source_arn: &str,
        (destination_arn, elsewhere): (Option<&str>, Elsewhere),
        rate: Option<i64>,
        now: Timestamp,
    ) -> EngineResult<MoveTask> {
        let source_key = self.queue_key_in_arn(source_arn, "SourceArn")?;
        let source = queues.get(source_key).map_err(|_| not_found("SourceArn"))?;
        let has_sources =
            elsewhere.dead_letter_sources || !queues.dead_letter_sources(source_key)?.is_empty();
        check_source(has_sources)?;
        let destination_fifo = match destination_arn {
            Some(dest) => {
                let key = self.queue_key_in_arn(dest, "DestinationArn")?;
                let fifo = match queues.get(key) {
                    Ok(destination) => destination.lock().is_fifo(),
                    Err(_) => elsewhere
                        .destination_fifo
                        .ok_or_else(|| not_found("DestinationArn"))?,
                };
                Some(fifo)
            }
            None => None,
        };
        let source_fifo = source.lock().is_fifo();
        check_start((source_fifo, destination_fifo), rate)?;
        let mut tasks = self.tasks();
        let list = tasks.entry(source_arn.to_string()).or_default();
        if list.iter().any(|t| t.status == MoveStatus::Running) {
            return Err(already_running());
        }
        let to_move = {
            let mut q = source.lock();
            q.tick(now);
            q.counts().visible as u64
        };
        let task = MoveTask {
            id: uuid::Uuid::new_v4().to_string(),
            source_arn: source_arn.to_string(),
            destination_arn: destination_arn.map(String::from),
            rate,
            status: MoveStatus::Running,
            moved: 0,
            to_move,
            started_at: now,
            failure_reason: None,
        };
        list.push(task.clone());
        keep_latest(list);
        self.log_move_task(&task);
        Ok(task)
    }

    /// Moves up to `budget` messages for a running task (a destination in another shard gets
    /// its messages through `others`). Returns the destination queue names that received
    /// messages here (to wake their long polls) and whether the task still runs.
    pub fn step<W: Default>(
        &self,
        (queues, others): (&Queues<W>, &dyn OtherShards),
        task_id: &str,
        source_arn: &str,
        budget: usize,
        now: Timestamp,
    ) -> (Vec<Arc<str>>, bool) {
        let task = {
            let tasks = self.tasks();
            match tasks
                .get(source_arn)
                .and_then(|l| l.iter().find(|t| t.id == task_id))
            {
                Some(t) if t.status == MoveStatus::Running => t.clone(),
                _ => return (Vec::new(), false),
            }
        };
        let Ok(source) = queues.get_by_arn(source_arn) else {
            self.finish_step(&task, MoveStatus::Failed, 0, Some(NO_QUEUE.into()));
            return (Vec::new(), false);
        };
        if !others.has_room() {
            // Other shards' parcels wait to be carried: the task pauses, still running.
            return (Vec::new(), true);
        }
        // The puts into the destinations, the removals after them and the task's new count
        // reach the log in one write: a crash keeps the whole step or none of it.
        let _atomic = changes::Atomic::new(self.change_log.as_deref());
        let remaining = task.to_move.saturating_sub(task.moved) as usize;
        let (messages, deferred) = {
            let mut q = source.lock();
            q.tick(now);
            let messages = q.take_visible(budget.min(remaining));
            (messages, q.defer_changes())
        };
        let mut touched = Vec::new();
        let mut moved = 0;
        let mut failed = None;
        for message in messages {
            match redrive((queues, others), &task, &source, message, now) {
                Redriven::Here(destination) => {
                    touched.push(destination);
                    moved += 1;
                }
                Redriven::Elsewhere => moved += 1,
                Redriven::Back => failed = Some(NO_QUEUE.to_string()),
            }
        }
        queues.submit(deferred);
        let done = task.moved + moved >= task.to_move || (moved == 0 && failed.is_none());
        match (failed, done) {
            (Some(reason), _) => self.finish_step(&task, MoveStatus::Failed, moved, Some(reason)),
            (None, true) => self.finish_step(&task, MoveStatus::Completed, moved, None),
            (None, false) => self.finish_step(&task, MoveStatus::Running, moved, None),
        }
        touched.dedup();
        let running = self
            .of_source(source_arn)
            .iter()
            .any(|t| t.id == task_id && t.status == MoveStatus::Running);
        (touched, running)
    }

    /// Counts a step's moves into the task and, if it still runs, gives it `status`; logged.
    fn finish_step(&self, task: &MoveTask, status: MoveStatus, moved: u64, reason: Option<String>) {
        let mut tasks = self.tasks();
        if let Some(t) = tasks
            .get_mut(&task.source_arn)
            .and_then(|l| l.iter_mut().find(|t| t.id == task.id))
        {
            t.moved += moved;
            if t.status == MoveStatus::Running {
                t.status = status;
                t.failure_reason = reason;
            }
            self.log_move_task(t);
        }
    }

    /// Tasks of a source queue, most recent first.
    pub fn of_source(&self, source_arn: &str) -> Vec<MoveTask> {
        let tasks = self.tasks();
        tasks
            .get(source_arn)
            .map(|l| l.iter().rev().cloned().collect())
            .unwrap_or_default()
    }

    pub fn list<W: Default>(
        &self,
        queues: &Queues<W>,
        source_arn: &str,
    ) -> EngineResult<Vec<MoveTask>> {
        let key = self.queue_key_in_arn(source_arn, "SourceArn")?;
        let source = queues.get(key).map_err(|_| not_found("SourceArn"))?;
        // Tasks of a queue deleted before this one was made under its name are not its own
        // (they were failed with it, so none of them runs).
        let created = source.lock().config().created_at;
        let mut tasks = self.of_source(source_arn);
        tasks.retain(|t| t.started_at >= created);
        Ok(tasks)
    }

    pub fn cancel<W: Default>(&self, queues: &Queues<W>, handle: &str) -> EngineResult<u64> {
        let (id, source_arn) = decode_handle(handle).ok_or_else(invalid_handle)?;
        let key = self.queue_key_in_arn(&source_arn, "SourceArn")?;
        queues.get(key).map_err(|_| not_found("SourceArn"))?;
        let mut tasks = self.tasks();
        let task = tasks
            .get_mut(&source_arn)
            .and_then(|l| {
                l.iter_mut()
                    .find(|t| t.id == id && t.status == MoveStatus::Running)
            })
            .ok_or_else(no_such_task)?;
        task.status = MoveStatus::Cancelled;
        self.log_move_task(task);
        Ok(task.moved)
    }

    /// Fails the tasks still running from a queue being deleted; logged, so a restart or a
    /// standby rebuilds them failed too.
    pub fn fail_source(&self, source_arn: &str) {
        let mut tasks = self.tasks();
        let Some(list) = tasks.get_mut(source_arn) else {
            return;
        };
        for task in list.iter_mut().filter(|t| t.status == MoveStatus::Running) {
            task.status = MoveStatus::Failed;
            task.failure_reason = Some(NO_QUEUE.into());
            self.log_move_task(task);
        }
    }

    /// Logs a task's new state; called under the task lock so the log keeps their order.
    fn log_move_task(&self, task: &MoveTask) {
        if let Some(change_log) = &self.change_log {
            change_log.submit(&Change::MoveTask(Box::new(task.clone())));
        }
    }

    /// Puts a logged or snapshotted task in place of the one with its id.
    pub fn restore(&self, task: MoveTask) {
        let mut tasks = self.tasks();
        let list = tasks.entry(task.source_arn.clone()).or_default();
        match list.iter_mut().find(|t| t.id == task.id) {
            Some(known) => *known = task,
            None => {
                list.push(task);
                // As `start` did when it logged this task: the same rule on the same states.
                keep_latest(list);
            }
        }
    }

    /// Every task in start order per source, with the log position the list is consistent
    /// with, for a snapshot.
    pub fn image(&self, next_lsn: impl Fn() -> u64) -> (u64, Vec<MoveTask>) {
        let tasks = self.tasks();
        let lsn = next_lsn();
        (lsn, tasks.values().flatten().cloned().collect())
    }

    /// Tasks to resume after a restart.
    pub fn running(&self) -> Vec<MoveTask> {
        let tasks = self.tasks();
        tasks
            .values()
            .flatten()
            .filter(|t| t.status == MoveStatus::Running)
            .cloned()
            .collect()
    }
}

/// Finished tasks kept per source queue: ListMessageMoveTasks shows at most 10.
const KEPT_PER_SOURCE: usize = 10;

/// Drops a source's oldest finished tasks past `KEPT_PER_SOURCE`, so tasks started again and
/// again do not pile up. A running task is never dropped (at most one runs per source).
fn keep_latest(list: &mut Vec<MoveTask>) {
    while list.len() > KEPT_PER_SOURCE {
        match list.iter().position(|t| t.status != MoveStatus::Running) {
            Some(oldest) => list.remove(oldest),
            None => break,
        };
    }
}

/// Where a move task's message went.
enum Redriven {
    /// Into the named queue.
    Here(Arc<str>),
    /// To the shard of its destination, which puts it back if the queue is gone there.
    Elsewhere,
    /// Back into the dead-letter queue as it was: its destination is gone.
    Back,
}

/// Moves one message to the task's destination (or back to the queue it was dead-lettered
/// from); if that is gone, puts the message back as it was.
fn redrive<W: Default>(
    (queues, others): (&Queues<W>, &dyn OtherShards),
    task: &MoveTask,
    source: &QueueEntry<W>,
    message: Message,
    now: Timestamp,
) -> Redriven {
    let target_arn = task
        .destination_arn
        .as_deref()
        .or(message.dead_letter_source_arn().map(|a| &**a));
    if let Some(target_arn) = target_arn.filter(|arn| others.hold(arn)) {
        // Owned: the ARN may be the message's own, which goes with it.
        let target_arn = target_arn.to_string();
        let dlq_arn: Arc<str> = task.source_arn.as_str().into();
        others.redrive(&target_arn, &dlq_arn, message);
        return Redriven::Elsewhere;
    }
    let target = target_arn.and_then(|arn| queues.get_by_arn(arn).ok());
    if let Some(entry) = target {
        entry.lock().accept_moved(message, Moved::Redrive, now);
        return Redriven::Here(entry.name.clone());
    }
    let how = match message.dead_letter_source_arn().cloned() {
        Some(arn) => Moved::DeadLetter(arn),
        None => Moved::Redrive,
    };
    source.lock().accept_moved(message, how, now);
    Redriven::Back
}
