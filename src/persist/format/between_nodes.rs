//! Parcels as one node hands them to another: the destination shard's leader pulls them from
//! the source's (`backend::sharded::pulling`), one pull naming every pair of shards between
//! the two nodes (`encode_pull`) and its answer holding each pair's parcels (`encode_pulled`).
//! Each parcel is written as a log record holds it, after this build's format version, so
//! nodes of different versions refuse each other's.
//! What a listing gathered over every shard reads of another node's shard (a subscription, as
//! a snapshot holds it; a queue at a glance; a subscription's last deliveries) travels as text:
//! the format version and the item, in base64.

use std::sync::Arc;

use base64::Engine as _;

use serde::{Deserialize, Serialize};

use super::relay::DiskParcelChange;
use super::topic::DiskSubscription;
use super::{FormatError, VERSION};
use crate::engine::parcel::{Contents, NoteFor, Parcel, ParcelChange, Settles};
use crate::engine::queue::inspect::QueueOverview;
use crate::engine::queue::{Activity, Counts};
use crate::engine::relay::Settled;
use crate::engine::topic::recent::{DeliveryNote, Fate};
use crate::engine::topic::Subscription;
use crate::engine::Timestamp;

/// A copy's note as an earlier build hands it on: its subscription's ARN and its message id,
/// for a publish's note only.
type CopyNote<'a> = Option<(&'a str, &'a str)>;

/// A copy's note as it crosses: its subscription's ARN, its message id and what it settles
/// (`Settles::bits`).
type SettlingNote<'a> = Option<(&'a str, &'a str, u8)>;

/// Parcels for shard `to` as one node hands them to another (the destination's leader pulls
/// them from the source's): this build's format version, then each parcel as a log record
/// holds it, then the notes each copy settles at its topic (kept in memory only, so not in the
/// log's records) twice: first those that settle a publish's note, as an earlier build reads
/// them (it reads no further), then every note with what it settles.
pub fn encode_parcels(to: u32, parcels: &[Parcel]) -> postcard::Result<Vec<u8>> {
    let changes: Vec<ParcelChange> = (parcels.iter())
        .map(|parcel| ParcelChange::Sent {
            to,
            parcel: parcel.clone(),
        })
        .collect();
    let disk: Vec<DiskParcelChange<'_>> = changes.iter().map(DiskParcelChange::from).collect();
    let note_of = |parcel: &'_ Parcel| match &*parcel.contents {
        Contents::Copy(copy) => copy.note_for.clone(),
        _ => None,
    };
    let notes: Vec<Option<NoteFor>> = parcels.iter().map(note_of).collect();
    let earlier: Vec<CopyNote<'_>> = (notes.iter())
        .map(|note| {
            (note.as_ref())
                .filter(|note| note.settles.delivery_note)
                .map(|note| (&*note.subscription_arn, &*note.message_id))
        })
        .collect();
    let settling: Vec<SettlingNote<'_>> = (notes.iter())
        .map(|note| {
            (note.as_ref()).map(|note| {
                (
                    &*note.subscription_arn,
                    &*note.message_id,
                    note.settles.bits(),
                )
            })
        })
        .collect();
    postcard::to_stdvec(&(u32::from(VERSION), disk, earlier, settling))
}

/// The parcels `encode_parcels` wrote for shard `to`, each copy with its note; refused when
/// written by another format version or for another shard, or damaged.
pub fn decode_parcels(to: u32, bytes: &[u8]) -> Result<Vec<Parcel>, FormatError> {
    let what = "parcels from another node";
    let damaged = |e: postcard::Error| FormatError::Damaged(format!("{what}: {e}"));
    let rest = version_checked(bytes, what)?;
    let (disk, rest) =
        postcard::take_from_bytes::<Vec<DiskParcelChange<'_>>>(rest).map_err(damaged)?;
    // A node of an earlier build sends no notes (its copies settle none), or only the notes
    // of publishes.
    let (earlier, rest): (Vec<CopyNote<'_>>, &[u8]) = if rest.is_empty() {
        (vec![None; disk.len()], rest)
    } else {
        postcard::take_from_bytes(rest).map_err(damaged)?
    };
    let notes: Vec<SettlingNote<'_>> = if rest.is_empty() {
        (earlier.into_iter())
            .map(|note| note.map(|(s, m)| (s, m, Settles::DELIVERY_NOTE.bits())))
            .collect()
    } else {
        postcard::from_bytes(rest).map_err(damaged)?
    };
    if notes.len() != disk.len() {
        return Err(FormatError::Damaged(format!(
            "{what}: not one note for each"
        )));
    }
    (disk.into_iter().zip(notes))
        .map(|(change, note)| match change.into_live() {
            ParcelChange::Sent {
                to: sent_to,
                mut parcel,
            } if sent_to == to => {
                if let (Some((subscription_arn, message_id, settles)), Some(Contents::Copy(copy))) =
                    (note, Arc::get_mut(&mut parcel.contents))
                {
                    copy.note_for = Some(NoteFor {
                        subscription_arn: subscription_arn.into(),
                        message_id: message_id.into(),
                        settles: Settles::from_bits(settles),
                    });
                }
                Ok(parcel)
            }
            _ => Err(FormatError::Damaged(format!(
                "parcels from another node: one is not a parcel for shard {to}"
            ))),
        })
        .collect()
}

/// One pair of shards a pull asks for: the parcels shard `from` (led by the asked node) holds
/// for shard `to` (led by the asking one) after number `after`, which `to` has applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairPull {
    pub from: u32,
    pub to: u32,
    pub after: u64,
}

/// A pull of several pairs of shards as one node asks it of another: this build's format
/// version, the pairs, then the most parcels the answer holds in all.
pub fn encode_pull(pairs: &[PairPull], max: u32) -> postcard::Result<Vec<u8>> {
    postcard::to_stdvec(&(u32::from(VERSION), pairs, max))
}

/// The pairs and the most parcels `encode_pull` wrote; refused when of another format
/// version, or damaged.
pub fn decode_pull(bytes: &[u8]) -> Result<(Vec<PairPull>, u32), FormatError> {
    versioned(bytes, "a pull from another node")
}

/// What a pull answers for one pair: its parcels as `encode_parcels` wrote them, or why none
/// could be read. The parcels are written as one run of bytes (`Bytes`), the same on the wire
/// as a sequence of bytes, which serde would write and read a byte at a time.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pulled {
    pub from: u32,
    pub to: u32,
    pub parcels: Result<bytes::Bytes, String>,
}

/// A pull's answer: this build's format version, then one `Pulled` for each pair asked.
pub fn encode_pulled(pulled: &[Pulled]) -> postcard::Result<Vec<u8>> {
    postcard::to_stdvec(&(u32::from(VERSION), pulled))
}

/// What `encode_pulled` wrote; refused when of another format version, or damaged.
pub fn decode_pulled(bytes: &[u8]) -> Result<Vec<Pulled>, FormatError> {
    versioned(bytes, "parcels pulled from another node")
}

/// One subscription of a shard's listing as one node hands it to another, with its topic's
/// ARN.
pub fn encode_listed_subscription(
    topic_arn: &str,
    subscription: &Subscription,
) -> postcard::Result<String> {
    let image = subscription.image();
    listed(&(topic_arn, DiskSubscription::from(&image)))
}

/// The topic's ARN and subscription `encode_listed_subscription` wrote; refused when written
/// by another format version, or damaged.
pub fn decode_listed_subscription(text: &str) -> Result<(Arc<str>, Subscription), FormatError> {
    let bytes = unlisted(text)?;
    let (topic_arn, disk) =
        versioned::<(&str, DiskSubscription<'_>)>(&bytes, "a subscription listed by another node")?;
    Ok((topic_arn.into(), Subscription::from_image(disk.into_live())))
}

#[derive(Serialize, Deserialize)]
struct DiskOverview<'a> {
    name: &'a str,
    arn: &'a str,
    fifo: bool,
    /// Visible, in flight, delayed.
    counts: [u64; 3],
    groups: u64,
    locked_groups: u64,
    oldest_enqueued_at: Option<u64>,
    dead_letter_target_arn: Option<&'a str>,
    /// Sent, deduplicated, received, deleted, dead-lettered, expired.
    activity: [u64; 6],
    shard: u32,
}

/// A queue at a glance as one node hands it to another for a listing.
pub fn encode_listed_queue(queue: &QueueOverview) -> postcard::Result<String> {
    let (c, a) = (&queue.counts, &queue.activity);
    listed(&DiskOverview {
        name: &queue.name,
        arn: &queue.arn,
        fifo: queue.fifo,
        counts: [c.visible, c.in_flight, c.delayed].map(|n| n as u64),
        groups: queue.groups as u64,
        locked_groups: queue.locked_groups as u64,
        oldest_enqueued_at: queue.oldest_enqueued_at.map(|at| at.0),
        dead_letter_target_arn: queue.dead_letter_target_arn.as_deref(),
        activity: [
            a.sent,
            a.deduplicated,
            a.received,
            a.deleted,
            a.dead_lettered,
            a.expired,
        ],
        shard: queue.shard,
    })
}

/// The queue `encode_listed_queue` wrote; refused when written by another format version, or
/// damaged.
pub fn decode_listed_queue(text: &str) -> Result<QueueOverview, FormatError> {
    let bytes = unlisted(text)?;
    let disk = versioned::<DiskOverview<'_>>(&bytes, "a queue listed by another node")?;
    let [visible, in_flight, delayed] = disk.counts.map(|n| n as usize);
    let [sent, deduplicated, received, deleted, dead_lettered, expired] = disk.activity;
    Ok(QueueOverview {
        name: disk.name.into(),
        arn: disk.arn.into(),
        fifo: disk.fifo,
        counts: Counts {
            visible,
            in_flight,
            delayed,
        },
        groups: disk.groups as usize,
        locked_groups: disk.locked_groups as usize,
        oldest_enqueued_at: disk.oldest_enqueued_at.map(Timestamp),
        dead_letter_target_arn: disk.dead_letter_target_arn.map(String::from),
        activity: Activity {
            sent,
            deduplicated,
            received,
            deleted,
            dead_lettered,
            expired,
        },
        shard: disk.shard,
    })
}

/// A subscription with what became of its last messages, as a listing across nodes carries it.
pub struct ListedActivity {
    pub topic_arn: Arc<str>,
    pub subscription: Subscription,
    pub recent: Vec<DeliveryNote>,
    pub counts: Vec<(Fate, u64)>,
    pub last_error: Option<(Timestamp, Arc<str>)>,
}

#[derive(Serialize, Deserialize)]
struct DiskActivity<'a> {
    topic_arn: &'a str,
    #[serde(borrow)]
    subscription: DiskSubscription<'a>,
    /// Message id, time, fate (its place in `Fate::ALL`).
    recent: Vec<(&'a str, u64, u8)>,
    counts: Vec<(u8, u64)>,
    last_error: Option<(u64, &'a str)>,
}

/// A subscription's activity as one node hands it to another for a listing.
pub fn encode_listed_activity(
    topic_arn: &str,
    subscription: &Subscription,
    recent: &[DeliveryNote],
    counts: &[(Fate, u64)],
    last_error: Option<&(Timestamp, Arc<str>)>,
) -> postcard::Result<String> {
    let image = subscription.image();
    listed(&DiskActivity {
        topic_arn,
        subscription: DiskSubscription::from(&image),
        recent: (recent.iter())
            .map(|note| (&*note.message_id, note.at.0, fate_number(note.fate)))
            .collect(),
        counts: (counts.iter())
            .map(|&(fate, count)| (fate_number(fate), count))
            .collect(),
        last_error: last_error.map(|(at, error)| (at.0, &**error)),
    })
}

/// The activity `encode_listed_activity` wrote; refused when written by another format
/// version, or damaged.
pub fn decode_listed_activity(text: &str) -> Result<ListedActivity, FormatError> {
    let what = "a subscription's activity listed by another node";
    let bytes = unlisted(text)?;
    let disk = versioned::<DiskActivity<'_>>(&bytes, what)?;
    let fate = |n: u8| {
        (Fate::ALL.get(n as usize).copied())
            .ok_or_else(|| FormatError::Damaged(format!("{what}: no fate numbered {n}")))
    };
    let recent = (disk.recent.into_iter())
        .map(|(id, at, n)| {
            Ok(DeliveryNote {
                message_id: id.into(),
                at: Timestamp(at),
                fate: fate(n)?,
            })
        })
        .collect::<Result<_, FormatError>>()?;
    let counts = (disk.counts.into_iter())
        .map(|(n, count)| Ok((fate(n)?, count)))
        .collect::<Result<_, FormatError>>()?;
    Ok(ListedActivity {
        topic_arn: disk.topic_arn.into(),
        subscription: Subscription::from_image(disk.subscription.into_live()),
        recent,
        counts,
        last_error: disk.last_error.map(|(at, e)| (Timestamp(at), e.into())),
    })
}

/// What became of copies pulled from another node, for the notes their topics' shard keeps,
/// as the destination's node hands them back: this build's format version, then those that
/// settle a publish's note as an earlier build reads them (topic ARN, subscription ARN,
/// message id, fate; it reads no further), then each with what it settles (`Settles::bits`).
pub fn encode_settled(settled: &[Settled]) -> postcard::Result<Vec<u8>> {
    let earlier: Vec<(&str, &str, &str, u8)> = (settled.iter())
        .filter(|s| s.note_for.settles.delivery_note)
        .map(|s| {
            let note = &s.note_for;
            let fate = fate_number(s.fate);
            (
                &*s.topic_arn,
                &*note.subscription_arn,
                &*note.message_id,
                fate,
            )
        })
        .collect();
    let notes: Vec<(&str, &str, &str, u8, u8)> = (settled.iter())
        .map(|s| {
            let note = &s.note_for;
            let (fate, settles) = (fate_number(s.fate), note.settles.bits());
            let (subscription_arn, message_id) = (&*note.subscription_arn, &*note.message_id);
            (&*s.topic_arn, subscription_arn, message_id, fate, settles)
        })
        .collect();
    postcard::to_stdvec(&(u32::from(VERSION), earlier, notes))
}

/// The notes `encode_settled` wrote; refused when of another format version, or damaged.
pub fn decode_settled(bytes: &[u8]) -> Result<Vec<Settled>, FormatError> {
    let what = "copies settled on another node";
    let damaged = |e: postcard::Error| FormatError::Damaged(format!("{what}: {e}"));
    let rest = version_checked(bytes, what)?;
    let (earlier, rest) =
        postcard::take_from_bytes::<Vec<(&str, &str, &str, u8)>>(rest).map_err(damaged)?;
    // From a node of an earlier build, each settles a publish's note.
    let notes: Vec<(&str, &str, &str, u8, u8)> = if rest.is_empty() {
        (earlier.into_iter())
            .map(|(t, s, m, fate)| (t, s, m, fate, Settles::DELIVERY_NOTE.bits()))
            .collect()
    } else {
        postcard::from_bytes(rest).map_err(damaged)?
    };
    notes
        .into_iter()
        .map(|(topic_arn, subscription_arn, message_id, fate, settles)| {
            let fate = (Fate::ALL.get(fate as usize).copied())
                .ok_or_else(|| FormatError::Damaged(format!("{what}: no fate numbered {fate}")))?;
            Ok(Settled {
                topic_arn: topic_arn.into(),
                note_for: NoteFor {
                    subscription_arn: subscription_arn.into(),
                    message_id: message_id.into(),
                    settles: Settles::from_bits(settles),
                },
                fate,
            })
        })
        .collect()
}

fn fate_number(fate: Fate) -> u8 {
    Fate::ALL.iter().position(|&f| f == fate).unwrap_or(0) as u8
}

/// An item of a listing as text: this build's format version, then the item, in base64.
fn listed<T: Serialize>(item: &T) -> postcard::Result<String> {
    let bytes = postcard::to_stdvec(&(u32::from(VERSION), item))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn unlisted(text: &str) -> Result<Vec<u8>, FormatError> {
    (base64::engine::general_purpose::STANDARD.decode(text))
        .map_err(|e| FormatError::Damaged(format!("an item listed by another node: {e}")))
}

/// The item `listed` wrote, from its bytes; refused when of another format version.
fn versioned<'a, T: Deserialize<'a>>(bytes: &'a [u8], what: &str) -> Result<T, FormatError> {
    let rest = version_checked(bytes, what)?;
    postcard::from_bytes(rest).map_err(|e| FormatError::Damaged(format!("{what}: {e}")))
}

/// What follows this build's format version in `bytes`; refused when of another version.
fn version_checked<'a>(bytes: &'a [u8], what: &str) -> Result<&'a [u8], FormatError> {
    let damaged = |e: &dyn std::fmt::Display| FormatError::Damaged(format!("{what}: {e}"));
    let (version, rest) = postcard::take_from_bytes::<u32>(bytes).map_err(|e| damaged(&e))?;
    if version != u32::from(VERSION) {
        return Err(damaged(&format!(
            "format version {version}, where this build writes {VERSION}: nodes of one \
             database run one version"
        )));
    }
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_subscription_crosses_whole_and_another_version_is_refused() {
        use crate::engine::topic::SubscriptionProtocol;
        let topic = "arn:aws:sns:us-east-1:000000000000:prices.fifo";
        let mut sub = Subscription::new(
            format!("{topic}:5f0c").into(),
            SubscriptionProtocol::Sqs,
            "arn:aws:sqs:us-east-1:000000000000:a.fifo",
            "000000000000",
        );
        let policy = r#"{"kind":["a \"quoted\" one"]}"#;
        sub.attributes.insert("FilterPolicy".into(), policy.into());
        sub.raw_delivery = true;
        let text = encode_listed_subscription(topic, &sub).unwrap();
        let (arn, back) = decode_listed_subscription(&text).unwrap();
        assert_eq!(&*arn, topic);
        assert_eq!(
            (&back.arn, &back.endpoint, &back.owner, back.raw_delivery),
            (&sub.arn, &sub.endpoint, &sub.owner, true)
        );
        assert_eq!(back.protocol, SubscriptionProtocol::Sqs);
        assert_eq!(back.attributes, sub.attributes);
        assert!(back.filter.is_some(), "its filter policy compiled again");
        let newer = postcard::to_stdvec(&(
            u32::from(VERSION) + 1,
            (topic, DiskSubscription::from(&sub.image())),
        ))
        .unwrap();
        let newer = base64::engine::general_purpose::STANDARD.encode(newer);
        let refused = decode_listed_subscription(&newer)
            .err()
            .unwrap()
            .to_string();
        assert!(refused.contains("format version"), "{refused}");
        assert!(decode_listed_subscription("not base64!").is_err());
    }

    #[test]
    fn a_listed_queue_and_a_subscriptions_activity_cross_whole() {
        use crate::engine::topic::SubscriptionProtocol;
        let queue = QueueOverview {
            name: "orders.fifo".into(),
            arn: "arn:aws:sqs:us-east-1:000000000000:orders.fifo".into(),
            fifo: true,
            counts: Counts {
                visible: 3,
                in_flight: 2,
                delayed: 1,
            },
            groups: 4,
            locked_groups: 2,
            oldest_enqueued_at: Some(Timestamp(1_700_000_000_000)),
            dead_letter_target_arn: Some("arn:aws:sqs:us-east-1:000000000000:dlq.fifo".into()),
            activity: Activity {
                sent: 9,
                deduplicated: 1,
                received: 5,
                deleted: 4,
                dead_lettered: 1,
                expired: 0,
            },
            shard: 5,
        };
        let back = decode_listed_queue(&encode_listed_queue(&queue).unwrap()).unwrap();
        assert_eq!(format!("{back:?}"), format!("{queue:?}"));

        let topic = "arn:aws:sns:us-east-1:000000000000:hooks";
        let sub = Subscription::new(
            format!("{topic}:77").into(),
            SubscriptionProtocol::Http,
            "http://127.0.0.1:9/hook",
            "000000000000",
        );
        let recent = vec![DeliveryNote {
            message_id: "m-1".into(),
            at: Timestamp(5),
            fate: Fate::Retrying,
        }];
        let counts = vec![(Fate::Queued, 0), (Fate::GaveUp, 2)];
        let error = (Timestamp(6), Arc::from("refused"));
        let text = encode_listed_activity(topic, &sub, &recent, &counts, Some(&error)).unwrap();
        let back = decode_listed_activity(&text).unwrap();
        assert_eq!(&*back.topic_arn, topic);
        assert_eq!(back.subscription.arn, sub.arn);
        assert_eq!(back.recent, recent);
        assert_eq!(back.counts, counts);
        assert_eq!(back.last_error, Some(error));
        assert!(decode_listed_queue(&text).is_err(), "not a queue");
    }

    #[test]
    fn settled_copies_cross_back_whole() {
        let settled = vec![Settled {
            topic_arn: "arn:aws:sns:us-east-1:000000000000:t.fifo".into(),
            note_for: NoteFor {
                subscription_arn: "arn:aws:sns:us-east-1:000000000000:t.fifo:1".into(),
                message_id: "m".into(),
                settles: Settles {
                    delivery_note: false,
                    webhook_figures: true,
                },
            },
            fate: Fate::DeadLettered,
        }];
        let bytes = encode_settled(&settled).unwrap();
        assert_eq!(decode_settled(&bytes).unwrap(), settled);
        assert!(decode_settled(&bytes[..bytes.len() - 1]).is_err());
        // A node of an earlier build reads no note that settles only a webhook's figures:
        // it would take it for a publish's.
        let (_, read_then): (u32, Vec<(&str, &str, &str, u8)>) =
            postcard::from_bytes(&bytes).unwrap();
        assert!(read_then.is_empty());
        // From a node of an earlier build, which says nothing of what each settles: a
        // publish's note.
        let note = &settled[0].note_for;
        let earlier = vec![(
            &*settled[0].topic_arn,
            &*note.subscription_arn,
            &*note.message_id,
            fate_number(Fate::DeadLettered),
        )];
        let earlier = postcard::to_stdvec(&(u32::from(VERSION), earlier)).unwrap();
        let back = decode_settled(&earlier).unwrap();
        assert_eq!(back[0].note_for.settles, Settles::DELIVERY_NOTE);
    }

    #[test]
    fn a_pull_and_its_answer_cross_whole() {
        let pairs = [
            PairPull {
                from: 1,
                to: 4,
                after: 7,
            },
            PairPull {
                from: 3,
                to: 0,
                after: 0,
            },
        ];
        let bytes = encode_pull(&pairs, 256).unwrap();
        assert_eq!(decode_pull(&bytes).unwrap(), (pairs.to_vec(), 256));
        assert!(decode_pull(&bytes[..bytes.len() - 1]).is_err());
        let pulled = vec![
            Pulled {
                from: 1,
                to: 4,
                parcels: Ok(encode_parcels(4, &[]).unwrap().into()),
            },
            Pulled {
                from: 3,
                to: 0,
                parcels: Err("not led here".into()),
            },
        ];
        let bytes = encode_pulled(&pulled).unwrap();
        assert_eq!(decode_pulled(&bytes).unwrap(), pulled);
        let newer = postcard::to_stdvec(&(u32::from(VERSION) + 1, &pulled)).unwrap();
        assert!(decode_pulled(&newer).is_err());
    }

    #[test]
    fn a_pulls_parcels_are_written_as_an_earlier_build_wrote_and_reads_them() {
        // An earlier build wrote each pair's parcels as a sequence of bytes.
        #[derive(Serialize, Deserialize)]
        struct Earlier {
            from: u32,
            to: u32,
            parcels: Result<Vec<u8>, String>,
        }
        let parcels: Vec<u8> = (0..=255u8).chain(0..200).collect();
        let earlier = vec![
            Earlier {
                from: 1,
                to: 2,
                parcels: Ok(parcels.clone()),
            },
            Earlier {
                from: 3,
                to: 2,
                parcels: Err("not led here".into()),
            },
        ];
        let now: Vec<Pulled> = (earlier.iter())
            .map(|e| Pulled {
                from: e.from,
                to: e.to,
                parcels: e.parcels.clone().map(bytes::Bytes::from),
            })
            .collect();
        let earlier_bytes = postcard::to_stdvec(&(u32::from(VERSION), &earlier)).unwrap();
        assert_eq!(encode_pulled(&now).unwrap(), earlier_bytes);
        assert_eq!(decode_pulled(&earlier_bytes).unwrap(), now);
    }

    #[test]
    fn parcels_of_another_version_shard_or_shape_are_refused() {
        let none = encode_parcels(2, &[]).unwrap();
        assert!(decode_parcels(2, &none).unwrap().is_empty());
        let newer = postcard::to_stdvec(&(u32::from(VERSION) + 1, Vec::<u8>::new())).unwrap();
        let refused = decode_parcels(2, &newer).unwrap_err().to_string();
        assert!(refused.contains("format version"), "{refused}");
        let forgotten = ParcelChange::Forgotten { to: 2, through: 9 };
        let disk = vec![DiskParcelChange::from(&forgotten)];
        let not_parcels = postcard::to_stdvec(&(u32::from(VERSION), disk)).unwrap();
        let refused = decode_parcels(2, &not_parcels).unwrap_err().to_string();
        assert!(refused.contains("not a parcel for shard 2"), "{refused}");
        assert!(decode_parcels(2, &[0xff, 0xff]).is_err());
    }

    #[test]
    fn a_copys_note_crosses_with_it() {
        let note = NoteFor {
            subscription_arn: "arn:aws:sns:us-east-1:000000000000:t.fifo:1".into(),
            message_id: "m-1".into(),
            settles: Settles {
                delivery_note: true,
                webhook_figures: true,
            },
        };
        let copy = crate::engine::parcel::RelayedCopy {
            queue_arn: "arn:aws:sqs:us-east-1:000000000000:q.fifo".into(),
            topic_arn: Some("arn:aws:sns:us-east-1:000000000000:t.fifo".into()),
            dead_letter_arn: None,
            dead_letter: false,
            body: crate::engine::body::Body::new("b"),
            attributes: Default::default(),
            envelope: None,
            group_id: Some("g".into()),
            dedup_id: Some("d".into()),
            fifo_topic: true,
            bypass_dedup: false,
            trace_header: None,
            note_for: Some(note.clone()),
        };
        let parcel = Parcel::new(7, Contents::Copy(Box::new(copy)));
        let back = decode_parcels(3, &encode_parcels(3, &[parcel]).unwrap()).unwrap();
        let Contents::Copy(copy) = &*back[0].contents else {
            panic!("a copy");
        };
        assert_eq!((back[0].seq, copy.note_for.as_ref()), (7, Some(&note)));
        let changes = [ParcelChange::Sent {
            to: 3,
            parcel: back[0].clone(),
        }];
        let disk: Vec<DiskParcelChange<'_>> = changes.iter().map(DiskParcelChange::from).collect();
        // From a node of an earlier build whose notes say nothing of what they settle: a
        // publish's note.
        let notes = vec![Some((&*note.subscription_arn, &*note.message_id))];
        let earlier = postcard::to_stdvec(&(u32::from(VERSION), &disk, notes)).unwrap();
        let back_then = decode_parcels(3, &earlier).unwrap();
        let Contents::Copy(copy) = &*back_then[0].contents else {
            panic!("a copy");
        };
        let settles = copy.note_for.as_ref().map(|note| note.settles);
        assert_eq!(settles, Some(Settles::DELIVERY_NOTE));
        // From one earlier still, which sends no notes: the copy settles none.
        let earlier = postcard::to_stdvec(&(u32::from(VERSION), disk)).unwrap();
        let back = decode_parcels(3, &earlier).unwrap();
        let Contents::Copy(copy) = &*back[0].contents else {
            panic!("a copy");
        };
        assert_eq!((back[0].seq, copy.note_for.as_ref()), (7, None));
    }
}
