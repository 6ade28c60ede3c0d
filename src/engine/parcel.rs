//! What one shard's engine owes the others, and what it has taken from them: parcels numbered
//! per destination shard, kept until the destination says it applied them, and per source shard
//! the last parcel applied here. A destination applies a source's parcels in their order, each
//! once: it records the last number applied in its own log, in the write that applies it.
//!
//! Every change is logged as a record that replays to the same state however often it is
//! applied, and a snapshot is the same records for everything there is.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use super::body::Body;
use super::message::{Message, MessageAttributes};

/// Most parcels, and most bytes of them, a shard keeps waiting for other shards before work
/// that would add more is refused (a destination that cannot be reached must not grow memory
/// without end); one call may pass them by what it adds (a publish's copies for one topic's
/// subscriptions, a receive's dead letters).
pub const MAX_WAITING: usize = 100_000;
pub const MAX_WAITING_BYTES: usize = 256 << 20;

/// How many parcels, and about how many bytes of them, one carry takes at most (a parcel is
/// taken whatever its size when it comes first): a pull's answer between nodes, and what a
/// destination places under its parcels' lock, stay bounded whatever the bodies' size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    pub parcels: usize,
    pub bytes: usize,
}

impl Room {
    /// Room for `parcels` parcels, and for as many bytes as one carry takes at most.
    pub fn at_most(parcels: usize) -> Room {
        Room {
            parcels,
            bytes: MOST_BYTES_AT_ONCE,
        }
    }

    /// What is left once `taken` are taken.
    pub fn less(self, taken: &[Parcel]) -> Room {
        Room {
            parcels: self.parcels.saturating_sub(taken.len()),
            bytes: (self.bytes).saturating_sub(taken.iter().map(Parcel::size).sum()),
        }
    }

    /// Room for every parcel waiting, whatever its size (tests that carry all at once).
    #[cfg(test)]
    pub const ALL: Room = Room {
        parcels: usize::MAX,
        bytes: usize::MAX,
    };

    pub fn is_empty(self) -> bool {
        self.parcels == 0 || self.bytes == 0
    }

    /// An even share of this room for each of `takers` (at least a parcel and a byte).
    pub fn shared_by(self, takers: usize) -> Room {
        let takers = takers.max(1);
        Room {
            parcels: (self.parcels / takers).max(1),
            bytes: (self.bytes / takers).max(1),
        }
    }

    /// This room, no larger than `left` in either.
    pub fn within(self, left: Room) -> Room {
        Room {
            parcels: self.parcels.min(left.parcels),
            bytes: self.bytes.min(left.bytes),
        }
    }
}

/// The most bytes of parcels one carry takes (`Room`).
pub const MOST_BYTES_AT_ONCE: usize = 16 << 20;

impl Parcel {
    pub fn new(seq: u64, contents: Contents) -> Parcel {
        let size = parcel_size(&contents);
        Parcel {
            seq,
            contents: Arc::new(contents),
            size,
        }
    }

    /// About how many bytes it takes in a record, and so in memory.
    pub fn size(&self) -> usize {
        self.size
    }
}

/// An SNS copy for a queue in another shard, with what the destination needs to place it as
/// the topic's shard would have.
#[derive(Clone, Debug, PartialEq)]
pub struct RelayedCopy {
    pub queue_arn: Arc<str>,
    /// Checked against the queue's policy, as a local copy is.
    pub topic_arn: Option<Arc<str>>,
    /// Where the copy goes if the queue refuses it.
    pub dead_letter_arn: Option<Arc<str>>,
    /// `queue_arn` is already the subscription's dead-letter queue.
    pub dead_letter: bool,
    pub body: Body,
    pub attributes: MessageAttributes,
    /// A raw copy's envelope, for a dead-letter queue that refuses the raw copy.
    pub envelope: Option<Body>,
    pub group_id: Option<Arc<str>>,
    pub dedup_id: Option<Arc<str>>,
    pub fifo_topic: bool,
    pub bypass_dedup: bool,
    pub trace_header: Option<Arc<str>>,
    /// The note at the topic's shard that this copy's fate settles. In memory only, as the
    /// notes are: a copy read back from the log settles none.
    pub note_for: Option<NoteFor>,
}

/// The subscription and publish whose note (`Fate::Relayed`) a relayed copy's fate replaces,
/// or whose webhook figures it settles.
#[derive(Clone, Debug, PartialEq)]
pub struct NoteFor {
    pub subscription_arn: Arc<str>,
    pub message_id: Arc<str>,
    pub settles: Settles,
}

/// What a relayed copy's fate settles at its topic's shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settles {
    /// The publish's note in the subscription's last deliveries.
    pub delivery_note: bool,
    /// The webhook subscription's figures, the copy being its dead letter: counted as
    /// dead-lettered, or as dropped when its dead-letter queue refused it.
    pub webhook_figures: bool,
}

impl Settles {
    /// A publish's copy into a subscribed queue (or its dead-letter queue).
    pub const DELIVERY_NOTE: Settles = Settles {
        delivery_note: true,
        webhook_figures: false,
    };

    /// As one number, for a note crossing between nodes.
    pub fn bits(self) -> u8 {
        u8::from(self.delivery_note) | u8::from(self.webhook_figures) << 1
    }

    pub fn from_bits(bits: u8) -> Settles {
        Settles {
            delivery_note: bits & 1 != 0,
            webhook_figures: bits & 2 != 0,
        }
    }
}

/// A message moved into a queue of another shard: dead-lettered, or moved out of a
/// dead-letter queue by a move task.
#[derive(Clone, Debug)]
pub struct RelayedMove {
    /// The queue it goes to.
    pub queue_arn: Arc<str>,
    /// The queue it comes from, which takes it back if `queue_arn` is gone, its receives
    /// counted afresh (so a message is not sent back and forth at every receive).
    pub source_arn: Arc<str>,
    pub message: Message,
}

/// What a parcel carries.
#[derive(Clone, Debug)]
pub enum Contents {
    Copy(Box<RelayedCopy>),
    /// A message received too often, for its queue's dead-letter queue.
    DeadLetter(Box<RelayedMove>),
    /// A message a move task takes out of a dead-letter queue.
    Redriven(Box<RelayedMove>),
    /// A message whose destination was gone, back to the queue it came from.
    Returned(Box<RelayedMove>),
}

/// One parcel on its way to a shard: its number in the sequence from this shard to that one.
#[derive(Clone, Debug)]
pub struct Parcel {
    pub seq: u64,
    pub contents: Arc<Contents>,
    /// `parcel_size`, reckoned once: a parcel is weighed as it is kept, carried and forgotten.
    size: usize,
}

#[derive(Clone, Debug)]
pub enum ParcelChange {
    /// A parcel for shard `to`.
    Sent { to: u32, parcel: Parcel },
    /// Shard `to` applied every parcel up to `through`; they are forgotten here.
    Forgotten { to: u32, through: u64 },
    /// Every parcel from shard `from` up to `through` is applied here.
    Applied { from: u32, through: u64 },
}

impl ParcelChange {
    /// About how many bytes the change takes in a record (for sizing snapshot chunks).
    pub fn size(&self) -> usize {
        match self {
            ParcelChange::Sent { parcel, .. } => parcel.size(),
            _ => 16,
        }
    }
}

/// About how many bytes a parcel takes in a record, and so in memory.
fn parcel_size(contents: &Contents) -> usize {
    let text = |s: Option<&Arc<str>>| s.map_or(0, |s| s.len());
    match contents {
        Contents::Copy(copy) => {
            64 + copy.queue_arn.len()
                + text(copy.topic_arn.as_ref())
                + text(copy.dead_letter_arn.as_ref())
                + copy.body.len()
                + copy.attributes.size()
                + copy.envelope.as_ref().map_or(0, |e| e.len())
                + text(copy.group_id.as_ref())
                + text(copy.dedup_id.as_ref())
                + text(copy.trace_header.as_ref())
        }
        Contents::DeadLetter(moved) | Contents::Redriven(moved) | Contents::Returned(moved) => {
            let m = &moved.message;
            64 + moved.queue_arn.len()
                + moved.source_arn.len()
                + m.size()
                + super::queue::LOGGED_BYTES as usize
                + m.sender_id.len()
                + text(m.group_id.as_ref())
                + text(m.dedup_id.as_ref())
                + text(m.attributes_md5())
                + text(m.trace_header())
                + text(m.dead_letter_source_arn())
        }
    }
}

#[derive(Debug, Default)]
struct Outgoing {
    /// The last number the destination applied.
    forgotten: u64,
    /// Parcels not yet applied there, by number.
    waiting: VecDeque<Parcel>,
}

impl Outgoing {
    fn last(&self) -> u64 {
        self.waiting.back().map_or(self.forgotten, |p| p.seq)
    }
}

/// Parcels per destination and what was applied per source.
#[derive(Debug, Default)]
pub struct Parcels {
    outgoing: BTreeMap<u32, Outgoing>,
    applied: BTreeMap<u32, u64>,
    waiting: usize,
    /// `ParcelChange::size` of every parcel waiting.
    waiting_bytes: usize,
    /// What changed since the log last took it; `None` while nothing is logged.
    changes: Option<Vec<ParcelChange>>,
}

impl Parcels {
    /// Starts keeping change records for the log.
    pub(crate) fn enable_log(&mut self) {
        self.changes.get_or_insert_with(Vec::new);
    }

    /// What changed since the log last took it.
    pub(crate) fn take_changes(&mut self) -> Vec<ParcelChange> {
        self.changes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn record(&mut self, change: ParcelChange) {
        if let Some(changes) = &mut self.changes {
            changes.push(change);
        }
    }

    /// Parcels waiting for any destination.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Whether more may be kept (`MAX_WAITING`, `MAX_WAITING_BYTES`).
    pub fn has_room(&self) -> bool {
        self.waiting < MAX_WAITING && self.waiting_bytes < MAX_WAITING_BYTES
    }

    fn keep(&mut self, to: u32, parcel: Parcel) {
        self.waiting += 1;
        self.waiting_bytes += parcel.size();
        self.outgoing
            .entry(to)
            .or_default()
            .waiting
            .push_back(parcel);
    }

    /// Forgets the parcels for `to` up to `through`, and numbers the next one past it.
    fn drop_through(&mut self, to: u32, through: u64) -> bool {
        let outgoing = self.outgoing.entry(to).or_default();
        if through <= outgoing.forgotten {
            return false;
        }
        let mut bytes = 0;
        while let Some(parcel) = outgoing.waiting.front().filter(|p| p.seq <= through) {
            bytes += parcel.size();
            outgoing.waiting.pop_front();
            self.waiting -= 1;
        }
        outgoing.forgotten = through;
        self.waiting_bytes -= bytes;
        true
    }

    /// Numbers the next parcel for `to` and keeps it until `to` applies it.
    pub fn send(&mut self, to: u32, contents: Contents) -> u64 {
        let seq = self.outgoing.get(&to).map_or(0, Outgoing::last) + 1;
        let parcel = Parcel::new(seq, contents);
        self.keep(to, parcel.clone());
        self.record(ParcelChange::Sent { to, parcel });
        seq
    }

    /// The oldest parcels waiting for `to`, as many as `room` holds (the first whatever its
    /// size).
    pub fn waiting_for(&self, to: u32, room: Room) -> Vec<Parcel> {
        let Some(outgoing) = (self.outgoing.get(&to)).filter(|_| !room.is_empty()) else {
            return Vec::new();
        };
        let mut bytes = 0usize;
        let fits = |parcel: &&Parcel| {
            let first = bytes == 0;
            bytes = bytes.saturating_add(parcel.size().max(1));
            first || bytes <= room.bytes
        };
        (outgoing.waiting.iter().take(room.parcels))
            .take_while(fits)
            .cloned()
            .collect()
    }

    /// Destinations with parcels waiting, and how many wait for each.
    pub fn depths(&self) -> Vec<(u32, usize)> {
        self.outgoing
            .iter()
            .filter(|(_, o)| !o.waiting.is_empty())
            .map(|(to, o)| (*to, o.waiting.len()))
            .collect()
    }

    /// `to` applied every parcel up to `through`: forgets them. A number past what was sent
    /// (this log lost a tail the destination had seen) is never handed out again: a parcel
    /// under it would pass for one applied before.
    pub fn forget(&mut self, to: u32, through: u64) {
        if self.drop_through(to, through) {
            self.record(ParcelChange::Forgotten { to, through });
        }
    }

    /// The number of the last parcel made for `to` (0: none).
    pub fn last_sent(&self, to: u32) -> u64 {
        self.outgoing.get(&to).map_or(0, Outgoing::last)
    }

    /// The last parcel for `to` it applied, as far as this shard was told.
    pub fn forgotten(&self, to: u32) -> u64 {
        self.outgoing
            .get(&to)
            .map_or(0, |outgoing| outgoing.forgotten)
    }

    /// The last parcel from `from` applied here (0: none).
    pub fn applied(&self, from: u32) -> u64 {
        self.applied.get(&from).copied().unwrap_or(0)
    }

    /// Parcel `seq` from `from` is applied here.
    pub fn note_applied(&mut self, from: u32, seq: u64) {
        let applied = self.applied.entry(from).or_default();
        if seq > *applied {
            *applied = seq;
            self.record(ParcelChange::Applied { from, through: seq });
        }
    }

    /// Applies a change read back from the log or a snapshot (not logged again).
    pub fn apply(&mut self, change: ParcelChange) {
        match change {
            ParcelChange::Sent { to, parcel } => {
                if parcel.seq > self.outgoing.get(&to).map_or(0, Outgoing::last) {
                    self.keep(to, parcel);
                }
            }
            ParcelChange::Forgotten { to, through } => {
                self.drop_through(to, through);
            }
            ParcelChange::Applied { from, through } => {
                let applied = self.applied.entry(from).or_default();
                *applied = (*applied).max(through);
            }
        }
    }

    /// Everything as changes that make it: per destination what it applied and then what waits
    /// for it, and per source what was applied here.
    pub fn image(&self) -> Vec<ParcelChange> {
        let mut image = Vec::with_capacity(self.waiting + self.outgoing.len() + self.applied.len());
        for (to, outgoing) in &self.outgoing {
            image.push(ParcelChange::Forgotten {
                to: *to,
                through: outgoing.forgotten,
            });
            image.extend(outgoing.waiting.iter().map(|parcel| ParcelChange::Sent {
                to: *to,
                parcel: parcel.clone(),
            }));
        }
        image.extend(
            self.applied
                .iter()
                .map(|(from, through)| ParcelChange::Applied {
                    from: *from,
                    through: *through,
                }),
        );
        image
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(body: &str) -> Contents {
        Contents::Copy(Box::new(RelayedCopy {
            queue_arn: "arn:aws:sqs:us-east-1:000000000000:q.fifo".into(),
            topic_arn: None,
            dead_letter_arn: None,
            dead_letter: false,
            body: Body::new(body),
            attributes: MessageAttributes::default(),
            envelope: None,
            group_id: Some("g".into()),
            dedup_id: Some(body.into()),
            fifo_topic: true,
            bypass_dedup: false,
            trace_header: None,
            note_for: None,
        }))
    }

    fn replayed(changes: Vec<ParcelChange>) -> Parcels {
        let mut parcels = Parcels::default();
        for change in changes {
            parcels.apply(change);
        }
        parcels
    }

    #[test]
    fn parcels_are_numbered_per_destination_and_forgotten_once_applied() {
        let mut parcels = Parcels::default();
        parcels.enable_log();
        assert_eq!(parcels.send(1, copy("a")), 1);
        assert_eq!(parcels.send(2, copy("b")), 1);
        assert_eq!(parcels.send(1, copy("c")), 2);
        assert_eq!(parcels.depths(), vec![(1, 2), (2, 1)]);
        let seqs: Vec<u64> = parcels
            .waiting_for(1, Room::at_most(10))
            .iter()
            .map(|p| p.seq)
            .collect();
        assert_eq!(seqs, [1, 2]);
        parcels.forget(1, 1);
        // Applied again (a destination answering twice): no change.
        parcels.forget(1, 1);
        // Past what was sent (a tail of this log lost): those numbers are not handed out again.
        parcels.forget(2, 9);
        assert_eq!(parcels.waiting(), 1);
        assert_eq!(parcels.waiting_for(1, Room::at_most(10))[0].seq, 2);
        // A number is never reused once its parcel is forgotten.
        parcels.forget(1, 2);
        assert_eq!(parcels.send(1, copy("d")), 3);
        assert!(parcels.has_room());
        let log = parcels.take_changes();
        let forgotten = log
            .iter()
            .filter(|c| matches!(c, ParcelChange::Forgotten { .. }))
            .count();
        assert_eq!(forgotten, 3, "{log:?}");
        // The log and the image each rebuild the same state, applied once or twice.
        let mut twice = log.clone();
        twice.extend(log.clone());
        for rebuilt in [replayed(log), replayed(twice), replayed(parcels.image())] {
            assert_eq!(rebuilt.waiting(), 1);
            assert_eq!(rebuilt.depths(), vec![(1, 1)]);
            let seqs = |p: &Parcels| -> Vec<u64> {
                p.waiting_for(1, Room::at_most(10))
                    .iter()
                    .map(|p| p.seq)
                    .collect()
            };
            assert_eq!(seqs(&rebuilt), seqs(&parcels));
            let mut rebuilt = rebuilt;
            assert_eq!(rebuilt.send(1, copy("e")), 4);
            assert_eq!(rebuilt.send(2, copy("f")), 10);
        }
    }

    #[test]
    fn what_was_applied_only_moves_forward() {
        let mut parcels = Parcels::default();
        parcels.enable_log();
        parcels.note_applied(3, 2);
        parcels.note_applied(3, 1);
        assert_eq!(parcels.applied(3), 2);
        assert_eq!(parcels.applied(4), 0);
        assert_eq!(parcels.take_changes().len(), 1);
        assert_eq!(replayed(parcels.image()).applied(3), 2);
    }

    #[test]
    fn a_carry_takes_what_its_room_holds_by_count_and_bytes_and_a_first_parcel_whatever_its_size() {
        let mut parcels = Parcels::default();
        for body in ["a".repeat(1000), "b".repeat(1000), "c".repeat(1000)] {
            parcels.send(3, copy(&body));
        }
        let one = parcels.waiting_for(3, Room::at_most(1))[0].size();
        assert!(one > 1000, "{one} bytes");
        let seqs =
            |room| -> Vec<u64> { parcels.waiting_for(3, room).iter().map(|p| p.seq).collect() };
        assert_eq!(seqs(Room::at_most(10)), [1, 2, 3]);
        assert_eq!(seqs(Room::at_most(2)), [1, 2]);
        let bytes = |bytes| Room { parcels: 10, bytes };
        assert_eq!(seqs(bytes(2 * one)), [1, 2]);
        assert_eq!(seqs(bytes(2 * one - 1)), [1]);
        // A parcel larger than the room still goes, alone, so a carry always moves on.
        assert_eq!(seqs(bytes(10)), [1]);
        assert_eq!(seqs(Room::at_most(0)), Vec::<u64>::new());
        assert_eq!(seqs(bytes(0)), Vec::<u64>::new());
        // What is left once some are taken: none when the bytes ran out.
        let taken = parcels.waiting_for(3, Room::at_most(2));
        assert_eq!(
            bytes(3 * one).less(&taken),
            Room {
                parcels: 8,
                bytes: one
            }
        );
        assert!(bytes(one).less(&taken).is_empty());
        // Shared by takers: an even part of each, never none; no larger than what is left.
        let room = Room {
            parcels: 10,
            bytes: 100,
        };
        assert_eq!(
            room.shared_by(3),
            Room {
                parcels: 3,
                bytes: 33
            }
        );
        assert_eq!(room.shared_by(0), room);
        assert_eq!(
            room.shared_by(1000),
            Room {
                parcels: 1,
                bytes: 1
            }
        );
        assert_eq!(
            room.shared_by(3).within(bytes(20)),
            Room {
                parcels: 3,
                bytes: 20
            }
        );
        assert!(room.within(bytes(0)).is_empty());
    }

    #[test]
    fn room_runs_out_by_bytes_as_well_as_by_count() {
        let mut parcels = Parcels::default();
        // One body shared by every copy: counted per parcel, as each is written per parcel.
        let big = Body::from("x".repeat(1 << 20));
        let mut sent = 0;
        while parcels.has_room() {
            let Contents::Copy(mut copy) = copy("a") else {
                unreachable!()
            };
            copy.body = big.clone();
            sent = parcels.send(3, Contents::Copy(copy));
        }
        assert!((256..=257).contains(&sent), "{sent} parcels of 1 MiB");
        parcels.forget(3, sent);
        assert!(parcels.has_room());
        assert_eq!(parcels.waiting(), 0);
    }
}
