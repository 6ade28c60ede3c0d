//! Unsigned requests (no `Authorization` header, no SigV4 query parameters) may only read.
//! AWS answers every unsigned request `MissingAuthenticationToken`; Orderly keeps the read-only
//! actions open for hand-written scripts, and the two links SNS hands out unsigned (the
//! SubscribeURL's ConfirmSubscription and the UnsubscribeURL's Unsubscribe). So a web page a
//! developer opens, or a webhook pointed at Orderly itself, cannot change anything: an SDK and
//! the AWS CLI always sign.

use crate::protocol::{ApiError, ErrorCode, Protocol};
use crate::service::RequestContext;

/// SQS actions that change nothing (ReceiveMessage changes visibility, so it is not one).
const SQS_READS: &[&str] = &[
    "GetQueueUrl",
    "GetQueueAttributes",
    "ListQueues",
    "ListQueueTags",
    "ListDeadLetterSourceQueues",
    "ListMessageMoveTasks",
];

/// SNS actions that change nothing, and the links SNS's messages carry.
const SNS_OPEN: &[&str] = &[
    "ListTopics",
    "GetTopicAttributes",
    "ListSubscriptions",
    "ListSubscriptionsByTopic",
    "GetSubscriptionAttributes",
    "ListTagsForResource",
    "ConfirmSubscription",
    "Unsubscribe",
];

/// The links SNS hands out, which AWS serves unsigned even where signatures are checked.
const SNS_LINKS: &[&str] = &["ConfirmSubscription", "Unsubscribe"];

/// Refuses an unsigned request for an action outside the open ones; `strict` (with `--auth`)
/// leaves only the SNS links open.
pub fn check(
    ctx: &RequestContext,
    protocol: Protocol,
    action: &str,
    strict: bool,
) -> Result<(), ApiError> {
    if ctx.authenticated {
        return Ok(());
    }
    let open = match (protocol, strict) {
        (Protocol::SnsQuery, true) => SNS_LINKS,
        (_, true) => &[],
        (Protocol::Json | Protocol::Query, false) => SQS_READS,
        (Protocol::SnsQuery, false) => SNS_OPEN,
    };
    if open.contains(&action) {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::MissingAuthenticationToken,
        "Request is missing Authentication Token",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(authenticated: bool) -> RequestContext {
        RequestContext {
            authenticated,
            scheme: "http",
            host: "localhost".into(),
            sender_id: "000000000000".into(),
            request_id: "r".into(),
        }
    }

    #[test]
    fn unsigned_requests_only_read_or_follow_sns_links() {
        let unsigned = context(false);
        for (protocol, action) in [
            (Protocol::Query, "DeleteQueue"),
            (Protocol::Query, "ReceiveMessage"),
            (Protocol::Json, "SendMessage"),
            (Protocol::SnsQuery, "Publish"),
            (Protocol::SnsQuery, "Subscribe"),
            (Protocol::Query, "NoSuchAction"),
        ] {
            let error = check(&unsigned, protocol, action, false).unwrap_err();
            assert_eq!(
                error.code,
                ErrorCode::MissingAuthenticationToken,
                "{action}"
            );
            assert_eq!(error.code.status(), 403);
        }
        for (protocol, action) in [
            (Protocol::Query, "ListQueues"),
            (Protocol::Json, "GetQueueAttributes"),
            (Protocol::SnsQuery, "ConfirmSubscription"),
            (Protocol::SnsQuery, "Unsubscribe"),
        ] {
            assert!(
                check(&unsigned, protocol, action, false).is_ok(),
                "{action}"
            );
        }
        assert!(check(&context(true), Protocol::Query, "DeleteQueue", true).is_ok());
        // With --auth only the SNS links stay open.
        assert!(check(&unsigned, Protocol::SnsQuery, "ConfirmSubscription", true).is_ok());
        assert!(check(&unsigned, Protocol::SnsQuery, "Unsubscribe", true).is_ok());
        assert!(check(&unsigned, Protocol::Query, "ListQueues", true).is_err());
        assert!(check(&unsigned, Protocol::SnsQuery, "ListTopics", true).is_err());
    }
}
