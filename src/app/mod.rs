//! Wiring, in this folder: the data directory and recovery, the engine, the webhook sender and
//! the service over them (`engine_service.rs`); the webhook worker, move-task runners and the
//! snapshotter (`started.rs`, which also stops them in order); what the routes are built with
//! (`routes.rs`); on a database, the log and lease (`log_database.rs`) and the succession of
//! standby and leader (`succession.rs`). This file binds the server and chooses among them.

mod engine_service;
mod log_database;
mod move_said;
mod routes;
mod spread;
mod started;
mod succession;

#[cfg(test)]
mod move_said_tests;
#[cfg(test)]
mod router_tests;

use engine_service::{build_service, Built};
use move_said::said_of_move;
use routes::Routes;
use started::Started;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::clock::{Clock, ClockMode, ManualClock, SystemClock};
use crate::config::Config;
use crate::http::body::BodyLimits;
use crate::http::browser::{self, BrowserRules};
use crate::http::connection::ConnectionTimeouts;
use crate::http::server::ServerLimits;
use crate::persist;
use crate::persist::database::shard_map::ShardMap;
use crate::persist::snapshot::Snapshotter;
use crate::service::Service;

/// Descriptors kept out of the connection limit: log segments, snapshots, webhook connections
/// (`--webhook-concurrency`), the listener, standard streams and what libraries open, and the
/// connections other nodes hold in slots of their own.
const RESERVED_DESCRIPTORS: u64 = 256 + crate::http::slots::PEER_CONNECTIONS as u64;

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

/// A manual clock on a data directory starts where it was last moved to (`CLOCK`), and keeps
/// each move there.
fn keep_manual_time_in(dir: &std::path::Path, clock: &ManualClock) -> std::io::Result<()> {
    if let Some(at) = persist::clock_file::read(dir).map_err(std::io::Error::other)? {
        // Behind the machine's time (a restart long after): the machine's time it is.
        let _ = clock.set(at.min(crate::clock::LATEST));
    }
    let dir = dir.to_path_buf();
    clock.record_moves_with(Box::new(move |at| persist::clock_file::write(&dir, at)));
    Ok(())
}

/// How `GET /_orderly/cluster` reads a node on its own: its URL, and how far its log is
/// written (when it keeps one).
fn single_status(
    built: &Built,
    own_url: String,
    shards: u32,
) -> crate::service::cluster::ClusterStatus {
    let log_writers: Vec<_> = (built.snapshots.iter())
        .map(|s| s.log_writer().clone())
        .collect();
    crate::service::cluster::single(own_url, shards, move || {
        log_writers.iter().map(|log| log.durable().lsn).collect()
    })
}

/// The way to the nodes leading the shards in `elsewhere` (each with its leader's URL).
fn shards_led_elsewhere(
    config: &Config,
    (body, forwarded): (BodyLimits, crate::metrics::Forwarded),
    own_url: &str,
    elsewhere: &[(u32, String)],
) -> std::io::Result<crate::http::standby::Forwarding> {
    let settings = crate::http::standby::ForwardSettings {
        body,
        leader_wait: Duration::from_secs(config.leader_wait),
        idle_timeout: Duration::from_secs(config.idle_timeout),
        own_url: own_url.to_string(),
        node_link: config.node_link,
    };
    let standby = crate::http::standby::Standby::new(settings, forwarded)?;
    let mut leaders = vec![String::new(); config.shards as usize];
    for (shard, url) in elsewhere {
        if let Some(leader) = leaders.get_mut(*shard as usize) {
            leader.clone_from(url);
        }
    }
    standby.set_shard_leaders(leaders);
    Ok(Arc::new(standby).begin_generation())
}

/// `--import-from DIR` or `--export-to DIR`: moves the whole state between a data directory
/// and the database `--storage` names; `None` when neither is asked for. Says what it moved.
pub async fn transfer(config: &Config) -> Option<std::io::Result<String>> {
    let (import, dir) = match (&config.import_from, &config.export_to) {
        (Some(dir), _) => (true, dir.clone()),
        (None, Some(dir)) => (false, dir.clone()),
        (None, None) => return None,
    };
    let invalid = |message: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, message);
    let Some(url) = &config.storage else {
        return Some(Err(invalid(
            "--import-from and --export-to move a state to or from --storage URL",
        )));
    };
    let what = if import { "import" } else { "export" };
    let settings = offline_settings(config, url, format!("{what} of {}", dir.display()));
    let moved = tokio::task::spawn_blocking(move || {
        use crate::persist::database::transfer;
        if import {
            transfer::import(&dir, &settings)
        } else {
            transfer::export(&dir, &settings)
        }
    })
    .await;
    Some(match moved {
        Ok(Ok(moved)) => Ok(format!(
            "{} {} queues and {} messages: {}",
            if import { "imported" } else { "exported" },
            moved.queues,
            moved.messages,
            moved.snapshot
        )),
        Ok(Err(error)) => Err(std::io::Error::other(error)),
        Err(error) => Err(std::io::Error::other(error)),
    })
}

/// The database settings of a command that runs with no node serving and then exits, as
/// `advertise_url` (which names it in the lease it may hold).
fn offline_settings(
    config: &Config,
    url: &str,
    advertise_url: String,
) -> crate::persist::database::Settings {
    crate::persist::database::Settings {
        url: url.to_string(),
        region: config.region.clone(),
        account_id: config.account_id.clone(),
        advertise_url,
        wait_for_lease: false,
        batch_wait: std::time::Duration::ZERO,
        commit_wait: std::time::Duration::ZERO,
        inserts: 1,
        require_synchronous_replication: false,
        shards_alone: false,
        shards: config.shards,
        placed: config.shard_databases.clone(),
        placed_checked: Default::default(),
    }
}

/// `--move-shards FIRST-LAST=URL`: moves a range of shards into another database (or back
/// into the home); `None` when not asked for. Says what it moved and how the nodes are to be
/// started.
pub async fn move_shards(config: &Config) -> Option<std::io::Result<String>> {
    use crate::persist::database::shard_map::shown;
    let to = config.move_shards.clone()?;
    let Some(url) = &config.storage else {
        return Some(Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "--move-shards moves shards kept by the database --storage URL names",
        )));
    };
    let settings = offline_settings(config, url, "--move-shards".into());
    let range = to.range();
    let moved = tokio::task::spawn_blocking(move || {
        crate::persist::database::range_move::move_range(&settings, &to).map(|m| (m, to))
    })
    .await;
    Some(match moved {
        Ok(Ok((moved, to))) => Ok(said_of_move(&range, &moved, &shown(&to.url))),
        Ok(Err(error)) => Err(std::io::Error::other(error)),
        Err(error) => Err(std::io::Error::other(error)),
    })
}

/// Reads and applies `--init`, logging what it created and each difference it left alone.
async fn apply_init(
    config: &Config,
    path: &std::path::Path,
    service: &Service,
    scheme: &'static str,
    listening: SocketAddr,
) -> std::io::Result<crate::service::init::InitReport> {
    let invalid =
        |e: crate::init::InitError| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    let file = crate::init::InitFile::read(path).map_err(invalid)?;
    let ctx = crate::service::RequestContext {
        scheme,
        host: config
            .hostname
            .clone()
            .unwrap_or_else(|| listening.to_string()),
        sender_id: config.account_id.as_str().into(),
        principal: format!("arn:aws:iam::{}:root", config.account_id).into(),
        request_id: "init".into(),
        namespace: service.namespaces().home().clone(),
        operator: true,
        authenticated: true,
        trace_header: None,
    };
    let place = crate::service::init::InitPlace { file: path };
    let report = service
        .apply_init(&file, &place, &ctx)
        .await
        .map_err(invalid)?;
    for difference in &report.differences {
        tracing::warn!("{difference}");
    }
    tracing::info!(file = %path.display(), created = report.created.len(), "init file applied");
    Ok(report)
}

/// A server bound to its port, not yet serving.
pub struct App {
    pub listener: TcpListener,
    pub service: Arc<Service>,
    snapshots: Vec<Arc<Snapshotter>>,
    lease: Vec<Arc<crate::persist::database::Keeper>>,
    /// A standby's way to leadership (`--storage`, the lease held by another node).
    waiting: Option<log_database::Waiting>,
    /// On a database: what the home lists this node by among the live nodes.
    announcement: Option<crate::persist::database::lease::Announcement>,
    standby: Option<crate::http::standby::Forwarding>,
    /// Where requests for shards another node leads go, when some are.
    by_shard: Option<crate::http::standby::Forwarding>,
    /// A node leading its share of a database's shards: what tells it to start over.
    spread: Option<spread::Spread>,
    /// On a database: what this node starts over from once it loses the lease.
    node: Option<log_database::Node>,
    limits: ServerLimits,
    body: BodyLimits,
    browser: BrowserRules,
    tls: Option<tokio_rustls::TlsAcceptor>,
    auth: Option<Arc<crate::http::auth::Auth>>,
    /// STS's temporary credentials: in the database, when there is one.
    sessions: Arc<crate::http::sessions::Sessions>,
    /// `--clock manual`: the clock `POST /_orderly/clock` moves.
    clock_control: Option<Arc<ManualClock>>,
    /// What `--init` created and where it differed from what existed.
    pub init_report: Option<crate::service::init::InitReport>,
}

/// Which database keeps each shard's log, from `--storage` (`home`) and `--shard-database`.
fn shard_map(config: &Config, home: &str) -> std::io::Result<ShardMap> {
    ShardMap::new(home, &config.shard_databases, config.shards)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
}

impl App {
    /// Binds with the clock `--clock` asks for: the machine's, or one that starts at the
    /// machine's time and moves only through `POST /_orderly/clock`.
    pub async fn bind(config: &Config) -> std::io::Result<App> {
        let system = Arc::new(SystemClock::skewed(config.test_clock_offset));
        if config.clock == ClockMode::System {
            return Self::bind_with_clock(config, system).await;
        }
        let manual = Arc::new(ManualClock::new(system.now()));
        if !config.ephemeral && config.storage.is_none() {
            keep_manual_time_in(&config.data_dir, &manual)?;
        }
        let mut app = Self::bind_with_clock(config, manual.clone()).await?;
        if let Some(storage) = &config.storage {
            // Renewals write the leader's time each second; a move is written at once, in
            // every database of the shard map.
            let urls: Vec<String> = shard_map(config, storage)?
                .urls()
                .map(str::to_string)
                .collect();
            let own_url = match &config.advertise_url {
                Some(url) => url.clone(),
                None => format!("{}://{}", app.scheme(), app.local_addr()?),
            };
            manual.record_moves_with(Box::new(move |at| {
                crate::persist::database::lease::record_time(&urls, &own_url, at)
            }));
        }
        app.clock_control = Some(manual);
        Ok(app)
    }

    /// Binds with `clock` (tests bring their own); the clock endpoint stays off.
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
            open: Default::default(),
            peers: Default::default(),
            nodes: None,
            link: crate::http::link_server::LinkLimits {
                frame_bytes: config.max_request_bytes + crate::http::link_server::HEAD_BYTES,
                idle: Duration::from_secs(config.idle_timeout),
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
                crate::http::auth::Auth::load(path, &config.account_id, config.single_namespace)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
            )),
            None => None,
        };
        let sessions = Arc::new(match &config.storage {
            Some(url) => crate::http::sessions::Sessions::kept_in(
                crate::persist::database::sessions::SessionTable::new(url)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
            ),
            None => Default::default(),
        });
        let scheme = if tls.is_some() { "https" } else { "http" };
        let own_url = config
            .advertise_url
            .clone()
            .unwrap_or_else(|| format!("{scheme}://{listening}"));
        let metrics = crate::metrics::Metrics::default();
        let node = match &config.storage {
            Some(url) => {
                let forwarding = crate::http::standby::ForwardSettings {
                    body,
                    leader_wait: Duration::from_secs(config.leader_wait),
                    idle_timeout: Duration::from_secs(config.idle_timeout),
                    own_url: own_url.clone(),
                    node_link: config.node_link,
                };
                let forwarded = metrics.forwarded.clone();
                let standby = crate::http::standby::Standby::new(forwarding, forwarded)?;
                let survey = match config.spread_shards && config.shards > 1 {
                    true => Some(Arc::new(crate::persist::database::survey::Survey::start(
                        shard_map(config, url)?,
                        own_url.clone(),
                    )?)),
                    false => None,
                };
                Some(log_database::Node {
                    config: config.clone(),
                    url: url.clone(),
                    clock: clock.clone(),
                    listening,
                    own_url: own_url.clone(),
                    standby: Arc::new(standby),
                    survey,
                    agreed: Default::default(),
                    placed_checked: Default::default(),
                })
            }
            None => None,
        };
        let (mut built, waiting, spread) = match &node {
            Some(node) => succession::build(node, metrics).await?,
            None => (build_service(config, clock, listening)?, None, None),
        };
        let by_shard = match config.test_shards_led_elsewhere.as_slice() {
            [] => built.by_shard.take(),
            elsewhere => {
                let forwarded = built.service.metrics.forwarded.clone();
                Some(shards_led_elsewhere(
                    config,
                    (body, forwarded),
                    &own_url,
                    elsewhere,
                )?)
            }
        };
        let status = match &built.cluster {
            Some(status) => status.clone(),
            None => single_status(&built, own_url, config.shards),
        };
        built.service.set_cluster_status(status);
        let mut limits = limits;
        limits.open = built.service.metrics.open_connections.clone();
        limits.peers = built.service.metrics.peer_connections.clone();
        limits.nodes = node.as_ref().map(|node| node.standby.clone());
        // A standby changes nothing itself: the leader's state is what an init file set up.
        let init_report = match &config.init {
            Some(_) if waiting.is_some() => {
                tracing::info!("a standby applies no --init file: the leader's state holds it");
                None
            }
            Some(path) => Some(apply_init(config, path, &built.service, scheme, listening).await?),
            None => None,
        };
        Ok(App {
            listener,
            service: built.service,
            snapshots: built.snapshots,
            lease: built.lease,
            standby: built.standby,
            by_shard,
            spread,
            waiting,
            announcement: built.announcement,
            node,
            limits,
            body,
            browser,
            tls,
            auth,
            sessions,
            clock_control: None,
            init_report,
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

    /// Serves until `shutdown` completes, then lets in-flight requests finish. A standby passes
    /// requests on to the leader until it leads itself; on a database, a node that loses the
    /// lease steps down and serves on as a standby (`succession`).
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let routes = Routes {
            scheme: self.scheme(),
            body: self.body,
            browser: self.browser,
            clock_control: self.clock_control,
            auth: self.auth,
            sessions: self.sessions,
        };
        let generation = succession::Generation {
            service: self.service,
            snapshots: self.snapshots,
            lease: self.lease,
            standby: self.standby,
            by_shard: self.by_shard.clone(),
            spread: self.spread,
            waiting: self.waiting,
            announcement: self.announcement,
        };
        let Some(node) = self.node else {
            let service = generation.service.clone();
            let started = Started::default();
            started.begin(&service, generation.snapshots, generation.lease);
            let router = routes.router(service.clone(), None, self.by_shard);
            let router = crate::http::server::Served::Router(router);
            let served =
                crate::http::server::serve(self.listener, router, self.limits, self.tls, shutdown)
                    .await;
            started.stop(&service).await;
            return served;
        };
        let server = (self.listener, self.limits, self.tls);
        succession::serve(node, generation, routes, server, shutdown).await
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
