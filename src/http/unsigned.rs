//! Unsigned requests (no `Authorization` header, no SigV4 query parameters) may only read.
//! AWS answers every unsigned request `MissingAuthenticationToken`; Orderly keeps the read-only
//! actions open for hand-written scripts, and the two links SNS hands out unsigned (the
//! SubscribeURL's ConfirmSubscription and the UnsubscribeURL's Unsubscribe). So a web page a
//! developer opens, or a webhook pointed at Orderly itself, cannot change anything: an SDK and
//! the AWS CLI always sign.

use crate::protocol::{ApiError, ErrorCode, Protocol, SnsAction, SqsAction};
use crate::service::RequestContext;

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
    // Reads change nothing (ReceiveMessage changes visibility, so it is not one); the links
    // are what SNS's messages carry, which AWS serves unsigned even where signatures are
    // checked.
    let open = match protocol {
        Protocol::SnsQuery => {
            SnsAction::parse(action).is_some_and(|a| a.link() || (a.reads() && !strict))
        }
        Protocol::Json | Protocol::Query | Protocol::QueryJson => {
            !strict && SqsAction::parse(action).is_some_and(SqsAction::reads)
        }
    };
    if open {
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
            trace_header: None,
            scheme: "http",
            host: "localhost".into(),
            sender_id: "000000000000".into(),
            principal: "arn:aws:iam::000000000000:root".into(),
            request_id: "r".into(),
            namespace: crate::engine::namespace::Namespace::new("us-east-1", "000000000000"),
            operator: false,
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
