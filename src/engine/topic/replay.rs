//! A subscription's replay of the topic's archive: the checks ReplayPolicy gets when it is
//! set, and the replay still to run or just run.

use super::archive::Replay;
use super::{Subscription, Topic};
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::time::Timestamp;

impl Topic {
    /// A subscription's replay still to run, with the subscription as it is now: `None` if it
    /// asked for none or its replay ran. NotFound if there is no such subscription.
    pub fn pending_replay(
        &self,
        subscription_arn: &str,
    ) -> EngineResult<Option<(std::sync::Arc<Subscription>, Replay)>> {
        let subscription = self
            .subscriptions
            .iter()
            .find(|s| &*s.arn == subscription_arn)
            .ok_or_else(|| EngineError::NotFound("Subscription does not exist".into()))?;
        let replay = subscription
            .replay
            .clone()
            .filter(|r| r.status == "Pending");
        Ok(replay.map(|replay| (subscription.clone(), replay)))
    }

    /// Marks a subscription's replay as run. With an EndingPoint the subscription stops after
    /// the replay (AWS's model).
    pub fn complete_replay(&mut self, subscription_arn: &str, replay: &Replay) {
        let Some(index) = self
            .subscriptions
            .iter()
            .position(|s| &*s.arn == subscription_arn)
        else {
            return;
        };
        let mut updated = (*self.subscriptions[index]).clone();
        updated.replay = Some(Replay {
            status: "Completed",
            ..replay.clone()
        });
        updated.live = replay.end.is_none();
        self.subscriptions[index] = std::sync::Arc::new(updated);
    }

    /// At most 200 subscriptions of a topic may carry a filter policy.
    pub fn check_filter_count(&self, subscription: &Subscription) -> EngineResult<()> {
        if subscription.filter.is_none() {
            return Ok(());
        }
        let others = self
            .subscriptions
            .iter()
            .filter(|s| s.filter.is_some() && s.arn != subscription.arn)
            .count();
        if others >= super::filter::MAX_POLICIES_PER_TOPIC {
            return Err(EngineError::FilterPolicyLimitExceeded(
                "Filter policy limit exceeded: a topic can have at most 200 subscriptions with filter policies".into(),
            ));
        }
        Ok(())
    }

    /// A subscription's ReplayPolicy must start inside this topic's archive.
    pub fn check_replay(
        &self,
        subscription: &Subscription,
        prefix: &str,
        now: Timestamp,
    ) -> EngineResult<()> {
        let Some(replay) = &subscription.replay else {
            return Ok(());
        };
        let invalid = |reason: &str| {
            EngineError::InvalidParameter(format!(
                "Invalid parameter: {prefix}ReplayPolicy: {reason}"
            ))
        };
        let archive = self
            .archive
            .as_ref()
            .ok_or_else(|| invalid("the topic has no ArchivePolicy"))?;
        if replay.start < archive.beginning(now) || replay.start > now {
            return Err(invalid(
                "StartingPoint must be between BeginningArchiveTime and now",
            ));
        }
        Ok(())
    }
}
