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
    let count = 3;
    let parcels_waiting: Arc<[Notify]> = (0..count).map(|_| Notify::new()).collect();
    let captured = Arc::new(crate::backend::captured::CapturedMessages::default());
    let mut logs = Vec::new();
    let shards = (0..count)
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
    let sharded = Sharded::new(shards, namespaces, clock.clone(), parcels_waiting);
    sharded.start_work();
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
