//! Wiring: service, HTTP server, and shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::service::Service;

/// A server bound to its port, not yet serving.
pub struct App {
    pub listener: TcpListener,
    pub service: Arc<Service>,
}

impl App {
    pub async fn bind(config: &Config) -> std::io::Result<App> {
        Self::bind_with_clock(config, Arc::new(SystemClock::default())).await
    }

    pub async fn bind_with_clock(config: &Config, clock: Arc<dyn Clock>) -> std::io::Result<App> {
        let listener = TcpListener::bind(config.bind).await?;
        Ok(App {
            listener,
            service: Service::new(config, clock)?,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then lets in-flight requests finish.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        use axum::serve::ListenerExt;
        let deliveries = tokio::spawn(crate::delivery::run(self.service.clone()));
        let router = crate::http::router(self.service);
        // Small request/response exchanges: do not let Nagle's algorithm hold writes back.
        let listener = self.listener.tap_io(|tcp| {
            if let Err(error) = tcp.set_nodelay(true) {
                tracing::debug!(%error, "TCP_NODELAY not set");
            }
        });
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await;
        deliveries.abort();
        served
    }
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}
