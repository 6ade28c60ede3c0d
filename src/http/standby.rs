//! A node that waits for the lease on a log in a database (`--storage`) still serves:
//! it passes each request on to the leading node, as the client sent it (method, path, query,
//! headers with the client's `Host`, so signatures and the URLs the leader hands out stay the
//! client's), and hands the answer back. Once this node leads, requests go to its own service.
//! `GET /_orderly/cluster`, `GET /health`, `GET /health/ready` and `GET /metrics` are always
//! answered here.
//!
//! During a failover no node leads for a few seconds. A request that finds no leader, or one
//! that cannot have reached any (its connection refused, or refused by a node that does not
//! lead), waits for the next leader, up to `--leader-wait`, and is then passed on: clients see a
//! slow answer, not an error. A request whose leader changes while it holds it is answered at
//! once as of unknown outcome, not after the request timeout.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::watch;
use tokio::time::Instant;

use super::body::BodyLimits;
use super::link_client::{Passed, PROBE_AFTER};
use super::link_frame::LinkRequest;
use super::node_headers::{ADDED_HEADERS, FORWARDED, FORWARDED_BY_SELF, NODE, NOT_SERVED};
use super::reply::{early_error, read_limited};
use crate::metrics::{ForwardOutcome, Forwarded};
use crate::protocol::{ApiError, ErrorCode};

/// Failures to pass requests on are said once per cause per interval, not once a request.
static WARNINGS: std::sync::LazyLock<crate::quiet_log::QuietLog> =
    std::sync::LazyLock::new(Default::default);

/// Longest a request passed on may take, answer included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest a connection to the leader may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Idle connections kept to the leader: few, so a standby never holds a leader's connection
/// limit with connections it does not use.
const IDLE_CONNECTIONS: usize = 4;

/// Pause between attempts while the leader is being replaced, unless the leader changes first.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Who serves requests arriving at this node, as one value so waiters see each change whole.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Route {
    /// Counts this node's generations (`app::succession`): the routes of an earlier one may
    /// still hold a request when a later one leads.
    generation: u64,
    leading: bool,
    /// The leader's URL and epoch, as last read from the database (empty while unknown).
    leader: String,
    epoch: i64,
}

/// How requests are passed on, from the command line.
#[derive(Clone, Debug)]
pub struct ForwardSettings {
    /// What a request body may be, checked here as the leader would (`--max-request-bytes`,
    /// `--body-timeout`).
    pub body: BodyLimits,
    /// `--leader-wait`.
    pub leader_wait: Duration,
    /// `--idle-timeout`: pooled connections are closed well before a leader with the same
    /// setting would close them.
    pub idle_timeout: Duration,
    /// This node's own URL: a request held by an earlier generation's routes once this node
    /// leads is sent here, to the routes that serve.
    pub own_url: String,
    /// `--node-link`: requests go to a node on a link of frames rather than as HTTP requests
    /// (`link_client`), where the node's URL is plain HTTP.
    pub node_link: bool,
}

/// Whether this node leads, and where the leader is meanwhile: one for the node, across its
/// generations.
pub struct Standby {
    route: watch::Sender<Route>,
    /// Where each shard's requests go when this node does not lead it: shard n's leader's URL
    /// at index n (empty while unknown), for a node leading some shards of a database
    /// (`shard_routing`).
    shard_leaders: watch::Sender<Vec<String>>,
    /// Whether a name is one the live nodes of the database announced themselves by
    /// (`http::parcels`).
    peers: std::sync::RwLock<PeerNames>,
    /// The name this node announced itself by, once it has: requests it passes on over HTTP
    /// carry it, so the node taking them holds their connection in a peer's slot (`slots`).
    name: std::sync::RwLock<Option<Arc<str>>>,
    client: reqwest::Client,
    /// Links to the nodes requests are passed to, with `--node-link`.
    links: Option<super::link_client::Links>,
    settings: ForwardSettings,
    /// `Host` for a request that came without one (HTTP/1.0): this node's, as when served here.
    own_host: HeaderValue,
    forwarded: Forwarded,
    /// The shards of queues and topics whose requests this node passed on (`learned_routes`).
    learned: super::learned_routes::LearnedRoutes,
}

/// Tells the names live nodes announced themselves by; none at first.
pub type PeerNames = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The passing-on layer of one generation's routes.
#[derive(Clone)]
pub struct Forwarding {
    pub standby: Arc<Standby>,
    pub generation: u64,
}

impl Standby {
    pub fn new(settings: ForwardSettings, forwarded: Forwarded) -> std::io::Result<Standby> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            // A leader that vanishes without closing its connections is noticed: probes on
            // idle ones, as on a link, and a bound on any request (long polls wait 20 s at
            // most). reqwest's bound on unacknowledged data (30 s by default) also decides
            // when unanswered probes end a connection, so it is set to when they would: an
            // HTTP connection carries one request at a time, whose body a live leader reads
            // once it takes the connection (this client also carries the pulls and reads
            // between nodes, whose bodies are small).
            .tcp_keepalive(PROBE_AFTER)
            .tcp_keepalive_interval(Duration::from_secs(1))
            .tcp_keepalive_retries(3)
            .tcp_user_timeout(PROBE_AFTER + Duration::from_secs(3))
            .timeout(REQUEST_TIMEOUT)
            .pool_max_idle_per_host(IDLE_CONNECTIONS)
            .pool_idle_timeout((settings.idle_timeout / 2).max(Duration::from_secs(1)))
            .build()
            .map_err(std::io::Error::other)?;
        let authority = settings
            .own_url
            .split_once("://")
            .map_or(settings.own_url.as_str(), |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default();
        let own_host = HeaderValue::from_str(authority)
            .unwrap_or_else(|_| HeaderValue::from_static("localhost"));
        let route = Route {
            generation: 0,
            leading: false,
            leader: String::new(),
            epoch: 0,
        };
        let links = (settings.node_link).then(|| {
            super::link_client::Links::new(
                CONNECT_TIMEOUT,
                REQUEST_TIMEOUT,
                forwarded.link_writes(),
            )
        });
        Ok(Standby {
            route: watch::Sender::new(route),
            shard_leaders: watch::Sender::new(Vec::new()),
            peers: std::sync::RwLock::new(Arc::new(|_: &str| false)),
            name: Default::default(),
            client,
            links,
            settings,
            own_host,
            forwarded,
            learned: Default::default(),
        })
    }

    /// A new generation begins, standing by until it leads; the leader last known stays.
    pub fn begin_generation(self: &Arc<Self>) -> Forwarding {
        let mut generation = 0;
        self.route.send_modify(|route| {
            route.generation += 1;
            route.leading = false;
            generation = route.generation;
        });
        Forwarding {
            standby: self.clone(),
            generation,
        }
    }

    /// Whether generation `generation` leads: a generation the node has moved past never does,
    /// even once a later one leads.
    pub fn leading_in(&self, generation: u64) -> bool {
        let route = self.route.borrow();
        route.leading && route.generation == generation
    }

    /// Whether a generation after `generation` leads: what `generation`'s routes still hold
    /// goes to this node's own URL, where the routes of the one leading now take it.
    pub(super) fn later_leads(&self, generation: u64) -> bool {
        let route = self.route.borrow();
        route.leading && route.generation > generation
    }

    /// From now on this node answers every request itself.
    pub fn lead(&self) {
        self.route.send_modify(|route| route.leading = true);
    }

    /// This node lost the lease: requests are passed on again, to no one until the next
    /// generation learns who leads.
    pub fn step_down(&self) {
        self.route.send_modify(|route| {
            route.leading = false;
            route.leader.clear();
            route.epoch = 0;
        });
    }

    /// The leader's URL and epoch.
    pub fn leader(&self) -> (String, i64) {
        let route = self.route.borrow();
        (route.leader.clone(), route.epoch)
    }

    pub fn set_leader(&self, url: String, epoch: i64) {
        self.route.send_if_modified(|route| {
            let changed = route.leader != url || route.epoch != epoch;
            route.leader = url;
            route.epoch = epoch;
            changed
        });
    }

    /// Each shard's leader's URL, shard n's at index n (empty while unknown).
    pub fn set_shard_leaders(&self, leaders: Vec<String>) {
        self.shard_leaders.send_if_modified(|known| {
            let changed = *known != leaders;
            *known = leaders;
            changed
        });
    }

    /// Each shard's leader's URL as last known, shard n's at index n (empty while unknown).
    pub fn known_shard_leaders(&self) -> Vec<String> {
        self.shard_leaders.borrow().clone()
    }

    /// The shards of queues and topics whose requests this node passed on.
    pub(super) fn learned(&self) -> &super::learned_routes::LearnedRoutes {
        &self.learned
    }

    /// Shard `shard`'s leader as last known, and a receiver that sees each change.
    pub(super) fn shard_leaders(&self) -> watch::Receiver<Vec<String>> {
        self.shard_leaders.subscribe()
    }

    /// The names the live nodes announced themselves by, as last read.
    pub fn set_peers(&self, names: Vec<String>) {
        self.know_peers_by(Arc::new(move |name| names.iter().any(|peer| peer == name)));
    }

    /// How to tell the names live nodes announced themselves by, from now on.
    pub fn know_peers_by(&self, peers: PeerNames) {
        *self.peers.write().unwrap_or_else(|p| p.into_inner()) = peers;
    }

    /// This node's name in the database (a node of one leader takes a new one each
    /// generation).
    pub fn announced_as(&self, name: &str) {
        *self.name.write().unwrap_or_else(|p| p.into_inner()) = Some(name.into());
    }

    /// This node's name in the database, once it has announced itself.
    pub(super) fn name(&self) -> Option<Arc<str>> {
        self.name.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether `name` is one a live node announced itself by.
    pub(super) fn is_peer(&self, name: &str) -> bool {
        let peers = self.peers.read().unwrap_or_else(|p| p.into_inner()).clone();
        peers(name)
    }

    /// `--leader-wait`.
    pub(super) fn leader_wait(&self) -> Duration {
        self.settings.leader_wait
    }

    /// The URL this node is reached at.
    pub(super) fn own_url(&self) -> &str {
        &self.settings.own_url
    }

    pub(super) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    pub(super) fn body_limits(&self) -> BodyLimits {
        self.settings.body
    }

    pub(super) fn count(&self, outcome: ForwardOutcome) {
        self.forwarded.count(outcome);
    }

    pub(super) fn count_straight(&self) {
        self.forwarded.count_straight();
    }

    /// Whether a request arriving now can be served: this node leads or knows who does.
    pub fn ready(&self) -> bool {
        let route = self.route.borrow();
        route.leading || !route.leader.is_empty()
    }
}

/// Headers that belong to one connection, not to the request (RFC 9110, 7.6.1), and those the
/// `Connection` header names as such.
fn hop_by_hop(name: &HeaderName, connection: &[String]) -> bool {
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
    ) || connection.iter().any(|named| named == name.as_str())
}

/// The header names listed in `Connection`, lower-cased.
fn named_in_connection(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect()
}

/// `GET /health/ready`: 200 while this node leads or knows a leader to pass requests to.
fn readiness(standby: &Standby) -> Response {
    if standby.ready() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "no leader: this node neither leads nor knows a node that does",
        )
            .into_response()
    }
}

/// Middleware: the request goes to this generation's own routes once it leads (or for the
/// endpoints that describe this node); until then, to the leader.
pub async fn forward_unless_leading(
    State(forwarding): State<Forwarding>,
    request: Request,
    next: Next,
) -> Response {
    let standby = &forwarding.standby;
    let path = request.uri().path();
    if path == "/health/ready" {
        return readiness(standby);
    }
    let served_here = {
        let route = standby.route.borrow();
        route.leading && route.generation == forwarding.generation
    };
    // This node's own endpoints: its place, its health, its metrics (a standby's queue
    // figures are empty, so summing over nodes counts each queue once). A request with no
    // path (`OPTIONS *`) names nothing a leader holds: it is answered here as a leader would.
    if served_here
        || matches!(path, "/_orderly/cluster" | "/health" | "/metrics")
        || !path.starts_with('/')
    {
        return next.run(request).await;
    }
    let headers = request.headers().clone();
    if headers.contains_key(FORWARDED) {
        return failed(
            standby,
            &headers,
            Failure::NotSent("passed on by another node, but this one does not lead".into()),
        );
    }
    // The leader's own webhook sender never sends to itself; sent to this node, it would be
    // passed back and acted on as a request (an UnsubscribeURL of someone else's, say).
    if headers.contains_key("x-amz-sns-message-type") {
        let error = ApiError::new(
            ErrorCode::AccessDenied,
            "Orderly does not take its own webhook notifications as requests.",
        );
        return early_error(&headers, &error, &uuid::Uuid::new_v4().to_string());
    }
    let (parts, body) = request.into_parts();
    let request_id = uuid::Uuid::new_v4().to_string();
    let limits = standby.settings.body;
    let path = parts.uri.path();
    let body = match read_limited(path, &parts.headers, body, limits, &request_id).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let outgoing = Outgoing::of(standby, &parts, body);
    match pass_on(standby, &outgoing).await {
        Ok(response) => {
            standby.forwarded.count(ForwardOutcome::Answered);
            response
        }
        Err(failure) => failed(standby, &headers, failure),
    }
}

/// Whether `headers` name a live node (`X-Orderly-Node`): a request another node sent.
pub(super) fn names_a_peer(standby: &Standby, headers: &HeaderMap) -> bool {
    let name = headers.get(NODE).and_then(|name| name.to_str().ok());
    name.is_some_and(|name| standby.is_peer(name))
}

/// The client is told what it can act on; the cause (with the leader's address, which is the
/// operator's to know) goes to the log.
pub(super) fn failed(standby: &Standby, headers: &HeaderMap, failure: Failure) -> Response {
    let (outcome, code, answer, message) = match failure {
        Failure::NotSent(message) | Failure::Again(message) => (
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
    early_error(headers, &error, &uuid::Uuid::new_v4().to_string())
}

/// Why a request passed on got no answer.
pub(super) enum Failure {
    /// It never reached a leader, and cannot be sent again.
    NotSent(String),
    /// It never reached a leader; it may be sent again once one is known.
    Again(String),
    /// It may have reached the leader: its fate is unknown.
    Unknown(String),
}

/// A request as it is passed on: what the client sent, less what belonged to its connection.
pub(super) struct Outgoing {
    method: reqwest::Method,
    path: String,
    headers: HeaderMap,
    body: bytes::Bytes,
}

impl Outgoing {
    pub(super) fn of(
        standby: &Standby,
        parts: &axum::http::request::Parts,
        body: bytes::Bytes,
    ) -> Outgoing {
        let connection = named_in_connection(&parts.headers);
        let mut headers = HeaderMap::with_capacity(parts.headers.len() + ADDED_HEADERS);
        for (name, value) in &parts.headers {
            // A node's name is this node's to add (over HTTP), never a client's to pass on.
            if !hop_by_hop(name, &connection) && name != header::CONTENT_LENGTH && name != NODE {
                headers.append(name.clone(), value.clone());
            }
        }
        if !headers.contains_key(header::HOST) {
            headers.insert(header::HOST, standby.own_host.clone());
        }
        headers.insert(FORWARDED, HeaderValue::from_static("1"));
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        Outgoing {
            method: parts.method.clone(),
            path,
            headers,
            body,
        }
    }
}

/// Sends the request to the leader, waiting for one while none can be reached, up to
/// `--leader-wait`.
async fn pass_on(standby: &Standby, outgoing: &Outgoing) -> Result<Response, Failure> {
    // Leading in a later generation than the routes holding this request: the routes that
    // serve now take it, by this node's own URL.
    let target = |route: &Route| match route.leading {
        true => standby.settings.own_url.clone(),
        false => route.leader.clone(),
    };
    pass_on_to(standby, outgoing, standby.route.subscribe(), target).await
}

/// Sends the request to the node `target` reads from `route` (empty while none is known),
/// waiting while none can be reached, up to `--leader-wait`; each change of `route` is a new
/// target to try at once.
pub(super) async fn pass_on_to<T>(
    standby: &Standby,
    outgoing: &Outgoing,
    mut route: watch::Receiver<T>,
    target: impl Fn(&T) -> String,
) -> Result<Response, Failure> {
    let deadline = Instant::now() + standby.settings.leader_wait;
    loop {
        let now_at = target(&route.borrow_and_update());
        let attempt = if now_at.is_empty() {
            Err(Failure::Again("no node leads yet".into()))
        } else {
            send(standby, (&now_at, &target), outgoing, &mut route).await
        };
        match attempt {
            Err(Failure::Again(message)) => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(Failure::NotSent(format!(
                        "{message}; no leader within --leader-wait"
                    )));
                }
                let pause = RETRY_PAUSE.min(deadline - now);
                tokio::select! {
                    _ = route.changed() => {}
                    () = tokio::time::sleep(pause) => {}
                }
            }
            other => return other,
        }
    }
}

/// One attempt at `target`. Given up as of unknown outcome when the node `target_of` reads
/// from `route` changes while the request is with it (a frozen leader still takes
/// connections), once a connection being opened could have failed; a change of `route` that
/// leaves it (another shard's leader) changes nothing.
pub(super) async fn send<T>(
    standby: &Standby,
    (target, target_of): (&str, &impl Fn(&T) -> String),
    outgoing: &Outgoing,
    route: &mut watch::Receiver<T>,
) -> Result<Response, Failure> {
    let mut headers = outgoing.headers.clone();
    if target == standby.settings.own_url {
        headers.insert(FORWARDED, HeaderValue::from_static(FORWARDED_BY_SELF));
    }
    let request = answer_of(standby, target, outgoing, headers);
    tokio::pin!(request);
    let moved = async {
        loop {
            if route.changed().await.is_err() {
                return std::future::pending().await;
            }
            if target_of(&route.borrow_and_update()) != target {
                return;
            }
        }
    };
    let answer = tokio::select! {
        answer = &mut request => answer,
        () = moved => {
            match tokio::time::timeout(CONNECT_TIMEOUT, &mut request).await {
                Ok(answer) => answer,
                Err(_) => {
                    return Err(Failure::Unknown(format!(
                        "the leader at {target} changed while it held the request"
                    )))
                }
            }
        }
    };
    let Answer {
        status,
        headers,
        body,
    } = answer?;
    if status == StatusCode::SERVICE_UNAVAILABLE && headers.contains_key(NOT_SERVED) {
        return Err(Failure::Again(format!(
            "the node at {target} did not take the request (not leading, or at its connection limit)"
        )));
    }
    let connection = named_in_connection(&headers);
    let mut response = Response::builder().status(status);
    for (name, value) in &headers {
        if !hop_by_hop(name, &connection) && name != header::CONTENT_LENGTH {
            response = response.header(name, value);
        }
    }
    Ok(response.body(Body::from(body)).unwrap_or_else(|e| {
        unanswerable(format!("the leader's answer could not be passed back: {e}"))
    }))
}

/// A node's answer to a request passed on, whole.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: bytes::Bytes,
}

/// The answer of the node at `target` to `outgoing` with `headers`: on the link to it where
/// there is one (`--node-link`), else as an HTTP request.
async fn answer_of(
    standby: &Standby,
    target: &str,
    outgoing: &Outgoing,
    headers: HeaderMap,
) -> Result<Answer, Failure> {
    if let Some(links) = standby.links.as_ref().filter(|links| links.usable(target)) {
        let request = LinkRequest {
            method: outgoing.method.clone(),
            path: outgoing.path.clone(),
            headers,
            body: outgoing.body.clone(),
        };
        let passed = links.send(target, &request).await;
        if !matches!(passed, Passed::UseHttp) {
            standby.forwarded.count_link();
        }
        return match passed {
            Passed::Answered(answer) => Ok(Answer {
                status: answer.status,
                headers: answer.headers,
                body: answer.body,
            }),
            Passed::NotSent(cause) => Err(Failure::Again(format!(
                "the leader at {target} could not be reached: {cause}"
            ))),
            Passed::Unknown(cause) => Err(Failure::Unknown(format!(
                "the leader at {target} did not answer: {cause}"
            ))),
            Passed::UseHttp => over_http(standby, target, outgoing, request.headers).await,
        };
    }
    over_http(standby, target, outgoing, headers).await
}

/// The answer of the node at `target` to `outgoing`, sent as an HTTP request.
async fn over_http(
    standby: &Standby,
    target: &str,
    outgoing: &Outgoing,
    headers: HeaderMap,
) -> Result<Answer, Failure> {
    let url = format!("{}{}", target.trim_end_matches('/'), outgoing.path);
    let mut headers = headers;
    if let Some(name) = (standby.name()).and_then(|name| HeaderValue::from_str(&name).ok()) {
        headers.insert(NODE, name);
    }
    let sent = standby
        .client
        .request(outgoing.method.clone(), &url)
        .headers(headers)
        .body(outgoing.body.clone())
        .send()
        .await;
    let answer = sent.map_err(|e| {
        // Without the request's own URL, so one cause reads the same for every request.
        let (connect, builder) = (e.is_connect(), e.is_builder());
        let message = format!("the leader at {target} did not answer: {}", e.without_url());
        if connect {
            Failure::Again(message)
        } else if builder {
            Failure::NotSent(message)
        } else {
            Failure::Unknown(message)
        }
    })?;
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let headers = answer.headers().clone();
    // Not served: known by the head alone, whatever becomes of the body.
    if status == StatusCode::SERVICE_UNAVAILABLE && headers.contains_key(NOT_SERVED) {
        return Ok(Answer {
            status,
            headers,
            body: bytes::Bytes::new(),
        });
    }
    let body = answer
        .bytes()
        .await
        .map_err(|e| Failure::Unknown(format!("the leader's answer was cut off: {e}")))?;
    Ok(Answer {
        status,
        headers,
        body,
    })
}

fn unanswerable(message: String) -> Response {
    (StatusCode::BAD_GATEWAY, message).into_response()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn headers_named_in_connection_are_not_passed_on() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("X-Secret, keep-alive"),
        );
        headers.insert("x-secret", HeaderValue::from_static("s"));
        headers.insert("x-amz-date", HeaderValue::from_static("d"));
        let named = named_in_connection(&headers);
        let kept: Vec<&str> = headers
            .keys()
            .filter(|name| !hop_by_hop(name, &named))
            .map(HeaderName::as_str)
            .collect();
        assert_eq!(kept, ["x-amz-date"]);
    }

    #[test]
    fn a_clients_node_name_is_not_passed_on() {
        let (parts, ()) = axum::http::Request::post("/")
            .header(NODE, "survey alpha")
            .header("x-amz-date", "d")
            .body(())
            .unwrap()
            .into_parts();
        let outgoing = Outgoing::of(&standby(), &parts, bytes::Bytes::new());
        assert!(!outgoing.headers.contains_key(NODE));
        assert_eq!(outgoing.headers[FORWARDED], "1");
        assert_eq!(outgoing.headers["x-amz-date"], "d");
    }

    pub(in crate::http) fn standby() -> Arc<Standby> {
        let settings = ForwardSettings {
            body: BodyLimits {
                max_bytes: 1024,
                timeout: Duration::from_secs(1),
            },
            leader_wait: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(60),
            own_url: "http://127.0.0.1:1".into(),
            node_link: true,
        };
        Arc::new(Standby::new(settings, Default::default()).expect("a client"))
    }

    /// A generation the node moved past never says it leads, even while the next one does
    /// (its answers may still be in flight when the next one takes the lease).
    #[test]
    fn only_the_current_generation_leads() {
        let standby = standby();
        let first = standby.begin_generation();
        standby.lead();
        assert!(standby.leading_in(first.generation));
        standby.step_down();
        let second = standby.begin_generation();
        assert!(!standby.leading_in(first.generation));
        assert!(!standby.leading_in(second.generation));
        standby.lead();
        assert!(standby.leading_in(second.generation));
        assert!(!standby.leading_in(first.generation));
        // What the first generation still holds goes to the second, which leads; the second's
        // own requests have no later one to go to.
        assert!(standby.later_leads(first.generation));
        assert!(!standby.later_leads(second.generation));
        standby.step_down();
        assert!(!standby.later_leads(first.generation), "none leads");
    }

    #[test]
    fn readiness_is_lost_with_the_leader_and_back_with_the_next() {
        let standby = standby();
        assert_eq!(
            readiness(&standby).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        standby.set_leader("http://127.0.0.1:2".into(), 1);
        assert_eq!(readiness(&standby).status(), StatusCode::OK);
        standby.step_down();
        assert_eq!(
            readiness(&standby).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        standby.begin_generation();
        standby.lead();
        assert_eq!(readiness(&standby).status(), StatusCode::OK);
    }
}
