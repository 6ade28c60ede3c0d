//! DLQ redrive tasks: the request checks; the backend stores and runs them.

use super::{RequestContext, Service};
use crate::backend::StartMove;
use crate::engine::move_task::{MoveStatus, MoveTask};
use crate::engine::namespace::Namespaces;
use crate::protocol::sqs::*;
use crate::protocol::{ApiError, ErrorCode};

fn task_wire(task: MoveTask) -> MoveTaskWire {
    let running = task.status == MoveStatus::Running;
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
    /// Move tasks are their queues' owner's alone ("Cross-account permissions don't apply to
    /// this action", SQS API reference). A queue of another region, or of another account that
    /// does not exist, is not found: AWS looks the queue up before it refuses (observed on AWS).
    async fn check_own_queue(
        &self,
        ctx: &RequestContext,
        arn: &str,
        parameter: &str,
    ) -> Result<(), ApiError> {
        let Some(namespace) = Namespaces::of_arn(arn) else {
            return Ok(());
        };
        if !ctx.authenticated || ctx.operator || namespace == ctx.namespace {
            return Ok(());
        }
        let not_found = || crate::engine::move_task::not_found(parameter).into();
        if namespace.region != ctx.namespace.region {
            return Err(not_found());
        }
        let Some(key) = self.namespaces.key_in_arn("sqs", arn) else {
            return Err(not_found());
        };
        match self.backend.find_queue(key).await {
            Ok(_) => {}
            Err(crate::backend::BackendError::Rejected(
                crate::engine::EngineError::QueueDoesNotExist,
            )) => return Err(not_found()),
            Err(other) => return Err(other.into()),
        }
        Err(ApiError::new(
            ErrorCode::AccessDenied,
            format!("Access to the resource {arn} is denied."),
        ))
    }
}

impl Service {
    pub(super) async fn start_message_move_task(
        &self,
        input: StartMessageMoveTaskInput,
        ctx: &RequestContext,
    ) -> Result<StartMessageMoveTaskOutput, ApiError> {
        let source = input
            .source_arn
            .ok_or_else(|| ApiError::missing("SourceArn"))?;
        self.check_own_queue(ctx, &source, "SourceArn").await?;
        if let Some(destination) = &input.destination_arn {
            self.check_own_queue(ctx, destination, "DestinationArn")
                .await?;
        }
        let task = self
            .backend
            .start_move_task(StartMove {
                source_arn: &source,
                destination_arn: input.destination_arn.as_deref(),
                rate: input.max_number_of_messages_per_second,
                elsewhere: Default::default(),
            })
            .await?;
        Ok(StartMessageMoveTaskOutput {
            task_handle: task.handle(),
        })
    }

    pub(super) async fn list_message_move_tasks(
        &self,
        input: ListMessageMoveTasksInput,
        ctx: &RequestContext,
    ) -> Result<ListMessageMoveTasksOutput, ApiError> {
        let source = input
            .source_arn
            .ok_or_else(|| ApiError::missing("SourceArn"))?;
        self.check_own_queue(ctx, &source, "SourceArn").await?;
        let max = input.max_results.unwrap_or(1);
        if !(1..=10).contains(&max) {
            return Err(ApiError::invalid(format!(
                "Value {max} for parameter MaxResults is invalid. Reason: Must be between 1 and 10, if provided."
            )));
        }
        let tasks = self.backend.list_move_tasks(&source).await?;
        Ok(ListMessageMoveTasksOutput {
            results: tasks
                .into_iter()
                .take(max as usize)
                .map(task_wire)
                .collect(),
        })
    }

    pub(super) async fn cancel_message_move_task(
        &self,
        input: CancelMessageMoveTaskInput,
        ctx: &RequestContext,
    ) -> Result<CancelMessageMoveTaskOutput, ApiError> {
        let handle = input
            .task_handle
            .ok_or_else(|| ApiError::missing("TaskHandle"))?;
        if let Some((_, source)) = crate::engine::move_task::decode_handle(&handle) {
            self.check_own_queue(ctx, &source, "SourceArn").await?;
        }
        let moved = self.backend.cancel_move_task(&handle).await?;
        Ok(CancelMessageMoveTaskOutput {
            approximate_number_of_messages_moved: moved,
        })
    }
}
