//! Log record framing: `[payload length: u32 LE][CRC-32C of the payload: u32 LE][payload]`.
//!
//! Reading a segment tells three endings apart: a clean end; a torn tail (the last record was
//! cut off mid-write: its header or payload runs past the end of the file, or it is the final
//! record and its checksum fails) which recovery may drop, saying what it dropped; and damage
//! anywhere else, which must stop recovery with the file offset.

/// Header bytes before each payload.
pub const HEADER_BYTES: usize = 8;
/// Largest payload accepted, so a corrupted length cannot make the reader allocate wildly.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024 * 1024;

/// Appends one framed record to `out`. Payloads are never empty, so zero-filled space (a
/// file extended but not written) can never read as records.
pub fn encode(payload: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_BYTES]);
    out.extend_from_slice(payload);
    seal(&mut out[start..]);
}

/// Frames in place a payload written after `HEADER_BYTES` of room at the start of `framed`
/// (the same bytes `encode` would produce, without copying the payload).
pub fn seal(framed: &mut [u8]) {
    let payload = &framed[HEADER_BYTES..];
    assert!(!payload.is_empty(), "log records are never empty");
    assert!(
        payload.len() <= MAX_PAYLOAD_BYTES,
        "log record of {} bytes exceeds the {MAX_PAYLOAD_BYTES}-byte limit",
        payload.len()
    );
    let length = (payload.len() as u32).to_le_bytes();
    let checksum = crc32c::crc32c(payload).to_le_bytes();
    framed[..4].copy_from_slice(&length);
    framed[4..HEADER_BYTES].copy_from_slice(&checksum);
}

/// A postcard output that appends to a vector the caller made (postcard's own start empty),
/// so a record's header or sequence number can be left room for in front.
pub struct Buffer(pub Vec<u8>);

impl postcard::ser_flavors::Flavor for Buffer {
    type Output = Vec<u8>;

    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        self.0.push(byte);
        Ok(())
    }

    fn try_extend(&mut self, bytes: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Vec<u8>> {
        Ok(self.0)
    }
}

/// How a segment's bytes ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ending {
    /// Every byte belonged to a whole, valid record.
    Clean,
    /// The final record was incomplete or failed its checksum; it starts at `offset` and
    /// `bytes` were dropped.
    TornTail { offset: usize, bytes: usize },
    /// A record before the end is damaged.
    Corrupt { offset: usize, reason: &'static str },
}

/// The records of one segment, in order, and how the segment ended.
pub struct Decoded<'a> {
    pub records: Vec<&'a [u8]>,
    pub ending: Ending,
}

/// Splits a segment's bytes into records.
pub fn decode(bytes: &[u8]) -> Decoded<'_> {
    let mut records = Vec::new();
    let mut offset = 0;
    let torn = |offset: usize| Ending::TornTail {
        offset,
        bytes: bytes.len() - offset,
    };
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        if rest.len() < HEADER_BYTES {
            return Decoded {
                records,
                ending: torn(offset),
            };
        }
        let length = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let checksum = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if length == 0 || length > MAX_PAYLOAD_BYTES {
            let ending = if rest.iter().all(|b| *b == 0) {
                torn(offset)
            } else {
                Ending::Corrupt {
                    offset,
                    reason: "record length out of range",
                }
            };
            return Decoded { records, ending };
        }
        let end = HEADER_BYTES + length;
        if rest.len() < end {
            return Decoded {
                records,
                ending: torn(offset),
            };
        }
        let payload = &rest[HEADER_BYTES..end];
        if crc32c::crc32c(payload) != checksum {
            // Only the very last record can have been torn by a crash; earlier damage is real.
            let ending = if rest.len() == end || rest[end..].iter().all(|b| *b == 0) {
                torn(offset)
            } else {
                Ending::Corrupt {
                    offset,
                    reason: "checksum mismatch",
                }
            };
            return Decoded { records, ending };
        }
        records.push(payload);
        offset += end;
    }
    Decoded {
        records,
        ending: Ending::Clean,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in payloads {
            encode(p, &mut out);
        }
        out
    }

    #[test]
    fn a_frame_is_length_checksum_and_payload() {
        let mut framed = Vec::new();
        encode(b"payload", &mut framed);
        let mut expected = 7u32.to_le_bytes().to_vec();
        expected.extend_from_slice(&crc32c::crc32c(b"payload").to_le_bytes());
        expected.extend_from_slice(b"payload");
        assert_eq!(framed, expected);
    }

    #[test]
    fn round_trip() {
        let bytes = segment(&[b"one", b"2", b"three"]);
        let decoded = decode(&bytes);
        assert_eq!(decoded.records, vec![&b"one"[..], b"2", b"three"]);
        assert_eq!(decoded.ending, Ending::Clean);
    }

    #[test]
    fn every_cut_of_the_last_record_is_a_torn_tail() {
        let whole = segment(&[b"first", b"second record"]);
        let second_at = HEADER_BYTES + 5;
        for cut in second_at + 1..whole.len() {
            let decoded = decode(&whole[..cut]);
            assert_eq!(decoded.records, vec![&b"first"[..]], "cut at {cut}");
            assert_eq!(
                decoded.ending,
                Ending::TornTail {
                    offset: second_at,
                    bytes: cut - second_at
                }
            );
        }
    }

    #[test]
    fn a_bad_final_checksum_is_torn_but_earlier_damage_is_corruption() {
        let mut bytes = segment(&[b"first", b"second"]);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        assert!(matches!(
            decode(&bytes).ending,
            Ending::TornTail { offset: 13, .. }
        ));
        let mut bytes = segment(&[b"first", b"second"]);
        bytes[HEADER_BYTES] ^= 0xff;
        assert_eq!(
            decode(&bytes).ending,
            Ending::Corrupt {
                offset: 0,
                reason: "checksum mismatch"
            }
        );
    }

    #[test]
    fn zeroed_tail_is_torn_and_a_wild_length_is_corruption() {
        let mut bytes = segment(&[b"first"]);
        bytes.extend_from_slice(&[0; 32]);
        let decoded = decode(&bytes);
        assert_eq!(decoded.records.len(), 1);
        assert!(matches!(
            decoded.ending,
            Ending::TornTail {
                offset: 13,
                bytes: 32
            }
        ));
        let mut bytes = segment(&[b"first"]);
        bytes.extend_from_slice(&[0xff; 12]);
        assert!(matches!(
            decode(&bytes).ending,
            Ending::Corrupt { offset: 13, .. }
        ));
    }
}
