//! Messages and message attributes: validation by AWS's rules and the checksums SDKs verify.
//!
//! Checksums are computed once, when a message is accepted, and carried with it.

use std::sync::Arc;

use md5::{Digest, Md5};

use super::body::{allowed_char, Body, BodyText};
pub use super::digest::{hex, HexDigest, Md5Digest};
use super::error::{EngineError, EngineResult};
use super::time::Timestamp;

/// At most this many message attributes per message.
pub const MAX_MESSAGE_ATTRIBUTES: usize = 10;

/// The value of one message attribute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttributeData {
    String(String),
    Binary(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttributeValue {
    /// Full data type, custom suffix included (`Number.float`).
    pub data_type: String,
    pub data: AttributeData,
}

/// Attributes sorted by name (byte order), the order the MD5 algorithm needs. Most messages
/// have none, and hold no allocation for them (an empty `Arc<[_]>` still allocates its counts).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessageAttributes(Option<Arc<[(String, AttributeValue)]>>);

impl MessageAttributes {
    pub fn new(mut entries: Vec<(String, AttributeValue)>) -> Self {
        entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        Self::from_sorted(entries)
    }

    /// Attributes already in byte order of their names (as stored).
    pub(crate) fn from_sorted(entries: Vec<(String, AttributeValue)>) -> Self {
        MessageAttributes((!entries.is_empty()).then(|| entries.into()))
    }

    pub(crate) fn entries(&self) -> &[(String, AttributeValue)] {
        self.0.as_deref().unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub fn len(&self) -> usize {
        self.entries().len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &(String, AttributeValue)> {
        self.entries().iter()
    }

    pub fn get(&self, name: &str) -> Option<&AttributeValue> {
        self.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Bytes counted toward the message size: name, data type and value of each attribute.
    pub fn size(&self) -> usize {
        self.iter()
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
            Self::from_sorted(chosen)
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
        for (name, value) in self.iter() {
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

/// A FIFO sequence number. AWS's are 20 digits, which still fit 64 bits (queues start at
/// 18 * 10^18); held in a `NonZeroU64` so an optional one costs 8 bytes per stored message
/// instead of a `u128`'s padded 32.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct SequenceNumber(std::num::NonZeroU64);

impl SequenceNumber {
    /// 18 * 10^18: a queue's first message is one past it.
    pub const BASE: SequenceNumber = match std::num::NonZeroU64::new(18_000_000_000_000_000_000) {
        Some(base) => SequenceNumber(base),
        None => panic!("nonzero"),
    };

    pub fn get(self) -> u128 {
        self.0.get() as u128
    }
}

impl From<u128> for SequenceNumber {
    /// Saturates: reaching u64::MAX from a queue's base takes over 4 * 10^17 sends.
    fn from(value: u128) -> SequenceNumber {
        let value = u64::try_from(value).unwrap_or(u64::MAX);
        SequenceNumber(std::num::NonZeroU64::new(value).unwrap_or(std::num::NonZeroU64::MIN))
    }
}

impl std::fmt::Display for SequenceNumber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl SequenceNumber {
    /// The number itself, if it fits (`From` saturates instead).
    pub fn exact(value: u128) -> Option<SequenceNumber> {
        u64::try_from(value)
            .ok()
            .and_then(std::num::NonZeroU64::new)
            .map(SequenceNumber)
    }
}

/// A message id held as the 16 bytes of its UUID and written out when answered: a heap string
/// per stored message would cost more memory than the id itself.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageId(uuid::Uuid);

impl MessageId {
    pub fn random() -> MessageId {
        MessageId(uuid::Uuid::new_v4())
    }

    /// The id in its hyphenated form, without going through `fmt` or the heap.
    pub fn text(&self) -> IdText {
        let mut text = [0; uuid::fmt::Hyphenated::LENGTH];
        self.0.hyphenated().encode_lower(&mut text);
        IdText(text)
    }
}

/// A message id spelt out.
pub struct IdText([u8; uuid::fmt::Hyphenated::LENGTH]);

impl IdText {
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("a hyphenated UUID is ASCII")
    }
}

impl std::fmt::Display for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

impl std::fmt::Debug for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl MessageId {
    pub fn parse(text: &str) -> Option<MessageId> {
        uuid::Uuid::parse_str(text).ok().map(MessageId)
    }
}

/// Lower-case hex SHA-256 of a body: the content-based deduplication id.
pub fn content_dedup_id(body: &str) -> String {
    use sha2::Sha256;
    hex(&Sha256::digest(body.as_bytes()))
}

/// Which rule a message attribute's name breaks. SQS and SNS share the rules and word them
/// differently (SNS: `topic::attribute_errors`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameFault {
    Empty,
    /// Over 256 bytes.
    TooLong,
    /// The first character that is not a letter, digit, `_`, `-` or `.`.
    Character(char),
    LeadingDot,
    TrailingDot,
    SuccessiveDots,
    /// `AWS.` or `Amazon.`, in any case.
    Reserved,
}

/// The first rule the name breaks, in the order SNS reports them.
pub fn attribute_name_fault(name: &str) -> Option<NameFault> {
    let lower = name.to_ascii_lowercase();
    // Letters and digits of any script: AWS accepts `attr.1øßä`.
    let allowed = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '.');
    if name.is_empty() {
        Some(NameFault::Empty)
    } else if name.len() > 256 {
        Some(NameFault::TooLong)
    } else if let Some(bad) = name.chars().find(|c| !allowed(*c)) {
        Some(NameFault::Character(bad))
    } else if name.starts_with('.') {
        Some(NameFault::LeadingDot)
    } else if name.ends_with('.') {
        Some(NameFault::TrailingDot)
    } else if name.contains("..") {
        Some(NameFault::SuccessiveDots)
    } else if lower.starts_with("aws.") || lower.starts_with("amazon.") {
        Some(NameFault::Reserved)
    } else {
        None
    }
}

/// Checks one message attribute against AWS's name, type and value rules.
pub fn validate_attribute(name: &str, value: &AttributeValue) -> EngineResult<()> {
    if attribute_name_fault(name).is_some() {
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

/// Numbers: optional sign, digits with an optional fraction and exponent, at most 38 significant
/// digits, 0 or between 10^-128 and 10^+126 in magnitude.
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
    let exponent = match exponent {
        Some(e) => {
            let digits = e.strip_prefix(['-', '+']).unwrap_or(e);
            if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
                return false;
            }
            // Too long to parse is far outside the range (unless the value is zero).
            e.parse::<i64>().ok()
        }
        None => Some(0),
    };
    // Leading and trailing zeros are trimmed (AWS's documentation): what is left is the
    // precision, and where its first digit stands the magnitude.
    let digits = format!("{int}{frac}");
    let significant = digits.trim_start_matches('0').trim_end_matches('0');
    if significant.is_empty() {
        return true;
    }
    if significant.len() > 38 {
        return false;
    }
    let Some(exponent) = exponent else {
        return false;
    };
    let leading_zeros = (digits.len() - digits.trim_start_matches('0').len()) as i64;
    // The power of ten of the first significant digit: 10^-128 to 10^+126 (that bound itself
    // only for 1 exactly).
    let first = int.len() as i64 - 1 - leading_zeros + exponent;
    (-128..126).contains(&first) || (first == 126 && significant == "1")
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
#[derive(Clone, Debug)]
pub struct Message {
    pub id: MessageId,
    pub body: BodyText,
    pub body_md5: Md5Digest,
    pub attributes: MessageAttributes,
    pub sender_id: Arc<str>,
    pub sent_at: Timestamp,
    pub group_id: Option<Arc<str>>,
    pub dedup_id: Option<Arc<str>>,
    /// FIFO only: the queue's sequence number for this message.
    pub sequence_number: Option<SequenceNumber>,
    pub receive_count: u32,
    pub first_receive_at: Option<Timestamp>,
    /// What most messages lack, behind one pointer: three empty slots inline would cost every
    /// stored message 40 bytes.
    extras: Option<Box<Extras>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Extras {
    attributes_md5: Option<Arc<str>>,
    /// The AWSTraceHeader system attribute, the only one SQS accepts.
    trace_header: Option<Arc<str>>,
    dead_letter_source_arn: Option<Arc<str>>,
}

impl Extras {
    fn boxed(self) -> Option<Box<Extras>> {
        (self != Extras::default()).then(|| Box::new(self))
    }
}

/// Every field of a stored message, flat (what recovery rebuilds one from).
pub struct MessageParts {
    pub id: MessageId,
    pub body: BodyText,
    pub body_md5: Md5Digest,
    pub attributes: MessageAttributes,
    pub attributes_md5: Option<Arc<str>>,
    pub trace_header: Option<Arc<str>>,
    pub sender_id: Arc<str>,
    pub sent_at: Timestamp,
    pub group_id: Option<Arc<str>>,
    pub dedup_id: Option<Arc<str>>,
    pub sequence_number: Option<SequenceNumber>,
    pub receive_count: u32,
    pub first_receive_at: Option<Timestamp>,
    pub dead_letter_source_arn: Option<Arc<str>>,
}

impl From<MessageParts> for Message {
    fn from(f: MessageParts) -> Message {
        Message {
            id: f.id,
            body: f.body,
            body_md5: f.body_md5,
            attributes: f.attributes,
            sender_id: f.sender_id,
            sent_at: f.sent_at,
            group_id: f.group_id,
            dedup_id: f.dedup_id,
            sequence_number: f.sequence_number,
            receive_count: f.receive_count,
            first_receive_at: f.first_receive_at,
            extras: Extras {
                attributes_md5: f.attributes_md5,
                trace_header: f.trace_header,
                dead_letter_source_arn: f.dead_letter_source_arn,
            }
            .boxed(),
        }
    }
}

/// The content of a new message, before a queue numbers it.
pub struct NewMessage {
    pub body: Body,
    pub attributes: MessageAttributes,
    pub attributes_md5: Option<Arc<str>>,
    pub trace_header: Option<Arc<str>>,
    pub sender_id: Arc<str>,
    pub sent_at: Timestamp,
    pub group_id: Option<Arc<str>>,
    pub dedup_id: Option<Arc<str>>,
}

impl Message {
    /// A message never received, with a fresh id and the body's MD5.
    pub fn new(m: NewMessage) -> Message {
        Message {
            id: MessageId::random(),
            body_md5: m.body.md5(),
            body: m.body.into_text(),
            attributes: m.attributes,
            sender_id: m.sender_id,
            sent_at: m.sent_at,
            group_id: m.group_id,
            dedup_id: m.dedup_id,
            sequence_number: None,
            receive_count: 0,
            first_receive_at: None,
            extras: Extras {
                attributes_md5: m.attributes_md5,
                trace_header: m.trace_header,
                dead_letter_source_arn: None,
            }
            .boxed(),
        }
    }

    pub fn attributes_md5(&self) -> Option<&Arc<str>> {
        self.extras.as_ref()?.attributes_md5.as_ref()
    }

    pub fn trace_header(&self) -> Option<&Arc<str>> {
        self.extras.as_ref()?.trace_header.as_ref()
    }

    /// The queue a dead-lettered message came from.
    pub fn dead_letter_source_arn(&self) -> Option<&Arc<str>> {
        self.extras.as_ref()?.dead_letter_source_arn.as_ref()
    }

    pub fn set_dead_letter_source_arn(&mut self, arn: Option<Arc<str>>) {
        let mut extras = self.extras.take().map(|e| *e).unwrap_or_default();
        extras.dead_letter_source_arn = arn;
        self.extras = extras.boxed();
    }

    /// Moved back out of a dead-letter queue: it starts over, as if sent again.
    pub fn redriven(&mut self) {
        self.set_dead_letter_source_arn(None);
        self.receive_count = 0;
        self.first_receive_at = None;
    }
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

/// Text kept and later answered in XML (tags, topic and subscription attributes) holds only
/// the characters a message body may; `Err` names the first other one.
pub fn check_xml_text(text: &str) -> Result<(), u32> {
    match text.chars().find(|c| !allowed_char(*c)) {
        Some(bad) => Err(bad as u32),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
