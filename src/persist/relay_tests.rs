//! The relay's parcels and what was applied from other shards, across restarts: from the log
//! alone, and from a snapshot followed by later changes.

use super::snapshot;
use super::tests::{close, open_dir, TestEngine};
use crate::engine::parcel::{Contents, Parcel, ParcelChange, RelayedCopy};
use crate::engine::Timestamp;

fn copy(queue: &str, body: &str) -> RelayedCopy {
    RelayedCopy {
        queue_arn: format!("arn:aws:sqs:us-east-1:000000000000:{queue}").into(),
        topic_arn: Some("arn:aws:sns:us-east-1:000000000000:prices.fifo".into()),
        dead_letter_arn: Some("arn:aws:sqs:us-east-1:000000000000:dead.fifo".into()),
        dead_letter: false,
        body: body.into(),
        attributes: Default::default(),
        envelope: Some("{\"Type\":\"Notification\"}".into()),
        group_id: Some("g".into()),
        dedup_id: Some(body.into()),
        fifo_topic: true,
        bypass_dedup: false,
        trace_header: Some("Root=1-5759e988-bd862e3fe1be46a994272793".into()),
        note_for: None,
    }
}

fn waiting(engine: &TestEngine) -> Vec<(u64, String)> {
    engine
        .relay
        .waiting_for(1, crate::engine::parcel::Room::ALL)
        .into_iter()
        .map(|parcel| {
            let Contents::Copy(copy) = &*parcel.contents else {
                panic!("only copies were sent");
            };
            (parcel.seq, copy.body.to_string())
        })
        .collect()
}

fn stored(engine: &TestEngine) -> usize {
    engine.queues.get("here.fifo").unwrap().lock().len()
}

#[test]
fn the_relay_survives_restarts_from_the_log_and_from_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, data, _) = open_dir(dir.path());
    let fifo = [("FifoQueue".to_string(), "true".to_string())];
    engine
        .queues
        .create_from("here.fifo", &fifo, &[], Timestamp(0))
        .unwrap();
    engine.relay.send(1, copy("there.fifo", "a"));
    engine.relay.send(1, copy("there.fifo", "b"));
    engine.relay.forget(1, 1);
    // A parcel from shard 2, applied here: the copy and the note that it is applied.
    let from_two = Parcel::new(1, Contents::Copy(Box::new(copy("here.fifo", "c"))));
    let received = engine.receive_parcels(2, std::slice::from_ref(&from_two), Timestamp(1));
    assert_eq!(received.through, 1);
    close(data);
    drop(engine);

    let (engine, data, report) = open_dir(dir.path());
    assert!(report.snapshot.is_none());
    assert_eq!(waiting(&engine), [(2, "b".to_string())], "from the log");
    assert_eq!(engine.relay.applied(2), 1);
    assert_eq!(stored(&engine), 1);
    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
    engine.relay.send(1, copy("there.fifo", "d"));
    close(data);
    drop(engine);

    let (engine, data, report) = open_dir(dir.path());
    assert!(report.snapshot.is_some());
    let expected = [(2, "b".to_string()), (3, "d".to_string())];
    assert_eq!(
        waiting(&engine),
        expected,
        "from the snapshot and the log after it"
    );
    assert_eq!(engine.relay.applied(2), 1);
    // Carried again after the restart: applied once only.
    let again = engine.receive_parcels(2, &[from_two], Timestamp(2));
    assert_eq!((again.through, again.delivered_to.len()), (1, 0));
    assert_eq!(stored(&engine), 1);
    let Contents::Copy(restored) = &*engine
        .relay
        .waiting_for(1, crate::engine::parcel::Room::at_most(1))[0]
        .contents
    else {
        panic!("only copies were sent");
    };
    assert_eq!(**restored, copy("there.fifo", "b"), "every field kept");
    close(data);
}

/// Snapshot chunks of relay changes are sized by `ParcelChange::size`: it must not understate
/// what a change takes in a record.
#[test]
fn a_parcel_change_takes_no_more_than_its_size_says() {
    use crate::persist::format::relay::DiskParcelChange;
    let mut big = copy("there.fifo", &"x".repeat(4096));
    big.attributes = crate::engine::message::MessageAttributes::from_sorted(vec![(
        "price".to_string(),
        crate::engine::message::AttributeValue {
            data_type: "Number".to_string(),
            data: crate::engine::message::AttributeData::String("12.5".into()),
        },
    )]);
    use crate::engine::message::{Message, MessageId, MessageParts, SequenceNumber};
    let long = |c: &str, n: usize| -> std::sync::Arc<str> { c.repeat(n).into() };
    let message = Message::from(MessageParts {
        id: MessageId::random(),
        body: "b".repeat(4096).into(),
        body_md5: crate::engine::body::body_md5("b"),
        attributes: big.attributes.clone(),
        attributes_md5: Some(long("m", 32)),
        trace_header: Some(long("t", 200)),
        sender_id: long("s", 64),
        sent_at: Timestamp(u64::MAX),
        group_id: Some(long("g", 128)),
        dedup_id: Some(long("d", 128)),
        sequence_number: Some(SequenceNumber::BASE),
        receive_count: u32::MAX,
        first_receive_at: Some(Timestamp(u64::MAX)),
        dead_letter_source_arn: Some(long("a", 256)),
    });
    let moved = |message: Message| crate::engine::parcel::RelayedMove {
        queue_arn: long("q", 256),
        source_arn: long("s", 256),
        message,
    };
    let sent = |contents: Contents| ParcelChange::Sent {
        to: u32::MAX,
        parcel: Parcel::new(u64::MAX, contents),
    };
    let changes = [
        sent(Contents::Copy(Box::new(big))),
        sent(Contents::DeadLetter(Box::new(moved(message.clone())))),
        sent(Contents::Redriven(Box::new(moved(message.clone())))),
        sent(Contents::Returned(Box::new(moved(message)))),
        ParcelChange::Forgotten {
            to: u32::MAX,
            through: u64::MAX,
        },
        ParcelChange::Applied {
            from: u32::MAX,
            through: u64::MAX,
        },
    ];
    // Each kind reads back as itself.
    let kinds: Vec<String> = changes
        .iter()
        .map(|change| {
            let encoded = postcard::to_allocvec(&DiskParcelChange::from(change)).unwrap();
            let decoded: DiskParcelChange = postcard::from_bytes(&encoded).unwrap();
            kind(&decoded.into_live())
        })
        .collect();
    assert_eq!(kinds, changes.iter().map(kind).collect::<Vec<_>>());
    for change in &changes {
        let encoded = postcard::to_allocvec(&DiskParcelChange::from(change)).unwrap();
        assert!(
            encoded.len() <= change.size(),
            "{} bytes encoded, {} said",
            encoded.len(),
            change.size()
        );
    }
}

/// A change's kind and, for a parcel, what it carries.
fn kind(change: &ParcelChange) -> String {
    match change {
        ParcelChange::Sent { parcel, .. } => match &*parcel.contents {
            Contents::Copy(_) => "copy".into(),
            Contents::DeadLetter(m) => format!("dead letter of {}", m.message.body),
            Contents::Redriven(m) => format!("redriven {}", m.message.body),
            Contents::Returned(m) => format!("returned {}", m.message.body),
        },
        other => format!("{other:?}"),
    }
}
