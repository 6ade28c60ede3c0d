//! Sync batches: how a segment lays out the records of one write, so that a segment written
//! over zeros can still tell a torn tail from damage.
//!
//! Segments are filled with zeros ahead of the records (see `storage`), so that `fdatasync`
//! writes only data, not the file's size and block map. The price: a power cut during a
//! write can persist any subset of its sectors, leaving zeros in front of later bytes of the
//! same write, and in `interval`/`never` modes of several unsynced writes. An appended file
//! tears as a shorter file; a zero-filled one can have holes.
//!
//! So each write of the log writer is one batch, starting on a 512-byte boundary:
//! `[magic: 8][body length: u32 LE][durable end: u64 LE][CRC-32C of the 20 bytes before: u32 LE]`
//! then the body, framed records (`record`). The durable end is how far this segment had
//! been synced when the batch was written. Reading stops at the first batch that is not
//! whole. If the rest of the segment is zeros, that is simply the end. Otherwise the rest is
//! searched for later whole batches: one that was written after the broken spot had been
//! synced proves that spot was durable, so it is damage; else the spot and everything after
//! it were never synced, a torn tail to drop and report.

use super::record::{self, Ending};

/// Batches start on multiples of this (a disk sector), so a search after a hole can find
/// them. The padding before a batch is zeros, written over the zeros already there.
pub const ALIGN: usize = 512;
pub const MAGIC: [u8; 8] = *b"ORDLYSB1";
pub const HEADER_BYTES: usize = 24;

/// Appends a batch header for a body of `body_len` bytes to `out`.
pub fn encode_header(body_len: usize, durable_end: u64, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(&durable_end.to_le_bytes());
    let checksum = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&checksum.to_le_bytes());
}

/// True when a segment's bytes are in this layout (rather than the records-only layout of
/// earlier versions, whose first bytes are a non-zero record length).
pub fn is_batched(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(MAGIC.len())];
    head == MAGIC || head.iter().all(|b| *b == 0)
}

/// A whole batch at `at`: its records, durable end, and where it ends.
struct Batch<'a> {
    records: Vec<&'a [u8]>,
    durable_end: u64,
    end: usize,
}

fn batch_at(bytes: &[u8], at: usize) -> Result<Batch<'_>, &'static str> {
    let header = bytes
        .get(at..at + HEADER_BYTES)
        .ok_or("batch header cut off")?;
    if header[..8] != MAGIC {
        return Err("no batch header");
    }
    let stored = u32::from_le_bytes(header[20..24].try_into().expect("4 bytes"));
    if crc32c::crc32c(&header[..20]) != stored {
        return Err("batch header checksum mismatch");
    }
    let body_len = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes")) as usize;
    let durable_end = u64::from_le_bytes(header[12..20].try_into().expect("8 bytes"));
    let end = at + HEADER_BYTES + body_len;
    let body = bytes.get(at + HEADER_BYTES..end).ok_or("batch cut off")?;
    let decoded = record::decode(body);
    if decoded.ending != Ending::Clean || decoded.records.is_empty() {
        return Err("damaged record in batch");
    }
    Ok(Batch {
        records: decoded.records,
        durable_end,
        end,
    })
}

/// Splits a segment in this layout into its records; see the module comment for how the
/// ending is told.
pub fn decode(bytes: &[u8]) -> record::Decoded<'_> {
    let mut records = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let reason = match batch_at(bytes, at) {
            Ok(batch) => {
                records.extend(batch.records);
                at = batch.end.next_multiple_of(ALIGN);
                continue;
            }
            Err(reason) => reason,
        };
        let Some(last) = bytes[at..].iter().rposition(|b| *b != 0) else {
            break;
        };
        let ending = if synced_later(bytes, at) {
            Ending::Corrupt { offset: at, reason }
        } else {
            Ending::TornTail {
                offset: at,
                bytes: last + 1,
            }
        };
        return record::Decoded { records, ending };
    }
    record::Decoded {
        records,
        ending: Ending::Clean,
    }
}

/// True when a whole batch after `broken` was written once `broken` had been synced.
fn synced_later(bytes: &[u8], broken: usize) -> bool {
    (broken + ALIGN..bytes.len())
        .step_by(ALIGN)
        .filter(|at| bytes[*at..].starts_with(&MAGIC))
        .filter_map(|at| batch_at(bytes, at).ok())
        .any(|batch| batch.durable_end > broken as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lays out batches as the log writer does; `synced` says whether each batch was synced
    /// before the next was written (fsync always) or not (interval, never).
    fn segment(batches: &[&[&[u8]]], synced: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut durable = 0;
        for payloads in batches {
            out.resize(out.len().next_multiple_of(ALIGN), 0);
            let mut body = Vec::new();
            for p in *payloads {
                record::encode(p, &mut body);
            }
            encode_header(body.len(), durable, &mut out);
            out.extend_from_slice(&body);
            if synced {
                durable = out.len() as u64;
            }
        }
        out
    }

    fn big(tag: u8) -> Vec<u8> {
        vec![tag; 1500]
    }

    #[test]
    fn round_trip_with_zeros_after_the_end() {
        let (a, b, c) = (big(1), big(2), big(3));
        let mut bytes = segment(&[&[&a, &b], &[&c]], true);
        assert!(is_batched(&bytes));
        bytes.resize(bytes.len() + 5000, 0);
        let decoded = decode(&bytes);
        assert_eq!(decoded.records, vec![&a[..], &b[..], &c[..]]);
        assert_eq!(decoded.ending, Ending::Clean);
        assert_eq!(decode(&[0; 4096]).ending, Ending::Clean);
        assert!(decode(&[]).records.is_empty());
    }

    #[test]
    fn every_cut_and_every_lost_sector_of_the_last_batch_is_a_torn_tail() {
        let (a, b, c) = (big(1), big(2), big(3));
        let whole = segment(&[&[&a], &[&b, &c]], true);
        let second = (HEADER_BYTES + 8 + a.len()).next_multiple_of(ALIGN);
        for cut in (second + 1..whole.len()).step_by(37) {
            let mut bytes = whole[..cut].to_vec();
            bytes.resize(whole.len() + ALIGN, 0);
            let decoded = decode(&bytes);
            assert_eq!(decoded.records, vec![&a[..]], "cut at {cut}");
            assert!(
                matches!(decoded.ending, Ending::TornTail { offset, .. } if offset == second),
                "cut at {cut}: {:?}",
                decoded.ending
            );
        }
        // A power cut can persist later sectors of a write and not earlier ones.
        for lost in (second..whole.len()).step_by(ALIGN) {
            let mut bytes = whole.clone();
            bytes[lost..(lost + ALIGN).min(whole.len())].fill(0);
            let decoded = decode(&bytes);
            let written = bytes.iter().rposition(|b| *b != 0).unwrap() + 1;
            assert_eq!(decoded.records, vec![&a[..]], "sector at {lost}");
            assert_eq!(
                decoded.ending,
                Ending::TornTail {
                    offset: second,
                    bytes: written - second
                },
                "sector at {lost}"
            );
        }
    }

    #[test]
    fn a_hole_before_batches_written_without_a_sync_is_a_torn_tail() {
        let (a, b, c) = (big(1), big(2), big(3));
        let mut bytes = segment(&[&[&a], &[&b], &[&c]], false);
        let second = (HEADER_BYTES + 8 + a.len()).next_multiple_of(ALIGN);
        bytes[second..second + ALIGN].fill(0);
        let decoded = decode(&bytes);
        assert_eq!(decoded.records, vec![&a[..]]);
        assert!(matches!(decoded.ending, Ending::TornTail { offset, .. } if offset == second));
    }

    #[test]
    fn damage_before_a_batch_written_after_a_sync_is_corruption() {
        let (a, b, c) = (big(1), big(2), big(3));
        let whole = segment(&[&[&a], &[&b], &[&c]], true);
        let second = (HEADER_BYTES + 8 + a.len()).next_multiple_of(ALIGN);
        // A flipped bit in the header, in a record, and a whole sector lost.
        for (at, zero) in [(second + 3, false), (second + 100, false), (second, true)] {
            let mut bytes = whole.clone();
            if zero {
                bytes[at..at + ALIGN].fill(0);
            } else {
                bytes[at] ^= 0x40;
            }
            let decoded = decode(&bytes);
            assert_eq!(decoded.records, vec![&a[..]]);
            assert!(
                matches!(decoded.ending, Ending::Corrupt { offset, .. } if offset == second),
                "at {at}: {:?}",
                decoded.ending
            );
        }
        // The first batch damaged: nothing before it, and still damage.
        let mut bytes = whole.clone();
        bytes[30] ^= 1;
        assert!(matches!(
            decode(&bytes).ending,
            Ending::Corrupt { offset: 0, .. }
        ));
    }
}
