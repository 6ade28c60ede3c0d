//! Loading a snapshot into a fresh engine, record by record. Any damage is an error naming the
//! file and offset: the log before the snapshot is gone, so nothing could replace it.

use std::path::Path;

use super::files::snapshots;
use super::loaded::Loaded;
use crate::engine::queue::changes::QueueImage;
use crate::engine::queue::Stored;
use crate::engine::topic::changes::TopicImage;
use crate::engine::Engine;
use crate::persist::format::change::DiskChange;
use crate::persist::format::snapshot::{Item, Numbered};
use crate::persist::format::{self};
use crate::persist::record;
use crate::persist::RecoveryError;

/// Loads the newest snapshot in `dir` into `engine`, if there is one.
pub fn load<W: Default>(dir: &Path, engine: &Engine<W>) -> Result<Loaded, RecoveryError> {
    let Some(name) = snapshots(dir)?.pop() else {
        return Ok(Loaded::default());
    };
    let bytes = std::fs::read(dir.join(&name))?;
    load_bytes(&name, &bytes, engine)
}

/// Loads a snapshot's bytes (`name` says where they came from, for errors) into `engine`.
pub fn load_bytes<W: Default>(
    name: &str,
    bytes: &[u8],
    engine: &Engine<W>,
) -> Result<Loaded, RecoveryError> {
    let decoded = record::decode(bytes);
    let mut loader = Loader {
        engine,
        name,
        loaded: Loaded {
            file: Some(name.to_string()),
            ..Loaded::default()
        },
        queue: None,
        topic: None,
        ended: false,
    };
    match decoded.ending {
        record::Ending::Clean => {}
        record::Ending::TornTail { offset, .. } => {
            return Err(loader.damaged(offset, "snapshot cut short"))
        }
        record::Ending::Corrupt { offset, reason } => return Err(loader.damaged(offset, reason)),
    }
    let mut next_offset = 0;
    for (index, payload) in decoded.records.iter().enumerate() {
        let offset = next_offset;
        next_offset += payload.len() + record::HEADER_BYTES;
        if index == 0 {
            format::check_snapshot_version(payload).map_err(|error| match error {
                format::FormatError::Newer { .. } => {
                    RecoveryError::NewerFormat(format!("{name}: {error}"))
                }
                format::FormatError::Damaged(reason) => loader.damaged(0, reason),
            })?;
        }
        let item: Item = postcard::from_bytes(payload)
            .map_err(|e| loader.damaged(offset, format!("record {index} does not decode: {e}")))?;
        loader.apply(index, offset, item)?;
    }
    if !loader.ended {
        return Err(loader.damaged(next_offset, "no end marker"));
    }
    Ok(loader.loaded)
}

fn damaged(file: &str, offset: usize, reason: impl Into<String>) -> RecoveryError {
    RecoveryError::Corruption {
        file: file.to_string(),
        offset,
        reason: reason.into(),
    }
}

/// What has been read so far: a queue or topic is restored once all its records are in.
struct Loader<'a, W> {
    engine: &'a Engine<W>,
    name: &'a str,
    loaded: Loaded,
    queue: Option<(QueueImage, Vec<(u64, Stored)>)>,
    topic: Option<TopicImage>,
    ended: bool,
}

impl<W: Default> Loader<'_, W> {
    fn damaged(&self, offset: usize, reason: impl Into<String>) -> RecoveryError {
        damaged(self.name, offset, reason)
    }

    fn apply(&mut self, index: usize, offset: usize, item: Item) -> Result<(), RecoveryError> {
        match item {
            Item::Header {
                first_lsn,
                registry_lsn,
                registry,
                ..
            } if index == 0 => {
                self.loaded.first_lsn = first_lsn;
                self.loaded.registry_lsn = registry_lsn;
                self.engine.queues.restore_registry(registry.into());
            }
            _ if index == 0 => return Err(self.damaged(0, "no header")),
            Item::Header { .. } => return Err(self.damaged(offset, "second header")),
            Item::Queue { lsn, image } => {
                self.restore_queue();
                self.loaded.queue_lsns.insert(image.uid, lsn);
                self.queue = Some((image.into_live(), Vec::new()));
            }
            Item::Messages(chunk) => {
                let chunk = chunk.into_vec();
                self.loaded.messages += chunk.len() as u64;
                let (_, messages) = self.current_queue(offset, "messages before any queue")?;
                messages.extend(
                    chunk
                        .into_iter()
                        .map(|Numbered { seq, stored }| (seq, stored.into_live())),
                );
            }
            Item::Dedup(chunk) => self
                .current_queue(offset, "history before any queue")?
                .0
                .dedup
                .extend(chunk.into_vec().into_iter().map(|d| d.into_live())),
            Item::DedupDigests(chunk) => self
                .current_queue(offset, "history before any queue")?
                .0
                .dedup
                .extend(chunk.into_vec().into_iter().map(|d| d.into_live())),
            Item::Attempts(chunk) => self
                .current_queue(offset, "history before any queue")?
                .0
                .attempts
                .extend(chunk.into_vec().into_iter().map(|a| a.into_live())),
            Item::Topic { lsn, image } => {
                self.restore_topic();
                self.loaded.topic_lsns.insert(image.name.to_string(), lsn);
                self.topic = Some(image.into_live());
            }
            Item::TopicDedup(chunk) => self
                .current_topic(offset, "history before any topic")?
                .dedup
                .extend(chunk.into_vec().into_iter().map(|d| d.into_live())),
            Item::TopicDedupDigests(chunk) => self
                .current_topic(offset, "history before any topic")?
                .dedup
                .extend(chunk.into_vec().into_iter().map(|d| d.into_live())),
            Item::TopicArchive(chunk) => self
                .current_topic(offset, "archive before any topic")?
                .archive
                .extend(chunk.into_vec().into_iter().map(|a| a.into_live())),
            Item::Outbox { lsn } => self.loaded.outbox_lsn = Some(lsn),
            Item::Deliveries(chunk) => {
                if self.loaded.outbox_lsn.is_none() {
                    return Err(self.damaged(offset, "deliveries before the outbox"));
                }
                let deliveries = chunk.into_vec().into_iter().map(|q| q.into_live());
                self.engine
                    .webhooks
                    .restore_deliveries(deliveries.collect());
            }
            Item::Tokens(chunk) => {
                for token in chunk.into_vec() {
                    self.engine.webhooks.restore_token(token.into_live());
                }
            }
            Item::MoveTasks { lsn, tasks } => {
                for task in tasks.into_vec() {
                    self.engine.move_tasks.restore(task.into_live());
                }
                self.loaded.move_task_lsn = Some(lsn);
            }
            Item::Signer(change) => self.restore_signer(offset, change)?,
            Item::ReceiptKey(change) => {
                let DiskChange::ReceiptKey { secret } = change else {
                    return Err(self.damaged(offset, "not a receipt key"));
                };
                self.engine.queues.restore_receipt_key(secret);
                self.loaded.receipt_key = true;
            }
            Item::Mobile { lsn } => self.loaded.mobile_lsn = Some(lsn),
            Item::MobileChanges(chunk) => {
                if self.loaded.mobile_lsn.is_none() {
                    return Err(self.damaged(offset, "mobile changes before their cut"));
                }
                let changes = chunk.into_vec().into_iter().map(|c| c.into_live());
                self.engine.restore_mobile(changes.collect());
            }
            Item::Relay { lsn } => self.loaded.relay_lsn = Some(lsn),
            Item::RelayChanges(chunk) => {
                if self.loaded.relay_lsn.is_none() {
                    return Err(self.damaged(offset, "relay changes before their cut"));
                }
                let changes = chunk.into_vec().into_iter().map(|c| c.into_live());
                self.engine.relay.restore(changes.collect());
            }
            Item::End { queues } => self.end(offset, queues)?,
        }
        Ok(())
    }

    #[allow(clippy::type_complexity)]
    fn current_queue(
        &mut self,
        offset: usize,
        problem: &str,
    ) -> Result<&mut (QueueImage, Vec<(u64, Stored)>), RecoveryError> {
        let name = self.name;
        self.queue
            .as_mut()
            .ok_or_else(|| damaged(name, offset, problem))
    }

    fn current_topic(
        &mut self,
        offset: usize,
        problem: &str,
    ) -> Result<&mut TopicImage, RecoveryError> {
        let name = self.name;
        self.topic
            .as_mut()
            .ok_or_else(|| damaged(name, offset, problem))
    }

    fn restore_signer(&mut self, offset: usize, change: DiskChange) -> Result<(), RecoveryError> {
        let DiskChange::Signer {
            private_key_der,
            certificate_pem,
            certificate_file,
        } = change
        else {
            return Err(self.damaged(offset, "not a signing key"));
        };
        self.engine.topics.restore_signer(
            private_key_der,
            certificate_pem.into(),
            certificate_file.into(),
        );
        self.loaded.signer = true;
        Ok(())
    }

    /// The end marker: what is still open is complete, and the count of queues must agree.
    fn end(&mut self, offset: usize, queues: u64) -> Result<(), RecoveryError> {
        self.restore_queue();
        self.restore_topic();
        if queues as usize != self.loaded.queue_lsns.len() {
            return Err(self.damaged(offset, "queue count does not match"));
        }
        self.ended = true;
        Ok(())
    }

    /// The queue read so far, now that its records are all in.
    fn restore_queue(&mut self) {
        if let Some((image, messages)) = self.queue.take() {
            self.engine.queues.restore(image, messages);
        }
    }

    fn restore_topic(&mut self) {
        if let Some(image) = self.topic.take() {
            self.engine.topics.restore(image);
        }
    }
}
