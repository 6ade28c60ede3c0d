//! How a failure of storage is answered: refused before anything changed (503, retried), or of
//! unknown outcome (500). The cause is the operator's to read, in the server's log.

use crate::backend::BackendError;
use crate::protocol::{ApiError, ErrorCode};

/// Storage failures are said once per cause per interval (`quiet_log`), not once a request.
static STORAGE_WARNINGS: std::sync::LazyLock<crate::quiet_log::QuietLog> =
    std::sync::LazyLock::new(Default::default);

impl From<BackendError> for ApiError {
    fn from(e: BackendError) -> Self {
        match e {
            BackendError::Rejected(e) => e.into(),
            // Refused before anything was changed: a temporary failure (503), retried by SDKs.
            // The cause (a log that cannot be written, a database that cannot be reached) is
            // the operator's to read, logged here once, not the client's.
            BackendError::Unavailable(cause) => {
                if let Some(held_back) = STORAGE_WARNINGS.admit(&cause, std::time::Instant::now()) {
                    tracing::warn!(%cause, held_back, "storage unavailable: request refused");
                }
                ApiError::new(
                    ErrorCode::ServiceUnavailable,
                    "The change could not be persisted: storage is unavailable. Nothing of the request was kept; try again.",
                )
            }
            // Nothing was done here; the HTTP layer passes the request on to the shard's leader
            // and answers this only when it cannot (a request passed on already).
            BackendError::LedElsewhere(_) => ApiError::new(
                ErrorCode::ServiceUnavailable,
                "Another node leads this queue or topic and it could not be reached: nothing of the request was kept; try again.",
            ),
            // Not a failure of storage, and not one a retry here mends.
            BackendError::Across(_) => ApiError::new(
                ErrorCode::ServiceUnavailable,
                "This request needs queues or topics that other nodes lead, which this node cannot read yet; send it to the node that leads them.",
            ),
            // SQS calls it InternalFailure; SNS answers InternalError.
            BackendError::Unconfirmed(cause) => {
                if let Some(held_back) = STORAGE_WARNINGS.admit(&cause, std::time::Instant::now()) {
                    tracing::warn!(%cause, held_back, "storage did not confirm a change: outcome unknown");
                }
                ApiError::new(
                    ErrorCode::InternalFailure,
                    "Storage did not confirm the change: it may or may not have taken effect.",
                )
            }
        }
    }
}
