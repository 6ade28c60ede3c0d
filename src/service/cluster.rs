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
    /// On a leader: whether an acknowledged write survives a failover of the database, and
    /// why (what it read of the database's settings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication: Option<crate::persist::database::replication::Promise>,
}

/// Reads the state when asked.
pub type ClusterStatus = Arc<dyn Fn() -> ClusterState + Send + Sync>;

/// A node that leads no one: its own URL, and how far its log is written (if it keeps one).
pub fn single(
    url: String,
    shards: u32,
    applied: impl Fn() -> u64 + Send + Sync + 'static,
) -> ClusterStatus {
    Arc::new(move || ClusterState {
        role: "single",
        epoch: 0,
        leader: url.clone(),
        applied: applied(),
        lag: 0,
        shards,
        led: (0..shards).collect(),
        nodes: vec![url.clone()],
        replication: None,
    })
}
