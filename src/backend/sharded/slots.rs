//! Which shards this node leads, and each one's backend: a table every request reads, which a
//! hand-off and a take change while requests run. A request holds the backend it found (its
//! own `Arc`) for as long as it runs, so a backend handed off is let go of once the last
//! request on it ends, and a shard may be taken again any number of times.

use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::backend::embedded::Embedded;

/// Shard n's backend at index n while this node leads it.
pub(super) struct Slots {
    slots: Box<[RwLock<Option<Arc<Embedded>>>]>,
    /// Backends handed off that a request may still hold: stopping the router's work reaches
    /// one whose hand-off was cut short. Weak, so none is kept for this.
    handed_off: Mutex<Vec<Weak<Embedded>>>,
}

/// Why a shard could not be taken.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum NotTaken {
    /// This node leads it already.
    Led,
    /// Not one of the key space's shards.
    NoSuchShard,
}

impl Slots {
    /// `count` shards, this node leading `here` (each its shard's backend).
    pub(super) fn new(count: u32, here: Vec<Arc<Embedded>>) -> Slots {
        let slots: Box<[RwLock<Option<Arc<Embedded>>>]> =
            (0..count).map(|_| RwLock::new(None)).collect();
        for shard in here {
            let n = shard.shard() as usize;
            *write(&slots[n]) = Some(shard);
        }
        Slots {
            slots,
            handed_off: Mutex::default(),
        }
    }

    pub(super) fn count(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Shard `n`'s backend while this node leads it.
    pub(super) fn get(&self, n: u32) -> Option<Arc<Embedded>> {
        let slot = self.slots.get(n as usize)?;
        slot.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The shards this node leads, in order.
    pub(super) fn here(&self) -> impl Iterator<Item = Arc<Embedded>> + '_ {
        (0..self.count()).filter_map(|n| self.get(n))
    }

    /// Every backend of this router still held: those leading, and those handed off that a
    /// request holds yet.
    pub(super) fn every_one(&self) -> Vec<Arc<Embedded>> {
        let handed_off = self.handed_off.lock().unwrap_or_else(|p| p.into_inner());
        let gone = handed_off.iter().filter_map(Weak::upgrade);
        self.here().chain(gone).collect()
    }

    /// Shard `n` led elsewhere from now on; the backend that led it here, if one did.
    pub(super) fn hand_off(&self, n: u32) -> Option<Arc<Embedded>> {
        // Locked first (as `every_one` locks it), so the backend is always in one place or the
        // other for `every_one`.
        let mut handed_off = self.handed_off.lock().unwrap_or_else(|p| p.into_inner());
        let left = write(self.slots.get(n as usize)?).take()?;
        // Bounded by the backends still held, not by how often shards moved.
        handed_off.retain(|gone| gone.strong_count() > 0);
        handed_off.push(Arc::downgrade(&left));
        Some(left)
    }

    /// `backend` leads its shard here from now on.
    pub(super) fn take(&self, backend: Arc<Embedded>) -> Result<(), NotTaken> {
        let slot = (self.slots.get(backend.shard() as usize)).ok_or(NotTaken::NoSuchShard)?;
        let mut now = write(slot);
        if now.is_some() {
            return Err(NotTaken::Led);
        }
        *now = Some(backend);
        Ok(())
    }
}

fn write(
    slot: &RwLock<Option<Arc<Embedded>>>,
) -> std::sync::RwLockWriteGuard<'_, Option<Arc<Embedded>>> {
    slot.write().unwrap_or_else(|p| p.into_inner())
}
