//! What the database promises about a write it acknowledged. A commit survives a failover of
//! the database to a replica only if the replica had it before the commit returned: with
//! `synchronous_commit` waiting for a standby (`on`, `remote_write` or `remote_apply`) and a
//! synchronous standby named (`synchronous_standby_names`). The leader reads both when it takes
//! the lease and at every renewal after, and says plainly when an acknowledged write could be
//! lost; `--require-synchronous-replication` refuses to lead without the promise.

use std::sync::{Arc, Mutex};

use tokio_postgres::Client;

/// What the leader found, as `GET /_orderly/cluster` and `/metrics` show it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Promise {
    /// An acknowledged write survives a failover of the database.
    pub synchronous: bool,
    /// What was read and what it means.
    pub detail: String,
}

/// The settings a session sees, read in one statement.
pub const READ: &str = "SELECT current_setting('synchronous_commit'), \
     current_setting('synchronous_standby_names'), pg_is_in_recovery()";

/// Judges what was read. `hosts`: how many the storage URL names; `read_write`: whether it
/// asks for a read-write host (`target_session_attrs`).
pub fn judge(
    synchronous_commit: &str,
    standby_names: &str,
    in_recovery: bool,
    (hosts, read_write): (usize, bool),
) -> Promise {
    let (synchronous, mut detail) = if in_recovery {
        (
            false,
            "the database is a replica in recovery: it takes no writes".to_string(),
        )
    } else if matches!(synchronous_commit, "off" | "local") {
        (
            false,
            format!(
                "synchronous_commit is {synchronous_commit}: a write is acknowledged before any \
                 standby has it, so a failover of the database can lose it"
            ),
        )
    } else if standby_names.trim().is_empty() {
        (
            false,
            "no synchronous standby (synchronous_standby_names is empty): an acknowledged \
             write survives a crash of the database server, but a failover to a replica can \
             lose it"
                .to_string(),
        )
    } else {
        (
            true,
            format!(
                "synchronous_commit is {synchronous_commit} and synchronous_standby_names is \
                 '{standby_names}': an acknowledged write is on a standby too"
            ),
        )
    };
    if hosts > 1 && !read_write {
        detail.push_str(
            "; the storage URL names several hosts without target_session_attrs=read-write, so \
             a connection may land on a replica",
        );
    }
    Promise {
        synchronous: synchronous && (hosts <= 1 || read_write),
        detail,
    }
}

/// The promise last read of each database a node leads shards in (its site in the shard map),
/// shared by the lease keeper (which reads them) and whoever shows them.
#[derive(Default)]
pub struct Watch(Mutex<Vec<Option<(String, Promise)>>>);

impl Watch {
    /// The weakest promise known: a database that could lose an acknowledged write, named
    /// when the node's shards are kept in several, else the first database's.
    pub fn get(&self) -> Option<Promise> {
        self.among(|_| true)
    }

    /// As `get`, over the databases (sites) `led` says the node still leads shards in: one it
    /// handed every shard of off no longer speaks for it, though its reading is kept.
    pub fn among(&self, led: impl Fn(usize) -> bool) -> Option<Promise> {
        let known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let these = || {
            (known.iter().enumerate())
                .filter(|(site, _)| led(*site))
                .filter_map(|(_, known)| known.as_ref())
        };
        let several = these().count() > 1;
        let weakest = these()
            .find(|(_, p)| !p.synchronous)
            .or_else(|| these().next())?;
        let (site, promise) = weakest;
        Some(match several && !promise.synchronous {
            true => Promise {
                synchronous: false,
                detail: format!("{site}: {}", promise.detail),
            },
            false => promise.clone(),
        })
    }

    /// Keeps `found` for the database `site` (its index in the shard map, and its name);
    /// says it when it differs from what was known.
    pub fn found(&self, (site, name): (usize, &str), found: Promise) {
        let mut known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() <= site {
            known.resize(site + 1, None);
        }
        if known[site].as_ref().map(|(_, p)| p) == Some(&found) {
            return;
        }
        if found.synchronous {
            tracing::info!(database = %name, detail = %found.detail, "acknowledged writes survive a database failover");
        } else {
            tracing::warn!(database = %name, detail = %found.detail, "an acknowledged write could be lost by a database failover");
        }
        known[site] = Some((name.to_string(), found));
    }
}

/// Reads the settings on `client` and judges them.
pub async fn read(client: &Client, url: (usize, bool)) -> Result<Promise, tokio_postgres::Error> {
    let row = client.query_one(READ, &[]).await?;
    let (commit, names, recovery): (String, String, bool) = (row.get(0), row.get(1), row.get(2));
    Ok(judge(&commit, &names, recovery, url))
}

/// How many hosts `config` names, and whether it asks for a read-write one.
pub fn of_url(config: &tokio_postgres::Config) -> (usize, bool) {
    use tokio_postgres::config::TargetSessionAttrs;
    let read_write = config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite;
    (config.get_hosts().len(), read_write)
}

pub type Shared = Arc<Watch>;

/// How a database of the shard map is read: its URL's hosts and whether it asks for a
/// read-write one (`of_url`), and its name in messages.
pub type Reading = ((usize, bool), String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_named_synchronous_standby_with_waiting_commits_is_a_promise() {
        let one = (1, false);
        assert!(judge("on", "FIRST 1 (s1)", false, one).synchronous);
        assert!(judge("remote_apply", "s1", false, one).synchronous);
        assert!(!judge("on", "", false, one).synchronous);
        assert!(!judge("local", "s1", false, one).synchronous);
        assert!(!judge("off", "s1", false, one).synchronous);
        assert!(!judge("on", "s1", true, one).synchronous);
        let several = judge("on", "s1", false, (2, false));
        assert!(!several.synchronous);
        assert!(
            several.detail.contains("target_session_attrs"),
            "{}",
            several.detail
        );
        assert!(judge("on", "s1", false, (2, true)).synchronous);
    }

    #[test]
    fn a_node_on_several_databases_shows_the_weakest_promise_and_names_its_database() {
        let watch = Watch::default();
        assert_eq!(watch.get(), None);
        let home = (
            "the --storage database",
            judge("on", "s1", false, (1, false)),
        );
        watch.found((0, home.0), home.1.clone());
        assert_eq!(watch.get(), Some(home.1.clone()));
        let other = judge("on", "", false, (1, false));
        watch.found((2, "the database of shards 16-31"), other.clone());
        let weakest = watch.get().unwrap();
        assert!(!weakest.synchronous);
        assert_eq!(
            weakest.detail,
            format!("the database of shards 16-31: {}", other.detail)
        );
        // Read only among the databases the node still leads shards in: the other's weaker
        // promise no longer counts once its shards are handed off, nor its name.
        assert_eq!(watch.among(|site| site == 0), Some(home.1.clone()));
        assert_eq!(watch.among(|site| site == 2), Some(other.clone()));
        assert_eq!(watch.among(|_| false), None);
        watch.found((2, "the database of shards 16-31"), home.1.clone());
        assert_eq!(watch.get(), Some(home.1));
    }
}
