//! `/_orderly/console`: a read-mostly web console, served by the binary itself with its assets
//! compiled in (no CDN, works offline). Plain HTML, CSS and a little JavaScript with no build
//! step: nothing to upgrade but the browser. It reads the same inspection API tests call and
//! acts through the AWS API (SendMessage, PurgeQueue, StartMessageMoveTask) like any client.
//! With `--auth` it asks for HTTP Basic credentials (an access key id and its secret); its
//! reads then work, its actions (SQS calls it cannot sign) are refused.

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::inspect::unauthorized;
use super::HttpState;

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
