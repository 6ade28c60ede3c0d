//! A queue's side of durability: the change records it keeps for the log, its settings
//! changes, applying records read back at recovery, and its snapshot image.

use std::collections::BTreeMap;

use super::changes::{QueueChange, QueueImage};
use super::{Queue, QueueConfig, Stored};
use crate::engine::check_tags;
use crate::engine::dedup::{DedupDigest, HistoryChunk, HistoryCursor};
use crate::engine::error::EngineResult;

impl Queue {
    /// Starts keeping changes for the write-ahead log.
    pub fn enable_log(&mut self) {
        self.change_log.get_or_insert_with(Vec::new);
    }

    /// The changes logged since the last call.
    pub fn take_changes(&mut self) -> Vec<QueueChange> {
        match &mut self.change_log {
            Some(changes) if !changes.is_empty() => std::mem::take(changes),
            _ => Vec::new(),
        }
    }

    /// Gives back the list `take_changes` returned once its changes are logged, so the next
    /// operation fills it without growing a new one (under durable load those reallocations
    /// were a good part of the allocator's work).
    pub fn recycle_changes(&mut self, mut changes: Vec<QueueChange>) {
        /// Lists longer than this (a purge, a move) are not worth keeping.
        const KEEP_CAPACITY: usize = 64;
        changes.clear();
        if let Some(change_log) = &mut self.change_log {
            if change_log.is_empty() && changes.capacity() <= KEEP_CAPACITY {
                *change_log = changes;
            }
        }
    }

    pub(super) fn note(&mut self, change: impl FnOnce() -> QueueChange) {
        if let Some(changes) = &mut self.change_log {
            changes.push(change());
        }
    }

    pub(super) fn note_put(&mut self, seq: u64) {
        if self.change_log.is_some() {
            let stored = self.messages[&seq].clone();
            self.note(|| QueueChange::Put { seq, stored });
        }
    }

    pub(super) fn note_touch(&mut self, seq: u64) {
        if self.change_log.is_some() {
            let s = &self.messages[&seq];
            let change = QueueChange::Touch {
                seq,
                state: s.state,
                receive_no: s.receive_no,
                visibility_changes: s.visibility_changes,
                received_at: s.received_at,
                receive_count: s.message.receive_count,
                first_receive_at: s.message.first_receive_at,
            };
            self.note(|| change);
        }
    }

    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    pub fn tags(&self) -> &BTreeMap<String, String> {
        &self.tags
    }

    /// TagQueue: adds or replaces tags within AWS's limits (counted with the tags already
    /// there); logged.
    pub fn tag(&mut self, tags: BTreeMap<String, String>) -> EngineResult<()> {
        let added = tags.keys().filter(|k| !self.tags.contains_key(*k)).count();
        check_tags(
            tags.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            self.tags.len() + added,
        )?;
        self.tags.extend(tags);
        self.note_tags();
        Ok(())
    }

    /// UntagQueue: removes these keys (absent ones are no error); logged.
    pub fn untag(&mut self, keys: &[String]) {
        for key in keys {
            self.tags.remove(key);
        }
        self.note_tags();
    }

    /// AddPermission / RemovePermission: the policy becomes what `edit` makes of the current
    /// one (given with the queue's ARN); logged.
    pub fn edit_policy(
        &mut self,
        edit: impl FnOnce(Option<&str>, &str) -> EngineResult<Option<String>>,
    ) -> EngineResult<()> {
        self.config.policy = edit(self.config.policy.as_deref(), &self.arn)?;
        self.note_config();
        Ok(())
    }

    /// Notes the current configuration (after SetQueueAttributes or a permission change).
    pub(in crate::engine) fn note_config(&mut self) {
        if self.change_log.is_some() {
            let config = Box::new(self.config.clone());
            self.note(|| QueueChange::Config(config));
        }
    }

    fn note_tags(&mut self) {
        if self.change_log.is_some() {
            let tags = self.tags.clone();
            self.note(|| QueueChange::Tags(tags));
        }
    }

    /// Replays one logged change. Records come in the order they were made, but without the
    /// ticks in between, so each one sets its outcome whatever state the message is in now.
    pub fn apply_change(&mut self, change: QueueChange) {
        match change {
            QueueChange::Put { seq, stored } => self.restore_message(seq, *stored),
            QueueChange::Touch {
                seq,
                state,
                receive_no,
                visibility_changes,
                received_at,
                receive_count,
                first_receive_at,
            } => {
                let Some(mut stored) = self.take_stored(seq) else {
                    return;
                };
                stored.state = state;
                stored.receive_no = receive_no;
                stored.visibility_changes = visibility_changes;
                stored.received_at = received_at;
                stored.message.receive_count = receive_count;
                stored.message.first_receive_at = first_receive_at;
                self.restore_message(seq, stored);
            }
            QueueChange::Remove { seq } => {
                self.remove_quietly(seq);
            }
            QueueChange::Dedup {
                key,
                record,
                expires_at,
            } => self.dedup.insert(DedupDigest::of(&key), record, expires_at),
            QueueChange::Attempt {
                key,
                entries,
                expires_at,
            } => self.attempts.insert(key, entries, expires_at),
            QueueChange::Purge { at } => {
                self.last_purge = Some(at);
                self.clear_messages();
            }
            QueueChange::Config(config) => self.config = *config,
            QueueChange::Tags(tags) => self.tags = tags,
            QueueChange::Reset => self.clear_all(),
        }
    }

    /// Removes without logging (replay must not feed the log it reads).
    fn remove_quietly(&mut self, seq: u64) {
        let change_log = self.change_log.take();
        self.remove(seq);
        self.change_log = change_log;
    }

    pub(super) fn take_stored(&mut self, seq: u64) -> Option<Stored> {
        let stored = self.messages.get(&seq)?.clone();
        self.remove_quietly(seq);
        Some(*stored)
    }

    /// Stores a message exactly as it was, under its own sequence number.
    pub fn restore_message(&mut self, seq: u64, stored: Stored) {
        if self.messages.contains_key(&seq) {
            self.remove_quietly(seq);
        }
        self.next_seq = self.next_seq.max(seq + 1);
        self.next_receive_no = self.next_receive_no.max(stored.receive_no + 1);
        self.place(seq, stored);
    }

    /// The queue's state apart from its messages and its deduplication history (read in
    /// chunks by `read_dedup` from `dedup_cursor`: a busy queue remembers millions of ids).
    pub fn image(&self) -> QueueImage {
        QueueImage {
            name: self.name.clone(),
            arn: self.arn.clone(),
            uid: self.uid,
            config: self.config.clone(),
            tags: self.tags.clone(),
            dedup_scope: self.dedup_scope,
            next_seq: self.next_seq,
            next_receive_no: self.next_receive_no,
            last_purge: self.last_purge,
            dedup: Vec::new(),
            attempts: self.attempts.entries(),
        }
    }

    /// Where a read of the deduplication history as it is now begins.
    pub fn dedup_cursor(&self) -> HistoryCursor {
        self.dedup.cursor()
    }

    /// A chunk of the deduplication history: see `DedupHistory::read`.
    pub fn read_dedup(&self, cursor: HistoryCursor, positions: usize) -> HistoryChunk {
        self.dedup.read(cursor, positions)
    }

    /// Copies of the stored messages in no particular order: taken under the queue lock, so
    /// sorting is left to the caller.
    pub fn stored_messages(&self) -> Vec<(u64, Stored)> {
        self.messages
            .iter()
            .map(|(seq, stored)| (*seq, Stored::clone(stored)))
            .collect()
    }

    /// A queue rebuilt from its image; messages follow through `restore_message`.
    pub fn from_image(image: QueueImage) -> Queue {
        let mut queue = Queue::new(&image.name, image.arn.to_string(), image.uid, image.config);
        queue.tags = image.tags;
        queue.dedup_scope = image.dedup_scope;
        queue.next_seq = image.next_seq;
        queue.next_receive_no = image.next_receive_no;
        queue.last_purge = image.last_purge;
        for (key, record, expires_at) in image.dedup {
            queue.dedup.insert(key, record, expires_at);
        }
        for (key, entries, expires_at) in image.attempts {
            queue.attempts.insert(key, entries, expires_at);
        }
        queue
    }
}
