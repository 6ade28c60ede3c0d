//! What a node is told about the databases its shards' logs are kept in, and about itself.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::shard_map;

/// Where the log is and who this node is.
pub struct Settings {
    pub url: String,
    pub region: String,
    pub account_id: String,
    /// The URL other nodes and operators reach this node at (`--advertise-url`).
    pub advertise_url: String,
    /// Wait while another node holds the lease (a node starting to serve); else refuse (an
    /// import or export, which must not run beside a leader).
    pub wait_for_lease: bool,
    /// How long a busy leader lets an insert wait for more requests to share it
    /// (`--database-batch-wait`).
    pub batch_wait: Duration,
    /// How long the node's shared commit lets a statement wait for more writes while they
    /// come steadily (`--database-commit-wait`; zero: at once).
    pub commit_wait: Duration,
    /// How many inserts of the log may be under way at once (`--database-inserts`).
    pub inserts: usize,
    /// Refuse to lead unless an acknowledged write survives a failover of the database
    /// (`--require-synchronous-replication`).
    pub require_synchronous_replication: bool,
    /// How many shards the key space is cut into (`--shards`): recorded when the database is
    /// first used, and the only count it opens with afterwards.
    pub shards: u32,
    /// A lease another node takes ends that shard alone, the node leading the rest on
    /// (`--spread-shards`); else it ends every shard of the node.
    pub shards_alone: bool,
    /// Ranges of shards kept in databases of their own (`--shard-database`); the rest are kept
    /// in `url`'s.
    pub placed: Vec<shard_map::Placed>,
    /// The names of the databases of `placed` this process checked against the home, in
    /// range order (`None` for one not checked yet), once it started: a later generation that
    /// finds the same names recorded in the home checks the home alone, so a placed database
    /// that stops answering costs its own shards only, not the node's next start.
    pub placed_checked: Arc<Mutex<Option<Vec<Option<String>>>>>,
}
