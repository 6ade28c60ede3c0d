//! Reading a request body within bounds: at most `max_bytes` are kept (judged from
//! Content-Length before anything is read, and again while it streams, for chunked bodies),
//! all within `timeout` of the headers. A body past the limit is read on and thrown away, up to
//! `DRAIN_FACTOR` times the limit, so the client gets its 413 instead of a connection reset
//! (closing a socket with unread data resets it); a larger one is cut off.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use http_body_util::BodyExt;

use crate::protocol::{ApiError, ErrorCode};

/// How much of an oversized body is read and discarded before giving up on a clean answer.
const DRAIN_FACTOR: u64 = 4;

#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    pub max_bytes: usize,
    pub timeout: Duration,
}

/// Why a body was not read; each is answered with an AWS-shaped error.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// `drained`: the rest of the body was read (and dropped), so the connection can go on.
    TooLarge {
        max_bytes: usize,
        drained: bool,
    },
    TimedOut,
    /// The client went away or sent a malformed chunked body; nobody is left to answer.
    Broken,
}

impl BodyError {
    pub fn to_api_error(&self) -> ApiError {
        match self {
            BodyError::TooLarge { max_bytes, .. } => ApiError::new(
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

    /// Unread bytes remain: the connection cannot carry another request.
    pub fn leaves_bytes_unread(&self) -> bool {
        !matches!(self, BodyError::TooLarge { drained: true, .. })
    }
}

/// Reads the whole body, or says why not.
pub async fn read(headers: &HeaderMap, body: Body, limits: BodyLimits) -> Result<Bytes, BodyError> {
    let max = limits.max_bytes as u64;
    let drain_cap = max.saturating_mul(DRAIN_FACTOR);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > drain_cap) {
        return Err(BodyError::TooLarge {
            max_bytes: limits.max_bytes,
            drained: false,
        });
    }
    let too_large = declared.is_some_and(|length| length > max);
    match tokio::time::timeout(limits.timeout, gather(body, max, drain_cap, too_large)).await {
        Err(_) => Err(BodyError::TimedOut),
        Ok(Err(error)) => Err(error),
        Ok(Ok(bytes)) => Ok(bytes),
    }
}

/// Keeps up to `max` bytes; past that (or from the start, when `too_large`) reads on and
/// discards, up to `drain_cap`.
async fn gather(
    mut body: Body,
    max: u64,
    drain_cap: u64,
    mut too_large: bool,
) -> Result<Bytes, BodyError> {
    let max_bytes = max as usize;
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BodyError::Broken)?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        total += data.len() as u64;
        if total > drain_cap {
            return Err(BodyError::TooLarge {
                max_bytes,
                drained: false,
            });
        }
        too_large |= total > max;
        if too_large {
            chunks.clear();
        } else {
            chunks.push(data);
        }
    }
    if too_large {
        return Err(BodyError::TooLarge {
            max_bytes,
            drained: true,
        });
    }
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().expect("one chunk"),
        _ => {
            let mut whole = Vec::with_capacity(total as usize);
            for chunk in &chunks {
                whole.extend_from_slice(chunk);
            }
            whole.into()
        }
    })
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
    async fn a_declared_length_past_the_limit_is_refused_and_drained_up_to_a_cap() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("5"));
        // The body itself is short: the declaration is judged, and what comes is drained.
        let error = read(&headers, Body::from("ab"), limits(4))
            .await
            .unwrap_err();
        assert_eq!(
            error,
            BodyError::TooLarge {
                max_bytes: 4,
                drained: true
            }
        );
        assert_eq!(error.to_api_error().code.status(), 413);
        assert!(!error.leaves_bytes_unread());
        // Declared past what is worth draining: refused without reading.
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("17"));
        let error = read(&headers, Body::new(Stalled), limits(4))
            .await
            .unwrap_err();
        assert_eq!(
            error,
            BodyError::TooLarge {
                max_bytes: 4,
                drained: false
            }
        );
        assert!(error.leaves_bytes_unread());
    }

    #[tokio::test]
    async fn an_undeclared_body_past_the_limit_is_drained_up_to_a_cap_then_cut_off() {
        let error = read(&HeaderMap::new(), Body::from("abcde"), limits(4))
            .await
            .unwrap_err();
        assert_eq!(
            error,
            BodyError::TooLarge {
                max_bytes: 4,
                drained: true
            }
        );
        let huge = Body::from("x".repeat(17));
        let error = read(&HeaderMap::new(), huge, limits(4)).await.unwrap_err();
        assert_eq!(
            error,
            BodyError::TooLarge {
                max_bytes: 4,
                drained: false
            }
        );
    }

    /// A body that arrives in the given pieces.
    struct Pieces(std::collections::VecDeque<Bytes>);

    impl http_body::Body for Pieces {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            std::task::Poll::Ready(self.0.pop_front().map(|b| Ok(http_body::Frame::data(b))))
        }
    }

    #[tokio::test]
    async fn a_body_in_many_pieces_is_joined() {
        let pieces = Pieces([Bytes::from_static(b"ab"), Bytes::from_static(b"cd")].into());
        let body = read(&HeaderMap::new(), Body::new(pieces), limits(4)).await;
        assert_eq!(body.unwrap(), Bytes::from_static(b"abcd"));
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
