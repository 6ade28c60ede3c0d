//! A node that leads some of its database's shards serves every request all the same: one whose
//! queue or topic is in a shard another node leads is refused by the backend before anything is
//! done (`backend::led_elsewhere`), and passed here, as the client sent it, to that shard's
//! leader, whose answer goes back as it came. The request is held whole in memory meanwhile
//! (within `--max-request-bytes`), as a standby holds one it passes on.
//!
//! A request that another node passed here is never passed on again: refused, it is answered
//! 503 as not served, and the node that sent it tries the shard's next leader. One this node
//! passed to itself (held while it started over, then sent to its next generation) may be.
//! Only a request refused before it used any shard here is passed on (`led_elsewhere`).
//!
//! A request on a queue's messages, or a publish, whose queue's or topic's shard an earlier
//! one was refused for goes straight to that shard's leader, without being run here first
//! (`learned_routes`).
//!
//! A manual clock moved here (`POST /_orderly/clock`) is moved the same way on every other
//! node leading shards, so a deadline passes alike whichever node leads its queue.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::learned_routes::RouteKey;
use super::node_headers::{FORWARDED, FORWARDED_BY_SELF, NODE, NOT_SERVED};
use super::reply::read_limited;
use super::standby::{
    failed, names_a_peer, pass_on_to, send, Failure, Forwarding, Outgoing, Standby,
};
use crate::backend::led_elsewhere;
use crate::metrics::ForwardOutcome;

/// Middleware: runs the request here, and passes it to its shard's leader when the backend
/// found that another node leads that shard.
pub async fn pass_to_shard_leader(
    State(forwarding): State<Forwarding>,
    request: Request,
    next: Next,
) -> Response {
    let standby = &forwarding.standby;
    let between = super::between_nodes::is_between_nodes(request.uri().path());
    // Its connection already holds a peer's slot (`server`).
    if between && names_a_peer(standby, request.headers()) {
        let mut request = request;
        (request.extensions_mut()).insert(super::between_nodes::FromPeer);
        return next.run(request).await;
    }
    if between {
        return next.run(request).await;
    }
    if request.uri().path() == CLOCK && request.method() == axum::http::Method::POST {
        return move_every_clock(standby, request, next).await;
    }
    // What describes this node is answered here, as a standby answers it.
    if matches!(
        request.uri().path(),
        "/_orderly/cluster" | "/health" | "/health/ready" | "/metrics"
    ) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let body = match read_whole(standby, &parts, body).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    // Passed here by another node: refused as not served, it tries again. Nothing of it is
    // kept to pass on.
    let by_another = (parts.headers.get(FORWARDED)).is_some_and(|v| v != FORWARDED_BY_SELF);
    if by_another {
        let here = Request::from_parts(parts, Body::from(body));
        return run_here(next, here).await.0;
    }
    // Until a route was learned (a node alone never learns one), nothing is read ahead.
    let learning = standby.learned().any();
    let route = learning.then(|| standby.learned().key_of(&parts, &body));
    if let Some(route) = route.flatten() {
        if let Some(answer) = pass_as_learned(standby, route, &parts, &body).await {
            return answer;
        }
    }
    let here = Request::from_parts(parts.clone(), Body::from(body.clone()));
    let (answer, passed_to) = run_here(next, here).await;
    let Some(shard) = passed_to else {
        return answer;
    };
    let route = route.unwrap_or_else(|| standby.learned().key_of(&parts, &body));
    if let Some(route) = route {
        standby.learned().learn(route, shard);
    }
    let outgoing = Outgoing::of(standby, &parts, body);
    let leaders = standby.shard_leaders();
    // This node's own URL is named only for shards its current generation leads: one that
    // took the shard since it refused the request (or a later generation, started over to
    // take it) serves it, by this node's own URL. A request this node passed to itself goes
    // to itself no more.
    let generation = forwarding.generation;
    let by_self = (parts.headers.get(FORWARDED)).is_some_and(|v| v == FORWARDED_BY_SELF);
    let leader_of = |leaders: &Vec<String>| {
        (leaders.get(shard as usize).cloned())
            .filter(|leader| {
                leader != standby.own_url()
                    || standby.later_leads(generation)
                    || (standby.leading_in(generation) && !by_self)
            })
            .unwrap_or_default()
    };
    match pass_on_to(standby, &outgoing, leaders, leader_of).await {
        Ok(response) => {
            standby.count(ForwardOutcome::Answered);
            response
        }
        Err(failure) => failed(standby, &parts.headers, failure),
    }
}

/// Passes a request straight to the node leading the shard its queue or topic was last found
/// in: the answer, or none where no shard is known for it, no leader of it is known, this
/// node leads it, or the node passed to did not take it (then it is run here, as if nothing
/// was learned).
async fn pass_as_learned(
    standby: &Standby,
    route: RouteKey,
    parts: &axum::http::request::Parts,
    body: &bytes::Bytes,
) -> Option<Response> {
    let shard = standby.learned().shard_of(route)? as usize;
    let mut leaders = standby.shard_leaders();
    let leader = (leaders.borrow_and_update().get(shard).cloned())
        .filter(|leader| !leader.is_empty() && leader != standby.own_url())?;
    let outgoing = Outgoing::of(standby, parts, body.clone());
    let leader_of = |leaders: &Vec<String>| leaders.get(shard).cloned().unwrap_or_default();
    match send(standby, (&leader, &leader_of), &outgoing, &mut leaders).await {
        Ok(response) => {
            standby.count(ForwardOutcome::Answered);
            standby.count_straight();
            Some(response)
        }
        // It reached no node that took it: nothing of it was kept anywhere.
        Err(Failure::Again(_) | Failure::NotSent(_)) => None,
        Err(unknown @ Failure::Unknown(_)) => {
            standby.count_straight();
            Some(failed(standby, &parts.headers, unknown))
        }
    }
}

/// Runs `request` here: the answer, and the shard whose leader is to serve it instead if the
/// backend refused it as another node's.
async fn run_here(next: Next, request: Request) -> (Response, Option<u32>) {
    let (mut answer, noted) = led_elsewhere::noting(next.run(request)).await;
    if noted.across && noted.passed_to.is_none() {
        // No other node answers it otherwise: not to be sent again by a node passing it on.
        answer.headers_mut().remove(NOT_SERVED);
    }
    (answer, noted.passed_to)
}

/// Moves this node's manual clock, then every other node leading shards by the same request
/// (an advance moves each by as much, so each deadline passes on its leader's clock as it
/// would with one node; a node already later than a time set keeps its own), with the
/// caller's own credentials. A move another node passed here goes no further; one refused
/// here (malformed, no `--clock manual`, backwards) is sent nowhere. Answered 503, naming
/// each, when a node may not have moved.
async fn move_every_clock(standby: &Standby, request: Request, next: Next) -> Response {
    let by_another = (request.headers().get(FORWARDED)).is_some_and(|v| v != FORWARDED_BY_SELF);
    if by_another {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let body = match read_whole(standby, &parts, body).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let here = Request::from_parts(parts.clone(), Body::from(body.clone()));
    let answer = next.run(here).await;
    // Moved here (a 503 moved it too, only unrecorded): the others follow.
    if answer.status().is_client_error() {
        return answer;
    }
    let authorization = parts.headers.get(axum::http::header::AUTHORIZATION);
    let mut others: Vec<String> = standby.shard_leaders().borrow().clone();
    others.sort();
    others.dedup();
    others.retain(|url| !url.is_empty() && url != standby.own_url());
    let mut unsure = Vec::new();
    for url in others {
        let mut told = (standby
            .client()
            .post(format!("{}{CLOCK}", url.trim_end_matches('/'))))
        .header(FORWARDED, "1")
        .header(axum::http::header::CONTENT_TYPE, "application/json")
        .body(body.clone());
        if let Some(authorization) = authorization {
            told = told.header(axum::http::header::AUTHORIZATION, authorization.clone());
        }
        // Named, so the other node holds the connection in a peer's slot (`slots`).
        if let Some(name) = standby.name() {
            told = told.header(NODE, &*name);
        }
        match tokio::time::timeout(CLOCK_WAIT, told.send()).await {
            Ok(Ok(answer))
                if answer.status().is_success()
                    || answer.status() == axum::http::StatusCode::CONFLICT => {}
            Ok(Ok(answer)) => unsure.push(format!("{url} answered {}", answer.status())),
            Ok(Err(error)) => unsure.push(format!("{url}: {}", error.without_url())),
            Err(_) => unsure.push(format!("{url} did not answer within 5 s")),
        }
    }
    if unsure.is_empty() {
        return answer;
    }
    let cause = unsure.join("; ");
    tracing::warn!(%cause, "a manual clock's move may not have reached every node");
    let body = serde_json::json!({
        "message": format!(
            "the clock moved on this node; these nodes may not have moved with it ({cause}): \
             their clocks may now differ, so set each to one time"
        ),
    });
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

const CLOCK: &str = "/_orderly/clock";

/// Longest another node is waited for, told to move its clock.
const CLOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A request's body within the node's bounds, or the refusal to answer.
async fn read_whole(
    standby: &Standby,
    parts: &axum::http::request::Parts,
    body: axum::body::Body,
) -> Result<bytes::Bytes, Response> {
    let request_id = uuid::Uuid::new_v4().to_string();
    let limits = standby.body_limits();
    read_limited(parts.uri.path(), &parts.headers, body, limits, &request_id).await
}
