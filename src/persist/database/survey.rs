//! What a node leading its share of a database's shards watches: which nodes are alive and
//! which holds each shard's lease. A thread of its own announces this node and reads both once
//! a second, on connections of its own (to the home database, and to each other database of
//! the shard map for its shards' leases), so the node knows where each shard's requests go and
//! when its share has moved, whether it leads any shard or none.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;

use super::connection::{Blocking, Work};
use super::lease::{Holder, Nodes};
use super::shard_map::ShardMap;
use super::site_worker::SiteWorker;
use crate::worker::Thread;
use std::sync::mpsc::{Receiver, RecvTimeoutError};

/// How the names this module announces nodes by begin: the nodes that lead their share.
const NAMED: &str = "survey ";

/// A range's database that disagrees with the map is said once per interval, not each reading.
static WARNINGS: std::sync::LazyLock<crate::quiet_log::QuietLog> =
    std::sync::LazyLock::new(Default::default);

/// How often the nodes and leases are read.
const EVERY: Duration = Duration::from_secs(1);

/// How often the nodes and leases are tried before they were first read.
const FIRST_TRIES: Duration = Duration::from_millis(100);

/// Longest a reading may take.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// One reading: the live nodes' URLs, in order, and each shard's holder (shard n's at index n),
/// `None` for a lease that is free (given up, or lapsed) or whose database did not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub nodes: Vec<String>,
    pub holders: Vec<Option<Holder>>,
    /// The shards whose database (of the shard map, not the home) did not answer: their
    /// holders are not known, and `holders` has `None` for them.
    pub unread: Vec<u32>,
    /// The names the live nodes announced themselves by: random, kept in the database only,
    /// so a request naming one comes from a node of the database (`http::parcels`).
    pub names: Vec<String>,
}

impl Seen {
    /// Whether `shard`'s lease was read free (given up, or lapsed).
    pub fn free(&self, shard: u32) -> bool {
        let none = (self.holders.get(shard as usize)).is_some_and(Option::is_none);
        none && !self.unread.contains(&shard)
    }

    /// Each shard's leader's URL, shard n's at index n (empty while its lease is free).
    pub fn leaders(&self) -> Vec<String> {
        (self.holders.iter())
            .map(|holder| holder.as_ref().map(|h| h.url.clone()).unwrap_or_default())
            .collect()
    }
}

/// The thread reading, and what it read last.
pub struct Survey {
    thread: Thread<()>,
    seen: tokio::sync::watch::Receiver<Option<Arc<Seen>>>,
    /// The name this node announces itself by here.
    name: String,
}

impl Survey {
    /// Announces this node at `url` in the home database of `map` and reads the nodes there
    /// and the leases in each of its databases once a second; stops when dropped.
    pub fn start(map: ShardMap, url: String) -> std::io::Result<Survey> {
        let configs = (map.urls())
            .map(super::connection::config)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let (tell, seen) = tokio::sync::watch::channel(None);
        let name = format!("{NAMED}{}", uuid::Uuid::new_v4());
        let node = name.clone();
        let thread = Thread::start("survey", move |stop| {
            // The home's made and dropped on this thread, the others' on threads of their
            // own: each owns a runtime.
            let mut configs = configs.into_iter();
            let home = configs.next().map(Blocking::new);
            let placed = (configs.map(Blocking::new))
                .map(|db| db.and_then(|db| SiteWorker::start("survey-database", db)))
                .collect::<std::io::Result<Vec<_>>>();
            let (mut home, placed) = match (home, placed) {
                (Some(Ok(home)), Ok(placed)) => (home, placed),
                (home, placed) => {
                    let error = home.and_then(Result::err).or(placed.err());
                    tracing::error!(?error, "cannot watch the database's nodes and leases");
                    return;
                }
            };
            let mut under_way: Vec<Option<Receiver<Rows>>> = placed.iter().map(|_| None).collect();
            let nodes = Nodes::default();
            let mut read_once = false;
            loop {
                nodes.announce(&mut home, &node, &url);
                let mut pause = EVERY;
                let read = holders((&mut home, &placed), &mut under_way, &map);
                match read.and_then(|holders| Ok((holders, live(&mut home)?))) {
                    // Each reading told, changed or not: a node acts on what holds for two.
                    Ok(((holders, unread), (nodes, names))) => {
                        let read = Seen {
                            nodes,
                            holders,
                            unread,
                            names,
                        };
                        tell.send_replace(Some(Arc::new(read)));
                        read_once = true;
                    }
                    Err(cause) => {
                        tracing::debug!(%cause, "the leases could not be read");
                        // A database used for the first time has its tables a moment later.
                        if !read_once {
                            pause = FIRST_TRIES;
                        }
                    }
                }
                if stop.wait(pause) {
                    // Gone at once from the others' readings: they need not wait a lease.
                    forget(&mut home, &node);
                    return;
                }
            }
        })?;
        Ok(Survey { thread, seen, name })
    }

    /// Stops reading and takes this node's announcement back, waiting until it has (a few
    /// seconds at most, a statement's bound): blocks. Dropped without it, the survey stops at
    /// its next look, in the background.
    pub fn stop(&self) {
        self.thread.stop();
    }

    /// The name this node announces itself by (`Seen::names`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What was read last (`None` before the first reading), and each reading that differs.
    pub fn seen(&self) -> tokio::sync::watch::Receiver<Option<Arc<Seen>>> {
        self.seen.clone()
    }
}

/// Every shard's lease holder, shard n's at index n, from every database of `map` (each keeps
/// its shards' leases, on its own clock): the home's read here, the others' by their workers,
/// all at once; `None` where the lease is free, or kept in a database other than the home that
/// did not answer within a reading's time (its shards have no leader to reach meanwhile),
/// which are named apart. A database whose reading is still under way is not asked again.
type Holders = (Vec<Option<Holder>>, Vec<u32>);

fn holders(
    (home, placed): (&mut Blocking, &[SiteWorker]),
    under_way: &mut [Option<Receiver<Rows>>],
    map: &ShardMap,
) -> Result<Holders, String> {
    for (waiting, worker) in under_way.iter_mut().zip(placed) {
        if waiting.is_none() {
            *waiting = Some(worker.ask(read_leases));
        }
    }
    let mut by_site: Vec<(usize, Rows)> = vec![(0, Ok(read_leases(home)?))];
    let deadline = std::time::Instant::now() + READ_TIMEOUT + ANSWER_MARGIN;
    for (at, waiting) in under_way.iter_mut().enumerate() {
        let site = at + 1;
        let answer = match waiting {
            Some(receiver) => {
                receiver.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            }
            None => continue,
        };
        let rows = match answer {
            Ok(rows) => {
                *waiting = None;
                rows
            }
            Err(RecvTimeoutError::Timeout) => Err("no answer within a reading's time".into()),
            Err(RecvTimeoutError::Disconnected) => {
                *waiting = None;
                Err("the reading failed".into())
            }
        };
        by_site.push((site, rows));
    }
    let mut read: Vec<Option<Option<Holder>>> = vec![None; map.shards() as usize];
    let mut unread = Vec::new();
    for (site, rows) in by_site {
        let rows = match rows {
            Ok(rows) => rows,
            Err(cause) => {
                tracing::debug!(%cause, database = %map.site_name(site), "the leases could not be read");
                for shard in (0..map.shards()).filter(|&shard| map.site_of(shard) == site) {
                    read[shard as usize] = Some(None);
                    unread.push(shard);
                }
                continue;
            }
        };
        // A database of the shard map not made yet (it did not answer when the nodes first
        // started) holds no lease: its shards are free, for their nodes to check and take.
        if rows.is_empty() && site > 0 {
            for shard in (0..map.shards()).filter(|&shard| map.site_of(shard) == site) {
                read[shard as usize] = Some(None);
            }
        }
        // A shard kept elsewhere, or twice: the database disagrees with the map, and no
        // reading of it is to be acted on. A range's database is left unread (another
        // database than the map names, come to answer before a node checked it: its shards
        // are led by none meanwhile); the home's, checked at every start, fails the reading.
        let mut kept = std::collections::HashSet::new();
        let disagrees = (rows.iter()).find(|(shard, _)| {
            let placed = u32::try_from(*shard).is_ok_and(|s| s < map.shards());
            !(placed && map.site_of(*shard as u32) == site && kept.insert(*shard))
        });
        // Rows for part of the range only: another database's, kept for a smaller range.
        let here = || (0..map.shards()).filter(move |&shard| map.site_of(shard) == site);
        let missing = (site > 0 && !rows.is_empty())
            .then(|| here().find(|&shard| !kept.contains(&(shard as i32))))
            .flatten();
        let disagrees = (disagrees.map(|(shard, _)| *shard)).or(missing.map(|shard| shard as i32));
        if let Some(shard) = disagrees {
            let cause =
                format!("the leases of shard {shard} are not kept where the map places them");
            if site == 0 {
                return Err(cause);
            }
            let database = map.site_name(site);
            if let Some(held_back) = WARNINGS.admit(&database, std::time::Instant::now()) {
                tracing::warn!(%database, %cause, held_back, "not the database the shard map names? its shards are led by no node until it is");
            }
            for shard in here() {
                read[shard as usize] = Some(None);
                unread.push(shard);
            }
            continue;
        }
        for (shard, holder) in rows {
            read[shard as usize] = Some(holder);
        }
    }
    let holders = (read.into_iter().enumerate())
        .map(|(shard, holder)| holder.ok_or_else(|| format!("the leases skip shard {shard}")))
        .collect::<Result<_, _>>()?;
    Ok((holders, unread))
}

/// One database's leases: each shard kept there with its holder (`None` while free).
type Rows = Result<Vec<(i32, Option<Holder>)>, String>;

/// How much longer than a reading's own bound a database's answer is waited for.
const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// PostgreSQL's SQLSTATE for a table that does not exist.
const UNDEFINED_TABLE: &str = "42P01";

/// Reads the leases of the database `db` is connected to: none where it has no leases table.
fn read_leases(db: &mut Blocking) -> Rows {
    let rows = db.run(READ_TIMEOUT, |client: &mut Client| -> Work<'_, _> {
        Box::pin(async move {
            client
                .query(
                    "SELECT shard, epoch, node, url, \
                         (extract(epoch FROM expires - now()) * 1000)::bigint \
                         FROM log_shards WHERE expires > now() \
                         UNION ALL SELECT shard, epoch, node, url, 0::bigint \
                         FROM log_shards WHERE expires <= now()",
                    &[],
                )
                .await
        })
    });
    let rows = match rows {
        Ok(rows) => rows,
        // No leases table: a database of the shard map not made yet (none is read so).
        Err(failed) if failed.code.as_deref() == Some(UNDEFINED_TABLE) => Vec::new(),
        Err(failed) => return Err(failed.cause),
    };
    Ok((rows.iter())
        .map(|row| {
            let (shard, remaining_ms): (i32, i64) = (row.get(0), row.get(4));
            let holder = (remaining_ms > 0).then(|| Holder {
                epoch: row.get(1),
                node: row.get(2),
                url: row.get(3),
                remaining_ms,
            });
            (shard, holder)
        })
        .collect())
}

/// The nodes seen within a lease's length: the URLs of those that lead their share of the
/// shards (that announce themselves here), in order, and the names of all.
fn live(db: &mut Blocking) -> Result<(Vec<String>, Vec<String>), String> {
    let lease_ms = super::lease::LEASE.as_millis() as f64;
    let rows = db
        .run(READ_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                client
                    .query(
                        "SELECT node, url FROM log_nodes \
                         WHERE seen > now() - $1 * interval '1 millisecond' ORDER BY node",
                        &[&lease_ms],
                    )
                    .await
            })
        })
        .map_err(|failed| failed.cause)?;
    let names: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    let mut urls: Vec<String> = (rows.iter())
        .filter(|row| row.get::<_, &str>(0).starts_with(NAMED))
        .map(|row| row.get(1))
        .collect();
    urls.sort();
    urls.dedup();
    Ok((urls, names))
}

/// Takes this node's announcement back.
fn forget(db: &mut Blocking, node: &str) {
    let node = node.to_string();
    let forgotten = db.run(READ_TIMEOUT, move |client: &mut Client| -> Work<'_, _> {
        Box::pin(async move { super::lease::remove_announcement(client, &node).await })
    });
    if let Err(failed) = forgotten {
        tracing::debug!(cause = %failed.cause, "this node's announcement is left to age");
    }
}
