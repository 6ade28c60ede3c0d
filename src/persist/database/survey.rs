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
use crate::worker::Thread;

/// How the names this module announces nodes by begin: the nodes that lead their share.
const NAMED: &str = "survey ";

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
    _thread: Thread<()>,
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
            // Made and dropped on this thread: each owns a runtime.
            let dbs = configs.into_iter().map(Blocking::new);
            let mut dbs = match dbs.collect::<std::io::Result<Vec<_>>>() {
                Ok(dbs) => dbs,
                Err(error) => {
                    tracing::error!(%error, "cannot watch the database's nodes and leases");
                    return;
                }
            };
            let nodes = Nodes::default();
            let mut read_once = false;
            loop {
                nodes.announce(&mut dbs[0], &node, &url);
                let mut pause = EVERY;
                let read = holders(&mut dbs, &map);
                match read.and_then(|holders| Ok((holders, live(&mut dbs[0])?))) {
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
                    forget(&mut dbs[0], &node);
                    return;
                }
            }
        })?;
        Ok(Survey {
            _thread: thread,
            seen,
            name,
        })
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
/// its shards' leases, on its own clock); `None` where the lease is free, or kept in a database
/// other than the home that did not answer (its shards have no leader to reach meanwhile),
/// which are named apart.
type Holders = (Vec<Option<Holder>>, Vec<u32>);

fn holders(dbs: &mut [Blocking], map: &ShardMap) -> Result<Holders, String> {
    let mut read: Vec<Option<Option<Holder>>> = vec![None; map.shards() as usize];
    let mut unread = Vec::new();
    for (site, db) in dbs.iter_mut().enumerate() {
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
            Err(failed) if site == 0 => return Err(failed.cause),
            Err(failed) => {
                tracing::debug!(cause = %failed.cause, database = %map.site_name(site), "the leases could not be read");
                for shard in (0..map.shards()).filter(|&shard| map.site_of(shard) == site) {
                    read[shard as usize] = Some(None);
                    unread.push(shard);
                }
                continue;
            }
        };
        for row in rows {
            let (shard, remaining_ms): (i32, i64) = (row.get(0), row.get(4));
            let holder = (remaining_ms > 0).then(|| Holder {
                epoch: row.get(1),
                node: row.get(2),
                url: row.get(3),
                remaining_ms,
            });
            // A shard kept elsewhere, or twice: the databases disagree with the map, and no
            // reading of them is to be acted on.
            match read.get_mut(shard as usize) {
                Some(slot @ None) if map.site_of(shard as u32) == site => *slot = Some(holder),
                _ => {
                    return Err(format!(
                        "the leases of shard {shard} are kept where the map does not place them"
                    ))
                }
            }
        }
    }
    let holders = (read.into_iter().enumerate())
        .map(|(shard, holder)| holder.ok_or_else(|| format!("the leases skip shard {shard}")))
        .collect::<Result<_, _>>()?;
    Ok((holders, unread))
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
        Box::pin(async move {
            (client.execute("DELETE FROM log_nodes WHERE node = $1", &[&node])).await
        })
    });
    if let Err(failed) = forgotten {
        tracing::debug!(cause = %failed.cause, "this node's announcement is left to age");
    }
}
