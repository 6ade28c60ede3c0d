//! The hash map of the hot paths.

/// Hash maps on the hot paths: foldhash is several times faster than SipHash on short keys
/// and still randomly seeded per process, so keys chosen by clients cannot force collisions.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Below this capacity a map is never shrunk: too little to give back.
const MIN_KEPT: usize = 64;

/// Gives most of a burst's memory back once three quarters of a map's room is unused: it
/// halves to twice what it holds, so a steady load never shrinks and regrows in turn, and the
/// rehash it costs is paid for by the removals that came before it.
pub fn shrink_when_sparse<K: Eq + std::hash::Hash, V>(map: &mut FastMap<K, V>) {
    if map.capacity() > MIN_KEPT && map.len() < map.capacity() / 4 {
        map.shrink_to((map.len() * 2).max(MIN_KEPT));
    }
}

#[cfg(test)]
mod tests {
    use super::{shrink_when_sparse, FastMap};

    #[test]
    fn a_drained_map_gives_its_room_back_and_a_full_one_keeps_it() {
        let mut map: FastMap<u64, u64> = FastMap::default();
        map.extend((0..100_000).map(|n| (n, n)));
        let grown = map.capacity();
        for n in 0..50_000 {
            map.remove(&n);
            shrink_when_sparse(&mut map);
        }
        // Not shrunk to twice what it holds (a removal may leave a tombstone, which the map's
        // capacity does not count, so the figure itself falls a little).
        assert!(
            map.capacity() > 75_000,
            "half full: kept ({})",
            map.capacity()
        );
        for n in 50_000..99_990 {
            map.remove(&n);
            shrink_when_sparse(&mut map);
        }
        assert!(
            map.capacity() < 1_000,
            "drained: {} of {grown}",
            map.capacity()
        );
        assert_eq!(map.len(), 10);
        assert_eq!(map.get(&99_995), Some(&99_995));
    }
}
