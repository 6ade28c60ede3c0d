//! `POST /_orderly/reset`, for test suites that share one server: every message dropped
//! (queues, topics and subscriptions stay), or everything. Made of ordinary logged changes
//! inside one atomic group, so a crash keeps the whole reset or none of it.

use std::sync::Arc;

use super::{Engine, EngineResult, QueueEntry, Timestamp};

impl<W: Default> Engine<W> {
    /// Drops every queue's messages with its deduplication, attempt and purge histories,
    /// every topic's deduplication history and archive, and every pending webhook
    /// notification (confirmation requests still go out).
    pub fn reset_messages(&self) {
        let _atomic = self.atomic();
        let queues: Vec<_> = self.read().values().cloned().collect();
        for entry in &queues {
            entry.lock().reset();
        }
        let topics: Vec<_> = self.topics_read().values().cloned().collect();
        for entry in &topics {
            // Only the history changes; the topic logs that itself (no settings image).
            entry.lock().untouched().reset();
        }
        let mut outbox = self.outbox();
        for (arn, _) in outbox.all_stats() {
            outbox.remove_subscription(&arn);
        }
    }

    /// Deletes every queue and every topic (their subscriptions and deliveries go with them),
    /// every platform application and endpoint, and the SMS settings and numbers.
    /// Answers the deleted queues, whose long polls the caller wakes.
    pub fn reset_everything(&self, now: Timestamp) -> EngineResult<Vec<Arc<QueueEntry<W>>>> {
        let _atomic = self.atomic();
        let names: Vec<Arc<str>> = self.read().keys().cloned().collect();
        let mut deleted = Vec::with_capacity(names.len());
        for name in names {
            // A queue deleted meanwhile by a request is gone either way.
            if let Ok(entry) = self.delete_queue(&name, now) {
                deleted.push(entry);
            }
        }
        for arn in self.list_topics() {
            self.delete_topic(&arn)?;
        }
        self.mobile().clear();
        Ok(deleted)
    }
}
