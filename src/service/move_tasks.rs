//! DLQ redrive tasks: the engine keeps their state; a tokio task here paces each one.

use std::sync::Arc;

use super::{RequestContext, Service};
use crate::engine::move_task::{MoveTask, DEFAULT_RATE};
use crate::protocol::sqs::*;
use crate::protocol::ApiError;

/// Steps per second of a running task; each step moves rate/10 messages.
const STEPS_PER_SECOND: i64 = 10;

fn task_wire(task: MoveTask) -> MoveTaskWire {
    let running = task.status == crate::engine::move_task::MoveStatus::Running;
    MoveTaskWire {
        task_handle: running.then(|| task.handle()),
        status: task.status.as_str().to_string(),
        source_arn: task.source_arn,
        destination_arn: task.destination_arn,
        max_number_of_messages_per_second: task.rate,
        approximate_number_of_messages_moved: task.moved,
        approximate_number_of_messages_to_move: task.to_move,
        failure_reason: task.failure_reason,
        started_timestamp: task.started_at.millis(),
    }
}

impl Service {
    /// Paces a running task on the server's clock until it completes, fails or is cancelled.
    fn run_move_task(self: &Arc<Self>, task: &MoveTask) {
        // Up to STEPS_PER_SECOND steps a second; slow rates move one message per longer step.
        let rate = task.rate.unwrap_or(DEFAULT_RATE).max(1);
        let budget = (rate + STEPS_PER_SECOND - 1) / STEPS_PER_SECOND;
        let period = (1000 * budget / rate) as u64;
        let budget = budget as usize;
        let service = Arc::clone(self);
        let (id, arn) = (task.id.clone(), task.source_arn.clone());
        let mut runners = self.move_runners.lock().unwrap_or_else(|p| p.into_inner());
        while runners.try_join_next().is_some() {}
        runners.spawn(async move {
            // Steps fall due on the server's clock; after a jump (a test moving it) the steps
            // owed are taken at once.
            let mut due = service.clock.now();
            loop {
                service.clock.sleep_until(due).await;
                due = due.plus_millis(period);
                let (touched, running) =
                    service
                        .engine
                        .move_step(&id, &arn, budget, service.clock.now());
                for name in touched {
                    if let Ok(entry) = service.engine.queue(&name) {
                        Self::wake(&entry);
                    }
                }
                if !running {
                    break;
                }
                // Steps owed after a jump come one after another: let other tasks in between.
                tokio::task::yield_now().await;
            }
        });
    }

    /// Stops every pacing task between two steps (a step runs without awaiting, so none is cut
    /// in half). The tasks stay Running in the engine and resume at the next start.
    pub async fn stop_move_tasks(&self) {
        let mut runners =
            std::mem::take(&mut *self.move_runners.lock().unwrap_or_else(|p| p.into_inner()));
        runners.abort_all();
        while runners.join_next().await.is_some() {}
    }

    /// Restarts the tasks that were running when the server stopped.
    pub fn resume_move_tasks(self: &Arc<Self>) {
        for task in self.engine.running_move_tasks() {
            tracing::info!(task = %task.id, source = %task.source_arn, moved = task.moved, "resuming message move task");
            self.run_move_task(&task);
        }
    }

    pub(super) fn start_message_move_task(
        self: &Arc<Self>,
        input: StartMessageMoveTaskInput,
        _ctx: &RequestContext,
    ) -> Result<StartMessageMoveTaskOutput, ApiError> {
        let source = input
            .source_arn
            .ok_or_else(|| ApiError::missing("SourceArn"))?;
        let task = self.engine.start_move_task(
            &source,
            input.destination_arn.as_deref(),
            input.max_number_of_messages_per_second,
            self.clock.now(),
        )?;
        self.run_move_task(&task);
        Ok(StartMessageMoveTaskOutput {
            task_handle: task.handle(),
        })
    }

    pub(super) fn list_message_move_tasks(
        &self,
        input: ListMessageMoveTasksInput,
        _ctx: &RequestContext,
    ) -> Result<ListMessageMoveTasksOutput, ApiError> {
        let source = input
            .source_arn
            .ok_or_else(|| ApiError::missing("SourceArn"))?;
        let max = input.max_results.unwrap_or(1);
        if !(1..=10).contains(&max) {
            return Err(ApiError::invalid(format!(
                "Value {max} for parameter MaxResults is invalid. Reason: Must be between 1 and 10, if provided."
            )));
        }
        let tasks = self.engine.list_move_tasks(&source)?;
        Ok(ListMessageMoveTasksOutput {
            results: tasks
                .into_iter()
                .take(max as usize)
                .map(task_wire)
                .collect(),
        })
    }

    pub(super) fn cancel_message_move_task(
        &self,
        input: CancelMessageMoveTaskInput,
        _ctx: &RequestContext,
    ) -> Result<CancelMessageMoveTaskOutput, ApiError> {
        let handle = input
            .task_handle
            .ok_or_else(|| ApiError::missing("TaskHandle"))?;
        let moved = self.engine.cancel_move_task(&handle)?;
        Ok(CancelMessageMoveTaskOutput {
            approximate_number_of_messages_moved: moved,
        })
    }
}
