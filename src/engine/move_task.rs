//! DLQ redrive tasks (StartMessageMoveTask and friends): a task's state, its handle and the
//! rules a start is checked against. The engine's operations on tasks are in `redrive`: it
//! moves one bounded step at a time, and the server calls `move_step` on a timer to pace the
//! task. Every change to a task is logged as its whole image, so a restart resumes running
//! tasks where they were.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::error::{EngineError, EngineResult};
use super::time::Timestamp;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveStatus {
    Running,
    Completed,
    Cancelled,
    Failed,
}

impl MoveStatus {
    pub fn parse(text: &str) -> Option<MoveStatus> {
        [
            MoveStatus::Running,
            MoveStatus::Completed,
            MoveStatus::Cancelled,
            MoveStatus::Failed,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MoveStatus::Running => "RUNNING",
            MoveStatus::Completed => "COMPLETED",
            MoveStatus::Cancelled => "CANCELLED",
            MoveStatus::Failed => "FAILED",
        }
    }
}

#[derive(Clone, Debug)]
pub struct MoveTask {
    pub id: String,
    pub source_arn: String,
    pub destination_arn: Option<String>,
    pub rate: Option<i64>,
    pub status: MoveStatus,
    pub moved: u64,
    pub to_move: u64,
    pub started_at: Timestamp,
    pub failure_reason: Option<String>,
}

impl MoveTask {
    /// The opaque handle, as AWS makes it: base64 of `{"taskId":…,"sourceArn":…}` (from
    /// handles observed on AWS).
    pub fn handle(&self) -> String {
        let json = serde_json::json!({"taskId": self.id, "sourceArn": self.source_arn});
        STANDARD.encode(json.to_string())
    }
}

/// (task id, source ARN) from a handle: AWS's form, or `id\nARN` as Orderly wrote them before
/// (handles a client still holds from then keep working).
pub fn decode_handle(handle: &str) -> Option<(String, String)> {
    let raw = String::from_utf8(STANDARD.decode(handle).ok()?).ok()?;
    if let Ok(serde_json::Value::Object(fields)) = serde_json::from_str(&raw) {
        let field = |name: &str| fields.get(name)?.as_str().map(String::from);
        return Some((field("taskId")?, field("sourceArn")?));
    }
    let (id, arn) = raw.split_once('\n')?;
    Some((id.to_string(), arn.to_string()))
}

/// Why a task failed: its source or a destination queue no longer exists.
pub const NO_QUEUE: &str = "AWS.SimpleQueueService.NonExistentQueue";

/// Default pace when the request names none (AWS optimises for speed; we stay bounded).
pub const DEFAULT_RATE: i64 = 500;

/// The queue key `parameter` (SourceArn, DestinationArn) names, if it is a well-formed SQS
/// ARN. Whether that queue exists is the caller's to check (`not_found`).
pub fn queue_in_arn<'a>(
    arn: &'a str,
    parameter: &str,
    namespaces: &super::namespace::Namespaces,
) -> EngineResult<&'a str> {
    let well_formed = arn.split(':').count() == 6 && arn.starts_with("arn:");
    if !well_formed {
        return Err(EngineError::invalid(format!(
            "You must use this format to specify the {parameter}: arn:<partition>:<service>:<region>:<account-id>:<resource-id>"
        )));
    }
    namespaces
        .key_in_arn("sqs", arn)
        .ok_or_else(|| not_found(parameter))
}

/// A move task's queue that does not exist.
pub fn not_found(parameter: &str) -> EngineError {
    EngineError::ResourceNotFound(format!(
        "The resource that you specified for the {parameter} parameter doesn't exist."
    ))
}

/// StartMessageMoveTask's first check of an existing source: some queue dead-letters into it.
pub fn check_source(has_dead_letter_sources: bool) -> EngineResult<()> {
    if has_dead_letter_sources {
        return Ok(());
    }
    Err(EngineError::invalid(
        "Source queue must be configured as a Dead Letter Queue.",
    ))
}

/// StartMessageMoveTask's checks after `check_source`: queue types (`destination_fifo` if a
/// destination is named; it exists) and the rate.
pub fn check_start(
    (source_fifo, destination_fifo): (bool, Option<bool>),
    rate: Option<i64>,
) -> EngineResult<()> {
    // FIFO messages need groups and standard ones must not keep them: types must match.
    if destination_fifo.is_some_and(|fifo| fifo != source_fifo) {
        return Err(EngineError::invalid(
            "The source queue and the destination queue must be of the same queue type.",
        ));
    }
    if let Some(r) = rate {
        if !(1..=500).contains(&r) {
            return Err(EngineError::invalid(format!(
                "Value {r} for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: Must be between 1 and 500."
            )));
        }
    }
    Ok(())
}

/// Refusal of a second running task for one source.
pub fn already_running() -> EngineError {
    EngineError::invalid(
        "There is already a task running. Only one active task is allowed for a source queue arn at a given time.",
    )
}

/// A handle that does not decode.
pub fn invalid_handle() -> EngineError {
    EngineError::invalid("Value for parameter TaskHandle is invalid.")
}

/// A handle that decodes but names no running task.
pub fn no_such_task() -> EngineError {
    EngineError::ResourceNotFound("Task does not exist.".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_of_both_forms_decode_and_others_do_not() {
        let arn = "arn:aws:sqs:us-east-1:000000000000:dlq";
        let aws = STANDARD.encode(format!(r#"{{"taskId":"t-1","sourceArn":"{arn}"}}"#));
        assert_eq!(decode_handle(&aws), Some(("t-1".into(), arn.into())));
        // As Orderly wrote them before: still honoured after an upgrade.
        let before = STANDARD.encode(format!("t-2\n{arn}"));
        assert_eq!(decode_handle(&before), Some(("t-2".into(), arn.into())));
        for garbage in ["not base64!", "", &STANDARD.encode(r#"{"taskId":1}"#)] {
            assert_eq!(decode_handle(garbage), None, "{garbage}");
        }
    }
}
