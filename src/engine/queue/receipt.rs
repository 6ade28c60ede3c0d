//! Receipt handles: opaque to clients, but they name the queue, the message and the receive
//! they came from, so foreign, garbage and stale handles are told apart without a lookup table.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// What a receipt handle identifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The queue incarnation (a recreated queue gets a new one).
    pub queue_uid: u64,
    /// The message's position in its queue.
    pub seq: u64,
    /// Which receive of the message issued the handle.
    pub receive_no: u64,
}

const VERSION: u8 = 1;
/// AWS handles begin with "AQEB"; ours do too so they look familiar in logs.
const PREFIX: &str = "AQEB";

fn check(bytes: &[u8]) -> [u8; 6] {
    let digest = Sha256::digest(bytes);
    let mut out = [0u8; 6];
    out.copy_from_slice(&digest[..6]);
    out
}

/// The handle's bytes: version, the three numbers, then the first 6 bytes of their SHA-256.
const BYTES: usize = 1 + 3 * 8 + 6;
/// The handle's text: the prefix, then the bytes in unpadded URL-safe base64.
const TEXT_LEN: usize = PREFIX.len() + (BYTES * 4).div_ceil(3);

impl Receipt {
    /// One allocation, the handle itself: receives issue one per message.
    pub fn encode(&self) -> String {
        let mut bytes = [0u8; BYTES];
        bytes[0] = VERSION;
        bytes[1..9].copy_from_slice(&self.queue_uid.to_be_bytes());
        bytes[9..17].copy_from_slice(&self.seq.to_be_bytes());
        bytes[17..25].copy_from_slice(&self.receive_no.to_be_bytes());
        let sum = check(&bytes[..25]);
        bytes[25..].copy_from_slice(&sum);
        let mut text = String::with_capacity(TEXT_LEN);
        text.push_str(PREFIX);
        URL_SAFE_NO_PAD.encode_string(bytes, &mut text);
        text
    }

    /// `None` for anything this server did not issue. Decodes on the stack (deletes and
    /// visibility changes decode one per entry).
    pub fn decode(handle: &str) -> Option<Receipt> {
        if handle.len() != TEXT_LEN {
            return None;
        }
        // Room for what base64 may estimate for the text, beyond the exact 31 bytes.
        let mut buffer = [0u8; BYTES + 3];
        let decoded = URL_SAFE_NO_PAD
            .decode_slice(handle.strip_prefix(PREFIX)?, &mut buffer)
            .ok()?;
        let bytes = &buffer[..decoded];
        if bytes.len() != BYTES || bytes[0] != VERSION {
            return None;
        }
        if check(&bytes[..25]) != bytes[25..] {
            return None;
        }
        let word = |i: usize| u64::from_be_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        Some(Receipt {
            queue_uid: word(1),
            seq: word(9),
            receive_no: word(17),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tamper_detection() {
        let r = Receipt {
            queue_uid: 7,
            seq: 42,
            receive_no: 3,
        };
        let h = r.encode();
        assert!(h.starts_with("AQEB"));
        assert_eq!(h.len(), TEXT_LEN);
        assert_eq!(h.capacity(), TEXT_LEN, "sized exactly, no regrowth");
        assert_eq!(Receipt::decode(&h), Some(r));
        let mut tampered = h.clone().into_bytes();
        let last = tampered.len() - 3;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            Receipt::decode(std::str::from_utf8(&tampered).unwrap()),
            None
        );
        assert_eq!(Receipt::decode("garbage"), None);
        assert_eq!(Receipt::decode(""), None);
        // Right length, wrong alphabet or prefix.
        assert_eq!(Receipt::decode(&"A".repeat(TEXT_LEN)), None);
        assert_eq!(Receipt::decode(&format!("{h}=")), None);
        assert_eq!(Receipt::decode(&h.replace("AQEB", "BQEB")), None);
    }
}
