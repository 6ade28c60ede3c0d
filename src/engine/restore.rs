//! Rebuilding the engine after a restart: snapshot images in, logged changes replayed.
//! Nothing here records changes, so recovery never writes to the log it reads.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::changes::Change;
use super::dedup::HistoryCursor;
use super::queue::changes::QueueImage;
use super::queue::{Queue, Stored};
use super::time::Timestamp;
use super::topic::changes::{TopicChange, TopicImage};
use super::topic::registry::TopicEntry;
use super::topic::Topic;
use super::Engine;

/// The registry's own state in a snapshot.
#[derive(Clone, Debug, Default)]
pub struct RegistryImage {
    pub next_uid: u64,
    /// Recently deleted names and when (the CreateQueue cooldown).
    pub deleted: Vec<(String, Timestamp)>,
}

impl<W: Default> Engine<W> {
    /// The registry as of one point in the log: its queues (for a snapshot to visit one at a
    /// time), its own state, and the sequence number of the first change it does not include.
    #[allow(clippy::type_complexity)]
    pub fn registry_cut(
        &self,
        next_lsn: impl Fn() -> u64,
    ) -> (Vec<Arc<super::QueueEntry<W>>>, RegistryImage, u64) {
        // Creations and deletions are logged under the write lock, so none is half-seen here.
        let queues = self.read();
        let entries = queues.values().cloned().collect();
        (entries, self.registry_image(), next_lsn())
    }

    fn registry_image(&self) -> RegistryImage {
        RegistryImage {
            next_uid: self.next_uid.load(Ordering::Relaxed),
            deleted: self
                .deleted_at
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|(name, at)| (name.clone(), *at))
                .collect(),
        }
    }

    pub fn restore_registry(&self, image: RegistryImage) {
        self.next_uid.fetch_max(image.next_uid, Ordering::Relaxed);
        self.deleted_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(image.deleted);
    }

    /// Puts a queue back from its snapshot image and messages.
    pub fn restore_queue(&self, image: QueueImage, messages: Vec<(u64, Stored)>) {
        self.next_uid.fetch_max(image.uid + 1, Ordering::Relaxed);
        let mut queue = Queue::from_image(image);
        for (seq, stored) in messages {
            queue.restore_message(seq, stored);
        }
        let mut queues = self.queues.write().unwrap_or_else(|p| p.into_inner());
        self.register(&mut queues, queue);
    }

    /// Puts a topic back from its snapshot image.
    pub fn restore_topic(&self, image: TopicImage) {
        let name = image.name.clone();
        let entry = TopicEntry::new(Topic::from_image(image), self.change_log.clone());
        self.topics
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name, Arc::new(entry));
    }

    /// Every topic, each with the log position its copy would be consistent with, taken
    /// under the topic's lock, with its archive (snapshots); and the topic with where a read of
    /// its deduplication history as it was then begins.
    pub fn topic_images(
        &self,
        next_lsn: impl Fn() -> u64,
    ) -> Vec<(u64, TopicImage, HistoryCursor, Arc<TopicEntry>)> {
        let entries: Vec<_> = self
            .topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        entries
            .iter()
            .map(|entry| {
                let topic = entry.lock();
                let history = topic.dedup_cursor();
                (next_lsn(), topic.image(true), history, entry.clone())
            })
            .collect()
    }

    /// Every queue's full state as text, sorted, for tests that compare two engines.
    #[cfg(test)]
    pub fn state_for_tests(&self) -> Vec<String> {
        let mut queues: Vec<String> = self
            .registry_cut(|| 0)
            .0
            .iter()
            .map(|entry| {
                let q = entry.lock();
                let mut messages = q.stored_messages();
                messages.sort_unstable_by_key(|(seq, _)| *seq);
                let history = q.read_dedup(q.dedup_cursor(), usize::MAX);
                format!("{:?}\n{history:?}\n{messages:?}", q.image())
            })
            .collect();
        queues.sort();
        // Topics are kept sorted by name; with their histories.
        queues.extend(
            self.topic_images(|| 0)
                .into_iter()
                .map(|(_, image, at, entry)| {
                    let history = entry.lock().read_dedup(at, usize::MAX);
                    format!("{image:?}\n{history:?}")
                }),
        );
        let mut tasks: Vec<String> = self
            .move_task_image(|| 0)
            .1
            .iter()
            .map(|t| format!("{t:?}"))
            .collect();
        tasks.sort();
        queues.extend(tasks);
        queues
    }

    /// The uid of the live queue with this name.
    pub fn queue_uid(&self, name: &str) -> Option<u64> {
        self.read().get(name).map(|entry| entry.lock().uid)
    }

    /// Applies one logged change. Changes for a queue incarnation that no longer exists are
    /// skipped: they were made by requests that raced with the queue's deletion.
    pub fn replay_change(&self, change: Change) {
        match change {
            Change::CreateQueue {
                name,
                uid,
                config,
                tags,
            } => {
                self.next_uid.fetch_max(uid + 1, Ordering::Relaxed);
                let mut queue = Queue::new(&name, self.queue_arn(&name), uid, *config);
                queue.tags = tags;
                let mut queues = self.queues.write().unwrap_or_else(|p| p.into_inner());
                self.register(&mut queues, queue);
            }
            Change::DeleteQueue { name, uid, at } => {
                let mut queues = self.queues.write().unwrap_or_else(|p| p.into_inner());
                if queues.get(&name).is_some_and(|e| e.lock().uid == uid) {
                    queues.remove(&name);
                }
                self.deleted_at
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.to_string(), at);
            }
            Change::Topic { name, changes } => {
                let mut topics = self.topics.write().unwrap_or_else(|p| p.into_inner());
                let mut changes = changes.into_iter();
                let entry = match topics.get(&name) {
                    Some(entry) => entry.clone(),
                    None => {
                        // A topic starts with its settings image; anything else for an unknown
                        // topic raced with its deletion.
                        let Some(TopicChange::Settings(image)) = changes.next() else {
                            return;
                        };
                        let entry = Arc::new(TopicEntry::new(
                            Topic::from_image(*image),
                            self.change_log.clone(),
                        ));
                        topics.insert(name, entry.clone());
                        entry
                    }
                };
                drop(topics);
                // Replayed changes are not logged again (what applying them recorded is dropped).
                let mut topic = entry.lock_unlogged();
                for change in changes {
                    topic.apply_change(change);
                }
                topic.take_changes();
            }
            change @ (Change::Outbox(_) | Change::Token(_)) => self.replay_delivery_change(change),
            Change::MoveTask(task) => self.restore_move_task(*task),
            Change::DeleteTopic { name } => {
                self.topics
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&name);
            }
            Change::Signer {
                private_key_der,
                certificate_pem,
                certificate_file,
            } => self.restore_signer(&private_key_der, certificate_pem, certificate_file),
            Change::ReceiptKey { secret } => self.restore_receipt_key(secret.0),
            Change::Mobile(changes) => self.restore_mobile(changes),
            Change::Queue { name, uid, changes } => {
                let Ok(entry) = self.queue(&name) else {
                    return;
                };
                let mut queue = entry.lock();
                if queue.uid != uid {
                    return;
                }
                for change in changes {
                    queue.apply_change(change);
                }
            }
        }
    }
}
