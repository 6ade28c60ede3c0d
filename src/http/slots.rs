//! What each open connection holds: one of the clients' slots (`--max-connections`), or, once
//! it is known to come from another node of the cluster, one of the peers' own
//! (`PEER_CONNECTIONS`). So clients crowding a node to its limit leave room for the links and
//! pulls the other nodes need to serve their own clients, and those never take a client's slot.
//!
//! A connection is known to be another node's when it opens a link (`link_server`), or when a
//! request on it names a live node of the database (`X-Orderly-Node`, which pulls and reads
//! between nodes carry, and requests passed on over HTTP), even one opened past the limit
//! (`server`). While every peer slot is held, a node's connection keeps the client's
//! slot it came in on, as before peers had their own.

use std::sync::{Arc, Mutex};

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections other nodes may hold at once outside `--max-connections`: a link and a
/// connection or two for pulls and reads from each of dozens of nodes.
pub const PEER_CONNECTIONS: usize = 64;

/// The clients' slots and the peers'.
#[derive(Clone)]
pub struct Slots {
    pub(super) clients: Arc<Semaphore>,
    peers: Arc<Semaphore>,
    /// Kept at the number of peers' slots held (`GET /metrics`).
    held_by_peers: Gauge,
}

impl Slots {
    pub fn new(max_connections: usize, held_by_peers: Gauge) -> Slots {
        Slots {
            clients: Arc::new(Semaphore::new(max_connections)),
            peers: Arc::new(Semaphore::new(PEER_CONNECTIONS)),
            held_by_peers,
        }
    }

    /// A client's slot, if one is free.
    pub(super) fn client(&self) -> Option<Slot> {
        let permit = self.clients.clone().try_acquire_owned().ok()?;
        Some(self.holding(Held::Client { _permit: permit }))
    }

    /// A peer's slot, if one is free.
    pub(super) fn peer(&self) -> Option<Slot> {
        let permit = self.peers.clone().try_acquire_owned().ok()?;
        self.held_by_peers.inc();
        Some(self.holding(Held::Peer { _permit: permit }))
    }

    /// A slot holding `permit`, a client's taken already.
    pub(super) fn holding_client(&self, permit: OwnedSemaphorePermit) -> Slot {
        self.holding(Held::Client { _permit: permit })
    }

    fn holding(&self, held: Held) -> Slot {
        Slot(Arc::new(SlotInner {
            held: Mutex::new(held),
            slots: self.clone(),
        }))
    }
}

/// The permit held, given back when dropped.
enum Held {
    Client { _permit: OwnedSemaphorePermit },
    Peer { _permit: OwnedSemaphorePermit },
    Released,
}

/// The slot of one connection. Cloned into the requests that may name a node, so that the
/// request found to come from one moves its connection into a peer's slot.
#[derive(Clone)]
pub struct Slot(Arc<SlotInner>);

struct SlotInner {
    held: Mutex<Held>,
    slots: Slots,
}

impl Slot {
    /// Gives the client's slot back for a peer's, if one is free; whether the connection now
    /// holds a peer's.
    pub fn to_peer(&self) -> bool {
        let inner = &self.0;
        let mut held = inner.held.lock().unwrap_or_else(|p| p.into_inner());
        match &*held {
            Held::Peer { .. } => true,
            Held::Released => false,
            Held::Client { .. } => match inner.slots.peers.clone().try_acquire_owned() {
                Ok(permit) => {
                    inner.slots.held_by_peers.inc();
                    *held = Held::Peer { _permit: permit };
                    true
                }
                Err(_) => false,
            },
        }
    }

    /// Whether the connection holds a peer's slot.
    #[cfg(test)]
    pub fn is_peer(&self) -> bool {
        matches!(
            *self.0.held.lock().unwrap_or_else(|p| p.into_inner()),
            Held::Peer { .. }
        )
    }

    /// Frees the slot: the connection closed (a request still running on it holds nothing).
    pub(super) fn release(&self) {
        self.0.release();
    }
}

impl SlotInner {
    fn release(&self) {
        let held = std::mem::replace(
            &mut *self.held.lock().unwrap_or_else(|p| p.into_inner()),
            Held::Released,
        );
        if matches!(held, Held::Peer { .. }) {
            self.slots.held_by_peers.dec();
        }
    }
}

impl Drop for SlotInner {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_moved_to_a_peers_slot_gives_its_clients_slot_back() {
        let slots = Slots::new(1, Gauge::default());
        let first = slots.client().expect("a client's slot");
        assert!(slots.client().is_none(), "one client's slot in all");
        assert!(first.to_peer());
        assert!(first.is_peer());
        assert_eq!(slots.held_by_peers.get(), 1);
        let second = slots.client().expect("the first gave its slot back");
        first.release();
        assert_eq!(slots.held_by_peers.get(), 0);
        assert!(!first.to_peer(), "a released slot takes nothing");
        second.release();
        assert!(slots.client().is_some());
    }

    #[test]
    fn with_every_peers_slot_held_a_connection_keeps_its_clients_slot() {
        let slots = Slots::new(2, Gauge::default());
        let peers: Vec<Slot> = (0..PEER_CONNECTIONS).map_while(|_| slots.peer()).collect();
        assert_eq!(peers.len(), PEER_CONNECTIONS);
        let client = slots.client().expect("a client's slot");
        assert!(!client.to_peer());
        assert!(!client.is_peer());
        let other = slots.client().expect("one client's slot left");
        assert!(
            slots.client().is_none(),
            "the unmoved one still holds the other"
        );
        drop(other);
        peers[0].release();
        assert!(client.to_peer(), "a peer's slot came free");
        assert_eq!(slots.held_by_peers.get(), PEER_CONNECTIONS as i64);
    }
}
