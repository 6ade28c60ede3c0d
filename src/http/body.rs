//! Reading a request body within bounds: at most `max_bytes` (judged from Content-Length
//! before anything is read, and again while it streams, for chunked bodies) and within
//! `timeout` of the headers. Nothing beyond the limit is ever buffered.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::protocol::{ApiError, ErrorCode};

#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    pub max_bytes: usize,
    pub timeout: Duration,
}

/// Why a body was not read; each is answered with an AWS-shaped error and the connection closed,
/// since the rest of the body is left unread.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    TooLarge {
        max_bytes: usize,
    },
    TimedOut,
    /// The client went away or sent a malformed chunked body; nobody is left to answer.
    Broken,
}

impl BodyError {
    pub fn to_api_error(&self) -> ApiError {
        match self {
            BodyError::TooLarge { max_bytes } => ApiError::new(
                ErrorCode::RequestEntityTooLarge,
                format!("Request bodies cannot be longer than {max_bytes} bytes."),
            ),
            BodyError::TimedOut => ApiError::new(
                ErrorCode::RequestTimeout,
                "The request body was not received in time.",
            ),
            BodyError::Broken => ApiError::new(
                ErrorCode::SerializationException,
                "The request body could not be read.",
            ),
        }
    }
}

/// Reads the whole body, or says why not.
pub async fn read(headers: &HeaderMap, body: Body, limits: BodyLimits) -> Result<Bytes, BodyError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limits.max_bytes as u64) {
        return Err(BodyError::TooLarge {
            max_bytes: limits.max_bytes,
        });
    }
    let limited = Limited::new(body, limits.max_bytes);
    match tokio::time::timeout(limits.timeout, limited.collect()).await {
        Err(_) => Err(BodyError::TimedOut),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) if error.is::<LengthLimitError>() => Err(BodyError::TooLarge {
            max_bytes: limits.max_bytes,
        }),
        Ok(Err(_)) => Err(BodyError::Broken),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn limits(max_bytes: usize) -> BodyLimits {
        BodyLimits {
            max_bytes,
            timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_whole() {
        let body = read(&HeaderMap::new(), Body::from("abcd"), limits(4)).await;
        assert_eq!(body.unwrap(), Bytes::from_static(b"abcd"));
    }

    #[tokio::test]
    async fn a_declared_length_past_the_limit_is_refused_before_reading() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("5"));
        // The body itself is short: only the declaration is judged.
        let error = read(&headers, Body::from("ab"), limits(4))
            .await
            .unwrap_err();
        assert_eq!(error, BodyError::TooLarge { max_bytes: 4 });
        assert_eq!(error.to_api_error().code.status(), 413);
    }

    #[tokio::test]
    async fn an_undeclared_body_is_cut_off_at_the_limit() {
        let error = read(&HeaderMap::new(), Body::from("abcde"), limits(4))
            .await
            .unwrap_err();
        assert_eq!(error, BodyError::TooLarge { max_bytes: 4 });
    }

    /// A body whose client sends nothing more.
    struct Stalled;

    impl http_body::Body for Stalled {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            std::task::Poll::Pending
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_times_out() {
        let error = read(&HeaderMap::new(), Body::new(Stalled), limits(4))
            .await
            .unwrap_err();
        assert_eq!(error, BodyError::TimedOut);
    }
}
