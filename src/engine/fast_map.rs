//! The hash map of the hot paths.

/// Hash maps on the hot paths: foldhash is several times faster than SipHash on short keys
/// and still randomly seeded per process, so keys chosen by clients cannot force collisions.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
