//! The relay's parcels (copies for other shards' queues) and what was applied from other
//! shards, as log records and snapshot items hold them (format version 6).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::message::{attributes, live_attributes, Attributes, DiskMessage};
use crate::engine::body::Body;
use crate::engine::parcel::{Contents, Parcel, ParcelChange, RelayedCopy, RelayedMove};

#[derive(Serialize, Deserialize)]
pub struct DiskRelayedCopy<'a> {
    queue_arn: &'a str,
    topic_arn: Option<&'a str>,
    dead_letter_arn: Option<&'a str>,
    dead_letter: bool,
    body: &'a str,
    #[serde(borrow)]
    attributes: Attributes<'a>,
    envelope: Option<&'a str>,
    group_id: Option<&'a str>,
    dedup_id: Option<&'a str>,
    fifo_topic: bool,
    bypass_dedup: bool,
    trace_header: Option<&'a str>,
}

#[derive(Serialize, Deserialize)]
pub struct DiskRelayedMove<'a> {
    queue_arn: &'a str,
    source_arn: &'a str,
    #[serde(borrow)]
    message: DiskMessage<'a>,
}

impl<'a> From<&'a RelayedMove> for DiskRelayedMove<'a> {
    fn from(moved: &'a RelayedMove) -> Self {
        DiskRelayedMove {
            queue_arn: &moved.queue_arn,
            source_arn: &moved.source_arn,
            message: (&moved.message).into(),
        }
    }
}

impl DiskRelayedMove<'_> {
    fn into_live(self) -> Box<RelayedMove> {
        Box::new(RelayedMove {
            queue_arn: self.queue_arn.into(),
            source_arn: self.source_arn.into(),
            message: self.message.into_live(),
        })
    }
}

#[allow(clippy::large_enum_variant)]
#[derive(Serialize, Deserialize)]
pub enum DiskContents<'a> {
    Copy(#[serde(borrow)] DiskRelayedCopy<'a>),
    DeadLetter(#[serde(borrow)] DiskRelayedMove<'a>),
    Returned(#[serde(borrow)] DiskRelayedMove<'a>),
    Redriven(#[serde(borrow)] DiskRelayedMove<'a>),
}

// Built to be written at once (or read and turned into engine state), never kept: boxing the
// contents would cost each parcel an allocation for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Serialize, Deserialize)]
pub enum DiskParcelChange<'a> {
    Sent {
        to: u32,
        seq: u64,
        #[serde(borrow)]
        contents: DiskContents<'a>,
    },
    Forgotten {
        to: u32,
        through: u64,
    },
    Applied {
        from: u32,
        through: u64,
    },
}

impl<'a> From<&'a ParcelChange> for DiskParcelChange<'a> {
    fn from(change: &'a ParcelChange) -> Self {
        match change {
            ParcelChange::Sent { to, parcel } => DiskParcelChange::Sent {
                to: *to,
                seq: parcel.seq,
                contents: match &*parcel.contents {
                    Contents::Copy(copy) => DiskContents::Copy(DiskRelayedCopy {
                        queue_arn: &copy.queue_arn,
                        topic_arn: copy.topic_arn.as_deref(),
                        dead_letter_arn: copy.dead_letter_arn.as_deref(),
                        dead_letter: copy.dead_letter,
                        body: &copy.body,
                        attributes: attributes(&copy.attributes),
                        envelope: copy.envelope.as_deref(),
                        group_id: copy.group_id.as_deref(),
                        dedup_id: copy.dedup_id.as_deref(),
                        fifo_topic: copy.fifo_topic,
                        bypass_dedup: copy.bypass_dedup,
                        trace_header: copy.trace_header.as_deref(),
                    }),
                    Contents::DeadLetter(moved) => DiskContents::DeadLetter((&**moved).into()),
                    Contents::Returned(moved) => DiskContents::Returned((&**moved).into()),
                    Contents::Redriven(moved) => DiskContents::Redriven((&**moved).into()),
                },
            },
            ParcelChange::Forgotten { to, through } => DiskParcelChange::Forgotten {
                to: *to,
                through: *through,
            },
            ParcelChange::Applied { from, through } => DiskParcelChange::Applied {
                from: *from,
                through: *through,
            },
        }
    }
}

impl DiskParcelChange<'_> {
    pub fn into_live(self) -> ParcelChange {
        let arc = |s: Option<&str>| s.map(Arc::from);
        match self {
            DiskParcelChange::Sent { to, seq, contents } => {
                let copy = match contents {
                    DiskContents::Copy(copy) => copy,
                    DiskContents::DeadLetter(moved) => {
                        return sent(to, seq, Contents::DeadLetter(moved.into_live()))
                    }
                    DiskContents::Returned(moved) => {
                        return sent(to, seq, Contents::Returned(moved.into_live()))
                    }
                    DiskContents::Redriven(moved) => {
                        return sent(to, seq, Contents::Redriven(moved.into_live()))
                    }
                };
                let copy = RelayedCopy {
                    queue_arn: copy.queue_arn.into(),
                    topic_arn: arc(copy.topic_arn),
                    dead_letter_arn: arc(copy.dead_letter_arn),
                    dead_letter: copy.dead_letter,
                    body: Body::new(copy.body),
                    attributes: live_attributes(copy.attributes),
                    envelope: copy.envelope.map(Body::new),
                    group_id: arc(copy.group_id),
                    dedup_id: arc(copy.dedup_id),
                    fifo_topic: copy.fifo_topic,
                    bypass_dedup: copy.bypass_dedup,
                    trace_header: arc(copy.trace_header),
                    note_for: None,
                };
                sent(to, seq, Contents::Copy(Box::new(copy)))
            }
            DiskParcelChange::Forgotten { to, through } => ParcelChange::Forgotten { to, through },
            DiskParcelChange::Applied { from, through } => ParcelChange::Applied { from, through },
        }
    }
}

fn sent(to: u32, seq: u64, contents: Contents) -> ParcelChange {
    ParcelChange::Sent {
        to,
        parcel: Parcel::new(seq, contents),
    }
}

/// The relay's changes of one record or snapshot chunk.
pub type ParcelChanges<'a> = super::list::List<'a, ParcelChange, DiskParcelChange<'a>>;
