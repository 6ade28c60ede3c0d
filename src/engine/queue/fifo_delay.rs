//! A FIFO queue's delay is retroactive, as AWS documents it ("changing the setting affects the
//! delay of messages already in the queue"); a standard queue's is not. Each message not yet
//! received is available from its enqueue time plus the queue's delay as it now is.

use super::stored::State;
use super::Queue;
use crate::engine::time::Timestamp;

impl Queue {
    /// After the queue's `DelaySeconds` went from `before` to what its configuration now says:
    /// a FIFO queue's messages never received are delayed, or made visible, accordingly (each
    /// change logged as the message's new state). Only messages enqueued within the longer of
    /// the two delays can change, so the work is bounded by 15 minutes of sends.
    pub(in crate::engine) fn delay_changed(&mut self, before: u32, now: Timestamp) {
        let delay = self.config.delay_seconds;
        if !self.config.fifo || delay == before {
            return;
        }
        let longer_ms = u64::from(before.max(delay)) * 1000;
        let since = Timestamp(now.millis().saturating_sub(longer_ms));
        let recent: Vec<u64> = (self.by_enqueue.range((since, 0)..))
            .map(|&(_, seq)| seq)
            .collect();
        for seq in recent {
            let Some(stored) = self.messages.get(&seq) else {
                continue;
            };
            if stored.message.receive_count > 0 || matches!(stored.state, State::InFlight(_)) {
                continue;
            }
            let until = stored.enqueued_at.plus_seconds(u64::from(delay));
            let state = match until > now {
                true => State::Delayed(until),
                false => State::Visible,
            };
            if state == stored.state {
                continue;
            }
            let Some(mut stored) = self.take_stored(seq) else {
                continue;
            };
            stored.state = state;
            self.restore_message(seq, stored);
            self.note_touch(seq);
        }
    }
}
