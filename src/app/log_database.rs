//! `--storage URL`: the engine recovered from the log and snapshots in that
//! database by the node holding the lease. A node that finds the lease held starts as a
//! standby: it serves at once by passing every request on to the leader (`http::standby`), and
//! keeps asking for the lease; once it has it, it recovers the engine and serves it itself.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use super::engine_service::{configure_engine, serve_engine, Built, Log};
use super::started::Started;
use crate::clock::Clock;
use crate::config::Config;
use crate::engine::Engine;
use crate::http::standby::{Forwarding, Standby};
use crate::persist::database::follow::{Following, Progress, Stopped};
use crate::persist::database::lease::Nodes;
use crate::persist::database::replication::Shared;
use crate::persist::database::{Asked, DatabaseLog, ReadyDatabase, Settings};
use crate::persist::snapshot::Snapshotter;
use crate::service::cluster::{ClusterState, ClusterStatus};
use crate::service::Service;
use crate::worker::Thread;

/// A standby's way to leadership, handed from `build` to `App::serve`.
pub struct Waiting {
    prepared: OffThread,
    engine: Arc<Engine<Notify>>,
    /// The log followed into `engine` meanwhile.
    pub following: Arc<Following>,
    pub standby: Forwarding,
    own_url: String,
    snapshot_after: u64,
    epoch: Arc<AtomicI64>,
}

/// Holds the database's preparation and drops it on a thread of its own: it owns a runtime,
/// which must not be dropped inside the server's (a standby stopped while it waits).
struct OffThread(Option<ReadyDatabase>);

impl Drop for OffThread {
    fn drop(&mut self) {
        if let Some(prepared) = self.0.take() {
            let slot = Arc::new(std::sync::Mutex::new(Some(prepared)));
            let taken = slot.clone();
            // Let go of at once: the thread ends once it has dropped it.
            let spawned = Thread::start("drop", move |_| drop(taken.lock().map(|mut p| p.take())));
            if spawned.is_err() {
                // No thread to drop it on: leaked rather than dropped here, which would panic.
                let left = slot.lock().map(|mut p| p.take()).ok().flatten();
                std::mem::forget(left);
            }
        }
    }
}

fn settings(config: &Config, url: &str, own_url: &str) -> Settings {
    Settings {
        url: url.to_string(),
        region: config.region.clone(),
        account_id: config.account_id.clone(),
        advertise_url: own_url.to_string(),
        wait_for_lease: true,
        batch_wait: std::time::Duration::from_micros(config.database_batch_wait),
        inserts: config.database_inserts as usize,
        require_synchronous_replication: config.require_synchronous_replication,
    }
}

/// What a node on a database starts from, and starts over from after it lost the lease.
#[derive(Clone)]
pub struct Node {
    pub config: Config,
    pub url: String,
    pub clock: Arc<dyn Clock>,
    pub listening: SocketAddr,
    pub own_url: String,
    /// Where requests go: this node's generations, or the leader.
    pub standby: Arc<Standby>,
}

/// The service on the log in the node's database: leading at once if the lease is free, else
/// a standby (`Waiting`) that passes requests on until it leads.
pub async fn build(
    node: &Node,
    metrics: crate::metrics::Metrics,
) -> std::io::Result<(Built, Option<Waiting>)> {
    let (config, clock, listening) = (&node.config, node.clock.clone(), node.listening);
    if config.shards > 1 {
        return Err(super::engine_service::shards_not_built());
    }
    let own_url = node.own_url.clone();
    let settings = settings(config, &node.url, &own_url);
    let mut engine = Engine::new(&config.account_id, &config.region);
    let started = std::time::Instant::now();
    let asked_url = own_url.clone();
    let (engine, prepared) = tokio::task::spawn_blocking(move || {
        let prepared = ReadyDatabase::new(&settings, &mut engine).map(|mut prepared| {
            let asked = prepared.ask(&asked_url);
            (prepared, asked)
        });
        (engine, prepared)
    })
    .await
    .map_err(std::io::Error::other)?;
    let (prepared, asked) = prepared.map_err(std::io::Error::other)?;
    // From here on it is dropped off the server's threads, whichever way this returns.
    let mut prepared = OffThread(Some(prepared));
    let epoch = Arc::new(AtomicI64::new(0));
    let tenure = prepared.0.as_ref().expect("held until here").tenure.clone();
    let replication = (prepared.0.as_ref().expect("held until here"))
        .replication
        .clone();
    let nodes = (prepared.0.as_ref().expect("held until here"))
        .nodes
        .clone();
    let (leader, leader_epoch) = match asked {
        Asked::Leads(taken) => {
            let prepared = prepared.0.take().expect("held until here");
            let clock_taking = clock.clone();
            let (mut engine, log) = tokio::task::spawn_blocking(move || {
                let log = prepared.lead(&engine, taken, Stopped::Untouched, clock_taking);
                (engine, log)
            })
            .await
            .map_err(std::io::Error::other)?;
            let log = log.map_err(std::io::Error::other)?;
            said_leading(&log, started, &metrics);
            epoch.store(taken.epoch, Ordering::Release);
            configure_engine(config, &mut engine);
            let engine = Arc::new(engine);
            let snapshots = snapshotter(&engine, &log, config.snapshot_after);
            // Leading from the start; stepping down makes it pass requests on.
            let standby = node.standby.begin_generation();
            standby.standby.lead();
            let status = status(
                Some(standby.standby.clone()),
                (own_url, nodes),
                (epoch, replication),
                log.log_writer.clone(),
                None,
            );
            let log_parts = Log {
                log_writer: Some(log.log_writer),
                snapshots: vec![snapshots],
                tenure: Some(tenure),
            };
            let mut built = serve_engine(config, clock, listening, engine, log_parts, metrics)?;
            built.lease = Some(log.lease);
            built.cluster = Some(status);
            built.standby = Some(standby);
            return Ok((built, None));
        }
        Asked::Held { url, epoch, .. } => (url, epoch),
        Asked::Unreachable { cause, .. } => {
            tracing::warn!(%cause, "the lease could not be asked for; starting as a standby");
            (String::new(), 0)
        }
    };
    tracing::info!(%leader, "storage: the log in PostgreSQL; another node leads: a standby, passing requests on");
    let mut engine = engine;
    configure_engine(config, &mut engine);
    let engine = Arc::new(engine);
    let log_writer = prepared
        .0
        .as_ref()
        .expect("held until here")
        .log_writer
        .clone();
    let log = Log {
        log_writer: Some(log_writer.clone()),
        snapshots: Vec::new(),
        tenure: Some(tenure),
    };
    let mut built = serve_engine(config, clock, listening, engine.clone(), log, metrics)?;
    let standby = node.standby.begin_generation();
    standby.standby.set_leader(leader, leader_epoch);
    let following = Arc::new(
        prepared
            .0
            .as_ref()
            .expect("held until here")
            .follow(engine.clone())?,
    );
    built.cluster = Some(status(
        Some(standby.standby.clone()),
        (own_url.clone(), nodes),
        (epoch.clone(), replication),
        log_writer,
        Some(following.progress.clone()),
    ));
    built.standby = Some(standby.clone());
    let waiting = Waiting {
        prepared,
        engine,
        following,
        standby,
        own_url,
        snapshot_after: config.snapshot_after,
        epoch,
    };
    Ok((built, Some(waiting)))
}

fn said_leading(log: &DatabaseLog, started: std::time::Instant, metrics: &crate::metrics::Metrics) {
    metrics.clock_skew_ms.set(log.clock_skew_ms);
    let skew = log.clock_skew_ms;
    let said = format!(
        "this node's clock is {} ms {} the database's; the engine keeps the database's time",
        skew.unsigned_abs(),
        if skew < 0 { "behind" } else { "ahead of" }
    );
    // A second or more apart is worth an operator's look (NTP), though nothing depends on it.
    if skew.unsigned_abs() >= 1_000 {
        tracing::warn!(skew_ms = skew, "{said}");
    } else {
        tracing::info!(skew_ms = skew, "{said}");
    }
    tracing::info!(
        epoch = log.lease.epoch(),
        snapshot = log.report.snapshot.as_deref().unwrap_or("none"),
        snapshot_messages = log.report.snapshot_messages,
        replayed = log.report.replayed,
        millis = started.elapsed().as_millis() as u64,
        "storage: the log in PostgreSQL; leading, recovered"
    );
}

fn snapshotter(engine: &Arc<Engine<Notify>>, log: &DatabaseLog, after: u64) -> Arc<Snapshotter> {
    Arc::new(Snapshotter::new(
        engine.clone(),
        log.log_writer.clone(),
        Box::new(log.snapshots.clone()),
        log.live_at_snapshot,
        after,
    ))
}

/// How `GET /_orderly/cluster` reads a node of a log in a database.
fn status(
    standby: Option<Arc<Standby>>,
    (own_url, nodes): (String, Nodes),
    (epoch, replication): (Arc<AtomicI64>, Shared),
    log_writer: Arc<crate::persist::writer::LogWriter>,
    progress: Option<Arc<Progress>>,
) -> ClusterStatus {
    Arc::new(move || {
        let following = standby
            .as_ref()
            .filter(|s| !s.leading())
            .map(|s| s.leader());
        let leading = following.is_none();
        let (role, leader, epoch, (applied, lag)) = match (following, &progress) {
            (Some((url, epoch)), Some(progress)) => {
                let followed = (progress.applied(), progress.lag());
                ("standby", url, epoch, followed)
            }
            (Some((url, epoch)), None) => ("standby", url, epoch, (0, 0)),
            (None, _) => {
                let written = (log_writer.durable().lsn, 0);
                let epoch = epoch.load(Ordering::Acquire);
                ("leader", own_url.clone(), epoch, written)
            }
        };
        ClusterState {
            role,
            epoch: epoch.max(0) as u64,
            leader,
            applied,
            lag,
            // A database of one shard: its lease is the node's.
            shards: 1,
            led: if leading { vec![0] } else { Vec::new() },
            nodes: nodes.urls(),
            replication: replication.get().filter(|_| leading),
        }
    })
}

/// Asks for the lease until this node has it (real time: the lease is the database's, and
/// other nodes keep real time), then recovers the engine and starts the work a leader does.
/// False if it took the lease but could not lead (its engine is then no use: start over).
pub async fn promote(mut waiting: Waiting, service: Arc<Service>, started: Arc<Started>) -> bool {
    let mut said = String::new();
    let taken = loop {
        let Some(mut prepared) = waiting.prepared.0.take() else {
            return false;
        };
        let url = waiting.own_url.clone();
        let Ok((prepared, asked)) = tokio::task::spawn_blocking(move || {
            let asked = prepared.ask(&url);
            (prepared, asked)
        })
        .await
        else {
            return false;
        };
        waiting.prepared.0 = Some(prepared);
        let again_after = match asked {
            Asked::Leads(taken) => break taken,
            Asked::Held {
                url,
                epoch,
                again_after,
            } => {
                waiting.standby.standby.set_leader(url, epoch);
                again_after
            }
            Asked::Unreachable { cause, again_after } => {
                if cause != said {
                    tracing::warn!(%cause, "cannot reach the database to ask for the lease");
                    said = cause;
                }
                again_after
            }
        };
        tokio::time::sleep(again_after).await;
    };
    let Some(prepared) = waiting.prepared.0.take() else {
        return false;
    };
    let began = std::time::Instant::now();
    let engine = waiting.engine.clone();
    let following = waiting.following.clone();
    let clock = service.clock.clone();
    // The follower stops where it stands; recovery goes on from there, reading the tail only.
    let led = tokio::task::spawn_blocking(move || {
        let followed = following.stop();
        prepared.lead(&engine, taken, followed, clock)
    })
    .await;
    let log = match led {
        Ok(Ok(log)) => log,
        Ok(Err(error)) => {
            tracing::error!(%error, "took the lease but could not recover the log; not leading");
            return false;
        }
        Err(error) => {
            tracing::error!(%error, "recovery stopped");
            return false;
        }
    };
    said_leading(&log, began, &service.metrics);
    let snapshots = snapshotter(&waiting.engine, &log, waiting.snapshot_after);
    waiting.epoch.store(taken.epoch, Ordering::Release);
    started.begin(&service, vec![snapshots], Some(log.lease));
    waiting.standby.standby.lead();
    true
}
