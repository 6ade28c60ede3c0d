//! What a node leading its share of a database's shards watches: which nodes are alive and
//! which holds each shard's lease. A thread of its own announces this node and reads both once
//! a second, on a connection of its own, so the node knows where each shard's requests go and
//! when its share has moved, whether it leads any shard or none.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;

use super::connection::{Blocking, Work};
use super::lease::{Holder, Nodes};
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
/// `None` for a lease that is free (given up, or lapsed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub nodes: Vec<String>,
    pub holders: Vec<Option<Holder>>,
    /// The names the live nodes announced themselves by: random, kept in the database only,
    /// so a request naming one comes from a node of the database (`http::parcels`).
    pub names: Vec<String>,
}

impl Seen {
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
    /// Announces this node at `url` and reads the database at `storage` once a second; stops
    /// when dropped.
    pub fn start(storage: &str, url: String) -> std::io::Result<Survey> {
        let config = super::connection::config(storage)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let (tell, seen) = tokio::sync::watch::channel(None);
        let name = format!("{NAMED}{}", uuid::Uuid::new_v4());
        let node = name.clone();
        let thread = Thread::start("survey", move |stop| {
            // Made and dropped on this thread: it owns a runtime.
            let mut db = match Blocking::new(config) {
                Ok(db) => db,
                Err(error) => {
                    tracing::error!(%error, "cannot watch the database's nodes and leases");
                    return;
                }
            };
            let nodes = Nodes::default();
            let mut read_once = false;
            loop {
                nodes.announce(&mut db, &node, &url);
                let mut pause = EVERY;
                match holders(&mut db).and_then(|holders| Ok((holders, live(&mut db)?))) {
                    // Each reading told, changed or not: a node acts on what holds for two.
                    Ok((holders, (nodes, names))) => {
                        let read = Seen {
                            nodes,
                            holders,
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
                    forget(&mut db, &node);
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

/// Every shard's lease holder, shard n's at index n; `None` where the lease is free.
fn holders(db: &mut Blocking) -> Result<Vec<Option<Holder>>, String> {
    let rows = db
        .run(READ_TIMEOUT, |client: &mut Client| -> Work<'_, _> {
            Box::pin(async move {
                client
                    .query(
                        "SELECT shard, epoch, node, url, \
                         (extract(epoch FROM expires - now()) * 1000)::bigint \
                         FROM log_shards WHERE expires > now() \
                         UNION ALL SELECT shard, epoch, node, url, 0::bigint \
                         FROM log_shards WHERE expires <= now() ORDER BY 1",
                        &[],
                    )
                    .await
            })
        })
        .map_err(|failed| failed.cause)?;
    let mut holders = Vec::with_capacity(rows.len());
    for row in rows {
        let shard: i32 = row.get(0);
        if shard as usize != holders.len() {
            return Err(format!("the leases skip shard {}", holders.len()));
        }
        let remaining_ms: i64 = row.get(4);
        holders.push((remaining_ms > 0).then(|| Holder {
            epoch: row.get(1),
            node: row.get(2),
            url: row.get(3),
            remaining_ms,
        }));
    }
    Ok(holders)
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
