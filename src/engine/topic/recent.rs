//! Each subscription's last deliveries, for the inspection API: what became of the last few
//! messages published to it, and how often each fate came up (for metrics). Kept in memory
//! only (a restart starts them empty) and bounded.

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
    /// Kept for the inspection API: a protocol Orderly records instead of delivering.
    Captured,
    /// Handed to the engine of the queue's shard, which places it.
    Relayed,
}

impl Fate {
    pub const ALL: [Fate; 10] = [
        Fate::Queued,
        Fate::DeadLettered,
        Fate::FilteredOut,
        Fate::Failed,
        Fate::ToWebhook,
        Fate::Delivered,
        Fate::Retrying,
        Fate::GaveUp,
        Fate::Captured,
        Fate::Relayed,
    ];

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
            Fate::Captured => "captured",
            Fate::Relayed => "relayed",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryNote {
    pub message_id: Arc<str>,
    pub at: Timestamp,
    pub fate: Fate,
}

#[derive(Clone, Debug, Default)]
struct Kept {
    /// The last `KEPT` notes, oldest first.
    notes: VecDeque<DeliveryNote>,
    /// Notes ever made, by fate (`Fate as usize`); a relayed copy is counted again by the fate
    /// it settles on, so no count ever goes down.
    counts: [u64; Fate::ALL.len()],
    /// Relayed copies whose fate is not known yet.
    unsettled: u64,
}

/// A subscription's last notes and its counts by fate.
#[derive(Debug, Default)]
pub struct Recent(Mutex<Kept>);

impl Recent {
    pub fn note(&self, note: DeliveryNote) {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        kept.counts[note.fate as usize] += 1;
        if note.fate == Fate::Relayed {
            kept.unsettled += 1;
        }
        push(&mut kept.notes, note);
    }

    /// The fate of a copy noted `Relayed`, now that the queue's shard placed it: its note (if
    /// still kept) changes to it, and it is counted. Nothing changes if no copy waits to settle.
    pub fn settle(&self, message_id: &str, fate: Fate) {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if kept.unsettled == 0 {
            return;
        }
        kept.unsettled -= 1;
        kept.counts[fate as usize] += 1;
        if let Some(note) = (kept.notes.iter_mut())
            .find(|note| note.fate == Fate::Relayed && &*note.message_id == message_id)
        {
            note.fate = fate;
        }
    }

    /// Drops the notes (`POST /_orderly/reset`: they speak of messages that are gone); the
    /// counts, which metrics read, stay.
    pub fn forget(&self) {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        kept.notes.clear();
    }

    pub fn list(&self) -> Vec<DeliveryNote> {
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        kept.notes.iter().cloned().collect()
    }

    /// How many notes of each fate were ever made (fates never noted left out).
    pub fn counts(&self) -> Vec<(Fate, u64)> {
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        Fate::ALL
            .iter()
            .map(|fate| (*fate, kept.counts[*fate as usize]))
            .filter(|(_, n)| *n > 0)
            .collect()
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
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        Recent(Mutex::new(kept.clone()))
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
        assert_eq!(recent.counts(), [(Fate::Queued, KEPT as u64 + 3)]);
        let kept = recent.list();
        assert_eq!(kept.len(), KEPT);
        assert_eq!(&*kept[0].message_id, "3");
        assert_eq!(&*kept[KEPT - 1].message_id, (KEPT + 2).to_string());
    }

    #[test]
    fn a_relayed_copy_is_settled_in_its_note_and_the_counts() {
        let recent = Recent::default();
        for (id, fate) in [
            ("a", Fate::Relayed),
            ("b", Fate::Relayed),
            ("c", Fate::Queued),
        ] {
            recent.note(DeliveryNote {
                message_id: id.into(),
                at: Timestamp(1),
                fate,
            });
        }
        recent.settle("b", Fate::DeadLettered);
        let fates: Vec<_> = recent.list().iter().map(|n| n.fate).collect();
        assert_eq!(fates, [Fate::Relayed, Fate::DeadLettered, Fate::Queued]);
        // Counted again by its fate; the relayed count (a counter) never goes down.
        assert_eq!(
            recent.counts(),
            [
                (Fate::Queued, 1),
                (Fate::DeadLettered, 1),
                (Fate::Relayed, 2)
            ]
        );
        // Its note already dropped: it is counted all the same.
        recent.settle("gone", Fate::Failed);
        assert_eq!(
            recent.counts(),
            [
                (Fate::Queued, 1),
                (Fate::DeadLettered, 1),
                (Fate::Failed, 1),
                (Fate::Relayed, 2)
            ]
        );
        // None left to settle: nothing moves.
        recent.settle("c", Fate::Failed);
        assert_eq!(recent.counts()[2], (Fate::Failed, 1));
    }
}
