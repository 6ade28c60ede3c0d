//! `--spread-shards`: each node on a database leads its share of the shards, as placement gives
//! it among the live nodes (`persist::database::placement`), and passes the requests of the
//! others to their leaders (`http::shard_routing`). A generation takes the leases of its share
//! that are free and leaves the rest to whoever holds them. Once shards it leads are another
//! node's share (a node joined), it hands them off and leads the rest on; once leases of its
//! share come free (a node left, or handed them off), it takes them and leads them beside the
//! rest. Only when that fails does the node start over: it gives every lease up and takes its
//! new share in the next generation, by the reading it started over on.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::engine_service::{serve_engines, Built, Others};
use super::log_database::{databases, led_parts, said_leading, settings, Node, OffThread};
use super::started::{close_logs, LedLog};
use crate::backend::OtherNodes;
use crate::clock::Clock;
use crate::engine::shard::Shard;
use crate::engine::Engine;
use crate::http::standby::Forwarding;
use crate::persist::database::follow::Stopped;
use crate::persist::database::placement;
use crate::persist::database::survey::{Seen, Survey};
use crate::persist::database::{Asked, DatabaseLog, ReadyDatabase};
use crate::persist::tenure::Tenure;
use crate::service::cluster::{ClusterState, ClusterStatus, ShardLog};

/// Longest a generation waits for two readings of the nodes that agree.
const FIRST_READING: Duration = Duration::from_secs(10);

/// The logs of the shards a generation leads now, in order: fewer once it hands some off.
type LedLogs = Arc<std::sync::Mutex<Vec<LedLog>>>;

/// What a generation of a node leading its share watches, to know when to start over.
pub(super) struct Spread {
    survey: Arc<Survey>,
    own_url: String,
    count: u32,
    /// The shards this generation leads, in order.
    led: Vec<u32>,
    standby: Forwarding,
    /// Where the reading this generation gives way on is left for the next (`Node::agreed`).
    agreed: Arc<std::sync::Mutex<Option<Arc<Seen>>>>,
    /// The service, whose backend stops serving a shard handed off and starts serving one
    /// taken.
    service: Arc<crate::service::Service>,
    /// What renews this generation's leases (none while it leads no shard).
    keeper: Option<Arc<crate::persist::database::Keeper>>,
    logs: LedLogs,
    /// What the node starts each generation from: its settings and clock.
    node: Node,
    /// Makes the database ready for the log of a shard taken.
    opener: crate::persist::database::ShardOpener,
    /// Each led shard's lease's epoch, as the cluster status reads them.
    epochs: Arc<[AtomicI64]>,
    /// The generation's work, once it runs (`succession`): a shard taken adds to it.
    pub(super) started: Option<Arc<super::started::Started>>,
}

/// The service over this node's share of the shards, as far as their leases are free, and
/// what the generation watches to know when to start over.
pub(super) async fn build(
    node: &Node,
    metrics: crate::metrics::Metrics,
) -> std::io::Result<(Built, Spread)> {
    let (config, clock, listening) = (&node.config, node.clock.clone(), node.listening);
    let own_url = node.own_url.clone();
    let count = config.shards;
    let settings = settings(node, &own_url);
    let (account, region) = (config.account_id.clone(), config.region.clone());
    let survey = node.survey.clone().ok_or_else(|| {
        std::io::Error::other("a node leading its share of the shards watches the database")
    })?;
    // The tables made ready first: a database used for the first time has none to read.
    // Taken at once: a generation that fails to start must not leave it for a later one.
    let agreed = node.agreed.lock().unwrap_or_else(|p| p.into_inner()).take();
    let (mut engines, first) = tokio::task::spawn_blocking(move || {
        let mut engines: Vec<Engine<Notify>> = (0..count)
            .map(|number| Engine::for_shard(&account, &region, Shard { number, count }))
            .collect();
        let first =
            ReadyDatabase::new(&settings, &mut engines[0]).map(|first| OffThread(vec![first]));
        (engines, first)
    })
    .await
    .map_err(std::io::Error::other)?;
    let mut first = first.map_err(std::io::Error::other)?;
    let opener = first.0[0].opener();
    let announcement = first.0[0].announcement();
    // A generation after the first leads by the reading its predecessor gave way on, while the
    // live nodes are still those it names (the database slow to answer, they may not be).
    let now = survey.seen().borrow().clone();
    let agreed = agreed.filter(|agreed| now.is_some_and(|now| now.nodes == agreed.nodes));
    let seen = match agreed {
        Some(seen) => seen,
        None => first_reading(survey.seen(), &own_url)
            .await
            .ok_or_else(|| {
                std::io::Error::other("the database's nodes and leases could not be read")
            })?,
    };
    let share = placement::share_of(&own_url, count, &seen.nodes);
    let started = std::time::Instant::now();
    let leading = (clock.clone(), own_url.clone());
    let first = first.0.pop().expect("made ready");
    let (engines, led) = tokio::task::spawn_blocking(move || {
        // Only the shards of its share: a connection each.
        let led = ready_share(first, &mut engines, &share)
            .and_then(|prepared| lead_share(prepared, &engines, &share, leading));
        (engines, led)
    })
    .await
    .map_err(std::io::Error::other)?;
    let (logs, tenures): (Vec<_>, Vec<_>) = led.map_err(std::io::Error::other)?.into_iter().unzip();
    for log in &logs {
        said_leading(log, started, &metrics);
    }
    let epochs: Arc<[AtomicI64]> = (0..count).map(|_| AtomicI64::new(0)).collect();
    let mut engines: Vec<Option<Engine<Notify>>> = engines.into_iter().map(Some).collect();
    let mut shards = Vec::with_capacity(logs.len());
    let mut snapshots = Vec::with_capacity(logs.len());
    for (log, tenure) in logs.iter().zip(tenures) {
        epochs[log.shard as usize].store(log.epoch, Ordering::Release);
        let engine = engines[log.shard as usize].take().expect("led once");
        let (shard, snapshotter) = led_parts(config, engine, log, tenure);
        shards.push(shard);
        snapshots.push(snapshotter);
    }
    let led: Vec<u32> = logs.iter().map(|log| log.shard).collect();
    let led_logs: Vec<LedLog> = (logs.iter().zip(&snapshots).zip(&shards))
        .map(|((log, snapshotter), parts)| LedLog {
            shard: log.shard,
            log_writer: log.log_writer.clone(),
            snapshotter: snapshotter.clone(),
            engine: parts.engine.clone(),
        })
        .collect();
    let led_logs: LedLogs = Arc::new(std::sync::Mutex::new(led_logs));
    tracing::info!(?led, shards = count, nodes = ?seen.nodes, "storage: the log in PostgreSQL; leading this node's share of the shards");
    let standby = node.standby.begin_generation();
    // Every request is this generation's to take: its shards' here, the others' passed on.
    standby.standby.lead();
    standby
        .standby
        .set_shard_leaders(leaders(&seen, &own_url, &led));
    let status = status(
        standby.clone(),
        (own_url.clone(), count),
        (epochs.clone(), led_logs.clone()),
        survey.seen(),
        (databases(node), opener.clone()),
    );
    let keeper = logs.first().map(|log| log.lease.clone());
    let lease = keeper.iter().cloned().collect();
    standby.standby.set_peers(seen.names.clone());
    standby.standby.announced_as(survey.name());
    let puller = crate::http::between_nodes::Peers {
        standby: standby.standby.clone(),
        name: survey.name().to_string(),
    };
    // Webhooks are sent to no node of the database, as to none of this one's addresses.
    let seen = survey.seen();
    let nodes: crate::delivery::NodeUrls =
        Arc::new(move || (seen.borrow().as_ref()).map_or_else(Vec::new, |seen| seen.nodes.clone()));
    let others = Others {
        asked: Arc::new(puller) as Arc<dyn OtherNodes>,
        urls: nodes,
    };
    let parts = (snapshots, Some(others));
    let mut built = serve_engines(config, (clock, listening), shards, parts, metrics)?;
    built.lease = lease;
    built.cluster = Some(status);
    built.standby = Some(standby.clone());
    built.by_shard = Some(standby.clone());
    built.announcement = announcement;
    let spread = Spread {
        survey,
        own_url,
        count,
        led,
        standby,
        agreed: node.agreed.clone(),
        service: built.service.clone(),
        keeper,
        logs: led_logs,
        node: node.clone(),
        opener,
        epochs: epochs.clone(),
        started: None,
    };
    Ok((built, spread))
}

/// The first reading that names this node and the same live nodes as the reading before it
/// (or, past `FIRST_READING`, the last that names this node): nodes started together agree on
/// their shares at once, where each would otherwise take shards by what it saw first and then
/// start over.
async fn first_reading(
    mut reading: tokio::sync::watch::Receiver<Option<Arc<Seen>>>,
    own_url: &str,
) -> Option<Arc<Seen>> {
    let deadline = tokio::time::Instant::now() + FIRST_READING;
    let mut last: Option<Arc<Seen>> = None;
    loop {
        // Cloned out at once: the reading's guard must not be held across an await.
        let seen = reading.borrow_and_update().clone();
        if let Some(seen) = seen.filter(|seen| seen.nodes.iter().any(|node| node == own_url)) {
            if last.as_ref().is_some_and(|last| last.nodes == seen.nodes) {
                return Some(seen);
            }
            last = Some(seen);
        }
        match tokio::time::timeout_at(deadline, reading.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return last,
        }
    }
}

/// The database made ready for the log of each shard of `share` (shard n's at index n, `None`
/// for the others), `first` being shard 0's. Blocking.
fn ready_share(
    first: ReadyDatabase,
    engines: &mut [Engine<Notify>],
    share: &[u32],
) -> Result<Vec<Option<ReadyDatabase>>, String> {
    let mut prepared: Vec<Option<ReadyDatabase>> = engines.iter().map(|_| None).collect();
    for &shard in share.iter().filter(|&&shard| shard != 0) {
        let ready = (first.for_shard(shard, &mut engines[shard as usize]))
            .map_err(|error| format!("shard {shard}: {error}"))?;
        prepared[shard as usize] = Some(ready);
    }
    prepared[0] = Some(first);
    Ok(prepared)
}

/// Leads each shard of `share` whose lease is free, each into its engine in `engines` (shard
/// n's at index n); leaves the others to their holders. Blocking. On failure every lease taken
/// is given up.
fn lead_share(
    prepared: Vec<Option<ReadyDatabase>>,
    engines: &[Engine<Notify>],
    share: &[u32],
    (clock, url): (Arc<dyn Clock>, String),
) -> Result<Vec<(DatabaseLog, Arc<Tenure>)>, String> {
    // Dropped off the server's threads whichever way this returns: they own runtimes.
    let mut prepared = OffThread(prepared);
    let mut logs: Vec<(DatabaseLog, Arc<Tenure>)> = Vec::with_capacity(share.len());
    for &shard in share {
        let Some(mut ready) = prepared.0.get_mut(shard as usize).and_then(Option::take) else {
            continue;
        };
        let taken = match ready.ask(&url) {
            Asked::Leads(taken) => taken,
            Asked::Held { .. } | Asked::Unreachable { .. } => continue,
        };
        // One keeper renews every lease the node takes: giving it up gives them all up.
        let keeper = logs.first().map(|(log, _)| log.lease.clone());
        let engine = &engines[shard as usize];
        let tenure = ready.tenure.clone();
        match ready.lead(engine, taken, Stopped::Untouched, (clock.clone(), keeper)) {
            Ok(log) => logs.push((log, tenure)),
            Err(error) => {
                if let Some((log, _)) = logs.first() {
                    log.lease.release();
                }
                return Err(format!("shard {shard}: {error}"));
            }
        }
    }
    Ok(logs)
}

/// Where each shard's requests go: this node's URL for the shards it leads, else the holder's
/// as last read. Empty while the lease is free, and where it names this node without this
/// generation leading the shard (a lease of an earlier generation or process, about to lapse):
/// a request is never passed to the node it is at.
fn leaders(seen: &Seen, own_url: &str, led: &[u32]) -> Vec<String> {
    let mut leaders = seen.leaders();
    for (leader, shard) in leaders.iter_mut().zip(0..) {
        if led.contains(&shard) {
            *leader = own_url.to_string();
        } else if leader == own_url {
            leader.clear();
        }
    }
    leaders
}

/// Completes once this generation should give way to the next: a shard it leads belongs to
/// another live node, or a shard of its share is free and not led here, in two readings in a
/// row (a node missing from one reading, its announcement late, moves nothing); a shard of its
/// share come free in one reading, when that reading keeps the share (`settled`: the shard's
/// clients wait on it). The reading it gave way on is left for the
/// next generation. Meanwhile keeps the shards' leaders up to date for requests passed on.
pub(super) async fn moved(spread: &mut Spread) {
    let mut seen = spread.survey.seen();
    let mut once = false;
    let mut nodes_before: Option<Vec<String>> = None;
    // Each shard's holder's URL as last seen held, over this generation's readings.
    let mut last_holders: Vec<Option<String>> = Vec::new();
    // How many of the shards the keeper says were taken away were let go of already.
    let mut taken_before = 0;
    loop {
        // Shards whose leases another node took from this node's keeper: let go of in place.
        let taken: Vec<u32> = match &spread.keeper {
            Some(keeper) => {
                let away = keeper.taken_away();
                let taken = away.borrow();
                let new = (taken.iter().skip(taken_before)).map(|&shard| shard as u32);
                let lost = new.filter(|shard| spread.led.contains(shard)).collect();
                taken_before = taken.len();
                lost
            }
            None => Vec::new(),
        };
        if !taken.is_empty() {
            let now_seen = seen.borrow().clone();
            if let Err(why) = let_go(spread, now_seen.as_deref(), &taken).await {
                tracing::warn!(%why, "shards taken away could not be let go of: starting over");
                return;
            }
        }
        let reading = seen.borrow_and_update().clone();
        if let Some(reading) = reading {
            let leaders = leaders(&reading, &spread.own_url, &spread.led);
            spread.standby.standby.set_shard_leaders(leaders);
            spread.standby.standby.set_peers(reading.names.clone());
            let moved = share_moved(&reading, &spread.own_url, spread.count, &spread.led);
            let settled = moved.as_ref().is_some_and(|moved| {
                let last_holder = last_holders.get(moved.shard as usize).cloned().flatten();
                settled(
                    nodes_before.as_deref(),
                    &reading.nodes,
                    last_holder.as_deref(),
                )
            });
            match moved {
                // Shards it leads are other nodes' share now, none of its own come free: they
                // are handed off, and the rest led on.
                Some(moved) if !moved.free && gives_way(&moved, once, false) => {
                    let leaving = leaving(&reading, &spread.own_url, spread.count, &spread.led);
                    if let Err(why) = hand_off(spread, &reading, &leaving).await {
                        tracing::warn!(%why, "a shard could not be handed off: starting over to lead this node's share");
                        return;
                    }
                    once = false;
                }
                // Shards of its share came free: those it leads that are another's now are
                // handed off, and the free ones taken and led beside the rest.
                Some(moved) if gives_way(&moved, once, settled) => {
                    let leaving = leaving(&reading, &spread.own_url, spread.count, &spread.led);
                    let free = free_of_share(&reading, &spread.own_url, spread.count, &spread.led);
                    let moved_here = match hand_off(spread, &reading, &leaving).await {
                        Ok(()) => take(spread, &reading, &free).await,
                        Err(why) => Err(why),
                    };
                    if let Err(why) = moved_here {
                        tracing::warn!(%why, cause = %moved.why, "this node's share could not be moved in place: starting over to lead it");
                        *spread.agreed.lock().unwrap_or_else(|p| p.into_inner()) = Some(reading);
                        return;
                    }
                    once = false;
                }
                moved => once = moved.is_some(),
            }
            nodes_before = Some(reading.nodes.clone());
            last_holders.resize(reading.holders.len(), None);
            for (last, holder) in last_holders.iter_mut().zip(&reading.holders) {
                if let Some(holder) = holder {
                    *last = Some(holder.url.clone());
                }
            }
        }
        // Made now: a keeper this pass started (a take) is watched too. Waits for a shard past
        // those let go of, so a change already seen does not wake it again.
        let mut away = spread.keeper.as_ref().map(|keeper| keeper.taken_away());
        let taken_away = async {
            let taken = match away.as_mut() {
                Some(away) => away
                    .wait_for(|taken| taken.len() > taken_before)
                    .await
                    .is_ok(),
                None => false,
            };
            if !taken {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            changed = seen.changed() => {
                if changed.is_err() {
                    return std::future::pending().await;
                }
            }
            () = taken_away => {}
        }
    }
}

/// Whether the live nodes `now` keep the share `before` gave, for a shard come free whose
/// lease was last seen held by `last_holder`: no node is new, and if a node is gone, the
/// shard's last holder is (a killed node's leases lapse about when its announcement does, so
/// its shards are taken at the first reading without it, not the second). A node missing from
/// one reading, its announcement late, moves no shard another node gave up (to start over, or
/// for a joining node to take).
fn settled(before: Option<&[String]>, now: &[String], last_holder: Option<&str>) -> bool {
    let Some(before) = before else {
        return false;
    };
    if now.iter().any(|node| !before.contains(node)) {
        return false;
    }
    let gone = before.iter().any(|node| !now.contains(node));
    !gone || last_holder.is_some_and(|holder| !now.iter().any(|node| node == holder))
}

/// Whether a generation gives way on `moved`: when the reading before said so too (`once`),
/// or at once for a lease of its share come free while the live nodes keep the share
/// (`settled`), as the shard's clients wait for it.
fn gives_way(moved: &Move, once: bool, settled: bool) -> bool {
    once || (moved.free && settled)
}

/// Why a node should start over.
struct Move {
    why: String,
    /// The shard that moved.
    shard: u32,
    /// A shard of its share came free (rather than another node's share taking one it leads).
    free: bool,
}

/// Why the share of a node leading `led` moved, as `seen` stands: a shard of its share come
/// free first (it starts over), else one it leads that is another node's (it hands those
/// off); `None` while nothing moved.
fn share_moved(seen: &Seen, own_url: &str, count: u32, led: &[u32]) -> Option<Move> {
    // A node that cannot read the live nodes knows of none: nothing moves on that.
    if !seen.nodes.iter().any(|node| node == own_url) {
        return None;
    }
    let placed = placement::place(count, &seen.nodes);
    for (shard, &node) in (0..count).zip(&placed) {
        let ours = seen.nodes[node] == own_url;
        let free = seen.free(shard);
        if ours && !led.contains(&shard) && free {
            let why = format!("shard {shard} is this node's to lead and free");
            return Some(Move {
                why,
                shard,
                free: true,
            });
        }
    }
    for (shard, &node) in (0..count).zip(&placed) {
        if seen.nodes[node] != own_url && led.contains(&shard) {
            let why = format!("shard {shard} is now {}'s to lead", seen.nodes[node]);
            return Some(Move {
                why,
                shard,
                free: false,
            });
        }
    }
    None
}

/// The shards of this node's share, as `seen` stands, that are free and not in `led`.
fn free_of_share(seen: &Seen, own_url: &str, count: u32, led: &[u32]) -> Vec<u32> {
    let placed = placement::place(count, &seen.nodes);
    (0..count)
        .filter(|&shard| !led.contains(&shard))
        .filter(|&shard| {
            (placed.get(shard as usize)).is_some_and(|&node| seen.nodes[node] == own_url)
        })
        .filter(|&shard| seen.free(shard))
        .collect()
}

/// Takes `shards`, free shards of this node's share, and leads them beside the others without
/// starting over: each shard's lease taken (one another node took first is left to it), a
/// fresh engine recovered from its snapshot and log, served by the router from then on
/// (`Work::take_shard`), its snapshots taken and its lease renewed with the others'. Its
/// requests, waiting meanwhile, then come here. One shard after another, each served once its
/// own recovery ends (not the last one's). An error says the generation should start over.
async fn take(spread: &mut Spread, reading: &Seen, shards: &[u32]) -> Result<(), String> {
    for &shard in shards {
        take_one(spread, reading, shard).await?;
    }
    Ok(())
}

/// `take` of one shard.
async fn take_one(spread: &mut Spread, reading: &Seen, shard: u32) -> Result<(), String> {
    let started = (spread.started.clone()).ok_or("the generation's work has not started")?;
    let began = std::time::Instant::now();
    let opener = spread.opener.clone();
    let config = spread.node.config.clone();
    let leading = (spread.node.clock.clone(), spread.own_url.clone());
    let (count, keeper, wanted) = (spread.count, spread.keeper.clone(), vec![shard]);
    let keeping = started.clone();
    // Run to its end even if this generation stops meanwhile: a keeper it starts is the
    // generation's to give up at once.
    let taken = tokio::task::spawn_blocking(move || {
        lead_more(
            &opener,
            &config,
            (count, &wanted),
            leading,
            (keeper, &keeping),
        )
    })
    .await
    .map_err(|error| error.to_string())??;
    for (engine, log, tenure) in taken {
        said_leading(&log, began, &spread.service.metrics);
        spread.epochs[log.shard as usize].store(log.epoch, Ordering::Release);
        spread.keeper.get_or_insert_with(|| log.lease.clone());
        let (parts, snapshotter) = led_parts(&spread.node.config, engine, &log, tenure.clone());
        let engine = parts.engine.clone();
        let log_writer = log.log_writer.clone();
        // Closed when the generation stops, whatever happens next.
        started.add_log(snapshotter.clone());
        (spread
            .service
            .backend
            .take_shard(parts.engine, log_writer.clone(), tenure)
            .await)
            .map_err(|error| error.to_string())?;
        (spread.service.metrics).add_log(log.shard, log_writer.metrics());
        // Deliveries the shard recovered as due are looked for now, not at the worker's
        // next wake-up.
        spread.service.webhooks.wake();
        let mut logs = spread.logs.lock().unwrap_or_else(|p| p.into_inner());
        logs.push(LedLog {
            shard: log.shard,
            log_writer,
            snapshotter,
            engine,
        });
        logs.sort_by_key(|log| log.shard);
        drop(logs);
        spread.led.push(log.shard);
        spread.led.sort_unstable();
        tracing::info!(shard = log.shard, led = ?spread.led, "took a shard of this node's share");
    }
    let leaders = leaders(reading, &spread.own_url, &spread.led);
    spread.standby.standby.set_shard_leaders(leaders);
    Ok(())
}

/// Takes the leases of `shards` that are free and recovers each shard's engine, renewed by
/// `keeper`, or by a keeper started for them, which `started` then gives up when the
/// generation stops. Blocking (on a blocking thread: what it drops owns runtimes). A shard
/// that fails gives its own lease up (`ReadyDatabase::lead`); the generation starts over.
#[allow(clippy::type_complexity)]
fn lead_more(
    opener: &crate::persist::database::ShardOpener,
    config: &crate::config::Config,
    (count, shards): (u32, &[u32]),
    (clock, url): (Arc<dyn Clock>, String),
    (mut keeper, started): (
        Option<Arc<crate::persist::database::Keeper>>,
        &super::started::Started,
    ),
) -> Result<Vec<(Engine<Notify>, DatabaseLog, Arc<Tenure>)>, String> {
    let mut led = Vec::with_capacity(shards.len());
    for &number in shards {
        // Found to be another database than the map says: not asked again, nor a fresh
        // engine made for it, at each reading that finds it free.
        if opener.refused(number) {
            continue;
        }
        let shard = Shard { number, count };
        let mut engine = Engine::for_shard(&config.account_id, &config.region, shard);
        let mut ready = (opener.for_shard(number, &mut engine))
            .map_err(|error| format!("shard {number}: {error}"))?;
        let taken = match ready.ask(&url) {
            Asked::Leads(taken) => taken,
            Asked::Held { .. } | Asked::Unreachable { .. } => continue,
        };
        let tenure = ready.tenure.clone();
        let log = (ready.lead(
            &engine,
            taken,
            Stopped::Untouched,
            (clock.clone(), keeper.clone()),
        ))
        .map_err(|error| format!("shard {number}: {error}"))?;
        if keeper.is_none() {
            started.add_keeper(log.lease.clone());
        }
        keeper = Some(log.lease.clone());
        led.push((engine, log, tenure));
    }
    Ok(led)
}

/// The shards `led` holds that placement gives other nodes, as `seen` stands.
fn leaving(seen: &Seen, own_url: &str, count: u32, led: &[u32]) -> Vec<u32> {
    let placed = placement::place(count, &seen.nodes);
    (led.iter().copied())
        .filter(|&shard| {
            (placed.get(shard as usize)).is_some_and(|&node| seen.nodes[node] != own_url)
        })
        .collect()
}

/// Hands `leaving`, shards this generation leads, to the nodes placement now gives them, and
/// leads the rest on: each shard's requests wait for its next leader from now on (none is
/// passed back here), the backend stops serving it and waits until what its log was given is
/// durable (`Work::hand_off`), and its lease is given up at once, so its next leader takes it
/// at its next reading of the database. An error (the keeper no longer renews, say)
/// says the generation should start over.
async fn hand_off(spread: &mut Spread, reading: &Seen, leaving: &[u32]) -> Result<(), String> {
    if leaving.is_empty() {
        return Ok(());
    }
    let handed = stop_serving(spread, Some(reading), leaving).await?;
    let keeper = spread.keeper.clone();
    let now = spread.node.clock.now();
    let given_up = close_and_leave(spread, handed, move |shards| {
        let Some(keeper) = keeper else {
            return vec![false; shards.len()];
        };
        let asked: Vec<i32> = shards.iter().map(|&shard| shard as i32).collect();
        let handed = keeper.hand_off_each(&asked, now);
        // A lease another node took meanwhile is not this node's to give up: handed off all
        // the same.
        let taken = keeper.taken_away().borrow().clone();
        (asked.iter())
            .map(|shard| handed.contains(shard) || taken.contains(shard))
            .collect()
    })
    .await?;
    match given_up.iter().find(|(_, given_up)| !given_up) {
        Some((shard, _)) => Err(format!(
            "the lease of shard {shard} was no longer renewed here"
        )),
        None => {
            tracing::info!(handed_off = ?leaving, led = ?spread.led, "handed shards to the nodes that now lead them");
            Ok(())
        }
    }
}

/// Lets go of `lost`, shards whose leases another node took (the keeper ended them), and
/// leads the rest on: as a hand-off, but the leases are not this node's to give up.
async fn let_go(spread: &mut Spread, reading: Option<&Seen>, lost: &[u32]) -> Result<(), String> {
    let lost_logs = stop_serving(spread, reading, lost).await?;
    close_and_leave(spread, lost_logs, |shards| vec![true; shards.len()]).await?;
    tracing::warn!(lost = ?lost, led = ?spread.led, "let go of shards whose leases were taken by another node or went unrenewed; leading the rest on");
    Ok(())
}

/// Stops serving `shards` here: their requests wait for their next leaders from now on (none
/// is passed back here), and the backend stops serving them (`Work::hand_off`); their logs,
/// taken out of those this generation leads. An error (a shard not led here) says the
/// generation should start over.
async fn stop_serving(
    spread: &mut Spread,
    reading: Option<&Seen>,
    shards: &[u32],
) -> Result<Vec<LedLog>, String> {
    spread.led.retain(|shard| !shards.contains(shard));
    if let Some(reading) = reading {
        let leaders = leaders(reading, &spread.own_url, &spread.led);
        spread.standby.standby.set_shard_leaders(leaders);
    }
    match spread.service.backend.hand_off(shards).await {
        Ok(()) => {}
        Err(crate::backend::BackendError::Across(shard)) => {
            return Err(format!("shard {shard} was not led here"))
        }
        // Served no more here: their leases are given up all the same (or were taken), and
        // their logs refuse what they had not made durable.
        Err(error) => {
            tracing::warn!(?shards, %error, "shards let go of before their logs held all they were given")
        }
    }
    for &shard in shards {
        spread.service.metrics.remove_log(shard);
    }
    let mut logs = spread.logs.lock().unwrap_or_else(|p| p.into_inner());
    let (gone, kept): (Vec<LedLog>, _) = std::mem::take(&mut *logs)
        .into_iter()
        .partition(|log| shards.contains(&log.shard));
    *logs = kept;
    Ok(gone)
}

/// Closes `logs` and leaves them out of the generation (`Started::let_go`); with no work
/// started yet, closes them alone.
async fn close_and_leave(
    spread: &Spread,
    logs: Vec<LedLog>,
    give_up: impl FnOnce(&[u32]) -> Vec<bool> + Send + 'static,
) -> Result<Vec<(u32, bool)>, String> {
    match &spread.started {
        Some(started) => started.let_go(logs, give_up).await,
        None => tokio::task::spawn_blocking(move || close_logs(&logs, give_up))
            .await
            .map_err(|error| error.to_string()),
    }
}

/// How `GET /_orderly/cluster` reads a node leading its share: `leader` while it leads a shard,
/// else `standby`; the logs of the shards it leads.
fn status(
    standby: Forwarding,
    (own_url, count): (String, u32),
    (epochs, led_logs): (Arc<[AtomicI64]>, LedLogs),
    seen: tokio::sync::watch::Receiver<Option<Arc<Seen>>>,
    (databases, opener): (Arc<[String]>, crate::persist::database::ShardOpener),
) -> ClusterStatus {
    Arc::new(move || {
        // A generation the node has moved past answers as one that leads nothing.
        let current = standby.standby.leading_in(standby.generation);
        let logs: Vec<ShardLog> = match current {
            true => (led_logs.lock().unwrap_or_else(|p| p.into_inner()).iter())
                .map(|log| ShardLog {
                    shard: log.shard,
                    epoch: Some(epochs[log.shard as usize].load(Ordering::Acquire).max(0) as u64),
                    applied: log.log_writer.durable().lsn,
                    lag: 0,
                    database: databases.get(log.shard as usize).cloned(),
                })
                .collect(),
            false => Vec::new(),
        };
        let led: Vec<u32> = logs.iter().map(|log| log.shard).collect();
        let nodes = seen.borrow().as_ref().map(|s| s.nodes.clone());
        // The promise of the databases keeping the shards it leads now, not those handed off.
        let replication = opener.promise_of(&led);
        // The shards it leads are its own, whichever way requests are passed meanwhile (a
        // shard being handed off, one just taken): `leaders` agrees with `led`.
        let mut leaders = standby.standby.known_shard_leaders();
        for &shard in &led {
            if let Some(leader) = leaders.get_mut(shard as usize) {
                leader.clone_from(&own_url);
            }
        }
        ClusterState {
            role: if led.is_empty() { "standby" } else { "leader" },
            epoch: 0,
            leader: if led.is_empty() {
                String::new()
            } else {
                own_url.clone()
            },
            applied: logs.iter().map(|log| log.applied).sum(),
            lag: 0,
            shards: count,
            led,
            nodes: nodes.unwrap_or_default(),
            leaders,
            databases: databases.to_vec(),
            replication,
            logs,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::database::lease::Holder;

    fn seen(nodes: &[&str], held: &[Option<&str>]) -> Seen {
        Seen {
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            names: Vec::new(),
            unread: Vec::new(),
            holders: (held.iter())
                .map(|url| {
                    url.map(|url| Holder {
                        epoch: 1,
                        node: "n".into(),
                        url: url.into(),
                        remaining_ms: 5_000,
                    })
                })
                .collect(),
        }
    }

    #[test]
    fn a_node_starts_over_when_its_share_is_free_or_belongs_to_another() {
        let (a, b) = ("http://a", "http://b");
        let count = 4;
        let both = [a, b];
        let placed = placement::place(count, &both.map(String::from));
        let share = |node: usize| -> Vec<u32> {
            (0..count).filter(|&s| placed[s as usize] == node).collect()
        };
        let (of_a, of_b) = (share(0), share(1));
        assert_eq!(of_a.len(), 2);
        // Alone, a leads all four; b has joined: the two that are b's move.
        let all_a = [Some(a); 4];
        let moved = share_moved(&seen(&both, &all_a), a, count, &[0, 1, 2, 3]);
        assert!(moved.is_some_and(|moved| moved.why.contains(b) && !moved.free));
        // b leads none of its share while a holds it: nothing for b to do yet.
        assert!(share_moved(&seen(&both, &all_a), b, count, &[]).is_none());
        // a gave every lease up: b's share is free.
        let free = [None; 4];
        assert!(share_moved(&seen(&both, &free), b, count, &[]).is_some_and(|moved| moved.free));
        // Each leads its share: settled.
        let mut held = [None; 4];
        for &s in &of_a {
            held[s as usize] = Some(a);
        }
        for &s in &of_b {
            held[s as usize] = Some(b);
        }
        assert!(share_moved(&seen(&both, &held), a, count, &of_a).is_none());
        assert!(share_moved(&seen(&both, &held), b, count, &of_b).is_none());
        // b is gone and its leases lapsed: a takes them.
        let mut lapsed = held;
        for &s in &of_b {
            lapsed[s as usize] = None;
        }
        assert!(share_moved(&seen(&[a], &lapsed), a, count, &of_a).is_some_and(|moved| moved.free));
        // A node that cannot read the live nodes (its own URL not among them) moves nothing.
        assert!(share_moved(&seen(&[], &free), a, count, &of_a).is_none());
    }

    #[test]
    fn a_node_hands_off_what_a_joining_node_now_leads_and_minds_a_shard_come_free_first() {
        let (a, b, c) = ("http://a", "http://b", "http://c");
        let count = 6;
        let share = |nodes: &[&str], node: &str| -> Vec<u32> {
            let live: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
            let placed = placement::place(count, &live);
            (0..count)
                .filter(|&s| live[placed[s as usize]] == node)
                .collect()
        };
        let of_a = share(&[a, b], a);
        let mut held = vec![None; count as usize];
        for &s in &of_a {
            held[s as usize] = Some(a);
        }
        for s in share(&[a, b], b) {
            held[s as usize] = Some(b);
        }
        // c joined: what a leads that is c's now leaves a, and only that.
        let joined = seen(&[a, b, c], &held);
        let leaving = leaving(&joined, a, count, &of_a);
        let of_c = share(&[a, b, c], c);
        assert!(!leaving.is_empty());
        assert!(leaving.iter().all(|s| of_a.contains(s) && of_c.contains(s)));
        assert_eq!(
            (of_a.iter()).filter(|s| !leaving.contains(s)).count(),
            share(&[a, b, c], a).len(),
            "a keeps the rest of its share"
        );
        let moved = share_moved(&joined, a, count, &of_a).unwrap();
        assert!(!moved.free && leaving.contains(&moved.shard));
        // A shard of a's share come free as well: it is minded first (a takes it, or starts
        // over when shards leave too).
        let mut freed = held.clone();
        let kept = *of_a.iter().find(|s| !leaving.contains(s)).unwrap();
        freed[kept as usize] = None;
        let led: Vec<u32> = of_a.iter().copied().filter(|&s| s != kept).collect();
        let moved = share_moved(&seen(&[a, b, c], &freed), a, count, &led).unwrap();
        assert!(moved.free && moved.shard == kept, "{}", moved.why);
        assert_eq!(
            free_of_share(&seen(&[a, b, c], &freed), a, count, &led),
            [kept]
        );
        // The same when a shard leaving comes before the one come free: a leads the lowest
        // shard that is not its own, and the highest of its own is free.
        let now = share(&[a, b, c], a);
        let lowest = (0..count).find(|s| !now.contains(s)).unwrap();
        let highest = *now.last().unwrap();
        assert!(
            lowest < highest,
            "placement gives a the lowest shard: pick other names"
        );
        let mut held = vec![Some(b); count as usize];
        held[highest as usize] = None;
        let moved = share_moved(&seen(&[a, b, c], &held), a, count, &[lowest]).unwrap();
        assert!(moved.free && moved.shard == highest, "{}", moved.why);
    }

    #[test]
    fn a_shard_freed_by_a_node_gone_is_settled_and_one_freed_otherwise_waits_for_the_nodes() {
        let nodes =
            |names: &[&str]| -> Vec<String> { names.iter().map(|n| n.to_string()).collect() };
        let (two, three) = (nodes(&["a", "b"]), nodes(&["a", "b", "c"]));
        assert!(settled(Some(&three), &three, Some("a")), "the same nodes");
        assert!(settled(Some(&three), &three, None));
        assert!(
            settled(Some(&three), &two, Some("c")),
            "c gone, its lease lapsed"
        );
        // c missing from one reading (late) while a gave a shard up, or one never held: wait.
        assert!(!settled(Some(&three), &two, Some("a")));
        assert!(!settled(Some(&three), &two, None));
        assert!(!settled(Some(&two), &three, None), "c arrived");
        assert!(!settled(None, &two, Some("c")), "no reading before");
    }

    #[test]
    fn a_free_lease_moves_a_settled_node_at_once_and_anything_else_in_two_readings() {
        let (free, taken) = (
            Move {
                why: String::new(),
                shard: 0,
                free: true,
            },
            Move {
                why: String::new(),
                shard: 0,
                free: false,
            },
        );
        assert!(
            gives_way(&free, false, true),
            "free, the same nodes: at once"
        );
        assert!(
            !gives_way(&free, false, false),
            "free, the nodes changed: a second reading"
        );
        assert!(
            !gives_way(&taken, false, true),
            "another's now: a second reading"
        );
        assert!(gives_way(&taken, true, false) && gives_way(&free, true, false));
    }
}
