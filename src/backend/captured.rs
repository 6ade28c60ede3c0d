//! What the captured protocols' endpoints would have received (`engine::topic::captured`):
//! email, email-json, sms, application, lambda and firehose subscriptions' messages, email
//! endpoints' confirmations, and Publish to a phone number. The newest `KEPT` of them are kept
//! (older ones are dropped and counted), for `GET /_orderly/sns/deliveries` and LocalStack's
//! `/_aws/sns/sms-messages`; a reset or a DELETE forgets them. The embedded backend keeps them
//! here, in memory (a restart empties it); with the log in a database, the leader's are listed
//! through any node.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::engine::topic::captured::CapturedMessage;

/// Messages kept, across all endpoints.
pub const KEPT: usize = 10_000;

/// Captured messages, oldest first, each with the id `forget` takes; and how many were
/// dropped for room.
pub type Listed = (Vec<(u64, CapturedMessage)>, u64);

#[derive(Default)]
pub struct CapturedMessages {
    inner: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    messages: VecDeque<(u64, CapturedMessage)>,
    next_id: u64,
    /// Dropped to stay within `KEPT`, since the start.
    dropped: u64,
}

impl CapturedMessages {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn keep(&self, records: impl IntoIterator<Item = CapturedMessage>) {
        let mut kept = self.kept();
        for record in records {
            if kept.messages.len() == KEPT {
                kept.messages.pop_front();
                kept.dropped += 1;
            }
            kept.next_id += 1;
            let id = kept.next_id;
            kept.messages.push_back((id, record));
        }
    }

    pub fn list(&self) -> Listed {
        let kept = self.kept();
        (kept.messages.iter().cloned().collect(), kept.dropped)
    }

    pub fn forget(&self, ids: &[u64]) {
        self.kept().messages.retain(|(id, _)| !ids.contains(id));
    }

    pub fn clear(&self) {
        self.kept().messages.clear();
    }
}
