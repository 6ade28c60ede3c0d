//! What each logged value hands the log when its guard is released: its own change
//! records, wrapped as the log's `Change`. Kept apart from the values, so that their records
//! need not know the log's whole set of changes.

use super::changes::Change;
use super::guard::Logged;
use super::mobile::Mobile;
use super::parcel::Parcels;
use super::queue::Queue;
use super::topic::changes::TopicChange;
use super::topic::Topic;
use super::webhook::outbox::Outbox;

impl Logged for Queue {
    fn start_logging(&mut self) {
        self.enable_log();
    }

    fn take_record(&mut self, _touched: bool) -> Option<Change> {
        let changes = self.take_changes();
        (!changes.is_empty()).then(|| Change::Queue {
            name: self.name.clone(),
            uid: self.uid,
            changes,
        })
    }

    fn recycle(&mut self, record: Change) {
        if let Change::Queue { changes, .. } = record {
            self.recycle_changes(changes);
        }
    }
}

impl Logged for Topic {
    fn start_logging(&mut self) {
        self.enable_log();
    }

    /// The changes the topic kept itself, then, if the guard's holder could change anything, its
    /// settings image; nothing once it is deleted (its deletion is the last word).
    fn take_record(&mut self, touched: bool) -> Option<Change> {
        let mut changes = self.take_changes();
        if self.deleted {
            return None;
        }
        if touched {
            changes.push(TopicChange::Settings(Box::new(self.image(false))));
        }
        (!changes.is_empty()).then(|| Change::Topic {
            name: self.name.clone(),
            changes,
        })
    }
}

impl Logged for Outbox {
    fn start_logging(&mut self) {
        self.enable_log();
    }

    fn take_record(&mut self, _touched: bool) -> Option<Change> {
        let changes = self.take_changes();
        (!changes.is_empty()).then_some(Change::Outbox(changes))
    }
}

impl Logged for Mobile {
    fn start_logging(&mut self) {
        self.enable_log();
    }

    fn take_record(&mut self, _touched: bool) -> Option<Change> {
        let changes = self.take_changes();
        (!changes.is_empty()).then_some(Change::Mobile(changes))
    }
}

impl Logged for Parcels {
    fn start_logging(&mut self) {
        self.enable_log();
    }

    fn take_record(&mut self, _touched: bool) -> Option<Change> {
        let changes = self.take_changes();
        (!changes.is_empty()).then_some(Change::Relay(changes))
    }
}
