//! Messages and message attributes: validation by AWS's rules and the checksums SDKs verify.
//!
//! Checksums are computed once, when a message is accepted, and carried with it.

use std::sync::Arc;

use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};

use super::error::{EngineError, EngineResult};
use super::time::Timestamp;

/// At most this many message attributes per message.
pub const MAX_MESSAGE_ATTRIBUTES: usize = 10;

/// The value of one message attribute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttributeData {
    String(String),
    Binary(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttributeValue {
    /// Full data type, custom suffix included (`Number.float`).
    pub data_type: String,
    pub data: AttributeData,
}

/// Attributes sorted by name (byte order), the order the MD5 algorithm needs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageAttributes(Arc<[(String, AttributeValue)]>);

impl MessageAttributes {
    pub fn new(mut entries: Vec<(String, AttributeValue)>) -> Self {
        entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        MessageAttributes(entries.into())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &(String, AttributeValue)> {
        self.0.iter()
    }

    pub fn get(&self, name: &str) -> Option<&AttributeValue> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Bytes counted toward the message size: name, data type and value of each attribute.
    pub fn size(&self) -> usize {
        self.0
            .iter()
            .map(|(name, value)| {
                name.len()
                    + value.data_type.len()
                    + match &value.data {
                        AttributeData::String(s) => s.len(),
                        AttributeData::Binary(b) => b.len(),
                    }
            })
            .sum()
    }

    /// The subset selected by a ReceiveMessage `MessageAttributeNames` list:
    /// `All`, `.*` and `*` select all, `prefix.*` a prefix, anything else an exact name.
    pub fn select(&self, names: &[String]) -> MessageAttributes {
        if names.is_empty() || self.is_empty() {
            return MessageAttributes::default();
        }
        if names.iter().any(|n| n == "All" || n == ".*" || n == "*") {
            return self.clone();
        }
        let chosen: Vec<_> = self
            .0
            .iter()
            .filter(|(name, _)| {
                names
                    .iter()
                    .any(|pattern| match pattern.strip_suffix(".*") {
                        Some(prefix) => name.starts_with(prefix),
                        None => pattern == name,
                    })
            })
            .cloned()
            .collect();
        if chosen.len() == self.len() {
            self.clone()
        } else {
            MessageAttributes(chosen.into())
        }
    }

    /// AWS's MD5OfMessageAttributes: length-prefixed name, type, tag byte and value per attribute.
    pub fn md5(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        fn put(digest: &mut Md5, bytes: &[u8]) {
            digest.update((bytes.len() as u32).to_be_bytes());
            digest.update(bytes);
        }
        let mut digest = Md5::new();
        for (name, value) in self.0.iter() {
            put(&mut digest, name.as_bytes());
            put(&mut digest, value.data_type.as_bytes());
            match &value.data {
                AttributeData::String(s) => {
                    digest.update([1u8]);
                    put(&mut digest, s.as_bytes());
                }
                AttributeData::Binary(b) => {
                    digest.update([2u8]);
                    put(&mut digest, b);
                }
            }
        }
        Some(hex(&digest.finalize()))
    }
}

/// Lower-case hex MD5 of a message body.
pub fn body_md5(body: &str) -> String {
    hex(&Md5::digest(body.as_bytes()))
}

/// Lower-case hex SHA-256 of a body: the content-based deduplication id.
pub fn content_dedup_id(body: &str) -> String {
    use sha2::Sha256;
    hex(&Sha256::digest(body.as_bytes()))
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

/// True for characters SQS accepts in bodies and string attribute values.
fn allowed_char(c: char) -> bool {
    matches!(c as u32,
        0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

pub fn validate_body(body: &str) -> EngineResult<()> {
    if body.is_empty() {
        return Err(EngineError::missing("MessageBody"));
    }
    // Most bodies are printable ASCII: check bytes, and decode characters only otherwise.
    let plain = body
        .bytes()
        .all(|b| (0x20..0x80).contains(&b) || matches!(b, b'\t' | b'\n' | b'\r'));
    if plain {
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

/// Checks one message attribute against AWS's name, type and value rules.
pub fn validate_attribute(name: &str, value: &AttributeValue) -> EngineResult<()> {
    let lower = name.to_ascii_lowercase();
    let name_ok = !name.is_empty()
        && name.len() <= 256
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !lower.starts_with("aws.")
        && !lower.starts_with("amazon.");
    if !name_ok {
        return Err(EngineError::invalid(format!(
            "Message (user) attribute name '{name}' is invalid. Attribute names can contain only alphanumeric characters, hyphens, underscores and periods, cannot start or end with a period, cannot contain consecutive periods and cannot start with 'AWS.' or 'Amazon.'."
        )));
    }
    let base = value.data_type.split('.').next().unwrap_or("");
    if value.data_type.is_empty() {
        return Err(EngineError::invalid(format!(
            "The message attribute '{name}' must contain non-empty message attribute type."
        )));
    }
    if value.data_type.len() > 256 || !matches!(base, "String" | "Number" | "Binary") {
        return Err(EngineError::invalid(format!(
            "The type of message (user) attribute '{name}' is invalid. You must use only the following supported type prefixes: Binary, Number, String."
        )));
    }
    match (&value.data, base) {
        (AttributeData::String(s), "String" | "Number") => {
            if s.is_empty() {
                return Err(EngineError::invalid(format!(
                    "Message (user) attribute '{name}' must contain a non-empty value of type '{base}'."
                )));
            }
            if let Some(bad) = s.chars().find(|c| !allowed_char(*c)) {
                return Err(EngineError::invalid(format!(
                    "Message (user) attribute '{name}' contains invalid character '#x{:X}'.",
                    bad as u32
                )));
            }
            if base == "Number" && !valid_number(s) {
                return Err(EngineError::invalid(format!(
                    "Can't cast the value of message (user) attribute '{name}' to a number."
                )));
            }
            Ok(())
        }
        (AttributeData::Binary(b), "Binary") if !b.is_empty() => Ok(()),
        _ => Err(EngineError::invalid(format!(
            "Message (user) attribute '{name}' must contain a non-empty value of type '{base}'."
        ))),
    }
}

/// Numbers: optional sign, digits with an optional fraction and exponent, at most 38 significant digits.
fn valid_number(s: &str) -> bool {
    let t = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], Some(&t[i + 1..])),
        None => (t, None),
    };
    let mut parts = mantissa.splitn(2, '.');
    let int = parts.next().unwrap_or("");
    let frac = parts.next().unwrap_or("");
    if int.is_empty() && frac.is_empty() {
        return false;
    }
    if !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return false;
    }
    if let Some(e) = exponent {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        if e.is_empty() || !e.chars().all(|c| c.is_ascii_digit()) {
            return false;
        }
    }
    let significant = format!("{int}{frac}");
    significant.trim_start_matches('0').len() <= 38
}

/// Validates a complete attribute set, including the count limit.
pub fn validate_attributes(attributes: &MessageAttributes) -> EngineResult<()> {
    if attributes.len() > MAX_MESSAGE_ATTRIBUTES {
        return Err(EngineError::invalid(format!(
            "Number of message attributes [{}] exceeds the allowed maximum [{MAX_MESSAGE_ATTRIBUTES}].",
            attributes.len()
        )));
    }
    attributes
        .iter()
        .try_for_each(|(name, value)| validate_attribute(name, value))
}

/// MessageGroupId / MessageDeduplicationId / ReceiveRequestAttemptId: 1-128 alphanumerics and punctuation.
pub fn validate_token(parameter: &str, value: &str) -> EngineResult<()> {
    let ok = !value.is_empty()
        && value.len() <= 128
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c.is_ascii_punctuation());
    if ok {
        Ok(())
    } else {
        Err(EngineError::invalid(format!(
            "Value {value} for parameter {parameter} is invalid. Reason: {parameter} can only include alphanumeric and punctuation characters. 1 to 128 in length."
        )))
    }
}

/// A message as stored: immutable content plus the counters receiving changes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Message {
    pub id: Arc<str>,
    pub body: Arc<str>,
    pub body_md5: Arc<str>,
    pub attributes: MessageAttributes,
    pub attributes_md5: Option<Arc<str>>,
    /// The AWSTraceHeader system attribute, the only one SQS accepts.
    pub trace_header: Option<Arc<str>>,
    pub sender_id: Arc<str>,
    pub sent_at: Timestamp,
    pub group_id: Option<Arc<str>>,
    pub dedup_id: Option<Arc<str>>,
    /// FIFO only: the queue's sequence number for this message.
    pub sequence_number: Option<u128>,
    pub receive_count: u32,
    pub first_receive_at: Option<Timestamp>,
    pub dead_letter_source_arn: Option<Arc<str>>,
}

impl Message {
    /// Size as AWS counts it against MaximumMessageSize.
    pub fn size(&self) -> usize {
        self.body.len() + self.attributes.size()
    }
}

/// The MD5 of the system-attribute map that carries only AWSTraceHeader.
pub fn trace_header_md5(trace_header: &str) -> String {
    let attrs = MessageAttributes::new(vec![(
        "AWSTraceHeader".to_string(),
        AttributeValue {
            data_type: "String".to_string(),
            data: AttributeData::String(trace_header.to_string()),
        },
    )]);
    attrs.md5().expect("one attribute")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(name: &str, v: &str) -> (String, AttributeValue) {
        (
            name.to_string(),
            AttributeValue {
                data_type: "String".into(),
                data: AttributeData::String(v.into()),
            },
        )
    }

    #[test]
    fn md5_of_attributes_matches_aws_vectors() {
        let one = MessageAttributes::new(vec![s("Foo", "Bar")]);
        assert_eq!(one.md5().unwrap(), "ae7155c6026991b6d54b11589678bf9c");
        let three = MessageAttributes::new(vec![
            s("Help.Me", "Me"),
            s("Hello", "There"),
            s("General", "Kenobi"),
        ]);
        assert_eq!(three.md5().unwrap(), "4c360f3fdafd970e05fae2f149d997f5");
        let subset = three.select(&["Hel.*".to_string()]);
        assert_eq!(subset.len(), 2);
        let two = three.select(&["Hello".to_string(), "General".to_string()]);
        assert_eq!(two.md5().unwrap(), "fca026605781cb4126a1e9044df24232");
        let binary = MessageAttributes::new(vec![(
            "attr1".to_string(),
            AttributeValue {
                data_type: "Binary".into(),
                data: AttributeData::Binary(
                    b"traceparent\x1e00-774062d6c37081a5a0b9b5b88e30627c-2d2482211f6489da-01"
                        .to_vec(),
                ),
            },
        )]);
        assert_eq!(binary.md5().unwrap(), "8cbe4db156db8a94db8b801b7addb984");
    }

    #[test]
    fn body_checksums_match_aws() {
        assert_eq!(body_md5("hello"), "5d41402abc4b2a76b9719d911017c592");
        assert_eq!(
            content_dedup_id("hello"),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
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
    fn attribute_rules() {
        let ok = |n: &str, t: &str, v: &str| {
            validate_attribute(
                n,
                &AttributeValue {
                    data_type: t.into(),
                    data: AttributeData::String(v.into()),
                },
            )
        };
        assert!(ok("price", "Number.float", "1.5e3").is_ok());
        assert!(ok("AWS.x", "String", "v").is_err());
        assert!(ok("a..b", "String", "v").is_err());
        assert!(ok(".a", "String", "v").is_err());
        assert!(ok("a", "Strin", "v").is_err());
        assert!(ok("a", "String", "").is_err());
        assert!(ok("a", "Number", "12abc").is_err());
        assert!(ok("a", "Binary", "x").is_err());
    }

    #[test]
    fn selection_patterns() {
        let attrs = MessageAttributes::new(vec![s("a.x", "1"), s("a.y", "2"), s("b", "3")]);
        assert_eq!(attrs.select(&["All".into()]).len(), 3);
        assert_eq!(attrs.select(&["a.*".into()]).len(), 2);
        assert_eq!(attrs.select(&["b".into(), "zzz".into()]).len(), 1);
        assert!(attrs.select(&[]).is_empty());
    }

    #[test]
    fn tokens() {
        assert!(validate_token("MessageGroupId", "g-1!").is_ok());
        assert!(validate_token("MessageGroupId", "").is_err());
        assert!(validate_token("MessageGroupId", "has space").is_err());
        assert!(validate_token("MessageGroupId", &"x".repeat(129)).is_err());
    }
}
