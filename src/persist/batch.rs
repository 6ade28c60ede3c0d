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
//!
//! A header's checksum is sealed: it also covers a random key kept in the data directory,
//! the segment's number and the batch's own offset (`Seal`), none of them stored in the
//! header. A client controls the bytes of its message bodies, so a body can hold a copy of
//! a batch; unsealed, such a copy on a sector boundary inside a torn write could pass for a
//! batch written later and make recovery refuse a plain torn tail. Sealed, it fails its
//! checksum, and costs the search one header check instead of decoding its body.
//! Segments of the previous version (magic `ORDLYSB1`) have unsealed headers and are read as
//! they are.

use super::record::{self, Ending};

/// Batches start on multiples of this (a disk sector), so a search after a hole can find
/// them. The padding before a batch is zeros, written over the zeros already there.
pub const ALIGN: usize = 512;
pub const MAGIC: [u8; 8] = *b"ORDLYSB2";
/// Batches with unsealed headers, as the previous version wrote them.
const UNSEALED_MAGIC: [u8; 8] = *b"ORDLYSB1";
pub const HEADER_BYTES: usize = 24;

/// What a header's checksum covers besides the header: the data directory's key and the
/// segment's number (the batch's offset is added per batch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seal {
    pub key: u64,
    pub segment: u64,
}

/// The header checksum of the batch at `at`; `None` for unsealed headers.
fn checksum(seal: Option<Seal>, at: usize, header: &[u8]) -> u32 {
    let Some(seal) = seal else {
        return crc32c::crc32c(header);
    };
    let mut bound = [0u8; 24];
    bound[..8].copy_from_slice(&seal.key.to_le_bytes());
    bound[8..16].copy_from_slice(&seal.segment.to_le_bytes());
    bound[16..].copy_from_slice(&(at as u64).to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&bound), header)
}

/// Appends a batch header for a body of `body_len` bytes to `out`, for a batch at offset `at`
/// of the segment `seal` names.
pub fn encode_header(seal: Seal, at: usize, body_len: usize, durable_end: u64, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(&durable_end.to_le_bytes());
    let checksum = checksum(Some(seal), at, &out[start..]);
    out.extend_from_slice(&checksum.to_le_bytes());
}

/// Appends a header as the previous version wrote them (tests of reading its segments).
#[cfg(test)]
pub fn encode_unsealed_header(body_len: usize, durable_end: u64, out: &mut Vec<u8>) {
    unsealed_header(UNSEALED_MAGIC, body_len, durable_end, out);
}

#[cfg(test)]
fn unsealed_header(magic: [u8; 8], body_len: usize, durable_end: u64, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&magic);
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(&durable_end.to_le_bytes());
    let checksum = checksum(None, start, &out[start..]);
    out.extend_from_slice(&checksum.to_le_bytes());
}

/// True when a segment's bytes are in this layout (rather than the records-only layout of
/// earlier versions, whose first bytes are a non-zero record length): they begin with a
/// batch's magic or zeros, or, where damage took the first batch's magic, hold a whole sealed
/// batch further on, which a records-only segment cannot (a body's copy of one fails its
/// seal). Read as records, such a segment would pass its damage off as a torn tail.
pub fn is_batched(bytes: &[u8], seal: Seal) -> bool {
    let head = &bytes[..bytes.len().min(MAGIC.len())];
    let sealed = Format {
        magic: MAGIC,
        seal: Some(seal),
    };
    head == MAGIC
        || head == UNSEALED_MAGIC
        || head.iter().all(|b| *b == 0)
        || (ALIGN..bytes.len())
            .step_by(ALIGN)
            .any(|at| bytes[at..].starts_with(&MAGIC) && batch_at(bytes, at, sealed).is_ok())
}

/// The magic and seal of a segment's batches: sealed unless it starts with an unsealed one.
#[derive(Clone, Copy)]
struct Format {
    magic: [u8; 8],
    seal: Option<Seal>,
}

impl Format {
    fn of(bytes: &[u8], seal: Seal) -> Format {
        if bytes.starts_with(&UNSEALED_MAGIC) {
            Format {
                magic: UNSEALED_MAGIC,
                seal: None,
            }
        } else {
            Format {
                magic: MAGIC,
                seal: Some(seal),
            }
        }
    }
}

/// A whole batch at `at`: its records, durable end, and where it ends.
struct Batch<'a> {
    records: Vec<&'a [u8]>,
    durable_end: u64,
    end: usize,
}

fn batch_at(bytes: &[u8], at: usize, format: Format) -> Result<Batch<'_>, &'static str> {
    let header = bytes
        .get(at..at + HEADER_BYTES)
        .ok_or("batch header cut off")?;
    if header[..8] != format.magic {
        return Err("no batch header");
    }
    let stored = u32::from_le_bytes(header[20..24].try_into().expect("4 bytes"));
    if checksum(format.seal, at, &header[..20]) != stored {
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
/// ending is told. `seal` is the segment's (unused for unsealed segments).
pub fn decode(bytes: &[u8], seal: Seal) -> record::Decoded<'_> {
    let format = Format::of(bytes, seal);
    let mut records = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let reason = match batch_at(bytes, at, format) {
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
        let ending = if synced_later(bytes, at, format) {
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
fn synced_later(bytes: &[u8], broken: usize, format: Format) -> bool {
    (broken + ALIGN..bytes.len())
        .step_by(ALIGN)
        .filter(|at| bytes[*at..].starts_with(&format.magic))
        .filter_map(|at| batch_at(bytes, at, format).ok())
        .any(|batch| batch.durable_end > broken as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEAL: Seal = Seal {
        key: 0x5eed_0fda_7a00,
        segment: 7,
    };

    fn decode(bytes: &[u8]) -> record::Decoded<'_> {
        super::decode(bytes, SEAL)
    }

    /// Lays out batches as the log writer does; `synced` says whether each batch was synced
    /// before the next was written (fsync always) or not (interval, never).
    fn segment(batches: &[&[&[u8]]], synced: bool) -> Vec<u8> {
        segment_with(batches, synced, |at, body_len, durable, out| {
            encode_header(SEAL, at, body_len, durable, out)
        })
    }

    /// The same, headers written by `header(offset, body length, durable end, out)`.
    fn segment_with(
        batches: &[&[&[u8]]],
        synced: bool,
        header: impl Fn(usize, usize, u64, &mut Vec<u8>),
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let mut durable = 0;
        for payloads in batches {
            out.resize(out.len().next_multiple_of(ALIGN), 0);
            let mut body = Vec::new();
            for p in *payloads {
                record::encode(p, &mut body);
            }
            header(out.len(), body.len(), durable, &mut out);
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

    /// Damage to the first batch's magic leaves the segment read as batches, not as the
    /// records of an earlier version (which took the damage for a torn tail and dropped every
    /// synced batch after it): the damage is refused where it is.
    #[test]
    fn damage_to_the_first_batchs_magic_is_refused_not_read_as_an_earlier_layout() {
        let (a, b) = (vec![1u8; 1], big(2));
        for at in 0..MAGIC.len() {
            let mut bytes = segment(&[&[&a], &[&b]], true);
            bytes[at] ^= 76;
            assert!(is_batched(&bytes, SEAL), "damage at {at}");
            assert!(
                matches!(decode(&bytes).ending, Ending::Corrupt { offset: 0, .. }),
                "damage at {at}"
            );
            // A segment of another's seal, or of the earlier layout, is not taken for one.
            let other = Seal { key: 1, segment: 7 };
            assert!(!is_batched(&bytes, other));
        }
    }

    #[test]
    fn round_trip_with_zeros_after_the_end() {
        let (a, b, c) = (big(1), big(2), big(3));
        let mut bytes = segment(&[&[&a, &b], &[&c]], true);
        assert!(is_batched(&bytes, SEAL));
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

    /// Bytes a client could send as a message body: whole batches that would prove a sync
    /// of everything before them, sealed for another segment, another key, or no key.
    fn impostors(durable_end: u64) -> Vec<Vec<u8>> {
        let fake = big(9);
        let mut body = Vec::new();
        record::encode(&fake, &mut body);
        let other_segment = Seal {
            segment: SEAL.segment + 1,
            ..SEAL
        };
        let other_key = Seal {
            key: SEAL.key + 1,
            ..SEAL
        };
        let mut found = Vec::new();
        for seal in [other_segment, other_key] {
            let mut batch = Vec::new();
            encode_header(seal, 0, body.len(), durable_end, &mut batch);
            batch.extend_from_slice(&body);
            found.push(batch);
        }
        // Sealed right, but for offset 0: a copy of a real first batch.
        let mut batch = Vec::new();
        encode_header(SEAL, 0, body.len(), durable_end, &mut batch);
        batch.extend_from_slice(&body);
        found.push(batch);
        // Unsealed, under either magic.
        for magic in [MAGIC, UNSEALED_MAGIC] {
            let mut batch = Vec::new();
            unsealed_header(magic, body.len(), durable_end, &mut batch);
            batch.extend_from_slice(&body);
            found.push(batch);
        }
        found
    }

    #[test]
    fn a_batch_copied_into_a_message_body_does_not_pass_for_one() {
        let a = big(1);
        let torn_at = (HEADER_BYTES + 8 + a.len()).next_multiple_of(ALIGN);
        for impostor in impostors(u64::MAX) {
            // The last write carries the copy in a body, on a sector boundary, and lost its
            // first sector.
            let mut b = vec![7; ALIGN - HEADER_BYTES - 8];
            b.extend_from_slice(&impostor);
            let mut bytes = segment(&[&[&a], &[&b]], true);
            assert_eq!(bytes[torn_at + ALIGN..].len(), impostor.len());
            bytes[torn_at..torn_at + ALIGN].fill(0);
            let decoded = decode(&bytes);
            assert_eq!(decoded.records, vec![&a[..]]);
            assert!(
                matches!(decoded.ending, Ending::TornTail { offset, .. } if offset == torn_at),
                "{:?}",
                decoded.ending
            );
            // Nor does it where the next batch would start.
            let mut bytes = segment(&[&[&a]], true);
            bytes.resize(torn_at, 0);
            bytes.extend_from_slice(&impostor);
            let decoded = decode(&bytes);
            assert_eq!(decoded.records, vec![&a[..]]);
            assert!(matches!(decoded.ending, Ending::TornTail { .. }));
        }
    }

    #[test]
    fn segments_with_unsealed_headers_are_still_read() {
        let (a, b, c) = (big(1), big(2), big(3));
        let whole = segment_with(&[&[&a], &[&b], &[&c]], true, |_, len, durable, out| {
            encode_unsealed_header(len, durable, out)
        });
        assert!(is_batched(&whole, SEAL));
        let decoded = decode(&whole);
        assert_eq!(decoded.records, vec![&a[..], &b[..], &c[..]]);
        assert_eq!(decoded.ending, Ending::Clean);
        // Their torn tails and damage are told apart as before.
        let second = (HEADER_BYTES + 8 + a.len()).next_multiple_of(ALIGN);
        let mut bytes = whole.clone();
        bytes[second..second + ALIGN].fill(0);
        assert!(matches!(
            decode(&bytes).ending,
            Ending::Corrupt { offset, .. } if offset == second
        ));
        let third = (second + HEADER_BYTES + 8 + b.len()).next_multiple_of(ALIGN);
        let mut bytes = whole;
        bytes[third..third + ALIGN].fill(0);
        assert!(matches!(
            decode(&bytes).ending,
            Ending::TornTail { offset, .. } if offset == third
        ));
    }
}
