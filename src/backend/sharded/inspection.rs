//! Looking inside over shards: each queue's own shard, listings gathered in one engine's
//! order (a shard another node leads asked of that node); a reset resets every shard, each at
//! its leader. Captured messages are shared by the shards (shard 0 answers).

use super::{on, Sharded};
use crate::backend::Work;
use crate::backend::{
    captured, Answer, Inspection, LedHere, RelayWaiting, ResetScope, SubscriptionActivity,
    TopicActivity,
};
use crate::backend::{led_elsewhere, BackendError};
use crate::engine::queue::inspect::{GroupView, Peek, QueueOverview, StateFilter};
use crate::engine::topic::captured::CapturedMessage;

/// Longest a reset waits for one shard another node leads (its leader found, and reset).
const RESET_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

impl Inspection for Sharded {
    fn queue_overviews(&self) -> Answer<'_, Vec<QueueOverview>> {
        Box::pin(async move {
            // Answered here, whatever it reads of other nodes' shards (`read_all`).
            led_elsewhere::touched_here();
            let mut overviews = Vec::new();
            for n in 0..self.count() {
                overviews.extend(self.queue_overviews_of(n).await?);
            }
            overviews.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(overviews)
        })
    }

    fn peek_messages<'a>(
        &'a self,
        queue: &'a str,
        filter: StateFilter,
        limit: usize,
    ) -> Answer<'a, Peek> {
        on(self.of_key(queue), move |shard| {
            shard.peek_messages(queue, filter, limit)
        })
    }

    fn queue_groups<'a>(&'a self, queue: &'a str, limit: usize) -> Answer<'a, Vec<GroupView>> {
        on(self.of_key(queue), move |shard| {
            shard.queue_groups(queue, limit)
        })
    }

    fn subscription_activity(&self) -> Answer<'_, Vec<SubscriptionActivity>> {
        Box::pin(async move {
            // Answered here, whatever it reads of other nodes' shards (`read_all`).
            led_elsewhere::touched_here();
            let mut activity = Vec::new();
            for n in 0..self.count() {
                activity.extend(self.subscription_activity_of(n).await?);
            }
            // Stable: each topic's subscriptions keep their order.
            activity.sort_by(|a, b| {
                self.topic_key(&a.topic_arn)
                    .cmp(self.topic_key(&b.topic_arn))
            });
            Ok(activity)
        })
    }

    fn confirmation_token<'a>(&'a self, subscription_arn: &'a str) -> Answer<'a, Option<String>> {
        on(self.of_topic_arn(subscription_arn), move |shard| {
            shard.confirmation_token(subscription_arn)
        })
    }

    fn topic_activity(&self) -> Answer<'_, Vec<TopicActivity>> {
        Box::pin(async move {
            let mut activity = self.gather(|shard| shard.topic_activity()).await?;
            activity.sort_by(|a, b| self.topic_key(&a.arn).cmp(self.topic_key(&b.arn)));
            Ok(activity)
        })
    }

    fn reset(&self, scope: ResetScope) -> Answer<'_, ()> {
        Box::pin(async move {
            // What crosses between shards of this node lands first, so no copy made before the
            // reset arrives after (what another node's shards send is not waited for); not
            // waited for past a bound, as publishing that goes on may never let it settle.
            // Without other nodes to ask, every shard or none: refused before any is reset
            // while another node leads one.
            let Some(remote) = &self.elsewhere else {
                let shards = (0..self.count())
                    .map(|n| self.read_across(n))
                    .collect::<Result<Vec<_>, _>>()?;
                let _ = tokio::time::timeout(super::RESET_WAITS_FOR_CARRYING, self.carried()).await;
                for shard in shards {
                    shard.reset(scope).await?;
                }
                return Ok(());
            };
            let _ = tokio::time::timeout(super::RESET_WAITS_FOR_CARRYING, self.carried()).await;
            // Each shard at its leader; one that could not be reset is named, and the others
            // are reset all the same.
            let mut failed = Vec::new();
            for n in 0..self.count() {
                let reset = match self.slot(n) {
                    Some(shard) => shard.reset(scope).await,
                    None => (tokio::time::timeout(RESET_WAIT, remote.reset(n, scope)).await)
                        .unwrap_or_else(|_| {
                            Err(BackendError::Unconfirmed(format!(
                                "its leader did not answer within {} s",
                                RESET_WAIT.as_secs()
                            )))
                        }),
                };
                if let Err(error) = reset {
                    failed.push(format!("shard {n}: {error}"));
                }
            }
            if failed.is_empty() {
                return Ok(());
            }
            // A shard asked of another node may have been reset all the same (its answer lost).
            Err(BackendError::Unconfirmed(format!(
                "not every shard is known to be reset: {}",
                failed.join("; ")
            )))
        })
    }

    fn captured_messages(&self) -> Answer<'_, captured::Listed> {
        on(self.shard(0), move |shard| shard.captured_messages())
    }

    fn capture(&self, messages: Vec<CapturedMessage>) -> Answer<'_, ()> {
        on(self.shard(0), move |shard| shard.capture(messages))
    }

    fn forget_captured(&self, ids: Vec<u64>) -> Answer<'_, ()> {
        on(self.shard(0), move |shard| shard.forget_captured(ids))
    }

    fn led_here(&self) -> Answer<'_, LedHere> {
        Box::pin(async move {
            let mut queues = self.gather_here(|shard| shard.queue_overviews()).await?;
            queues.sort_by(|a, b| a.name.cmp(&b.name));
            let mut topics = self.gather_here(|shard| shard.topic_activity()).await?;
            topics.sort_by(|a, b| self.topic_key(&a.arn).cmp(self.topic_key(&b.arn)));
            let mut subscriptions = self.gather_here(|s| s.subscription_activity()).await?;
            subscriptions.sort_by(|a, b| {
                self.topic_key(&a.topic_arn)
                    .cmp(self.topic_key(&b.topic_arn))
            });
            Ok(LedHere {
                queues,
                topics,
                subscriptions,
            })
        })
    }

    fn relay_waiting(&self) -> Answer<'_, Vec<RelayWaiting>> {
        Box::pin(self.gather_here(|shard| shard.relay_waiting()))
    }

    fn fates_untold(&self) -> usize {
        self.fates_untold.untold()
    }
}
