//! Messages as stored in queues: the message, its receive state, and deduplication entries.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::list::List;
use crate::engine::dedup::DedupDigest;
use crate::engine::message::{self as live, MessageAttributes};
use crate::engine::queue as queue_live;
use crate::engine::Timestamp;

/// A message id, written as its hyphenated text.
#[derive(Clone, Copy)]
pub struct Id(pub live::MessageId);

impl Serialize for Id {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.text().as_str())
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <&str>::deserialize(deserializer)?;
        live::MessageId::parse(text)
            .map(Id)
            .ok_or_else(|| serde::de::Error::custom("a message id is a UUID"))
    }
}

/// An MD5 digest, written as 32 lower-case hex digits.
#[derive(Clone, Copy)]
pub struct Md5(pub live::Md5Digest);

impl Serialize for Md5 {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.hex().as_str())
    }
}

impl<'de> Deserialize<'de> for Md5 {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <&str>::deserialize(deserializer)?;
        live::Md5Digest::parse_hex(text)
            .map(Md5)
            .ok_or_else(|| serde::de::Error::custom("an MD5 is 32 lower-case hex digits"))
    }
}

/// A FIFO sequence number, written as a u128.
#[derive(Clone, Copy)]
pub struct Seq(pub live::SequenceNumber);

impl Serialize for Seq {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u128(self.0.get())
    }
}

impl<'de> Deserialize<'de> for Seq {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = u128::deserialize(deserializer)?;
        live::SequenceNumber::exact(value)
            .map(Seq)
            .ok_or_else(|| serde::de::Error::custom("sequence number out of range"))
    }
}

#[derive(Serialize, Deserialize)]
pub enum DiskAttributeData<'a> {
    String(&'a str),
    Binary(&'a [u8]),
}

/// One message attribute: (name, data type, value).
#[derive(Serialize, Deserialize)]
pub struct Attribute<'a> {
    pub name: &'a str,
    pub data_type: &'a str,
    #[serde(borrow)]
    pub data: DiskAttributeData<'a>,
}

impl<'a> From<&'a (String, live::AttributeValue)> for Attribute<'a> {
    fn from((name, value): &'a (String, live::AttributeValue)) -> Self {
        Attribute {
            name,
            data_type: &value.data_type,
            data: match &value.data {
                live::AttributeData::String(s) => DiskAttributeData::String(s),
                live::AttributeData::Binary(b) => DiskAttributeData::Binary(b),
            },
        }
    }
}

pub type Attributes<'a> = List<'a, (String, live::AttributeValue), Attribute<'a>>;

pub fn attributes(live: &MessageAttributes) -> Attributes<'_> {
    List::Write(live.entries())
}

pub fn live_attributes(stored: Attributes<'_>) -> MessageAttributes {
    MessageAttributes::from_sorted(
        stored
            .into_vec()
            .into_iter()
            .map(|a| {
                let data = match a.data {
                    DiskAttributeData::String(s) => live::AttributeData::String(s.to_string()),
                    DiskAttributeData::Binary(b) => live::AttributeData::Binary(b.to_vec()),
                };
                let value = live::AttributeValue {
                    data_type: a.data_type.to_string(),
                    data,
                };
                (a.name.to_string(), value)
            })
            .collect(),
    )
}

#[derive(Serialize, Deserialize)]
pub struct DiskMessage<'a> {
    pub id: Id,
    pub body: &'a str,
    pub body_md5: Md5,
    #[serde(borrow)]
    pub attributes: Attributes<'a>,
    pub attributes_md5: Option<&'a str>,
    pub trace_header: Option<&'a str>,
    pub sender_id: &'a str,
    pub sent_at: u64,
    pub group_id: Option<&'a str>,
    pub dedup_id: Option<&'a str>,
    pub sequence_number: Option<Seq>,
    pub receive_count: u32,
    pub first_receive_at: Option<u64>,
    pub dead_letter_source_arn: Option<&'a str>,
}

impl<'a> From<&'a live::Message> for DiskMessage<'a> {
    fn from(m: &'a live::Message) -> Self {
        DiskMessage {
            id: Id(m.id),
            body: &m.body,
            body_md5: Md5(m.body_md5),
            attributes: attributes(&m.attributes),
            attributes_md5: m.attributes_md5().map(|s| &**s),
            trace_header: m.trace_header().map(|s| &**s),
            sender_id: &m.sender_id,
            sent_at: m.sent_at.0,
            group_id: m.group_id.as_deref(),
            dedup_id: m.dedup_id.as_deref(),
            sequence_number: m.sequence_number.map(Seq),
            receive_count: m.receive_count,
            first_receive_at: m.first_receive_at.map(|t| t.0),
            dead_letter_source_arn: m.dead_letter_source_arn().map(|s| &**s),
        }
    }
}

impl DiskMessage<'_> {
    pub fn into_live(self) -> live::Message {
        let arc = |s: Option<&str>| s.map(Arc::from);
        live::Message::from(live::MessageParts {
            id: self.id.0,
            body: self.body.into(),
            body_md5: self.body_md5.0,
            attributes: live_attributes(self.attributes),
            attributes_md5: arc(self.attributes_md5),
            trace_header: arc(self.trace_header),
            sender_id: self.sender_id.into(),
            sent_at: Timestamp(self.sent_at),
            group_id: arc(self.group_id),
            dedup_id: arc(self.dedup_id),
            sequence_number: self.sequence_number.map(|s| s.0),
            receive_count: self.receive_count,
            first_receive_at: self.first_receive_at.map(Timestamp),
            dead_letter_source_arn: arc(self.dead_letter_source_arn),
        })
    }
}

#[derive(Clone, Copy, Serialize, Deserialize)]
pub enum DiskState {
    Delayed(u64),
    Visible,
    InFlight(u64),
}

impl From<queue_live::State> for DiskState {
    fn from(state: queue_live::State) -> Self {
        match state {
            queue_live::State::Delayed(t) => DiskState::Delayed(t.0),
            queue_live::State::Visible => DiskState::Visible,
            queue_live::State::InFlight(t) => DiskState::InFlight(t.0),
        }
    }
}

impl From<DiskState> for queue_live::State {
    fn from(state: DiskState) -> Self {
        match state {
            DiskState::Delayed(t) => queue_live::State::Delayed(Timestamp(t)),
            DiskState::Visible => queue_live::State::Visible,
            DiskState::InFlight(t) => queue_live::State::InFlight(Timestamp(t)),
        }
    }
}

/// A message in a queue with its receive state.
#[derive(Serialize, Deserialize)]
pub struct DiskStored<'a> {
    #[serde(borrow)]
    pub message: DiskMessage<'a>,
    pub state: DiskState,
    pub receive_no: u64,
    pub visibility_changes: u32,
    pub received_at: u64,
    pub enqueued_at: u64,
}

impl<'a> From<&'a queue_live::Stored> for DiskStored<'a> {
    fn from(s: &'a queue_live::Stored) -> Self {
        DiskStored {
            message: DiskMessage::from(&s.message),
            state: s.state.into(),
            receive_no: s.receive_no,
            visibility_changes: s.visibility_changes,
            received_at: s.received_at.0,
            enqueued_at: s.enqueued_at.0,
        }
    }
}

impl DiskStored<'_> {
    pub fn into_live(self) -> queue_live::Stored {
        queue_live::Stored {
            message: self.message.into_live(),
            state: self.state.into(),
            receive_no: self.receive_no,
            visibility_changes: self.visibility_changes,
            received_at: Timestamp(self.received_at),
            enqueued_at: Timestamp(self.enqueued_at),
        }
    }
}

/// What a deduplication id stands for: the original's id and sequence number.
#[derive(Clone, Copy, Serialize, Deserialize)]
pub struct DiskDedupRecord {
    pub message_id: Id,
    pub sequence_number: Option<Seq>,
}

impl From<&queue_live::DedupRecord> for DiskDedupRecord {
    fn from(r: &queue_live::DedupRecord) -> Self {
        DiskDedupRecord {
            message_id: Id(r.message_id),
            sequence_number: r.sequence_number.map(Seq),
        }
    }
}

impl From<DiskDedupRecord> for queue_live::DedupRecord {
    fn from(r: DiskDedupRecord) -> Self {
        queue_live::DedupRecord {
            message_id: r.message_id.0,
            sequence_number: r.sequence_number.map(|s| s.0),
        }
    }
}

/// A deduplication entry as format versions up to 3 wrote it in snapshots: its key, record and
/// expiry. Read into the key's digest; topics' entries had the same layout.
#[derive(Serialize, Deserialize)]
pub struct DedupEntry<'a> {
    pub key: &'a str,
    pub record: DiskDedupRecord,
    pub expires_at: u64,
}

impl<'a> From<&'a (Arc<str>, queue_live::DedupRecord, Timestamp)> for DedupEntry<'a> {
    fn from((key, record, expires_at): &'a (Arc<str>, queue_live::DedupRecord, Timestamp)) -> Self {
        DedupEntry {
            key,
            record: record.into(),
            expires_at: expires_at.0,
        }
    }
}

impl DedupEntry<'_> {
    pub fn into_live(self) -> (DedupDigest, queue_live::DedupRecord, Timestamp) {
        (
            DedupDigest::of(self.key),
            self.record.into(),
            Timestamp(self.expires_at),
        )
    }
}

/// A deduplication entry of a queue or topic (since version 4): the digest of its key, the
/// record and expiry.
#[derive(Serialize, Deserialize)]
pub struct DigestEntry {
    pub digest: [u8; 16],
    pub record: DiskDedupRecord,
    pub expires_at: u64,
}

impl From<&(DedupDigest, queue_live::DedupRecord, Timestamp)> for DigestEntry {
    fn from(
        (digest, record, expires_at): &(DedupDigest, queue_live::DedupRecord, Timestamp),
    ) -> Self {
        DigestEntry {
            digest: digest.0,
            record: record.into(),
            expires_at: expires_at.0,
        }
    }
}

impl DigestEntry {
    pub fn into_live(self) -> (DedupDigest, queue_live::DedupRecord, Timestamp) {
        (
            DedupDigest(self.digest),
            self.record.into(),
            Timestamp(self.expires_at),
        )
    }
}

/// The entries of a deduplication history, as a snapshot writes them.
pub type DigestEntries<'a> =
    List<'a, (DedupDigest, queue_live::DedupRecord, Timestamp), DigestEntry>;

/// The entries of a deduplication history in an image, where versions up to 3 put them (and
/// nothing but an empty list is written now: snapshots chunk them as `DigestEntries`).
pub type KeyedEntries<'a> =
    List<'a, (Arc<str>, queue_live::DedupRecord, Timestamp), DedupEntry<'a>>;

/// One message a receive attempt returned.
#[derive(Serialize, Deserialize)]
pub struct Returned {
    pub seq: u64,
    pub receive_no: u64,
    pub visibility_changes: u32,
}

impl From<&(u64, u64, u32)> for Returned {
    fn from(&(seq, receive_no, visibility_changes): &(u64, u64, u32)) -> Self {
        Returned {
            seq,
            receive_no,
            visibility_changes,
        }
    }
}

pub type DiskAttemptEntries<'a> = List<'a, (u64, u64, u32), Returned>;

/// A receive attempt id's entry: (key, entries, expiry).
#[derive(Serialize, Deserialize)]
pub struct AttemptEntry<'a> {
    pub key: &'a str,
    #[serde(borrow)]
    pub entries: DiskAttemptEntries<'a>,
    pub expires_at: u64,
}

impl<'a> From<&'a (String, queue_live::AttemptEntries, Timestamp)> for AttemptEntry<'a> {
    fn from(
        (key, entries, expires_at): &'a (String, queue_live::AttemptEntries, Timestamp),
    ) -> Self {
        AttemptEntry {
            key,
            entries: List::Write(entries),
            expires_at: expires_at.0,
        }
    }
}

impl AttemptEntry<'_> {
    pub fn into_live(self) -> (String, queue_live::AttemptEntries, Timestamp) {
        (
            self.key.to_string(),
            self.entries
                .into_vec()
                .into_iter()
                .map(|r| (r.seq, r.receive_no, r.visibility_changes))
                .collect(),
            Timestamp(self.expires_at),
        )
    }
}
