//! Which live node should lead each shard: a function of the shard count and the live nodes'
//! names alone, so every node computes the same answer from the same list without asking
//! anyone. Rendezvous hashing with a bound on load: each shard ranks the nodes by a hash of
//! (node, shard), and goes to the first in its ranking that leads fewer than its share (the
//! shard count over the node count, one more for as many nodes as the division leaves over).
//! The bound keeps the spread within one shard of even, where plain rendezvous hashing leaves some nodes with twice the shards of
//! others at a few dozen shards; the ranking keeps most shards where they were when a node
//! joins or leaves.

use sha2::{Digest, Sha256};

/// How much `node` wants `shard`: the first eight bytes of SHA-256 over both.
fn weight(node: &str, shard: u32) -> u64 {
    let mut hash = Sha256::new();
    hash.update(node.as_bytes());
    hash.update([0]);
    hash.update(shard.to_be_bytes());
    u64::from_be_bytes(hash.finalize()[..8].try_into().expect("eight bytes"))
}

/// For each of `shards` shards, the index in `nodes` of the node that should lead it; empty
/// when there are no nodes. `nodes` is taken as a set: its order changes nothing.
pub fn place(shards: u32, nodes: &[String]) -> Vec<usize> {
    if nodes.is_empty() {
        return Vec::new();
    }
    // Every node leads `floor` shards, and `extra` of them one more.
    let (floor, extra) = (shards as usize / nodes.len(), shards as usize % nodes.len());
    let mut above_floor = 0;
    let mut load = vec![0usize; nodes.len()];
    (0..shards)
        .map(|shard| {
            let mut ranked: Vec<usize> = (0..nodes.len()).collect();
            // Ties (equal weights) fall to the name, so the order of `nodes` never matters.
            ranked.sort_by(|&a, &b| {
                let (wa, wb) = (weight(&nodes[a], shard), weight(&nodes[b], shard));
                wb.cmp(&wa).then_with(|| nodes[a].cmp(&nodes[b]))
            });
            let chosen = ranked
                .into_iter()
                .find(|&node| load[node] < floor || (load[node] == floor && above_floor < extra))
                .expect("the shares add up to the shards");
            if load[chosen] == floor {
                above_floor += 1;
            }
            load[chosen] += 1;
            chosen
        })
        .collect()
}

/// The shards `node` should lead among `nodes` (which include it), in order.
pub fn share_of(node: &str, shards: u32, nodes: &[String]) -> Vec<u32> {
    let Some(me) = nodes.iter().position(|n| n == node) else {
        return Vec::new();
    };
    place(shards, nodes)
        .into_iter()
        .zip(0..)
        .filter(|(leader, _)| *leader == me)
        .map(|(_, shard)| shard)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("node-{i}")).collect()
    }

    fn leaders(shards: u32, nodes: &[String]) -> Vec<String> {
        place(shards, nodes)
            .into_iter()
            .map(|i| nodes[i].clone())
            .collect()
    }

    #[test]
    fn shards_spread_within_one_of_even() {
        for (shards, count) in [(32, 1), (32, 2), (32, 3), (32, 5), (7, 3), (3, 5), (1, 4)] {
            let nodes = names(count);
            let placed = place(shards, &nodes);
            assert_eq!(placed.len(), shards as usize);
            let loads: Vec<usize> = (0..count)
                .map(|n| placed.iter().filter(|&&p| p == n).count())
                .collect();
            let (least, most) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
            assert!(
                most - least <= 1,
                "{shards} shards on {count} nodes: {loads:?}"
            );
        }
        assert!(place(32, &[]).is_empty());
    }

    #[test]
    fn every_node_computes_the_same_placement_in_any_order() {
        let nodes = names(4);
        let mut reversed = nodes.clone();
        reversed.reverse();
        assert_eq!(leaders(32, &nodes), leaders(32, &reversed));
        let mut all: Vec<u32> = nodes.iter().flat_map(|n| share_of(n, 32, &nodes)).collect();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..32).collect::<Vec<_>>(),
            "each shard has one leader"
        );
        assert!(share_of("stranger", 32, &nodes).is_empty());
    }

    #[test]
    fn a_node_joining_or_leaving_moves_few_shards() {
        let moved = |before: &[String], after: &[String]| {
            let (a, b) = (leaders(32, before), leaders(32, after));
            a.iter().zip(&b).filter(|(x, y)| x != y).count()
        };
        // At best a fourth node takes 8 of 32; a plain modulus over the nodes would move 24.
        let (three, four) = (names(3), names(4));
        let joined = moved(&three, &four);
        assert!((8..=10).contains(&joined), "a join moved {joined} of 32");
        // A node leaving: its own shards move, and few others.
        let left = moved(&four, &three);
        assert!(left <= 10, "a leave moved {left} of 32");
        let gone: Vec<String> = vec![names(3)[0].clone(), names(3)[2].clone()];
        let lost = leaders(32, &names(3))
            .iter()
            .filter(|n| **n == names(3)[1])
            .count();
        let moved_by_loss = moved(&names(3), &gone);
        assert!(
            moved_by_loss <= lost + 3,
            "losing a node of {lost} shards moved {moved_by_loss}"
        );
    }
}
