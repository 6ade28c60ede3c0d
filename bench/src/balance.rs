//! A round-robin TCP balancer (`--balance`): spreads connections over several servers, so the
//! benchmark can drive several Orderly nodes on one database as one endpoint, and one node
//! through the same hop for a fair comparison. Each accepted connection is piped whole to
//! the next upstream in turn.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};

/// Serves `listen` until the process ends, forwarding to `upstreams` in turn.
pub async fn run(listen: &str, upstreams: Vec<SocketAddr>) -> std::io::Result<()> {
    if upstreams.is_empty() {
        return Err(std::io::Error::other(
            "--balance needs at least one upstream",
        ));
    }
    let listener = TcpListener::bind(listen).await?;
    let upstreams = Arc::new(upstreams);
    let next = Arc::new(AtomicUsize::new(0));
    loop {
        let (mut client, _) = listener.accept().await?;
        let turn = next.fetch_add(1, Ordering::Relaxed) % upstreams.len();
        let upstream = upstreams[turn];
        tokio::spawn(async move {
            // An upstream not up yet closes the connection; the client tries again.
            let Ok(mut server) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        });
    }
}
