//! Message bodies: the text, its MD5 (computed once, where the body arrives, so no queue lock
//! is held while hashing) and SQS's character rules.

use std::ops::Deref;

use bytestring::ByteString;
use md5::{Digest, Md5};

use super::digest::Md5Digest;
use super::error::{EngineError, EngineResult};

/// A body's text, shared by its copies (a receive's answer, a topic's copies) and held in one
/// allocation of exactly its length. An `Arc<str>` keeps its counts in the same allocation,
/// which moves a 1 KiB body (1,040 bytes then) up to the allocator's 1,280-byte class; here
/// the counts live apart, allocated on the first clone.
pub type BodyText = ByteString;

/// The text of `body` in an allocation of its length.
pub fn body_text(body: String) -> BodyText {
    if body.len() == body.capacity() {
        BodyText::from(body)
    } else {
        BodyText::from(body.as_str())
    }
}

/// A body with its MD5. Cloning shares the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body {
    text: BodyText,
    md5: Md5Digest,
}

impl Body {
    pub fn new(text: &str) -> Body {
        Body::of(BodyText::from(text))
    }

    fn of(text: BodyText) -> Body {
        Body {
            md5: body_md5(&text),
            text,
        }
    }

    pub fn md5(&self) -> Md5Digest {
        self.md5
    }

    pub fn into_text(self) -> BodyText {
        self.text
    }
}

impl Deref for Body {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl Default for Body {
    fn default() -> Body {
        Body::new("")
    }
}

impl From<&str> for Body {
    fn from(text: &str) -> Body {
        Body::new(text)
    }
}

impl From<String> for Body {
    fn from(text: String) -> Body {
        Body::of(body_text(text))
    }
}

/// The MD5 of a message body.
pub fn body_md5(body: &str) -> Md5Digest {
    Md5Digest::from_bytes(Md5::digest(body.as_bytes()).into())
}

pub fn validate_body(body: &str) -> EngineResult<()> {
    if body.is_empty() {
        return Err(EngineError::missing("MessageBody"));
    }
    if plain_ascii(body.as_bytes()) {
        return Ok(());
    }
    if let Some(bad) = body.chars().find(|c| !allowed_char(*c)) {
        return Err(EngineError::InvalidMessageContents(format!(
            "Invalid binary character '#x{:X}' was found in the message body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
            bad as u32
        )));
    }
    Ok(())
}

/// True when every byte is printable ASCII, tab, LF or CR: most bodies, which then need no
/// character decoding. A branch-free fold over fixed chunks, so the compiler vectorises it.
fn plain_ascii(bytes: &[u8]) -> bool {
    let ok = |b: u8| (b.wrapping_sub(0x20) < 0x60) | (b == b'\t') | (b == b'\n') | (b == b'\r');
    let mut chunks = bytes.chunks_exact(32);
    let whole = chunks
        .by_ref()
        .all(|chunk| chunk.iter().fold(true, |all, &b| all & ok(b)));
    whole && chunks.remainder().iter().all(|&b| ok(b))
}

/// True for characters SQS accepts in bodies and string attribute values.
pub(crate) fn allowed_char(c: char) -> bool {
    matches!(c as u32,
        0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_checksum_matches_aws_and_is_kept_with_the_text() {
        let body = Body::new("hello");
        assert_eq!(body.md5().to_string(), "5d41402abc4b2a76b9719d911017c592");
        assert_eq!(&*body, "hello");
        assert_eq!(Body::default().md5(), body_md5(""));
    }

    #[test]
    fn body_rejects_control_characters_and_empty() {
        assert!(validate_body("ok\r\n\t").is_ok());
        assert!(matches!(
            validate_body("bad\u{1b}"),
            Err(EngineError::InvalidMessageContents(m)) if m.contains("#x1B")
        ));
        assert_eq!(
            validate_body(""),
            Err(EngineError::MissingParameter("MessageBody".into()))
        );
    }

    #[test]
    fn ascii_fast_path_agrees_with_the_character_rules_at_every_position() {
        // A bad or non-ASCII byte in each chunk position, the remainder included.
        let base = "a".repeat(70);
        for at in 0..base.len() {
            for (insert, valid) in [
                ("\u{1}", false),
                ("\u{7f}", true),
                ("é", true),
                ("\u{fffe}", false),
                ("\u{ffff}", false),
                ("\u{10000}", true),
            ] {
                let mut body = base.clone();
                body.replace_range(at..at + 1, insert);
                assert_eq!(validate_body(&body).is_ok(), valid, "{insert:?} at {at}");
            }
        }
        assert!(plain_ascii(base.as_bytes()));
        assert!(!plain_ascii("a\u{0}".as_bytes()));
    }
}
