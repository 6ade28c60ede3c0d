//! The FIFO group index: each group's messages in send order, and the queue of groups whose
//! head message is visible ("ready"). Receive pops ready groups in the order they became
//! ready, so its cost never depends on how many messages or locked groups are queued.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::engine::fast_map::shrink_when_sparse;
use crate::engine::FastMap;

#[derive(Debug, Default)]
struct Group {
    /// Message sequence numbers in send order (in flight ones included). A sorted deque, not a
    /// set: sends append at the back and deletes are at or near the head (a group's in-flight
    /// messages are its first ones), and it costs a third of a B-tree's memory per message.
    members: VecDeque<u64>,
    /// Position in the ready queue while the group is ready.
    ticket: Option<u64>,
}

#[derive(Debug, Default)]
pub struct GroupIndex {
    groups: FastMap<Arc<str>, Group>,
    ready: BTreeMap<u64, Arc<str>>,
    next_ticket: u64,
}

impl GroupIndex {
    /// Adds a message to its group and returns the group's id as the index holds it, so that
    /// messages of one group share one allocation instead of one each; and whether the message
    /// is the group's head now (only then can the group's readiness change).
    pub fn add(&mut self, group: &Arc<str>, seq: u64) -> (Arc<str>, bool) {
        use std::collections::hash_map::Entry;
        let (held, g) = match self.groups.entry(group.clone()) {
            Entry::Occupied(o) => (o.key().clone(), o.into_mut()),
            Entry::Vacant(v) => (v.key().clone(), v.insert(Group::default())),
        };
        let members = &mut g.members;
        if members.back().is_none_or(|last| *last < seq) {
            members.push_back(seq);
        } else if let Err(at) = members.binary_search(&seq) {
            // Restored messages may arrive out of order.
            members.insert(at, seq);
        }
        let head = members.front() == Some(&seq);
        (held, head)
    }

    pub fn head(&self, group: &str) -> Option<u64> {
        self.groups.get(group)?.members.front().copied()
    }

    /// The group's messages from the head, in order.
    pub fn members(&self, group: &str) -> impl Iterator<Item = u64> + '_ {
        self.groups
            .get(group)
            .into_iter()
            .flat_map(|g| g.members.iter().copied())
    }

    /// Removes a message; an emptied group is forgotten.
    pub fn remove(&mut self, group: &str, seq: u64) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        if let Ok(at) = g.members.binary_search(&seq) {
            g.members.remove(at);
        }
        if g.members.is_empty() {
            if let Some(ticket) = g.ticket {
                self.ready.remove(&ticket);
            }
            self.groups.remove(group);
            shrink_when_sparse(&mut self.groups);
        }
    }

    /// Puts the group at the back of the ready queue unless it is there already.
    pub fn set_ready(&mut self, group: &str, ready: bool) {
        let Some((key, g)) = self.groups.get_key_value(group) else {
            return;
        };
        match (ready, g.ticket) {
            (true, None) => {
                let key = key.clone();
                let ticket = self.next_ticket;
                self.next_ticket += 1;
                self.ready.insert(ticket, key);
                self.groups.get_mut(group).expect("present").ticket = Some(ticket);
            }
            (false, Some(ticket)) => {
                self.ready.remove(&ticket);
                self.groups.get_mut(group).expect("present").ticket = None;
            }
            _ => {}
        }
    }

    /// Takes the group that has been ready longest out of the ready queue.
    pub fn pop_ready(&mut self) -> Option<Arc<str>> {
        let (_, group) = self.ready.pop_first()?;
        if let Some(g) = self.groups.get_mut(&group) {
            g.ticket = None;
        }
        Some(group)
    }

    /// Every group with its messages from the head, in no particular order.
    pub fn groups(&self) -> impl Iterator<Item = (&Arc<str>, &VecDeque<u64>)> {
        self.groups.iter().map(|(name, g)| (name, &g.members))
    }

    /// Groups holding messages.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    pub fn clear(&mut self) {
        self.groups.clear();
        self.ready.clear();
    }

    #[cfg(test)]
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_queue_keeps_first_ready_order() {
        let a: Arc<str> = "a".into();
        let b: Arc<str> = "b".into();
        let mut idx = GroupIndex::default();
        assert!(idx.add(&a, 1).1, "the first of a group is its head");
        idx.set_ready("a", true);
        idx.add(&b, 2);
        idx.set_ready("b", true);
        assert!(!idx.add(&a, 3).1, "one behind the head is not");
        idx.set_ready("a", true); // already ready: keeps its place
        assert_eq!(idx.pop_ready().as_deref(), Some("a"));
        assert_eq!(idx.pop_ready().as_deref(), Some("b"));
        assert_eq!(idx.pop_ready(), None);
        assert_eq!(idx.members("a").collect::<Vec<_>>(), vec![1, 3]);
        idx.add(&a, 2);
        idx.add(&a, 3);
        assert!(
            idx.add(&a, 0).1,
            "a restored message ahead of the head is the head"
        );
        idx.remove("a", 0);
        assert_eq!(
            idx.members("a").collect::<Vec<_>>(),
            vec![1, 2, 3],
            "late arrivals are placed in order, once"
        );
        idx.remove("a", 2);
        idx.set_ready("a", true);
        idx.remove("a", 1);
        idx.remove("a", 3);
        assert_eq!(
            idx.ready_len(),
            0,
            "an emptied group leaves the ready queue"
        );
    }
}
