//! What recovery learns from the snapshot it loaded: where each part of the state was cut.

use std::collections::HashMap;

/// What recovery needs to know about the snapshot it loaded.
#[derive(Debug, Default)]
pub struct Loaded {
    pub file: Option<String>,
    pub first_lsn: u64,
    pub registry_lsn: u64,
    /// Per queue uid: the first sequence number its image does not include.
    pub queue_lsns: HashMap<u64, u64>,
    /// Per topic name: the first sequence number its image does not include.
    pub topic_lsns: HashMap<String, u64>,
    pub signer: bool,
    pub receipt_key: bool,
    pub outbox_lsn: Option<u64>,
    pub move_task_lsn: Option<u64>,
    pub mobile_lsn: Option<u64>,
    /// Where the relay was cut (format version 6 and later).
    pub relay_lsn: Option<u64>,
    pub messages: u64,
}
