//! Topics: settings and subscriptions, accepted FIFO publishes, and the archive.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::list::List;
use super::message::{attributes, live_attributes, Attributes, DedupEntry, KeyedEntries};
use super::queue::Tags;
use crate::engine::topic::{self as live, archive as live_archive, changes as live_changes};
use crate::engine::Timestamp;

fn owned(s: Option<&str>) -> Option<String> {
    s.map(str::to_string)
}

#[derive(Serialize, Deserialize)]
pub struct DiskReplay<'a> {
    pub start: u64,
    pub end: Option<u64>,
    pub status: &'a str,
}

/// The attributes-map key a subscription's principal is stored under: no attribute can have
/// it (SetSubscriptionAttributes takes only AWS's names), and a record written before the
/// principal was logged simply lacks it, so every record reads in this one layout.
const PRINCIPAL_KEY: &str = "\u{0}SubscriptionPrincipal";

/// A subscription's protocol on disk: its name, as a string field always held it. A name this
/// build does not know fails the record's decoding, so it is refused as damage.
mod protocol_name {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    use crate::engine::topic::SubscriptionProtocol;

    pub fn serialize<S: Serializer>(p: &SubscriptionProtocol, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(p.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        input: D,
    ) -> Result<SubscriptionProtocol, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(input)?;
        SubscriptionProtocol::parse(&name)
            .ok_or_else(|| D::Error::custom(format!("unknown subscription protocol {name:?}")))
    }
}

#[derive(Serialize, Deserialize)]
pub struct DiskSubscription<'a> {
    pub arn: &'a str,
    #[serde(with = "protocol_name")]
    pub protocol: live::SubscriptionProtocol,
    pub endpoint: &'a str,
    pub owner: &'a str,
    pub raw_delivery: bool,
    pub attributes: Tags<'a>,
    pub message_body_scope: bool,
    #[serde(borrow)]
    pub replay: Option<DiskReplay<'a>>,
    pub live: bool,
    pub pending: bool,
    pub confirmation_authenticated: bool,
    pub authenticate_on_unsubscribe: bool,
}

impl<'a> From<&'a live_changes::SubscriptionImage> for DiskSubscription<'a> {
    fn from(s: &'a live_changes::SubscriptionImage) -> Self {
        DiskSubscription {
            arn: &s.arn,
            protocol: s.protocol,
            endpoint: &s.endpoint,
            owner: &s.owner,
            raw_delivery: s.raw_delivery,
            attributes: match &s.principal {
                None => std::borrow::Cow::Borrowed(&s.attributes),
                Some(principal) => {
                    let mut with = s.attributes.clone();
                    with.insert(PRINCIPAL_KEY.into(), principal.to_string());
                    std::borrow::Cow::Owned(with)
                }
            },
            message_body_scope: s.message_body_scope,
            replay: s.replay.as_ref().map(|(start, end, status)| DiskReplay {
                start: start.0,
                end: end.map(|t| t.0),
                status,
            }),
            live: s.live,
            pending: s.pending,
            confirmation_authenticated: s.confirmation_authenticated,
            authenticate_on_unsubscribe: s.authenticate_on_unsubscribe,
        }
    }
}

impl DiskSubscription<'_> {
    pub fn into_live(self) -> live_changes::SubscriptionImage {
        let mut attributes = self.attributes.into_owned();
        let principal = attributes.remove(PRINCIPAL_KEY).map(Arc::from);
        live_changes::SubscriptionImage {
            principal,
            arn: self.arn.into(),
            protocol: self.protocol,
            endpoint: self.endpoint.into(),
            owner: self.owner.into(),
            raw_delivery: self.raw_delivery,
            attributes,
            message_body_scope: self.message_body_scope,
            replay: self
                .replay
                .map(|r| (Timestamp(r.start), r.end.map(Timestamp), r.status.into())),
            live: self.live,
            pending: self.pending,
            confirmation_authenticated: self.confirmation_authenticated,
            authenticate_on_unsubscribe: self.authenticate_on_unsubscribe,
        }
    }
}

#[derive(Serialize, Deserialize)]
pub struct DiskPublication<'a> {
    pub message_id: &'a str,
    pub sequence_number: Option<u128>,
    pub dedup_id: Option<&'a str>,
    pub duplicate: bool,
}

#[derive(Serialize, Deserialize)]
pub struct DiskPublishRequest<'a> {
    pub message: &'a str,
    pub subject: Option<&'a str>,
    pub structured: bool,
    #[serde(borrow)]
    pub attributes: Attributes<'a>,
    pub group_id: Option<&'a str>,
    pub dedup_id: Option<&'a str>,
}

/// One archived publish.
#[derive(Serialize, Deserialize)]
pub struct DiskArchived<'a> {
    #[serde(borrow)]
    pub publication: DiskPublication<'a>,
    #[serde(borrow)]
    pub request: DiskPublishRequest<'a>,
    pub published_at: u64,
}

impl<'a> From<&'a live_archive::Archived> for DiskArchived<'a> {
    fn from(a: &'a live_archive::Archived) -> Self {
        let (p, r) = (&a.publication, &a.request);
        DiskArchived {
            publication: DiskPublication {
                message_id: &p.message_id,
                sequence_number: p.sequence_number,
                dedup_id: p.dedup_id.as_deref(),
                duplicate: p.duplicate,
            },
            request: DiskPublishRequest {
                message: &r.message,
                subject: r.subject.as_deref(),
                structured: r.structured,
                attributes: attributes(&r.attributes),
                group_id: r.group_id.as_deref(),
                dedup_id: r.dedup_id.as_deref(),
            },
            published_at: a.published_at.0,
        }
    }
}

impl DiskArchived<'_> {
    pub fn into_live(self) -> live_archive::Archived {
        let (p, r) = (self.publication, self.request);
        live_archive::Archived {
            publication: live::Publication {
                message_id: p.message_id.into(),
                sequence_number: p.sequence_number,
                dedup_id: owned(p.dedup_id),
                duplicate: p.duplicate,
            },
            request: live::PublishRequest {
                message: r.message.into(),
                subject: owned(r.subject),
                structured: r.structured,
                attributes: live_attributes(r.attributes),
                group_id: owned(r.group_id),
                dedup_id: owned(r.dedup_id),
                trace_header: None,
            },
            published_at: Timestamp(self.published_at),
        }
    }
}

/// A topic's settings, tags and subscriptions; in snapshots also its history.
#[derive(Serialize, Deserialize)]
pub struct DiskTopicImage<'a> {
    pub name: &'a str,
    pub arn: &'a str,
    pub fifo: bool,
    pub owner: &'a str,
    pub settings: Tags<'a>,
    pub tags: Tags<'a>,
    #[serde(borrow)]
    pub subscriptions: List<'a, live_changes::SubscriptionImage, DiskSubscription<'a>>,
    pub deleted_subscriptions: u64,
    pub next_seq: u64,
    pub archive_since: Option<u64>,
    #[serde(borrow)]
    pub dedup: KeyedEntries<'a>,
    #[serde(borrow)]
    pub archive: List<'a, live_archive::Archived, DiskArchived<'a>>,
}

impl<'a> From<&'a live_changes::TopicImage> for DiskTopicImage<'a> {
    fn from(t: &'a live_changes::TopicImage) -> Self {
        debug_assert!(
            t.dedup.is_empty(),
            "only a snapshot holds a topic's history, as its own items"
        );
        DiskTopicImage {
            name: &t.name,
            arn: &t.arn,
            fifo: t.fifo,
            owner: &t.owner,
            settings: std::borrow::Cow::Borrowed(&t.settings),
            tags: std::borrow::Cow::Borrowed(&t.tags),
            subscriptions: List::Write(&t.subscriptions),
            deleted_subscriptions: t.deleted_subscriptions,
            next_seq: t.next_seq,
            archive_since: t.archive_since.map(|t| t.0),
            dedup: List::Write(&[]),
            archive: List::Write(&t.archive),
        }
    }
}

impl DiskTopicImage<'_> {
    pub fn into_live(self) -> live_changes::TopicImage {
        live_changes::TopicImage {
            name: self.name.into(),
            arn: self.arn.into(),
            fifo: self.fifo,
            owner: self.owner.into(),
            settings: self.settings.into_owned(),
            tags: self.tags.into_owned(),
            subscriptions: self
                .subscriptions
                .into_vec()
                .into_iter()
                .map(DiskSubscription::into_live)
                .collect(),
            deleted_subscriptions: self.deleted_subscriptions,
            next_seq: self.next_seq,
            archive_since: self.archive_since.map(Timestamp),
            dedup: self
                .dedup
                .into_vec()
                .into_iter()
                .map(DedupEntry::into_live)
                .collect(),
            archive: self
                .archive
                .into_vec()
                .into_iter()
                .map(DiskArchived::into_live)
                .collect(),
        }
    }
}

/// One change to a topic.
#[derive(Serialize, Deserialize)]
pub enum DiskTopicChange<'a> {
    /// The topic's settings, tags and subscriptions as they now are (no history).
    Settings(#[serde(borrow)] DiskTopicImage<'a>),
    /// One accepted publish of a FIFO topic.
    Published {
        key: &'a str,
        message_id: &'a str,
        sequence_number: u128,
        expires_at: u64,
        #[serde(borrow)]
        archived: Option<DiskArchived<'a>>,
    },
    /// Since version 2.
    Reset,
}

impl<'a> From<&'a live_changes::TopicChange> for DiskTopicChange<'a> {
    fn from(change: &'a live_changes::TopicChange) -> Self {
        match change {
            live_changes::TopicChange::Settings(image) => {
                DiskTopicChange::Settings(DiskTopicImage::from(&**image))
            }
            live_changes::TopicChange::Published {
                key,
                message_id,
                sequence_number,
                expires_at,
                archived,
            } => DiskTopicChange::Published {
                key,
                message_id,
                sequence_number: *sequence_number,
                expires_at: expires_at.0,
                archived: archived.as_deref().map(DiskArchived::from),
            },
            live_changes::TopicChange::Reset => DiskTopicChange::Reset,
        }
    }
}

impl DiskTopicChange<'_> {
    pub fn into_live(self) -> live_changes::TopicChange {
        match self {
            DiskTopicChange::Settings(image) => {
                live_changes::TopicChange::Settings(Box::new(image.into_live()))
            }
            DiskTopicChange::Published {
                key,
                message_id,
                sequence_number,
                expires_at,
                archived,
            } => live_changes::TopicChange::Published {
                key: key.into(),
                message_id: message_id.into(),
                sequence_number,
                expires_at: Timestamp(expires_at),
                archived: archived.map(|a| Box::new(a.into_live())),
            },
            DiskTopicChange::Reset => live_changes::TopicChange::Reset,
        }
    }
}
