//! Writing a snapshot: the registry, then each queue, each topic, the webhook outbox, move
//! tasks and the signing key, each copied under its own lock with the sequence number the log
//! had reached; then the file is synced and renamed into place.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::files::{snapshot_name, snapshots, CHUNK_BYTES};
use crate::engine::changes::ChangeLog;
use crate::engine::dedup::{Cleared, HistoryChunk, HistoryCursor};
use crate::engine::{Engine, QueueEntry};
use crate::persist::format::change::DiskChange;
use crate::persist::format::list::List;
use crate::persist::format::snapshot::Item;
use crate::persist::format::{self};
use crate::persist::record;
use crate::persist::writer::LogWriter;

/// Where a snapshot is being written (a file, or a database's chunks), with the buffer items
/// are encoded in.
struct Out<O: Write> {
    file: O,
    buf: Vec<u8>,
}

impl<O: Write> Out<O> {
    /// Encodes `item` straight into the buffer behind room for its frame header, then frames
    /// it there.
    fn item(&mut self, item: &Item<'_>) -> std::io::Result<()> {
        let buf = &mut self.buf;
        buf.clear();
        buf.resize(record::HEADER_BYTES, 0);
        *buf = postcard::serialize_with_flavor(item, record::Buffer(std::mem::take(buf)))
            .map_err(std::io::Error::other)?;
        record::seal(buf);
        self.file.write_all(buf)
    }

    /// Splits `items` into chunks of about `CHUNK_BYTES` (by `size`), each one record.
    fn chunks<T>(
        &mut self,
        items: impl IntoIterator<Item = T>,
        size: impl Fn(&T) -> usize,
        wrap: impl for<'c> Fn(&'c [T]) -> Item<'c>,
    ) -> std::io::Result<()> {
        let mut chunk = Vec::new();
        let mut bytes = 0;
        for item in items {
            bytes += size(&item);
            chunk.push(item);
            if bytes >= CHUNK_BYTES {
                self.item(&wrap(&chunk))?;
                chunk.clear();
                bytes = 0;
            }
        }
        if !chunk.is_empty() {
            self.item(&wrap(&chunk))?;
        }
        Ok(())
    }
}

/// A snapshot written: where it went, and the log it makes unneeded.
pub struct Written<O> {
    pub out: O,
    /// What `LogWriter::remove_segments_before` drops once the snapshot is kept.
    pub segment: u64,
    /// The first sequence number the snapshot does not cover whole.
    pub first_lsn: u64,
}

/// Writes a snapshot of `engine` to what `create` makes: turns the log first (before `create`,
/// which may fail for want of a descriptor, while the turn must still happen), then copies
/// each part of the state under its own lock. The caller makes it durable and then drops the
/// log it covers.
pub fn write_to<W: Default, O: Write>(
    create: impl FnOnce() -> std::io::Result<O>,
    engine: &Engine<W>,
    log_writer: &LogWriter,
) -> std::io::Result<Written<O>> {
    let (segment, first_lsn) = log_writer.rotate().map_err(std::io::Error::other)?;
    let (entries, registry, registry_lsn) = engine.queues.cut(|| log_writer.next_lsn());
    let mut out = Out {
        file: create()?,
        buf: Vec::new(),
    };
    out.item(&Item::Header {
        version: format::VERSION.into(),
        first_lsn,
        registry_lsn,
        registry: (&registry).into(),
    })?;
    for entry in &entries {
        write_queue(&mut out, entry, log_writer)?;
    }
    write_topics(&mut out, engine, log_writer)?;
    write_deliveries(&mut out, engine, log_writer)?;
    let (lsn, tasks) = engine.move_tasks.image(|| log_writer.next_lsn());
    out.item(&Item::MoveTasks {
        lsn,
        tasks: List::Write(&tasks),
    })?;
    if let Some(signer) = engine.topics.signer_record() {
        out.item(&Item::Signer(DiskChange::from(&signer)))?;
    }
    if let Some(key) = engine.queues.receipt_key_record() {
        out.item(&Item::ReceiptKey(DiskChange::from(&key)))?;
    }
    let (lsn, mobile) = engine.mobile_image(|| log_writer.next_lsn());
    out.item(&Item::Mobile { lsn })?;
    out.chunks(
        mobile,
        |change| change.size(),
        |chunk| Item::MobileChanges(List::Write(chunk)),
    )?;
    let (lsn, relay) = engine.relay.image(|| log_writer.next_lsn());
    out.item(&Item::Relay { lsn })?;
    out.chunks(
        relay,
        |change| change.size(),
        |chunk| Item::RelayChanges(List::Write(chunk)),
    )?;
    out.item(&Item::End {
        queues: entries.len() as u64,
    })?;
    // Every part was cut at a sequence number the log had handed out, not one it had written:
    // kept before those records are durable, a snapshot lost with them would skip the next
    // leader's (or the next start's) records of the same numbers.
    let highest_cut = log_writer.next_lsn();
    crate::test_hooks::reached("snapshot-cut");
    log_writer.wait_blocking(highest_cut).map_err(|_| {
        std::io::Error::other(
            "the log failed before the records the snapshot covers were written; it is not kept",
        )
    })?;
    Ok(Written {
        out: out.file,
        segment,
        first_lsn,
    })
}

pub(super) fn write<W: Default>(
    dir: &Path,
    temporary: &Path,
    engine: &Engine<W>,
    log_writer: &LogWriter,
) -> std::io::Result<PathBuf> {
    let create = || {
        let file = crate::persist::storage::private_file()
            .write(true)
            .create(true)
            .truncate(true)
            .open(temporary)?;
        Ok(BufWriter::with_capacity(1 << 20, file))
    };
    let Written {
        out,
        segment,
        first_lsn,
    } = write_to(create, engine, log_writer)?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    let path = dir.join(snapshot_name(first_lsn));
    std::fs::rename(temporary, &path)?;
    File::open(dir)?.sync_all()?;
    for old in snapshots(dir)? {
        if old < snapshot_name(first_lsn) {
            std::fs::remove_file(dir.join(old))?;
        }
    }
    log_writer.remove_segments_before(segment);
    Ok(path)
}

/// A queue's image, then its messages, deduplication history and receive attempts in chunks.
fn write_queue<W, O: Write>(
    out: &mut Out<O>,
    entry: &QueueEntry<W>,
    log_writer: &LogWriter,
) -> std::io::Result<()> {
    let (lsn, mut image, messages, history) = {
        let queue = entry.lock();
        let history = queue.dedup_cursor();
        (
            log_writer.next_lsn(),
            queue.image(),
            queue.stored_messages(),
            history,
        )
    };
    let attempts = std::mem::take(&mut image.attempts);
    out.item(&Item::Queue {
        lsn,
        image: (&image).into(),
    })?;
    // In sequence order, so a restart appends to each group rather than inserting into it;
    // sorted here rather than under the queue lock, and by index: a message copy is a few
    // hundred bytes, too many to move around while sorting.
    let mut order: Vec<(u64, usize)> = messages
        .iter()
        .enumerate()
        .map(|(at, (seq, _))| (*seq, at))
        .collect();
    order.sort_unstable();
    out.chunks(
        order.iter().map(|&(seq, at)| (seq, &messages[at].1)),
        |(_, stored)| stored.size() + 256,
        |chunk| Item::Messages(List::Write(chunk)),
    )?;
    write_history(
        out,
        history,
        |at| entry.lock().read_dedup(at, HISTORY_CHUNK),
        HistoryOf::Queue,
    )?;
    out.chunks(
        attempts,
        |(key, entries, _)| key.len() + entries.len() * 24 + 16,
        |chunk| Item::Attempts(List::Write(chunk)),
    )
}

/// Each topic's image, then its deduplication history and archive in chunks.
fn write_topics<W: Default, O: Write>(
    out: &mut Out<O>,
    engine: &Engine<W>,
    log_writer: &LogWriter,
) -> std::io::Result<()> {
    for (lsn, mut image, history, entry) in engine.topics.images(|| log_writer.next_lsn()) {
        let archive = std::mem::take(&mut image.archive);
        out.item(&Item::Topic {
            lsn,
            image: (&image).into(),
        })?;
        write_history(
            out,
            history,
            |at| entry.lock().read_dedup(at, HISTORY_CHUNK),
            HistoryOf::Topic,
        )?;
        out.chunks(
            archive,
            |a| a.request.message.len() + a.request.attributes.size() + 256,
            |chunk| Item::TopicArchive(List::Write(chunk)),
        )?;
    }
    Ok(())
}

/// Slots of a deduplication history a snapshot record is read from: at most about 300 KiB
/// encoded, copied in well under a millisecond, so a send waits at most that long behind the
/// snapshot.
const HISTORY_CHUNK: usize = 4096;

/// Whose deduplication history a snapshot record holds.
#[derive(Clone, Copy)]
enum HistoryOf {
    Queue,
    Topic,
}

/// A deduplication history as it was when its owner was copied (at `from`), a chunk per lock
/// hold (`read` locks and copies one), so a snapshot never holds a second copy of a big one.
/// A history cleared meanwhile (a purge, a reset) fails the snapshot: the messages it copied
/// would go without the ids they were sent with until the log after it is replayed, and that
/// log may not have been synced yet. The next one is taken later.
fn write_history<O: Write>(
    out: &mut Out<O>,
    from: HistoryCursor,
    read: impl Fn(HistoryCursor) -> HistoryChunk,
    of: HistoryOf,
) -> std::io::Result<()> {
    let mut cursor = Some(from);
    while let Some(at) = cursor {
        let (chunk, next) = read(at).map_err(|Cleared| {
            std::io::Error::other(
                "a deduplication history was cleared while the snapshot read it (a purge or a \
                 reset); the next snapshot is taken later",
            )
        })?;
        if !chunk.is_empty() {
            let entries = List::Write(&chunk);
            out.item(&match of {
                HistoryOf::Queue => Item::DedupDigests(entries),
                HistoryOf::Topic => Item::TopicDedupDigests(entries),
            })?;
        }
        cursor = next;
    }
    Ok(())
}

/// The webhook outbox: pending deliveries and confirmation tokens.
fn write_deliveries<W: Default, O: Write>(
    out: &mut Out<O>,
    engine: &Engine<W>,
    log_writer: &LogWriter,
) -> std::io::Result<()> {
    let (lsn, deliveries, tokens) = engine.webhooks.image(|| log_writer.next_lsn());
    out.item(&Item::Outbox { lsn })?;
    out.chunks(
        deliveries,
        |(_, d, _)| d.body.len() + d.fallback_envelope.as_ref().map_or(0, String::len) + 512,
        |chunk| Item::Deliveries(List::Write(chunk)),
    )?;
    out.chunks(tokens, |_| 1024, |chunk| Item::Tokens(List::Write(chunk)))
}
