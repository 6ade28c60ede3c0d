//! A node's keeper of its leases: once a second, each database of the shard map renews the
//! leases of the node's shards it keeps, in one statement, writing the node's time into them;
//! a lease another node took, or one unrenewed for its length, ends the node's leading
//! (`Leads::Every`) or that shard's (`Leads::Each`). At a clean stop it gives them all up, so
//! the next leader need not wait them out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::connection::{Blocking, Work};
use super::lease::{release, release_all, renew_held, Fence, Nodes, LEASE, RENEW_TIMEOUT};
use super::replication;
use crate::clock::Clock;
use crate::engine::Timestamp;
use crate::persist::tenure::Tenure;
use crate::persist::writer::LogWriter;
use crate::worker::{Backoff, Stop, Thread};

/// How often the leader renews: several times a lease, so one slow renewal costs nothing.
const RENEW_EVERY: Duration = Duration::from_secs(1);

/// What a node's keeper keeps for every shard it holds: the clock, whose time each renewal
/// writes into the leases; each database's promise about acknowledged writes, read again at
/// each renewal (with, for each database of the shard map, its URL's hosts, whether it asks
/// for a read-write one, and its name); and the node's announcement, in the home database.
pub struct Held {
    /// This node and its URL, announced after each renewal, and the live nodes read back
    /// (`None`: a state moved in or out, which serves no one).
    pub announced: Option<(String, String, Nodes)>,
    /// What a lease another node takes costs the node.
    pub leads: Leads,
    pub clock: Arc<dyn Clock>,
    pub replication: (replication::Shared, Vec<replication::Reading>),
}

/// Whether a node leads its shards together or each on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leads {
    /// Every shard of the database or none: a lease another node takes ends them all.
    Every,
    /// Its share of the shards: a lease another node takes ends that shard only, as does one
    /// its database (in a shard map of several) did not renew for a lease's length, and the
    /// keeper renews the rest (`Keeper::taken_away` says which were ended).
    Each,
}

/// One shard's lease as a keeper holds it: the database it is kept in (its site in the shard
/// map); its fence; its log, which stops acknowledging once the lease is lost; its tenure,
/// kept a margin inside the lease.
pub struct HeldShard {
    pub site: usize,
    pub fence: Fence,
    pub log_writer: Arc<LogWriter>,
    pub tenure: Arc<Tenure>,
}

/// The shards a keeper renews, each with the time it was taken or last renewed no earlier
/// than, and whether it has stopped renewing (then it takes no more).
type Shards = Arc<std::sync::Mutex<(Vec<(HeldShard, Instant)>, bool)>>;

/// Renews the leases of every shard a node holds, in one statement a database each time, until
/// told to stop. If another node took one of them, or one was not renewed in time, no log of
/// the node acknowledges anything more (`Leads::Every`: a node leads every shard or none), or
/// that shard's (`Leads::Each`). A keeper dropped without
/// `release` (a server dropped without stopping) stops renewing, so the leases lapse and its
/// connection closes.
pub struct Keeper {
    shards: Shards,
    /// The keeper's connections, one to each database of the shard map: the renewal thread's,
    /// and a hand-off's between renewals, so a renewal that still names a shard handed off
    /// runs before its lease is given up. The thread takes them out when it ends, to drop them
    /// there: each owns a runtime, which must not be dropped inside another.
    db: Connections,
    /// Set before the thread is told to stop: give the leases up rather than let them lapse.
    give_up: Arc<AtomicBool>,
    thread: Thread<()>,
    /// Turns true once a lease is lost (taken by another node, or not renewed in time): of
    /// every lease with `Leads::Every`, of the last with `Leads::Each`.
    lost: tokio::sync::watch::Receiver<bool>,
    /// With `Leads::Each`, the shards another node took, or whose database did not answer
    /// for a lease's length, in the order found.
    taken_away: tokio::sync::watch::Receiver<Vec<i32>>,
}

impl Keeper {
    /// Renews the lease of `first`, taken no earlier than `taken`, and those added later, over
    /// `dbs` (a connection to each database of the shard map, the home's first).
    pub fn start(
        dbs: Vec<Blocking>,
        (first, taken): (HeldShard, Instant),
        held: Held,
    ) -> std::io::Result<Keeper> {
        first.tenure.hold(taken, LEASE);
        let shards: Shards = Arc::new(std::sync::Mutex::new((vec![(first, taken)], false)));
        let renewed = shards.clone();
        let db: Connections = Arc::new(std::sync::Mutex::new(Some(dbs)));
        let connection = db.clone();
        let give_up = Arc::new(AtomicBool::new(false));
        let giving_up = give_up.clone();
        let (lose, lost) = tokio::sync::watch::channel(false);
        let (take_away, taken_away) = tokio::sync::watch::channel(Vec::new());
        let thread = Thread::start("lease", move |stop| {
            // The connection is dropped on this thread however it ends, panics included.
            let connection = DroppedHere(connection);
            let renewing = || renew(&connection.0, (&renewed, &take_away), &held, stop);
            let ended = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(renewing)) {
                Ok(ended) => ended,
                Err(_) => {
                    // Nothing renews the leases any more: they lapse, and another node may
                    // lead, so none of the node's logs may acknowledge more.
                    tracing::error!("the lease keeper failed: this node acknowledges nothing more and steps down");
                    lose_all(&renewed);
                    Ended::Lost(Vec::new())
                }
            };
            // Stopped before the connection is taken: a hand-off from then on is refused, so
            // every lease still to give up is among these.
            let mut shards = renewed.lock().unwrap_or_else(|p| p.into_inner());
            shards.1 = true;
            for (shard, _) in shards.0.iter() {
                shard.tenure.end();
            }
            drop(shards);
            let Some(mut dbs) = lock(&connection.0).take() else {
                return;
            };
            let shards = renewed.lock().unwrap_or_else(|p| p.into_inner());
            let fences = |taken: &[Fence]| -> Vec<(usize, Fence)> {
                (shards.0.iter().map(|(s, _)| (s.site, s.fence)))
                    .filter(|(_, fence)| !taken.contains(fence))
                    .collect()
            };
            match ended {
                Ended::Told if giving_up.load(Ordering::SeqCst) => {
                    release_each(&mut dbs, &fences(&[]), held.clock.now())
                }
                Ended::Told => {}
                Ended::Lost(taken) => {
                    // Every log of the node has stopped acknowledging: the leases another
                    // node did not take are given up, so the next leader (this node again,
                    // perhaps) need not wait them out.
                    if !taken.is_empty() {
                        release_each(&mut dbs, &fences(&taken), held.clock.now());
                    }
                    let _ = lose.send(true);
                }
            }
        })?;
        Ok(Keeper {
            shards,
            db,
            give_up,
            thread,
            lost,
            taken_away,
        })
    }

    /// Renews the lease of `shard` too from now on, taken no earlier than `taken`; refused
    /// once the keeper has stopped renewing (a lease lost, or all given up).
    pub fn add(&self, shard: HeldShard, taken: Instant) -> Result<(), Stopped> {
        let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        if shards.1 {
            return Err(Stopped);
        }
        shard.tenure.hold(taken, LEASE);
        shards.0.push((shard, taken));
        Ok(())
    }

    /// Gives the lease of `shard` up, so that another node takes it at once, and keeps
    /// renewing the others: the step of a hand-off once this node has finished what it had in
    /// flight in the shard. From the moment it is called the shard's log acknowledges nothing
    /// more and its tenure is over. Answers whether the keeper held the shard. Blocks for one
    /// statement (or a renewal under way): call it off the runtime. Refused (false) once the
    /// keeper has stopped renewing, whose thread gives up or has lost every lease it held.
    pub fn hand_off(&self, shard: i32, now: Timestamp) -> bool {
        // The connection first, then the shards, as a renewal takes them: the thread marks
        // itself stopped before it takes the connection, so while this holds it, the thread
        // either has not stopped (and gives up what is left once it does) or has, and then the
        // shard stays its to give up.
        let mut connection = lock(&self.db);
        let handed = {
            let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
            if shards.1 {
                return false;
            }
            let at = (shards.0.iter()).position(|(held, _)| held.fence.shard == shard);
            at.map(|at| shards.0.remove(at).0)
        };
        let Some(handed) = handed else {
            return false;
        };
        handed.log_writer.fail_for_good();
        handed.tenure.end();
        if let Some(db) = connection.as_mut().and_then(|dbs| dbs.get_mut(handed.site)) {
            release(db, handed.fence, now);
        }
        true
    }

    /// The shards whose leases the keeper renews, in the order taken.
    pub fn held(&self) -> Vec<i32> {
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        shards.0.iter().map(|(held, _)| held.fence.shard).collect()
    }

    /// The shards another node took from this keeper's (with `Leads::Each`), or whose
    /// database did not answer for a lease's length, each ended and renewed no more, in the
    /// order found; it changes at each.
    pub fn taken_away(&self) -> tokio::sync::watch::Receiver<Vec<i32>> {
        self.taken_away.clone()
    }

    /// Completes once a lease is lost (never, if they are given up or abandoned first).
    pub async fn lost(&self) {
        let mut lost = self.lost.clone();
        if lost.wait_for(|lost| *lost).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Stops renewing and gives every lease up, so that another node (or this one restarted)
    /// takes them at once. Call once the logs are closed: nothing is written after. Blocks;
    /// called again, does nothing.
    pub fn release(&self) {
        self.give_up.store(true, Ordering::SeqCst);
        self.thread.stop();
    }
}

/// A keeper that stopped renewing takes no more shards.
#[derive(Debug, thiserror::Error)]
#[error("this node's leases were lost or given up while it took another shard's: not leading")]
pub struct Stopped;

/// Gives the leases `fences` name up, each in the database (site) it is kept in: one statement
/// a database.
fn release_each(dbs: &mut [Blocking], fences: &[(usize, Fence)], now: Timestamp) {
    for (site, db) in dbs.iter_mut().enumerate() {
        let here: Vec<Fence> = (fences.iter())
            .filter(|(s, _)| *s == site)
            .map(|(_, fence)| *fence)
            .collect();
        if !here.is_empty() {
            release_all(db, &here, now);
        }
    }
}

/// Why the keeper stopped renewing.
enum Ended {
    /// Told to stop (`Keeper::release`, or the keeper dropped).
    Told,
    /// Every lease lost: those another node took or that lapsed unrenewed, when they are
    /// not this node's to give up (none when every lease lapsed with `Leads::Every`; with
    /// `Leads::Each`, those ended by the renewal that ended the last).
    Lost(Vec<Fence>),
}

/// A keeper's connections to the databases, until its thread ends.
type Connections = Arc<std::sync::Mutex<Option<Vec<Blocking>>>>;

/// Takes the connection out and drops it where this is dropped: on the keeper's thread, which
/// is outside any runtime, as the runtime the connection owns must be dropped.
struct DroppedHere(Connections);

impl Drop for DroppedHere {
    fn drop(&mut self) {
        drop(lock(&self.0).take());
    }
}

/// The keeper's connections, for one statement.
fn lock(db: &Connections) -> std::sync::MutexGuard<'_, Option<Vec<Blocking>>> {
    db.lock().unwrap_or_else(|p| p.into_inner())
}

/// Renews until ordered to stop or until a lease is lost.
fn renew(
    connections: &Connections,
    (shards, take_away): (&Shards, &tokio::sync::watch::Sender<Vec<i32>>),
    held: &Held,
    stop: &Stop,
) -> Ended {
    let clock = &held.clock;
    let held_shards = || shards.lock().unwrap_or_else(|p| p.into_inner());
    let mut failing = false;
    // A renewal that failed is tried again on time all the same (the leases run out
    // otherwise); the failures are counted.
    let mut retry = Backoff::new("lease", RENEW_EVERY, RENEW_EVERY);
    let mut wait = RENEW_EVERY;
    loop {
        if stop.wait(wait) {
            return Ended::Told;
        }
        let started = Instant::now();
        let now = clock.now().0 as i64;
        // The connections first, then the shards: a shard handed off meanwhile is either left
        // out here or given up after this renewal.
        let mut guard = lock(connections);
        let Some(dbs) = guard.as_mut() else {
            return Ended::Told;
        };
        let fences: Vec<(usize, Fence)> = (held_shards().0.iter())
            .map(|(s, _)| (s.site, s.fence))
            .collect();
        let renewal = renew_each(dbs, &fences, (now, held));
        let taken: Vec<Fence> = (fences.iter())
            .filter(|(site, f)| {
                !renewal.failed.iter().any(|(s, _)| s == site) && !renewal.renewed.contains(f)
            })
            .map(|(_, f)| *f)
            .collect();
        if !taken.is_empty() {
            let shards_taken: Vec<i32> = taken.iter().map(|f| f.shard).collect();
            let epochs: Vec<i64> = taken.iter().map(|f| f.epoch).collect();
            if held.leads == Leads::Every {
                tracing::error!(
                    shards = ?shards_taken,
                    epochs = ?epochs,
                    "another node took the lease: this node acknowledges nothing more and steps down"
                );
                lose_all(shards);
                return Ended::Lost(taken);
            }
            tracing::error!(
                shards = ?shards_taken,
                epochs = ?epochs,
                "another node took these shards' leases: this node acknowledges nothing more in them and goes on leading the rest"
            );
            let left = end_taken(shards, &taken);
            take_away.send_modify(|away| away.extend(shards_taken));
            if left == 0 {
                return Ended::Lost(taken);
            }
        }
        // Only those renewed: a shard added meanwhile keeps the time it was taken, and one in a
        // database that did not answer the time it was last renewed.
        for (shard, since) in held_shards().0.iter_mut() {
            if renewal.renewed.contains(&shard.fence) {
                *since = started;
                shard.tenure.hold(started, LEASE);
            }
        }
        let home_answered = !renewal.failed.iter().any(|(site, _)| *site == 0);
        if let (true, Some((node, own_url, nodes)), Some(home)) =
            (home_answered, &held.announced, dbs.first_mut())
        {
            nodes.announce(home, node, own_url);
        }
        let Some((site, failed)) = renewal.failed.first() else {
            retry.succeeded();
            wait = RENEW_EVERY;
            if failing {
                tracing::info!("the leases are renewed again");
                failing = false;
            }
            continue;
        };
        let name = |site: usize| held.replication.1.get(site).map_or("", |(_, name)| name);
        // Leases unrenewed for their length: another node may lead those shards now.
        let lapsed: Vec<(usize, Fence)> = (held_shards().0.iter())
            .filter(|(_, since)| since.elapsed() >= LEASE)
            .map(|(shard, _)| (shard.site, shard.fence))
            .collect();
        if !lapsed.is_empty() && held.leads == Leads::Every {
            tracing::error!(
                cause = %failed,
                database = name(*site),
                "the lease could not be renewed in time: this node acknowledges nothing more, \
                 as another may lead now, and steps down"
            );
            lose_all(shards);
            return Ended::Lost(Vec::new());
        }
        if !lapsed.is_empty() {
            // Those of a database that does not answer: the shards kept in the others are
            // led on.
            for (site, cause) in &renewal.failed {
                let these: Vec<i32> = (lapsed.iter())
                    .filter(|(s, _)| s == site)
                    .map(|(_, f)| f.shard)
                    .collect();
                if !these.is_empty() {
                    tracing::error!(
                        %cause,
                        database = name(*site),
                        shards = ?these,
                        "these shards' leases could not be renewed in time: this node \
                         acknowledges nothing more in them, as another may lead them now, and \
                         leads the rest on"
                    );
                }
            }
            let lapsed: Vec<Fence> = lapsed.into_iter().map(|(_, fence)| fence).collect();
            let left = end_taken(shards, &lapsed);
            take_away.send_modify(|away| away.extend(lapsed.iter().map(|f| f.shard)));
            if left == 0 {
                return Ended::Lost(lapsed);
            }
        }
        wait = retry.failed();
        if !failing {
            let database = name(*site);
            tracing::warn!(cause = %failed, database, "the lease was not renewed; trying again");
            failing = true;
        }
    }
}

/// What one renewal did across the databases.
struct Renewal {
    /// The leases renewed.
    renewed: Vec<Fence>,
    /// The databases (sites) that did not answer, with why.
    failed: Vec<(usize, String)>,
}

/// Renews `fences` (each with the database it is kept in), one statement in each database
/// that keeps any, writing the time `now`, and reads each such database's promise again. The
/// databases are asked at once, each on a thread of the renewal's, so one that does not answer
/// costs the others nothing.
fn renew_each(
    dbs: &mut [Blocking],
    fences: &[(usize, Fence)],
    (now, held): (i64, &Held),
) -> Renewal {
    let asked = |site: usize| -> Vec<Fence> {
        (fences.iter())
            .filter(|(s, _)| *s == site)
            .map(|(_, fence)| *fence)
            .collect()
    };
    let work: Vec<(usize, &mut Blocking, Vec<Fence>)> = (dbs.iter_mut().enumerate())
        .map(|(site, db)| (site, db, asked(site)))
        .filter(|(_, _, asked)| !asked.is_empty())
        .collect();
    let renew_one = |(site, db, asked): (usize, &mut Blocking, Vec<Fence>)| {
        let Some((url, name)) = held.replication.1.get(site) else {
            return (
                site,
                asked,
                Err(format!("no database {site} in the shard map")),
            );
        };
        let (url, these) = (*url, asked.clone());
        let renewed = db.run(RENEW_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                let renewed = renew_held(client, &these, now).await?;
                // Read again each time: a reconnect may have found another server. What it
                // says is no part of the renewal, which has committed by now.
                let found = replication::read(client, url).await.ok();
                Ok((renewed, found))
            })
        });
        let renewed = renewed.map(|(renewed, found)| {
            if let Some(found) = found {
                held.replication.0.found((site, name), found);
            }
            renewed
        });
        (site, asked, renewed.map_err(|failed| failed.cause))
    };
    let answers: Vec<_> = match work.len() {
        0 | 1 => work.into_iter().map(renew_one).collect(),
        _ => std::thread::scope(|scope| {
            let asking: Vec<_> = (work.into_iter())
                .map(|one| {
                    let site = one.0;
                    (site, scope.spawn(|| renew_one(one)))
                })
                .collect();
            (asking.into_iter())
                .map(|(site, asking)| {
                    asking.join().unwrap_or_else(|_| {
                        (site, Vec::new(), Err("the renewal's thread failed".into()))
                    })
                })
                .collect()
        }),
    };
    let mut renewal = Renewal {
        renewed: Vec::new(),
        failed: Vec::new(),
    };
    for (site, asked, answer) in answers {
        match answer {
            Ok(renewed) => {
                (renewal.renewed).extend(asked.iter().filter(|f| renewed.contains(&f.shard)))
            }
            Err(cause) => renewal.failed.push((site, cause)),
        }
    }
    renewal
}

/// The shards another node took stop acknowledging and are renewed no more; answers how many
/// the keeper still holds.
fn end_taken(shards: &Shards, taken: &[Fence]) -> usize {
    let mut held = shards.lock().unwrap_or_else(|p| p.into_inner());
    if held.0.iter().all(|(shard, _)| taken.contains(&shard.fence)) {
        // Nothing left to lead: no shard is added or handed off from here on.
        held.1 = true;
    }
    held.0.retain(|(shard, _)| {
        let gone = taken.contains(&shard.fence);
        if gone {
            shard.log_writer.fail_for_good();
            shard.tenure.end();
        }
        !gone
    });
    held.0.len()
}

/// Every log the node leads stops acknowledging: it leads every shard or none.
fn lose_all(shards: &Shards) {
    let mut held = shards.lock().unwrap_or_else(|p| p.into_inner());
    // No shard is added or handed off from here on.
    held.1 = true;
    for (shard, _) in held.0.iter() {
        shard.log_writer.fail_for_good();
    }
}
