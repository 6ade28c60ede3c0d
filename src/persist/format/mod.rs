//! The on-disk format: what log records and snapshot records hold, as persist's own types,
//! mapped to and from the engine's state. The engine's types carry no serialization, so
//! changing one cannot change what is on disk without a change here. A type here that mirrors
//! an engine type is named for it with `Disk` in front (`DiskMessage` is how an
//! `engine::message::Message` is written, in files and in database rows alike).
//!
//! Records are postcard, which writes fields in order with no names, so a layout is fixed once
//! data has been written with it. Every record says which format version wrote it:
//! - a log record starts with one little-endian u64 whose low 56 bits are its sequence number
//!   and whose high 8 bits are the version (0 in records written before versions were
//!   recorded, commit bd5fd91 and earlier, read as version 1);
//! - a snapshot's first record, its header, carries the version right after the record's tag.
//!
//! A record of a version newer than [`VERSION`] is refused with an error that says so: this
//! build cannot know its layout.
//!
//! To add a field (say to `DiskQueueConfig`): bump [`VERSION`], keep the old layout as it is (move
//! it to a `v1` module) and give the new one the field; decoding picks the layout by the
//! record's version and maps an old record to today's engine state with the field's default.
//! `tests/fixtures/data-bd5fd91/` holds data written by an older release; its test must keep
//! passing.
//!
//! Each type is written from the engine's values without copying them (its fields borrow;
//! lists convert element by element as they are written, see `list`) and read back borrowing
//! from the record's bytes until it is turned into engine state.

pub mod between_nodes;
pub mod change;
pub mod list;
pub mod message;
pub mod mobile;
pub mod queue;
pub mod relay;
pub mod snapshot;
pub mod topic;
pub mod webhook;

use thiserror::Error;

use crate::engine;

/// The format version this build writes, and the newest it reads. 2 added the `Reset` changes
/// of queues and topics (`POST /_orderly/reset`) after every older variant, so a version 1
/// record reads as it always did. 3 added the receipt key (`Change::ReceiptKey`, a snapshot's
/// `Item::ReceiptKey`), also after every older variant. 4 writes snapshots' deduplication
/// entries by their keys' digests (`Item::DedupDigests`, `Item::TopicDedupDigests`); the
/// keyed items of older snapshots read into digests, and log records still carry the keys.
/// 5 added platform applications, endpoints and SMS state (`Change::Mobile`, a snapshot's
/// `Item::Mobile` and `Item::MobileChanges`), after every older variant. 6 added the relay of
/// copies between shards (`Change::Relay`, a snapshot's `Item::Relay` and
/// `Item::RelayChanges`), after every older variant.
pub const VERSION: u8 = 6;

const VERSION_SHIFT: u32 = 56;
/// Sequence numbers must stay below this so the version fits above them (at a million
/// records a second, that is over two thousand years of log).
pub const MAX_LSN: u64 = (1 << VERSION_SHIFT) - 1;

#[derive(Debug, Error)]
pub enum FormatError {
    #[error(
        "{what} was written in format version {found}, newer than this build of Orderly reads \
         (up to {VERSION}); run the newer Orderly that wrote it"
    )]
    Newer { what: String, found: u32 },
    #[error("{0}")]
    Damaged(String),
}

/// The first 8 bytes of a log record: its sequence number and this build's version.
pub fn record_header(lsn: u64) -> [u8; 8] {
    debug_assert!(lsn <= MAX_LSN, "log sequence number {lsn} out of range");
    (lsn | u64::from(VERSION) << VERSION_SHIFT).to_le_bytes()
}

/// Writes `change` after what `out` already holds (room for the header).
pub fn encode_change(
    change: &engine::Change,
    out: crate::persist::record::Buffer,
) -> postcard::Result<Vec<u8>> {
    postcard::serialize_with_flavor(&change::DiskChange::from(change), out)
}

/// A whole log record (header and change), as the log writes it.
pub fn to_record(lsn: u64, change: &engine::Change) -> postcard::Result<Vec<u8>> {
    let header = crate::persist::record::Buffer(record_header(lsn).to_vec());
    encode_change(change, header)
}

/// A log record's sequence number and change.
pub fn decode_record(record: &[u8]) -> Result<(u64, engine::Change), FormatError> {
    if record.len() < 8 {
        return Err(FormatError::Damaged(
            "record shorter than its sequence number".into(),
        ));
    }
    let word = u64::from_le_bytes(record[..8].try_into().expect("8 bytes"));
    let lsn = word & MAX_LSN;
    let version = (word >> VERSION_SHIFT) as u32;
    if version > u32::from(VERSION) {
        return Err(FormatError::Newer {
            what: format!("log record {lsn}"),
            found: version,
        });
    }
    let change: change::DiskChange = postcard::from_bytes(&record[8..])
        .map_err(|e| FormatError::Damaged(format!("record {lsn} does not decode: {e}")))?;
    Ok((lsn, change.into_live()))
}

/// Checks a snapshot's header record (its first) for a version this build reads.
pub fn check_snapshot_version(header: &[u8]) -> Result<(), FormatError> {
    // The header is the first variant of `snapshot::Item`: its tag, then the version.
    let (tag, version) = match postcard::take_from_bytes::<(u32, u32)>(header) {
        Ok(((tag, version), _)) => (tag, version),
        Err(e) => return Err(FormatError::Damaged(format!("no header: {e}"))),
    };
    if tag != 0 {
        return Err(FormatError::Damaged("no header".into()));
    }
    if version > u32::from(VERSION) {
        return Err(FormatError::Newer {
            what: "the snapshot".into(),
            found: version,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
