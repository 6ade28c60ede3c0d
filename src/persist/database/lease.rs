//! Which node leads a shard: a lease in the database (the shard's row of `log_shards`) with an
//! epoch, taken and renewed on the database's clock. A node takes the lease only once it has lapsed, adding one to the
//! epoch; every write of the log checks the epoch in its own statement (`table_log`), so a node
//! that lost the lease can never write, even before it notices. A leader that cannot renew
//! within the lease's length stops acknowledging anything; one that stops cleanly gives the
//! lease up, so the next node takes it at once. Each renewal also writes the leader's time,
//! so the next leader's clock takes up no earlier (`Clock::take_up`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::connection::{Blocking, Failed, Work};
use super::OpenError;
use crate::clock::{machine_millis, DatabaseClock};
use crate::engine::Timestamp;
use crate::worker::Backoff;

/// How long a lease lasts from its last renewal: a leader that vanishes is replaced after at
/// most this long.
pub const LEASE: Duration = Duration::from_secs(5);

/// Longest a renewal may take before it counts as failed.
pub(super) const RENEW_TIMEOUT: Duration = Duration::from_secs(2);

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

/// The nodes that announced themselves within a lease's length, as this node last read them
/// (`Nodes::announce`).
#[derive(Clone, Default)]
pub struct Nodes(Arc<std::sync::Mutex<Known>>);

#[derive(Default)]
struct Known {
    /// When they were read.
    at: Option<Instant>,
    /// Their URLs, in order, each once.
    urls: Vec<String>,
    /// The names they announced themselves by.
    names: Vec<String>,
}

impl Nodes {
    /// The live nodes' URLs as last read, if that was within a lease's length: a node that
    /// cannot reach the database knows of none.
    pub fn urls(&self) -> Vec<String> {
        match self.0.lock() {
            Ok(known) if known.at.is_some_and(|at| at.elapsed() < LEASE) => known.urls.clone(),
            _ => Vec::new(),
        }
    }

    /// Whether `name` is one a live node announced itself by, as last read within a lease's
    /// length.
    pub fn is_live(&self, name: &str) -> bool {
        match self.0.lock() {
            Ok(known) if known.at.is_some_and(|at| at.elapsed() < LEASE) => {
                known.names.iter().any(|known| known == name)
            }
            _ => false,
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
                         SELECT node, url FROM log_nodes \
                             WHERE node <> $1 AND seen > now() - $3 * interval '1 millisecond' \
                         UNION SELECT $1, url FROM seen",
                            &[&node, &url, &lease_ms],
                        )
                        .await?;
                    let nodes = rows.iter().map(|row| (row.get(0), row.get(1)));
                    Ok(nodes.collect::<Vec<(String, String)>>())
                })
            },
        );
        if let (Ok(nodes), Ok(mut known)) = (read, self.0.lock()) {
            let (names, mut urls): (Vec<String>, Vec<String>) = nodes.into_iter().unzip();
            urls.sort();
            urls.dedup();
            *known = Known {
                at: Some(Instant::now()),
                urls,
                names,
            };
        }
    }
}

/// Longest a node stopping waits to take its announcement back: left to age past it.
const TAKE_BACK_WAIT: Duration = Duration::from_secs(2);

/// A generation's announcement in the home database: its name there, by which the home lists
/// it among the live nodes while it announces itself (`Nodes::announce`).
pub struct Announcement {
    pub(super) home: tokio_postgres::Config,
    pub(super) node: String,
}

impl Announcement {
    /// The name the generation announced itself by.
    pub fn name(&self) -> &str {
        &self.node
    }

    /// Takes the announcement back, as the generation that made it stops: the others' next
    /// readings leave it out, rather than after a lease's length, and a move of shards need
    /// not wait for it. A connection of its own, one statement, at most `TAKE_BACK_WAIT`; one
    /// that fails leaves the announcement to age.
    pub async fn take_back(self) {
        let mut session = super::connection::Session::new(self.home);
        let node = self.node;
        let forgetting = async {
            let client = session.connected().await.map_err(|failed| failed.cause)?;
            (remove_announcement(client, &node).await)
                .map_err(|error| super::connection::describe(&error))
        };
        let cause = match tokio::time::timeout(TAKE_BACK_WAIT, forgetting).await {
            Ok(Ok(_)) => return,
            Ok(Err(cause)) => cause,
            Err(_) => format!("no answer within {} s", TAKE_BACK_WAIT.as_secs()),
        };
        tracing::debug!(%cause, "this node's announcement is left to age");
    }
}

/// Removes `node`'s row from the live nodes: the one statement by which a node stopping, or a
/// survey that has seen it go, takes an announcement back.
pub(super) async fn remove_announcement(
    client: &Client,
    node: &str,
) -> Result<u64, tokio_postgres::Error> {
    (client.execute("DELETE FROM log_nodes WHERE node = $1", &[&node])).await
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

/// Gives the lease `fence` names up, so the next node takes it at once, with the time reached.
pub fn release(db: &mut Blocking, fence: Fence, now: Timestamp) {
    release_all(db, &[fence], now)
}

/// Gives the leases `fences` name up, in one statement.
pub(super) fn release_all(db: &mut Blocking, fences: &[Fence], now: Timestamp) {
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

/// Records in the rows of the shards whose lease the node at `url` holds (in each database
/// `urls` names) that this node's clock reached `at`: a manual clock moved on the leader is
/// where the next leader starts, even if this one dies before its next renewal writes it.
/// Every database is asked, whichever fail.
pub fn record_time(urls: &[String], url: &str, at: Timestamp) -> std::io::Result<()> {
    let mut recorded = 0;
    let mut failed = Vec::new();
    for storage in urls {
        match record_time_in(storage, url, at) {
            Ok(count) => recorded += count,
            Err(error) => failed.push(error.to_string()),
        }
    }
    if !failed.is_empty() {
        return Err(std::io::Error::other(failed.join("; ")));
    }
    if recorded == 0 {
        return Err(std::io::Error::other(
            "this node holds no lease in any database",
        ));
    }
    Ok(())
}

/// `record_time` in the database `storage` names: answers how many leases it recorded it in.
fn record_time_in(storage: &str, url: &str, at: Timestamp) -> std::io::Result<u64> {
    let config = super::connection::config(storage).map_err(std::io::Error::other)?;
    let mut db = Blocking::new(config)?;
    let (url, at) = (url.to_string(), at.0 as i64);
    db.run(RENEW_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
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
    .map_err(|failed| std::io::Error::other(failed.to_string()))
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
             WHERE l.shard = h.shard AND l.epoch = h.epoch AND l.expires <> '-infinity' \
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
