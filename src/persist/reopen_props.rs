//! Property test of the whole data directory: random queue and topic work, snapshots (some taken while
//! the work goes on, from another thread) and restarts; every restart must bring back exactly
//! the state the engine had.

use std::path::Path;

use proptest::prelude::*;

use super::writer::FsyncMode;
use super::*;
use crate::engine::queue::{ReceiveRequest, SendRequest};
use crate::engine::Timestamp;

type TestEngine = Engine<()>;

/// A FIFO queue that dead-letters to a second one after two receives, and a standard queue.
const QUEUES: [&str; 3] = ["work.fifo", "dead.fifo", "plain"];
/// A FIFO topic with both FIFO queues subscribed.
const TOPIC: &str = "arn:aws:sns:us-east-1:000000000000:prices.fifo";

#[derive(Clone, Debug)]
enum Work {
    Send {
        queue: usize,
        group: u8,
        body: u8,
    },
    Publish {
        group: u8,
        body: u8,
    },
    Receive {
        queue: usize,
        max: i64,
        visibility: i64,
    },
    Delete {
        handle: prop::sample::Index,
    },
    Release {
        handle: prop::sample::Index,
    },
    Advance {
        millis: u64,
    },
    Purge {
        queue: usize,
    },
    Recreate {
        queue: usize,
    },
}

#[derive(Clone, Debug)]
enum Step {
    Work(Work),
    Snapshot,
    /// A snapshot on another thread while this work runs.
    SnapshotDuring(Vec<Work>),
    Restart,
}

fn work() -> impl Strategy<Value = Work> {
    let queue = 0..QUEUES.len();
    prop_oneof![
        4 => (queue.clone(), 0u8..3, 0u8..6)
            .prop_map(|(queue, group, body)| Work::Send { queue, group, body }),
        2 => (0u8..3, 0u8..6).prop_map(|(group, body)| Work::Publish { group, body }),
        3 => (queue.clone(), 1i64..4, 0i64..3)
            .prop_map(|(queue, max, visibility)| Work::Receive { queue, max, visibility }),
        2 => any::<prop::sample::Index>().prop_map(|handle| Work::Delete { handle }),
        1 => any::<prop::sample::Index>().prop_map(|handle| Work::Release { handle }),
        2 => (0u64..4000).prop_map(|millis| Work::Advance { millis }),
        1 => queue.clone().prop_map(|queue| Work::Purge { queue }),
        1 => queue.prop_map(|queue| Work::Recreate { queue }),
    ]
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        12 => work().prop_map(Step::Work),
        1 => Just(Step::Snapshot),
        1 => prop::collection::vec(work(), 1..12).prop_map(Step::SnapshotDuring),
        1 => Just(Step::Restart),
    ];
    prop::collection::vec(step, 1..60)
}

fn attributes(queue: usize) -> Vec<(String, String)> {
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    match queue {
        0 => vec![
            pair("FifoQueue", "true"),
            pair("ContentBasedDeduplication", "true"),
            pair(
                "RedrivePolicy",
                r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dead.fifo","maxReceiveCount":"2"}"#,
            ),
        ],
        1 => vec![
            pair("FifoQueue", "true"),
            pair("ContentBasedDeduplication", "true"),
        ],
        _ => Vec::new(),
    }
}

struct Run {
    now: Timestamp,
    /// Receipt handles handed out so far, with their queue.
    handles: Vec<(usize, String)>,
}

impl Run {
    /// Does one piece of work; refusals (an expired handle, a purge within 60 seconds, a
    /// queue deleted a moment ago) are part of the game.
    fn apply(&mut self, engine: &TestEngine, work: &Work) {
        let now = self.now;
        match work {
            Work::Send { queue, group, body } => {
                let Ok(entry) = engine.queues.get(QUEUES[*queue]) else {
                    return;
                };
                let request = SendRequest {
                    body: format!("body {body}").into(),
                    group_id: (*queue != 2).then(|| format!("g{group}").into()),
                    sender_id: "p".into(),
                    ..Default::default()
                };
                let mut q = entry.lock();
                q.tick(now);
                let _ = q.send(request, now);
            }
            Work::Publish { group, body } => {
                let request = crate::engine::topic::PublishRequest {
                    message: format!("published {body}"),
                    subject: None,
                    structured: false,
                    attributes: Default::default(),
                    group_id: Some(format!("g{group}")),
                    dedup_id: None,
                    trace_header: None,
                };
                let _ = engine.publish(TOPIC, &request, "http://localhost", now);
            }
            Work::Receive {
                queue,
                max,
                visibility,
            } => {
                let Ok(entry) = engine.queues.get(QUEUES[*queue]) else {
                    return;
                };
                let request = ReceiveRequest {
                    max_messages: Some(*max),
                    visibility_timeout: Some(*visibility),
                    attempt_id: None,
                };
                if let Ok((outcome, _)) = engine.receive(&entry, &request, now) {
                    for delivery in outcome.received {
                        self.handles.push((*queue, delivery.receipt_handle));
                    }
                }
            }
            Work::Delete { handle } | Work::Release { handle } => {
                if self.handles.is_empty() {
                    return;
                }
                let (queue, handle_text) = &self.handles[handle.index(self.handles.len())];
                let Ok(entry) = engine.queues.get(QUEUES[*queue]) else {
                    return;
                };
                let mut q = entry.lock();
                q.tick(now);
                if matches!(work, Work::Delete { .. }) {
                    let _ = q.delete(handle_text, now);
                } else {
                    let _ = q.change_visibility(handle_text, 0, now);
                }
            }
            Work::Advance { millis } => self.now = now.plus_millis(*millis),
            Work::Purge { queue } => {
                if let Ok(entry) = engine.queues.get(QUEUES[*queue]) {
                    let _ = entry.lock().purge(now);
                }
            }
            Work::Recreate { queue } => {
                let _ = engine.queues.delete(QUEUES[*queue], now);
                let _ = engine
                    .queues
                    .create_from(QUEUES[*queue], &attributes(*queue), &[], now);
            }
        }
    }
}

/// The engine's state once every deadline due by `now` has been applied: deadlines follow
/// from time, so a visibility timeout that ended before a restart is applied after it, at
/// the next look at the queue, rather than logged.
fn settled(engine: &TestEngine, now: Timestamp) -> Vec<String> {
    for name in engine.queues.list("") {
        engine.queues.get(&name).unwrap().lock().tick(now);
    }
    engine.state_for_tests()
}

fn open_dir(dir: &Path) -> (TestEngine, DataDir) {
    let mut engine = Engine::new("000000000000", "us-east-1");
    // Syncs change nothing about what is replayed; closing syncs anyway.
    let (data, _) = open(dir, FsyncMode::Never, &mut engine).expect("recovers");
    (engine, data)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_restart_brings_back_the_state_as_it_was(steps in steps()) {
        let dir = tempfile::tempdir().unwrap();
        let (mut engine, mut data) = open_dir(dir.path());
        let mut run = Run {
            now: Timestamp(1_000_000),
            handles: Vec::new(),
        };
        for queue in [1, 0, 2] {
            engine.queues.create_from(QUEUES[queue], &attributes(queue), &[], run.now).unwrap();
        }
        let fifo = [("FifoTopic", "true"), ("ContentBasedDeduplication", "true")]
            .map(|(k, v)| (k.to_string(), v.to_string()));
        let topic = engine.topics.create("prices.fifo", &fifo, &[], run.now).unwrap();
        prop_assert_eq!(&*topic, TOPIC);
        for queue in &QUEUES[..2] {
            let endpoint = format!("arn:aws:sqs:us-east-1:000000000000:{queue}");
            engine
                .subscribe(TOPIC, "sqs", Some(&endpoint), &[], "http://localhost", None, run.now)
                .unwrap();
        }
        for step in &steps {
            match step {
                Step::Work(work) => run.apply(&engine, work),
                Step::Snapshot => {
                    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
                }
                Step::SnapshotDuring(works) => std::thread::scope(|scope| {
                    let taken = scope.spawn(|| snapshot::take(dir.path(), &engine, &data.log_writer));
                    for work in works {
                        run.apply(&engine, work);
                    }
                    // A purge that clears a deduplication history the snapshot is reading
                    // makes it decline (the next is taken later); nothing else may fail it.
                    if let Err(error) = taken.join().unwrap() {
                        let declined = error.to_string().contains("cleared while the snapshot read it");
                        assert!(declined, "{error}");
                    }
                }),
                Step::Restart => {
                    let before = settled(&engine, run.now);
                    data.log_writer.close();
                    drop(data);
                    (engine, data) = open_dir(dir.path());
                    prop_assert_eq!(settled(&engine, run.now), before);
                }
            }
        }
        let before = settled(&engine, run.now);
        data.log_writer.close();
        drop(data);
        let (engine, data) = open_dir(dir.path());
        prop_assert_eq!(settled(&engine, run.now), before);
        data.log_writer.close();
    }
}
