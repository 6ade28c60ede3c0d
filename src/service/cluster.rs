//! This node's place among the nodes that share one log (`GET /_orderly/cluster`): `app` knows
//! the storage and hands the service a way to read it at request time.

use std::sync::Arc;

/// What `GET /_orderly/cluster` answers.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ClusterState {
    /// `leader` (holds the lease on a log in a database), `standby`, or `single` (a data
    /// directory or memory, where no node leads).
    pub role: &'static str,
    /// The lease's epoch (0 when there is none).
    pub epoch: u64,
    /// The URL of the node that leads (this one's own when single).
    pub leader: String,
    /// Records of the log applied here (written, on the leader).
    pub applied: u64,
    /// Records the leader has that this node has not applied yet.
    pub lag: u64,
    /// How many shards the key space is cut into (1: one log for every queue and topic).
    pub shards: u32,
    /// The shards this node leads, in order (every shard when single, none on a standby).
    pub led: Vec<u32>,
    /// The URLs of the nodes on this database seen alive within a lease's length, this one's
    /// among them, in order (this node's own URL when single).
    pub nodes: Vec<String>,
    /// Each shard's leader's URL as this node last knew it, in shard order (empty while
    /// unknown): where the shard's requests go.
    pub leaders: Vec<String>,
    /// The database keeping each shard's log, in shard order, shown as
    /// `postgres://USER@HOST:PORT/DBNAME` (empty on a data directory or in memory).
    pub databases: Vec<String>,
    /// On a leader: whether an acknowledged write survives a failover of the database, and
    /// why (what it read of the database's settings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication: Option<crate::persist::database::replication::Promise>,
    /// Each shard's log this node writes or follows, in shard order (none in memory).
    pub logs: Vec<ShardLog>,
}

/// One shard's log as this node has it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ShardLog {
    pub shard: u32,
    /// On a leader, the epoch of its lease on the shard (none on a standby or when single).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// Records of the shard's log written here (a leader, or single) or applied (a standby).
    pub applied: u64,
    /// Records the shard's leader has that this node has not applied yet.
    pub lag: u64,
    /// The database keeping the shard's log (`--storage`'s or a `--shard-database` range's),
    /// as `postgres://USER@HOST:PORT/DBNAME` and nothing else; none on a data directory or in
    /// memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
}

/// Reads the state when asked.
pub type ClusterStatus = Arc<dyn Fn() -> ClusterState + Send + Sync>;

/// A node that leads no one: its own URL, and how far each shard's log is written (`written`:
/// one per shard, none in memory).
pub fn single(
    url: String,
    shards: u32,
    written: impl Fn() -> Vec<u64> + Send + Sync + 'static,
) -> ClusterStatus {
    Arc::new(move || {
        let logs: Vec<ShardLog> = (written().into_iter().zip(0..))
            .map(|(applied, shard)| ShardLog {
                shard,
                epoch: None,
                applied,
                lag: 0,
                database: None,
            })
            .collect();
        ClusterState {
            role: "single",
            epoch: 0,
            leader: url.clone(),
            // Every shard's log written, added up.
            applied: logs.iter().map(|log| log.applied).sum(),
            lag: 0,
            shards,
            led: (0..shards).collect(),
            nodes: vec![url.clone()],
            leaders: vec![url.clone(); shards as usize],
            databases: Vec::new(),
            replication: None,
            logs,
        }
    })
}
