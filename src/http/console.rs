//! `/_orderly/console`: a read-mostly web console, served by the binary itself with its assets
//! compiled in (no CDN, works offline). Plain HTML, CSS and a little JavaScript with no build
//! step: nothing to upgrade but the browser. It reads the same inspection API tests call and
//! acts through SQS's own actions (SendMessage, PurgeQueue, StartMessageMoveTask) in the AWS
//! JSON protocol, posted to `/_orderly/sqs`. With `--auth` it asks for HTTP Basic credentials
//! (an access key id and its secret), which the browser then sends with its reads and actions:
//! a page cannot SigV4-sign without holding the secret in script.

use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::identity::Caller;
use super::inspect::unauthorized;
use super::state::HttpState;
use crate::protocol::encode_error;
use crate::service::RequestContext;

const PAGE: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");

/// `GET /_orderly/console`.
pub async fn page(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    serve("text/html; charset=utf-8", PAGE)
}

/// `GET /_orderly/console/{asset}`.
pub async fn asset(
    State(state): State<HttpState>,
    Path(asset): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    match asset.as_str() {
        "console.js" => serve("text/javascript; charset=utf-8", SCRIPT),
        "console.css" => serve("text/css; charset=utf-8", STYLE),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

fn serve(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // The page runs only its own script and talks only to this server.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; frame-ancestors 'none'",
            ),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `POST /_orderly/sqs`: an SQS action in the AWS JSON protocol (`X-Amz-Target`, JSON body),
/// answered as AWS answers it, taken from HTTP Basic credentials instead of a signature. Its
/// messages carry the Basic key as their sender, as a signed request's carry its key.
/// Another origin's page cannot use a browser's remembered credentials here: the browser
/// guard refuses origins not allowed, and no answer allows credentials.
pub async fn action(State(state): State<HttpState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let request_id = uuid::Uuid::new_v4().to_string();
    let json = crate::protocol::Protocol::Json;
    let body = match super::reply::read_body_in(json, &state, &headers, body, &request_id).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let host = match super::reply::usable_host(&headers, &parts.uri) {
        Ok(host) => host,
        Err(error) => {
            return super::reply::respond(encode_error(json, &error, &request_id), &request_id)
        }
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let caller = match &state.auth {
        Some(auth) => match auth.basic_key(given) {
            Some(key) => auth.caller(&key),
            None => Caller::account(state.service.account_id()),
        },
        None => Caller::account(state.service.account_id()),
    };
    let ctx = RequestContext {
        namespace: state.service.namespaces().home().clone(),
        operator: true,
        scheme: state.scheme,
        host,
        sender_id: caller.user_id,
        principal: caller.principal,
        request_id,
        authenticated: true,
        trace_header: None,
    };
    super::aws::json(&state.service, &headers, body, &ctx, false).await
}
