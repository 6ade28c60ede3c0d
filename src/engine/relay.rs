//! The relay of an engine that holds one shard of a key space: what it owes queues in other
//! shards (a publish's copies for them; messages dead-lettered into them or moved into them by
//! a move task; a webhook notification's copy for its dead-letter queue; another account's
//! subscription confirmation; messages sent back to where they came from), and what other
//! shards' engines hand it. No two-phase commit: the source logs each as a parcel in the same
//! write as what made it (a publish's in topic order); the destination applies a source's
//! parcels in that order, each once, logging the last one applied in the write that places
//! them; the source forgets them once told. Carrying parcels between engines is the caller's (`waiting_for`, `receive`,
//! `forget`), who hands out only parcels its log holds durably and tells the source only what
//! the destination's log holds durably: a parcel lost with a log's tail could otherwise be
//! applied and its number handed out again, or forgotten and never applied. Lock order: topic,
//! then parcels, then queue.

use std::sync::Arc;

use crate::engine::changes::{self, ChangeLog};
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::guard::LoggedLock;
use crate::engine::message::{Message, MessageAttributes};
use crate::engine::namespace::Namespaces;
use crate::engine::parcel::{
    Contents, NoteFor, Parcel, ParcelChange, Parcels, RelayedCopy, RelayedMove, Room, MAX_WAITING,
    MAX_WAITING_BYTES,
};
use crate::engine::queue::Moved;
use crate::engine::queues::{OtherShards, QueueEntry, Queues};
use crate::engine::shard::Shard;
use crate::engine::time::Timestamp;
use crate::engine::topic::recent::Fate;
use crate::engine::topic::subscription_copy::SubscriptionCopy;

/// What applying parcels from one source did.
pub struct Received<W> {
    /// The last parcel from the source now applied here: the source may forget up to it once
    /// this engine's log holds what `receive` logged.
    pub through: u64,
    /// Queues that took a copy (their long polls are woken).
    pub delivered_to: Vec<Arc<QueueEntry<W>>>,
    /// Copies and dead letters that went to a dead-letter queue here.
    pub dead_lettered: usize,
    /// Parcels sent on to a third shard (a dead-letter queue there) or back to their source.
    pub relayed: usize,
    /// Copies no queue took.
    pub dropped: usize,
    /// What became of copies whose topic's shard keeps a note of them (`Topics::settle`).
    pub settled: Vec<Settled>,
}

/// What became of a relayed copy, for the note its topic's shard keeps.
#[derive(Clone, Debug, PartialEq)]
pub struct Settled {
    pub topic_arn: Arc<str>,
    pub note_for: NoteFor,
    pub fate: Fate,
}

/// Where a relayed copy went.
enum Placed<W> {
    Queued(Arc<QueueEntry<W>>),
    DeadLettered(Arc<QueueEntry<W>>),
    /// On to another shard: a dead-letter queue there, or back to where it came from.
    Relayed,
    Dropped,
}

pub struct Relay {
    shard: Shard,
    namespaces: Namespaces,
    parcels: LoggedLock<Parcels>,
    change_log: Option<Arc<dyn ChangeLog>>,
}

impl Relay {
    pub fn new(shard: Shard, namespaces: Namespaces) -> Relay {
        Relay {
            shard,
            namespaces,
            parcels: LoggedLock::new(Parcels::default(), None),
            change_log: None,
        }
    }

    /// Logs every later change to `change_log`. Set before the first request.
    pub(in crate::engine) fn set_log(&mut self, change_log: Arc<dyn ChangeLog>) {
        self.parcels.set_log(change_log.clone());
        self.change_log = Some(change_log);
    }

    /// The shard this engine holds.
    pub fn shard(&self) -> Shard {
        self.shard
    }

    /// The shard of the queue `queue_arn` names, when it is not this one.
    pub fn elsewhere(&self, queue_arn: &str) -> Option<u32> {
        if self.shard.count <= 1 {
            return None;
        }
        self.shard
            .elsewhere(self.namespaces.key_in_arn("sqs", queue_arn)?)
    }

    /// Refuses work that would send parcels to any of `queue_arns`' shards while too many
    /// wait (a destination unreachable for long): called before anything is changed, so
    /// refused work leaves no trace.
    pub fn check_room<'a>(
        &self,
        queue_arns: impl IntoIterator<Item = &'a str>,
    ) -> EngineResult<()> {
        if self.shard.count <= 1 || self.parcels.lock_unlogged().has_room() {
            return Ok(());
        }
        if queue_arns
            .into_iter()
            .all(|arn| self.elsewhere(arn).is_none())
        {
            return Ok(());
        }
        Err(EngineError::Throttled(format!(
            "Rate exceeded: more than {MAX_WAITING} copies or {} MiB wait for other shards",
            MAX_WAITING_BYTES >> 20
        )))
    }

    /// Keeps `copy` for its queue's shard `to`; logged with the caller's group.
    pub fn send(&self, to: u32, copy: RelayedCopy) {
        self.parcels.lock().send(to, Contents::Copy(Box::new(copy)));
    }

    /// The oldest parcels waiting for shard `to`, as many as `room` holds (the caller hands
    /// out only those its log holds durably). The destination's `receive` holds its parcels'
    /// lock while it places them, so they are carried a bounded batch at a time.
    pub fn waiting_for(&self, to: u32, room: Room) -> Vec<Parcel> {
        self.parcels.lock_unlogged().waiting_for(to, room)
    }

    /// Shards with parcels waiting, and how many wait for each.
    pub fn depths(&self) -> Vec<(u32, usize)> {
        self.parcels.lock_unlogged().depths()
    }

    /// Shard `to` applied every parcel up to `through`.
    pub fn forget(&self, to: u32, through: u64) {
        self.parcels.lock().forget(to, through);
    }

    /// The last parcel from shard `from` applied here.
    pub fn applied(&self, from: u32) -> u64 {
        self.parcels.lock_unlogged().applied(from)
    }

    /// The number of the last parcel made for shard `to` (0: none).
    pub fn last_sent(&self, to: u32) -> u64 {
        self.parcels.lock_unlogged().last_sent(to)
    }

    /// The last parcel for shard `to` that `to` applied, as far as this shard was told.
    pub fn forgotten(&self, to: u32) -> u64 {
        self.parcels.lock_unlogged().forgotten(to)
    }

    /// Passes over parcels from `from` up to `through`, never to come: the source forgot them
    /// while this log lost their application (both logs cut short, not synced alike).
    pub fn pass_over(&self, from: u32, through: u64) {
        self.parcels.lock().note_applied(from, through);
    }

    /// Applies parcels from shard `from` in their order, each once: those applied before are
    /// passed over, and a gap (a parcel missing before this one) stops the run until it comes.
    /// Each copy and the note that it is applied reach the log in one write.
    pub fn receive<W: Default>(
        &self,
        queues: &Queues<W>,
        from: u32,
        parcels: &[Parcel],
        now: Timestamp,
    ) -> Received<W> {
        let _atomic = changes::Atomic::new(self.change_log.as_deref());
        let mut state = self.parcels.lock();
        let mut received = Received {
            through: state.applied(from),
            delivered_to: Vec::new(),
            dead_lettered: 0,
            relayed: 0,
            dropped: 0,
            settled: Vec::new(),
        };
        for parcel in parcels {
            if parcel.seq <= received.through {
                continue;
            }
            if parcel.seq != received.through + 1 {
                break;
            }
            let placed = match &*parcel.contents {
                Contents::Copy(copy) => {
                    let placed = self.place(queues, &mut state, copy, now);
                    let fate = match &placed {
                        Placed::Queued(_) => Some(Fate::Queued),
                        Placed::DeadLettered(_) => Some(Fate::DeadLettered),
                        Placed::Dropped => Some(Fate::Failed),
                        // Settled where it goes on to.
                        Placed::Relayed => None,
                    };
                    if let (Some(fate), Some(topic_arn), Some(note_for)) =
                        (fate, &copy.topic_arn, &copy.note_for)
                    {
                        received.settled.push(Settled {
                            topic_arn: topic_arn.clone(),
                            note_for: note_for.clone(),
                            fate,
                        });
                    }
                    placed
                }
                Contents::DeadLetter(moved) | Contents::Redriven(moved) => {
                    self.place_moved(queues, &mut state, parcel, moved, now)
                }
                Contents::Returned(moved) => self.place_returned(queues, moved, now),
            };
            match placed {
                Placed::Queued(queue) => received.delivered_to.push(queue),
                Placed::DeadLettered(queue) => {
                    received.dead_lettered += 1;
                    received.delivered_to.push(queue);
                }
                Placed::Relayed => received.relayed += 1,
                Placed::Dropped => received.dropped += 1,
            }
            state.note_applied(from, parcel.seq);
            received.through = parcel.seq;
        }
        received
    }

    /// Puts a relayed copy where the topic's shard would have: its queue, or on refusal the
    /// subscription's dead-letter queue (the envelope when the raw copy is refused there too),
    /// which may be in a third shard.
    fn place<W: Default>(
        &self,
        queues: &Queues<W>,
        state: &mut Parcels,
        copy: &RelayedCopy,
        now: Timestamp,
    ) -> Placed<W> {
        let topic = copy.topic_arn.as_deref();
        let mut offered = subscription_copy(copy);
        if let Ok(queue) = queues.accept_copy(&copy.queue_arn, &offered, now, topic) {
            return if copy.dead_letter {
                Placed::DeadLettered(queue)
            } else {
                Placed::Queued(queue)
            };
        }
        let dlq = match (&copy.dead_letter_arn, copy.dead_letter) {
            (Some(dlq), false) => dlq.clone(),
            (None, false) => return Placed::Dropped,
            // The dead-letter queue refused the raw copy: it gets the envelope.
            (_, true) => {
                let Some(envelope) = &copy.envelope else {
                    return Placed::Dropped;
                };
                offered.body = envelope.clone();
                offered.attributes = MessageAttributes::default();
                return match queues.accept_copy(&copy.queue_arn, &offered, now, topic) {
                    Ok(queue) => Placed::DeadLettered(queue),
                    Err(_) => Placed::Dropped,
                };
            }
        };
        if let Some(to) = self.elsewhere(&dlq) {
            let onward = RelayedCopy {
                queue_arn: dlq,
                dead_letter_arn: None,
                dead_letter: true,
                ..copy.clone()
            };
            state.send(to, Contents::Copy(Box::new(onward)));
            return Placed::Relayed;
        }
        if let Ok(queue) = queues.accept_copy(&dlq, &offered, now, topic) {
            return Placed::DeadLettered(queue);
        }
        let Some(envelope) = &copy.envelope else {
            return Placed::Dropped;
        };
        offered.body = envelope.clone();
        offered.attributes = MessageAttributes::default();
        match queues.accept_copy(&dlq, &offered, now, topic) {
            Ok(queue) => Placed::DeadLettered(queue),
            Err(_) => Placed::Dropped,
        }
    }

    /// Puts a dead letter in its dead-letter queue, or a message a move task moves in its
    /// destination; that queue gone, back in the queue it came from (`place_returned`).
    fn place_moved<W: Default>(
        &self,
        queues: &Queues<W>,
        state: &mut Parcels,
        parcel: &Parcel,
        moved: &RelayedMove,
        now: Timestamp,
    ) -> Placed<W> {
        if let Ok(entry) = queues.get_by_arn(&moved.queue_arn) {
            let dead_letter = matches!(&*parcel.contents, Contents::DeadLetter(_));
            let how = if dead_letter {
                Moved::DeadLetter(moved.source_arn.clone())
            } else {
                Moved::Redrive
            };
            let mut target = entry.lock();
            target.tick(now);
            target.accept_moved(moved.message.clone(), how, now);
            drop(target);
            return if dead_letter {
                Placed::DeadLettered(entry)
            } else {
                Placed::Queued(entry)
            };
        }
        match self.elsewhere(&moved.source_arn) {
            Some(to) => {
                state.send(to, Contents::Returned(Box::new(moved.clone())));
                Placed::Relayed
            }
            None => self.place_returned(queues, moved, now),
        }
    }

    /// Puts a message back in the queue it came from, its receives counted afresh (so it is not
    /// sent back and forth at every receive) and at the end of its group, keeping the queue it
    /// was dead-lettered from, if any (where a move task takes it back to); dropped only if
    /// that queue is gone too.
    fn place_returned<W: Default>(
        &self,
        queues: &Queues<W>,
        moved: &RelayedMove,
        now: Timestamp,
    ) -> Placed<W> {
        let Ok(source) = queues.get_by_arn(&moved.source_arn) else {
            return Placed::Dropped;
        };
        let mut message = moved.message.clone();
        let dead_lettered_from = message.dead_letter_source_arn().cloned();
        message.redriven();
        let how = match dead_lettered_from {
            Some(arn) => Moved::DeadLetter(arn),
            None => Moved::Redrive,
        };
        let mut queue = source.lock();
        queue.tick(now);
        queue.accept_moved(message, how, now);
        drop(queue);
        Placed::Queued(source)
    }

    /// Applies a change read back from the log or a snapshot (not logged again).
    pub fn restore(&self, changes: Vec<ParcelChange>) {
        let mut state = self.parcels.lock_unlogged();
        for change in changes {
            state.apply(change);
        }
    }

    /// Everything as changes that make it, and the log position they are cut at.
    pub fn image(&self, next_lsn: impl Fn() -> u64) -> (u64, Vec<ParcelChange>) {
        let state = self.parcels.lock_unlogged();
        (next_lsn(), state.image())
    }
}

impl RelayedCopy {
    /// `copy` for the queue `queue_arn` of another shard: from no topic, with no dead-letter
    /// queue (the caller sets what applies).
    pub fn of(queue_arn: &str, copy: SubscriptionCopy) -> RelayedCopy {
        RelayedCopy {
            queue_arn: queue_arn.into(),
            topic_arn: None,
            dead_letter_arn: None,
            dead_letter: false,
            envelope: None,
            body: copy.body,
            attributes: copy.attributes,
            group_id: copy.group_id.map(Arc::from),
            dedup_id: copy.dedup_id.map(Arc::from),
            fifo_topic: copy.fifo_topic,
            bypass_dedup: copy.bypass_dedup,
            trace_header: copy.trace_header,
            note_for: None,
        }
    }
}

/// The copy as a queue takes it.
fn subscription_copy(copy: &RelayedCopy) -> SubscriptionCopy<'_> {
    SubscriptionCopy {
        body: copy.body.clone(),
        attributes: copy.attributes.clone(),
        group_id: copy.group_id.as_deref(),
        dedup_id: copy.dedup_id.as_deref(),
        fifo_topic: copy.fifo_topic,
        bypass_dedup: copy.bypass_dedup,
        trace_header: copy.trace_header.clone(),
    }
}

impl OtherShards for Relay {
    fn hold(&self, arn: &str) -> bool {
        self.elsewhere(arn).is_some()
    }

    fn has_room(&self) -> bool {
        self.shard.count <= 1 || self.parcels.lock_unlogged().has_room()
    }

    fn dead_letter(&self, dlq_arn: &str, source_arn: &Arc<str>, messages: Vec<Message>) {
        let Some(to) = self.elsewhere(dlq_arn) else {
            return;
        };
        let queue_arn: Arc<str> = dlq_arn.into();
        let mut state = self.parcels.lock();
        for message in messages {
            let moved = RelayedMove {
                queue_arn: queue_arn.clone(),
                source_arn: source_arn.clone(),
                message,
            };
            state.send(to, Contents::DeadLetter(Box::new(moved)));
        }
    }

    fn redrive(&self, target_arn: &str, dlq_arn: &Arc<str>, message: Message) {
        let Some(to) = self.elsewhere(target_arn) else {
            return;
        };
        let moved = RelayedMove {
            queue_arn: target_arn.into(),
            source_arn: dlq_arn.clone(),
            message,
        };
        self.parcels
            .lock()
            .send(to, Contents::Redriven(Box::new(moved)));
    }
}
