//! Errors the engine reports. Each names the AWS condition; the protocol layer picks the
//! wire code and HTTP status in one exhaustive match (see `protocol::error`).

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EngineError {
    #[error("The specified queue does not exist.")]
    QueueDoesNotExist,
    #[error("A queue already exists with the same name and a different value for attribute {0}")]
    QueueNameExists(String),
    /// Carries the seconds a deleted queue's name stays unavailable (AWS: 60).
    #[error("You must wait {0} seconds after deleting a queue before you can create another with the same name.")]
    QueueDeletedRecently(u64),
    #[error("Only one PurgeQueue operation on {0} is allowed every 60 seconds.")]
    PurgeQueueInProgress(String),
    /// The full AWS message is carried, since it varies by parameter.
    #[error("{0}")]
    InvalidParameterValue(String),
    /// Names the missing parameter.
    #[error("The request must contain the parameter {0}.")]
    MissingParameter(String),
    #[error("{0}")]
    InvalidAttributeName(String),
    #[error("{0}")]
    InvalidAttributeValue(String),
    /// Carries the offending handle.
    #[error("The input receipt handle \"{0}\" is not a valid receipt handle.")]
    ReceiptHandleIsInvalid(String),
    #[error("{0}")]
    InvalidMessageContents(String),
    #[error("{0}")]
    OverLimit(String),
    #[error("The message referred to is not in flight.")]
    MessageNotInflight,
    #[error("{0}")]
    ResourceNotFound(String),
    #[error("{0}")]
    UnsupportedOperation(String),
    /// SNS's generic validation error; carries the full message ("Invalid parameter: ...").
    #[error("{0}")]
    InvalidParameter(String),
    /// SNS: a message attribute broke a rule.
    #[error("{0}")]
    ParameterValueInvalid(String),
    /// SNS: topic or subscription unknown.
    #[error("{0}")]
    NotFound(String),
    /// SNS: a resource of the tagging or SMS sandbox APIs is unknown.
    #[error("{0}")]
    SnsResourceNotFound(String),
    /// SNS: a publish to a platform endpoint that is disabled.
    #[error("{0}")]
    EndpointDisabled(String),
    /// SNS: a publish through a platform application that is disabled.
    #[error("{0}")]
    PlatformApplicationDisabled(String),
    /// SNS: a sandbox number's one-time password did not match.
    #[error("{0}")]
    Verification(String),
    /// SNS: a request AWS refuses for the account's state (a full SMS sandbox).
    #[error("{0}")]
    UserError(String),
    #[error("{0}")]
    TagLimitExceeded(String),
    #[error("{0}")]
    FilterPolicyLimitExceeded(String),
    /// SNS: the caller may not do this (an unsigned Unsubscribe of a subscription confirmed
    /// with AuthenticateOnUnsubscribe).
    #[error("{0}")]
    AuthorizationError(String),
    /// SNS: more than the server keeps waiting (copies for other shards' queues).
    #[error("{0}")]
    Throttled(String),
}

/// SNS's refusal of a parameter (`InvalidParameter`); SQS's is `EngineError::invalid`.
pub fn invalid_parameter(message: impl Into<String>) -> EngineError {
    EngineError::InvalidParameter(message.into())
}

impl EngineError {
    pub fn invalid(message: impl Into<String>) -> Self {
        EngineError::InvalidParameterValue(message.into())
    }

    pub fn missing(parameter: &str) -> Self {
        EngineError::MissingParameter(parameter.to_string())
    }
}

pub type EngineResult<T> = Result<T, EngineError>;
