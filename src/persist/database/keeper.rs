//! A node's keeper of its leases: once a second, each database of the shard map renews the
//! leases of the node's shards it keeps, in one statement, writing the node's time into them
//! (a database that has not answered the last round is not asked again meanwhile);
//! a lease another node took, or one unrenewed for its length, ends the node's leading
//! (`Leads::Every`) or that shard's (`Leads::Each`). At a clean stop it gives them all up, so
//! the next leader need not wait them out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::connection::{Blocking, Work};
use super::lease::{release_all, renew_held, Fence, Nodes, LEASE, RENEW_TIMEOUT};
use super::replication;
use super::site_worker::SiteWorker;
use crate::clock::Clock;
use crate::engine::Timestamp;
use crate::persist::tenure::Tenure;
use crate::persist::writer::LogWriter;
use crate::worker::{Backoff, Stop, Thread};

/// How often the leader renews: several times a lease, so one slow renewal costs nothing.
const RENEW_EVERY: Duration = Duration::from_secs(1);

/// Longest a keeper told to stop waits for its last announcement: the statement's own bound
/// (`lease::Nodes::announce`), and a renewal under way in the home before it.
const ANNOUNCE_WAIT: Duration = Duration::from_secs(3);

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
/// that shard's (`Leads::Each`). A keeper dropped without `release` (a server dropped without
/// stopping) stops renewing, so the leases lapse and its connections close.
pub struct Keeper {
    shards: Shards,
    /// A connection to each database of the shard map, on a thread of its own: a renewal and
    /// a hand-off's giving up run on it in the order asked, so a renewal that still names a
    /// shard handed off runs before its lease is given up.
    databases: Databases,
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

/// The keeper's connections, one to each database of the shard map (the home's first).
type Databases = Arc<Vec<SiteWorker>>;

impl Keeper {
    /// Renews the lease of `first`, taken no earlier than `taken`, and those added later, over
    /// `dbs` (a connection to each database of the shard map, the home's first).
    pub fn start(
        dbs: Vec<Blocking>,
        (first, taken): (HeldShard, Instant),
        held: Held,
    ) -> std::io::Result<Keeper> {
        let databases: Databases = Arc::new(
            (dbs.into_iter())
                .map(|db| SiteWorker::start("lease-database", db))
                .collect::<std::io::Result<_>>()?,
        );
        first.tenure.hold(taken, LEASE);
        let shards: Shards = Arc::new(std::sync::Mutex::new((vec![(first, taken)], false)));
        let renewed = shards.clone();
        let renewing = databases.clone();
        let give_up = Arc::new(AtomicBool::new(false));
        let giving_up = give_up.clone();
        let (lose, lost) = tokio::sync::watch::channel(false);
        let (take_away, taken_away) = tokio::sync::watch::channel(Vec::new());
        let thread = Thread::start("lease", move |stop| {
            let databases = renewing;
            let renewing = || renew(&databases, (&renewed, &take_away), &held, stop);
            let ended = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(renewing)) {
                Ok(ended) => ended,
                Err(_) => {
                    // Nothing renews the leases any more: they lapse, and another node may
                    // lead, so none of the node's logs may acknowledge more.
                    tracing::error!("the lease keeper failed: this node acknowledges nothing more and steps down");
                    lose_all(&renewed);
                    Ended::Failed
                }
            };
            // Stopped before the leases left are read: a hand-off from then on is refused, so
            // every lease still to give up is among these.
            let mut shards = renewed.lock().unwrap_or_else(|p| p.into_inner());
            shards.1 = true;
            for (shard, _) in shards.0.iter() {
                shard.tenure.end();
            }
            let left = |kept: &[Fence]| -> Vec<(usize, Fence)> {
                (shards.0.iter().map(|(s, _)| (s.site, s.fence)))
                    .filter(|(_, fence)| !kept.contains(fence))
                    .collect()
            };
            let given_up = match &ended {
                Ended::Told if giving_up.load(Ordering::SeqCst) => left(&[]),
                // Every log of the node has stopped acknowledging: the leases that are still
                // this node's are given up, so the next leader (this node again, perhaps)
                // need not wait them out.
                Ended::Lost(not_ours) => left(not_ours),
                Ended::Told | Ended::Failed => Vec::new(),
            };
            // None left to renew: a renewal still waiting for a database that did not answer
            // renews nothing when it runs.
            shards.0.clear();
            drop(shards);
            // The clock read only then: a keeper that failed may have failed reading it.
            if !given_up.is_empty() {
                release_each(&databases, &given_up, held.clock.now());
            }
            if matches!(ended, Ended::Lost(_) | Ended::Failed) {
                let _ = lose.send(true);
            }
        })?;
        Ok(Keeper {
            shards,
            databases,
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
    /// statement (after a renewal under way in its database, for a few seconds at most): call
    /// it off the runtime. Refused (false) once the keeper has stopped renewing, whose thread
    /// gives up or has lost every lease it held.
    pub fn hand_off(&self, shard: i32, now: Timestamp) -> bool {
        self.hand_off_each(&[shard], now) == [shard]
    }

    /// As `hand_off`, for several shards at once: one statement a database, the databases at
    /// once, so a database that does not answer holds the others' up no longer than its own
    /// wait. Answers those the keeper held, in the order asked.
    pub fn hand_off_each(&self, shards: &[i32], now: Timestamp) -> Vec<i32> {
        // The thread marks itself stopped before it reads the leases left to give up: this
        // either takes the shards out first (and gives them up), or finds the thread stopped.
        let handed: Vec<HeldShard> = {
            let mut held = self.shards.lock().unwrap_or_else(|p| p.into_inner());
            if held.1 {
                return Vec::new();
            }
            (shards.iter())
                .filter_map(|&shard| {
                    let at = (held.0.iter()).position(|(held, _)| held.fence.shard == shard);
                    at.map(|at| held.0.remove(at).0)
                })
                .collect()
        };
        for shard in &handed {
            shard.log_writer.fail_for_good();
            shard.tenure.end();
        }
        let fences: Vec<(usize, Fence)> = handed.iter().map(|s| (s.site, s.fence)).collect();
        release_each(&self.databases, &fences, now);
        handed.iter().map(|shard| shard.fence.shard).collect()
    }

    /// The shards whose leases the keeper renews, in the order taken (none once it stopped).
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

/// Longest a giving up waits for its database: a renewal under way there and its own
/// statement. A database that does not answer meanwhile lets the lease lapse.
pub(super) const GIVE_UP_WAIT: Duration = Duration::from_secs(5);

/// Gives the leases `fences` name up, each in the database (site) it is kept in: one statement
/// a database, the databases at once.
fn release_each(databases: &[SiteWorker], fences: &[(usize, Fence)], now: Timestamp) {
    let asked: Vec<mpsc::Receiver<()>> = (databases.iter().enumerate())
        .filter_map(|(site, worker)| {
            let here: Vec<Fence> = (fences.iter())
                .filter(|(s, _)| *s == site)
                .map(|(_, fence)| *fence)
                .collect();
            (!here.is_empty()).then(|| worker.ask(move |db| release_all(db, &here, now)))
        })
        .collect();
    let until = Instant::now() + GIVE_UP_WAIT;
    for answer in asked {
        let _ = answer.recv_timeout(until.saturating_duration_since(Instant::now()));
    }
}

/// Why the keeper stopped renewing.
enum Ended {
    /// Told to stop (`Keeper::release`, or the keeper dropped).
    Told,
    /// Every lease lost. Those named are not this node's to give up (another node took them,
    /// or their database did not answer for a lease's length); the rest are given up.
    Lost(Vec<Fence>),
    /// The keeper itself failed: nothing is given up.
    Failed,
}

/// What one database answered to a renewal: the leases asked for, those renewed, and when the
/// renewal was sent (each lease renewed runs from no earlier); or why it failed.
type Answer = Result<(Vec<Fence>, Vec<i32>, Instant), String>;

/// Renews until ordered to stop or until a lease is lost.
fn renew(
    databases: &[SiteWorker],
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
    // Each database's renewal still under way: one that did not answer in time is waited
    // for (not asked again) and its answer, once it comes, counted then.
    let mut announcing: Option<mpsc::Receiver<()>> = None;
    let mut under_way: Vec<Option<mpsc::Receiver<Answer>>> =
        databases.iter().map(|_| None).collect();
    loop {
        if stop.wait(wait) {
            // An announcement still under way is let finish (its statement is bounded), so
            // that one taken back once the keeper has stopped stays taken back.
            if let Some(announcing) = &announcing {
                let _ = announcing.recv_timeout(ANNOUNCE_WAIT);
            }
            return Ended::Told;
        }
        let tick = Instant::now();
        let now = clock.now().0 as i64;
        let held_sites: Vec<usize> = {
            let mut sites: Vec<usize> = held_shards().0.iter().map(|(s, _)| s.site).collect();
            sites.sort_unstable();
            sites.dedup();
            sites
        };
        let mut asked_now = vec![false; under_way.len()];
        for &site in &held_sites {
            if under_way[site].is_none() {
                under_way[site] = (databases.get(site))
                    .map(|worker| ask_renewal(worker, site, shards, (now, held)));
                asked_now[site] = true;
            }
        }
        let deadline = Instant::now() + RENEW_TIMEOUT + ANSWER_MARGIN;
        let answers = answers_by(&mut under_way, (&asked_now, deadline));
        let mut failed: Vec<(usize, String)> = Vec::new();
        let mut taken: Vec<Fence> = Vec::new();
        for (site, answer) in answers {
            match answer {
                Ok((asked, renewed, sent)) => {
                    taken.extend(asked.iter().filter(|f| !renewed.contains(&f.shard)));
                    // Only those still held in the epoch renewed: a shard added meanwhile
                    // keeps the time it was taken.
                    for (shard, since) in held_shards().0.iter_mut() {
                        let this =
                            asked.contains(&shard.fence) && renewed.contains(&shard.fence.shard);
                        if this && sent > *since {
                            *since = sent;
                            shard.tenure.hold(sent, LEASE);
                        }
                    }
                }
                // A database no shard of which is held any more is no concern.
                Err(cause) if held_sites.contains(&site) => failed.push((site, cause)),
                Err(_) => {}
            }
        }
        // Still waited for: no answer in time.
        for &site in &held_sites {
            if under_way[site].is_some() && !failed.iter().any(|(s, _)| *s == site) {
                failed.push((site, "no answer within the renewal's time".into()));
            }
        }
        // A shard handed off or ended meanwhile is no longer this keeper's concern.
        let still_held: Vec<Fence> = held_shards().0.iter().map(|(s, _)| s.fence).collect();
        taken.retain(|fence| still_held.contains(fence));
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
                return Ended::Lost(not_ours(&taken, &failed, shards));
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
        // Not waited for (the next renewal comes after it, in its turn), nor asked again while
        // the last is under way.
        let home_answered = !failed.iter().any(|(site, _)| *site == 0);
        let announcing_done = (announcing.as_ref())
            .is_none_or(|done| !matches!(done.try_recv(), Err(mpsc::TryRecvError::Empty)));
        if let (true, true, Some((node, own_url, nodes)), Some(home)) = (
            home_answered,
            announcing_done,
            &held.announced,
            databases.first(),
        ) {
            let (node, own_url, nodes) = (node.clone(), own_url.clone(), nodes.clone());
            announcing = Some(home.ask(move |db| nodes.announce(db, &node, &own_url)));
        }
        // The next round a second after this one began, however long this one waited.
        wait = RENEW_EVERY.saturating_sub(tick.elapsed());
        let Some((site, cause)) = failed.first() else {
            retry.succeeded();
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
                %cause,
                database = name(*site),
                "the lease could not be renewed in time: this node acknowledges nothing more, \
                 as another may lead now, and steps down"
            );
            lose_all(shards);
            return Ended::Lost(not_ours(&[], &failed, shards));
        }
        if !lapsed.is_empty() {
            // Those of a database that does not answer: the shards kept in the others are
            // led on.
            for (site, cause) in &failed {
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
        // Counted; the next round comes on time all the same.
        retry.failed();
        if !failing {
            let database = name(*site);
            tracing::warn!(%cause, database, "the lease was not renewed; trying again");
            failing = true;
        }
    }
}

/// How much longer than a renewal's own bound its answer is waited for.
const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// Asks `worker`, the connection to database `site`, to renew the leases this keeper holds
/// there, as they stand when it runs (a shard handed off before then is left out), writing
/// the time `now`, and to read the database's promise again.
fn ask_renewal(
    worker: &SiteWorker,
    site: usize,
    shards: &Shards,
    (now, held): (i64, &Held),
) -> mpsc::Receiver<Answer> {
    let shards = shards.clone();
    let promise = held.replication.0.clone();
    let reading = held.replication.1.get(site).cloned();
    worker.ask(move |db: &mut Blocking| -> Answer {
        let ((url, name), sent) = (
            reading.ok_or("a database not in the shard map")?,
            Instant::now(),
        );
        let asked: Vec<Fence> = (shards.lock().unwrap_or_else(|p| p.into_inner()).0.iter())
            .filter(|(shard, _)| shard.site == site)
            .map(|(shard, _)| shard.fence)
            .collect();
        let these = asked.clone();
        let renewed = db.run(RENEW_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                let renewed = renew_held(client, &these, now).await?;
                // Read again each time: a reconnect may have found another server. What it
                // says is no part of the renewal, which has committed by now.
                let found = replication::read(client, url).await.ok();
                Ok((renewed, found))
            })
        });
        let (renewed, found) = renewed.map_err(|failed| failed.cause)?;
        if let Some(found) = found {
            promise.found((site, &name), found);
        }
        Ok((asked, renewed, sent))
    })
}

/// The answers of the renewals `under_way`, each taken out of it with its database's index:
/// those asked now waited for until `deadline`, those asked in an earlier round (a database
/// that did not answer in time then) only if they came meanwhile; those still under way stay.
fn answers_by(
    under_way: &mut [Option<mpsc::Receiver<Answer>>],
    (asked_now, deadline): (&[bool], Instant),
) -> Vec<(usize, Answer)> {
    let mut answers = Vec::new();
    for (site, waiting) in under_way.iter_mut().enumerate() {
        let Some(receiver) = waiting else { continue };
        let wait = match asked_now.get(site) {
            Some(true) => deadline.saturating_duration_since(Instant::now()),
            _ => Duration::ZERO,
        };
        match receiver.recv_timeout(wait) {
            Ok(answer) => {
                answers.push((site, answer));
                *waiting = None;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                answers.push((site, Err("the renewal failed".into())));
                *waiting = None;
            }
        }
    }
    answers
}

/// The leases not this node's to give up once it steps down: those `taken`, and those kept in
/// a database that `failed` to answer.
fn not_ours(taken: &[Fence], failed: &[(usize, String)], shards: &Shards) -> Vec<Fence> {
    let held = shards.lock().unwrap_or_else(|p| p.into_inner());
    let unanswered = (held.0.iter())
        .filter(|(shard, _)| failed.iter().any(|(site, _)| *site == shard.site))
        .map(|(shard, _)| shard.fence);
    taken.iter().copied().chain(unanswered).collect()
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
