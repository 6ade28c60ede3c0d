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
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower::Service;

use super::connection::{ConnectionState, ConnectionTimeouts, Watched};
use super::link_server::{opens_link, serve_link, LinkLimits};

/// Largest request head (request line and headers) read into memory; beyond it hyper answers
/// 431. Presigned URLs and SigV4 headers take a few kilobytes.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Most header lines a request may have; one passed on by another node may have the few that
/// node adds besides (hyper answers 431 past the larger bound, the router past this one).
const MAX_HEADERS: usize = 128;

/// Connections past the limit being told so at once; any beyond these wait to be accepted.
const REFUSALS: usize = 64;

/// How long a connection past the limit is given to take its answer and close.
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

/// Tells a connection past the limit so (plain HTTP only: TLS would need a handshake): once
/// its request's head has come (a client does not expect an answer before it asks), the
/// answer, then reads until the client closes, so the close does not reset the connection and
/// lose the answer. Nothing read is acted on.
async fn refuse_at_limit(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tokio::time::timeout(REFUSAL_TIME, async {
        let mut head = Vec::new();
        let mut unread = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD_BYTES {
            let read = stream.read(&mut unread).await?;
            if read == 0 {
                return Ok(());
            }
            head.extend_from_slice(&unread[..read]);
            // A link's opening: closed at once, so the other node knows at once.
            if head.first().copied().is_some_and(opens_link) {
                return Ok(());
            }
        }
        stream.write_all(&AT_LIMIT).await?;
        stream.shutdown().await?;
        while stream.read(&mut unread).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// 431 for a request with more header lines than `MAX_HEADERS`, unless another node passed it
/// on.
fn too_many_headers<B>(request: &hyper::Request<B>) -> bool {
    let headers = request.headers();
    headers.len() > MAX_HEADERS && !headers.contains_key(super::node_headers::FORWARDED)
}

#[derive(Clone, Debug)]
pub struct ServerLimits {
    pub max_connections: usize,
    pub timeouts: ConnectionTimeouts,
    /// Kept at the number of connections open (`GET /metrics`).
    pub open: prometheus_client::metrics::gauge::Gauge,
    /// The bounds of links from other nodes (`link_server`).
    pub link: LinkLimits,
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

/// One connection, plain or TLS, served until it closes or the server shuts down.
async fn serve_connection<IO>(
    io: IO,
    http: Builder,
    router: Served,
    timeouts: ConnectionTimeouts,
    watcher: Watcher,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let state = ConnectionState::new();
    let io = TokioIo::new(Watched::new(io, state.clone(), timeouts));
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let in_flight = state.begin();
        let answer = (!too_many_headers(&request))
            .then(|| router.router().call(request.map(axum::body::Body::new)));
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

/// Serves `router` on `listener` until `shutdown` completes, then waits for open connections
/// to finish their requests.
pub async fn serve(
    listener: TcpListener,
    router: Served,
    limits: ServerLimits,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
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
    let (closing, _) = tokio::sync::watch::channel(false);
    let (links_open, mut links_gone) = tokio::sync::mpsc::channel::<()>(1);
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
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                refused += 1;
                if refused.is_power_of_two() {
                    tracing::warn!(
                        max = limits.max_connections,
                        refused,
                        "connection limit reached; new connections are answered 503 and closed"
                    );
                }
                if tls.is_some() {
                    drop(stream);
                    continue;
                }
                // Every plain connection past the limit is answered, never closed unread (a
                // node passing a request on could not tell whether it was acted on): while
                // `REFUSALS` answers are being given, this waits for one to end (each within
                // `REFUSAL_TIME`) or a slot to free, and later connections wait in the
                // listen backlog.
                let admitted = tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    slot = slots.clone().acquire_owned() => Ok(slot),
                    permit = refusals.clone().acquire_owned() => Err(permit),
                };
                match admitted {
                    Ok(Ok(slot)) => slot,
                    Err(Ok(permit)) => {
                        tokio::spawn(async move {
                            refuse_at_limit(stream).await;
                            drop(permit);
                        });
                        continue;
                    }
                    // The semaphores are never closed.
                    Ok(Err(_)) | Err(Err(_)) => continue,
                }
            }
        };
        let open = limits.open.clone();
        open.inc();
        // Small request/response exchanges: do not let Nagle's algorithm hold writes back.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set");
        }
        let (router, http, watcher, tls) = (
            router.clone(),
            http.clone(),
            graceful.watcher(),
            tls.clone(),
        );
        let timeouts = limits.timeouts;
        let (link, closing, link_open) = (limits.link, closing.subscribe(), links_open.clone());
        tokio::spawn(async move {
            match tls {
                None => {
                    // A connection's first byte tells a link from HTTP; one that sends
                    // nothing within the idle time, or before the server stops, is closed,
                    // as hyper would close it.
                    let mut first = [0u8; 1];
                    let mut stopping = closing.clone();
                    let peeked = tokio::select! {
                        peeked = tokio::time::timeout(timeouts.idle, stream.peek(&mut first)) => {
                            peeked
                        }
                        _ = stopping.wait_for(|closing| *closing) => Ok(Ok(0)),
                    };
                    match peeked {
                        Ok(Ok(0)) => {}
                        Ok(Ok(1)) if opens_link(first[0]) => {
                            drop(watcher);
                            serve_link(stream, move || router.router(), link, closing).await;
                            drop(link_open);
                        }
                        Ok(Ok(_)) => {
                            drop(link_open);
                            serve_connection(stream, http, router, timeouts, watcher).await;
                        }
                        Ok(Err(_)) | Err(_) => {}
                    }
                }
                // The handshake counts as reading the first request's headers.
                Some(tls) => {
                    match tokio::time::timeout(timeouts.header, tls.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            serve_connection(stream, http, router, timeouts, watcher).await;
                        }
                        Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
            }
            drop(slot);
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
