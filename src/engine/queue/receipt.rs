//! Receipt handles: opaque to clients, but they name the queue, the message and the receive
//! they came from, so foreign, garbage and stale handles are told apart without a lookup table.
//!
//! Each handle carries an HMAC-SHA256 tag under a secret of the engine's (`ReceiptKey`), kept
//! in its log and snapshots: the numbers inside are small and easy to guess, so without the
//! tag anyone allowed to delete could delete what they never received.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

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

/// The secret receipt handles are sealed with: one per engine, shared by its queues.
#[derive(Clone)]
pub struct ReceiptKey {
    secret: [u8; KEY_BYTES],
    /// Keyed once: each handle then costs only the tag's own hashing.
    mac: Hmac<Sha256>,
}

pub const KEY_BYTES: usize = 32;

/// The key's bytes as a change carries them; never printed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Secret(pub [u8; KEY_BYTES]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl ReceiptKey {
    /// A new key from the operating system's random numbers.
    pub fn generate() -> ReceiptKey {
        let mut secret = [0u8; KEY_BYTES];
        getrandom::getrandom(&mut secret).expect("the operating system gives random numbers");
        ReceiptKey::from_secret(secret)
    }

    pub fn from_secret(secret: [u8; KEY_BYTES]) -> ReceiptKey {
        ReceiptKey {
            mac: Hmac::new_from_slice(&secret).expect("HMAC takes keys of any length"),
            secret,
        }
    }

    pub fn secret(&self) -> &[u8; KEY_BYTES] {
        &self.secret
    }

    fn tag(&self, body: &[u8]) -> [u8; TAG_BYTES] {
        let mut mac = self.mac.clone();
        mac.update(body);
        let mut out = [0u8; TAG_BYTES];
        out.copy_from_slice(&mac.finalize().into_bytes()[..TAG_BYTES]);
        out
    }

    fn verify(&self, body: &[u8], tag: &[u8]) -> bool {
        let mut mac = self.mac.clone();
        mac.update(body);
        mac.verify_truncated_left(tag).is_ok()
    }
}

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReceiptKey(..)")
    }
}

/// 2: tagged with the engine's key (1 carried a plain SHA-256 anyone could compute).
const VERSION: u8 = 2;
/// AWS handles begin with "AQEB"; ours do too so they look familiar in logs.
const PREFIX: &str = "AQEB";
/// 128 bits of tag: a guess is right once in 2^128.
const TAG_BYTES: usize = 16;
/// Version and the three numbers.
const BODY: usize = 1 + 3 * 8;
/// The handle's bytes: the body, then its tag.
const BYTES: usize = BODY + TAG_BYTES;
/// The handle's text: the prefix, then the bytes in unpadded URL-safe base64.
const TEXT_LEN: usize = PREFIX.len() + (BYTES * 4).div_ceil(3);

impl Receipt {
    /// One allocation, the handle itself: receives issue one per message.
    pub fn encode(&self, key: &ReceiptKey) -> String {
        let mut bytes = [0u8; BYTES];
        bytes[0] = VERSION;
        bytes[1..9].copy_from_slice(&self.queue_uid.to_be_bytes());
        bytes[9..17].copy_from_slice(&self.seq.to_be_bytes());
        bytes[17..25].copy_from_slice(&self.receive_no.to_be_bytes());
        let tag = key.tag(&bytes[..BODY]);
        bytes[BODY..].copy_from_slice(&tag);
        let mut text = String::with_capacity(TEXT_LEN);
        text.push_str(PREFIX);
        URL_SAFE_NO_PAD.encode_string(bytes, &mut text);
        text
    }

    /// `None` for anything this engine's key did not seal. Decodes on the stack (deletes and
    /// visibility changes decode one per entry).
    pub fn decode(handle: &str, key: &ReceiptKey) -> Option<Receipt> {
        if handle.len() != TEXT_LEN {
            return None;
        }
        // Room for what base64 may estimate for the text, beyond the exact bytes.
        let mut buffer = [0u8; BYTES + 3];
        let decoded = URL_SAFE_NO_PAD
            .decode_slice(handle.strip_prefix(PREFIX)?, &mut buffer)
            .ok()?;
        let bytes = &buffer[..decoded];
        if bytes.len() != BYTES || bytes[0] != VERSION {
            return None;
        }
        if !key.verify(&bytes[..BODY], &bytes[BODY..]) {
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
    use sha2::Digest;

    fn receipt() -> Receipt {
        Receipt {
            queue_uid: 7,
            seq: 42,
            receive_no: 3,
        }
    }

    #[test]
    fn round_trip_and_tamper_detection() {
        let key = ReceiptKey::generate();
        let r = receipt();
        let h = r.encode(&key);
        assert!(h.starts_with("AQEB"));
        assert_eq!(h.len(), TEXT_LEN);
        assert_eq!(h.capacity(), TEXT_LEN, "sized exactly, no regrowth");
        assert_eq!(Receipt::decode(&h, &key), Some(r));
        let mut tampered = h.clone().into_bytes();
        let last = tampered.len() - 3;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            Receipt::decode(std::str::from_utf8(&tampered).unwrap(), &key),
            None
        );
        assert_eq!(Receipt::decode("garbage", &key), None);
        assert_eq!(Receipt::decode("", &key), None);
        // Right length, wrong alphabet or prefix.
        assert_eq!(Receipt::decode(&"A".repeat(TEXT_LEN), &key), None);
        assert_eq!(Receipt::decode(&format!("{h}="), &key), None);
        assert_eq!(Receipt::decode(&h.replace("AQEB", "BQEB"), &key), None);
    }

    #[test]
    fn the_key_is_never_printed() {
        let key = ReceiptKey::generate();
        let printed = format!("{key:?} {:?}", Secret(*key.secret()));
        assert_eq!(printed, "ReceiptKey(..) Secret(..)");
    }

    #[test]
    fn only_the_key_that_sealed_a_handle_opens_it() {
        let (key, other) = (ReceiptKey::generate(), ReceiptKey::generate());
        let handle = receipt().encode(&key);
        assert_eq!(Receipt::decode(&handle, &other), None);
        let restored = ReceiptKey::from_secret(*key.secret());
        assert_eq!(Receipt::decode(&handle, &restored), Some(receipt()));
    }

    #[test]
    fn a_handle_in_the_unkeyed_form_of_earlier_versions_is_refused() {
        // Version 1: the numbers, then 6 bytes of their plain SHA-256.
        let r = receipt();
        let mut bytes = vec![1u8];
        for word in [r.queue_uid, r.seq, r.receive_no] {
            bytes.extend_from_slice(&word.to_be_bytes());
        }
        let sum = Sha256::digest(&bytes);
        bytes.extend_from_slice(&sum[..6]);
        let old = format!("AQEB{}", URL_SAFE_NO_PAD.encode(&bytes));
        assert_eq!(Receipt::decode(&old, &ReceiptKey::generate()), None);
    }

    #[test]
    fn every_number_changed_breaks_the_tag() {
        let key = ReceiptKey::generate();
        let handle = receipt().encode(&key);
        let mut raw = URL_SAFE_NO_PAD.decode(&handle[4..]).unwrap();
        for at in 1..BODY {
            raw[at] ^= 1;
            let forged = format!("AQEB{}", URL_SAFE_NO_PAD.encode(&raw));
            assert_eq!(Receipt::decode(&forged, &key), None, "byte {at} changed");
            raw[at] ^= 1;
        }
    }
}
