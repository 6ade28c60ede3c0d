//! The accept loop: a bounded number of HTTP/1.1 connections, each watched for idleness and
//! slow headers (`connection.rs`), served by the router until shutdown, when every connection
//! finishes the request it is handling and closes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::Service;

use super::connection::{ConnectionState, ConnectionTimeouts, Watched};

/// Largest request head (request line and headers) read into memory; beyond it hyper answers
/// 431. Presigned URLs and SigV4 headers take a few kilobytes.
const MAX_HEAD_BYTES: usize = 64 * 1024;

#[derive(Clone, Copy, Debug)]
pub struct ServerLimits {
    pub max_connections: usize,
    pub timeouts: ConnectionTimeouts,
}

/// Serves `router` on `listener` until `shutdown` completes, then waits for open connections
/// to finish their requests.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
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
        // Small request/response exchanges: do not let Nagle's algorithm hold writes back.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set");
        }
        let state = ConnectionState::new();
        let io = TokioIo::new(Watched::new(stream, state.clone(), limits.timeouts));
        let router = router.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let in_flight = state.begin();
            let answer = router.clone().call(request.map(axum::body::Body::new));
            async move {
                let response = answer.await;
                drop(in_flight);
                response
            }
        });
        let connection = graceful.watch(http.serve_connection(io, service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection closed");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
