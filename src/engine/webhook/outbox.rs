//! Webhook deliveries waiting to be POSTed, being POSTed, or waiting to be retried.
//!
//! Every pending delivery sits in one time-ordered set (`due`), so finding the next work is
//! O(log n) whatever the backlog. Per subscription a lane counts its deliveries (the cap), and
//! for ordered subscriptions (FIFO topics, an Orderly extension) holds one queue per message
//! group: only a group's head is ever scheduled, so a failing message blocks its own group and
//! nothing else. Throttled lanes hand out send slots `1/maxReceivesPerSecond` apart; a
//! delivery that must wait is rescheduled once, to the slot it reserved. Pure: time is passed in.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use crate::engine::message::MessageAttributes;
use crate::engine::time::Timestamp;
use crate::engine::topic::delivery_policy::RetryPolicy;
use crate::engine::topic::recent::{DeliveryNote, Fate};
use crate::engine::FastMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Notification,
    SubscriptionConfirmation,
    UnsubscribeConfirmation,
}

impl Kind {
    /// The `Type` field and `x-amz-sns-message-type` header.
    pub fn wire_name(self) -> &'static str {
        match self {
            Kind::Notification => "Notification",
            Kind::SubscriptionConfirmation => "SubscriptionConfirmation",
            Kind::UnsubscribeConfirmation => "UnsubscribeConfirmation",
        }
    }
}

/// One message for one endpoint, formatted once; retries send the same bytes.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub kind: Kind,
    pub subscription_arn: Arc<str>,
    pub topic_arn: Arc<str>,
    pub endpoint: Arc<str>,
    pub message_id: Arc<str>,
    pub body: String,
    pub content_type: String,
    pub raw: bool,
    pub group_id: Option<String>,
    pub dedup_id: Option<String>,
    pub sequence_number: Option<u128>,
    /// Raw notifications: the attributes a dead-letter copy carries as SQS attributes.
    pub attributes: MessageAttributes,
    /// Raw notifications with more attributes than SQS takes: the envelope to dead-letter instead.
    pub fallback_envelope: Option<String>,
    pub dead_letter_arn: Option<String>,
    pub fifo_topic: bool,
    pub retry: RetryPolicy,
}

/// What the sender reports for one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx.
    Delivered,
    /// 5xx, timeouts, connection errors: retried per the policy.
    Retryable,
    /// 4xx and refused destinations: never retried.
    Permanent,
}

/// What became of a delivery after an attempt.
#[derive(Debug)]
pub enum Finished {
    Delivered,
    Retrying(Timestamp),
    /// Out of retries or permanently refused: the caller dead-letters or drops it.
    Failed(Arc<Delivery>),
    /// The subscription went away while the attempt ran.
    Gone,
}

/// One attempt handed to a sender.
#[derive(Clone, Debug)]
pub struct Attempt {
    pub id: u64,
    pub delivery: Arc<Delivery>,
    /// 1 for the first attempt.
    pub number: u32,
}

/// Counters per subscription, for the operator (nothing is dropped without being counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneStats {
    pub pending: usize,
    pub in_flight: usize,
    pub delivered: u64,
    pub retries: u64,
    pub dead_lettered: u64,
    pub dropped: u64,
    /// When the lane's next waiting attempt falls due (a retry's time, or a new delivery's).
    pub next_attempt: Option<Timestamp>,
}

/// What the log records of the outbox.
#[derive(Clone, Debug)]
pub enum OutboxChange {
    Queued {
        id: u64,
        delivery: Arc<Delivery>,
        lane: LanePolicy,
    },
    /// Delivered, or failed for good and dead-lettered or dropped.
    Done {
        id: u64,
    },
    SubscriptionRemoved {
        arn: Arc<str>,
    },
}

struct Item {
    delivery: Arc<Delivery>,
    attempts: u32,
    in_flight: bool,
    /// Its entry in `due`, while it has one.
    due_at: Option<Timestamp>,
    /// A throttle slot already reserved: send at that time without asking again.
    reserved: bool,
}

#[derive(Default)]
struct Lane {
    /// Notifications pending (queued, waiting or in flight); confirmations are not counted.
    ids: crate::engine::FastMap<u64, ()>,
    ordered: bool,
    groups: FastMap<String, VecDeque<u64>>,
    throttle: Option<u32>,
    next_slot: Timestamp,
    stats: LaneStats,
    /// What the last attempts came to.
    recent: VecDeque<DeliveryNote>,
    /// What went wrong with the last failed attempt, and when.
    last_error: Option<(Timestamp, Arc<str>)>,
}

pub struct Outbox {
    next_id: u64,
    items: FastMap<u64, Item>,
    due: BTreeSet<(Timestamp, u64)>,
    lanes: FastMap<Arc<str>, Lane>,
    /// Pending notifications per subscription before new ones are refused.
    pub max_pending: usize,
    /// Changes for the log, while one is attached.
    changes: Option<Vec<OutboxChange>>,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox {
            next_id: 1,
            items: FastMap::default(),
            due: BTreeSet::new(),
            lanes: FastMap::default(),
            max_pending: 100_000,
            changes: None,
        }
    }
}

/// How a subscription's lane delivers.
#[derive(Clone, Copy, Debug, Default)]
pub struct LanePolicy {
    /// One request in flight per message group, in publish order.
    pub ordered: bool,
    pub throttle: Option<u32>,
}

impl Outbox {
    /// Queues a delivery. A notification for a subscription already holding `max_pending` is
    /// handed back, for the caller to dead-letter or count as dropped.
    pub fn push(
        &mut self,
        delivery: Delivery,
        lane_policy: LanePolicy,
        now: Timestamp,
    ) -> Result<u64, Box<Delivery>> {
        let id = self.next_id;
        let delivery = Arc::new(delivery);
        match self.insert(id, delivery, lane_policy, false, now) {
            Ok(()) => {
                if let Some(changes) = &mut self.changes {
                    let delivery = self.items[&id].delivery.clone();
                    changes.push(OutboxChange::Queued {
                        id,
                        delivery,
                        lane: lane_policy,
                    });
                }
                Ok(id)
            }
            Err(refused) => Err(Box::new(
                Arc::try_unwrap(refused).unwrap_or_else(|shared| (*shared).clone()),
            )),
        }
    }

    /// Puts back a delivery from the log or a snapshot under its old id (never refused).
    pub fn restore(&mut self, id: u64, delivery: Arc<Delivery>, lane_policy: LanePolicy) {
        let _ = self.insert(id, delivery, lane_policy, true, Timestamp(0));
    }

    /// Starts keeping changes for the log.
    pub fn enable_log(&mut self) {
        self.changes.get_or_insert_with(Vec::new);
    }

    pub fn take_changes(&mut self) -> Vec<OutboxChange> {
        self.changes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Every pending delivery in id order (queue order), with its lane's policy.
    pub fn image(&self) -> Vec<(u64, Arc<Delivery>, LanePolicy)> {
        let mut out: Vec<_> = self
            .items
            .iter()
            .map(|(id, item)| {
                let lane = match item.delivery.kind {
                    Kind::Notification => self
                        .lanes
                        .get(&item.delivery.subscription_arn)
                        .map(|l| LanePolicy {
                            ordered: l.ordered,
                            throttle: l.throttle,
                        })
                        .unwrap_or_default(),
                    _ => LanePolicy::default(),
                };
                (*id, item.delivery.clone(), lane)
            })
            .collect();
        out.sort_by_key(|(id, _, _)| *id);
        out
    }

    /// Replays one logged change.
    pub fn apply_change(&mut self, change: OutboxChange) {
        match change {
            OutboxChange::Queued { id, delivery, lane } => self.restore(id, delivery, lane),
            OutboxChange::Done { id } => self.complete(id, Timestamp(0)),
            OutboxChange::SubscriptionRemoved { arn } => self.remove_subscription(&arn),
        }
    }

    fn insert(
        &mut self,
        id: u64,
        delivery: Arc<Delivery>,
        lane_policy: LanePolicy,
        restoring: bool,
        now: Timestamp,
    ) -> Result<(), Arc<Delivery>> {
        let notification = delivery.kind == Kind::Notification;
        let mut schedule = true;
        if notification {
            let lane = self
                .lanes
                .entry(delivery.subscription_arn.clone())
                .or_default();
            if lane.ids.len() >= self.max_pending && !restoring {
                // Counted by the caller (record_failure) once it knows where the copy went.
                return Err(delivery);
            }
            lane.ordered = lane_policy.ordered;
            lane.throttle = lane_policy.throttle;
            lane.ids.insert(id, ());
            if lane.ordered {
                let queue = lane
                    .groups
                    .entry(delivery.group_id.clone().unwrap_or_default())
                    .or_default();
                queue.push_back(id);
                // Behind an earlier message of its group: scheduled when that one is done.
                schedule = queue.len() == 1;
            }
        }
        self.next_id = self.next_id.max(id + 1);
        self.items.insert(
            id,
            Item {
                delivery,
                attempts: 0,
                in_flight: false,
                due_at: None,
                reserved: false,
            },
        );
        if schedule {
            self.schedule(id, now);
        }
        Ok(())
    }

    fn schedule(&mut self, id: u64, at: Timestamp) {
        if let Some(item) = self.items.get_mut(&id) {
            item.due_at = Some(at);
            self.due.insert((at, id));
        }
    }

    /// When the next delivery is due, if any is waiting.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.due.first().map(|(at, _)| *at)
    }

    /// Up to `limit` deliveries due by `now`, marked in flight.
    pub fn take_due(&mut self, now: Timestamp, limit: usize) -> Vec<Attempt> {
        let mut out = Vec::new();
        while out.len() < limit {
            let Some(&(at, id)) = self.due.first() else {
                break;
            };
            if at > now {
                break;
            }
            self.due.pop_first();
            let Some(item) = self.items.get_mut(&id) else {
                continue;
            };
            item.due_at = None;
            if item.delivery.kind == Kind::Notification && !item.reserved {
                if let Some(lane) = self.lanes.get_mut(&item.delivery.subscription_arn) {
                    if let Some(rate) = lane.throttle {
                        let interval = (1000 / rate as u64).max(1);
                        let slot = lane.next_slot.max(now);
                        lane.next_slot = slot.plus_millis(interval);
                        if slot > now {
                            item.reserved = true;
                            item.due_at = Some(slot);
                            self.due.insert((slot, id));
                            continue;
                        }
                    }
                }
            }
            item.reserved = false;
            item.in_flight = true;
            item.attempts += 1;
            out.push(Attempt {
                id,
                delivery: item.delivery.clone(),
                number: item.attempts,
            });
        }
        out
    }

    /// Hands back an attempt taken but never made (its records were not durable yet, or this
    /// node may no longer lead): due again at `now`, its attempt not counted.
    pub fn put_back(&mut self, attempt: &Attempt, now: Timestamp) {
        let Some(item) = self.items.get_mut(&attempt.id) else {
            return;
        };
        if !item.in_flight || item.attempts != attempt.number {
            return;
        }
        item.in_flight = false;
        item.attempts -= 1;
        self.schedule(attempt.id, now);
    }

    /// Records an attempt's outcome.
    pub fn finish(&mut self, id: u64, outcome: Outcome, now: Timestamp) -> Finished {
        let Some(item) = self.items.get_mut(&id) else {
            return Finished::Gone;
        };
        item.in_flight = false;
        let delivery = item.delivery.clone();
        let retry_delay = match outcome {
            Outcome::Retryable => delivery.retry.delay_before(item.attempts),
            _ => None,
        };
        let fate = match (outcome, retry_delay) {
            (Outcome::Delivered, _) => Fate::Delivered,
            (Outcome::Retryable, Some(_)) => Fate::Retrying,
            _ => Fate::GaveUp,
        };
        if let Some(lane) = self.lanes.get_mut(&delivery.subscription_arn) {
            match fate {
                Fate::Delivered => lane.stats.delivered += 1,
                Fate::Retrying => lane.stats.retries += 1,
                _ => {}
            }
            let note = DeliveryNote {
                message_id: delivery.message_id.clone(),
                at: now,
                fate,
            };
            crate::engine::topic::recent::push(&mut lane.recent, note);
        }
        match (fate, retry_delay) {
            (Fate::Delivered, _) => {
                self.complete(id, now);
                Finished::Delivered
            }
            (Fate::Retrying, Some(delay)) => {
                let at = now.plus_millis(delay);
                self.schedule(id, at);
                Finished::Retrying(at)
            }
            _ => {
                self.complete(id, now);
                Finished::Failed(delivery)
            }
        }
    }

    /// Removes a finished delivery; in an ordered lane the next of its group becomes due.
    fn complete(&mut self, id: u64, now: Timestamp) {
        let Some(item) = self.items.remove(&id) else {
            return;
        };
        if let Some(changes) = &mut self.changes {
            changes.push(OutboxChange::Done { id });
        }
        if let Some(at) = item.due_at {
            self.due.remove(&(at, id));
        }
        if item.delivery.kind != Kind::Notification {
            return;
        }
        let Some(lane) = self.lanes.get_mut(&item.delivery.subscription_arn) else {
            return;
        };
        lane.ids.remove(&id);
        if !lane.ordered {
            return;
        }
        let group = item.delivery.group_id.clone().unwrap_or_default();
        let next = lane.groups.get_mut(&group).and_then(|queue| {
            queue.retain(|other| *other != id);
            queue.front().copied()
        });
        match next {
            Some(next) => self.schedule(next, now),
            None => {
                lane.groups.remove(&group);
            }
        }
    }

    /// Counts a failed notification as dead-lettered or dropped.
    pub fn record_failure(&mut self, subscription_arn: &str, dead_lettered: bool) {
        let lane = self.lanes.entry(subscription_arn.into()).or_default();
        if dead_lettered {
            lane.stats.dead_lettered += 1;
        } else {
            lane.stats.dropped += 1;
        }
    }

    /// Forgets a subscription's notifications (it was unsubscribed or expired); its
    /// confirmation messages still go out.
    pub fn remove_subscription(&mut self, subscription_arn: &str) {
        let Some(lane) = self.lanes.remove(subscription_arn) else {
            return;
        };
        if let Some(changes) = &mut self.changes {
            changes.push(OutboxChange::SubscriptionRemoved {
                arn: subscription_arn.into(),
            });
        }
        for id in lane.ids.keys() {
            if let Some(item) = self.items.remove(id) {
                if let Some(at) = item.due_at {
                    self.due.remove(&(at, *id));
                }
            }
        }
    }

    /// Counters for one subscription.
    pub fn stats(&self, subscription_arn: &str) -> LaneStats {
        let Some(lane) = self.lanes.get(subscription_arn) else {
            return LaneStats::default();
        };
        let items = || lane.ids.keys().filter_map(|id| self.items.get(id));
        LaneStats {
            pending: lane.ids.len(),
            in_flight: items().filter(|i| i.in_flight).count(),
            next_attempt: items()
                .filter(|i| !i.in_flight)
                .filter_map(|i| i.due_at)
                .min(),
            ..lane.stats
        }
    }

    /// Keeps what went wrong with an attempt (not logged: a restart forgets it). A lane is made
    /// for it only when `subscribed` (a confirmation's error, before any notification); never
    /// for a subscription that is gone, which would leave its lane behind for good.
    pub fn note_error(
        &mut self,
        subscription_arn: &str,
        error: &str,
        subscribed: bool,
        now: Timestamp,
    ) {
        let lane = if subscribed {
            Some(self.lanes.entry(subscription_arn.into()).or_default())
        } else {
            self.lanes.get_mut(subscription_arn)
        };
        if let Some(lane) = lane {
            lane.last_error = Some((now, error.into()));
        }
    }

    pub fn last_error(&self, subscription_arn: &str) -> Option<(Timestamp, Arc<str>)> {
        self.lanes.get(subscription_arn)?.last_error.clone()
    }

    /// What the subscription's last webhook attempts came to, oldest first.
    pub fn recent(&self, subscription_arn: &str) -> Vec<DeliveryNote> {
        self.lanes
            .get(subscription_arn)
            .map(|lane| lane.recent.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every subscription with counters.
    pub fn all_stats(&self) -> Vec<(Arc<str>, LaneStats)> {
        // A lane kept only for a confirmation's error has had no traffic: not listed.
        let mut out: Vec<_> = self
            .lanes
            .keys()
            .map(|arn| (arn.clone(), self.stats(arn)))
            .filter(|(_, stats)| *stats != LaneStats::default())
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Deliveries held, confirmations included.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests;
