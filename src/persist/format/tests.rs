//! The format's layouts, pinned against independent definitions, and its versions.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::message::{DiskMessage, Id, Md5, Seq};
use super::*;
use crate::engine::message::{
    AttributeData, AttributeValue, MessageAttributes, MessageId, NewMessage, SequenceNumber,
};
use crate::engine::{Change as LiveChange, Timestamp};

fn sample(trace_header: Option<&str>) -> crate::engine::message::Message {
    crate::engine::message::Message::new(NewMessage {
        body: "price 42".into(),
        attributes: MessageAttributes::default(),
        attributes_md5: None,
        trace_header: trace_header.map(Arc::from),
        sender_id: "AIDA".into(),
        sent_at: Timestamp(7),
        group_id: Some("g".into()),
        dedup_id: Some("d".into()),
    })
}

fn round_trip(m: &crate::engine::message::Message) -> crate::engine::message::Message {
    let bytes = postcard::to_stdvec(&DiskMessage::from(m)).unwrap();
    postcard::from_bytes::<DiskMessage>(&bytes)
        .unwrap()
        .into_live()
}

#[test]
fn ids_digests_and_sequence_numbers_are_written_as_text_and_numbers() {
    let digest = crate::engine::body::body_md5("hello");
    let as_text = postcard::to_stdvec("5d41402abc4b2a76b9719d911017c592").unwrap();
    assert_eq!(postcard::to_stdvec(&Md5(digest)).unwrap(), as_text);
    assert_eq!(postcard::from_bytes::<Md5>(&as_text).unwrap().0, digest);
    let upper = postcard::to_stdvec("5D41402ABC4B2A76B9719D911017C592").unwrap();
    assert!(postcard::from_bytes::<Md5>(&upper).is_err());

    let big: u128 = 18_000_000_000_000_000_123;
    let as_number = postcard::to_stdvec(&big).unwrap();
    let seq = SequenceNumber::from(big);
    assert_eq!(postcard::to_stdvec(&Seq(seq)).unwrap(), as_number);
    assert_eq!(postcard::from_bytes::<Seq>(&as_number).unwrap().0, seq);
    let zero = postcard::to_stdvec(&0u128).unwrap();
    assert!(postcard::from_bytes::<Seq>(&zero).is_err());

    let id = MessageId::random();
    let as_text = postcard::to_stdvec(&id.to_string()).unwrap();
    assert_eq!(postcard::to_stdvec(&Id(id)).unwrap(), as_text);
    assert_eq!(postcard::from_bytes::<Id>(&as_text).unwrap().0, id);
}

#[test]
fn the_logged_bytes_estimate_is_near_a_typical_fifo_record() {
    let mut m = crate::engine::message::Message::new(NewMessage {
        body: "x".repeat(256).as_str().into(),
        attributes: MessageAttributes::default(),
        attributes_md5: None,
        trace_header: None,
        sender_id: "AIDAIT2UOQQY3AUEKVGXU".into(),
        sent_at: Timestamp(1_763_900_000_000),
        group_id: Some("group-12".into()),
        // Content-based deduplication: the body's SHA-256 in hex.
        dedup_id: Some("a".repeat(64).as_str().into()),
    });
    m.sequence_number = Some(SequenceNumber::from(18_000_000_000_000_000_123u128));
    let overhead = postcard::to_stdvec(&DiskMessage::from(&m)).unwrap().len() - m.size();
    let estimate = crate::engine::queue::LOGGED_BYTES as usize;
    assert!(
        (overhead..overhead + 40).contains(&estimate),
        "{overhead} bytes besides the body, plus about 20 of framing, against {estimate}"
    );
}

#[test]
fn a_message_comes_back_with_every_field() {
    let mut full = sample(Some("Root=1-abc"));
    full.set_dead_letter_source_arn(Some("arn:aws:sqs:us-east-1:0:src".into()));
    full.attributes = MessageAttributes::new(vec![pair("b", "2"), pair("a", "1")]);
    full.sequence_number = Some(SequenceNumber::from(18_000_000_000_000_000_123u128));
    full.receive_count = 3;
    full.first_receive_at = Some(Timestamp(9));
    let back = round_trip(&full);
    assert_eq!(format!("{back:?}"), format!("{full:?}"));
    let plain = sample(None);
    let back = round_trip(&plain);
    assert_eq!(format!("{back:?}"), format!("{plain:?}"));
    assert!(back.trace_header().is_none() && back.dead_letter_source_arn().is_none());
}

fn pair(name: &str, v: &str) -> (String, AttributeValue) {
    (
        name.to_string(),
        AttributeValue {
            data_type: "String".into(),
            data: AttributeData::String(v.into()),
        },
    )
}

/// Format 1's attribute layout, spelt out independently of the format's types.
#[derive(Serialize, Deserialize, PartialEq, Debug)]
enum Data {
    String(String),
    Binary(Vec<u8>),
}

#[test]
fn attributes_are_written_as_sorted_pairs() {
    let mut attributes = vec![pair("b", "2"), pair("a", "1")];
    attributes.push((
        "c".into(),
        AttributeValue {
            data_type: "Binary.raw".into(),
            data: AttributeData::Binary(vec![0, 255]),
        },
    ));
    let live = MessageAttributes::new(attributes);
    let encoded = postcard::to_stdvec(&message::attributes(&live)).unwrap();
    let expected: Vec<(String, (String, Data))> = vec![
        ("a".into(), ("String".into(), Data::String("1".into()))),
        ("b".into(), ("String".into(), Data::String("2".into()))),
        (
            "c".into(),
            ("Binary.raw".into(), Data::Binary(vec![0, 255])),
        ),
    ];
    assert_eq!(encoded, postcard::to_stdvec(&expected).unwrap());
    let back: message::Attributes = postcard::from_bytes(&encoded).unwrap();
    assert_eq!(message::live_attributes(back), live);
}

fn sample_change() -> LiveChange {
    LiveChange::DeleteTopic {
        name: "prices".into(),
    }
}

#[test]
fn records_carry_their_version_and_older_unversioned_ones_read_as_version_1() {
    let record = to_record(5, &sample_change()).unwrap();
    let word = u64::from_le_bytes(record[..8].try_into().unwrap());
    assert_eq!((word >> 56, word & MAX_LSN), (u64::from(VERSION), 5));
    let (lsn, change) = decode_record(&record).unwrap();
    assert_eq!(lsn, 5);
    assert!(matches!(change, LiveChange::DeleteTopic { name } if &*name == "prices"));

    // As bd5fd91 and earlier wrote it: the bare sequence number.
    let mut legacy = record.clone();
    legacy[..8].copy_from_slice(&5u64.to_le_bytes());
    assert_eq!(decode_record(&legacy).unwrap().0, 5);
}

#[test]
fn a_record_of_a_newer_version_is_refused_saying_so() {
    let mut record = to_record(5, &sample_change()).unwrap();
    let newer = VERSION + 1;
    record[7] = newer;
    let error = decode_record(&record).unwrap_err();
    assert!(matches!(error, FormatError::Newer { found, .. } if found == u32::from(newer)));
    let text = error.to_string();
    assert!(
        text.contains(&format!("format version {newer}"))
            && text.contains(&format!("up to {VERSION}")),
        "{text}"
    );
}

#[test]
fn a_version_1_record_reads_as_it_always_did_and_resets_round_trip() {
    use crate::engine::queue::changes::QueueChange;
    use crate::engine::topic::changes::TopicChange;
    // Version 2 only added variants after the others: a version 1 record decodes unchanged.
    let mut v1 = to_record(9, &sample_change()).unwrap();
    v1[7] = 1;
    assert!(matches!(
        decode_record(&v1).unwrap().1,
        LiveChange::DeleteTopic { .. }
    ));
    let queue = LiveChange::Queue {
        name: "q".into(),
        uid: 3,
        changes: vec![QueueChange::Reset],
    };
    let (_, back) = decode_record(&to_record(10, &queue).unwrap()).unwrap();
    assert!(matches!(back, LiveChange::Queue { uid: 3, changes, .. }
        if matches!(changes[..], [QueueChange::Reset])));
    let topic = LiveChange::Topic {
        name: "t".into(),
        changes: vec![TopicChange::Reset],
    };
    let (_, back) = decode_record(&to_record(11, &topic).unwrap()).unwrap();
    assert!(matches!(back, LiveChange::Topic { changes, .. }
        if matches!(changes[..], [TopicChange::Reset])));
}

#[test]
fn a_snapshot_header_of_a_newer_version_is_refused() {
    let header = |tag: u32, version: u32| postcard::to_stdvec(&(tag, version, 7u64)).unwrap();
    let newer = u32::from(VERSION) + 1;
    assert!(check_snapshot_version(&header(0, 1)).is_ok());
    assert!(check_snapshot_version(&header(0, u32::from(VERSION))).is_ok());
    assert!(matches!(
        check_snapshot_version(&header(0, newer)),
        Err(FormatError::Newer { found, .. }) if found == newer
    ));
    assert!(matches!(
        check_snapshot_version(&header(3, 1)),
        Err(FormatError::Damaged(_))
    ));
}

/// What adding a field to a persisted config takes, acted out on `QueueConfig`: the next
/// version's layout gains the field, the old layout stays as written, and a record is read by
/// the layout its version names, the old one mapped up with the field's default.
mod adding_a_field {
    use super::*;
    use crate::persist::format::queue::DiskQueueConfig;

    fn decode(version: u8, bytes: &[u8]) -> (crate::engine::QueueConfig, Option<u32>) {
        match version {
            0 | 1 => {
                let old: DiskQueueConfig = postcard::from_bytes(bytes).unwrap();
                (old.into(), None)
            }
            _ => {
                let (old, new_setting): (DiskQueueConfig, Option<u32>) =
                    postcard::from_bytes(bytes).unwrap();
                (old.into(), new_setting)
            }
        }
    }

    #[test]
    fn old_records_stay_readable_and_new_ones_keep_the_field() {
        let mut live = crate::engine::QueueConfig::new(true, Timestamp(1));
        live.visibility_timeout = 45;
        let written_by_v1 = postcard::to_stdvec(&DiskQueueConfig::from(&live)).unwrap();
        // Without the version the next layout would misread old bytes: they end early.
        assert!(postcard::from_bytes::<(DiskQueueConfig, Option<u32>)>(&written_by_v1).is_err());
        let (old, new_setting) = decode(1, &written_by_v1);
        assert_eq!(
            (old.visibility_timeout, old.fifo, new_setting),
            (45, true, None)
        );

        let written_by_next =
            postcard::to_stdvec(&(DiskQueueConfig::from(&live), Some(9u32))).unwrap();
        let (config, new_setting) = decode(2, &written_by_next);
        assert_eq!((config.visibility_timeout, new_setting), (45, Some(9)));
    }
}

mod at_startup {
    use std::path::Path;

    use crate::engine::{Engine, Timestamp};
    use crate::persist::log_error::LogError;
    use crate::persist::segment_log::{SegmentLog, DEFAULT_SEGMENT_BYTES};
    use crate::persist::storage::DirStorage;
    use crate::persist::writer::FsyncMode;
    use crate::persist::{open, record, snapshot, RecoveryError};

    /// A directory holding one queue, closed; `snapshot` takes one first.
    fn directory(snapshot: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut engine: Engine<()> = Engine::new("000000000000", "us-east-1");
        let (data, _) = open(dir.path(), FsyncMode::Always, &mut engine).unwrap();
        engine
            .queues
            .create_from("q", &[], &[], Timestamp(1))
            .unwrap();
        if snapshot {
            snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
        }
        data.log_writer.close();
        dir
    }

    fn refused(dir: &Path) -> String {
        let mut engine: Engine<()> = Engine::new("000000000000", "us-east-1");
        match open(dir, FsyncMode::Always, &mut engine) {
            Err(error @ RecoveryError::NewerFormat(_)) => error.to_string(),
            Err(other) => panic!("refused for another reason: {other}"),
            Ok(_) => panic!("a newer format was opened"),
        }
    }

    #[test]
    fn a_log_record_of_a_newer_version_stops_startup_saying_so() {
        let dir = directory(false);
        let key = crate::persist::log_key(dir.path()).unwrap();
        let storage = DirStorage::new(dir.path()).unwrap();
        let (mut log, _) =
            SegmentLog::replay(storage, DEFAULT_SEGMENT_BYTES, key, false, |_, _, _| {
                Ok::<_, LogError>(())
            })
            .unwrap();
        let mut newer = super::to_record(100, &super::sample_change()).unwrap();
        newer[7] = super::VERSION + 1;
        log.append(&[&newer]).unwrap();
        log.sync().unwrap();
        drop(log);
        let text = refused(dir.path());
        let expected = format!("format version {}", super::VERSION + 1);
        assert!(
            text.contains("log record 100") && text.contains(&expected),
            "{text}"
        );
    }

    #[test]
    fn a_snapshot_of_a_newer_version_stops_startup_saying_so() {
        let dir = directory(true);
        let name = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "snap"))
            .unwrap();
        let bytes = std::fs::read(&name).unwrap();
        let mut rewritten = Vec::new();
        for (i, payload) in record::decode(&bytes).records.into_iter().enumerate() {
            let mut payload = payload.to_vec();
            if i == 0 {
                // The header's tag (0), then its version.
                assert_eq!(payload[..2], [0, super::VERSION]);
                payload[1] = super::VERSION + 1;
            }
            record::encode(&payload, &mut rewritten);
        }
        std::fs::write(&name, rewritten).unwrap();
        let text = refused(dir.path());
        let expected = format!("format version {}", super::VERSION + 1);
        assert!(text.contains(".snap") && text.contains(&expected), "{text}");
    }
}

#[test]
fn a_subscribers_principal_round_trips_and_older_subscriptions_have_none() {
    use crate::engine::topic::{Subscription, Topic};
    let mut topic = Topic::new(
        "t",
        "arn:aws:sns:us-east-1:000000000000:t".into(),
        "000000000000",
        &[],
        crate::engine::Timestamp(0),
    )
    .unwrap();
    let mut with = Subscription::new(
        "arn:aws:sns:us-east-1:000000000000:t:1".into(),
        crate::engine::topic::SubscriptionProtocol::Sqs,
        "arn:aws:sqs:us-east-1:000000000000:q",
        "000000000000",
    );
    with.principal = Some("arn:aws:iam::000000000000:user/alice".into());
    let without = Subscription::new(
        "arn:aws:sns:us-east-1:000000000000:t:2".into(),
        crate::engine::topic::SubscriptionProtocol::Sqs,
        "arn:aws:sqs:us-east-1:000000000000:r",
        "000000000000",
    );
    topic.subscriptions = vec![with.into(), without.into()];
    let stored = postcard::to_allocvec(&topic::DiskTopicImage::from(&topic.image(false))).unwrap();
    let decoded: topic::DiskTopicImage = postcard::from_bytes(&stored).unwrap();
    let back = Topic::from_image(decoded.into_live());
    let (alice, older) = (&back.subscriptions[0], &back.subscriptions[1]);
    assert_eq!(alice.principal(), "arn:aws:iam::000000000000:user/alice");
    assert!(alice.attributes.is_empty(), "{:?}", alice.attributes);
    assert_eq!(older.principal, None);
    assert_eq!(older.principal(), "arn:aws:iam::000000000000:root");
}

#[test]
fn a_subscriptions_protocol_is_stored_by_name_and_an_unknown_name_is_refused() {
    use crate::engine::topic::{Subscription, SubscriptionProtocol};
    let subscription = Subscription::new(
        "arn:aws:sns:us-east-1:000000000000:t:1".into(),
        SubscriptionProtocol::EmailJson,
        "ops@example.com",
        "000000000000",
    );
    let image = subscription.image();
    let stored = postcard::to_allocvec(&topic::DiskSubscription::from(&image)).unwrap();
    // The bytes a string field held before the protocol was typed: length, then the name.
    let name = b"\x0aemail-json";
    let at = stored
        .windows(name.len())
        .position(|w| w == name)
        .expect("the protocol's name is in the record");
    let decoded: topic::DiskSubscription = postcard::from_bytes(&stored).unwrap();
    assert_eq!(
        decoded.into_live().protocol,
        SubscriptionProtocol::EmailJson
    );

    let mut unknown = stored.clone();
    unknown[at + 1..at + name.len()].copy_from_slice(b"email-jsoN");
    let refused = postcard::from_bytes::<topic::DiskSubscription>(&unknown);
    assert!(
        refused.is_err(),
        "an unknown protocol name must not read back"
    );
}
