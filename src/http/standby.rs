//! A node that waits for the lease on a log in a database (`--storage`) still serves:
//! it passes each request on to the leading node, as the client sent it (method, path, query,
//! headers with the client's `Host`, so signatures and the URLs the leader hands out stay the
//! client's), and hands the answer back. Once this node leads, requests go to its own service.
//! `GET /_orderly/cluster`, `GET /health` and `GET /metrics` are always answered here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderName, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::body::BodyLimits;
use crate::metrics::{ForwardOutcome, Forwarded};
use crate::protocol::{ApiError, ErrorCode};

/// A request passed on carries this, so it is never passed on again (a leader's URL that
/// names a standby would otherwise send requests round in circles).
const FORWARDED: &str = "x-orderly-forwarded";

/// Failures to pass requests on are said once per cause per interval, not once a request.
static WARNINGS: std::sync::LazyLock<crate::quiet_log::QuietLog> =
    std::sync::LazyLock::new(Default::default);

/// Longest a request passed on may take, answer included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest a connection to the leader may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether this node leads yet, and where the leader is meanwhile.
pub struct Standby {
    leading: AtomicBool,
    /// The leader's URL and epoch, as last read from the database.
    leader: RwLock<(String, i64)>,
    client: reqwest::Client,
    /// What a request body may be, checked here as the leader would (`--max-request-bytes`,
    /// `--body-timeout`).
    body: BodyLimits,
    forwarded: Forwarded,
}

impl Standby {
    pub fn new(
        leader: String,
        epoch: i64,
        body: BodyLimits,
        forwarded: Forwarded,
    ) -> std::io::Result<Standby> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            // A leader that vanishes without closing its connections is noticed: probes on
            // idle ones, and a bound on any request (long polls wait 20 s at most).
            .tcp_keepalive(Duration::from_secs(5))
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(std::io::Error::other)?;
        Ok(Standby {
            leading: AtomicBool::new(false),
            leader: RwLock::new((leader, epoch)),
            client,
            body,
            forwarded,
        })
    }

    pub fn leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    /// From now on this node answers every request itself.
    pub fn lead(&self) {
        self.leading.store(true, Ordering::Release);
    }

    /// This node lost the lease: requests are passed on again, to no one until the next
    /// generation learns who leads.
    pub fn step_down(&self) {
        self.set_leader(String::new(), 0);
        self.leading.store(false, Ordering::Release);
    }

    /// The leader's URL and epoch.
    pub fn leader(&self) -> (String, i64) {
        self.leader
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_leader(&self, url: String, epoch: i64) {
        *self.leader.write().unwrap_or_else(|p| p.into_inner()) = (url, epoch);
    }
}

/// Headers that belong to one connection, not to the request (RFC 9110, 7.6.1).
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "proxy-authorization"
            | "proxy-authenticate"
    )
}

/// Middleware: the request goes to this node's own routes once it leads (or for the endpoints
/// that describe this node); until then, to the leader.
pub async fn forward_unless_leading(
    State(standby): State<Arc<Standby>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    // This node's own endpoints: its place, its health, its metrics (a standby's queue
    // figures are empty, so summing over nodes counts each queue once).
    if standby.leading() || matches!(path, "/_orderly/cluster" | "/health" | "/metrics") {
        return next.run(request).await;
    }
    let headers = request.headers().clone();
    // The client is told what it can act on; the cause (with the leader's address, which is
    // the operator's to know) goes to the log.
    let failed = |failure: Failure| {
        let (outcome, code, answer, message) = match failure {
            Failure::NotSent(message) => (
                ForwardOutcome::NotSent,
                ErrorCode::ServiceUnavailable,
                "No leading node could be reached: nothing of the request was kept; try again.",
                message,
            ),
            // The leader may have carried it out before the answer was lost.
            Failure::Unknown(message) => (
                ForwardOutcome::Unknown,
                ErrorCode::InternalFailure,
                "The leading node did not answer: the request may or may not have taken effect.",
                message,
            ),
        };
        standby.forwarded.count(outcome);
        if let Some(held_back) = WARNINGS.admit(&message, std::time::Instant::now()) {
            tracing::warn!(%message, held_back, "a request passed on to the leader failed");
        }
        let error = ApiError::new(code, answer);
        super::early_error(&headers, &error, &uuid::Uuid::new_v4().to_string())
    };
    if headers.contains_key(FORWARDED) {
        return failed(Failure::NotSent(
            "passed on by another node that does not lead either".into(),
        ));
    }
    // The leader's own webhook sender never sends to itself; sent to this node, it would be
    // passed back and acted on as a request (an UnsubscribeURL of someone else's, say).
    if headers.contains_key("x-amz-sns-message-type") {
        let error = ApiError::new(
            ErrorCode::AccessDenied,
            "Orderly does not take its own webhook notifications as requests.",
        );
        return super::early_error(&headers, &error, &uuid::Uuid::new_v4().to_string());
    }
    let (parts, body) = request.into_parts();
    let request_id = uuid::Uuid::new_v4().to_string();
    let body = match super::read_limited(&parts.headers, body, standby.body, &request_id).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    match forward(&standby, parts, body).await {
        Ok(response) => {
            standby.forwarded.count(ForwardOutcome::Answered);
            response
        }
        Err(failure) => failed(failure),
    }
}

/// Why a request passed on got no answer: it never reached the leader, or its fate is unknown.
enum Failure {
    NotSent(String),
    Unknown(String),
}

async fn forward(
    standby: &Standby,
    parts: axum::http::request::Parts,
    body: bytes::Bytes,
) -> Result<Response, Failure> {
    let (leader, _) = standby.leader();
    let target = match parts.uri.path_and_query() {
        Some(path) => format!("{}{path}", leader.trim_end_matches('/')),
        None => leader.clone(),
    };
    if leader.is_empty() {
        return Err(Failure::NotSent("no node leads yet".into()));
    }
    let mut outgoing = standby.client.request(parts.method, &target).body(body);
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) && name != header::CONTENT_LENGTH {
            outgoing = outgoing.header(name, value);
        }
    }
    let answer = outgoing.header(FORWARDED, "1").send().await.map_err(|e| {
        let connect = e.is_connect();
        // Without the request's own URL, so one cause reads the same for every request.
        let message = format!("the leader at {leader} did not answer: {}", e.without_url());
        if connect {
            Failure::NotSent(message)
        } else {
            Failure::Unknown(message)
        }
    })?;
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = Response::builder().status(status);
    for (name, value) in answer.headers() {
        if !hop_by_hop(name) && name != header::CONTENT_LENGTH {
            response = response.header(name, value);
        }
    }
    let bytes = answer
        .bytes()
        .await
        .map_err(|e| Failure::Unknown(format!("the leader's answer was cut off: {e}")))?;
    response
        .body(Body::from(bytes))
        .map_err(|e| format!("the leader's answer could not be passed back: {e}"))
        .or_else(|message| Ok(unanswerable(message)))
}

fn unanswerable(message: String) -> Response {
    (StatusCode::BAD_GATEWAY, message).into_response()
}
