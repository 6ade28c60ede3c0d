//! The engine's log and snapshots in PostgreSQL (`--storage URL`): the same
//! engine and the same log records as with a data directory, kept by a database that provides
//! durability, replication and the arbiter of which node leads.
//!
//! - `schema`: the tables, their version, and the region and account the data belongs to.
//! - `lease`: one leader at a time, fenced by an epoch; taking, renewing and giving up the lease.
//! - `keeper`: the thread that renews a node's leases in every database, and gives them up.
//! - `table_log`: the log writer's batches as rows, each insert checking the epoch.
//! - `table_insert`: a write cut into rows, and the statements that insert them.
//! - `shared_commit`: one commit for the writes of every shard a node leads.
//! - `snapshots`: snapshots in chunks, kept by a transaction that drops the log they cover.
//! - `recovery`: the snapshot and the batches after it, into a fresh engine.
//! - `follow`: a standby applying the batches as they are written, so a takeover reads the
//!   tail only.
//! - `survey`: the live nodes and every shard's lease holder, read once a second by a node that
//!   leads its share of the shards.
//! - `shard_map`, `sites`: which database keeps each shard's log (the home, `--storage`,
//!   unless `--shard-database` places a range in another), each checked at start.
//! - `range_move`: a range of shards moved between databases with every node stopped
//!   (`--move-shards`): the range as held (`range_held`), its rows copied (`range_copy`),
//!   the home's records changed (`range_record`), split or joined in place
//!   (`range_in_place`); `transfer`: a whole state moved between a data directory and a
//!   database (`--import-from`, `--export-to`).
//! - `connection`: the blocking, time-bounded connection the threads above use.
//!
//! A node that finds the lease held waits until it lapses (another node's crash) or is given up
//! (a clean stop), then recovers everything from the database and leads.

mod connection;
pub mod follow;
pub mod keeper;
pub mod lease;
mod open_error;
pub mod placement;
mod range_copy;
mod range_held;
pub mod range_in_place;
mod range_lock;
pub mod range_move;
mod range_record;
mod range_rows;
mod recovery;
pub mod replication;
mod schema;
pub mod sessions;
mod settings;
pub mod shard_map;
mod shared_commit;
mod site_worker;
mod sites;
mod snapshots;
pub mod survey;
mod table_insert;
mod table_log;
pub mod test_database;
pub mod transfer;

use std::sync::Arc;
use std::time::Duration;

use super::writer::{FsyncMode, LogWriter};
use super::{RecoveryError, RecoveryReport};
use crate::engine::Engine;
use connection::STARTUP_TIMEOUT;
pub use keeper::Keeper;
pub use open_error::OpenError;
pub use settings::Settings;
pub use snapshots::DatabaseSnapshots;
use tokio::sync::Notify;

/// The log in the database, led by this node: the log the engine writes to, the lease that
/// lets it, and where its snapshots go.
pub struct DatabaseLog {
    /// The shard whose log this is, and the epoch of its lease.
    pub shard: u32,
    pub epoch: i64,
    pub log_writer: Arc<LogWriter>,
    /// The node's keeper of its leases, this shard's among them.
    pub lease: Arc<Keeper>,
    pub snapshots: DatabaseSnapshots,
    pub live_at_snapshot: u64,
    pub report: RecoveryReport,
    /// This node's clock minus the database's, as read when it took the lease; `None` when an
    /// earlier shard's lease took up the cluster's time.
    pub clock_skew_ms: Option<i64>,
}

/// Takes the lease (waiting while another node holds it), recovers `engine` (which must be
/// fresh) from the database and starts the log, so the engine's later changes are logged.
/// For moving a state in or out (`transfer`): nodes that serve lead through `ReadyDatabase`.
pub fn open<W: Default>(
    settings: &Settings,
    engine: &mut Engine<W>,
) -> Result<DatabaseLog, OpenError> {
    if settings.shards != 1 {
        return Err(OpenError::Database(
            "moving a state into or out of a database cut into shards is not built yet".into(),
        ));
    }
    let mut prepared = ReadyDatabase::new(settings, engine)?;
    let (taken, asked_at) = lease::acquire(
        &mut prepared.db,
        prepared.shard,
        &prepared.node,
        &settings.advertise_url,
        settings.wait_for_lease,
    )?;
    prepared.asked_at = asked_at;
    // Moving a state in or out keeps no time of its own: a clock at zero leaves the time the
    // last leader wrote into the lease as it was.
    let clock = Arc::new(crate::clock::ManualClock::new(crate::engine::Timestamp(0)));
    prepared.lead(engine, taken, follow::Stopped::Untouched, (clock, None))
}

/// A database made ready for this node's engine, before it leads: the tables checked, a
/// connection, and the log the engine was given (not writing yet).
pub struct ReadyDatabase {
    /// The shard's database.
    config: tokio_postgres::Config,
    db: connection::Blocking,
    /// Every database of the shard map, and the shard's (its site).
    sites: Arc<sites::Sites>,
    site: usize,
    /// The shard whose log this is.
    shard: i32,
    /// The URL this node announces itself at (`--advertise-url`).
    advertise_url: String,
    /// A node that serves (announced to the others), not a state moved in or out.
    serving: bool,
    /// The live nodes, as this node last read them while asking for or renewing its lease.
    pub nodes: lease::Nodes,
    node: String,
    pub log_writer: Arc<LogWriter>,
    /// How long this node may act as the leader: begun when it leads, kept by the lease.
    pub tenure: Arc<crate::persist::tenure::Tenure>,
    /// When the lease was last asked for: one taken then runs from no earlier.
    asked_at: std::time::Instant,
    batch_wait: Duration,
    inserts: usize,
    /// What the database promises about an acknowledged write, once this node leads.
    pub replication: replication::Shared,
    require_synchronous_replication: bool,
    /// `Settings::shards_alone`.
    shards_alone: bool,
}

/// Makes the database ready for another shard's log of the same node later, as
/// `ReadyDatabase::for_shard` does, holding no connection meanwhile (a node taking a shard
/// while it serves).
#[derive(Clone)]
pub struct ShardOpener {
    sites: Arc<sites::Sites>,
    advertise_url: String,
    serving: bool,
    nodes: lease::Nodes,
    node: String,
    batch_wait: Duration,
    inserts: usize,
    replication: replication::Shared,
    require_synchronous_replication: bool,
    shards_alone: bool,
}

impl ShardOpener {
    /// Whether the database keeping `shard` was found, checked late, to be another than the
    /// shard map says: none of its leases is asked for by this generation.
    pub fn refused(&self, shard: u32) -> bool {
        self.sites.refused(self.sites.map.site_of(shard))
    }

    /// The weakest promise of the databases keeping `led` (shards this node leads), as the
    /// node's keeper last read them; none while it leads none.
    pub fn promise_of(&self, led: &[u32]) -> Option<replication::Promise> {
        let map = &self.sites.map;
        (self.replication).among(|site| led.iter().any(|&shard| map.site_of(shard) == site))
    }

    /// The database made ready for `shard`'s log, which `engine` (fresh, made for that
    /// shard) will write to: a connection of its own, as this node.
    pub fn for_shard<W: Default>(
        &self,
        shard: u32,
        engine: &mut Engine<W>,
    ) -> Result<ReadyDatabase, OpenError> {
        let site = self.sites.map.site_of(shard);
        let config = self.sites.sites[site].config.clone();
        let db = connection::Blocking::new(config.clone())?;
        let log_writer = LogWriter::new();
        engine.set_log(log_writer.clone());
        Ok(ReadyDatabase {
            config,
            db,
            sites: self.sites.clone(),
            site,
            shard: shard as i32,
            advertise_url: self.advertise_url.clone(),
            serving: self.serving,
            nodes: self.nodes.clone(),
            node: self.node.clone(),
            log_writer,
            tenure: Arc::new(crate::persist::tenure::Tenure::not_begun()),
            asked_at: std::time::Instant::now(),
            batch_wait: self.batch_wait,
            inserts: self.inserts,
            // Each database's promise, said once a node.
            replication: self.replication.clone(),
            require_synchronous_replication: self.require_synchronous_replication,
            shards_alone: self.shards_alone,
        })
    }
}

/// What asking for the lease found.
pub enum Asked {
    /// This node leads now.
    Leads(lease::Taken),
    /// Another node leads, at this URL, in this epoch; ask again after the pause.
    Held {
        url: String,
        epoch: i64,
        again_after: Duration,
    },
    /// The database did not answer (or, checked late, was found to be another than the shard
    /// map says); ask again after the pause.
    Unreachable {
        cause: String,
        again_after: Duration,
    },
}

impl ReadyDatabase {
    /// Checks the tables and gives `engine` (fresh) the log it will write its changes to.
    pub fn new<W: Default>(settings: &Settings, engine: &mut Engine<W>) -> Result<Self, OpenError> {
        let config = connection::config(&settings.url).map_err(OpenError::Url)?;
        let mut db = connection::Blocking::new(config.clone())?;
        let sites = Arc::new(sites::prepare(settings, (&mut db, config.clone()))?);
        let log_writer = LogWriter::new();
        engine.set_log(log_writer.clone());
        Ok(ReadyDatabase {
            config,
            db,
            sites,
            site: 0,
            shard: 0,
            advertise_url: settings.advertise_url.clone(),
            serving: settings.wait_for_lease,
            nodes: lease::Nodes::default(),
            node: uuid::Uuid::new_v4().to_string(),
            log_writer,
            tenure: Arc::new(crate::persist::tenure::Tenure::not_begun()),
            asked_at: std::time::Instant::now(),
            batch_wait: settings.batch_wait,
            inserts: settings.inserts,
            replication: Default::default(),
            require_synchronous_replication: settings.require_synchronous_replication,
            shards_alone: settings.shards_alone,
        })
    }

    /// The same database made ready for `shard`'s log, which `engine` (fresh, made for that
    /// shard) will write to: a connection of its own, as this node.
    pub fn for_shard<W: Default>(
        &self,
        shard: u32,
        engine: &mut Engine<W>,
    ) -> Result<Self, OpenError> {
        self.opener().for_shard(shard, engine)
    }

    /// What makes the database ready for another shard's log of this node later.
    pub fn opener(&self) -> ShardOpener {
        ShardOpener {
            sites: self.sites.clone(),
            advertise_url: self.advertise_url.clone(),
            serving: self.serving,
            nodes: self.nodes.clone(),
            node: self.node.clone(),
            batch_wait: self.batch_wait,
            inserts: self.inserts,
            replication: self.replication.clone(),
            require_synchronous_replication: self.require_synchronous_replication,
            shards_alone: self.shards_alone,
        }
    }

    /// What the home lists this node by while it announces itself (none for a state moved
    /// in or out, which never does), to take back when the generation stops.
    pub fn announcement(&self) -> Option<lease::Announcement> {
        self.serving.then(|| lease::Announcement {
            home: self.sites.sites[0].config.clone(),
            node: self.node.clone(),
        })
    }

    /// The shard whose log this is.
    pub fn shard(&self) -> u32 {
        self.shard as u32
    }

    /// Takes the lease if it is free or lapsed, advertising `url`; then announces this node
    /// (once per node: by the first shard's asking).
    pub fn ask(&mut self, url: &str) -> Asked {
        self.asked_at = std::time::Instant::now();
        // A database whose check was put off (it did not answer when the process started) is
        // checked before any lease of it is taken.
        if let Err(cause) = self.sites.checked(self.site, &mut self.db) {
            return Asked::Unreachable {
                cause,
                again_after: Duration::from_secs(1),
            };
        }
        let asked = lease::try_take(&mut self.db, self.shard, &self.node, url);
        if self.shard == 0 {
            self.nodes.announce(&mut self.db, &self.node, url);
        }
        match asked {
            Ok(Ok(taken)) => Asked::Leads(taken),
            Ok(Err(holder)) => Asked::Held {
                again_after: lease::retry_after(&holder),
                url: holder.url,
                epoch: holder.epoch,
            },
            Err(failed) => Asked::Unreachable {
                cause: failed.cause,
                again_after: Duration::from_secs(1),
            },
        }
    }

    /// Follows the log into `engine` (which holds nothing yet) until this node leads.
    pub fn follow(&self, engine: Arc<Engine<Notify>>) -> std::io::Result<follow::Following> {
        follow::Following::start(self.config.clone(), self.shard, engine)
    }

    /// With the lease `taken`: `clock` takes up the cluster's time, then recovers `engine`
    /// from the database, from scratch or from where a follower left it, and starts the
    /// log. The lease is renewed from the start, so a recovery longer than the lease does
    /// not lose it: by `keeper`, the node's keeper of the shards it leads already, or by one
    /// started here. A failure gives this shard's lease up (every lease, with a keeper started
    /// here): the caller gives up the others it took if it leads all or none.
    pub fn lead<W: Default>(
        mut self,
        engine: &Engine<W>,
        taken: lease::Taken,
        followed: follow::Stopped,
        (clock, keeper): (Arc<dyn crate::clock::Clock>, Option<Arc<Keeper>>),
    ) -> Result<DatabaseLog, OpenError> {
        let epoch = taken.epoch;
        let fence = lease::Fence {
            shard: self.shard,
            epoch,
        };
        // Taken up once a node, by its first shard: a node renews (and gives up) every lease
        // it holds in one statement, writing one time into each, so the floors of a node's
        // shards agree. A later shard's floor found ahead all the same is taken up, forward
        // only; taking up again otherwise could move a clock that was ahead back.
        let clock_skew_ms = match &keeper {
            Some(_) if taken.floor <= clock.now() => None,
            _ => Some(clock.take_up(taken.database, taken.floor)),
        };
        let url = replication::of_url(&self.config);
        let promise = self.db.run(STARTUP_TIMEOUT, move |client| {
            Box::pin(async move { replication::read(client, url).await })
        });
        let refusal = match &promise {
            Ok(promise) if !promise.synchronous => promise.detail.clone(),
            Ok(_) => String::new(),
            Err(failed) => format!("the database's settings could not be read: {failed}"),
        };
        if self.require_synchronous_replication && !refusal.is_empty() {
            // Given up at once, so another node need not wait out the lease.
            lease::release(&mut self.db, fence, clock.now());
            return Err(OpenError::Database(format!(
                "not leading (--require-synchronous-replication): {refusal}"
            )));
        }
        // Unread, it is read again at the first renewal.
        if let Ok(promise) = promise {
            let name = self.sites.map.site_name(self.site);
            self.replication.found((self.site, &name), promise);
        }
        let log_writer = self.log_writer.clone();
        let shard = keeper::HeldShard {
            site: self.site,
            fence,
            log_writer: log_writer.clone(),
            tenure: self.tenure.clone(),
        };
        let now = clock.now();
        let shared_keeper = keeper.is_some();
        let lease = match keeper {
            Some(keeper) => match keeper.add(shard, self.asked_at) {
                Ok(()) => keeper,
                Err(lost) => {
                    // Not leading after all: the next node need not wait out this lease.
                    lease::release(&mut self.db, fence, now);
                    return Err(OpenError::Database(lost.to_string()));
                }
            },
            None => {
                let held = keeper::Held {
                    announced: self.serving.then(|| {
                        (
                            self.node.clone(),
                            self.advertise_url.clone(),
                            self.nodes.clone(),
                        )
                    }),
                    // A node leading its share loses a shard alone; else it leads every
                    // shard of its database or none.
                    leads: match self.shards_alone {
                        true => keeper::Leads::Each,
                        false => keeper::Leads::Every,
                    },
                    clock,
                    replication: (self.replication.clone(), self.sites.replication_reads()),
                };
                let started = (self.sites.sites.iter())
                    .map(|site| connection::Blocking::new(site.config.clone()))
                    .collect::<std::io::Result<Vec<_>>>()
                    .and_then(|dbs| Keeper::start(dbs, (shard, self.asked_at), held));
                match started {
                    Ok(keeper) => Arc::new(keeper),
                    Err(error) => {
                        lease::release(&mut self.db, fence, now);
                        return Err(error.into());
                    }
                }
            }
        };
        let recovered = match followed {
            follow::Stopped::Untouched => recovery::recover(&mut self.db, self.shard, engine),
            follow::Stopped::Following(mut follower) => follower
                .catch_up(&mut self.db, engine)
                .map(|_| follower.finish()),
            follow::Stopped::Spoiled => Err(RecoveryError::Io(std::io::Error::other(
                "the engine followed the log part way only; a fresh one recovers",
            ))),
        };
        // A torn tail the last leader left (two inserts under way, the first not kept) ends
        // the log: cut, so this leader's own batches follow the records recovered.
        let recovered = recovered.and_then(|mut recovered| {
            let next_lsn = recovered.report.next_lsn;
            if let Some(cut) = recovery::cut_tail(&mut self.db, next_lsn, fence)? {
                tracing::warn!(cut = %cut.0, bytes = cut.2, "cut the log's torn tail, never acknowledged");
                recovered.report.dropped_tail = Some(cut);
            }
            Ok(recovered)
        });
        // Not leading after all: the next node need not wait out the lease. A keeper the node
        // renews other shards by gives this shard's up alone; the caller decides about theirs.
        let give_up = |lease: &Keeper| match shared_keeper {
            true => {
                lease.hand_off(fence.shard, now);
            }
            false => lease.release(),
        };
        let recovered = match recovered {
            Ok(recovered) => recovered,
            Err(error) => {
                give_up(&lease);
                return Err(error.into());
            }
        };
        // Chunks of a snapshot the last leader was writing when it stopped.
        match snapshots::remove_orphans(&mut self.db, self.shard) {
            Ok(0) => {}
            Ok(removed) => tracing::info!(removed, "removed chunks of snapshots never kept"),
            Err(failed) => {
                tracing::warn!(cause = %failed, "chunks of snapshots never kept are left for later")
            }
        }
        let next_lsn = recovered.report.next_lsn;
        // Overlapping only once recorded, so that a gap it leaves is taken for a torn tail.
        let inserts = match recovery::note_epoch(&mut self.db, fence, self.inserts) {
            Ok(()) => self.inserts,
            Err(error) => {
                tracing::warn!(%error, "inserting one batch at a time: this epoch's setting was not recorded");
                1
            }
        };
        let table_log = match &self.sites.sites[self.site].shared_commit {
            Some(shared) => {
                table_log::TableLog::sharing(self.db, fence, next_lsn, inserts, shared.clone())
            }
            None => table_log::TableLog::new(self.db, fence, next_lsn, inserts),
        };
        let table_log = table_log.map(|table_log| table_log.waiting(self.batch_wait));
        let table_log = match table_log {
            Ok(table_log) => table_log,
            Err(error) => {
                give_up(&lease);
                return Err(error.into());
            }
        };
        log_writer.count_logged(recovered.log_bytes);
        log_writer.start(table_log, next_lsn, FsyncMode::Always);
        engine.queues.keep_receipt_key();
        Ok(DatabaseLog {
            shard: self.shard as u32,
            epoch,
            log_writer,
            lease,
            snapshots: DatabaseSnapshots::new(self.config, fence),
            live_at_snapshot: recovered.live_at_snapshot,
            report: recovered.report,
            clock_skew_ms,
        })
    }
}

#[cfg(test)]
mod keeper_tests;
#[cfg(test)]
mod range_in_place_tests;
#[cfg(test)]
mod range_move_tests;
#[cfg(test)]
mod schema_tests;
#[cfg(test)]
mod shared_commit_tests;
#[cfg(test)]
mod sites_tests;
#[cfg(test)]
mod tests;
