//! A map whose entries expire a fixed time after insertion: FIFO deduplication histories (queues
//! and topics) and the ReceiveRequestAttemptId cache. Expiry is driven by an insertion-ordered queue, so it
//! never scans the map.

use std::collections::VecDeque;

use crate::engine::FastMap;
use std::hash::Hash;

use crate::engine::time::Timestamp;

#[derive(Debug)]
pub struct ExpiringMap<K, V> {
    entries: FastMap<K, (Timestamp, V)>,
    order: VecDeque<(Timestamp, K)>,
}

impl<K: Hash + Eq + Clone, V> Default for ExpiringMap<K, V> {
    fn default() -> Self {
        ExpiringMap {
            entries: FastMap::default(),
            order: VecDeque::new(),
        }
    }
}

impl<K: Hash + Eq + Clone, V> ExpiringMap<K, V> {
    /// The live entry for `key`, if it has not expired by `now`.
    pub fn get(&self, key: &K, now: Timestamp) -> Option<&V> {
        self.entries
            .get(key)
            .filter(|(expires, _)| *expires > now)
            .map(|(_, v)| v)
    }

    /// Inserts with an expiry time. Expiry times must not go backwards between inserts
    /// (the window is fixed and `now` is monotonic), which keeps `order` sorted.
    pub fn insert(&mut self, key: K, value: V, expires_at: Timestamp) {
        self.order.push_back((expires_at, key.clone()));
        self.entries.insert(key, (expires_at, value));
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.entries.remove(key).map(|(_, v)| v)
    }

    /// Drops every entry that expired by `now`.
    pub fn expire(&mut self, now: Timestamp) {
        while let Some((expires, _)) = self.order.front() {
            if *expires > now {
                break;
            }
            let (expires, key) = self.order.pop_front().expect("front exists");
            // A key re-inserted later has a newer expiry; keep that one.
            if self.entries.get(&key).is_some_and(|(e, _)| *e == expires) {
                self.entries.remove(&key);
            }
        }
    }

    /// Live entries in expiry order, for a snapshot; inserting them in this order rebuilds the map.
    pub fn entries(&self) -> Vec<(K, V, Timestamp)>
    where
        V: Clone,
    {
        self.order
            .iter()
            .filter_map(|(expires, key)| {
                let (current, value) = self.entries.get(key)?;
                (current == expires).then(|| (key.clone(), value.clone(), *expires))
            })
            .collect()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.order.clear();
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
}
