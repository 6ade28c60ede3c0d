//! Which shards this node leads, and each one's backend: a table every request reads without a
//! lock, which a hand-off and a take change while requests run. A request borrows the backend
//! it found for as long as it runs, so a backend once placed stays until the router is dropped
//! (the node's next generation): a shard taken again gets a new one beside it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::backend::embedded::Embedded;

/// How many times one router may take the same shard: past that, taking it again is refused
/// and left to the node's next generation.
pub(super) const TAKES: usize = 4;

struct Slot {
    /// Each backend this node took the shard with, in turn.
    taken: [OnceLock<Arc<Embedded>>; TAKES],
    /// 1 + the index in `taken` of the backend leading now; 0 while another node leads.
    now: AtomicUsize,
}

/// Shard n's slot at index n.
pub(super) struct Slots(Box<[Slot]>);

/// Why a shard could not be taken.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum NotTaken {
    /// This node leads it already.
    Led,
    /// Taken `TAKES` times already by this router.
    TooOften,
    /// Not one of the key space's shards.
    NoSuchShard,
}

impl Slots {
    /// `count` shards, this node leading `here` (each its shard's backend).
    pub(super) fn new(count: u32, here: Vec<Arc<Embedded>>) -> Slots {
        let slots: Box<[Slot]> = (0..count)
            .map(|_| Slot {
                taken: Default::default(),
                now: AtomicUsize::new(0),
            })
            .collect();
        for shard in here {
            let slot = &slots[shard.shard() as usize];
            let _ = slot.taken[0].set(shard);
            slot.now.store(1, Ordering::Release);
        }
        Slots(slots)
    }

    pub(super) fn count(&self) -> u32 {
        self.0.len() as u32
    }

    /// Shard `n`'s backend while this node leads it.
    pub(super) fn get(&self, n: u32) -> Option<&Arc<Embedded>> {
        let slot = self.0.get(n as usize)?;
        match slot.now.load(Ordering::Acquire) {
            0 => None,
            now => slot.taken[now - 1].get(),
        }
    }

    /// The shards this node leads, in order.
    pub(super) fn here(&self) -> impl Iterator<Item = &Arc<Embedded>> {
        (0..self.count()).filter_map(|n| self.get(n))
    }

    /// Every backend this router placed, leading or handed off since.
    pub(super) fn every_one(&self) -> impl Iterator<Item = &Arc<Embedded>> {
        (self.0.iter()).flat_map(|slot| slot.taken.iter().filter_map(OnceLock::get))
    }

    /// Shard `n` led elsewhere from now on; the backend that led it here, if one did.
    pub(super) fn hand_off(&self, n: u32) -> Option<Arc<Embedded>> {
        let slot = self.0.get(n as usize)?;
        let now = slot.now.swap(0, Ordering::AcqRel);
        (now > 0)
            .then(|| slot.taken[now - 1].get().cloned())
            .flatten()
    }

    /// `backend` leads its shard here from now on. Changes are made one at a time (the
    /// router's hand-offs and takes hold one lock).
    pub(super) fn take(&self, backend: Arc<Embedded>) -> Result<(), NotTaken> {
        let slot = (self.0.get(backend.shard() as usize)).ok_or(NotTaken::NoSuchShard)?;
        if slot.now.load(Ordering::Acquire) != 0 {
            return Err(NotTaken::Led);
        }
        let free = (slot.taken.iter().position(|taken| taken.get().is_none()))
            .ok_or(NotTaken::TooOften)?;
        slot.taken[free].set(backend).map_err(|_| NotTaken::Led)?;
        slot.now.store(free + 1, Ordering::Release);
        Ok(())
    }
}
