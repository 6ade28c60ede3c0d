//! The inspection API and reset, for developers and test suites:
//! - `GET /_orderly/queues`: every queue's counts, FIFO groups and oldest message age;
//! - `GET /_orderly/queues/{name}/messages[?state=visible,inFlight,delayed][&limit=N]`: the
//!   stored messages, oldest first, without receiving them;
//! - `GET /_orderly/queues/{name}/groups[?limit=N]`: a FIFO queue's groups, oldest head first,
//!   with their depth and whether a message in flight locks them;
//! - `GET /_orderly/subscriptions`: every subscription with what became of its last messages;
//! - `POST /_orderly/reset[?all=true]`: drops every message (or everything), durably.
//!
//! With `--auth` they ask for HTTP Basic credentials of a key in the auth file (`access key
//! id:secret`), which Prometheus and browsers can send; SigV4 they could not.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::state::HttpState;
use crate::backend::ResetScope;
use crate::engine::queue::inspect::StateFilter;
use crate::protocol::ApiError;
use crate::service::inspect::Origin;

/// Messages a peek answers unless `limit` says otherwise, and the most it may ask for.
const DEFAULT_PEEK: usize = 100;
const MAX_PEEK: usize = 10_000;

/// `Some(401)` while signatures are checked and the request has no Basic credentials of a
/// known key.
pub(super) fn unauthorized(state: &HttpState, headers: &HeaderMap) -> Option<Response> {
    let auth = state.auth.as_ref()?;
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if auth.basic_key(given).is_some() {
        return None;
    }
    let mut response = answer(
        StatusCode::UNAUTHORIZED,
        json!({"message": "with --auth, give an access key id and its secret (HTTP Basic)"}),
    );
    response.headers_mut().insert(
        axum::http::header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Basic realm=\"Orderly\", charset=\"UTF-8\""),
    );
    Some(response)
}

pub(super) fn answer(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(super) fn failed(error: ApiError) -> Response {
    let (code, _, status) = error.code.wire();
    let code = code.rsplit('#').next().unwrap_or(code);
    let status = match error.code {
        crate::protocol::ErrorCode::QueueDoesNotExist => StatusCode::NOT_FOUND,
        _ => StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
    };
    answer(status, json!({"code": code, "message": error.message}))
}

/// A JSON answer, or the error as `failed` writes it.
pub(super) fn reply(result: Result<Value, ApiError>) -> Response {
    match result {
        Ok(body) => answer(StatusCode::OK, body),
        Err(error) => failed(error),
    }
}

fn bad(message: impl Into<String>) -> Response {
    answer(
        StatusCode::BAD_REQUEST,
        json!({ "message": message.into() }),
    )
}

/// `GET /_orderly/queues`.
/// Any other path under `/_orderly/`: 404, naming it.
pub async fn no_such_endpoint(uri: Uri) -> Response {
    let message = format!("no endpoint {}; see doc/testing.md", uri.path());
    let body = serde_json::json!({ "message": message }).to_string();
    let json = [(axum::http::header::CONTENT_TYPE, "application/json")];
    (axum::http::StatusCode::NOT_FOUND, json, body).into_response()
}

pub async fn queues(State(state): State<HttpState>, headers: HeaderMap, uri: Uri) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let host = match super::reply::usable_host(&headers, &uri) {
        Ok(host) => host,
        Err(error) => return failed(error),
    };
    let origin = Origin {
        scheme: state.scheme,
        host: &host,
    };
    reply(state.service.queue_overviews(&origin).await)
}

/// The last value of the query parameter `name`, if given.
pub(super) fn query_param(uri: &Uri, name: &str) -> Option<String> {
    form_urlencoded::parse(uri.query()?.as_bytes())
        .filter(|(key, _)| key == name)
        .last()
        .map(|(_, value)| value.into_owned())
}

/// `GET /_orderly/queues/{name}/messages`.
pub async fn messages(
    State(state): State<HttpState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let filter = match query_param(&uri, "state").as_deref().map(parse_states) {
        None => StateFilter::ALL,
        Some(Ok(filter)) => filter,
        Some(Err(message)) => return bad(message),
    };
    let limit = match limit(&uri) {
        Ok(limit) => limit,
        Err(message) => return bad(message),
    };
    reply(state.service.peek_messages(&name, filter, limit).await)
}

/// `GET /_orderly/queues/{name}/groups[?limit=N]`.
pub async fn groups(
    State(state): State<HttpState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let limit = match limit(&uri) {
        Ok(limit) => limit,
        Err(message) => return bad(message),
    };
    reply(state.service.queue_groups(&name, limit).await)
}

/// `GET /_orderly/subscriptions`.
pub async fn subscriptions(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    reply(state.service.subscription_activity().await)
}

/// `GET /metrics`: Prometheus text (OpenMetrics).
pub async fn metrics(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let service = &state.service;
    let backend = &service.backend;
    let cluster = service.cluster_state();
    let read = async {
        let led = backend.led_here().await?;
        Ok::<_, crate::backend::BackendError>(crate::metrics::Scraped {
            queues: led.queues,
            topics: led.topics,
            subscriptions: led.subscriptions,
            webhooks: backend.delivery_stats().await?,
            relay: backend.relay_waiting().await?,
            role: cluster.role,
            epoch: cluster.epoch,
            lag: cluster.lag,
            shards: cluster.shards,
            shards_led: cluster.led.len(),
            logs: (cluster.logs.iter())
                .map(|log| crate::metrics::ShardLogFigures {
                    shard: log.shard,
                    epoch: log.epoch,
                    applied: log.applied,
                    lag: log.lag,
                })
                .collect(),
            synchronous_replication: cluster.replication.as_ref().map(|p| p.synchronous),
            aws_would_refuse: Vec::new(),
        })
    };
    let Ok(mut scraped) = read.await else {
        return answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"message": "storage unavailable"}),
        );
    };
    // Each queue's policy read once, wherever its shard is led.
    let mut queues = std::collections::HashMap::new();
    for activity in &scraped.subscriptions {
        let subscription = &activity.subscription;
        let queue = &subscription.endpoint;
        if subscription.protocol.name() != "sqs" {
            continue;
        }
        if !queues.contains_key(queue) {
            queues.insert(queue.clone(), service.queue_policy(queue).await);
        }
        let access = queues[queue].as_ref();
        if access.is_some_and(|q| q.sns_would_refuse(&activity.topic_arn).is_some()) {
            scraped.aws_would_refuse.push(subscription.arn.clone());
        }
    }
    let text = service.metrics.render(&scraped, service.clock.now());
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// `?limit=N`: 1 to `MAX_PEEK`, `DEFAULT_PEEK` when absent.
fn limit(uri: &Uri) -> Result<usize, String> {
    match query_param(uri, "limit").map(|l| l.parse::<usize>()) {
        None => Ok(DEFAULT_PEEK),
        Some(Ok(limit)) if (1..=MAX_PEEK).contains(&limit) => Ok(limit),
        Some(_) => Err(format!("limit must be a number from 1 to {MAX_PEEK}")),
    }
}

/// `visible,inFlight,delayed` (any of them, any case; `all` for every state).
fn parse_states(text: &str) -> Result<StateFilter, String> {
    let mut filter = StateFilter {
        visible: false,
        in_flight: false,
        delayed: false,
    };
    for word in text.split(',').map(str::trim) {
        match word.to_ascii_lowercase().as_str() {
            "visible" => filter.visible = true,
            "inflight" | "in_flight" | "in-flight" => filter.in_flight = true,
            "delayed" => filter.delayed = true,
            "all" => filter = StateFilter::ALL,
            _ => {
                return Err(format!(
                    "state: {word:?} is none of visible, inFlight, delayed, all"
                ))
            }
        }
    }
    Ok(filter)
}

/// `POST /_orderly/reset[?all=true]`.
pub async fn reset(State(state): State<HttpState>, headers: HeaderMap, uri: Uri) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let all = query_param(&uri, "all").map(|a| a.to_ascii_lowercase());
    let scope = match all.as_deref() {
        None | Some("false") => ResetScope::Messages,
        Some("true") | Some("") => ResetScope::Everything,
        Some(other) => return bad(format!("all: {other:?} is neither true nor false")),
    };
    match state.service.backend.reset(scope).await {
        Ok(()) => {
            let what = match scope {
                ResetScope::Messages => "messages",
                ResetScope::Everything => "everything",
            };
            tracing::info!(what, "reset");
            answer(StatusCode::OK, json!({ "reset": what }))
        }
        // Shards led by other nodes, some of which may not have been reset: which, and why.
        Err(crate::backend::BackendError::Unconfirmed(cause)) => {
            tracing::warn!(%cause, "a reset did not reach every shard");
            answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({ "message": format!("not every shard is known to have been reset; the others were: {cause}") }),
            )
        }
        Err(error) => failed(error.into()),
    }
}

/// `GET /_orderly/cluster`: this node's role, the lease's epoch, the leader's URL, how far
/// the log is applied here, and the parcels waiting to cross between the shards it holds.
pub(super) async fn cluster_state(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let mut body = serde_json::to_value(state.service.cluster_state()).unwrap_or_default();
    // Read at once from memory: never unavailable, and empty with one shard.
    let relay = state
        .service
        .backend
        .relay_waiting()
        .await
        .unwrap_or_default();
    body["relay"] = serde_json::to_value(relay).unwrap_or_default();
    body["fatesUntold"] = state.service.backend.fates_untold().into();
    answer(StatusCode::OK, body)
}

/// Orderly's own view of webhook delivery: per subscription, what is pending and in flight,
/// and how many were delivered, retried, dead-lettered or dropped.
pub(super) async fn webhook_stats(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let stats = match state.service.backend.delivery_stats().await {
        Ok(stats) => stats,
        Err(error) => {
            tracing::error!(%error, "webhook statistics unavailable");
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
    };
    let subscriptions: Vec<serde_json::Value> = stats
        .into_iter()
        .map(|(arn, s)| {
            serde_json::json!({
                "SubscriptionArn": &*arn,
                "Pending": s.pending,
                "InFlight": s.in_flight,
                "Delivered": s.delivered,
                "Retries": s.retries,
                "DeadLettered": s.dead_lettered,
                "Dropped": s.dropped,
                "NextAttempt": s.next_attempt.map(crate::service::inspect::rfc3339),
            })
        })
        .collect();
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        serde_json::json!({ "Subscriptions": subscriptions }).to_string(),
    )
        .into_response()
}
