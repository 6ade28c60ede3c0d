//! Wiring, in one place: the data directory and recovery, the engine, the webhook sender and its
//! worker, move-task runners, the snapshotter, the service and the HTTP server; and the order
//! they stop in.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use std::time::Duration;

use tokio::net::TcpListener;

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::delivery::{SenderConfig, Webhooks};
use crate::engine::Engine;
use crate::http::body::BodyLimits;
use crate::http::browser::{self, BrowserRules};
use crate::http::connection::ConnectionTimeouts;
use crate::http::server::ServerLimits;
use crate::persist::{self, DataDir};
use crate::service::{Service, ServiceSettings};
use tokio::sync::Notify;

/// Descriptors kept out of the connection limit: log segments, snapshots, webhook connections
/// (`--webhook-concurrency`), the listener, standard streams and what libraries open.
const RESERVED_DESCRIPTORS: u64 = 256;

/// Connections allowed when `--max-connections` is not given: the open-file limit (raised to
/// its hard limit first) less the reserve, so connections alone never starve the log of the
/// descriptor its next segment needs.
fn default_max_connections() -> usize {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(error) => {
            tracing::warn!(%error, "open-file limit unknown; assuming 1024");
            1024
        }
    };
    let connections = limit.saturating_sub(RESERVED_DESCRIPTORS).clamp(16, 65_536);
    usize::try_from(connections).unwrap_or(65_536)
}

/// Opens the data directory (recovering the engine from it) unless ephemeral, builds the
/// webhook sender, and hands both to the service. Fails if the directory is locked, damaged or
/// unreadable, or if the webhook client cannot be built (TLS setup). `listening` is the bound
/// address, which webhooks may not be sent to unless allowed.
pub fn build_service(
    config: &Config,
    clock: Arc<dyn Clock>,
    listening: SocketAddr,
) -> std::io::Result<Arc<Service>> {
    let (engine, data) = open_engine(config)?;
    let webhooks = Webhooks::new(
        config.webhook_allow.clone(),
        &SenderConfig {
            timeout: Duration::from_secs(config.webhook_timeout.max(1)),
            accept_invalid_certs: config.webhook_accept_invalid_certs,
            proxy: config.webhook_proxy.clone(),
            listening: Some(listening),
        },
        config.webhook_concurrency,
    )
    .map_err(std::io::Error::other)?;
    let settings = ServiceSettings {
        hostname: config.hostname.clone(),
        snapshot_after: config.snapshot_after,
    };
    let engine = Arc::new(engine);
    let journal = data.as_ref().map(|d| d.journal.clone());
    let backend = Arc::new(crate::backend::embedded::Embedded::new(
        engine.clone(),
        journal,
        clock.clone(),
        webhooks.wake_signal(),
    ));
    Ok(Service::new(
        backend,
        engine,
        data,
        Arc::new(webhooks),
        clock,
        settings,
    ))
}

/// The engine with its settings, recovered from the data directory unless ephemeral.
fn open_engine(config: &Config) -> std::io::Result<(Engine<Notify>, Option<DataDir>)> {
    let mut engine = Engine::new(&config.account_id, &config.region);
    let data = if config.ephemeral {
        None
    } else {
        let started = std::time::Instant::now();
        let (data, report) = persist::open(&config.data_dir, config.fsync, &mut engine)
            .map_err(std::io::Error::other)?;
        if let Some((file, offset, bytes)) = &report.dropped_tail {
            tracing::warn!(
                %file, offset, bytes,
                "dropped a torn final log record (a write cut off by a crash; it was never acknowledged)"
            );
        }
        tracing::info!(
            dir = %config.data_dir.display(),
            snapshot = report.snapshot.as_deref().unwrap_or("none"),
            snapshot_messages = report.snapshot_messages,
            replayed = report.replayed,
            millis = started.elapsed().as_millis() as u64,
            "recovered"
        );
        Some(data)
    };
    engine.delete_cooldown_ms = config.deleted_queue_cooldown * 1000;
    engine.fifo_http_subscriptions = config.fifo_http_subscriptions;
    engine.set_webhook_max_pending(config.webhook_max_pending);
    Ok((engine, data))
}

/// A server bound to its port, not yet serving.
pub struct App {
    pub listener: TcpListener,
    pub service: Arc<Service>,
    limits: ServerLimits,
    body: BodyLimits,
    browser: BrowserRules,
    tls: Option<tokio_rustls::TlsAcceptor>,
    auth: Option<Arc<crate::http::auth::Auth>>,
}

impl App {
    pub async fn bind(config: &Config) -> std::io::Result<App> {
        Self::bind_with_clock(config, Arc::new(SystemClock::default())).await
    }

    pub async fn bind_with_clock(config: &Config, clock: Arc<dyn Clock>) -> std::io::Result<App> {
        let listener = TcpListener::bind(config.bind).await?;
        let listening = listener.local_addr()?;
        let limits = ServerLimits {
            max_connections: config
                .max_connections
                .unwrap_or_else(default_max_connections),
            timeouts: ConnectionTimeouts {
                idle: Duration::from_secs(config.idle_timeout),
                header: Duration::from_secs(config.header_timeout),
            },
        };
        let body = BodyLimits {
            max_bytes: config.max_request_bytes,
            timeout: Duration::from_secs(config.body_timeout),
        };
        let browser = BrowserRules {
            cors_allow: browser::parse_list(&config.cors_allow),
            allow_host: browser::parse_list(&config.allow_host),
            loopback_only: listening.ip().is_loopback(),
            hostname: config.hostname.clone(),
        };
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(
                crate::http::tls::acceptor(cert, key)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
            ),
            _ => None,
        };
        let auth = match &config.auth {
            Some(path) => Some(Arc::new(
                crate::http::auth::Auth::load(path, &config.account_id)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
            )),
            None => None,
        };
        Ok(App {
            listener,
            service: build_service(config, clock, listening)?,
            limits,
            body,
            browser,
            tls,
            auth,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// `https` when serving TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// Serves until `shutdown` completes, then lets in-flight requests finish.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let service = &self.service;
        let deliveries = tokio::spawn(crate::delivery::run(
            service.engine.clone(),
            service.clock.clone(),
            service.webhooks.clone(),
        ));
        let snapshots = tokio::spawn(snapshot_when_due(self.service.clone()));
        self.service.backend.resume_move_tasks();
        let service = self.service.clone();
        let scheme = self.scheme();
        let router = crate::http::router(self.service, self.body, self.browser, scheme, self.auth);
        let served =
            crate::http::server::serve(self.listener, router, self.limits, self.tls, shutdown)
                .await;
        // Background work stops before the log closes (a snapshot already writing on a
        // blocking thread is not interrupted; the log's close waits for its own writer only).
        deliveries.abort();
        snapshots.abort();
        let _ = deliveries.await;
        let _ = snapshots.await;
        let _ = service.backend.stop_move_tasks().await;
        // Every answered request is durable already; this flushes background changes too.
        if let Some(data) = &service.data {
            let journal = data.journal.clone();
            let _ = tokio::task::spawn_blocking(move || journal.close()).await;
        }
        served
    }
}

/// Wait after a failed snapshot before the next try.
const SNAPSHOT_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Takes a snapshot whenever the log holds enough history to be worth compacting, so disk use
/// and restart time follow live data rather than history.
async fn snapshot_when_due(service: Arc<Service>) {
    let Some(data) = &service.data else {
        return;
    };
    let mut last_size = 0;
    let mut live_at_last = data.live_at_snapshot;
    // The least log that could make a snapshot due; the writer wakes this task when the log
    // reaches it (no polling).
    let mut wait_for = service.snapshot_after;
    loop {
        data.journal.log_reaches(wait_for).await;
        let live = service.engine.stored_bytes();
        let threshold = service.snapshot_after.max(last_size);
        let log_bytes = data.journal.bytes_since_snapshot();
        let growth = live.saturating_sub(live_at_last);
        if !snapshot_due(log_bytes, growth, threshold) {
            // History must reach the threshold: at least this much more log is needed.
            let history = log_bytes.saturating_sub(growth);
            wait_for = log_bytes + threshold.saturating_sub(history).max(1);
            continue;
        }
        let snapshotting = service.clone();
        match tokio::task::spawn_blocking(move || snapshotting.snapshot()).await {
            Ok(Ok(size)) => {
                last_size = size;
                live_at_last = live;
                wait_for = service.snapshot_after.max(last_size);
            }
            Ok(Err(error)) => {
                tracing::error!(%error, "snapshot failed; the log keeps growing");
                // An I/O failure (disk full, say): try again later, not at once.
                tokio::time::sleep(SNAPSHOT_RETRY).await;
            }
            Err(error) => {
                tracing::error!(%error, "snapshot task failed");
                tokio::time::sleep(SNAPSHOT_RETRY).await;
            }
        }
    }
}

/// A snapshot pays once the log written since the last one holds at least `threshold` bytes
/// of history: records of messages since deleted, and other changes. The part that only
/// added live messages (`live_growth`) is left out: a snapshot would write those messages
/// again, about as many bytes as the log already holds, and shorten neither the disk nor the
/// restart. So a queue filling up is never snapshotted over and over (each snapshot larger
/// than the last), which cost a durable send load a sixth of the server's CPU.
fn snapshot_due(log_bytes: u64, live_growth: u64, threshold: u64) -> bool {
    log_bytes.saturating_sub(live_growth) >= threshold
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

#[cfg(test)]
mod tests {
    use super::snapshot_due;

    #[test]
    fn a_snapshot_waits_for_history_not_for_growth() {
        const MIB: u64 = 1 << 20;
        // Steady send and delete: everything logged is history.
        assert!(snapshot_due(64 * MIB, 0, 64 * MIB));
        assert!(!snapshot_due(63 * MIB, 0, 64 * MIB));
        // A filling queue: the log is the new messages themselves.
        assert!(!snapshot_due(500 * MIB, 490 * MIB, 64 * MIB));
        assert!(snapshot_due(600 * MIB, 500 * MIB, 64 * MIB));
        // More growth than log (estimates are approximate) is no history at all.
        assert!(!snapshot_due(10 * MIB, 20 * MIB, 1));
    }
}
