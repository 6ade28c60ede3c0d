//! Looking inside and starting over, on the embedded engine.

use super::Embedded;
use crate::backend::{
    Answer, Inspection, RelayWaiting, ResetScope, SubscriptionActivity, TopicActivity,
};
use crate::engine::queue::inspect::{GroupView, Peek, QueueOverview, StateFilter};
use crate::engine::topic::captured::CapturedMessage;

impl Inspection for Embedded {
    fn queue_overviews(&self) -> Answer<'_, Vec<QueueOverview>> {
        self.reading(move |engine| {
            let mut overviews = Vec::new();
            for name in engine.queues.list("") {
                // A queue deleted since the listing is simply left out.
                let Ok(entry) = engine.queues.get(&name) else {
                    continue;
                };
                {
                    let mut queue = entry.lock();
                    queue.tick(self.clock.now());
                    overviews.push(QueueOverview {
                        shard: self.shard(),
                        ..queue.overview()
                    });
                }
                self.log_expired(&entry);
            }
            Ok(overviews)
        })
    }

    fn peek_messages<'a>(
        &'a self,
        queue: &'a str,
        filter: StateFilter,
        limit: usize,
    ) -> Answer<'a, Peek> {
        self.reading(move |engine| {
            let entry = engine.queues.get(queue)?;
            let peeked = {
                let mut queue = entry.lock();
                queue.tick(self.clock.now());
                queue.peek(filter, limit)
            };
            self.log_expired(&entry);
            Ok(peeked)
        })
    }

    fn queue_groups<'a>(&'a self, queue: &'a str, limit: usize) -> Answer<'a, Vec<GroupView>> {
        self.reading(move |engine| {
            let entry = engine.queues.get(queue)?;
            let groups = {
                let mut queue = entry.lock();
                queue.tick(self.clock.now());
                queue.groups(limit)
            };
            self.log_expired(&entry);
            Ok(groups)
        })
    }

    fn subscription_activity(&self) -> Answer<'_, Vec<SubscriptionActivity>> {
        self.reading(move |engine| {
            let activity = engine
                .topics
                .list_subscriptions(None)?
                .into_iter()
                .map(|(topic_arn, subscription)| {
                    let mut recent = subscription.recent.list();
                    if subscription.is_webhook() {
                        recent.extend(engine.webhooks.recent_attempts(&subscription.arn));
                        // Stable: a publish's note stays ahead of its attempts at one instant.
                        recent.sort_by_key(|note| note.at);
                    }
                    SubscriptionActivity {
                        topic_arn,
                        last_error: engine.webhooks.last_error(&subscription.arn),
                        counts: subscription.recent.counts(),
                        subscription,
                        recent,
                    }
                })
                .collect();
            Ok(activity)
        })
    }

    fn confirmation_token<'a>(&'a self, subscription_arn: &'a str) -> Answer<'a, Option<String>> {
        self.reading(move |engine| {
            Ok(engine
                .webhooks
                .confirmation_token(subscription_arn, self.clock.now()))
        })
    }

    fn topic_activity(&self) -> Answer<'_, Vec<TopicActivity>> {
        self.reading(move |engine| Ok(engine.topics.activity()))
    }

    fn reset(&self, scope: ResetScope) -> Answer<'_, ()> {
        self.changing(move |engine| {
            self.captured.clear();
            match scope {
                ResetScope::Messages => engine.reset_messages(),
                ResetScope::Everything => {
                    for entry in engine.reset_everything(self.clock.now())? {
                        // Parked long polls notice the queue is gone and return empty.
                        entry.waiters.notify_waiters();
                    }
                }
            }
            Ok(())
        })
    }

    fn captured_messages(&self) -> Answer<'_, crate::backend::captured::Listed> {
        let listed = self.captured.list();
        Box::pin(async move { Ok(listed) })
    }

    fn capture(&self, messages: Vec<CapturedMessage>) -> Answer<'_, ()> {
        self.captured.keep(messages);
        Box::pin(async { Ok(()) })
    }

    fn relay_waiting(&self) -> Answer<'_, Vec<RelayWaiting>> {
        let from = self.shard();
        let waiting = (self.engine.relay.depths().into_iter())
            .map(|(to, parcels)| RelayWaiting { from, to, parcels })
            .collect();
        Box::pin(std::future::ready(Ok(waiting)))
    }

    fn forget_captured(&self, ids: Vec<u64>) -> Answer<'_, ()> {
        self.captured.forget(&ids);
        Box::pin(async { Ok(()) })
    }
}
