//! Parcels carried by pull between the embedded backends of two shards, each over a log of its
//! own: every copy arrives once and in order, however often a pull is repeated or an answer
//! lost, and the source forgets what the destination's log holds.

use std::sync::Arc;

use super::relay::carry;
use super::Embedded;
use crate::clock::ManualClock;
use crate::engine::queue::ReceiveRequest;
use crate::engine::shard::Shard;
use crate::engine::topic::PublishRequest;
use crate::engine::{Engine, Timestamp};
use crate::persist::segment_log::SegmentLog;
use crate::persist::storage::MemStorage;
use crate::persist::writer::{FsyncMode, LogWriter};

/// The backend of shard `number` of 2, over a log of its own.
fn shard(number: u32) -> (Embedded, Arc<LogWriter>) {
    let (log, _) = SegmentLog::open(MemStorage::default(), 1 << 20).unwrap();
    let log_writer = LogWriter::new();
    log_writer.start(log, 1, FsyncMode::Always);
    let shard = Shard { number, count: 2 };
    let mut engine = Engine::for_shard("000000000000", "us-east-1", shard);
    engine.set_log(log_writer.clone());
    let clock = Arc::new(ManualClock::new(Timestamp(1)));
    let backend = Embedded::new(
        Arc::new(engine),
        Some(log_writer.clone()),
        clock,
        Default::default(),
    );
    (backend, log_writer)
}

/// A name starting with `stem` whose key is in `shard` of 2.
fn name_in(stem: &str, shard: u32, suffix: &str) -> String {
    (0..)
        .map(|i| format!("{stem}-{i}{suffix}"))
        .find(|name| Shard::of(2, name) == shard)
        .unwrap()
}

fn publish(backend: &Embedded, topic_arn: &str, body: &str) {
    let request = PublishRequest {
        message: body.into(),
        group_id: Some("g".into()),
        dedup_id: Some(body.into()),
        ..Default::default()
    };
    backend
        .engine
        .publish(topic_arn, &request, "http://localhost", Timestamp(1))
        .unwrap();
}

/// Whether `future` waits when polled once.
fn pending<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> bool {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    future.poll(&mut context).is_pending()
}

/// A FIFO topic of `source`'s shard with a raw subscription for a FIFO queue of
/// `destination`'s (made if missing): the topic's ARN and the queue's name.
fn subscribed(source: &Embedded, destination: &Embedded) -> (Arc<str>, String) {
    let (topic, queue) = (name_in("prices", 0, ".fifo"), name_in("q", 1, ".fifo"));
    let fifo = [("FifoQueue".to_string(), "true".to_string())];
    destination
        .engine
        .queues
        .create_from(&queue, &fifo, &[], Timestamp(1))
        .unwrap();
    let fifo_topic = [("FifoTopic".to_string(), "true".to_string())];
    let topic_arn = source
        .engine
        .topics
        .create(&topic, &fifo_topic, &[], Timestamp(1))
        .unwrap();
    let endpoint = format!("arn:aws:sqs:us-east-1:000000000000:{queue}");
    source
        .engine
        .subscribe(
            &topic_arn,
            "sqs",
            Some(&endpoint),
            &[("RawMessageDelivery".to_string(), "true".to_string())],
            "http://localhost",
            None,
            Timestamp(1),
        )
        .unwrap();
    (topic_arn, queue)
}

/// The bodies `destination`'s queue holds, received.
fn bodies_in(destination: &Embedded, queue: &str) -> Vec<String> {
    let entry = destination.engine.queues.get(queue).unwrap();
    let all = ReceiveRequest {
        max_messages: Some(10),
        ..Default::default()
    };
    let (outcome, _) = destination
        .engine
        .receive(&entry, &all, Timestamp(2))
        .unwrap();
    (outcome.received.iter())
        .map(|r| r.message.body.to_string())
        .collect()
}

/// Logs synced less often than each change may each lose a different tail to a power cut;
/// two shards agree before anything runs, so no parcel is taken for one applied before and
/// none is waited for forever.
#[tokio::test]
async fn logs_cut_short_apart_agree_before_anything_runs() {
    let ((source, _), (destination, _)) = (shard(0), shard(1));
    let (topic_arn, queue) = subscribed(&source, &destination);
    for body in ["a", "b", "c"] {
        publish(&source, &topic_arn, body);
    }
    let mut applied = 0;
    let pair = (&source, &destination);
    assert_eq!(carry(pair, &mut applied, 10, &|_| {}).await.unwrap(), 3);
    // Told so at the next pull: the source forgets 1 to 3.
    assert_eq!(carry(pair, &mut applied, 10, &|_| {}).await.unwrap(), 0);

    // The source's log lost its tail: it holds "a" as parcel 1 again, which the destination
    // applied. Agreed, its next parcel is numbered 4 and arrives.
    let (cut_source, _) = shard(0);
    let (cut_topic, _) = subscribed(&cut_source, &destination);
    publish(&cut_source, &cut_topic, "a");
    assert_eq!(super::relay::agree(&cut_source, &destination), 0);
    publish(&cut_source, &cut_topic, "d");
    let mut applied = destination.applied_from(0).await.unwrap();
    let cut_pair = (&cut_source, &destination);
    assert_eq!(carry(cut_pair, &mut applied, 10, &|_| {}).await.unwrap(), 1);
    assert_eq!(bodies_in(&destination, &queue), ["a", "b", "c", "d"]);

    // The destination's log lost its tail (it applied nothing) while the source forgot 1 to 3:
    // those are gone, passed over rather than waited for, and the next one arrives.
    let (cut_destination, _) = shard(1);
    subscribed(&source, &cut_destination);
    assert_eq!(super::relay::agree(&source, &cut_destination), 3);
    assert_eq!(cut_destination.applied_from(0).await.unwrap(), 3);
    publish(&source, &topic_arn, "e");
    let mut applied = 3;
    let pair = (&source, &cut_destination);
    assert_eq!(carry(pair, &mut applied, 10, &|_| {}).await.unwrap(), 1);
    assert_eq!(bodies_in(&cut_destination, &queue), ["e"]);
}

#[tokio::test]
async fn parcels_go_by_pull_once_each_and_are_forgotten_once_applied() {
    let ((source, source_log), (destination, destination_log)) = (shard(0), shard(1));
    let (topic_arn, queue) = subscribed(&source, &destination);
    // Not handed out while the source's log does not hold them yet.
    source_log.hold_writes(true);
    for body in ["a", "b", "c"] {
        publish(&source, &topic_arn, body);
    }

    let mut applied = destination.applied_from(0).await.unwrap();
    assert_eq!(applied, 0);
    let mut pulling = Box::pin(source.parcels_for(1, 0, crate::engine::parcel::Room::at_most(2)));
    assert!(pending(pulling.as_mut()));
    source_log.hold_writes(false);
    assert_eq!(pulling.await.unwrap().len(), 2);
    // Nor named applied while the destination's log does not hold them.
    destination_log.hold_writes(true);
    let mut carrying = Box::pin(carry((&source, &destination), &mut applied, 2, &|_| {}));
    assert!(pending(carrying.as_mut()));
    destination_log.hold_writes(false);
    assert_eq!(carrying.await.unwrap(), 2);
    assert_eq!(applied, 2);
    assert_eq!(
        carry((&source, &destination), &mut applied, 2, &|_| {})
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        carry((&source, &destination), &mut applied, 2, &|_| {})
            .await
            .unwrap(),
        0
    );
    assert!(
        source.engine.relay.depths().is_empty(),
        "forgotten at the pull that named them applied"
    );

    // An answer lost on the way: the destination pulls again from what it named before.
    publish(&source, &topic_arn, "d");
    let mut stale = 2;
    // From 2 to 4: parcel 3 was applied already, parcel 4 now.
    assert_eq!(
        carry((&source, &destination), &mut stale, 10, &|_| {})
            .await
            .unwrap(),
        2
    );
    assert_eq!(stale, 4);
    let again = source
        .parcels_for(1, 3, crate::engine::parcel::Room::at_most(10))
        .await
        .unwrap();
    assert_eq!(
        again.len(),
        1,
        "parcel 4 is not forgotten until named applied"
    );
    assert_eq!(
        destination.take_parcels(0, &again, &|_| {}).await.unwrap(),
        4
    );

    assert_eq!(
        bodies_in(&destination, &queue),
        ["a", "b", "c", "d"],
        "in order, each once"
    );
    source_log.close();
    destination_log.close();
}
