//! Engines of different shards of one key space, with parcels carried between them by hand:
//! a topic's copies for queues in other shards arrive in publish order, each once, with the
//! topic's deduplication kept at the topic's shard, and a refused copy reaches the dead-letter
//! queue in whichever shard holds it.

use super::parcel::{Contents, RelayedCopy, MAX_WAITING};
use super::queue::ReceiveRequest;
use super::shard::Shard;
use super::topic::PublishRequest;
use super::{Engine, EngineError, Timestamp};

type Shards = Vec<Engine<()>>;

const BASE: &str = "http://localhost:9324";

fn shards(count: u32) -> Shards {
    (0..count)
        .map(|number| Engine::for_shard("000000000000", "us-east-1", Shard { number, count }))
        .collect()
}

/// A FIFO queue's name (`{stem}-N.fifo`) whose key lands in `shard` of `count`.
fn name_in(stem: &str, shard: u32, count: u32) -> String {
    (0..)
        .map(|i| format!("{stem}-{i}.fifo"))
        .find(|name| Shard::of(count, name) == shard)
        .expect("some name lands in every shard")
}

fn arn(queue: &str) -> String {
    format!("arn:aws:sqs:us-east-1:000000000000:{queue}")
}

fn create_queue(engine: &Engine<()>, name: &str, attributes: &[(&str, &str)]) {
    let mut attrs: Vec<(String, String)> = vec![("FifoQueue".into(), "true".into())];
    attrs.extend(
        attributes
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string())),
    );
    engine
        .queues
        .create_from(name, &attrs, &[], Timestamp(0))
        .unwrap();
}

/// A FIFO topic in its own shard, with raw subscriptions of `queues` (and their DLQs).
fn topic_with(shards: &Shards, topic: &str, queues: &[(&str, Option<&str>)]) -> (usize, String) {
    let home = Shard::of(shards.len() as u32, topic) as usize;
    let engine = &shards[home];
    let attrs = vec![("FifoTopic".to_string(), "true".to_string())];
    let topic_arn = engine
        .topics
        .create(topic, &attrs, &[], Timestamp(0))
        .unwrap()
        .to_string();
    for (queue, dlq) in queues {
        let mut attrs = vec![("RawMessageDelivery".to_string(), "true".to_string())];
        if let Some(dlq) = dlq {
            let policy = format!(r#"{{"deadLetterTargetArn":"{}"}}"#, arn(dlq));
            attrs.push(("RedrivePolicy".into(), policy));
        }
        let endpoint = arn(queue);
        engine
            .subscribe(
                &topic_arn,
                "sqs",
                Some(&endpoint),
                &attrs,
                BASE,
                None,
                Timestamp(0),
            )
            .unwrap();
    }
    (home, topic_arn)
}

fn publish(engine: &Engine<()>, topic_arn: &str, body: &str, dedup: &str) {
    let request = PublishRequest {
        message: body.into(),
        group_id: Some("g".into()),
        dedup_id: Some(dedup.into()),
        ..Default::default()
    };
    engine
        .publish(topic_arn, &request, BASE, Timestamp(1))
        .unwrap();
}

/// Carries every parcel waiting in `from` for `to`, applies them there and tells `from`.
fn carry(shards: &Shards, from: usize, to: usize) -> u64 {
    let parcels = shards[from]
        .relay
        .waiting_for(to as u32, crate::engine::parcel::Room::ALL);
    let received = shards[to].receive_parcels(from as u32, &parcels, Timestamp(2));
    shards[from].relay.forget(to as u32, received.through);
    received.through
}

fn bodies(engine: &Engine<()>, queue: &str) -> Vec<String> {
    let entry = engine.queues.get(queue).unwrap();
    let all = ReceiveRequest {
        max_messages: Some(10),
        ..Default::default()
    };
    let (outcome, _) = engine.receive(&entry, &all, Timestamp(3)).unwrap();
    outcome
        .received
        .iter()
        .map(|m| m.message.body.to_string())
        .collect()
}

#[test]
fn copies_for_other_shards_arrive_in_publish_order_each_once() {
    let shards = shards(2);
    let topic = "prices.fifo";
    let here = Shard::of(2, topic);
    let (local, remote) = (name_in("near", here, 2), name_in("far", 1 - here, 2));
    create_queue(&shards[here as usize], &local, &[]);
    create_queue(&shards[1 - here as usize], &remote, &[]);
    let (home, topic_arn) = topic_with(&shards, topic, &[(&local, None), (&remote, None)]);
    for i in 0..5 {
        publish(
            &shards[home],
            &topic_arn,
            &format!("m{i}"),
            &format!("d{i}"),
        );
    }
    // Deduplicated at the topic's shard: no second parcel.
    publish(&shards[home], &topic_arn, "m0 again", "d0");
    let other = 1 - home;
    assert_eq!(shards[home].relay.depths(), vec![(other as u32, 5)]);
    assert_eq!(
        bodies(&shards[home], &local),
        ["m0", "m1", "m2", "m3", "m4"]
    );
    assert!(
        bodies(&shards[other], &remote).is_empty(),
        "not carried yet"
    );

    // A gap stops the run: parcels 2.. wait for parcel 1.
    let parcels = shards[home]
        .relay
        .waiting_for(other as u32, crate::engine::parcel::Room::ALL);
    let early = shards[other].receive_parcels(home as u32, &parcels[1..], Timestamp(2));
    assert_eq!(early.through, 0);
    assert_eq!(carry(&shards, home, other), 5);
    assert!(
        shards[home].relay.depths().is_empty(),
        "forgotten once applied"
    );
    // Carried again (an answer lost on the way back): applied once only.
    let again = shards[other].receive_parcels(home as u32, &parcels, Timestamp(2));
    assert_eq!((again.through, again.delivered_to.len()), (5, 0));
    assert_eq!(
        bodies(&shards[other], &remote),
        ["m0", "m1", "m2", "m3", "m4"]
    );

    // Numbers go on from where they were.
    publish(&shards[home], &topic_arn, "m5", "d5");
    let next = shards[home]
        .relay
        .waiting_for(other as u32, crate::engine::parcel::Room::ALL);
    assert_eq!(next.iter().map(|p| p.seq).collect::<Vec<_>>(), [6]);
}

#[test]
fn a_copy_its_queue_refuses_reaches_the_dead_letter_queue_in_a_third_shard() {
    let shards = shards(3);
    let topic = "orders.fifo";
    let home = Shard::of(3, topic);
    let (queue_shard, dlq_shard) = ((home + 1) % 3, (home + 2) % 3);
    let queue = name_in("small", queue_shard, 3);
    let dlq = name_in("dead", dlq_shard, 3);
    create_queue(
        &shards[queue_shard as usize],
        &queue,
        &[("MaximumMessageSize", "1024")],
    );
    create_queue(&shards[dlq_shard as usize], &dlq, &[]);
    let (home, topic_arn) = topic_with(&shards, topic, &[(&queue, Some(&dlq))]);
    publish(&shards[home], &topic_arn, "fits", "a");
    publish(&shards[home], &topic_arn, &"x".repeat(2_000), "b");
    let (queue_shard, dlq_shard) = (queue_shard as usize, dlq_shard as usize);
    assert_eq!(carry(&shards, home, queue_shard), 2);
    assert_eq!(bodies(&shards[queue_shard], &queue), ["fits"]);
    // The queue's shard sends the refused copy on to the dead-letter queue's.
    assert_eq!(
        shards[queue_shard].relay.depths(),
        vec![(dlq_shard as u32, 1)]
    );
    assert_eq!(carry(&shards, queue_shard, dlq_shard), 1);
    assert_eq!(bodies(&shards[dlq_shard], &dlq), ["x".repeat(2_000)]);
}

#[test]
fn a_publish_is_refused_whole_while_too_many_copies_wait() {
    let shards = shards(2);
    let topic = "busy.fifo";
    let here = Shard::of(2, topic);
    let remote = name_in("far", 1 - here, 2);
    create_queue(&shards[1 - here as usize], &remote, &[]);
    let (home, topic_arn) = topic_with(&shards, topic, &[(&remote, None)]);
    let filler = RelayedCopy {
        queue_arn: arn(&remote).into(),
        topic_arn: None,
        dead_letter_arn: None,
        dead_letter: false,
        body: "filler".into(),
        attributes: Default::default(),
        envelope: None,
        group_id: Some("g".into()),
        dedup_id: None,
        fifo_topic: true,
        bypass_dedup: false,
        trace_header: None,
        note_for: None,
    };
    let other = (1 - home) as u32;
    for _ in 0..MAX_WAITING {
        shards[home].relay.send(other, filler.clone());
    }
    let request = PublishRequest {
        message: "late".into(),
        group_id: Some("g".into()),
        dedup_id: Some("late".into()),
        ..Default::default()
    };
    let refused = shards[home].publish(&topic_arn, &request, BASE, Timestamp(1));
    assert!(matches!(refused, Err(EngineError::Throttled(_))));
    // Nothing of it was kept: once room is made, the same publish is no duplicate.
    shards[home].relay.forget(other, 1_000);
    let fanout = shards[home]
        .publish(&topic_arn, &request, BASE, Timestamp(1))
        .unwrap();
    assert!(!fanout.publication.duplicate);
    assert_eq!(fanout.relayed, 1);
    let waiting = shards[home]
        .relay
        .waiting_for(other, crate::engine::parcel::Room::ALL);
    let Contents::Copy(last) = &*waiting.last().unwrap().contents else {
        panic!("a publish's copy");
    };
    assert_eq!(&*last.body, "late");
}

/// A FIFO queue whose dead-letter queue is in another shard, received from once: it stands as
/// the log would bring it back (whether that shard's queue exists is the caller's to check at
/// create, with the answer of that shard).
fn source_with_remote_dlq(engine: &Engine<()>, name: &str, dlq: &str) {
    let policy = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":1}}"#,
        arn(dlq)
    );
    let attrs = vec![
        ("FifoQueue".to_string(), "true".to_string()),
        ("RedrivePolicy".to_string(), policy),
    ];
    let config = super::QueueConfig::for_create(name, &attrs, Timestamp(0)).unwrap();
    engine.replay_change(super::Change::CreateQueue {
        name: name.into(),
        uid: 1,
        config: Box::new(config),
        tags: Default::default(),
    });
}

fn send_fifo(engine: &Engine<()>, queue: &str, body: &str) {
    let entry = engine.queues.get(queue).unwrap();
    let mut q = entry.lock();
    q.tick(Timestamp(0));
    let request = super::queue::SendRequest {
        body: body.into(),
        group_id: Some("g".into()),
        dedup_id: Some(body.into()),
        sender_id: "t".into(),
        ..Default::default()
    };
    q.send(request, Timestamp(0)).unwrap();
}

/// Receives everything visible with a visibility timeout of 0; answers the bodies received
/// and how many were dead-lettered.
fn receive_all(engine: &Engine<()>, queue: &str, at: u64) -> (Vec<String>, usize) {
    let entry = engine.queues.get(queue).unwrap();
    let all = ReceiveRequest {
        max_messages: Some(10),
        visibility_timeout: Some(0),
        ..Default::default()
    };
    let (outcome, local_dlq) = engine.receive(&entry, &all, Timestamp(at)).unwrap();
    assert!(local_dlq.is_none(), "the dead-letter queue is elsewhere");
    let bodies = outcome
        .received
        .iter()
        .map(|m| m.message.body.to_string())
        .collect();
    (bodies, outcome.dead_lettered.len())
}

#[test]
fn messages_received_too_often_reach_a_dead_letter_queue_in_another_shard() {
    let shards = shards(2);
    let source = name_in("work", 0, 2);
    let dlq = name_in("dead", 1, 2);
    create_queue(&shards[1], &dlq, &[]);
    source_with_remote_dlq(&shards[0], &source, &dlq);
    for body in ["a", "b", "c"] {
        send_fifo(&shards[0], &source, body);
    }
    assert_eq!(
        receive_all(&shards[0], &source, 1),
        (vec!["a".into(), "b".into(), "c".into()], 0)
    );
    // Past maxReceiveCount: out of the source, into a parcel for the dead-letter queue's shard.
    assert_eq!(receive_all(&shards[0], &source, 2), (vec![], 3));
    assert_eq!(shards[0].queues.get(&source).unwrap().lock().len(), 0);
    assert_eq!(shards[0].relay.depths(), vec![(1, 3)]);
    assert_eq!(carry(&shards, 0, 1), 3);
    let entry = shards[1].queues.get(&dlq).unwrap();
    let all = ReceiveRequest {
        max_messages: Some(10),
        ..Default::default()
    };
    let (outcome, _) = shards[1].receive(&entry, &all, Timestamp(3)).unwrap();
    let got: Vec<(String, Option<String>)> = outcome
        .received
        .iter()
        .map(|m| {
            let from = m.message.dead_letter_source_arn().map(|a| a.to_string());
            (m.message.body.to_string(), from)
        })
        .collect();
    let from = Some(arn(&source));
    let expected = ["a", "b", "c"].map(|b| (b.to_string(), from.clone()));
    assert_eq!(got, expected, "in order, with the queue they came from");
}

#[test]
fn a_dead_letter_whose_queue_is_gone_goes_back_to_its_source() {
    let shards = shards(2);
    let source = name_in("work", 0, 2);
    let dlq = name_in("dead", 1, 2);
    create_queue(&shards[1], &dlq, &[]);
    source_with_remote_dlq(&shards[0], &source, &dlq);
    send_fifo(&shards[0], &source, "kept");
    receive_all(&shards[0], &source, 1);
    assert_eq!(receive_all(&shards[0], &source, 2).1, 1);
    shards[1].queues.delete(&dlq, Timestamp(2)).unwrap();
    assert_eq!(carry(&shards, 0, 1), 1);
    // The dead-letter queue's shard sends it back rather than lose it.
    assert_eq!(shards[1].relay.depths(), vec![(0, 1)]);
    assert_eq!(carry(&shards, 1, 0), 1);
    // Back as a redrive would put it: received afresh, not dead-lettered again at once.
    assert_eq!(
        receive_all(&shards[0], &source, 3),
        (vec!["kept".into()], 0)
    );
}

/// Notes, for each change logged, whether a group (`ChangeLog::hold`) was open, and whether it
/// was the relay's.
#[derive(Default)]
struct GroupWatch {
    open: std::sync::Mutex<usize>,
    submitted: std::sync::Mutex<Vec<(bool, bool)>>,
}

impl super::ChangeLog for GroupWatch {
    fn submit(&self, change: &super::Change) {
        let open = *self.open.lock().unwrap() > 0;
        let relay = matches!(change, super::Change::Relay(_));
        self.submitted.lock().unwrap().push((open, relay));
    }
    fn next_lsn(&self) -> u64 {
        self.submitted.lock().unwrap().len() as u64
    }
    fn hold(&self) {
        *self.open.lock().unwrap() += 1;
    }
    fn release(&self) {
        *self.open.lock().unwrap() -= 1;
    }
}

impl GroupWatch {
    /// The changes since the last call, all inside one group, with how many were the relay's.
    fn take_grouped(&self) -> (usize, usize) {
        let submitted = std::mem::take(&mut *self.submitted.lock().unwrap());
        assert_eq!(*self.open.lock().unwrap(), 0, "every group closed");
        assert!(submitted.iter().all(|(open, _)| *open), "{submitted:?}");
        let relay = submitted.iter().filter(|(_, relay)| *relay).count();
        (submitted.len(), relay)
    }
}

#[test]
fn a_parcel_is_logged_in_the_write_of_what_made_it_and_applied_in_the_write_that_places_it() {
    let mut shards = shards(2);
    let watches: Vec<std::sync::Arc<GroupWatch>> = (0..2).map(|_| Default::default()).collect();
    for (engine, watch) in shards.iter_mut().zip(&watches) {
        engine.set_log(watch.clone());
    }
    let topic = "logged.fifo";
    let here = Shard::of(2, topic) as usize;
    let remote = name_in("far", 1 - here as u32, 2);
    create_queue(&shards[1 - here], &remote, &[]);
    let (home, topic_arn) = topic_with(&shards, topic, &[(&remote, None)]);
    let other = 1 - home;
    watches[home].submitted.lock().unwrap().clear();
    watches[other].submitted.lock().unwrap().clear();

    publish(&shards[home], &topic_arn, "m", "d");
    assert_eq!(
        watches[home].take_grouped(),
        (2, 1),
        "the topic's change and the parcel"
    );
    carry(&shards, home, other);
    assert_eq!(
        watches[other].take_grouped(),
        (2, 1),
        "the queue's change and the note"
    );
    let forgotten = std::mem::take(&mut *watches[home].submitted.lock().unwrap());
    assert_eq!(
        forgotten,
        [(false, true)],
        "forgotten: one change, the relay's"
    );

    // Another account's queue in the other shard: the subscription and its confirmation.
    let key = (0..)
        .map(|i| format!("us-east-1:111111111111:inbox-{i}"))
        .find(|key| Shard::of(2, key) as usize == other)
        .unwrap();
    let endpoint = format!("arn:aws:sqs:{key}");
    shards[home]
        .subscribe(
            &topic_arn,
            "sqs",
            Some(&endpoint),
            &[],
            BASE,
            None,
            Timestamp(1),
        )
        .unwrap();
    let (changes, relay) = watches[home].take_grouped();
    assert_eq!(relay, 1, "the confirmation's parcel");
    assert!(changes >= 2, "with the subscription");
}

/// Bodies in `queue` with the queue each was dead-lettered from.
fn with_sources(engine: &Engine<()>, queue: &str, at: u64) -> Vec<(String, Option<String>)> {
    let entry = engine.queues.get(queue).unwrap();
    let all = ReceiveRequest {
        max_messages: Some(10),
        visibility_timeout: Some(0),
        ..Default::default()
    };
    let (outcome, _) = engine.receive(&entry, &all, Timestamp(at)).unwrap();
    outcome
        .received
        .iter()
        .map(|m| {
            let from = m.message.dead_letter_source_arn().map(|a| a.to_string());
            (m.message.body.to_string(), from)
        })
        .collect()
}

#[test]
fn a_move_task_takes_dead_letters_back_to_their_queue_in_another_shard() {
    let shards = shards(2);
    let (dlq, near, far) = (
        name_in("dead", 0, 2),
        name_in("near", 0, 2),
        name_in("far", 1, 2),
    );
    create_queue(&shards[0], &dlq, &[]);
    let policy = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":1}}"#,
        arn(&dlq)
    );
    create_queue(&shards[0], &near, &[("RedrivePolicy", &policy)]);
    source_with_remote_dlq(&shards[1], &far, &dlq);
    for body in ["f1", "f2"] {
        send_fifo(&shards[1], &far, body);
    }
    receive_all(&shards[1], &far, 1);
    assert_eq!(receive_all(&shards[1], &far, 2).1, 2);
    carry(&shards, 1, 0);
    let dlq_arn = arn(&dlq);
    let task = shards[0]
        .start_move_task(&dlq_arn, (None, Default::default()), None, Timestamp(3))
        .unwrap();
    assert_eq!(task.to_move, 2);
    let (touched, running) = shards[0].move_step(&task.id, &dlq_arn, 10, Timestamp(4));
    assert!(touched.is_empty(), "no queue of shard 0 took any");
    assert!(!running, "both handed on: the task is done");
    assert_eq!(shards[0].relay.depths(), vec![(1, 2)]);
    carry(&shards, 0, 1);
    // Back where they were dead-lettered from, received afresh.
    assert_eq!(
        receive_all(&shards[1], &far, 5),
        (vec!["f1".into(), "f2".into()], 0)
    );

    // Dead-lettered again, moved again, and their queue deleted meanwhile: back in the
    // dead-letter queue, still naming it (a move task to another destination can take them).
    // (Received once already at 5: the next receive dead-letters them.)
    assert_eq!(receive_all(&shards[1], &far, 6).1, 2);
    carry(&shards, 1, 0);
    let task = shards[0]
        .start_move_task(&dlq_arn, (None, Default::default()), None, Timestamp(8))
        .unwrap();
    shards[0].move_step(&task.id, &dlq_arn, 10, Timestamp(9));
    shards[1].queues.delete(&far, Timestamp(9)).unwrap();
    carry(&shards, 0, 1);
    assert_eq!(shards[1].relay.depths(), vec![(0, 2)]);
    carry(&shards, 1, 0);
    let from = Some(arn(&far));
    let expected = ["f1", "f2"].map(|b| (b.to_string(), from.clone()));
    assert_eq!(with_sources(&shards[0], &dlq, 10), expected);
}

#[test]
fn a_webhook_notification_out_of_retries_reaches_its_dead_letter_queue_in_another_shard() {
    use super::webhook::Outcome;
    let shards = shards(2);
    let topic = "hooks";
    let home = Shard::of(2, topic) as usize;
    let other = 1 - home;
    let dlq = (0..)
        .map(|i| format!("hooks-dlq-{i}"))
        .find(|name| Shard::of(2, name) as usize == other)
        .unwrap();
    shards[other]
        .queues
        .create_from(&dlq, &[], &[], Timestamp(0))
        .unwrap();
    let engine = &shards[home];
    let t = Timestamp(0);
    let hooks = engine.topics.create(topic, &[], &[], t).unwrap();
    let redrive = vec![(
        "RedrivePolicy".to_string(),
        format!(r#"{{"deadLetterTargetArn":"{}"}}"#, arn(&dlq)),
    )];
    engine
        .subscribe(&hooks, "http", Some("http://h/a"), &redrive, BASE, None, t)
        .unwrap();
    let confirmation = engine.webhooks.take_due(t, 10);
    let body: serde_json::Value = serde_json::from_str(&confirmation[0].delivery.body).unwrap();
    engine.finish_delivery(&confirmation[0], Outcome::Delivered, t);
    let token = body["Token"].as_str().unwrap();
    engine
        .confirm_subscription(&hooks, token, true, false, t)
        .unwrap();
    let request = PublishRequest {
        message: "hook".into(),
        ..Default::default()
    };
    engine.publish(&hooks, &request, BASE, t).unwrap();
    let attempt = engine.webhooks.take_due(t, 10).remove(0);
    let result = engine.finish_delivery(&attempt, Outcome::Permanent, t);
    assert!(matches!(
        result,
        super::webhooks::AttemptResult::DeadLettered(None)
    ));
    assert_eq!(carry(&shards, home, other), 1);
    let bodies = bodies(&shards[other], &dlq);
    assert_eq!(bodies.len(), 1);
    assert!(bodies[0].contains("\"Message\":\"hook\""), "{bodies:?}");
}

#[test]
fn another_accounts_queue_in_another_shard_gets_its_subscription_confirmation() {
    let shards = shards(2);
    let topic = "alerts";
    let home = Shard::of(2, topic) as usize;
    let other = 1 - home;
    let key = (0..)
        .map(|i| format!("us-east-1:111111111111:inbox-{i}"))
        .find(|key| Shard::of(2, key) as usize == other)
        .unwrap();
    shards[other]
        .queues
        .create_from(&key, &[], &[], Timestamp(0))
        .unwrap();
    let endpoint = format!("arn:aws:sqs:{key}");
    let engine = &shards[home];
    let alerts = engine.topics.create(topic, &[], &[], Timestamp(0)).unwrap();
    let subscribed = engine
        .subscribe(
            &alerts,
            "sqs",
            Some(&endpoint),
            &[],
            BASE,
            None,
            Timestamp(0),
        )
        .unwrap();
    assert!(subscribed.pending, "another account's queue confirms");
    assert_eq!(carry(&shards, home, other), 1);
    let bodies = bodies(&shards[other], &key);
    assert_eq!(bodies.len(), 1);
    assert!(bodies[0].contains("SubscriptionConfirmation"), "{bodies:?}");
}
