//! What the recorded protocols' endpoints would have received (`engine::topic::recorded`):
//! email, email-json, sms, application, lambda and firehose subscriptions' messages, email
//! endpoints' confirmations, and Publish to a phone number. Kept in memory by the node that
//! published, the newest `KEPT` of them (older ones are dropped and counted), for
//! `GET /_orderly/sns/deliveries` and LocalStack's `/_aws/sns/sms-messages`. A restart, a
//! reset or a DELETE empties it.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::engine::topic::recorded::RecordedMessage;

/// Messages kept, across all endpoints.
pub const KEPT: usize = 10_000;

#[derive(Default)]
pub struct RecordedMessages {
    inner: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    messages: VecDeque<RecordedMessage>,
    /// Dropped to stay within `KEPT`, since the start.
    dropped: u64,
}

impl RecordedMessages {
    pub fn keep(&self, records: impl IntoIterator<Item = RecordedMessage>) {
        let mut kept = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for record in records {
            if kept.messages.len() == KEPT {
                kept.messages.pop_front();
                kept.dropped += 1;
            }
            kept.messages.push_back(record);
        }
    }

    /// Those `wanted` picks, oldest first, and how many were dropped for room.
    pub fn list(&self, wanted: impl Fn(&RecordedMessage) -> bool) -> (Vec<RecordedMessage>, u64) {
        let kept = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let listed = kept
            .messages
            .iter()
            .filter(|m| wanted(m))
            .cloned()
            .collect();
        (listed, kept.dropped)
    }

    /// Forgets those `unwanted` picks.
    pub fn forget(&self, unwanted: impl Fn(&RecordedMessage) -> bool) {
        let mut kept = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        kept.messages.retain(|m| !unwanted(m));
    }
}
