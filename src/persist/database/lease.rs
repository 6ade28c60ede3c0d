//! Which node leads a shard: a lease in the database (the shard's row of `log_shards`) with an
//! epoch, taken and renewed on the database's clock. A node takes the lease only once it has lapsed, adding one to the
//! epoch; every write of the log checks the epoch in its own statement (`table_log`), so a node
//! that lost the lease can never write, even before it notices. A leader that cannot renew
//! within the lease's length stops acknowledging anything; one that stops cleanly gives the
//! lease up, so the next node takes it at once. Each renewal also writes the leader's time,
//! so the next leader's clock takes up no earlier (`Clock::take_up`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::connection::{Blocking, Failed, Work};
use super::{replication, OpenError};
use crate::clock::{machine_millis, Clock, DatabaseClock};
use crate::engine::Timestamp;
use crate::persist::tenure::Tenure;
use crate::persist::writer::LogWriter;
use crate::worker::{Backoff, Stop, Thread};

/// How long a lease lasts from its last renewal: a leader that vanishes is replaced after at
/// most this long.
pub const LEASE: Duration = Duration::from_secs(5);

/// How often the leader renews: several times a lease, so one slow renewal costs nothing.
const RENEW_EVERY: Duration = Duration::from_secs(1);

/// Longest a renewal may take before it counts as failed.
const RENEW_TIMEOUT: Duration = Duration::from_secs(2);

/// Who holds the lease, as the database says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub epoch: i64,
    pub node: String,
    pub url: String,
    /// Milliseconds until the lease ends (negative: lapsed).
    pub remaining_ms: i64,
}

/// What every write of a shard's log and snapshots checks in its own statement: that the
/// shard's lease is still in this epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fence {
    pub shard: i32,
    pub epoch: i64,
}

/// A lease taken: its epoch, and the time the cluster had reached.
#[derive(Clone, Copy, Debug)]
pub struct Taken {
    pub epoch: i64,
    /// The latest time a leader wrote into the lease (at each renewal): the next leader's
    /// clock starts no earlier.
    pub floor: Timestamp,
    /// The database's clock, read by the statement that took the lease.
    pub database: DatabaseClock,
}

/// Takes the lease of `shard` for `node` (serving at `url`) if it is free or lapsed: the lease
/// taken, or who holds it.
pub fn try_take(
    db: &mut Blocking,
    shard: i32,
    node: &str,
    url: &str,
) -> Result<Result<Taken, Holder>, Failed> {
    let (node, url) = (node.to_string(), url.to_string());
    db.run(
        super::connection::STARTUP_TIMEOUT,
        move |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                let lease_ms = LEASE.as_millis() as f64;
                let asked = machine_millis();
                let taken = client
                    .query_opt(
                        "UPDATE log_shards SET epoch = epoch + 1, node = $1, url = $2, \
                         expires = now() + $3 * interval '1 millisecond' \
                         WHERE shard = $4 AND expires <= now() \
                         RETURNING epoch, clock_ms, \
                         (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                        &[&node, &url, &lease_ms, &shard],
                    )
                    .await?;
                if let Some(row) = taken {
                    let answered = machine_millis();
                    let middle = asked + (answered - asked) / 2;
                    return Ok(Ok(Taken {
                        epoch: row.get(0),
                        floor: Timestamp(row.get::<_, i64>(1).max(0) as u64),
                        database: DatabaseClock {
                            ahead_ms: row.get::<_, i64>(2) - middle,
                        },
                    }));
                }
                let row = client
                    .query_one(
                        "SELECT epoch, node, url, \
                         (extract(epoch FROM expires - now()) * 1000)::bigint FROM log_shards \
                         WHERE shard = $1",
                        &[&shard],
                    )
                    .await?;
                Ok(Err(Holder {
                    epoch: row.get(0),
                    node: row.get(1),
                    url: row.get(2),
                    remaining_ms: row.get(3),
                }))
            })
        },
    )
}

/// Longest an announcement may take: it is no part of taking or holding a lease, which must
/// not wait behind it.
const ANNOUNCE_TIMEOUT: Duration = Duration::from_millis(500);

/// The nodes that announced themselves within a lease's length, by URL, in order, as this
/// node last read them, and when it did (`Nodes::announce`).
#[derive(Clone, Default)]
pub struct Nodes(Arc<std::sync::Mutex<(Option<Instant>, Vec<String>)>>);

impl Nodes {
    /// The live nodes as last read, if that was within a lease's length: a node that cannot
    /// reach the database knows of none.
    pub fn urls(&self) -> Vec<String> {
        match self.0.lock() {
            Ok(known) if known.0.is_some_and(|at| at.elapsed() < LEASE) => known.1.clone(),
            _ => Vec::new(),
        }
    }

    /// Says in `log_nodes` that `node` is alive and serves at `url`, forgets nodes not seen for
    /// an hour, and reads which nodes were seen within a lease's length. Every serving node
    /// announces itself each time it renews its lease or asks for one (about every second).
    /// Bounded by `ANNOUNCE_TIMEOUT`; one that fails leaves the list to age.
    pub fn announce(&self, db: &mut Blocking, node: &str, url: &str) {
        let (node, url) = (node.to_string(), url.to_string());
        let read = db.run(
            ANNOUNCE_TIMEOUT,
            move |client: &mut Client| -> Work<'_, _> {
                Box::pin(async move {
                    let lease_ms = LEASE.as_millis() as f64;
                    let rows = client
                        .query(
                            "WITH seen AS (INSERT INTO log_nodes (node, url, seen) \
                             VALUES ($1, $2, now()) ON CONFLICT (node) \
                             DO UPDATE SET url = excluded.url, seen = excluded.seen \
                             RETURNING url), \
                         gone AS (DELETE FROM log_nodes WHERE seen < now() - interval '1 hour') \
                         SELECT url FROM log_nodes \
                             WHERE node <> $1 AND seen > now() - $3 * interval '1 millisecond' \
                         UNION SELECT url FROM seen ORDER BY url",
                            &[&node, &url, &lease_ms],
                        )
                        .await?;
                    Ok(rows.iter().map(|row| row.get(0)).collect::<Vec<String>>())
                })
            },
        );
        if let (Ok(urls), Ok(mut known)) = (read, self.0.lock()) {
            *known = (Some(Instant::now()), urls);
        }
    }
}

/// How long to wait before asking for a lease `holder` holds again: until it would lapse, at
/// most a second.
pub fn retry_after(holder: &Holder) -> Duration {
    Duration::from_millis(holder.remaining_ms.clamp(10, 1000) as u64)
}

/// Takes the lease of `shard` for `node` (serving at `url`) once it is free or lapsed, waiting
/// for as long as another node holds it (unless `wait` is false: then that is an error);
/// returns the new lease and when it was asked for (the lease runs from no earlier than that).
pub fn acquire(
    db: &mut Blocking,
    shard: i32,
    node: &str,
    url: &str,
    wait: bool,
) -> Result<(Taken, Instant), OpenError> {
    let mut said: Option<String> = None;
    // The database not answering is counted; asked again each second all the same, as a lease
    // that lapsed should be taken soon.
    let mut unreachable = Backoff::new("lease", Duration::from_secs(1), Duration::from_secs(1));
    loop {
        let asked = Instant::now();
        let wait = match try_take(db, shard, node, url) {
            Ok(Ok(taken)) => return Ok((taken, asked)),
            Ok(Err(holder)) if !wait => {
                return Err(OpenError::Led {
                    url: holder.url,
                    epoch: holder.epoch,
                })
            }
            Ok(Err(holder)) => {
                let news = format!("{} {}", holder.epoch, holder.url);
                if said.as_ref() != Some(&news) {
                    tracing::info!(
                        leader = %holder.url,
                        epoch = holder.epoch,
                        "another node leads; waiting for its lease to lapse"
                    );
                    said = Some(news);
                }
                retry_after(&holder)
            }
            Err(failed) => {
                if said.as_ref() != Some(&failed.cause) {
                    tracing::warn!(cause = %failed.cause, "cannot reach the database to take the lease; trying again");
                    said = Some(failed.cause);
                }
                unreachable.failed()
            }
        };
        std::thread::sleep(wait);
    }
}

/// What a node's keeper keeps for every shard it holds: the clock, whose time each renewal
/// writes into the leases; the database's promise about acknowledged writes, read again at each
/// renewal (with the storage URL's hosts and whether it asks for a read-write one); and the
/// node's announcement.
pub struct Held {
    /// This node and its URL, announced after each renewal, and the live nodes read back
    /// (`None`: a state moved in or out, which serves no one).
    pub announced: Option<(String, String, Nodes)>,
    /// What a lease another node takes costs the node.
    pub leads: Leads,
    pub clock: Arc<dyn Clock>,
    pub replication: (replication::Shared, (usize, bool)),
}

/// Whether a node leads its shards together or each on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leads {
    /// Every shard of the database or none: a lease another node takes ends them all.
    Every,
    /// Its share of the shards: a lease another node takes ends that shard only, and the
    /// keeper renews the rest (`Keeper::taken_away` says which were taken).
    Each,
}

/// One shard's lease as a keeper holds it: its fence; its log, which stops acknowledging once
/// the lease is lost; its tenure, kept a margin inside the lease.
pub struct HeldShard {
    pub fence: Fence,
    pub log_writer: Arc<LogWriter>,
    pub tenure: Arc<Tenure>,
}

/// The shards a keeper renews, each with the time it was taken or last renewed no earlier
/// than, and whether it has stopped renewing (then it takes no more).
type Shards = Arc<std::sync::Mutex<(Vec<(HeldShard, Instant)>, bool)>>;

/// Renews the leases of every shard a node holds, in one statement each time, until told to
/// stop. If it cannot in time, no log of the node acknowledges anything more; if another node
/// took one of them, neither does any (`Leads::Every`: a node leads every shard of its
/// database or none) or that shard's (`Leads::Each`). A keeper dropped without
/// `release` (a server dropped without stopping) stops renewing, so the leases lapse and its
/// connection closes.
pub struct Keeper {
    shards: Shards,
    /// The keeper's connection: the renewal thread's, and a hand-off's between renewals, so a
    /// renewal that still names a shard handed off runs before its lease is given up. The
    /// thread takes it out when it ends, to drop it there: it owns a runtime, which must not
    /// be dropped inside another.
    db: Connection,
    /// Set before the thread is told to stop: give the leases up rather than let them lapse.
    give_up: Arc<AtomicBool>,
    thread: Thread<()>,
    /// Turns true once a lease is lost (taken by another node, or not renewed in time): of
    /// every lease with `Leads::Every`, of the last with `Leads::Each`.
    lost: tokio::sync::watch::Receiver<bool>,
    /// With `Leads::Each`, the shards another node took, in the order found.
    taken_away: tokio::sync::watch::Receiver<Vec<i32>>,
}

impl Keeper {
    /// Renews the lease of `first`, taken no earlier than `taken`, and those added later.
    pub fn start(
        db: Blocking,
        (first, taken): (HeldShard, Instant),
        held: Held,
    ) -> std::io::Result<Keeper> {
        first.tenure.hold(taken, LEASE);
        let shards: Shards = Arc::new(std::sync::Mutex::new((vec![(first, taken)], false)));
        let renewed = shards.clone();
        let db: Connection = Arc::new(std::sync::Mutex::new(Some(db)));
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
            let Some(mut db) = lock(&connection.0).take() else {
                return;
            };
            let shards = renewed.lock().unwrap_or_else(|p| p.into_inner());
            let fences = |taken: &[Fence]| -> Vec<Fence> {
                (shards.0.iter().map(|(s, _)| s.fence))
                    .filter(|fence| !taken.contains(fence))
                    .collect()
            };
            match ended {
                Ended::Told if giving_up.load(Ordering::SeqCst) => {
                    release_all(&mut db, &fences(&[]), held.clock.now())
                }
                Ended::Told => {}
                Ended::Lost(taken) => {
                    // Every log of the node has stopped acknowledging: the leases another
                    // node did not take are given up, so the next leader (this node again,
                    // perhaps) need not wait them out.
                    if !taken.is_empty() {
                        release_all(&mut db, &fences(&taken), held.clock.now());
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
        if let Some(db) = connection.as_mut() {
            release(db, handed.fence, now);
        }
        true
    }

    /// The shards whose leases the keeper renews, in the order taken.
    pub fn held(&self) -> Vec<i32> {
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        shards.0.iter().map(|(held, _)| held.fence.shard).collect()
    }

    /// The shards another node took from this keeper's (with `Leads::Each`), each ended and
    /// renewed no more, in the order found; it changes at each.
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

/// Gives the lease `fence` names up, so the next node takes it at once, with the time reached.
pub fn release(db: &mut Blocking, fence: Fence, now: Timestamp) {
    release_all(db, &[fence], now)
}

/// Gives the leases `fences` name up, in one statement.
fn release_all(db: &mut Blocking, fences: &[Fence], now: Timestamp) {
    let now = now.0 as i64;
    let shards: Vec<i32> = fences.iter().map(|f| f.shard).collect();
    let epochs: Vec<i64> = fences.iter().map(|f| f.epoch).collect();
    let released = db.run(RENEW_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
        Box::pin(async move {
            client
                .execute(
                    "WITH held AS MATERIALIZED (SELECT l.shard FROM log_shards l, \
                     unnest($1::integer[], $2::bigint[]) AS h(shard, epoch) \
                     WHERE l.shard = h.shard AND l.epoch = h.epoch \
                     ORDER BY l.shard FOR NO KEY UPDATE OF l) \
                     UPDATE log_shards SET expires = '-infinity', \
                     clock_ms = greatest(clock_ms, $3) \
                     FROM held WHERE log_shards.shard = held.shard",
                    &[&shards, &epochs, &now],
                )
                .await
        })
    });
    if let Err(failed) = released {
        tracing::warn!(cause = %failed, "the lease was not given up; it lapses by itself");
    }
}

/// Records in the rows of the shards whose lease the node at `url` holds (in the database
/// `storage` names) that this node's clock reached `at`: a manual clock moved on the leader is
/// where the next leader starts, even if this one dies before its next renewal writes it.
pub fn record_time(storage: &str, url: &str, at: Timestamp) -> std::io::Result<()> {
    let config = super::connection::config(storage).map_err(std::io::Error::other)?;
    let mut db = Blocking::new(config)?;
    let (url, at) = (url.to_string(), at.0 as i64);
    let recorded = db
        .run(RENEW_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                client
                    .execute(
                        "WITH held AS MATERIALIZED (SELECT shard FROM log_shards \
                         WHERE url = $1 AND expires > now() ORDER BY shard FOR NO KEY UPDATE) \
                         UPDATE log_shards SET clock_ms = greatest(clock_ms, $2) \
                         FROM held WHERE log_shards.shard = held.shard",
                        &[&url, &at],
                    )
                    .await
            })
        })
        .map_err(|failed| std::io::Error::other(failed.to_string()))?;
    if recorded == 0 {
        return Err(std::io::Error::other(
            "this node does not hold the lease in the database",
        ));
    }
    Ok(())
}

/// Renews, in one statement, the leases of every shard in `held` that is still in the epoch
/// named there, writing the leader's time `now` into each; answers the shards renewed (a
/// shard missing was taken by another node). Statements that lock several leases' rows (this,
/// giving them up, the node's shared commit) lock them in shard order, so that none waits
/// for another crosswise.
pub async fn renew_held(
    client: &Client,
    held: &[Fence],
    now: i64,
) -> Result<Vec<i32>, tokio_postgres::Error> {
    let lease_ms = LEASE.as_millis() as f64;
    let shards: Vec<i32> = held.iter().map(|f| f.shard).collect();
    let epochs: Vec<i64> = held.iter().map(|f| f.epoch).collect();
    let rows = client
        .query(
            "WITH held AS MATERIALIZED (SELECT l.shard FROM log_shards l, \
             unnest($1::integer[], $2::bigint[]) AS h(shard, epoch) \
             WHERE l.shard = h.shard AND l.epoch = h.epoch \
             ORDER BY l.shard FOR NO KEY UPDATE OF l) \
             UPDATE log_shards SET expires = now() + $3 * interval '1 millisecond', \
             clock_ms = greatest(clock_ms, $4) \
             FROM held WHERE log_shards.shard = held.shard \
             RETURNING log_shards.shard",
            &[&shards, &epochs, &lease_ms, &now],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Why the keeper stopped renewing.
enum Ended {
    /// Told to stop (`Keeper::release`, or the keeper dropped).
    Told,
    /// Every lease lost: those another node took (none when they could not be renewed in
    /// time; with `Leads::Each`, those taken by the renewal that took the last).
    Lost(Vec<Fence>),
}

/// A keeper's connection to the database, until its thread ends.
type Connection = Arc<std::sync::Mutex<Option<Blocking>>>;

/// Takes the connection out and drops it where this is dropped: on the keeper's thread, which
/// is outside any runtime, as the runtime the connection owns must be dropped.
struct DroppedHere(Connection);

impl Drop for DroppedHere {
    fn drop(&mut self) {
        drop(lock(&self.0).take());
    }
}

/// The keeper's connection, for one statement.
fn lock(db: &Connection) -> std::sync::MutexGuard<'_, Option<Blocking>> {
    db.lock().unwrap_or_else(|p| p.into_inner())
}

/// Renews until ordered to stop or until a lease is lost.
fn renew(
    connection: &Connection,
    (shards, take_away): (&Shards, &tokio::sync::watch::Sender<Vec<i32>>),
    held: &Held,
    stop: &Stop,
) -> Ended {
    let clock = &held.clock;
    let (promise, url) = (&held.replication.0, held.replication.1);
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
        // The connection first, then the shards: a shard handed off meanwhile is either left
        // out here or given up after this renewal.
        let mut guard = lock(connection);
        let Some(db) = guard.as_mut() else {
            return Ended::Told;
        };
        let fences: Vec<Fence> = held_shards().0.iter().map(|(s, _)| s.fence).collect();
        let asked = fences.clone();
        let renewed = db.run(RENEW_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                let renewed = renew_held(client, &asked, now).await?;
                // Read again each time: a reconnect may have found another server. What it
                // says is no part of the renewal, which has committed by now.
                let found = replication::read(client, url).await.ok();
                Ok((renewed, found))
            })
        });
        let renewed = renewed.map(|(renewed, found)| {
            if let Some(found) = found {
                promise.found(found);
            }
            renewed
        });
        let taken: Vec<Fence> = match &renewed {
            Ok(renewed) => (fences.iter())
                .filter(|f| !renewed.contains(&f.shard))
                .copied()
                .collect(),
            Err(_) => Vec::new(),
        };
        // Held since the oldest renewal of any shard: the first to lapse.
        let oldest =
            (held_shards().0.iter().map(|(_, since)| *since).min()).unwrap_or_else(Instant::now);
        match renewed {
            Ok(_) if taken.is_empty() || held.leads == Leads::Each => {
                if !taken.is_empty() {
                    let shards_taken: Vec<i32> = taken.iter().map(|f| f.shard).collect();
                    tracing::error!(
                        shards = ?shards_taken,
                        epochs = ?taken.iter().map(|f| f.epoch).collect::<Vec<_>>(),
                        "another node took these shards' leases: this node acknowledges nothing more in them and goes on leading the rest"
                    );
                    let left = end_taken(shards, &taken);
                    take_away.send_modify(|away| away.extend(shards_taken));
                    if left == 0 {
                        return Ended::Lost(taken);
                    }
                }
                retry.succeeded();
                wait = RENEW_EVERY;
                if failing {
                    tracing::info!("the leases are renewed again");
                    failing = false;
                }
                // Only those renewed: a shard added meanwhile keeps the time it was taken.
                for (shard, since) in held_shards().0.iter_mut() {
                    if fences.contains(&shard.fence) {
                        *since = started;
                        shard.tenure.hold(started, LEASE);
                    }
                }
                if let Some((node, own_url, nodes)) = &held.announced {
                    nodes.announce(db, node, own_url);
                }
            }
            Ok(_) => {
                tracing::error!(
                    shards = ?taken.iter().map(|f| f.shard).collect::<Vec<_>>(),
                    epochs = ?taken.iter().map(|f| f.epoch).collect::<Vec<_>>(),
                    "another node took the lease: this node acknowledges nothing more and steps down"
                );
                lose_all(shards);
                return Ended::Lost(taken);
            }
            Err(failed) if oldest.elapsed() >= LEASE => {
                tracing::error!(
                    cause = %failed,
                    "the lease could not be renewed in time: this node acknowledges nothing more, \
                     as another may lead now, and steps down"
                );
                lose_all(shards);
                return Ended::Lost(Vec::new());
            }
            Err(failed) => {
                wait = retry.failed();
                if !failing {
                    tracing::warn!(cause = %failed, "the lease was not renewed; trying again");
                    failing = true;
                }
            }
        }
    }
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
