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

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::node_headers::{FORWARDED, FORWARDED_BY_SELF, NODE, NOT_SERVED};
use super::reply::read_limited;
use super::standby::{failed, pass_on_to, Forwarding, Outgoing};
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
    if matches!(
        request.uri().path(),
        super::between_nodes::PARCELS | super::between_nodes::READS
    ) {
        let mut request = request;
        let name = (request.headers().get(NODE)).and_then(|name| name.to_str().ok());
        if name.is_some_and(|name| standby.is_peer(name)) {
            request
                .extensions_mut()
                .insert(super::between_nodes::FromPeer);
        }
        return next.run(request).await;
    }
    // What describes this node is answered here, as a standby answers it.
    if matches!(
        request.uri().path(),
        "/_orderly/cluster" | "/health" | "/health/ready" | "/metrics"
    ) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let request_id = uuid::Uuid::new_v4().to_string();
    let body = match read_limited(&parts.headers, body, standby.body_limits(), &request_id).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let here = Request::from_parts(parts.clone(), Body::from(body.clone()));
    let (mut answer, noted) = led_elsewhere::noting(next.run(here)).await;
    if noted.across && noted.passed_to.is_none() {
        // No other node answers it otherwise: not to be sent again by a node passing it on.
        answer.headers_mut().remove(NOT_SERVED);
    }
    // Passed here by another node: refused as not served, it tries again.
    let by_another = (parts.headers.get(FORWARDED)).is_some_and(|v| v != FORWARDED_BY_SELF);
    let Some(shard) = noted.passed_to.filter(|_| !by_another) else {
        return answer;
    };
    let outgoing = Outgoing::of(standby, &parts, body);
    let leaders = standby.shard_leaders();
    // Never this node: it does not lead the shard, whatever an older reading says.
    let leader_of = |leaders: &Vec<String>| {
        (leaders.get(shard as usize).cloned())
            .filter(|leader| leader != standby.own_url())
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
