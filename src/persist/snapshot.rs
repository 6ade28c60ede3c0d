//! Snapshots: the whole state in one file, so the log before it can be deleted and a restart
//! reads live data rather than history.
//!
//! A snapshot is taken while requests go on (a fuzzy checkpoint). The writer first starts a new
//! log segment at sequence number `first_lsn`; then the registry and each queue are copied one
//! at a time, each under its own lock, together with the sequence number the log had reached
//! at that moment. Recovery loads the snapshot and replays the log from `first_lsn`, skipping
//! each record that the copy it touches already contains.
//!
//! The file is a series of framed, checksummed records (as in the log): a header, then per
//! queue its image followed by its messages in chunks, then an end marker. It is written under
//! a temporary name, synced, and renamed, so a crash leaves either the old or the new one.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::format::list::List;
use super::format::snapshot::{Item, Numbered};
use super::format::{self, change::Change};
use super::record;
use super::writer::FileJournal;
use crate::engine::changes::Journal;
use crate::engine::queue::changes::QueueImage;
use crate::engine::queue::Stored;
use crate::engine::topic::changes::TopicImage;
use crate::engine::Engine;

/// Messages and history entries are written in chunks of about this many bytes, well under
/// the record size limit.
const CHUNK_BYTES: usize = 4 << 20;

/// What recovery needs to know about the snapshot it loaded.
#[derive(Debug, Default)]
pub struct Loaded {
    pub file: Option<String>,
    pub first_lsn: u64,
    pub registry_lsn: u64,
    /// Per queue uid: the first sequence number its image does not include.
    pub queue_lsns: HashMap<u64, u64>,
    /// Per topic name: the first sequence number its image does not include.
    pub topic_lsns: HashMap<String, u64>,
    pub signer: bool,
    pub outbox_lsn: Option<u64>,
    pub move_task_lsn: Option<u64>,
    pub messages: u64,
}

fn snapshot_name(first_lsn: u64) -> String {
    format!("{first_lsn:020}.snap")
}

fn snapshots(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".snap"))
        .collect();
    names.sort();
    Ok(names)
}

/// Splits `items` into chunks of about `CHUNK_BYTES` (by `size`) and writes each as one record.
fn write_chunks<T>(
    out: &mut impl Write,
    items: impl IntoIterator<Item = T>,
    size: impl Fn(&T) -> usize,
    wrap: impl for<'c> Fn(&'c [T]) -> Item<'c>,
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    let mut chunk = Vec::new();
    let mut bytes = 0;
    for item in items {
        bytes += size(&item);
        chunk.push(item);
        if bytes >= CHUNK_BYTES {
            write_item(out, &wrap(&chunk), buf)?;
            chunk.clear();
            bytes = 0;
        }
    }
    if !chunk.is_empty() {
        write_item(out, &wrap(&chunk), buf)?;
    }
    Ok(())
}

/// Encodes `item` straight into `buf` behind room for its frame header, then frames it there.
fn write_item(out: &mut impl Write, item: &Item<'_>, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.clear();
    buf.resize(record::HEADER_BYTES, 0);
    *buf = postcard::serialize_with_flavor(item, record::Buffer(std::mem::take(buf)))
        .map_err(std::io::Error::other)?;
    record::seal(buf);
    out.write_all(buf)
}

/// Takes a snapshot of `engine` into `dir` and lets the log drop what it covers. Blocks for as
/// long as copying and writing take; each queue is locked only while it is copied.
pub fn take<W: Default>(
    dir: &Path,
    engine: &Engine<W>,
    journal: &FileJournal,
) -> std::io::Result<PathBuf> {
    let temporary = dir.join("snapshot.tmp");
    let taken = write(dir, &temporary, engine, journal);
    if taken.is_err() {
        // A half-written snapshot would hold disk space the log needs (a full disk is the
        // likeliest reason to be here).
        let _ = std::fs::remove_file(&temporary);
    }
    taken
}

fn write<W: Default>(
    dir: &Path,
    temporary: &Path,
    engine: &Engine<W>,
    journal: &FileJournal,
) -> std::io::Result<PathBuf> {
    let (segment, first_lsn) = journal.rotate().map_err(std::io::Error::other)?;
    let (entries, registry, registry_lsn) = engine.registry_cut(|| journal.next_lsn());
    let mut out = BufWriter::with_capacity(
        1 << 20,
        super::storage::private_file()
            .write(true)
            .create(true)
            .truncate(true)
            .open(temporary)?,
    );
    let mut buf = Vec::new();
    write_item(
        &mut out,
        &Item::Header {
            version: format::VERSION.into(),
            first_lsn,
            registry_lsn,
            registry: (&registry).into(),
        },
        &mut buf,
    )?;
    let mut queues = 0;
    for entry in entries {
        let (lsn, mut image, messages) = {
            let queue = entry.lock();
            (journal.next_lsn(), queue.image(), queue.stored_messages())
        };
        let dedup = std::mem::take(&mut image.dedup);
        let attempts = std::mem::take(&mut image.attempts);
        write_item(
            &mut out,
            &Item::Queue {
                lsn,
                image: (&image).into(),
            },
            &mut buf,
        )?;
        // In sequence order, so a restart appends to each group rather than inserting into it;
        // sorted here rather than under the queue lock, and by index: a message copy is a few
        // hundred bytes, too many to move around while sorting.
        let mut order: Vec<(u64, usize)> = messages
            .iter()
            .enumerate()
            .map(|(at, (seq, _))| (*seq, at))
            .collect();
        order.sort_unstable();
        write_chunks(
            &mut out,
            order.iter().map(|&(seq, at)| (seq, &messages[at].1)),
            |(_, stored)| stored.size() + 256,
            |chunk| Item::Messages(List::Write(chunk)),
            &mut buf,
        )?;
        write_chunks(
            &mut out,
            dedup,
            |(key, _, _)| key.len() + 96,
            |chunk| Item::Dedup(List::Write(chunk)),
            &mut buf,
        )?;
        write_chunks(
            &mut out,
            attempts,
            |(key, entries, _)| key.len() + entries.len() * 24 + 16,
            |chunk| Item::Attempts(List::Write(chunk)),
            &mut buf,
        )?;
        queues += 1;
    }
    for (lsn, mut image) in engine.topic_images(|| journal.next_lsn()) {
        let dedup = std::mem::take(&mut image.dedup);
        let archive = std::mem::take(&mut image.archive);
        write_item(
            &mut out,
            &Item::Topic {
                lsn,
                image: (&image).into(),
            },
            &mut buf,
        )?;
        write_chunks(
            &mut out,
            dedup,
            |(key, _, _)| key.len() + 96,
            |chunk| Item::TopicDedup(List::Write(chunk)),
            &mut buf,
        )?;
        write_chunks(
            &mut out,
            archive,
            |a| a.request.message.len() + a.request.attributes.size() + 256,
            |chunk| Item::TopicArchive(List::Write(chunk)),
            &mut buf,
        )?;
    }
    let (lsn, deliveries, tokens) = engine.delivery_image(|| journal.next_lsn());
    write_item(&mut out, &Item::Outbox { lsn }, &mut buf)?;
    write_chunks(
        &mut out,
        deliveries,
        |(_, d, _)| d.body.len() + d.fallback_envelope.as_ref().map_or(0, String::len) + 512,
        |chunk| Item::Deliveries(List::Write(chunk)),
        &mut buf,
    )?;
    write_chunks(
        &mut out,
        tokens,
        |_| 1024,
        |chunk| Item::Tokens(List::Write(chunk)),
        &mut buf,
    )?;
    let (lsn, tasks) = engine.move_task_image(|| journal.next_lsn());
    let tasks = Item::MoveTasks {
        lsn,
        tasks: List::Write(&tasks),
    };
    write_item(&mut out, &tasks, &mut buf)?;
    if let Some(signer) = engine.signer_record() {
        write_item(&mut out, &Item::Signer(Change::from(&signer)), &mut buf)?;
    }
    write_item(&mut out, &Item::End { queues }, &mut buf)?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    drop(file);
    let path = dir.join(snapshot_name(first_lsn));
    std::fs::rename(temporary, &path)?;
    File::open(dir)?.sync_all()?;
    for old in snapshots(dir)? {
        if old < snapshot_name(first_lsn) {
            std::fs::remove_file(dir.join(old))?;
        }
    }
    journal.remove_segments_before(segment);
    Ok(path)
}

/// Loads the newest snapshot in `dir` into `engine`, if there is one. Any damage is an error
/// naming the file and offset: the log before the snapshot is gone, so nothing could replace it.
pub fn load<W: Default>(dir: &Path, engine: &Engine<W>) -> Result<Loaded, super::RecoveryError> {
    let Some(name) = snapshots(dir)?.pop() else {
        return Ok(Loaded::default());
    };
    let bytes = std::fs::read(dir.join(&name))?;
    let decoded = record::decode(&bytes);
    let damaged = |offset: usize, reason: String| super::RecoveryError::Corruption {
        file: name.clone(),
        offset,
        reason,
    };
    match decoded.ending {
        record::Ending::Clean => {}
        record::Ending::TornTail { offset, .. } => {
            return Err(damaged(offset, "snapshot cut short".into()))
        }
        record::Ending::Corrupt { offset, reason } => return Err(damaged(offset, reason.into())),
    }
    let mut loaded = Loaded {
        file: Some(name.clone()),
        ..Loaded::default()
    };
    let mut current: Option<(QueueImage, Vec<(u64, Stored)>)> = None;
    let mut topic: Option<TopicImage> = None;
    let mut next_offset = 0;
    let mut ended = false;
    for (index, payload) in decoded.records.iter().enumerate() {
        let offset = next_offset;
        next_offset += payload.len() + record::HEADER_BYTES;
        if index == 0 {
            format::check_snapshot_version(payload).map_err(|error| match error {
                format::FormatError::Newer { .. } => {
                    super::RecoveryError::NewerFormat(format!("{name}: {error}"))
                }
                format::FormatError::Damaged(reason) => damaged(0, reason),
            })?;
        }
        let item: Item = postcard::from_bytes(payload)
            .map_err(|e| damaged(offset, format!("record {index} does not decode: {e}")))?;
        match item {
            Item::Header {
                first_lsn,
                registry_lsn,
                registry,
                ..
            } if index == 0 => {
                loaded.first_lsn = first_lsn;
                loaded.registry_lsn = registry_lsn;
                engine.restore_registry(registry.into());
            }
            _ if index == 0 => return Err(damaged(0, "no header".into())),
            Item::Header { .. } => return Err(damaged(offset, "second header".into())),
            Item::Topic { lsn, image } => {
                if let Some(image) = topic.take() {
                    engine.restore_topic(image);
                }
                loaded.topic_lsns.insert(image.name.to_string(), lsn);
                topic = Some(image.into_live());
            }
            Item::TopicDedup(chunk) => topic
                .as_mut()
                .ok_or_else(|| damaged(offset, "history before any topic".into()))?
                .dedup
                .extend(chunk.into_vec().into_iter().map(|d| d.into_live())),
            Item::TopicArchive(chunk) => topic
                .as_mut()
                .ok_or_else(|| damaged(offset, "archive before any topic".into()))?
                .archive
                .extend(chunk.into_vec().into_iter().map(|a| a.into_live())),
            Item::Signer(Change::Signer {
                private_key_der,
                certificate_pem,
                certificate_file,
            }) => {
                engine.restore_signer(
                    private_key_der,
                    certificate_pem.into(),
                    certificate_file.into(),
                );
                loaded.signer = true;
            }
            Item::Signer(_) => return Err(damaged(offset, "not a signing key".into())),
            Item::Outbox { lsn } => loaded.outbox_lsn = Some(lsn),
            Item::Deliveries(chunk) => {
                if loaded.outbox_lsn.is_none() {
                    return Err(damaged(offset, "deliveries before the outbox".into()));
                }
                engine.restore_deliveries(
                    chunk
                        .into_vec()
                        .into_iter()
                        .map(|q| q.into_live())
                        .collect(),
                );
            }
            Item::Tokens(chunk) => {
                for token in chunk.into_vec() {
                    engine.restore_token(token.into_live());
                }
            }
            Item::MoveTasks { lsn, tasks } => {
                for task in tasks.into_vec() {
                    engine.restore_move_task(task.into_live());
                }
                loaded.move_task_lsn = Some(lsn);
            }
            Item::Queue { lsn, image } => {
                if let Some((image, messages)) = current.take() {
                    engine.restore_queue(image, messages);
                }
                loaded.queue_lsns.insert(image.uid, lsn);
                current = Some((image.into_live(), Vec::new()));
            }
            Item::Messages(chunk) => {
                let (_, messages) = current
                    .as_mut()
                    .ok_or_else(|| damaged(offset, "messages before any queue".into()))?;
                let chunk = chunk.into_vec();
                loaded.messages += chunk.len() as u64;
                messages.extend(
                    chunk
                        .into_iter()
                        .map(|Numbered { seq, stored }| (seq, stored.into_live())),
                );
            }
            Item::Dedup(chunk) => current
                .as_mut()
                .ok_or_else(|| damaged(offset, "history before any queue".into()))?
                .0
                .dedup
                .extend(chunk.into_vec().into_iter().map(|d| d.into_live())),
            Item::Attempts(chunk) => current
                .as_mut()
                .ok_or_else(|| damaged(offset, "history before any queue".into()))?
                .0
                .attempts
                .extend(chunk.into_vec().into_iter().map(|a| a.into_live())),
            Item::End { queues } => {
                if let Some((image, messages)) = current.take() {
                    engine.restore_queue(image, messages);
                }
                if let Some(image) = topic.take() {
                    engine.restore_topic(image);
                }
                if queues as usize != loaded.queue_lsns.len() {
                    return Err(damaged(offset, "queue count does not match".into()));
                }
                ended = true;
            }
        }
    }
    if !ended {
        return Err(damaged(next_offset, "no end marker".into()));
    }
    Ok(loaded)
}
