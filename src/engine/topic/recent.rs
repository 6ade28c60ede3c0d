//! Each subscription's last deliveries, for the inspection API: what became of the last few
//! messages published to it. Kept in memory only (a restart starts them empty) and bounded.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::engine::time::Timestamp;

/// Notes kept per subscription (and per webhook lane).
pub const KEPT: usize = 10;

/// What became of one message for one subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Stored in the subscribed queue.
    Queued,
    /// The queue refused it; stored in the subscription's dead-letter queue.
    DeadLettered,
    /// The filter policy did not match.
    FilteredOut,
    /// No queue took it.
    Failed,
    /// Handed to the webhook outbox (its attempts are noted by the outbox).
    ToWebhook,
    /// A webhook attempt succeeded.
    Delivered,
    /// A webhook attempt failed; tried again later.
    Retrying,
    /// Out of webhook retries, or refused for good.
    GaveUp,
}

impl Fate {
    pub fn name(self) -> &'static str {
        match self {
            Fate::Queued => "queued",
            Fate::DeadLettered => "deadLettered",
            Fate::FilteredOut => "filteredOut",
            Fate::Failed => "failed",
            Fate::ToWebhook => "toWebhook",
            Fate::Delivered => "delivered",
            Fate::Retrying => "retrying",
            Fate::GaveUp => "gaveUp",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryNote {
    pub message_id: Arc<str>,
    pub at: Timestamp,
    pub fate: Fate,
}

/// The last `KEPT` notes, oldest first.
#[derive(Debug, Default)]
pub struct Recent(Mutex<VecDeque<DeliveryNote>>);

impl Recent {
    pub fn note(&self, note: DeliveryNote) {
        let mut notes = self.0.lock().unwrap_or_else(|p| p.into_inner());
        push(&mut notes, note);
    }

    pub fn list(&self) -> Vec<DeliveryNote> {
        let notes = self.0.lock().unwrap_or_else(|p| p.into_inner());
        notes.iter().cloned().collect()
    }
}

/// Keeps at most `KEPT`, dropping the oldest.
pub fn push(notes: &mut VecDeque<DeliveryNote>, note: DeliveryNote) {
    if notes.len() == KEPT {
        notes.pop_front();
    }
    notes.push_back(note);
}

impl Clone for Recent {
    fn clone(&self) -> Self {
        let notes = self.0.lock().unwrap_or_else(|p| p.into_inner());
        Recent(Mutex::new(notes.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_few_are_kept() {
        let recent = Recent::default();
        for i in 0..KEPT as u64 + 3 {
            recent.note(DeliveryNote {
                message_id: i.to_string().into(),
                at: Timestamp(i),
                fate: Fate::Queued,
            });
        }
        let kept = recent.list();
        assert_eq!(kept.len(), KEPT);
        assert_eq!(&*kept[0].message_id, "3");
        assert_eq!(&*kept[KEPT - 1].message_id, (KEPT + 2).to_string());
    }
}
