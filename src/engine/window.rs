//! A map whose entries expire a fixed time after insertion: a FIFO queue's cache of receive
//! attempts (ReceiveRequestAttemptId). Expiry is driven by an insertion-ordered queue, so it
//! never scans the map, and the map gives back its room as its entries expire.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash};

use hashbrown::{hash_table, HashTable};

use crate::engine::time::Timestamp;

/// Below this much room a map that still holds entries is not shrunk: too little to give back.
const MIN_KEPT: usize = 64;

/// An entry with its key's hash, so growing the table never hashes a key again: the keys are
/// strings behind pointers, and rehashing millions of them (when deduplication ids were kept
/// here) took a cache miss each, several per cent of a send's CPU.
#[derive(Debug)]
struct Entry<K, V> {
    hash: u64,
    key: K,
    expires: Timestamp,
    value: V,
}

#[derive(Debug)]
pub struct ExpiringMap<K, V> {
    hasher: foldhash::fast::RandomState,
    entries: HashTable<Entry<K, V>>,
    order: VecDeque<(Timestamp, K)>,
}

impl<K: Hash + Eq + Clone, V> Default for ExpiringMap<K, V> {
    fn default() -> Self {
        ExpiringMap {
            hasher: Default::default(),
            entries: HashTable::new(),
            order: VecDeque::new(),
        }
    }
}

impl<K: Hash + Eq + Clone, V> ExpiringMap<K, V> {
    fn find(&self, key: &K) -> Option<&Entry<K, V>> {
        let hash = self.hasher.hash_one(key);
        self.entries.find(hash, |e| e.key == *key)
    }

    /// The live entry for `key`, if it has not expired by `now`.
    pub fn get(&self, key: &K, now: Timestamp) -> Option<&V> {
        self.find(key).filter(|e| e.expires > now).map(|e| &e.value)
    }

    /// Inserts with an expiry time. Expiry times must not go backwards between inserts
    /// (the window is fixed and `now` is monotonic), which keeps `order` sorted.
    pub fn insert(&mut self, key: K, value: V, expires_at: Timestamp) {
        self.order.push_back((expires_at, key.clone()));
        let hash = self.hasher.hash_one(&key);
        match self.entries.entry(hash, |e| e.key == key, |e| e.hash) {
            hash_table::Entry::Occupied(mut held) => {
                let entry = held.get_mut();
                entry.expires = expires_at;
                entry.value = value;
            }
            hash_table::Entry::Vacant(slot) => {
                slot.insert(Entry {
                    hash,
                    key,
                    expires: expires_at,
                    value,
                });
            }
        }
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        let hash = self.hasher.hash_one(key);
        let (entry, _) = self
            .entries
            .find_entry(hash, |e| e.key == *key)
            .ok()?
            .remove();
        Some(entry.value)
    }

    /// Drops every entry that expired by `now`.
    pub fn expire(&mut self, now: Timestamp) {
        while let Some((expires, _)) = self.order.front() {
            if *expires > now {
                break;
            }
            let (expires, key) = self.order.pop_front().expect("front exists");
            let hash = self.hasher.hash_one(&key);
            // A key re-inserted later has a newer expiry; keep that one.
            if let Ok(entry) = self
                .entries
                .find_entry(hash, |e| e.key == key && e.expires == expires)
            {
                entry.remove();
            }
        }
        self.give_room_back();
    }

    /// Gives most of a burst's room back once three quarters of it is unused (halving, so a
    /// steady rate never shrinks and regrows in turn), and all of it once every entry has
    /// expired: what an idle map keeps would pin the allocator's pages for good.
    fn give_room_back(&mut self) {
        // Every entry has its place in `order` (which may also hold replaced ones).
        let held = self.order.len();
        if held == 0 {
            if self.order.capacity() > 0 || self.entries.capacity() > 0 {
                self.order = VecDeque::new();
                self.entries = HashTable::new();
            }
        } else if self.order.capacity() > MIN_KEPT && held < self.order.capacity() / 4 {
            let keep = (held * 2).max(MIN_KEPT);
            self.order.shrink_to(keep);
            self.entries.shrink_to(keep, |e| e.hash);
        }
    }

    /// Room held, in entries (for tests).
    #[cfg(test)]
    pub fn room(&self) -> usize {
        self.order.capacity() + self.entries.capacity()
    }

    /// Live entries in expiry order, for a snapshot; inserting them in this order rebuilds the map.
    pub fn entries(&self) -> Vec<(K, V, Timestamp)>
    where
        V: Clone,
    {
        self.order
            .iter()
            .filter_map(|(expires, key)| {
                let entry = self.find(key)?;
                (entry.expires == *expires).then(|| (key.clone(), entry.value.clone(), *expires))
            })
            .collect()
    }

    /// Empties the map, giving back its room.
    pub fn clear(&mut self) {
        self.entries = HashTable::new();
        self.order = VecDeque::new();
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_in_order_and_reinsert_survives() {
        let mut m = ExpiringMap::default();
        m.insert("a", 1, Timestamp(100));
        m.insert("b", 2, Timestamp(200));
        assert_eq!(m.get(&"a", Timestamp(99)), Some(&1));
        assert_eq!(m.get(&"a", Timestamp(100)), None);
        m.expire(Timestamp(150));
        assert_eq!(m.len(), 1);
        m.insert("b", 3, Timestamp(300));
        m.expire(Timestamp(250));
        assert_eq!(m.get(&"b", Timestamp(250)), Some(&3));
    }

    #[test]
    fn entries_survive_growth_removal_and_partial_expiry() {
        let mut m = ExpiringMap::default();
        for i in 0..10_000u64 {
            m.insert(format!("id-{i}"), i, Timestamp(1_000 + i));
        }
        assert_eq!(m.remove(&"id-5".to_string()), Some(5));
        assert_eq!(m.remove(&"id-5".to_string()), None);
        m.expire(Timestamp(1_000 + 4_999));
        assert_eq!(m.len(), 5_000);
        assert_eq!(m.get(&"id-4999".to_string(), Timestamp(0)), None);
        for i in 5_000..10_000u64 {
            assert_eq!(m.get(&format!("id-{i}"), Timestamp(0)), Some(&i));
        }
        let kept = m.entries();
        assert_eq!(kept.len(), 5_000);
        assert_eq!(kept[0], ("id-5000".to_string(), 5_000, Timestamp(6_000)));
        m.clear();
        assert_eq!(m.get(&"id-9999".to_string(), Timestamp(0)), None);
    }

    #[test]
    fn an_expiring_burst_gives_its_room_back_and_an_expired_one_all_of_it() {
        let mut m = ExpiringMap::default();
        for i in 0..10_000u64 {
            m.insert(i, i, Timestamp(i));
        }
        let burst = m.room();
        m.expire(Timestamp(9_899));
        assert_eq!(m.len(), 100);
        assert!(m.room() * 10 < burst, "{} of {burst}", m.room());
        for i in 9_900..10_000u64 {
            assert_eq!(m.get(&i, Timestamp(0)), Some(&i));
        }
        m.expire(Timestamp(10_000));
        assert_eq!((m.len(), m.room()), (0, 0));
        m.insert(7, 7, Timestamp(20_000));
        assert_eq!(m.get(&7, Timestamp(10_001)), Some(&7));

        // A key removed early keeps its place in the expiry order until then.
        m.remove(&7);
        m.insert(8, 8, Timestamp(20_001));
        m.expire(Timestamp(20_000));
        assert_eq!((m.len(), m.get(&8, Timestamp(20_000))), (1, Some(&8)));
        m.expire(Timestamp(20_001));
        assert_eq!((m.len(), m.room()), (0, 0));
    }
}
