//! FIFO deduplication histories (queues and topics), sized for millions of ids: each entry
//! holds a 16-byte digest of its key and the fixed-size answer a duplicate gets, never the key
//! itself. A client's ids can be 128 characters; a busy queue sees millions in its five-minute
//! window, and keeping the strings cost about 370 bytes an id.
//!
//! Entries live in one queue in insertion order (so expiry pops from the front and never
//! scans); a hash table holds only each live key's position in it.

use std::collections::VecDeque;
use std::hash::BuildHasher;

use hashbrown::HashTable;
use sha2::{Digest, Sha256};

use crate::engine::message::{MessageId, SequenceNumber};
use crate::engine::time::Timestamp;

/// What a duplicate is answered: the original's message id and (FIFO) sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DedupRecord {
    pub(crate) message_id: MessageId,
    pub(crate) sequence_number: Option<SequenceNumber>,
}

/// What a deduplication history keys by: the first 16 bytes of the SHA-256 of the key (the
/// deduplication id, after its message group and a NUL when deduplication is scoped by group).
/// Two keys share a digest only by a collision of SHA-256 cut to 128 bits, which takes about
/// 2^64 tries to find.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct DedupDigest(pub [u8; 16]);

impl DedupDigest {
    /// The digest of a key as the log writes it (`id`, or `group` NUL `id`).
    pub fn of(key: &str) -> DedupDigest {
        DedupDigest::from_sha(Sha256::digest(key.as_bytes()))
    }

    fn from_sha(sha: impl AsRef<[u8]>) -> DedupDigest {
        let mut digest = [0; 16];
        digest.copy_from_slice(&sha.as_ref()[..16]);
        DedupDigest(digest)
    }
}

#[derive(Debug)]
struct Slot<V> {
    digest: DedupDigest,
    expires: Timestamp,
    value: V,
}

/// Entries as a snapshot takes them: digest, what a duplicate answers, expiry.
pub type Entries<V> = Vec<(DedupDigest, V, Timestamp)>;

/// A chunk of a queue's or topic's history, and where the read goes on.
pub type HistoryChunk = Result<(Entries<DedupRecord>, Option<HistoryCursor>), Cleared>;

/// Capacity a history keeps while it holds any entry: shrinking below it saves nothing.
const MIN_KEPT: usize = 64;

/// Digests mapped to what a duplicate answers, each for a fixed time after its insertion.
#[derive(Debug)]
pub struct DedupHistory<V> {
    /// Randomly seeded: digests come from client-chosen ids, and ids ground to share
    /// their first bits would otherwise pile into one bucket.
    hasher: foldhash::fast::RandomState,
    /// Positions in `slots`, counted from the first slot ever pushed.
    index: HashTable<u64>,
    /// In insertion order, so in expiry order (the window is fixed and `now` never goes back).
    slots: VecDeque<Slot<V>>,
    /// The position of `slots[0]`.
    front: u64,
    /// How many times it was cleared.
    clears: u64,
}

/// A read of a history: the position it goes on from, where the history ended when the read
/// began, and how many times it had been cleared then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryCursor {
    next: u64,
    end: u64,
    clears: u64,
}

/// A history was cleared while it was being read.
#[derive(Debug, PartialEq, Eq)]
pub struct Cleared;

impl<V> Default for DedupHistory<V> {
    fn default() -> Self {
        DedupHistory {
            hasher: Default::default(),
            index: HashTable::new(),
            slots: VecDeque::new(),
            front: 0,
            clears: 0,
        }
    }
}

impl<V: Copy> DedupHistory<V> {
    fn slot(&self, position: u64) -> &Slot<V> {
        &self.slots[(position - self.front) as usize]
    }

    /// What a duplicate of `digest` answers, if its entry has not expired by `now`.
    pub fn get(&self, digest: &DedupDigest, now: Timestamp) -> Option<&V> {
        let hash = self.hasher.hash_one(digest);
        let position = self.index.find(hash, |&p| self.slot(p).digest == *digest)?;
        let slot = self.slot(*position);
        (slot.expires > now).then_some(&slot.value)
    }

    /// Adds an entry, replacing a live one for the same digest. Expiry times do not go
    /// backwards between inserts (the window is fixed, `now` only moves on), which keeps the
    /// slots in expiry order; were one to, it would be held until those before it expire,
    /// and lookups still check its time.
    pub fn insert(&mut self, digest: DedupDigest, value: V, expires_at: Timestamp) {
        let position = self.front + self.slots.len() as u64;
        self.slots.push_back(Slot {
            digest,
            expires: expires_at,
            value,
        });
        let hash = self.hasher.hash_one(digest);
        let (slots, front, hasher) = (&self.slots, self.front, &self.hasher);
        let slot_digest = |p: u64| &slots[(p - front) as usize].digest;
        match self.index.entry(
            hash,
            |&p| *slot_digest(p) == digest,
            |&p| hasher.hash_one(slot_digest(p)),
        ) {
            // The older slot stays until it expires; the index no longer points at it.
            hashbrown::hash_table::Entry::Occupied(mut held) => *held.get_mut() = position,
            hashbrown::hash_table::Entry::Vacant(free) => {
                free.insert(position);
            }
        }
    }

    /// Drops every entry that expired by `now`.
    pub fn expire(&mut self, now: Timestamp) {
        while self.slots.front().is_some_and(|s| s.expires <= now) {
            let position = self.front;
            let digest = self.slots[0].digest;
            let hash = self.hasher.hash_one(digest);
            // A digest inserted again later points at its newer slot: keep that.
            if let Ok(held) = self.index.find_entry(hash, |&p| p == position) {
                held.remove();
            }
            self.slots.pop_front();
            self.front += 1;
        }
        let emptied = self.slots.is_empty() && self.slots.capacity() > 0;
        if emptied
            || self.slots.capacity() > MIN_KEPT && self.slots.len() < self.slots.capacity() / 4
        {
            self.shrink();
        }
    }

    /// Gives most of a burst's memory back once three quarters of it expired (halving, so
    /// a steady rate never shrinks and regrows in turn), and all of it once everything has:
    /// what an idle history keeps would pin the allocator's pages for good.
    fn shrink(&mut self) {
        let keep = match self.slots.len() {
            0 => 0,
            held => (held * 2).max(MIN_KEPT),
        };
        self.slots.shrink_to(keep);
        let (slots, front, hasher) = (&self.slots, self.front, &self.hasher);
        self.index.shrink_to(keep, |&p| {
            hasher.hash_one(slots[(p - front) as usize].digest)
        });
    }

    /// Bytes held on the heap, whether in use or not.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot<V>>() + self.index.allocation_size()
    }

    /// Entries in insertion order (those expired but not yet dropped included); inserting
    /// them in this order rebuilds the history.
    pub fn entries(&self) -> Vec<(DedupDigest, V, Timestamp)> {
        match self.read(self.cursor(), usize::MAX) {
            Ok((entries, _)) => entries,
            Err(Cleared) => unreachable!("nothing changes between the two calls"),
        }
    }

    /// Where a read of the history as it is now begins.
    pub fn cursor(&self) -> HistoryCursor {
        HistoryCursor {
            next: self.front,
            end: self.front + self.slots.len() as u64,
            clears: self.clears,
        }
    }

    /// The entries among the next `positions` slots of a read, in insertion order, and where
    /// it goes on (`None` once done). A snapshot reads a big history this way, a chunk per lock
    /// hold, rather than copying it whole while holding the lock: it reads the history as it
    /// was when the read began (entries added since belong to the log after the snapshot),
    /// less what expired meanwhile. A clear in between cannot be read around: the entries it
    /// dropped are gone, while the messages the snapshot copied still hold them.
    pub fn read(
        &self,
        cursor: HistoryCursor,
        positions: usize,
    ) -> Result<(Entries<V>, Option<HistoryCursor>), Cleared> {
        if cursor.clears != self.clears {
            return Err(Cleared);
        }
        let mut position = cursor.next.max(self.front);
        let stop = cursor
            .end
            .min(position.saturating_add(positions.try_into().unwrap_or(u64::MAX)));
        let mut found = Vec::with_capacity(stop.saturating_sub(position).min(1 << 16) as usize);
        while position < stop {
            let slot = self.slot(position);
            let hash = self.hasher.hash_one(slot.digest);
            if self.index.find(hash, |&p| p == position).is_some() {
                found.push((slot.digest, slot.value, slot.expires));
            }
            position += 1;
        }
        let next = (position < cursor.end).then_some(HistoryCursor {
            next: position,
            ..cursor
        });
        Ok((found, next))
    }

    /// Forgets every entry (PurgeQueue, a reset).
    pub fn clear(&mut self) {
        // Positions are never reused, and a read begun before sees it was cleared.
        self.front += self.slots.len() as u64;
        self.clears += 1;
        self.index.clear();
        self.slots.clear();
        self.shrink();
    }

    /// Live entries (expired ones count until `expire` drops them).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests;
