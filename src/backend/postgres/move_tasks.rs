//! Message move tasks on PostgreSQL (schema: `migrations/003_move_tasks.sql`). The node that
//! starts a task paces it; each step is one transaction that locks the task's row, takes up
//! to its budget of visible messages from the source and stores them in their destination, so
//! a step is kept whole or not at all. The task's lease, renewed by each step, says which node
//! paces it: when a node stops or dies, another takes over once the lease lapses.

use std::collections::HashMap;

use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::Row;

use super::message_store::{message_of, notify, refresh_group, QueueRow, RECEIVED};
use super::queues::{millis, timestamp};
use super::statements::Cached;
use super::{unavailable, Postgres};
use crate::backend::{pacing, Answer, BackendError, BackendResult, MoveTasks, StartMove};
use crate::engine::message::Message;
use crate::engine::move_task::{
    already_running, check_source, check_start, decode_handle, invalid_handle, no_such_task,
    not_found, queue_in_arn, MoveStatus, MoveTask, NO_QUEUE,
};
use crate::engine::{EngineError, Timestamp};

/// How long a node holds a task without a step before another node may take it over.
const LEASE_MS: u64 = 30_000;
/// How often a node looks for tasks whose node stopped.
const CLAIM_PERIOD_MS: u64 = 5_000;

const COLUMNS: &str = "id, source_arn, destination_arn, rate, status, moved, to_move, \
                       started_at, failure_reason";

fn task_of(row: &Row) -> BackendResult<MoveTask> {
    let status: &str = row.get("status");
    Ok(MoveTask {
        id: row.get("id"),
        source_arn: row.get("source_arn"),
        destination_arn: row.get("destination_arn"),
        rate: row.get("rate"),
        status: MoveStatus::parse(status)
            .ok_or_else(|| unavailable(format!("unknown move task status {status}")))?,
        moved: row.get::<_, i64>("moved") as u64,
        to_move: row.get::<_, i64>("to_move") as u64,
        started_at: timestamp(row.get("started_at")),
        failure_reason: row.get("failure_reason"),
    })
}

/// What one step did.
struct Step {
    moved: u64,
    /// Why the task failed, if a queue it needs is gone.
    failed: Option<String>,
    /// Queues that received messages (their long polls are woken).
    touched: Vec<i64>,
}

impl Postgres {
    /// The existing queue an ARN parameter names.
    async fn arn_queue(
        &self,
        client: &impl GenericClient,
        arn: &str,
        parameter: &str,
    ) -> BackendResult<QueueRow> {
        let name = queue_in_arn(arn, parameter, &self.namespaces)?;
        match self.queue_row(client, name).await {
            Err(BackendError::Rejected(EngineError::QueueDoesNotExist)) => {
                Err(not_found(parameter).into())
            }
            other => other,
        }
    }

    async fn start(&self, request: &StartMove<'_>) -> BackendResult<MoveTask> {
        let now = self.clock.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        let source = self.arn_queue(&tx, request.source_arn, "SourceArn").await?;
        let has_sources = tx
            .maybe_row(
                "SELECT 1 FROM queues WHERE dead_letter_target_arn = $1 LIMIT 1",
                &[&request.source_arn],
            )
            .await
            .map_err(unavailable)?
            .is_some();
        check_source(has_sources)?;
        let destination_fifo = match request.destination_arn {
            Some(arn) => Some(
                self.arn_queue(&tx, arn, "DestinationArn")
                    .await?
                    .config
                    .fifo,
            ),
            None => None,
        };
        check_start((source.config.fifo, destination_fifo), request.rate)?;
        let to_move: i64 = tx
            .row(
                "SELECT count(*) FROM messages WHERE queue_uid = $1 AND visible_at <= $2",
                &[&source.uid, &millis(now)],
            )
            .await
            .map_err(unavailable)?
            .get(0);
        let task = MoveTask {
            id: uuid::Uuid::new_v4().to_string(),
            source_arn: request.source_arn.to_string(),
            destination_arn: request.destination_arn.map(String::from),
            rate: request.rate,
            status: MoveStatus::Running,
            moved: 0,
            to_move: to_move as u64,
            started_at: now,
            failure_reason: None,
        };
        let inserted = tx
            .run(
                "INSERT INTO move_tasks (id, source_arn, destination_arn, rate, status, to_move, \
                 started_at, runner, lease_until) VALUES ($1, $2, $3, $4, 'RUNNING', $5, $6, $7, $8) \
                 ON CONFLICT (source_arn) WHERE status = 'RUNNING' DO NOTHING",
                &[
                    &task.id,
                    &task.source_arn,
                    &task.destination_arn,
                    &task.rate,
                    &to_move,
                    &millis(now),
                    &self.node,
                    &millis(now.plus_millis(LEASE_MS)),
                ],
            )
            .await
            .map_err(unavailable)?;
        if inserted == 0 {
            return Err(already_running().into());
        }
        tx.commit().await.map_err(unavailable)?;
        Ok(task)
    }

    /// One step of a task this node paces: whether it still runs (and this node paces it).
    async fn move_step(&self, id: &str, budget: usize, now: Timestamp) -> BackendResult<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        let row = tx
            .maybe_row(
                &format!("SELECT {COLUMNS}, runner FROM move_tasks WHERE id = $1 FOR UPDATE"),
                &[&id],
            )
            .await
            .map_err(unavailable)?;
        let Some(row) = row else { return Ok(false) };
        let task = task_of(&row)?;
        let runner: Option<&str> = row.get("runner");
        if task.status != MoveStatus::Running || runner != Some(self.node.as_str()) {
            return Ok(false);
        }
        let step = match self.arn_queue(&tx, &task.source_arn, "SourceArn").await {
            Ok(source) => {
                let room = task.to_move.saturating_sub(task.moved) as usize;
                self.move_messages(&tx, &task, &source, budget.min(room), now)
                    .await?
            }
            Err(BackendError::Rejected(_)) => Step {
                moved: 0,
                failed: Some(NO_QUEUE.into()),
                touched: Vec::new(),
            },
            Err(other) => return Err(other),
        };
        let moved = task.moved + step.moved;
        let done = moved >= task.to_move || (step.moved == 0 && step.failed.is_none());
        let status = match (&step.failed, done) {
            (Some(_), _) => MoveStatus::Failed,
            (None, true) => MoveStatus::Completed,
            (None, false) => MoveStatus::Running,
        };
        tx.run(
            "UPDATE move_tasks SET moved = $2, status = $3, failure_reason = $4, lease_until = $5 \
             WHERE id = $1",
            &[
                &id,
                &(moved as i64),
                &status.as_str(),
                &step.failed,
                &millis(now.plus_millis(LEASE_MS)),
            ],
        )
        .await
        .map_err(unavailable)?;
        for uid in &step.touched {
            notify(&tx, *uid).await?;
        }
        tx.commit().await.map_err(unavailable)?;
        for uid in step.touched {
            self.wake(uid);
        }
        Ok(status == MoveStatus::Running)
    }

    /// Takes up to `limit` visible messages from the source (a FIFO queue's in group order,
    /// never past a message in flight) and stores each in the task's destination, or back in
    /// the queue it was dead-lettered from. One whose destination is gone goes back into the
    /// source, and the task fails.
    async fn move_messages(
        &self,
        tx: &Transaction<'_>,
        task: &MoveTask,
        source: &QueueRow,
        limit: usize,
        now: Timestamp,
    ) -> BackendResult<Step> {
        let messages = if source.config.fifo {
            take_fifo_heads(tx, source.uid, limit, now).await?
        } else {
            let sql = format!(
                "DELETE FROM messages WHERE queue_uid = $1 AND seq IN (SELECT seq FROM messages \
                 WHERE queue_uid = $1 AND visible_at <= $2 ORDER BY visible_at, seq LIMIT $3 \
                 FOR UPDATE SKIP LOCKED) RETURNING {RECEIVED}"
            );
            let mut rows = tx
                .rows(&sql, &[&source.uid, &millis(now), &(limit as i64)])
                .await
                .map_err(unavailable)?;
            rows.sort_by_key(|row| row.get::<_, i64>("seq"));
            rows.iter().map(message_of).collect::<BackendResult<_>>()?
        };
        let mut step = Step {
            moved: 0,
            failed: None,
            touched: Vec::new(),
        };
        let mut targets: HashMap<String, Option<QueueRow>> = HashMap::new();
        for mut message in messages {
            let arn = task
                .destination_arn
                .clone()
                .or_else(|| message.dead_letter_source_arn().map(|a| a.to_string()));
            let target = match arn {
                Some(arn) => {
                    if !targets.contains_key(&arn) {
                        let found = self.queue_at(tx, &arn).await?;
                        targets.insert(arn.clone(), found);
                    }
                    targets[&arn].as_ref()
                }
                None => None,
            };
            match target {
                Some(target) => {
                    message.redriven();
                    self.put_moved(tx, target, message, now).await?;
                    step.touched.push(target.uid);
                    step.moved += 1;
                }
                None => {
                    // Back into the source, still naming the queue it was dead-lettered from.
                    self.put_moved(tx, source, message, now).await?;
                    step.failed = Some(NO_QUEUE.into());
                }
            }
        }
        step.touched.sort_unstable();
        step.touched.dedup();
        Ok(step)
    }

    /// Paces a task this node holds, until it stops running here.
    fn run_move_task(&self, task: MoveTask) {
        let me = self.me.clone();
        let id = task.id.clone();
        self.move_runners.spawn(pacing::pace(
            self.clock.clone(),
            task.rate,
            move |budget, now| {
                let (me, id) = (me.clone(), id.clone());
                async move {
                    let Some(backend) = me.upgrade() else {
                        return false;
                    };
                    match backend.move_step(&id, budget, now).await {
                        Ok(running) => running,
                        Err(error) => {
                            // Tried again at the next step; the lease lets another node take
                            // over if this one cannot reach the database for long.
                            tracing::warn!(task = %id, %error, "message move step failed");
                            true
                        }
                    }
                }
            },
        ));
    }

    /// Takes over running tasks whose lease lapsed (their node stopped) and paces them here.
    async fn claim_lapsed(&self, now: Timestamp) -> BackendResult<()> {
        let client = self.client().await?;
        let rows = client
            .rows(
                &format!(
                    "UPDATE move_tasks SET runner = $1, lease_until = $2 \
                     WHERE status = 'RUNNING' AND lease_until <= $3 RETURNING {COLUMNS}"
                ),
                &[&self.node, &millis(now.plus_millis(LEASE_MS)), &millis(now)],
            )
            .await
            .map_err(unavailable)?;
        for row in &rows {
            let task = task_of(row)?;
            tracing::info!(task = %task.id, source = %task.source_arn, moved = task.moved, "resuming message move task");
            self.run_move_task(task);
        }
        Ok(())
    }
}

/// Removes up to `limit` visible FIFO group heads, a group's one after another (a group whose
/// head is in flight or delayed is skipped, as is one another transaction holds).
async fn take_fifo_heads(
    tx: &Transaction<'_>,
    uid: i64,
    limit: usize,
    now: Timestamp,
) -> BackendResult<Vec<Message>> {
    let mut taken = Vec::new();
    while taken.len() < limit {
        let group = tx
            .maybe_row(
                "SELECT group_id, head_seq FROM fifo_groups WHERE queue_uid = $1 \
                 AND available_at <= $2 ORDER BY available_at, head_seq LIMIT 1 \
                 FOR UPDATE SKIP LOCKED",
                &[&uid, &millis(now)],
            )
            .await
            .map_err(unavailable)?;
        let Some(group) = group else { break };
        let (group_id, head): (&str, i64) = (group.get(0), group.get(1));
        let row = tx
            .maybe_row(
                &format!(
                    "DELETE FROM messages WHERE queue_uid = $1 AND seq = $2 RETURNING {RECEIVED}"
                ),
                &[&uid, &head],
            )
            .await
            .map_err(unavailable)?;
        if let Some(row) = row {
            taken.push(message_of(&row)?);
        }
        refresh_group(tx, uid, group_id).await?;
    }
    Ok(taken)
}

impl MoveTasks for Postgres {
    fn start_move_task<'a>(&'a self, request: StartMove<'a>) -> Answer<'a, MoveTask> {
        Box::pin(async move {
            let task = self.start(&request).await?;
            self.run_move_task(task.clone());
            Ok(task)
        })
    }

    fn list_move_tasks<'a>(&'a self, source_arn: &'a str) -> Answer<'a, Vec<MoveTask>> {
        Box::pin(async move {
            let client = self.client().await?;
            self.arn_queue(&client, source_arn, "SourceArn").await?;
            let rows = client
                .rows(
                    &format!(
                        "SELECT {COLUMNS} FROM move_tasks WHERE source_arn = $1 \
                         ORDER BY started_at DESC, ord DESC"
                    ),
                    &[&source_arn],
                )
                .await
                .map_err(unavailable)?;
            rows.iter().map(task_of).collect()
        })
    }

    fn cancel_move_task<'a>(&'a self, handle: &'a str) -> Answer<'a, u64> {
        Box::pin(async move {
            let (id, source_arn) = decode_handle(handle).ok_or_else(invalid_handle)?;
            let client = self.client().await?;
            self.arn_queue(&client, &source_arn, "SourceArn").await?;
            let row = client
                .maybe_row(
                    "UPDATE move_tasks SET status = 'CANCELLED' \
                     WHERE id = $1 AND source_arn = $2 AND status = 'RUNNING' RETURNING moved",
                    &[&id, &source_arn],
                )
                .await
                .map_err(unavailable)?
                .ok_or_else(no_such_task)?;
            Ok(row.get::<_, i64>(0) as u64)
        })
    }

    fn resume_move_tasks(&self) {
        let me = self.me.clone();
        let clock = self.clock.clone();
        let claimer = async move {
            let mut due = clock.now();
            loop {
                clock.sleep_until(due).await;
                due = clock.now().plus_millis(CLAIM_PERIOD_MS);
                let Some(backend) = me.upgrade() else { return };
                if let Err(error) = backend.claim_lapsed(clock.now()).await {
                    tracing::warn!(%error, "cannot look for message move tasks to resume");
                }
            }
        };
        self.move_runners.spawn(claimer);
    }

    fn stop_move_tasks(&self) -> Answer<'_, ()> {
        Box::pin(async move {
            // Aborting a step between awaits drops its transaction, which rolls it back.
            self.move_runners.stop().await;
            // Another node may take this node's tasks over at once.
            let client = self.client().await?;
            client
                .run(
                    "UPDATE move_tasks SET lease_until = 0 WHERE runner = $1 AND status = 'RUNNING'",
                    &[&self.node],
                )
                .await
                .map_err(unavailable)?;
            Ok(())
        })
    }
}
