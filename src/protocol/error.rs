//! API errors: where each condition gets its AWS code, fault type and HTTP status (a storage
//! failure's answer is chosen in `service/storage_error.rs`).
//! The matches are exhaustive (no catch-all), so a new error forces a decision.

use crate::engine::EngineError;

/// Every error code this server can answer with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    QueueDoesNotExist,
    QueueNameExists,
    QueueDeletedRecently,
    PurgeQueueInProgress,
    TooManyEntriesInBatchRequest,
    EmptyBatchRequest,
    BatchEntryIdsNotDistinct,
    BatchRequestTooLong,
    InvalidBatchEntryId,
    MessageNotInflight,
    UnsupportedOperation,
    OverLimit,
    ResourceNotFound,
    InvalidAttributeName,
    InvalidAttributeValue,
    ReceiptHandleIsInvalid,
    InvalidMessageContents,
    InvalidParameterValue,
    MissingParameter,
    InvalidAction,
    SerializationException,
    InternalFailure,
    /// Storage refused a change before making it (a log that cannot be written, a node that no
    /// longer leads): AWS's common error for a temporary failure, which SDKs retry.
    ServiceUnavailable,
    /// A request body past `--max-request-bytes` (AWS's front end answers 413 as well).
    RequestEntityTooLarge,
    /// A request body not received within `--body-timeout`.
    RequestTimeout,
    /// An unsigned request for an action that changes state.
    MissingAuthenticationToken,
    /// A browser's request from an origin, or by a host name, this server does not allow.
    AccessDenied,
    // SigV4 checking (`--auth`).
    IncompleteSignature,
    InvalidClientTokenId,
    SignatureDoesNotMatch,
    RequestExpired,
    /// Temporary credentials past their expiry (STS).
    ExpiredToken,
    // SNS
    InvalidParameter,
    ParameterValueInvalid,
    NotFound,
    SnsResourceNotFound,
    EndpointDisabled,
    PlatformApplicationDisabled,
    VerificationException,
    UserError,
    TagLimitExceeded,
    FilterPolicyLimitExceeded,
    AuthorizationError,
    /// SNS: more than the server keeps waiting.
    Throttled,
    ValidationError,
    // LocalStack's developer endpoint (`/_aws/sqs/messages`), answered as LocalStack answers.
    /// Any action but ReceiveMessage sent to the developer endpoint.
    InvalidRequest,
    /// A queue URL with no account and queue name in its path.
    InvalidAddress,
}

impl ErrorCode {
    /// (JSON `__type` shape with namespace, legacy Query code, HTTP status).
    pub fn wire(self) -> (&'static str, &'static str, u16) {
        use ErrorCode::*;
        match self {
            QueueDoesNotExist => (
                "com.amazonaws.sqs#QueueDoesNotExist",
                "AWS.SimpleQueueService.NonExistentQueue",
                400,
            ),
            QueueNameExists => (
                "com.amazonaws.sqs#QueueNameExists",
                "QueueAlreadyExists",
                400,
            ),
            QueueDeletedRecently => (
                "com.amazonaws.sqs#QueueDeletedRecently",
                "AWS.SimpleQueueService.QueueDeletedRecently",
                400,
            ),
            PurgeQueueInProgress => (
                "com.amazonaws.sqs#PurgeQueueInProgress",
                "AWS.SimpleQueueService.PurgeQueueInProgress",
                403,
            ),
            TooManyEntriesInBatchRequest => (
                "com.amazonaws.sqs#TooManyEntriesInBatchRequest",
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
                400,
            ),
            EmptyBatchRequest => (
                "com.amazonaws.sqs#EmptyBatchRequest",
                "AWS.SimpleQueueService.EmptyBatchRequest",
                400,
            ),
            BatchEntryIdsNotDistinct => (
                "com.amazonaws.sqs#BatchEntryIdsNotDistinct",
                "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
                400,
            ),
            BatchRequestTooLong => (
                "com.amazonaws.sqs#BatchRequestTooLong",
                "AWS.SimpleQueueService.BatchRequestTooLong",
                400,
            ),
            InvalidBatchEntryId => (
                "com.amazonaws.sqs#InvalidBatchEntryId",
                "AWS.SimpleQueueService.InvalidBatchEntryId",
                400,
            ),
            MessageNotInflight => (
                "com.amazonaws.sqs#MessageNotInflight",
                "AWS.SimpleQueueService.MessageNotInflight",
                400,
            ),
            UnsupportedOperation => (
                "com.amazonaws.sqs#UnsupportedOperation",
                "AWS.SimpleQueueService.UnsupportedOperation",
                400,
            ),
            OverLimit => ("com.amazonaws.sqs#OverLimit", "OverLimit", 403),
            ResourceNotFound => (
                "com.amazonaws.sqs#ResourceNotFoundException",
                "ResourceNotFoundException",
                404,
            ),
            InvalidAttributeName => (
                "com.amazonaws.sqs#InvalidAttributeName",
                "InvalidAttributeName",
                400,
            ),
            InvalidAttributeValue => (
                "com.amazonaws.sqs#InvalidAttributeValue",
                "InvalidAttributeValue",
                400,
            ),
            ReceiptHandleIsInvalid => (
                "com.amazonaws.sqs#ReceiptHandleIsInvalid",
                "ReceiptHandleIsInvalid",
                400,
            ),
            InvalidMessageContents => (
                "com.amazonaws.sqs#InvalidMessageContents",
                "InvalidMessageContents",
                400,
            ),
            InvalidParameterValue => (
                "com.amazon.coral.validate#InvalidParameterValueException",
                "InvalidParameterValue",
                400,
            ),
            MissingParameter => (
                "com.amazon.coral.service#MissingRequiredParameterException",
                "MissingParameter",
                400,
            ),
            InvalidAction => (
                "com.amazon.coral.service#UnknownOperationException",
                "InvalidAction",
                400,
            ),
            SerializationException => (
                "com.amazon.coral.service#SerializationException",
                "SerializationException",
                400,
            ),
            InternalFailure => (
                "com.amazon.coral.service#InternalFailure",
                "InternalFailure",
                500,
            ),
            ServiceUnavailable => (
                "com.amazon.coral.service#ServiceUnavailableException",
                "ServiceUnavailable",
                503,
            ),
            RequestEntityTooLarge => (
                "com.amazon.coral.service#RequestEntityTooLargeException",
                "RequestEntityTooLarge",
                413,
            ),
            RequestTimeout => (
                "com.amazon.coral.service#RequestTimeoutException",
                "RequestTimeout",
                408,
            ),
            MissingAuthenticationToken => (
                "com.amazon.coral.service#MissingAuthenticationTokenException",
                "MissingAuthenticationToken",
                403,
            ),
            AccessDenied => (
                "com.amazon.coral.service#AccessDeniedException",
                "AccessDenied",
                403,
            ),
            IncompleteSignature => (
                "com.amazon.coral.service#IncompleteSignatureException",
                "IncompleteSignature",
                400,
            ),
            InvalidClientTokenId => (
                "com.amazon.coral.service#InvalidClientTokenIdException",
                "InvalidClientTokenId",
                403,
            ),
            SignatureDoesNotMatch => (
                "com.amazon.coral.service#SignatureDoesNotMatchException",
                "SignatureDoesNotMatch",
                403,
            ),
            ExpiredToken => (
                "com.amazon.coral.service#ExpiredTokenException",
                "ExpiredToken",
                400,
            ),
            RequestExpired => (
                "com.amazon.coral.service#RequestExpiredException",
                "RequestExpired",
                400,
            ),
            InvalidParameter => ("InvalidParameter", "InvalidParameter", 400),
            ParameterValueInvalid => ("ParameterValueInvalid", "ParameterValueInvalid", 400),
            NotFound => ("NotFound", "NotFound", 404),
            SnsResourceNotFound => ("ResourceNotFound", "ResourceNotFound", 404),
            EndpointDisabled => ("EndpointDisabled", "EndpointDisabled", 400),
            PlatformApplicationDisabled => (
                "PlatformApplicationDisabled",
                "PlatformApplicationDisabled",
                400,
            ),
            VerificationException => ("VerificationException", "VerificationException", 400),
            UserError => ("UserError", "UserError", 400),
            TagLimitExceeded => ("TagLimitExceeded", "TagLimitExceeded", 400),
            FilterPolicyLimitExceeded => (
                "FilterPolicyLimitExceeded",
                "FilterPolicyLimitExceeded",
                403,
            ),
            AuthorizationError => ("AuthorizationError", "AuthorizationError", 403),
            Throttled => ("Throttled", "Throttled", 429),
            ValidationError => ("ValidationError", "ValidationError", 400),
            InvalidRequest => ("InvalidRequest", "InvalidRequest", 400),
            InvalidAddress => ("InvalidAddress", "InvalidAddress", 404),
        }
    }

    pub fn status(self) -> u16 {
        self.wire().2
    }

    /// The code batch results carry in `Failed[].Code` (the Query-style code).
    pub fn query_code(self) -> &'static str {
        self.wire().1
    }

    /// The code SNS writes: SQS's legacy `AWS.SimpleQueueService.` prefix does not apply, and
    /// SNS's generic server error is `InternalError`.
    pub fn sns_code(self) -> &'static str {
        let code = self.query_code();
        match self {
            ErrorCode::InternalFailure => "InternalError",
            // SNS's own 403 for a caller it will not serve.
            ErrorCode::AccessDenied => "AuthorizationError",
            _ => code.strip_prefix("AWS.SimpleQueueService.").unwrap_or(code),
        }
    }

    /// Server faults are "Receiver"; everything a client can fix is "Sender".
    pub fn fault(self) -> &'static str {
        if self.status() >= 500 {
            "Receiver"
        } else {
            "Sender"
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

/// What AWS says of a missing queue over JSON, and (longer) over Query. Source:
/// shared/spec/sqs.md §1.6, the Query error example and the note after it.
const NO_QUEUE_JSON: &str = "The specified queue does not exist.";
const NO_QUEUE_QUERY: &str = "The specified queue does not exist for this wsdl version.";

impl ApiError {
    /// The message as SQS's Query protocol words it.
    pub fn query_message(&self) -> &str {
        match self.code {
            ErrorCode::QueueDoesNotExist if self.message == NO_QUEUE_JSON => NO_QUEUE_QUERY,
            _ => &self.message,
        }
    }

    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::InvalidParameterValue, message)
    }

    pub fn missing(parameter: &str) -> Self {
        ApiError::new(
            ErrorCode::MissingParameter,
            format!("The request must contain the parameter {parameter}."),
        )
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let code = match &e {
            EngineError::QueueDoesNotExist => ErrorCode::QueueDoesNotExist,
            EngineError::QueueNameExists(_) => ErrorCode::QueueNameExists,
            EngineError::QueueDeletedRecently(_) => ErrorCode::QueueDeletedRecently,
            EngineError::PurgeQueueInProgress(_) => ErrorCode::PurgeQueueInProgress,
            EngineError::InvalidParameterValue(_) => ErrorCode::InvalidParameterValue,
            EngineError::MissingParameter(_) => ErrorCode::MissingParameter,
            EngineError::InvalidAttributeName(_) => ErrorCode::InvalidAttributeName,
            EngineError::InvalidAttributeValue(_) => ErrorCode::InvalidAttributeValue,
            EngineError::ReceiptHandleIsInvalid(_) => ErrorCode::ReceiptHandleIsInvalid,
            EngineError::InvalidMessageContents(_) => ErrorCode::InvalidMessageContents,
            EngineError::OverLimit(_) => ErrorCode::OverLimit,
            EngineError::MessageNotInflight => ErrorCode::MessageNotInflight,
            EngineError::ResourceNotFound(_) => ErrorCode::ResourceNotFound,
            EngineError::UnsupportedOperation(_) => ErrorCode::UnsupportedOperation,
            EngineError::InvalidParameter(_) => ErrorCode::InvalidParameter,
            EngineError::ParameterValueInvalid(_) => ErrorCode::ParameterValueInvalid,
            EngineError::NotFound(_) => ErrorCode::NotFound,
            EngineError::SnsResourceNotFound(_) => ErrorCode::SnsResourceNotFound,
            EngineError::EndpointDisabled(_) => ErrorCode::EndpointDisabled,
            EngineError::PlatformApplicationDisabled(_) => ErrorCode::PlatformApplicationDisabled,
            EngineError::Verification(_) => ErrorCode::VerificationException,
            EngineError::UserError(_) => ErrorCode::UserError,
            EngineError::TagLimitExceeded(_) => ErrorCode::TagLimitExceeded,
            EngineError::FilterPolicyLimitExceeded(_) => ErrorCode::FilterPolicyLimitExceeded,
            EngineError::AuthorizationError(_) => ErrorCode::AuthorizationError,
            EngineError::Throttled(_) => ErrorCode::Throttled,
        };
        ApiError::new(code, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_match_aws() {
        assert_eq!(ErrorCode::PurgeQueueInProgress.status(), 403);
        assert_eq!(ErrorCode::OverLimit.status(), 403);
        assert_eq!(ErrorCode::ResourceNotFound.status(), 404);
        assert_eq!(
            ErrorCode::QueueDoesNotExist.query_code(),
            "AWS.SimpleQueueService.NonExistentQueue"
        );
        assert_eq!(
            ErrorCode::QueueNameExists.query_code(),
            "QueueAlreadyExists"
        );
        assert_eq!(ErrorCode::InternalFailure.fault(), "Receiver");
    }
}
