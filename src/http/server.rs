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

/// Largest request head (request line and headers) read into memory; beyond it hyper answers
/// 431. Presigned URLs and SigV4 headers take a few kilobytes.
const MAX_HEAD_BYTES: usize = 64 * 1024;

#[derive(Clone, Debug)]
pub struct ServerLimits {
    pub max_connections: usize,
    pub timeouts: ConnectionTimeouts,
    /// Kept at the number of connections open (`GET /metrics`).
    pub open: prometheus_client::metrics::gauge::Gauge,
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
        let answer = router.router().call(request.map(axum::body::Body::new));
        async move {
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
        .max_headers(128);
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refused += 1;
            if refused.is_power_of_two() {
                tracing::warn!(
                    max = limits.max_connections,
                    refused,
                    "connection limit reached; new connections are closed"
                );
            }
            drop(stream);
            continue;
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
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, http, router, timeouts, watcher).await,
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
    graceful.shutdown().await;
    Ok(())
}
