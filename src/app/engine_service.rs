//! An engine served: the engine opened (from its data directory unless ephemeral) with its
//! settings, the service over it, and the log that keeps its changes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::backend::OtherNodes;
use crate::clock::Clock;
use crate::config::Config;
use crate::delivery::{NodeUrls, SenderConfig, Webhooks};
use crate::engine::Engine;
use crate::persist::snapshot::Snapshotter;
use crate::persist::{self, DataDir};
use crate::service::{Service, ServiceSettings};

/// What `build_service` makes: the service, the snapshotters of the logs it opened (none when
/// ephemeral), and the leases on logs kept in a database.
pub(super) struct Built {
    pub service: Arc<Service>,
    pub snapshots: Vec<Arc<Snapshotter>>,
    /// One per shard this node leads, in order.
    pub lease: Vec<Arc<crate::persist::database::Keeper>>,
    /// How `GET /_orderly/cluster` reads this node's state, when not single.
    pub cluster: Option<crate::service::cluster::ClusterStatus>,
    /// On a database: whether this node leads, and where requests go while it does not.
    pub standby: Option<crate::http::standby::Forwarding>,
    /// Where requests for shards another node leads go, when some are.
    pub by_shard: Option<crate::http::standby::Forwarding>,
    /// On a database: what the home lists this generation by among the live nodes.
    pub announcement: Option<crate::persist::database::lease::Announcement>,
}

/// Opens the data directory (recovering the engine from it) unless ephemeral, builds the
/// webhook sender, and hands both to the service. Fails if the directory is locked, damaged or
/// unreadable, or if the webhook client cannot be built (TLS setup). `listening` is the bound
/// address, which webhooks may not be sent to unless allowed.
pub(super) fn build_service(
    config: &Config,
    clock: Arc<dyn Clock>,
    listening: SocketAddr,
) -> std::io::Result<Built> {
    if config.shards > 1 {
        return serve_shards(config, clock, listening);
    }
    let (engine, data) = open_engine(config)?;
    let log_writer = data.as_ref().map(|d| d.log_writer.clone());
    let engine = Arc::new(engine);
    let snapshots = (data.into_iter())
        .map(|data| {
            Arc::new(Snapshotter::of_dir(
                engine.clone(),
                data,
                config.snapshot_after,
            ))
        })
        .collect();
    let metrics = crate::metrics::Metrics::default();
    let log = Log {
        log_writer,
        snapshots,
        tenure: None,
    };
    serve_engine(config, clock, listening, engine, log, metrics)
}

/// The log a service's engine writes to: none when ephemeral; on a database, with the tenure
/// its lease keeps.
pub(super) struct Log {
    pub(super) log_writer: Option<Arc<crate::persist::writer::LogWriter>>,
    pub(super) snapshots: Vec<Arc<Snapshotter>>,
    pub(super) tenure: Option<Arc<crate::persist::tenure::Tenure>>,
}

/// The service on `engine`, whose changes `log` keeps.
pub(super) fn serve_engine(
    config: &Config,
    clock: Arc<dyn Clock>,
    listening: SocketAddr,
    engine: Arc<Engine<Notify>>,
    log: Log,
    metrics: crate::metrics::Metrics,
) -> std::io::Result<Built> {
    let shard = ShardParts {
        engine,
        log_writer: log.log_writer,
        tenure: log.tenure,
    };
    serve_engines(
        config,
        (clock, listening),
        vec![shard],
        (log.snapshots, None),
        metrics,
    )
}

/// One shard's engine, the log it writes to (none when ephemeral) and, on a database, the
/// tenure its lease keeps.
pub(super) struct ShardParts {
    pub(super) engine: Arc<Engine<Notify>>,
    pub(super) log_writer: Option<Arc<crate::persist::writer::LogWriter>>,
    pub(super) tenure: Option<Arc<crate::persist::tenure::Tenure>>,
}

/// The other nodes of a database whose shards are spread over several: how to ask them, and
/// where they are (no webhook's destination).
pub(super) struct Others {
    pub(super) asked: Arc<dyn OtherNodes>,
    pub(super) urls: NodeUrls,
}

/// The service over `shards` (those of `--shards` this node keeps, in order): the engine itself
/// when there is one, else each an embedded backend of its own behind the router
/// (`backend::sharded`), which pulls the parcels of shards `others` lead from them.
pub(super) fn serve_engines(
    config: &Config,
    (clock, listening): (Arc<dyn Clock>, SocketAddr),
    shards: Vec<ShardParts>,
    (snapshots, others): (Vec<Arc<Snapshotter>>, Option<Others>),
    metrics: crate::metrics::Metrics,
) -> std::io::Result<Built> {
    let elsewhere = others.as_ref().map(|others| others.asked.clone());
    let nodes = others.map(|others| others.urls);
    let (webhooks, settings) = service_parts(config, (listening, nodes))?;
    let count = config.shards as usize;
    let logs: Vec<_> = (shards.iter())
        .filter_map(|shard| {
            let number = shard.engine.relay.shard().number;
            (shard.log_writer.as_ref()).map(|log| (number, log.metrics()))
        })
        .collect();
    if logs.len() == shards.len() {
        metrics.set_logs(count as u32, logs);
    }
    let parcels_waiting: Arc<[Notify]> = (0..count).map(|_| Notify::new()).collect();
    let captured = Arc::new(crate::backend::captured::CapturedMessages::default());
    let make = {
        let (clock, wake) = (clock.clone(), webhooks.wake_signal());
        let long_polls = metrics.long_polls_waiting.clone();
        let among = (count > 1).then(|| (captured.clone(), parcels_waiting.clone()));
        move |shard: ShardParts| {
            let mut backend = crate::backend::embedded::Embedded::new(
                shard.engine,
                shard.log_writer,
                clock.clone(),
                wake.clone(),
            )
            .counting_long_polls(long_polls.clone());
            if let Some(tenure) = shard.tenure {
                backend = backend.within(tenure);
            }
            if let Some((captured, parcels_waiting)) = &among {
                backend = backend.among_shards(captured.clone(), parcels_waiting.clone());
            }
            Arc::new(backend)
        }
    };
    let mut backends: Vec<_> = shards.into_iter().map(&make).collect();
    let backend: Arc<dyn crate::backend::Backend> = match count {
        1 => backends.pop().expect("one"),
        _ => {
            let namespaces = crate::engine::namespace::Namespaces::new(
                crate::engine::namespace::Namespace::new(&config.region, &config.account_id),
            );
            let clock = clock.clone();
            let mut sharded = crate::backend::sharded::Sharded::new(
                count as u32,
                backends,
                namespaces,
                clock,
                parcels_waiting,
            );
            if let Some(elsewhere) = elsewhere {
                sharded = sharded.with_other_nodes(elsewhere);
            }
            let make: crate::backend::sharded::MakeShard =
                Arc::new(move |engine, log_writer, tenure| {
                    make(ShardParts {
                        engine,
                        log_writer: Some(log_writer),
                        tenure: Some(tenure),
                    })
                });
            sharded = sharded.making_shards_with(make);
            // Before anything runs, the logs of a data directory agree (a database's always do).
            if config.storage.is_none() {
                sharded.agree();
            }
            Arc::new(sharded)
        }
    };
    Ok(Built {
        service: Service::new(backend, Arc::new(webhooks), clock, settings, metrics),
        snapshots,
        lease: Vec::new(),
        cluster: None,
        standby: None,
        by_shard: None,
        announcement: None,
    })
}

/// The service over `--shards` engines, each recovered from a data directory of its own
/// inside the data directory (`persist::shard_dirs`) unless ephemeral.
fn serve_shards(
    config: &Config,
    clock: Arc<dyn Clock>,
    listening: SocketAddr,
) -> std::io::Result<Built> {
    use crate::engine::shard::Shard;
    let count = config.shards;
    let dirs = match config.ephemeral {
        true => Vec::new(),
        false => persist::shard_dirs::shard_dirs(&config.data_dir, count)
            .map_err(std::io::Error::other)?,
    };
    let mut shards = Vec::new();
    let mut snapshots = Vec::new();
    let led_elsewhere = |number| {
        (config.test_shards_led_elsewhere.iter()).any(|(elsewhere, _)| *elsewhere == number)
    };
    for number in (0..count).filter(|&number| !led_elsewhere(number)) {
        let shard = Shard { number, count };
        let mut engine = Engine::for_shard(&config.account_id, &config.region, shard);
        let data = match dirs.get(number as usize) {
            Some(dir) => Some(recover(dir, config, &mut engine)?),
            None => None,
        };
        configure_engine(config, &mut engine);
        let engine = Arc::new(engine);
        let log_writer = data.as_ref().map(|d| d.log_writer.clone());
        if let Some(data) = data {
            let after = config.snapshot_after;
            snapshots.push(Arc::new(Snapshotter::of_dir(engine.clone(), data, after)));
        }
        shards.push(ShardParts {
            engine,
            log_writer,
            tenure: None,
        });
    }
    let metrics = crate::metrics::Metrics::default();
    serve_engines(
        config,
        (clock, listening),
        shards,
        (snapshots, None),
        metrics,
    )
}

/// What a service needs besides its storage: the webhook sender and its settings.
fn service_parts(
    config: &Config,
    (listening, nodes): (SocketAddr, Option<NodeUrls>),
) -> std::io::Result<(Webhooks, ServiceSettings)> {
    let webhooks = Webhooks::new(
        config.webhook_allow.clone(),
        &SenderConfig {
            timeout: Duration::from_secs(config.webhook_timeout.max(1)),
            accept_invalid_certs: config.webhook_accept_invalid_certs,
            proxy: config.webhook_proxy.clone(),
            listening: Some(listening),
            nodes,
        },
        config.webhook_concurrency,
    )
    .map_err(std::io::Error::other)?;
    let settings = ServiceSettings {
        hostname: config.hostname.clone(),
        account_id: config.account_id.clone(),
        region: config.region.clone(),
        single_namespace: config.single_namespace,
        pace_senders: config.pace_senders,
    };
    Ok((webhooks, settings))
}

/// The engine with its settings, recovered from the data directory unless ephemeral.
fn open_engine(config: &Config) -> std::io::Result<(Engine<Notify>, Option<DataDir>)> {
    let mut engine = Engine::new(&config.account_id, &config.region);
    let data = if config.ephemeral {
        None
    } else {
        // A directory cut into shards is refused here, with the count to start it with.
        persist::shard_dirs::shard_dirs(&config.data_dir, 1).map_err(std::io::Error::other)?;
        Some(recover(&config.data_dir, config, &mut engine)?)
    };
    configure_engine(config, &mut engine);
    Ok((engine, data))
}

/// Opens the data directory `dir`, recovering `engine` (fresh) from it, and says what it found.
fn recover(
    dir: &std::path::Path,
    config: &Config,
    engine: &mut Engine<Notify>,
) -> std::io::Result<DataDir> {
    let started = std::time::Instant::now();
    let (data, report) = persist::open(dir, config.fsync, engine).map_err(std::io::Error::other)?;
    if let Some((file, offset, bytes)) = &report.dropped_tail {
        tracing::warn!(
            %file, offset, bytes,
            "dropped a cut-short or damaged final log record: a crash in the middle of a write leaves one, and so does damage to the file, which cannot be told apart; the changes it held are not replayed"
        );
    }
    tracing::info!(
        dir = %dir.display(),
        snapshot = report.snapshot.as_deref().unwrap_or("none"),
        snapshot_messages = report.snapshot_messages,
        replayed = report.replayed,
        millis = started.elapsed().as_millis() as u64,
        "recovered"
    );
    Ok(data)
}

/// The engine's settings from the flags.
pub(super) fn configure_engine(config: &Config, engine: &mut Engine<Notify>) {
    engine.queues.delete_cooldown_ms = config.deleted_queue_cooldown.saturating_mul(1000);
    engine.topics.fifo_http_subscriptions = config.fifo_http_subscriptions;
    engine.queues.enforce_queue_policies = config.enforce_queue_policies;
    engine.webhooks.set_max_pending(config.webhook_max_pending);
}
