//! Digests as messages carry and answer them: MD5s held as bytes and written in hex.

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// An MD5 held as its 16 bytes and written out in lower-case hex when answered: every stored
/// message carries one, and a heap string for it would cost more memory than the digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Md5Digest([u8; 16]);

impl Md5Digest {
    pub fn from_bytes(bytes: [u8; 16]) -> Md5Digest {
        Md5Digest(bytes)
    }

    /// The digest as 32 lowercase hex digits, without going through `fmt` or the heap
    /// (every send answers with one and logs one).
    pub fn hex(&self) -> HexDigest {
        let mut text = [0; 32];
        for (i, b) in self.0.iter().enumerate() {
            text[2 * i] = HEX_DIGITS[(b >> 4) as usize];
            text[2 * i + 1] = HEX_DIGITS[(b & 15) as usize];
        }
        HexDigest(text)
    }
}

/// An MD5 digest spelt out in hex.
pub struct HexDigest([u8; 32]);

impl HexDigest {
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits are ASCII")
    }
}

impl std::fmt::Display for Md5Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.hex().as_str())
    }
}

impl std::fmt::Debug for Md5Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Md5Digest {
    /// Reads 32 lower-case hex digits.
    pub fn parse_hex(text: &str) -> Option<Md5Digest> {
        let digit = |c: u8| HEX_DIGITS.iter().position(|d| *d == c).map(|v| v as u8);
        let mut bytes = [0; 16];
        let valid = text.len() == 32
            && bytes
                .iter_mut()
                .zip(text.as_bytes().chunks(2))
                .all(|(b, pair)| match (digit(pair[0]), digit(pair[1])) {
                    (Some(hi), Some(lo)) => {
                        *b = hi << 4 | lo;
                        true
                    }
                    _ => false,
                });
        valid.then_some(Md5Digest(bytes))
    }
}

pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(HEX_DIGITS[(b >> 4) as usize] as char);
        out.push(HEX_DIGITS[(b & 15) as usize] as char);
    }
    out
}
