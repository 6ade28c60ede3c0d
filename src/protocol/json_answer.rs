//! JSON for the answers on the hot path (sends and receives), written by hand. The bytes are
//! exactly serde_json's (tests compare them); what differs is the string escaping: serde_json
//! looks every byte up in a table, which for a received batch of ten 256-byte bodies was the
//! largest single cost of the answer. Here a string is first scanned in 16-byte chunks (a loop
//! the compiler vectorises) and, as almost always, copied whole when nothing in it needs an
//! escape; the rare string that does goes through serde_json itself.

use serde::Serialize;

/// An answer that can write its own JSON.
pub trait JsonAnswer {
    fn write_json(&self, out: &mut Vec<u8>);

    /// Bytes to reserve up front, so that writing does not reallocate.
    fn size_hint(&self) -> usize {
        2048
    }
}

/// Whether JSON needs an escape anywhere in `bytes`: a quote, a backslash or a control
/// character (serde_json escapes nothing else).
fn needs_escape(bytes: &[u8]) -> bool {
    let special = |b: u8| b < 0x20 || b == b'"' || b == b'\\';
    let mut chunks = bytes.chunks_exact(16);
    // No early exit inside a chunk, so each chunk compiles to a few vector instructions.
    let in_chunks = chunks.any(|chunk| chunk.iter().fold(false, |any, &b| any | special(b)));
    in_chunks || chunks.remainder().iter().any(|&b| special(b))
}

/// Appends `text` as a JSON string.
pub fn write_str(out: &mut Vec<u8>, text: &str) {
    if needs_escape(text.as_bytes()) {
        serde_json::to_writer(&mut *out, text).expect("writing to a Vec cannot fail");
    } else {
        out.reserve(text.len() + 2);
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    }
}

/// A JSON object being written: members in the order they are added.
pub struct Object<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> Object<'a> {
    pub fn open(out: &'a mut Vec<u8>) -> Object<'a> {
        out.push(b'{');
        Object { out, empty: true }
    }

    /// Starts a member; `name` is one of ours and needs no escaping.
    fn name(&mut self, name: &str) -> &mut Vec<u8> {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }

    pub fn str(&mut self, name: &str, value: &str) -> &mut Self {
        write_str(self.name(name), value);
        self
    }

    pub fn opt_str(&mut self, name: &str, value: Option<&str>) -> &mut Self {
        if let Some(value) = value {
            self.str(name, value);
        }
        self
    }

    /// A string member whose text never needs escaping (a number spelt out), formatted
    /// straight into the answer.
    pub fn display(&mut self, name: &str, value: impl std::fmt::Display) -> &mut Self {
        use std::io::Write as _;
        write!(self.name(name), "\"{value}\"").expect("writing to a Vec cannot fail");
        self
    }

    /// A member serde writes (maps, numbers): rare enough to leave to serde_json.
    pub fn serde(&mut self, name: &str, value: &impl Serialize) -> &mut Self {
        serde_json::to_writer(self.name(name), value).expect("writing to a Vec cannot fail");
        self
    }

    /// An array member whose items write themselves.
    pub fn array<T: JsonAnswer>(&mut self, name: &str, items: &[T]) -> &mut Self {
        let out = self.name(name);
        out.push(b'[');
        for (index, item) in items.iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            item.write_json(out);
        }
        out.push(b']');
        self
    }

    pub fn close(&mut self) {
        self.out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn as_json(text: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, text);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn escapes_exactly_what_serde_json_escapes_at_every_position() {
        for special in ['"', '\\', '\n', '\u{0}', '\u{1f}'] {
            for at in [0, 1, 15, 16, 17, 31, 32, 40] {
                let mut text: String = "p".repeat(41);
                text.replace_range(at..at + 1, &special.to_string());
                assert_eq!(as_json(&text), serde_json::to_string(&text).unwrap());
                assert!(needs_escape(text.as_bytes()), "{special:?} at {at}");
            }
        }
        for plain in ["", "price 42", "\u{7f} é 漢 😀 \u{2028}", &"x".repeat(256)] {
            assert!(!needs_escape(plain.as_bytes()));
            assert_eq!(as_json(plain), serde_json::to_string(plain).unwrap());
        }
    }

    proptest! {
        #[test]
        fn any_string_comes_out_as_serde_json_writes_it(text in any::<String>()) {
            prop_assert_eq!(as_json(&text), serde_json::to_string(&text).unwrap());
        }
    }
}
