//! Answers every endpoint gives the same way: an encoded action's response with its headers, an
//! error answered before the action is known, and the request's host and body within bounds.

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::body::{self, BodyLimits};
use super::node_headers;
use super::state::HttpState;
use crate::protocol::{encode_error, ApiError, Encoded, Protocol};

// Named once: inserting a header by a `&str` name copies the name into a new allocation.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-amzn-requestid");
const QUERY_ERROR: HeaderName = HeaderName::from_static("x-amzn-query-error");
const NOT_SERVED: HeaderName = HeaderName::from_static(node_headers::NOT_SERVED);

pub(super) fn respond(encoded: Encoded, request_id: &str) -> Response {
    let mut response = (
        StatusCode::from_u16(encoded.status).unwrap_or(StatusCode::BAD_REQUEST),
        encoded.body,
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(encoded.content_type),
    );
    if let Ok(id) = HeaderValue::from_str(request_id) {
        headers.insert(REQUEST_ID, id);
    }
    if let Some(code) = encoded
        .query_error
        .and_then(|c| HeaderValue::from_str(&c).ok())
    {
        headers.insert(QUERY_ERROR, code);
    }
    // 503 is only ever `ServiceUnavailable`: nothing of the request was kept, so a node that
    // passed it on may send it again (to the next leader, when this one lost its log).
    if encoded.status == 503 {
        headers.insert(NOT_SERVED, HeaderValue::from_static("1"));
    }
    response
}

/// The access key id and signing service from a SigV4 Authorization header
/// (`Credential=AKID/date/region/service/aws4_request`), borrowed from it.
pub(super) fn credential_scope(headers: &HeaderMap) -> (Option<&str>, Option<&str>) {
    let scope = headers
        .get(header::AUTHORIZATION)
        .and_then(|a| a.to_str().ok())
        .and_then(|a| a.split("Credential=").nth(1))
        .map(|c| c.split([',', ' ']).next().unwrap_or(""));
    let Some(scope) = scope else {
        return (None, None);
    };
    let mut parts = scope.split('/');
    let key = parts.next();
    (key, parts.nth(2))
}

/// Longest `Host` used in queue and subscription URLs: a DNS name (253) and a port.
const MAX_HOST_BYTES: usize = 260;

/// Where the console's actions are posted: SQS actions in the AWS JSON protocol only.
pub(super) const CONSOLE_ACTIONS: &str = "/_orderly/sqs";

/// An error answered before the action is known, in the protocol the headers point to.
pub(super) fn early_error(headers: &HeaderMap, error: &ApiError, request_id: &str) -> Response {
    respond(
        encode_error(protocol_of(headers), error, request_id),
        request_id,
    )
}

/// The protocol a request's headers point to.
fn protocol_of(headers: &HeaderMap) -> Protocol {
    if is_json(headers) {
        Protocol::Json
    } else if credential_scope(headers).1 == Some("sns") {
        Protocol::SnsQuery
    } else {
        Protocol::Query
    }
}

pub(super) fn is_json(headers: &HeaderMap) -> bool {
    headers.contains_key("x-amz-target")
        || headers
            .get(header::CONTENT_TYPE)
            .and_then(|c| c.to_str().ok())
            .is_some_and(|c| c.starts_with("application/x-amz-json"))
}

/// The request's host for the URLs Orderly hands out, if it is one a URL can hold.
pub(super) fn usable_host(headers: &HeaderMap, uri: &axum::http::Uri) -> Result<String, ApiError> {
    let host = headers
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{0}"))
        .or_else(|| uri.authority().map(|a| a.as_str()))
        .unwrap_or("localhost:4566");
    let fits = host.len() <= MAX_HOST_BYTES
        && !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b));
    if fits {
        Ok(host.to_string())
    } else {
        Err(ApiError::invalid(
            "The Host header is not a host name or address with an optional port.",
        ))
    }
}

/// The request's body within the bounds, or the error answering it.
pub(super) async fn read_body(
    state: &HttpState,
    headers: &HeaderMap,
    body: axum::body::Body,
    request_id: &str,
) -> Result<bytes::Bytes, Response> {
    let protocol = protocol_of(headers);
    read_as(protocol, headers, body, state.body, request_id).await
}

/// The request's body within the bounds, or the error answering it in `protocol`, for an
/// endpoint that speaks only one.
pub(super) async fn read_body_in(
    protocol: Protocol,
    state: &HttpState,
    headers: &HeaderMap,
    body: axum::body::Body,
    request_id: &str,
) -> Result<bytes::Bytes, Response> {
    read_as(protocol, headers, body, state.body, request_id).await
}

/// A request's body within `limits`, or the AWS error for one past them (its connection then
/// closed when bytes are left unread).
pub(super) async fn read_limited(
    path: &str,
    headers: &HeaderMap,
    body: axum::body::Body,
    limits: BodyLimits,
    request_id: &str,
) -> Result<bytes::Bytes, Response> {
    // The console's actions speak only the AWS JSON protocol, whatever the headers say.
    let protocol = match path {
        CONSOLE_ACTIONS => Protocol::Json,
        _ => protocol_of(headers),
    };
    read_as(protocol, headers, body, limits, request_id).await
}

async fn read_as(
    protocol: Protocol,
    headers: &HeaderMap,
    body: axum::body::Body,
    limits: BodyLimits,
    request_id: &str,
) -> Result<bytes::Bytes, Response> {
    body::read(headers, body, limits).await.map_err(|error| {
        let encoded = encode_error(protocol, &error.to_api_error(), request_id);
        let mut response = respond(encoded, request_id);
        if error.leaves_bytes_unread() {
            // This connection cannot carry another request.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    })
}
