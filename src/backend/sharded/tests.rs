//! The storage seam's rules, kept over three shards (each an embedded backend with a log of its
//! own), with parcels carried between them as a server carries them.

use std::sync::Arc;

use tokio::sync::Notify;

use super::Sharded;
use crate::backend::embedded::Embedded;
use crate::backend::Work;
use crate::clock::{Clock, ManualClock};
use crate::engine::namespace::{Namespace, Namespaces};
use crate::engine::shard::Shard;
use crate::engine::{Engine, Timestamp};
use crate::persist::segment_log::SegmentLog;
use crate::persist::storage::MemStorage;
use crate::persist::writer::{FsyncMode, LogWriter};

/// Three shards on `clock`, their parcels carried.
fn sharded(clock: &Arc<ManualClock>) -> (Sharded, Vec<Arc<LogWriter>>) {
    let (sharded, logs) = idle_shards(clock);
    sharded.start_work();
    (sharded, logs)
}

/// Three shards on `clock`, nothing carried until their work starts.
fn idle_shards(clock: &Arc<ManualClock>) -> (Sharded, Vec<Arc<LogWriter>>) {
    partly_here(clock, &[0, 1, 2])
}

/// Three shards on `clock` of which this node leads `here`, nothing carried until their work
/// starts.
fn partly_here(clock: &Arc<ManualClock>, here: &[u32]) -> (Sharded, Vec<Arc<LogWriter>>) {
    let count = 3;
    let parcels_waiting: Arc<[Notify]> = (0..count).map(|_| Notify::new()).collect();
    let captured = Arc::new(crate::backend::captured::CapturedMessages::default());
    let mut logs = Vec::new();
    let shards = (here.iter().copied())
        .map(|number| {
            let (log, _) = SegmentLog::open(MemStorage::default(), 1 << 20).unwrap();
            let log_writer = LogWriter::new();
            log_writer.start(log, 1, FsyncMode::Always);
            let shard = Shard { number, count };
            let mut engine = Engine::for_shard("000000000000", "us-east-1", shard);
            engine.set_log(log_writer.clone());
            logs.push(log_writer.clone());
            let clock: Arc<dyn Clock> = clock.clone();
            let backend = Embedded::new(
                Arc::new(engine),
                Some(log_writer),
                clock,
                Default::default(),
            )
            .among_shards(captured.clone(), parcels_waiting.clone());
            Arc::new(backend)
        })
        .collect();
    let namespaces = Namespaces::new(Namespace::new("us-east-1", "000000000000"));
    let make: super::MakeShard = {
        let (clock, parcels_waiting): (Arc<dyn Clock>, _) =
            (clock.clone(), parcels_waiting.clone());
        Arc::new(move |engine, log_writer, tenure| {
            let backend =
                Embedded::new(engine, Some(log_writer), clock.clone(), Default::default())
                    .within(tenure)
                    .among_shards(captured.clone(), parcels_waiting.clone());
            Arc::new(backend)
        })
    };
    let sharded = Sharded::new(count, shards, namespaces, clock.clone(), parcels_waiting)
        .making_shards_with(make);
    (sharded, logs)
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(Timestamp(1)))
}

#[tokio::test]
async fn keeps_the_rules_of_queue_administration() {
    let clock = clock();
    let (backend, _logs) = sharded(&clock);
    crate::backend::conformance::queue_administration(&backend, clock.now()).await;
}

#[tokio::test]
async fn keeps_the_rules_of_messages() {
    let clock = clock();
    let (backend, _logs) = sharded(&clock);
    crate::backend::conformance::messages(&backend, &clock).await;
}

#[tokio::test]
async fn keeps_the_rules_of_inspection() {
    let clock = clock();
    let (backend, _logs) = sharded(&clock);
    crate::backend::conformance::inspection(&backend, &clock).await;
}

#[tokio::test]
async fn keeps_the_rules_of_captured_messages() {
    let clock = clock();
    let (backend, _logs) = sharded(&clock);
    crate::backend::conformance::captured_messages(&backend).await;
}

#[tokio::test]
async fn keeps_the_rules_of_move_tasks() {
    let clock = clock();
    let (backend, _logs) = sharded(&clock);
    crate::backend::conformance::move_tasks(&backend, &clock).await;
}

#[tokio::test]
async fn keeps_the_rules_of_topics() {
    let clock = clock();
    let (backend, _logs) = sharded(&clock);
    crate::backend::conformance::topics(&backend, &clock).await;
}

/// The suites above cross shards where it matters: a dead-letter queue, a move task's
/// destination and a topic's subscribed queues lie in other shards than their sources.
#[test]
fn the_suites_queues_and_topics_lie_in_different_shards() {
    let shard = |key| Shard::of(3, key);
    // Messages: a dead letter; move tasks: the dead-letter queue, the way back, a destination.
    assert_ne!(shard("live.fifo"), shard("dead.fifo"));
    assert_ne!(shard("work.fifo"), shard("dlq.fifo"));
    assert_ne!(shard("dlq.fifo"), shard("other"));
    // Topics: the topic's copies for both subscribed queues.
    assert_ne!(shard("prices.fifo"), shard("eu.fifo"));
    assert_ne!(shard("prices.fifo"), shard("all.fifo"));
}

/// Parcels waiting between shards are counted by (from, to) until carried; the subscription
/// says `relayed` until the queue's shard placed its copy, and `queued` after.
#[tokio::test]
async fn what_waits_to_cross_is_counted_until_carried() {
    use crate::backend::{Inspection, RelayWaiting};
    let clock = clock();
    let (backend, _logs) = idle_shards(&clock);
    // prices.fifo is shard 0's, all.fifo shard 2's (pinned above).
    let arn = prices_topic(&backend).await;
    let fifo = vec![("FifoQueue".to_string(), "true".to_string())];
    let config = crate::engine::QueueConfig::for_create("all.fifo", &fifo, clock.now()).unwrap();
    crate::backend::QueueAdmin::create_queue(
        &backend,
        crate::backend::CreateQueue {
            name: "all.fifo".into(),
            config,
            attributes: fifo.clone(),
            tags: Vec::new(),
            now: clock.now(),
        },
    )
    .await
    .unwrap();
    let subscription = subscribe_all_and_publish_three(&backend, &arn).await;
    let waiting = backend.relay_waiting().await.unwrap();
    assert_eq!(
        waiting,
        [RelayWaiting {
            from: 0,
            to: 2,
            parcels: 3
        }]
    );
    let fates = || async {
        let activity = backend.subscription_activity().await.unwrap();
        let ours = activity
            .iter()
            .find(|a| a.subscription.arn == subscription.arn)
            .unwrap();
        ours.recent
            .iter()
            .map(|note| note.fate.name())
            .collect::<Vec<_>>()
    };
    assert_eq!(fates().await, ["relayed"; 3]);
    backend.start_work();
    backend.carried().await.unwrap();
    assert!(backend.relay_waiting().await.unwrap().is_empty());
    assert_eq!(fates().await, ["queued"; 3]);
}

/// A node leading some of the shards answers for their queues and topics, refuses those of the
/// others as led elsewhere (noted for the HTTP layer), and refuses a listing that would need
/// another node's shards rather than answer it from part of them.
#[tokio::test]
async fn shards_led_elsewhere_are_refused_and_noted() {
    use crate::backend::led_elsewhere::noting;
    use crate::backend::{BackendError, QueueAdmin, Topics};
    let clock = clock();
    let here_key = "work.fifo";
    let (here, elsewhere) = (Shard::of(3, here_key), Shard::of(3, "dead.fifo"));
    assert_ne!(here, elsewhere);
    let (backend, _logs) = partly_here(&clock, &[here]);
    backend.start_work();
    let fifo = [("FifoQueue", "true")];
    let request = |name: &str| crate::backend::conformance::create(name, &fifo, clock.now());
    let (created, needed) = noting(backend.create_queue(request(here_key))).await;
    assert!(created.is_ok(), "{created:?}");
    assert_eq!(needed.passed_to, None);
    let (refused, needed) = noting(backend.create_queue(request("dead.fifo"))).await;
    assert!(matches!(refused, Err(BackendError::LedElsewhere(n)) if n == elsewhere));
    assert_eq!(needed.passed_to, Some(elsewhere));
    let (listed, needed) = noting(backend.list_queues("")).await;
    assert!(matches!(listed, Err(BackendError::Across(_))), "{listed:?}");
    assert_eq!(
        needed.passed_to, None,
        "a listing is not passed to one leader"
    );
    assert!(needed.across);
    let (topics, _) = noting(backend.list_topics()).await;
    assert!(matches!(topics, Err(BackendError::Across(_))));
    // The webhook worker takes from the shards led here only, none of which waits.
    let taken = crate::backend::Deliveries::take_deliveries(&backend, clock.now(), 10).await;
    assert!(taken.unwrap().is_empty());
    backend.stop_work().await.unwrap();
}

/// A pull naming several pairs of shards answers at once what any of them holds, up to its
/// most in all, each pair's parcels after the one its destination applied; it refuses a pair
/// whose source is not led here, leaves out pairs with nothing, forgets what the destination
/// applied, and with nothing to carry answers none once its wait is over.
#[tokio::test]
async fn a_pull_of_several_pairs_answers_what_any_holds() {
    use crate::backend::Inspection;
    use crate::persist::format::between_nodes::{decode_parcels, decode_pulled, PairPull};
    let clock = clock();
    // prices.fifo is shard 0's, all.fifo shard 2's, which another node leads.
    let (backend, _logs) = partly_here(&clock, &[0, 1]);
    let arn = prices_topic(&backend).await;
    subscribe_all_and_publish_three(&backend, &arn).await;
    let pair = |from, to, after| PairPull { from, to, after };
    let pull = |pairs: Vec<PairPull>, max, wait| {
        let backend = &backend;
        async move {
            let bytes = (backend.parcels_for_pairs(pairs, max, wait).await).unwrap();
            let pulled = decode_pulled(&bytes).unwrap();
            (pulled.into_iter())
                .map(|p| {
                    let seqs = (p.parcels.map(|bytes| {
                        let parcels = decode_parcels(p.to, &bytes).unwrap();
                        parcels.iter().map(|parcel| parcel.seq).collect::<Vec<_>>()
                    }))
                    .map_err(|refused| refused.contains("shard 2"));
                    ((p.from, p.to), seqs)
                })
                .collect::<Vec<_>>()
        }
    };
    let long = std::time::Duration::from_secs(30);
    let pairs = vec![pair(1, 2, 0), pair(0, 2, 0), pair(2, 0, 0)];
    assert_eq!(
        pull(pairs, 2, long).await,
        [((0, 2), Ok(vec![1, 2])), ((2, 0), Err(true))]
    );
    // Parcel 2 applied: the third, and the first two forgotten.
    assert_eq!(
        pull(vec![pair(0, 2, 2)], 10, long).await,
        [((0, 2), Ok(vec![3]))]
    );
    let waiting = backend.relay_waiting().await.unwrap();
    assert_eq!(waiting.iter().map(|w| w.parcels).collect::<Vec<_>>(), [1]);
    // All applied: nothing to answer but once the wait is over, and nothing left waiting.
    let short = std::time::Duration::from_millis(50);
    assert_eq!(pull(vec![pair(0, 2, 3)], 10, short).await, []);
    assert!(backend.relay_waiting().await.unwrap().is_empty());
}

/// A pull's answer holds parcels within the bytes one carry takes, whatever their count: large
/// copies come a part at a time, each pull the next part, in order.
#[tokio::test]
async fn a_pull_answers_large_parcels_within_its_bytes_a_part_at_a_time() {
    use crate::engine::parcel::MOST_BYTES_AT_ONCE;
    use crate::persist::format::between_nodes::{decode_parcels, decode_pulled, PairPull};
    let clock = clock();
    // prices.fifo is shard 0's, all.fifo shard 2's, which another node leads.
    let (backend, _logs) = partly_here(&clock, &[0, 1]);
    let arn = prices_topic(&backend).await;
    subscribe_all(&backend, &arn).await;
    // About 24 MiB of copies for shard 2, more than one carry takes.
    let body = "x".repeat(250_000);
    let published = 100;
    for n in 0..published {
        publish_in_group_g(&backend, &arn, body.clone(), n).await;
    }
    let wait = std::time::Duration::from_millis(50);
    let mut after = 0;
    let mut parts = Vec::new();
    while after < published {
        let pairs = vec![PairPull {
            from: 0,
            to: 2,
            after,
        }];
        let bytes = (backend.parcels_for_pairs(pairs, 1024, wait).await).unwrap();
        let pulled = decode_pulled(&bytes).unwrap();
        assert_eq!(pulled.len(), 1, "one pair");
        let parcels = decode_parcels(2, pulled[0].parcels.as_ref().unwrap()).unwrap();
        let seqs: Vec<u64> = parcels.iter().map(|p| p.seq).collect();
        let next: Vec<u64> = (after + 1..=after + parcels.len() as u64).collect();
        assert_eq!(seqs, next, "the next parcels, in order");
        let size: usize = parcels.iter().map(|p| p.size()).sum();
        assert!(size <= MOST_BYTES_AT_ONCE, "{size} bytes in one answer");
        let one = parcels[0].size();
        if after + (parcels.len() as u64) < published {
            assert!(size + one > MOST_BYTES_AT_ONCE, "room left for another");
        }
        after += parcels.len() as u64;
        parts.push(parcels.len());
    }
    assert!(parts.len() >= 2, "{parts:?}");
}

/// Two pairs of a pull, each with more large copies waiting than one answer holds: each
/// takes about half of the answer's bytes, rather than the first in the pull's order all of
/// them while the other waits for the next pull.
#[tokio::test]
async fn a_pulls_pairs_share_its_bytes_when_each_has_more_than_the_answer_holds() {
    use crate::backend::{CreateTopic, Topics};
    use crate::engine::parcel::MOST_BYTES_AT_ONCE;
    use crate::persist::format::between_nodes::{decode_parcels, decode_pulled, PairPull};
    let clock = clock();
    // prices.fifo is shard 0's, `quotes` shard 1's; all.fifo is shard 2's, led elsewhere.
    let (backend, _logs) = partly_here(&clock, &[0, 1]);
    let quotes = (0..)
        .map(|n| format!("quotes-{n}.fifo"))
        .find(|name| Shard::of(3, name) == 1)
        .unwrap();
    let prices = prices_topic(&backend).await;
    let quotes = (backend
        .create_topic(CreateTopic {
            name: quotes,
            attributes: vec![("FifoTopic".into(), "true".into())],
            tags: Vec::new(),
        })
        .await)
        .unwrap();
    for arn in [&prices, &quotes] {
        subscribe_all(&backend, arn).await;
    }
    // About 12 MiB of copies from each topic's shard, more than half an answer each.
    let body = "x".repeat(250_000);
    for n in 0..50 {
        publish_in_group_g(&backend, &prices, body.clone(), n).await;
        publish_in_group_g(&backend, &quotes, body.clone(), n).await;
    }
    let pairs = vec![
        PairPull {
            from: 0,
            to: 2,
            after: 0,
        },
        PairPull {
            from: 1,
            to: 2,
            after: 0,
        },
    ];
    let wait = std::time::Duration::from_millis(50);
    let bytes = (backend.parcels_for_pairs(pairs, 1024, wait).await).unwrap();
    let pulled = decode_pulled(&bytes).unwrap();
    let sizes: Vec<(u32, usize)> = (pulled.iter())
        .map(|p| {
            let parcels = decode_parcels(2, p.parcels.as_ref().unwrap()).unwrap();
            (p.from, parcels.iter().map(|parcel| parcel.size()).sum())
        })
        .collect();
    assert_eq!(
        sizes.iter().map(|(from, _)| *from).collect::<Vec<_>>(),
        [0, 1]
    );
    let total: usize = sizes.iter().map(|(_, size)| size).sum();
    assert!(total <= MOST_BYTES_AT_ONCE, "{sizes:?}");
    for (from, size) in &sizes {
        // Half the answer's bytes each, give or take a copy.
        assert!(
            *size + 2 * 250_000 > MOST_BYTES_AT_ONCE / 2,
            "{from}: {sizes:?}"
        );
    }
}

/// The FIFO topic prices.fifo (shard 0's), made; its ARN.
async fn prices_topic(backend: &Sharded) -> std::sync::Arc<str> {
    use crate::backend::{CreateTopic, Topics};
    backend
        .create_topic(CreateTopic {
            name: "prices.fifo".into(),
            attributes: vec![("FifoTopic".into(), "true".into())],
            tags: Vec::new(),
        })
        .await
        .unwrap()
}

/// Subscribes all.fifo (shard 2's) to the FIFO topic `arn`; the subscription.
async fn subscribe_all(
    backend: &Sharded,
    arn: &str,
) -> crate::engine::topic::subscription::Subscribed {
    use crate::backend::{Subscribe, Topics};
    (backend
        .subscribe(Subscribe {
            topic_arn: arn,
            protocol: "sqs",
            endpoint: Some("arn:aws:sqs:us-east-1:000000000000:all.fifo"),
            attributes: Vec::new(),
            base_url: "http://localhost:4566",
            principal: "arn:aws:iam::000000000000:root",
        })
        .await)
        .unwrap()
}

/// Subscribes all.fifo to the FIFO topic `arn` and publishes three messages to it in one group;
/// the subscription.
async fn subscribe_all_and_publish_three(
    backend: &Sharded,
    arn: &str,
) -> crate::engine::topic::subscription::Subscribed {
    let subscription = subscribe_all(backend, arn).await;
    for n in 0..3 {
        publish_in_group_g(backend, arn, format!("m{n}"), n).await;
    }
    subscription
}

/// Publishes `message` to the FIFO topic `arn` in group g, its deduplication id `d{n}`.
async fn publish_in_group_g(backend: &Sharded, arn: &str, message: String, n: u64) {
    use crate::backend::Topics;
    use crate::engine::topic::PublishRequest;
    let request = PublishRequest {
        message,
        subject: None,
        structured: false,
        attributes: Default::default(),
        group_id: Some("g".into()),
        dedup_id: Some(format!("d{n}")),
        trace_header: None,
    };
    (backend.publish(arn, request, "http://localhost:4566").await).unwrap();
}

/// A shard handed off is led elsewhere from then on: its queues' requests are refused and
/// noted for the HTTP layer, a receive waiting on it ends empty at once, the other shards are
/// served on and still carry between them, and what they make for it waits for its next
/// leader to pull, where a carrier here placed it before.
#[tokio::test]
async fn a_shard_handed_off_is_led_elsewhere_and_its_parcels_wait_for_its_next_leader() {
    use crate::backend::led_elsewhere::noting;
    use crate::backend::{BackendError, Inspection, Messages, QueueAdmin, Topics};
    use crate::engine::queue::ReceiveRequest;
    use crate::persist::format::between_nodes::{decode_parcels, decode_pulled, PairPull};
    let clock = clock();
    let (backend, _logs) = idle_shards(&clock);
    // prices.fifo is shard 0's, all.fifo shard 2's (pinned above); `kept` is shard 1's.
    let kept = (0..)
        .map(|n| format!("kept-{n}.fifo"))
        .find(|name| Shard::of(3, name) == 1)
        .unwrap();
    let arn = prices_topic(&backend).await;
    let fifo = [("FifoQueue", "true")];
    let request = |name: &str| crate::backend::conformance::create(name, &fifo, clock.now());
    backend.create_queue(request("all.fifo")).await.unwrap();
    backend.create_queue(request(&kept)).await.unwrap();
    subscribe_all_and_publish_three(&backend, &arn).await;
    let kept_arn = format!("arn:aws:sqs:us-east-1:000000000000:{kept}");
    (backend.subscribe(crate::backend::Subscribe {
        topic_arn: &arn,
        protocol: "sqs",
        endpoint: Some(&kept_arn),
        attributes: Vec::new(),
        base_url: "http://localhost:4566",
        principal: "arn:aws:iam::000000000000:root",
    }))
    .await
    .unwrap();
    backend.start_work();
    backend.carried().await.unwrap();
    let visible = |name: &'static str| {
        let (backend, now) = (&backend, clock.now());
        async move { (backend.describe_queue(name, now).await).map(|q| q.counts.visible) }
    };
    assert_eq!(visible("all.fifo").await.unwrap(), 3);
    // A receive waits on all.fifo (the manual clock never ends its wait) while shard 2 is
    // handed off: it ends empty, and the hand-off completes.
    let drained = ReceiveRequest {
        max_messages: Some(10),
        ..ReceiveRequest::default()
    };
    let all_queue = "all.fifo";
    let taken = backend.receive(all_queue, drained, Some(0)).await.unwrap();
    assert_eq!(
        taken.len(),
        3,
        "the group's three, which hold it for the next receive"
    );
    let waiting = backend.receive(all_queue, ReceiveRequest::default(), Some(20));
    let handing = async {
        tokio::task::yield_now().await;
        backend.hand_off(&[2]).await
    };
    let limit = std::time::Duration::from_secs(10);
    let (ended, handed) = tokio::time::timeout(limit, async { tokio::join!(waiting, handing) })
        .await
        .expect("the waiting receive ended and the hand-off completed");
    assert!(ended.unwrap().is_empty());
    handed.unwrap();
    let (refused, needed) = noting(visible("all.fifo")).await;
    assert!(
        matches!(refused, Err(BackendError::LedElsewhere(2))),
        "{refused:?}"
    );
    assert_eq!(needed.passed_to, Some(2));
    let (refused, _) = noting(backend.create_queue(request("all.fifo"))).await;
    assert!(
        matches!(refused, Err(BackendError::LedElsewhere(2))),
        "{refused:?}"
    );
    // Shard 0 is served on: its topic takes a fourth publish, whose copy for shard 1 is
    // carried here and whose copy for shard 2 waits for shard 2's next leader.
    let publish = crate::engine::topic::PublishRequest {
        message: "m3".into(),
        subject: None,
        structured: false,
        attributes: Default::default(),
        group_id: Some("g".into()),
        dedup_id: Some("d3".into()),
        trace_header: None,
    };
    (backend
        .publish(&arn, publish, "http://localhost:4566")
        .await)
        .unwrap();
    // A receive waiting on the manual clock ends only when the carried copy wakes it.
    let arrived = backend.receive(&kept, ReceiveRequest::default(), Some(20));
    let arrived = async { assert_eq!(arrived.await.unwrap().len(), 1) };
    tokio::time::timeout(limit, arrived)
        .await
        .expect("shard 1 took its copy of the fourth publish from shard 0");
    let pairs = vec![PairPull {
        from: 0,
        to: 2,
        after: 3,
    }];
    let wait = std::time::Duration::from_secs(30);
    let pulled = (backend.parcels_for_pairs(pairs, 10, wait).await).unwrap();
    let pulled = decode_pulled(&pulled).unwrap();
    let seqs: Vec<u64> = (pulled.iter())
        .flat_map(|p| decode_parcels(2, p.parcels.as_ref().unwrap()).unwrap())
        .map(|parcel| parcel.seq)
        .collect();
    assert_eq!(seqs, [4]);
    let waiting = backend.relay_waiting().await.unwrap();
    let pairs: Vec<_> = waiting.iter().map(|w| (w.from, w.to)).collect();
    assert_eq!(pairs, [(0, 2)]);
    // Handed off once: a second time is refused, as for any shard not led here.
    assert!(matches!(
        backend.hand_off(&[2]).await,
        Err(BackendError::Across(2))
    ));
    // Taken again (here a fresh engine and log, where a node recovers them from the shard's
    // log): served here from then on.
    let (log, _) = SegmentLog::open(MemStorage::default(), 1 << 20).unwrap();
    let log_writer = LogWriter::new();
    log_writer.start(log, 1, FsyncMode::Always);
    let shard = Shard {
        number: 2,
        count: 3,
    };
    let mut engine = Engine::for_shard("000000000000", "us-east-1", shard);
    engine.set_log(log_writer.clone());
    let tenure = Arc::new(crate::persist::tenure::Tenure::for_good());
    let engine = Arc::new(engine);
    let taking = backend.take_shard(engine.clone(), log_writer.clone(), tenure.clone());
    taking.await.unwrap();
    let missing = visible("all.fifo").await;
    assert!(
        matches!(missing, Err(BackendError::Rejected(_))),
        "{missing:?}"
    );
    backend.create_queue(request("all.fifo")).await.unwrap();
    assert_eq!(visible("all.fifo").await.unwrap(), 0);
    // Led here already: refused, with nothing changed.
    let again = backend.take_shard(engine, log_writer, tenure).await;
    assert!(
        matches!(again, Err(BackendError::Unavailable(_))),
        "{again:?}"
    );
    backend.stop_work().await.unwrap();
}

/// A shard handed off and taken back, again and again as nodes come and go, is served by its
/// fresh engine after each take; and each backend handed off is let go of, engine and
/// all, once no request holds it, so taking a shard again costs nothing that stays.
#[tokio::test]
async fn a_shard_taken_again_and_again_is_served_each_time_and_each_backend_handed_off_let_go_of() {
    use crate::backend::{BackendError, Messages, QueueAdmin};
    use crate::engine::body::Body;
    use crate::engine::queue::SendRequest;
    let clock = clock();
    let (backend, _logs) = idle_shards(&clock);
    backend.start_work();
    let fifo = [("FifoQueue", "true")];
    let request = |name: &str| crate::backend::conformance::create(name, &fifo, clock.now());
    // One log across the takes, as a shard's log in the database outlives its leaders.
    let (log, _) = SegmentLog::open(MemStorage::default(), 1 << 20).unwrap();
    let log_writer = LogWriter::new();
    log_writer.start(log, 1, FsyncMode::Always);
    let tenure = Arc::new(crate::persist::tenure::Tenure::for_good());
    let shard = Shard {
        number: 2,
        count: 3,
    };
    let mut handed_off = Vec::new();
    for take in 0..8 {
        let refused = backend.hand_off(&[2]).await;
        // The first hand-off is of the backend the router started with.
        assert!(take == 0 || matches!(refused, Err(BackendError::Across(2))));
        let mut engine = Engine::for_shard("000000000000", "us-east-1", shard);
        engine.set_log(log_writer.clone());
        let engine = Arc::new(engine);
        handed_off.push(Arc::downgrade(&engine));
        (backend.take_shard(engine, log_writer.clone(), tenure.clone()))
            .await
            .unwrap_or_else(|error| panic!("take {take}: {error:?}"));
        backend.create_queue(request("all.fifo")).await.unwrap();
        let body = format!("m{take}");
        let send = SendRequest {
            body: Body::new(&body),
            group_id: Some("g".into()),
            dedup_id: Some(body.as_str().into()),
            ..SendRequest::default()
        };
        backend.send("all.fifo", send).await.unwrap();
        let counts = (backend.describe_queue("all.fifo", clock.now()).await)
            .unwrap()
            .counts;
        assert_eq!(counts.visible, 1, "take {take}: served by its fresh engine");
        backend.hand_off(&[2]).await.unwrap();
        let let_go = handed_off.iter().filter(|e| e.upgrade().is_none()).count();
        assert_eq!(
            let_go,
            take + 1,
            "take {take}: every engine handed off is let go of"
        );
    }
    backend.stop_work().await.unwrap();
}
