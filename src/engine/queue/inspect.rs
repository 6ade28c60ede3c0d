//! Looking inside a queue without changing it (the inspection API, LocalStack's developer
//! endpoint, the console): counts by state, FIFO groups, and messages in the order they were
//! enqueued. Nothing here touches receive counts, visibility or group locks.

use std::collections::HashSet;

use super::{Order, Queue, State};
use crate::engine::message::Message;
use crate::engine::time::Timestamp;

/// A queue at a glance.
#[derive(Clone, Debug)]
pub struct QueueOverview {
    pub name: std::sync::Arc<str>,
    pub arn: std::sync::Arc<str>,
    pub fifo: bool,
    pub counts: super::Counts,
    /// FIFO: groups holding messages, and those locked by a message in flight.
    pub groups: usize,
    pub locked_groups: usize,
    /// When the longest-held message was enqueued (a FIFO dead-letter queue restarts it).
    pub oldest_enqueued_at: Option<Timestamp>,
    pub dead_letter_target_arn: Option<String>,
    /// Since the server started; a backend that cannot count leaves it zero.
    pub activity: super::Activity,
    /// The shard that holds it (0 with one shard); the queue's own state does not know it.
    pub shard: u32,
}

/// Bytes of bodies and attributes one peek answers at most (past it, the messages after are
/// left out), so looking at a deep queue of large messages cannot exhaust memory.
pub const PEEK_BYTES: usize = 8 << 20;

/// Which states a peek shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateFilter {
    pub visible: bool,
    pub in_flight: bool,
    pub delayed: bool,
}

impl StateFilter {
    pub const ALL: StateFilter = StateFilter {
        visible: true,
        in_flight: true,
        delayed: true,
    };

    fn admits(&self, state: &State) -> bool {
        match state {
            State::Visible => self.visible,
            State::InFlight(_) => self.in_flight,
            State::Delayed(_) => self.delayed,
        }
    }
}

/// One FIFO group: how many messages it holds and how many of them are in flight (a group
/// with one in flight is locked; the rest of its messages wait behind it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupView {
    pub group: std::sync::Arc<str>,
    pub messages: usize,
    pub in_flight: usize,
}

/// A copy of one stored message with its state (deadlines absolute).
#[derive(Clone, Debug)]
pub struct Peeked {
    pub message: Message,
    pub state: State,
}

/// What a peek found: the messages it answers, and whether `PEEK_BYTES` left later ones out.
#[derive(Clone, Debug, Default)]
pub struct Peek {
    pub messages: Vec<Peeked>,
    /// Messages the filter admits and the limit allows were left out for their size.
    pub truncated: bool,
}

impl Queue {
    /// The caller has run `tick(now)`, so states are current.
    pub fn overview(&self) -> QueueOverview {
        let (groups, locked_groups) = match &self.order {
            Order::Standard(_) => (0, 0),
            Order::Fifo(index) => {
                // In-flight messages are few next to the backlog; their groups are the locked ones.
                let locked: HashSet<&str> = self
                    .in_flight
                    .iter()
                    .filter_map(|(_, seq)| self.messages.get(seq))
                    .filter_map(|s| s.message.group_id.as_deref())
                    .collect();
                (index.len(), locked.len())
            }
        };
        QueueOverview {
            name: self.name.clone(),
            arn: self.arn.clone(),
            fifo: self.config.fifo,
            counts: self.counts(),
            groups,
            locked_groups,
            oldest_enqueued_at: self.by_enqueue.first().map(|(at, _)| *at),
            dead_letter_target_arn: self
                .config
                .redrive_policy
                .as_ref()
                .map(|p| p.dead_letter_target_arn.clone()),
            activity: self.activity,
            shard: 0,
        }
    }

    /// Up to `limit` FIFO groups, the one with the oldest head first (none for a standard
    /// queue). Reads every message of the groups it reports: for looking, not for serving.
    pub fn groups(&self, limit: usize) -> Vec<GroupView> {
        let Order::Fifo(index) = &self.order else {
            return Vec::new();
        };
        let mut heads: Vec<(u64, &std::sync::Arc<str>, &std::collections::VecDeque<u64>)> = index
            .groups()
            .filter_map(|(name, members)| Some((*members.front()?, name, members)))
            .collect();
        heads.sort_unstable_by_key(|(head, _, _)| *head);
        heads
            .into_iter()
            .take(limit)
            .map(|(_, name, members)| GroupView {
                group: name.clone(),
                messages: members.len(),
                in_flight: members
                    .iter()
                    .filter(|seq| {
                        self.messages
                            .get(seq)
                            .is_some_and(|s| matches!(s.state, State::InFlight(_)))
                    })
                    .count(),
            })
            .collect()
    }

    /// Up to `limit` messages in the states `filter` admits, oldest enqueued first (a FIFO
    /// queue's groups each in their order), and no more than `PEEK_BYTES` of them (always at
    /// least one). The caller has run `tick(now)`.
    pub fn peek(&self, filter: StateFilter, limit: usize) -> Peek {
        let mut bytes = 0;
        let mut peek = Peek::default();
        let admitted = (self.by_enqueue.iter())
            .filter_map(|(_, seq)| self.messages.get(seq))
            .filter(|stored| filter.admits(&stored.state))
            .take(limit);
        for stored in admitted {
            let first = bytes == 0;
            bytes += stored.message.size().max(1);
            if !first && bytes > PEEK_BYTES {
                peek.truncated = true;
                break;
            }
            peek.messages.push(Peeked {
                message: stored.message.clone(),
                state: stored.state,
            });
        }
        peek
    }
}
