//! The accept loop: a bounded number of HTTP/1.1 connections, each watched for idleness and
//! slow headers (`connection.rs`), served by the router until shutdown, when every connection
//! finishes the request it is handling and closes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1::Builder;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower::Service;

use super::connection::{ConnectionState, ConnectionTimeouts, Watched};
use super::link_server::{opens_link, serve_link, LinkLimits};
use super::node_headers::FORWARDED;
use super::read_ahead::ReadAhead;
use super::slots::{Slot, Slots};
use super::standby::{names_a_peer, Standby};

/// Largest request head (request line and headers) read into memory; beyond it hyper answers
/// 431. Presigned URLs and SigV4 headers take a few kilobytes.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Most header lines a request may have; one passed on by another node may have the few that
/// node adds besides (hyper answers 431 past the larger bound, the router past this one).
const MAX_HEADERS: usize = 128;

/// Connections past the limit being told so at once; any beyond these wait to be accepted.
const REFUSALS: usize = 64;

/// How long a connection past the limit is given in all: its TLS handshake, its request's
/// head, its answer and its close.
const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// The answer to a connection past the limit, written once its request's head has come;
/// nothing of the request is acted on.
static AT_LIMIT: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    let body = "<?xml version=\"1.0\"?><ErrorResponse><Error><Type>Receiver</Type>\
        <Code>ServiceUnavailable</Code><Message>The server is at its connection limit \
        (--max-connections): nothing of the request was acted on; try again.</Message></Error>\
        <RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>";
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/xml\r\nconnection: close\r\n\
         retry-after: 1\r\n{}: 1\r\ncontent-length: {}\r\n\r\n{body}",
        super::node_headers::NOT_SERVED,
        body.len()
    )
    .into_bytes()
});

/// A request's head read from a connection past the limit, until it ends (the bytes after it
/// that came with it included) or `deadline`; none when the connection closed, failed, sent
/// nothing by then, or opened a link.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S, deadline: Instant) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut unread = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD_BYTES {
        let read = match tokio::time::timeout_at(deadline, stream.read(&mut unread)).await {
            Ok(Ok(read)) if read > 0 => read,
            _ => return None,
        };
        head.extend_from_slice(&unread[..read]);
        if head.first().copied().is_some_and(opens_link) {
            return None;
        }
    }
    Some(head)
}

/// Tells a connection past the limit so, once its request's head has come (a client does not
/// expect an answer before it asks), then reads until the client closes or `deadline`, so the
/// close does not reset the connection and lose the answer. Nothing read is acted on.
async fn answer_at_limit<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, deadline: Instant) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tokio::time::timeout_at(deadline, async {
        let mut unread = [0u8; 4096];
        stream.write_all(&AT_LIMIT).await?;
        stream.shutdown().await?;
        while stream.read(&mut unread).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Whether `head` is a request between nodes (`between_nodes`), or one passed on, whose
/// `X-Orderly-Node` names a live node of the database `nodes` knows.
fn from_live_node(head: &[u8], nodes: Option<&Standby>) -> bool {
    let Some(nodes) = nodes else {
        return false;
    };
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS + super::node_headers::ADDED_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    if !matches!(request.parse(head), Ok(httparse::Status::Complete(_))) {
        return false;
    }
    let path = request.path.unwrap_or_default();
    let path = path.split_once('?').map_or(path, |(path, _)| path);
    let headers = request.headers.iter();
    let forwarded = (headers.clone()).any(|h| h.name.eq_ignore_ascii_case(FORWARDED));
    (forwarded || super::between_nodes::is_between_nodes(path))
        && headers.clone().any(|header| {
            header.name.eq_ignore_ascii_case(super::node_headers::NODE)
                && std::str::from_utf8(header.value).is_ok_and(|name| nodes.is_peer(name))
        })
}

/// Small request/response exchanges: Nagle's algorithm must not hold writes back.
fn without_delay(stream: &TcpStream) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "TCP_NODELAY not set");
    }
}

/// 431 for a request with more header lines than `MAX_HEADERS`, unless another node passed it
/// on.
fn too_many_headers<B>(request: &hyper::Request<B>) -> bool {
    let headers = request.headers();
    headers.len() > MAX_HEADERS && !headers.contains_key(super::node_headers::FORWARDED)
}

#[derive(Clone)]
pub struct ServerLimits {
    pub max_connections: usize,
    pub timeouts: ConnectionTimeouts,
    /// Kept at the number of connections open (`GET /metrics`).
    pub open: Gauge,
    /// The bounds of links from other nodes (`link_server`).
    pub link: LinkLimits,
    /// Kept at the number of connections other nodes hold in their own slots (`slots`).
    pub peers: Gauge,
    /// On a database, what knows its live nodes, whose connections past the limit are served.
    pub nodes: Option<Arc<Standby>>,
}

/// What requests are answered by: one router, or whichever router a node on a database has
/// made current (a node that steps down swaps in its next generation's).
#[derive(Clone)]
pub enum Served {
    Router(Router),
    Current(Arc<std::sync::RwLock<Router>>),
}

impl Served {
    fn router(&self) -> Router {
        match self {
            Served::Router(router) => router.clone(),
            Served::Current(current) => current.read().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }
}

/// One connection, plain or TLS, served until it closes or the server shuts down. Requests
/// to Orderly's own endpoints carry the connection's `slot`, so that one from another node
/// moves it into a peer's.
async fn serve_connection<IO>(
    io: IO,
    http: Builder,
    router: Served,
    timeouts: ConnectionTimeouts,
    watcher: Watcher,
    (slot, nodes): (Slot, Option<Arc<Standby>>),
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let state = ConnectionState::new();
    let io = TokioIo::new(Watched::new(io, state.clone(), timeouts));
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let in_flight = state.begin();
        let request = request.map(axum::body::Body::new);
        let forwarded = request.headers().contains_key(FORWARDED);
        let between = super::between_nodes::is_between_nodes(request.uri().path());
        // Another node's connection (a request it passed on, or one between nodes, naming
        // it): it holds a peer's slot from now on, not a client's.
        if (forwarded || between)
            && (nodes.as_deref()).is_some_and(|nodes| names_a_peer(nodes, request.headers()))
        {
            slot.to_peer();
        }
        let answer = (!too_many_headers(&request)).then(|| router.router().call(request));
        async move {
            let Some(answer) = answer else {
                let mut response = axum::response::Response::new(axum::body::Body::empty());
                *response.status_mut() = axum::http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
                return Ok(response);
            };
            let response = answer.await;
            drop(in_flight);
            response
        }
    });
    if let Err(error) = watcher.watch(http.serve_connection(io, service)).await {
        tracing::debug!(%error, "connection closed");
    }
}

/// What every plain connection is served with.
#[derive(Clone)]
struct Serving {
    router: Served,
    http: Builder,
    timeouts: ConnectionTimeouts,
    link: LinkLimits,
    /// Turns true once the server stops.
    closing: watch::Receiver<bool>,
    open: Gauge,
    /// The live nodes of the database, on one.
    nodes: Option<Arc<Standby>>,
}

/// The first byte `stream` sends, left unread; none when it closes, fails or sends nothing by
/// `deadline`, or the server stops first.
async fn first_byte(
    stream: &TcpStream,
    deadline: Instant,
    closing: &watch::Receiver<bool>,
) -> Option<u8> {
    let mut first = [0u8; 1];
    let mut stopping = closing.clone();
    tokio::select! {
        peeked = tokio::time::timeout_at(deadline, stream.peek(&mut first)) => {
            matches!(peeked, Ok(Ok(1))).then_some(first[0])
        }
        _ = stopping.wait_for(|closing| *closing) => None,
    }
}

/// A plain connection with a client's `slot`: a link (which takes a peer's slot in its place,
/// if one is free) or HTTP, told apart by its first byte. One that sends nothing within the
/// idle time, or before the server stops, is closed, as hyper would close it. `links_open`
/// is held while a link is served.
async fn serve_plain(
    stream: TcpStream,
    slot: Slot,
    serving: Serving,
    watcher: Watcher,
    links_open: mpsc::Sender<()>,
) {
    let Serving {
        router,
        http,
        timeouts,
        link,
        closing,
        nodes,
        ..
    } = serving;
    let first = first_byte(&stream, Instant::now() + timeouts.idle, &closing).await;
    match first {
        None => {}
        Some(first) if opens_link(first) => {
            drop(watcher);
            slot.to_peer();
            serve_link(stream, move || router.router(), link, closing).await;
            drop(links_open);
        }
        Some(_) => {
            drop(links_open);
            let held = (slot.clone(), nodes);
            serve_connection(stream, http, router, timeouts, watcher, held).await;
        }
    }
    slot.release();
}

/// A connection past the limit, holding one of the `REFUSALS`, given `REFUSAL_TIME` in all
/// (a TLS handshake included): another node's (a link, or HTTP whose first request is between
/// nodes and names a live node) is served in a peer's slot if one is free, since it never
/// needs a client's; anything else is refused. One that sends nothing by then, or before the
/// server stops, is closed.
async fn serve_past_limit(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    past: PastLimit,
    serving: Serving,
    links_open: mpsc::Sender<()>,
) {
    let deadline = Instant::now() + REFUSAL_TIME;
    without_delay(&stream);
    let Some(tls) = tls else {
        let Some(first) = first_byte(&stream, deadline, &serving.closing).await else {
            return;
        };
        if opens_link(first) {
            drop(past.watcher);
            // With every peer's slot held, or once stopping, closed at once: the other node
            // knows at once that nothing was sent.
            let Some(slot) = past.slots.peer().filter(|_| !*serving.closing.borrow()) else {
                return;
            };
            drop(past.refusal);
            serving.open.inc();
            let (router, closing) = (serving.router, serving.closing);
            serve_link(stream, move || router.router(), serving.link, closing).await;
            drop(links_open);
            slot.release();
            serving.open.dec();
            return;
        }
        drop(links_open);
        return serve_http_past_limit(stream, deadline, past, serving).await;
    };
    drop(links_open);
    if let Some(stream) = handshake(&tls, stream, deadline, &serving.closing).await {
        serve_http_past_limit(stream, deadline, past, serving).await;
    }
}

/// `stream`'s TLS handshake, done by `deadline`; none when it failed, took longer, or the
/// server stopped first.
async fn handshake(
    tls: &TlsAcceptor,
    stream: TcpStream,
    deadline: Instant,
    closing: &watch::Receiver<bool>,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let mut stopping = closing.clone();
    let accepted = tokio::select! {
        accepted = tokio::time::timeout_at(deadline, tls.accept(stream)) => accepted,
        _ = stopping.wait_for(|closing| *closing) => return None,
    };
    match accepted {
        Ok(Ok(stream)) => return Some(stream),
        Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
        Err(_) => tracing::debug!("TLS handshake timed out"),
    }
    None
}

/// What a connection past the limit holds until it is served or refused.
struct PastLimit {
    refusal: OwnedSemaphorePermit,
    slots: Slots,
    watcher: Watcher,
}

/// `serve_past_limit`'s HTTP: the first request's head is read; another node's connection is
/// served from it on, anything else answered 503.
async fn serve_http_past_limit<S>(
    mut stream: S,
    deadline: Instant,
    past: PastLimit,
    serving: Serving,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut stopping = serving.closing.clone();
    let head = tokio::select! {
        head = read_head(&mut stream, deadline) => head,
        _ = stopping.wait_for(|closing| *closing) => None,
    };
    let Some(head) = head else {
        return;
    };
    let node = from_live_node(&head, serving.nodes.as_deref()) && !*serving.closing.borrow();
    if let Some(slot) = node.then(|| past.slots.peer()).flatten() {
        drop(past.refusal);
        serving.open.inc();
        let (io, served) = (ReadAhead::new(head, stream), slot.clone());
        let (router, timeouts) = (serving.router, serving.timeouts);
        let held = (served, serving.nodes);
        serve_connection(io, serving.http, router, timeouts, past.watcher, held).await;
        slot.release();
        serving.open.dec();
        return;
    }
    drop(past.watcher);
    answer_at_limit(stream, deadline).await;
    drop(past.refusal);
}

/// Serves `router` on `listener` until `shutdown` completes, then waits for open connections
/// to finish their requests.
pub async fn serve(
    listener: TcpListener,
    router: Served,
    limits: ServerLimits,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Slots::new(limits.max_connections, limits.peers.clone());
    let graceful = GracefulShutdown::new();
    let mut http = Builder::new();
    http.timer(TokioTimer::new())
        // Our own deadlines apply (idle vs. headers); hyper's would count idle time as header time.
        .header_read_timeout(None)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS + super::node_headers::ADDED_HEADERS);
    let refusals = Arc::new(Semaphore::new(REFUSALS));
    // Links from other nodes close once shutdown begins, each after answering what it took;
    // each holds a sender of `links_open`, so the last one gone closes it.
    let (closing, _) = watch::channel(false);
    let (links_open, mut links_gone) = mpsc::channel::<()>(1);
    let serving = Serving {
        router,
        http,
        timeouts: limits.timeouts,
        link: limits.link,
        closing: closing.subscribe(),
        open: limits.open.clone(),
        nodes: limits.nodes.clone(),
    };
    tokio::pin!(shutdown);
    let mut refused: u64 = 0;
    let mut failing = false;
    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or similar: the open connections keep working; wait
                    // for some to close rather than spinning. Said once per streak.
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(%error, "accept failed; retrying every 50 ms");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        failing = false;
        let slot = match slots.client() {
            Some(slot) => slot,
            None => {
                refused += 1;
                if refused.is_power_of_two() {
                    tracing::warn!(
                        max = limits.max_connections,
                        refused,
                        "connection limit reached; clients' new connections are answered 503 and closed"
                    );
                }
                // Every connection past the limit is answered, never closed unread (a node
                // passing a request on could not tell whether it was acted on): while
                // `REFUSALS` answers are being given, this waits for one to end (each within
                // `REFUSAL_TIME`) or a slot to free, and later connections wait in the
                // listen backlog. Another node's connection is served in a peer's slot instead.
                let admitted = tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    slot = slots.clients.clone().acquire_owned() => Ok(slot),
                    permit = refusals.clone().acquire_owned() => Err(permit),
                };
                match admitted {
                    Ok(Ok(permit)) => slots.holding_client(permit),
                    Err(Ok(refusal)) => {
                        let past = PastLimit {
                            refusal,
                            slots: slots.clone(),
                            watcher: graceful.watcher(),
                        };
                        let (serving, links_open) = (serving.clone(), links_open.clone());
                        let tls = tls.clone();
                        tokio::spawn(serve_past_limit(stream, tls, past, serving, links_open));
                        continue;
                    }
                    // The semaphores are never closed.
                    Ok(Err(_)) | Err(Err(_)) => continue,
                }
            }
        };
        let open = limits.open.clone();
        open.inc();
        without_delay(&stream);
        let (serving, watcher, tls) = (serving.clone(), graceful.watcher(), tls.clone());
        let links_open = links_open.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_plain(stream, slot, serving, watcher, links_open).await,
                // The handshake counts as reading the first request's headers.
                Some(tls) => {
                    drop(links_open);
                    let Serving {
                        router,
                        http,
                        timeouts,
                        closing,
                        nodes,
                        ..
                    } = serving;
                    let deadline = Instant::now() + timeouts.header;
                    if let Some(stream) = handshake(&tls, stream, deadline, &closing).await {
                        let held = (slot.clone(), nodes);
                        serve_connection(stream, http, router, timeouts, watcher, held).await;
                    }
                    slot.release();
                }
            }
            open.dec();
        });
    }
    drop(listener);
    let _ = closing.send(true);
    drop(links_open);
    graceful.shutdown().await;
    let _ = links_gone.recv().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(lines: &[&str]) -> Vec<u8> {
        let mut head = lines.join("\r\n");
        head.push_str("\r\n\r\n");
        head.into_bytes()
    }

    #[test]
    fn only_a_complete_head_between_nodes_or_passed_on_naming_a_live_node_is_a_nodes() {
        let nodes = super::super::standby::tests::standby();
        nodes.set_peers(vec!["survey alpha".into()]);
        let nodes = Some(&*nodes);
        let read = "GET /_orderly/shard-read?shard=1&read=queues HTTP/1.1";
        let passed = "POST / HTTP/1.1";
        // A request between nodes naming a live node, its header names in any case.
        assert!(from_live_node(
            &head(&[read, "X-Orderly-Node: survey alpha"]),
            nodes
        ));
        assert!(from_live_node(
            &head(&[read, "x-orderly-node: survey alpha"]),
            nodes
        ));
        // A request passed on, naming a live node.
        let named = "X-Orderly-Node: survey alpha";
        assert!(from_live_node(
            &head(&[passed, "X-Orderly-Forwarded: 1", named]),
            nodes
        ));
        // A client's request naming a live node is not a node's.
        assert!(!from_live_node(&head(&[passed, named]), nodes));
        // Nor one naming no node, another name, or a name's prefix.
        assert!(!from_live_node(&head(&[read]), nodes));
        assert!(!from_live_node(
            &head(&[read, "X-Orderly-Node: survey beta"]),
            nodes
        ));
        assert!(!from_live_node(
            &head(&[read, "X-Orderly-Node: survey"]),
            nodes
        ));
        assert!(!from_live_node(
            &head(&[passed, "X-Orderly-Forwarded: 1"]),
            nodes
        ));
        // A path that only begins like a request between nodes.
        let near = "GET /_orderly/shard-readings HTTP/1.1";
        assert!(!from_live_node(&head(&[near, named]), nodes));
        // A head cut short, or not HTTP.
        let whole = head(&[read, named]);
        assert!(!from_live_node(&whole[..whole.len() - 2], nodes));
        assert!(!from_live_node(
            b"\x16\x03\x01 not a request\r\n\r\n",
            nodes
        ));
        // Without the database's live nodes, nothing is a node's.
        assert!(!from_live_node(&whole, None));
    }
}
