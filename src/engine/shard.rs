//! Which shard a queue or topic belongs to. The key space is cut into a fixed number of shards
//! when a database is first used; each shard has an engine of its own, and a key's shard never
//! changes, so the function must give the same answer on every build and machine: the first
//! eight bytes of the key's SHA-256, modulo the number of shards.

use sha2::{Digest, Sha256};

/// One shard of a key space cut into `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub number: u32,
    pub count: u32,
}

impl Shard {
    /// A key space of one shard: the engine holds everything (a data directory, or a database
    /// of one shard).
    pub const WHOLE: Shard = Shard {
        number: 0,
        count: 1,
    };

    /// The shard of `count` that holds `key` (a queue's or topic's key, as the engine names it).
    pub fn of(count: u32, key: &str) -> u32 {
        if count <= 1 {
            return 0;
        }
        let digest = Sha256::digest(key.as_bytes());
        let head = u64::from_be_bytes(digest[..8].try_into().expect("eight bytes"));
        (head % u64::from(count)) as u32
    }

    /// The shard that holds `key`, when it is not this one.
    pub fn elsewhere(&self, key: &str) -> Option<u32> {
        let shard = Shard::of(self.count, key);
        (shard != self.number).then_some(shard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_shard_is_fixed_and_keys_spread_over_every_shard() {
        // Fixed by the function itself: a change here would move stored queues to other shards.
        assert_eq!(Shard::of(32, "prices.fifo"), Shard::of(32, "prices.fifo"));
        assert_eq!(Shard::of(1, "anything"), 0);
        let mut counts = [0u32; 32];
        for i in 0..32_000 {
            counts[Shard::of(32, &format!("queue-{i}")) as usize] += 1;
        }
        for (shard, count) in counts.iter().enumerate() {
            assert!(
                (800..1_200).contains(count),
                "shard {shard} holds {count} of 32,000 keys"
            );
        }
        let whole = Shard::WHOLE;
        assert_eq!(whole.elsewhere("prices.fifo"), None);
        let home = Shard::of(4, "prices.fifo");
        let here = Shard {
            number: home,
            count: 4,
        };
        assert_eq!(here.elsewhere("prices.fifo"), None);
        let there = Shard {
            number: (home + 1) % 4,
            count: 4,
        };
        assert_eq!(there.elsewhere("prices.fifo"), Some(home));
    }

    #[test]
    fn the_function_gives_what_it_gave_when_data_was_first_cut() {
        // Stored shards depend on these (computed apart, with Python's hashlib).
        assert_eq!(Shard::of(32, "orders.fifo"), 4);
        assert_eq!(Shard::of(7, "orders.fifo"), 6);
        assert_eq!(Shard::of(32, "prices.fifo"), 27);
        assert_eq!(Shard::of(32, "us-west-2:111111111111:orders.fifo"), 14);
    }
}
