//! Where the nodes scenario's queues and topics lie, and so which node serves each. A key's
//! shard is a hash of its name, and placement gives each node an even share of the shards,
//! not of the keys in them: 32 queues named at random fill about 20 of 32 shards, so the busier
//! of two nodes leads 18 of the queues on average (the busiest of three, 13), and that node
//! bounds what the nodes serve together, whatever each costs. The even layout (the default)
//! names each queue and each topic into a shard of the node its turn falls to, the queues
//! each into a shard of its own while there are shards enough, so the scenario measures what
//! the nodes do rather than how its names fell; the hashed layout keeps plain names. Each row's note says how many queues and topics the busiest node led.

use sha2::{Digest, Sha256};

/// How the scenario names its queues and topics (`--node-layout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// Queues and topics over the nodes in turn, each in the next shard of its node's (a
    /// topic in one none of its queues is in, where its node has one).
    Even,
    /// `nodes-{q}.fifo` and `nodes-topic-{t}.fifo`, wherever their hashes put them.
    Hashed,
}

/// The shard of `count` that holds `key`, as the server computes it (`engine::shard`): the
/// first eight bytes of the key's SHA-256, modulo the count. The bench's names are keys at
/// home (its requests are signed for the home region), so the key is the bare name.
pub fn shard_of(count: u32, key: &str) -> u32 {
    if count <= 1 {
        return 0;
    }
    let digest = Sha256::digest(key.as_bytes());
    let head = u64::from_be_bytes(digest[..8].try_into().expect("eight bytes"));
    (head % u64::from(count)) as u32
}

/// `{stem}-{n}.fifo` for the first n that lies in `shard` of `count`.
fn named_into(stem: &str, shard: u32, count: u32) -> String {
    (0u32..)
        .map(|n| format!("{stem}-{n}.fifo"))
        .find(|name| shard_of(count, name) == shard % count.max(1))
        .expect("some name lies in every shard")
}

/// The names of `queues` queues, with `led` the shards each node leads (none known: queue q
/// goes into shard q, modulo the shards).
pub fn queue_names(layout: Layout, queues: usize, shards: u32, led: &[Vec<u32>]) -> Vec<String> {
    (0..queues)
        .map(|q| match layout {
            Layout::Even => {
                let shard = match led {
                    [] => q as u32,
                    _ => {
                        let own = &led[q % led.len()];
                        own[(q / led.len()) % own.len()]
                    }
                };
                named_into(&format!("nodes-{q}"), shard, shards)
            }
            Layout::Hashed => format!("nodes-{q}.fifo"),
        })
        .collect()
}

/// The name of topic `t`, whose subscribed queues are `subscribed` of `queues`, with `led`
/// the shards each node leads.
pub fn topic_name(
    layout: Layout,
    t: usize,
    queues: &[String],
    subscribed: &[usize],
    shards: u32,
    led: &[Vec<u32>],
) -> String {
    if layout == Layout::Hashed || led.is_empty() {
        return format!("nodes-topic-{t}.fifo");
    }
    let taken: Vec<u32> = subscribed
        .iter()
        .map(|&q| shard_of(shards, &queues[q]))
        .collect();
    let own = &led[t % led.len()];
    let free: Vec<u32> = own.iter().copied().filter(|s| !taken.contains(s)).collect();
    // Every shard of the node holds one of the topic's queues only with very few shards.
    let choices = if free.is_empty() { own } else { &free };
    let shard = choices[(t / led.len()) % choices.len()];
    named_into(&format!("nodes-topic-{t}"), shard, shards)
}

/// Where the scenario's clients send each request (`--node-route`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Route {
    /// Through the benchmark's round-robin balancer, as one endpoint: each node serves the
    /// requests its connections bring and passes on those of shards it does not lead.
    Balancer,
    /// Straight to the node leading the queue's or topic's shard, as a client that knew the
    /// shards' leaders would: no request is passed on, so the nodes' cost of passing requests
    /// on is told apart from that of sharing the machine.
    Leader,
}

/// Which of the nodes leading `led` leads `key`'s shard.
pub fn leader_of(key: &str, shards: u32, led: &[Vec<u32>]) -> Option<usize> {
    let shard = shard_of(shards, key);
    led.iter().position(|own| own.contains(&shard))
}

/// How many of `keys` (queue or topic names) the node leading the most of them leads.
pub fn busiest(keys: &[String], shards: u32, led: &[Vec<u32>]) -> usize {
    led.iter()
        .map(|own| {
            keys.iter()
                .filter(|key| own.contains(&shard_of(shards, key)))
                .count()
        })
        .max()
        // No node said it leads any: count them all as one node's.
        .unwrap_or(keys.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_led_by_the_node_leading_its_shard() {
        let led = vec![vec![0, 2], vec![1, 3]];
        let queues = queue_names(Layout::Even, 4, 4, &led);
        let leaders: Vec<Option<usize>> = queues.iter().map(|q| leader_of(q, 4, &led)).collect();
        assert_eq!(leaders, [Some(0), Some(1), Some(0), Some(1)]);
        let nowhere = [vec![shard_of(4, "x.fifo") ^ 1]];
        assert_eq!(leader_of("x.fifo", 4, &nowhere), None);
    }

    #[test]
    fn the_shard_function_is_the_servers() {
        // The values the server's own test pins (`engine::shard`), and two computed apart.
        assert_eq!(shard_of(32, "orders.fifo"), 4);
        assert_eq!(shard_of(7, "orders.fifo"), 6);
        assert_eq!(shard_of(32, "prices.fifo"), 27);
        assert_eq!(shard_of(32, "nodes-0.fifo"), 13);
        assert_eq!(shard_of(6, "nodes-topic-0.fifo"), 4);
        assert_eq!(shard_of(1, "anything"), 0);
    }

    #[test]
    fn even_queues_fill_every_shard_once_and_hashed_ones_do_not() {
        let one = [(0..32).collect::<Vec<u32>>()];
        let even = queue_names(Layout::Even, 32, 32, &one);
        let mut shards: Vec<u32> = even.iter().map(|q| shard_of(32, q)).collect();
        shards.sort_unstable();
        assert_eq!(shards, (0..32).collect::<Vec<_>>());
        let hashed = queue_names(Layout::Hashed, 32, 32, &one);
        let mut filled: Vec<u32> = hashed.iter().map(|q| shard_of(32, q)).collect();
        filled.sort_unstable();
        filled.dedup();
        assert!(filled.len() < 32, "hashed names filled every shard");
        // Fewer shards than queues, none known to be led: each shard holds as many.
        let six = queue_names(Layout::Even, 32, 6, &[]);
        for shard in 0..6 {
            let held = six.iter().filter(|q| shard_of(6, q) == shard).count();
            assert!((5..=6).contains(&held), "shard {shard} holds {held}");
        }
    }

    #[test]
    fn even_queues_and_topics_take_turns_over_the_nodes_topics_apart_from_their_queues() {
        // Three nodes leading 11, 11 and 10 shards, interleaved.
        let led: Vec<Vec<u32>> = (0..3)
            .map(|n| (0..32).filter(|s| s % 3 == n).collect())
            .collect();
        let queues = queue_names(Layout::Even, 32, 32, &led);
        let mut shards: Vec<u32> = queues.iter().map(|q| shard_of(32, q)).collect();
        shards.sort_unstable();
        assert_eq!(shards, (0..32).collect::<Vec<_>>());
        // More shards than queues: the nodes still lead 11, 11 and 10 of them.
        let wide: Vec<Vec<u32>> = (0..3)
            .map(|n| (0..64).filter(|s| s % 3 == n).collect())
            .collect();
        let spread = queue_names(Layout::Even, 32, 64, &wide);
        assert_eq!(busiest(&spread, 64, &wide), 11);
        let topics: Vec<String> = (0..8)
            .map(|t| {
                let subscribed: Vec<usize> = (t..32).step_by(8).collect();
                let name = topic_name(Layout::Even, t, &queues, &subscribed, 32, &led);
                let shard = shard_of(32, &name);
                assert!(led[t % 3].contains(&shard), "topic {t} in {shard}");
                for q in subscribed {
                    assert_ne!(
                        shard_of(32, &queues[q]),
                        shard,
                        "topic {t} beside queue {q}"
                    );
                }
                name
            })
            .collect();
        assert_eq!(busiest(&topics, 32, &led), 3);
        assert_eq!(busiest(&queues, 32, &led), 11);
        let one = [(0..32).collect::<Vec<u32>>()];
        assert_eq!(busiest(&queues, 32, &one), 32);
        assert_eq!(busiest(&queues, 32, &[]), 32);
    }
}
