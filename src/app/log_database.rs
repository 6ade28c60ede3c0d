//! `--storage URL`: the engines recovered from the logs and snapshots in that database (one
//! per shard) by the node holding the leases. A node leads all the shards or none:
//! whichever holds shard 0's lease takes the others. A node that finds it held starts as a
//! standby: it serves at once by passing every request on to the leader (`http::standby`),
//! follows every shard's log, and keeps asking for the lease; once it has it, it takes every
//! shard's, recovers the engines and serves them itself.

use std::borrow::Borrow;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use super::engine_service::{configure_engine, serve_engines, Built, ShardParts};
use super::started::Started;
use crate::clock::Clock;
use crate::config::Config;
use crate::engine::shard::Shard;
use crate::engine::Engine;
use crate::http::standby::{Forwarding, Standby};
use crate::persist::database::follow::{Following, Progress, Stopped};
use crate::persist::database::lease::{Nodes, Taken};
use crate::persist::database::replication::Shared;
use crate::persist::database::{Asked, DatabaseLog, ReadyDatabase, Settings};
use crate::persist::snapshot::Snapshotter;
use crate::service::cluster::{ClusterState, ClusterStatus, ShardLog};
use crate::service::Service;
use crate::worker::Thread;

/// A standby's way to leadership, handed from `build` to `App::serve`.
pub struct Waiting {
    prepared: OffThread,
    /// Shard n's engine at index n.
    engines: Vec<Arc<Engine<Notify>>>,
    /// Each shard's log followed into its engine meanwhile.
    pub following: Vec<Arc<Following>>,
    pub standby: Forwarding,
    own_url: String,
    snapshot_after: u64,
    /// Each shard's lease's epoch, once this node leads it.
    epochs: Epochs,
    /// Held by an ask for the lease under way (which announces this node) and by the leading
    /// that follows one answered: work on a blocking thread, which outlives the promotion
    /// aborted as the generation stops, and is waited for through it.
    pub asking: Arc<tokio::sync::Mutex<()>>,
}

/// The epoch of this node's lease on each shard, shard n's at index n (0 until it leads).
type Epochs = Arc<[AtomicI64]>;

/// Notes each led shard's epoch in `epochs`.
fn note_epochs(epochs: &Epochs, logs: &[DatabaseLog]) {
    for log in logs {
        epochs[log.shard as usize].store(log.epoch, Ordering::Release);
    }
}

/// Holds the database's preparation (shard n's at index n) and drops it on a thread of its
/// own: it owns runtimes, which must not be dropped inside the server's (a standby stopped
/// while it waits).
pub(super) struct OffThread<T: Send + 'static = ReadyDatabase>(pub(super) Vec<T>);

impl<T: Send + 'static> Drop for OffThread<T> {
    fn drop(&mut self) {
        let prepared = std::mem::take(&mut self.0);
        if prepared.is_empty() {
            return;
        }
        let slot = Arc::new(std::sync::Mutex::new(prepared));
        let taken = slot.clone();
        // Let go of at once: the thread ends once it has dropped it.
        let spawned = Thread::start("drop", move |_| {
            drop(taken.lock().map(|mut p| std::mem::take(&mut *p)))
        });
        if spawned.is_err() {
            // No thread to drop it on: leaked rather than dropped here, which would panic.
            let left = slot.lock().map(|mut p| std::mem::take(&mut *p)).ok();
            std::mem::forget(left);
        }
    }
}

pub(super) fn settings(node: &Node, own_url: &str) -> Settings {
    let (config, url) = (&node.config, &node.url);
    Settings {
        url: url.to_string(),
        region: config.region.clone(),
        account_id: config.account_id.clone(),
        advertise_url: own_url.to_string(),
        wait_for_lease: true,
        batch_wait: std::time::Duration::from_micros(config.database_batch_wait),
        commit_wait: std::time::Duration::from_micros(config.database_commit_wait),
        inserts: config.database_inserts as usize,
        require_synchronous_replication: config.require_synchronous_replication,
        shards_alone: config.spread_shards && config.shards > 1,
        shards: config.shards,
        placed: config.shard_databases.clone(),
        placed_checked: node.placed_checked.clone(),
    }
}

/// Each shard's database as `GET /_orderly/cluster` names it (`shard_map::shown`: user, hosts
/// and database name only).
pub(super) fn databases(node: &Node) -> Arc<[String]> {
    let placed = &node.config.shard_databases;
    (0..node.config.shards)
        .map(|shard| {
            let range = placed.iter().find(|p| (p.first..=p.last).contains(&shard));
            crate::persist::database::shard_map::shown(range.map_or(&node.url, |p| &p.url))
        })
        .collect()
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
    /// With `--spread-shards`: the live nodes and the shards' holders, read across generations.
    pub survey: Option<Arc<crate::persist::database::survey::Survey>>,
    /// With `--spread-shards`: the reading the last generation gave way on, which held for two
    /// readings in a row (or, for a lease come free, for one that kept the share: no node new,
    /// and any node gone the one whose lease lapsed), so the next generation leads by it rather
    /// than wait for two more.
    pub agreed: Arc<std::sync::Mutex<Option<Arc<crate::persist::database::survey::Seen>>>>,
    /// The databases of the shard map (`--shard-database`) this process checked against the
    /// home: its later generations check the home alone while it records the same.
    pub placed_checked: Arc<std::sync::Mutex<Option<Vec<Option<String>>>>>,
}

/// The database made ready for every shard's log, each written by its engine in `engines`
/// (shard n's at index n, fresh). Blocking.
pub(super) fn prepare(
    settings: &Settings,
    engines: &mut [Engine<Notify>],
) -> Result<Vec<ReadyDatabase>, crate::persist::database::OpenError> {
    let (first, rest) = engines.split_first_mut().expect("at least one shard");
    let first = ReadyDatabase::new(settings, first)?;
    let mut prepared = Vec::with_capacity(rest.len() + 1);
    for (engine, shard) in rest.iter_mut().zip(1..) {
        prepared.push(first.for_shard(shard, engine)?);
    }
    prepared.insert(0, first);
    Ok(prepared)
}

/// Longest a node that took shard 0's lease waits for another shard's: the node that led
/// them all lets them go together, or they lapse within a lease of one another.
const REST_OF_LEASES: std::time::Duration = std::time::Duration::from_secs(15);

/// Leads every shard of `prepared` (shard n's at index n), each into `engines[n]`: shard 0's
/// lease is `taken` already; each other's is asked for until it is free. A node leads all of a
/// database's shards or none: shard 0's lease decides which node, and only its holder asks for
/// the others. A standby stops each shard's follower once it has that shard's lease, so
/// recovery reads the tail only. Blocking. On failure the leases taken are given up. A
/// generation already serving (`started`, a standby promoted) is given the keeper as soon as
/// it renews a lease, so that a generation stopping meanwhile gives the leases up.
fn lead_all<E: Borrow<Engine<Notify>>>(
    prepared: Vec<ReadyDatabase>,
    taken: Taken,
    engines: &[E],
    (following, started): (&[Arc<Following>], Option<&Started>),
    (clock, url): (Arc<dyn Clock>, &str),
) -> Result<Vec<DatabaseLog>, NotLed> {
    let mut logs: Vec<DatabaseLog> = Vec::with_capacity(prepared.len());
    // One keeper renews every lease the node takes: giving it up gives them all up.
    let give_up = |logs: &[DatabaseLog], error: NotLed| {
        if let Some(log) = logs.first() {
            log.lease.release();
        }
        Err(error)
    };
    for (mut prepared, engine) in prepared.into_iter().zip(engines) {
        let shard = prepared.shard();
        let taken = match shard {
            0 => taken,
            _ => match take_lease(&mut prepared, url) {
                Ok(taken) => taken,
                Err(error) => return give_up(&logs, NotLed::Held(error)),
            },
        };
        let followed = match following.get(shard as usize) {
            Some(following) => following.stop(),
            None => Stopped::Untouched,
        };
        let keeper = logs.first().map(|log| log.lease.clone());
        match prepared.lead(engine.borrow(), taken, followed, (clock.clone(), keeper)) {
            Ok(log) => {
                if let (Some(started), true) = (started, logs.is_empty()) {
                    started.add_keeper(log.lease.clone());
                    crate::test_hooks::hold_while("pause-promotion", "promotion-paused");
                }
                logs.push(log)
            }
            Err(error) => return give_up(&logs, NotLed::Failed(format!("shard {shard}: {error}"))),
        }
    }
    Ok(logs)
}

/// Asks for the lease of `prepared`'s shard until it is taken, for at most `REST_OF_LEASES`.
fn take_lease(prepared: &mut ReadyDatabase, url: &str) -> Result<Taken, String> {
    let shard = prepared.shard();
    let deadline = std::time::Instant::now() + REST_OF_LEASES;
    loop {
        let (again_after, why) = match prepared.ask(url) {
            Asked::Leads(taken) => return Ok(taken),
            Asked::Held {
                url,
                epoch,
                again_after,
            } => (
                again_after,
                format!("the node at {url} leads it (epoch {epoch})"),
            ),
            Asked::Unreachable { cause, again_after } => (again_after, cause),
        };
        if std::time::Instant::now() + again_after > deadline {
            return Err(format!(
                "shard {shard}'s lease was not free within {} s: {why}",
                REST_OF_LEASES.as_secs()
            ));
        }
        std::thread::sleep(again_after);
    }
}

/// Why a node that took shard 0's lease does not lead; what it took is given up.
enum NotLed {
    /// Another shard's lease was not free in time.
    Held(String),
    /// A shard could not be led (its recovery failed, say).
    Failed(String),
}

impl std::fmt::Display for NotLed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotLed::Held(why) | NotLed::Failed(why) => f.write_str(why),
        }
    }
}

/// Why a node could not be built on its database.
enum NotBuilt {
    /// It took shard 0's lease but another shard's was not free in time.
    Held(String),
    Failed(std::io::Error),
}

impl From<std::io::Error> for NotBuilt {
    fn from(error: std::io::Error) -> Self {
        NotBuilt::Failed(error)
    }
}

/// How many times a node that took shard 0's lease but not every other's in time starts
/// again, with fresh engines, before it gives up: the shards' last leader lets them go
/// together, so a second try finds them free or shard 0 held.
const LEADING_TRIES: usize = 3;

/// The service on the logs in the node's database: leading at once if shard 0's lease is free,
/// else a standby (`Waiting`) that passes requests on until it leads.
pub async fn build(
    node: &Node,
    metrics: crate::metrics::Metrics,
) -> std::io::Result<(Built, Option<Waiting>)> {
    let mut tries = 1;
    loop {
        let attempt = crate::metrics::Metrics::continuing(&metrics);
        match build_once(node, attempt).await {
            Ok(built) => return Ok(built),
            Err(NotBuilt::Held(error)) if tries < LEADING_TRIES => {
                tracing::warn!(%error, "could not lead every shard; starting again");
                tries += 1;
            }
            Err(NotBuilt::Held(error)) => return Err(std::io::Error::other(error)),
            Err(NotBuilt::Failed(error)) => return Err(error),
        }
    }
}

async fn build_once(
    node: &Node,
    metrics: crate::metrics::Metrics,
) -> Result<(Built, Option<Waiting>), NotBuilt> {
    let (config, clock, listening) = (&node.config, node.clock.clone(), node.listening);
    let own_url = node.own_url.clone();
    let settings = settings(node, &own_url);
    let count = config.shards;
    let (account, region) = (config.account_id.clone(), config.region.clone());
    let started = std::time::Instant::now();
    let asked_url = own_url.clone();
    let (engines, prepared) = tokio::task::spawn_blocking(move || {
        let mut engines: Vec<Engine<Notify>> = (0..count)
            .map(|number| Engine::for_shard(&account, &region, Shard { number, count }))
            .collect();
        let prepared = prepare(&settings, &mut engines).map(|mut prepared| {
            let asked = prepared[0].ask(&asked_url);
            (prepared, asked)
        });
        (engines, prepared)
    })
    .await
    .map_err(std::io::Error::other)?;
    let (prepared, asked) = prepared.map_err(std::io::Error::other)?;
    let announcement = prepared[0].announcement();
    // Each shard's tenure, which its lease keeps once this node leads it.
    let tenures: Vec<_> = prepared.iter().map(|p| p.tenure.clone()).collect();
    let log_writers: Vec<_> = prepared.iter().map(|p| p.log_writer.clone()).collect();
    let (replication, nodes) = (prepared[0].replication.clone(), prepared[0].nodes.clone());
    // Requests this node passes on over HTTP name it; those another node passes here are
    // known as a node's by the names last read among the live nodes (`http::slots`).
    if let Some(announcement) = &announcement {
        node.standby.announced_as(announcement.name());
    }
    let live = nodes.clone();
    (node.standby).know_peers_by(Arc::new(move |name| live.is_live(name)));
    // From here on it is dropped off the server's threads, whichever way this returns.
    let mut prepared = OffThread(prepared);
    let epochs: Epochs = (0..count).map(|_| AtomicI64::new(0)).collect();
    let (leader, leader_epoch) = match asked {
        Asked::Leads(taken) => {
            let prepared = std::mem::take(&mut prepared.0);
            let leading = (clock.clone(), own_url.clone());
            let (mut engines, logs) = tokio::task::spawn_blocking(move || {
                let (clock, url) = leading;
                let logs = lead_all(prepared, taken, &engines, (&[], None), (clock, &url));
                (engines, logs)
            })
            .await
            .map_err(std::io::Error::other)?;
            let logs = logs.map_err(|not_led| match not_led {
                NotLed::Held(why) => NotBuilt::Held(why),
                NotLed::Failed(why) => NotBuilt::Failed(std::io::Error::other(why)),
            })?;
            for log in &logs {
                said_leading(log, started, &metrics);
            }
            note_epochs(&epochs, &logs);
            let mut shards = Vec::with_capacity(logs.len());
            let mut snapshots = Vec::with_capacity(logs.len());
            for ((engine, log), tenure) in engines.drain(..).zip(&logs).zip(tenures) {
                let (shard, snapshotter) = led_parts(config, engine, log, tenure);
                shards.push(shard);
                snapshots.push(snapshotter);
            }
            // Leading from the start; stepping down makes it pass requests on.
            let standby = node.standby.begin_generation();
            standby.standby.lead();
            let status = status(
                Some(standby.clone()),
                (own_url, nodes),
                (epochs, replication),
                log_writers,
                Vec::new(),
                databases(node),
            );
            // One keeper holds every shard's lease.
            let leases = logs
                .first()
                .map(|log| log.lease.clone())
                .into_iter()
                .collect();
            let mut built = serve_engines(
                config,
                (clock, listening),
                shards,
                (snapshots, None),
                metrics,
            )?;
            built.lease = leases;
            built.cluster = Some(status);
            built.standby = Some(standby);
            built.announcement = announcement;
            return Ok((built, None));
        }
        Asked::Held { url, epoch, .. } => (url, epoch),
        Asked::Unreachable { cause, .. } => {
            tracing::warn!(%cause, "the lease could not be asked for; starting as a standby");
            (String::new(), 0)
        }
    };
    tracing::info!(%leader, shards = count, "storage: the log in PostgreSQL; another node leads: a standby, passing requests on");
    let engines: Vec<Arc<Engine<Notify>>> = (engines.into_iter())
        .map(|mut engine| {
            configure_engine(config, &mut engine);
            Arc::new(engine)
        })
        .collect();
    let shards = (engines.iter().zip(&log_writers).zip(tenures))
        .map(|((engine, log_writer), tenure)| ShardParts {
            engine: engine.clone(),
            log_writer: Some(log_writer.clone()),
            tenure: Some(tenure),
        })
        .collect();
    let mut built = serve_engines(
        config,
        (clock, listening),
        shards,
        (Vec::new(), None),
        metrics,
    )?;
    let standby = node.standby.begin_generation();
    standby.standby.set_leader(leader, leader_epoch);
    let mut following = Vec::with_capacity(engines.len());
    for (prepared, engine) in prepared.0.iter().zip(&engines) {
        following.push(Arc::new(prepared.follow(engine.clone())?));
    }
    built.cluster = Some(status(
        Some(standby.clone()),
        (own_url.clone(), nodes),
        (epochs.clone(), replication),
        log_writers,
        following.iter().map(|f| f.progress.clone()).collect(),
        databases(node),
    ));
    built.standby = Some(standby.clone());
    built.announcement = announcement;
    let waiting = Waiting {
        prepared,
        engines,
        following,
        standby,
        own_url,
        snapshot_after: config.snapshot_after,
        epochs,
        asking: Default::default(),
    };
    Ok((built, Some(waiting)))
}

pub(super) fn said_leading(
    log: &DatabaseLog,
    started: std::time::Instant,
    metrics: &crate::metrics::Metrics,
) {
    // Said once a node: by the shard whose lease took up the cluster's time.
    if let Some(skew) = log.clock_skew_ms {
        metrics.clock_skew_ms.set(skew);
        let said = format!(
            "this node's clock is {} ms {} the database's; the engine keeps the database's time",
            skew.unsigned_abs(),
            if skew < 0 { "behind" } else { "ahead of" }
        );
        // A second or more apart is worth an operator's look (NTP), though nothing depends
        // on it.
        if skew.unsigned_abs() >= 1_000 {
            tracing::warn!(skew_ms = skew, "{said}");
        } else {
            tracing::info!(skew_ms = skew, "{said}");
        }
    }
    tracing::info!(
        shard = log.shard,
        epoch = log.epoch,
        snapshot = log.report.snapshot.as_deref().unwrap_or("none"),
        snapshot_messages = log.report.snapshot_messages,
        replayed = log.report.replayed,
        millis = started.elapsed().as_millis() as u64,
        "storage: the log in PostgreSQL; leading, recovered"
    );
}

/// A shard this node leads, served: its engine (recovered) with the node's settings, writing
/// `log` within `tenure`, and the snapshotter of that log.
pub(super) fn led_parts(
    config: &Config,
    mut engine: Engine<Notify>,
    log: &DatabaseLog,
    tenure: Arc<crate::persist::tenure::Tenure>,
) -> (ShardParts, Arc<Snapshotter>) {
    configure_engine(config, &mut engine);
    let engine = Arc::new(engine);
    let snapshotter = snapshotter(&engine, log, config.snapshot_after);
    let shard = ShardParts {
        engine,
        log_writer: Some(log.log_writer.clone()),
        tenure: Some(tenure),
    };
    (shard, snapshotter)
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

/// How `GET /_orderly/cluster` reads a node of logs in a database (shard n's writer and, on a
/// standby, its follower's progress at index n).
fn status(
    standby: Option<Forwarding>,
    (own_url, nodes): (String, Nodes),
    (epochs, replication): (Epochs, Shared),
    log_writers: Vec<Arc<crate::persist::writer::LogWriter>>,
    progress: Vec<Arc<Progress>>,
    databases: Arc<[String]>,
) -> ClusterStatus {
    let shards = log_writers.len() as u32;
    Arc::new(move || {
        // A generation the node has moved past answers as one that no longer leads, until
        // the requests it holds are done: never with a later generation's role.
        let following = standby
            .as_ref()
            .filter(|s| !s.standby.leading_in(s.generation))
            .map(|s| s.standby.leader());
        let leading = following.is_none();
        let logs: Vec<ShardLog> = match following {
            Some(_) => (progress.iter().zip(0..))
                .map(|(progress, shard)| ShardLog {
                    shard,
                    epoch: None,
                    applied: progress.applied(),
                    lag: progress.lag(),
                    database: databases.get(shard as usize).cloned(),
                })
                .collect(),
            None => (log_writers.iter().zip(epochs.iter()).zip(0..))
                .map(|((log, epoch), shard)| ShardLog {
                    shard,
                    epoch: Some(epoch.load(Ordering::Acquire).max(0) as u64),
                    applied: log.durable().lsn,
                    lag: 0,
                    database: databases.get(shard as usize).cloned(),
                })
                .collect(),
        };
        let (role, leader, epoch) = match following {
            Some((url, epoch)) => ("standby", url, epoch),
            // Shard 0's lease decides which node leads.
            None => ("leader", own_url.clone(), epochs[0].load(Ordering::Acquire)),
        };
        // Over several shards: records applied added up, and the furthest behind.
        let applied = logs.iter().map(|log| log.applied).sum();
        let lag = logs.iter().map(|log| log.lag).max().unwrap_or(0);
        ClusterState {
            role,
            epoch: epoch.max(0) as u64,
            leader: leader.clone(),
            applied,
            lag,
            shards,
            // A node leads every shard, or none.
            led: if leading {
                (0..shards).collect()
            } else {
                Vec::new()
            },
            nodes: nodes.urls(),
            // One node leads every shard.
            leaders: vec![leader.clone(); shards as usize],
            databases: databases.to_vec(),
            replication: replication.get().filter(|_| leading),
            logs,
        }
    })
}

/// Asks for shard 0's lease until this node has it (real time: the lease is the database's,
/// and other nodes keep real time), then takes every other shard's, recovers the engines and
/// starts the work a leader does. False if it took a lease but could not lead (its engines are
/// then no use: start over).
pub async fn promote(mut waiting: Waiting, service: Arc<Service>, started: Arc<Started>) -> bool {
    let mut said = String::new();
    let taken = loop {
        let mut prepared = std::mem::take(&mut waiting.prepared.0);
        if prepared.is_empty() {
            return false;
        }
        let url = waiting.own_url.clone();
        let asking = waiting.asking.clone().lock_owned().await;
        let Ok((prepared, asked)) = tokio::task::spawn_blocking(move || {
            let _asking = asking;
            let asked = prepared[0].ask(&url);
            (prepared, asked)
        })
        .await
        else {
            return false;
        };
        waiting.prepared.0 = prepared;
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
    let prepared = std::mem::take(&mut waiting.prepared.0);
    let began = std::time::Instant::now();
    let engines = waiting.engines.clone();
    let following = waiting.following.clone();
    let leading = (service.clock.clone(), waiting.own_url.clone());
    let (asking, keeping) = (waiting.asking.clone().lock_owned().await, started.clone());
    // Each follower stops where it stands; recovery goes on from there, reading the tail only.
    let led = tokio::task::spawn_blocking(move || {
        let _asking = asking;
        let (clock, url) = leading;
        let following = (following.as_slice(), Some(keeping.as_ref()));
        lead_all(prepared, taken, &engines, following, (clock, &url))
    })
    .await;
    let logs = match led {
        Ok(Ok(logs)) => logs,
        Ok(Err(error)) => {
            tracing::error!(%error, "took the lease but could not recover the log; not leading");
            return false;
        }
        Err(error) => {
            tracing::error!(%error, "recovery stopped");
            return false;
        }
    };
    let mut snapshots = Vec::with_capacity(logs.len());
    for (log, engine) in logs.iter().zip(&waiting.engines) {
        said_leading(log, began, &service.metrics);
        snapshots.push(snapshotter(engine, log, waiting.snapshot_after));
    }
    note_epochs(&waiting.epochs, &logs);
    let leases = logs
        .first()
        .map(|log| log.lease.clone())
        .into_iter()
        .collect();
    started.begin(&service, snapshots, leases);
    waiting.standby.standby.lead();
    true
}
