//! Engine state back from its log records: every change logged while queues and topics are
//! worked is encoded as the log would hold it (`format`), decoded and replayed into a fresh
//! engine, which must end in the same state.

use std::sync::{Arc, Mutex};

use crate::engine::changes::Change;
use crate::engine::changes::ChangeLog;
use crate::engine::queue::{ReceiveRequest, SendRequest};
use crate::engine::time::Timestamp;
use crate::engine::topic::PublishRequest;
use crate::engine::Engine;

/// Keeps every change as the bytes a log would hold (the engine's state must come back
/// from what the log format keeps, not from shared values).
#[derive(Default)]
struct Recorder(Mutex<Vec<Vec<u8>>>);

impl ChangeLog for Recorder {
    fn submit(&self, change: &Change) {
        let mut records = self.0.lock().unwrap();
        let lsn = records.len() as u64;
        records.push(crate::persist::format::to_record(lsn, change).unwrap());
    }
    fn next_lsn(&self) -> u64 {
        self.0.lock().unwrap().len() as u64
    }
}

fn send(engine: &Engine<()>, queue: &str, body: &str, group: Option<&str>, now: Timestamp) {
    let entry = engine.queues.get(queue).unwrap();
    let mut q = entry.lock();
    q.tick(now);
    q.send(
        SendRequest {
            body: body.into(),
            group_id: group.map(Arc::from),
            sender_id: "t".into(),
            ..Default::default()
        },
        now,
    )
    .unwrap();
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// An engine logging to `log_writer` with `src.fifo` (tagged `tags`), which dead-letters to
/// `dlq.fifo` after one receive.
fn source_and_dlq(
    log_writer: Arc<dyn ChangeLog>,
    tags: &[(String, String)],
    t: Timestamp,
) -> Engine<()> {
    let mut engine: Engine<()> = Engine::new("000000000000", "us-east-1");
    engine.set_log(log_writer);
    // As recovery does before the first request.
    engine.queues.keep_receipt_key();
    let fifo = pairs(&[("FifoQueue", "true"), ("ContentBasedDeduplication", "true")]);
    engine
        .queues
        .create_from("dlq.fifo", &fifo, &[], t)
        .unwrap();
    let redrive = r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq.fifo","maxReceiveCount":1}"#;
    let mut source = fifo;
    source.push(("RedrivePolicy".into(), redrive.into()));
    engine
        .queues
        .create_from("src.fifo", &source, tags, t)
        .unwrap();
    engine
}

#[test]
fn replaying_the_logged_changes_rebuilds_the_same_state() {
    let recorder = Arc::new(Recorder::default());
    let t = Timestamp(1_000_000);
    let original = source_and_dlq(recorder.clone(), &pairs(&[("team", "a")]), t);
    original.queues.create_from("plain", &[], &[], t).unwrap();
    original.queues.create_from("gone", &[], &[], t).unwrap();
    for i in 0..6 {
        send(
            &original,
            "src.fifo",
            &format!("m{i}"),
            Some(["g1", "g2"][i % 2]),
            t,
        );
        send(&original, "plain", &format!("p{i}"), None, t);
    }
    send(&original, "gone", "x", None, t);
    original.queues.delete("gone", t.plus_millis(1)).unwrap();
    let src = original.queues.get("src.fifo").unwrap();
    let receive = ReceiveRequest {
        max_messages: Some(10),
        visibility_timeout: Some(0),
        attempt_id: Some("attempt-1".into()),
    };
    // First receive puts g1's and g2's runs in flight (and caches the attempt); the second,
    // after visibility 0 lapses, dead-letters everything received once.
    original.receive(&src, &receive, t.plus_millis(2)).unwrap();
    let again = ReceiveRequest {
        max_messages: Some(10),
        visibility_timeout: Some(30),
        attempt_id: None,
    };
    original.receive(&src, &again, t.plus_millis(3)).unwrap();
    send(&original, "src.fifo", "late", Some("g1"), t.plus_millis(4));
    let (outcome, _) = original.receive(&src, &again, t.plus_millis(5)).unwrap();
    let handle = outcome.received[0].receipt_handle.clone();
    src.lock()
        .change_visibility(&handle, 60, t.plus_millis(6))
        .unwrap();
    let plain = original.queues.get("plain").unwrap();
    let (outcome, _) = original.receive(&plain, &again, t.plus_millis(7)).unwrap();
    plain
        .lock()
        .delete(&outcome.received[1].receipt_handle, t.plus_millis(8))
        .unwrap();
    original
        .queues
        .set_attributes("plain", &pairs(&[("VisibilityTimeout", "45")]), t)
        .unwrap();
    let dlq = original.queues.get("dlq.fifo").unwrap();
    dlq.lock().purge(t.plus_millis(9)).unwrap();
    send(
        &original,
        "dlq.fifo",
        "after purge",
        Some("g"),
        t.plus_millis(10),
    );
    // A FIFO queue's delay holds back what it holds that was never received: logged too.
    original
        .queues
        .set_attributes(
            "dlq.fifo",
            &pairs(&[("DelaySeconds", "120")]),
            t.plus_millis(11),
        )
        .unwrap();
    assert_eq!(dlq.lock().counts().delayed, 1);

    let restored: Engine<()> = Engine::new("000000000000", "us-east-1");
    for bytes in recorder.0.lock().unwrap().iter() {
        restored.replay_change(crate::persist::format::decode_record(bytes).unwrap().1);
    }
    assert_eq!(restored.state_for_tests(), original.state_for_tests());
    assert!(restored.queues.get("gone").is_err());
    // The receipt handle issued before the "restart" still works on the restored queue.
    let restored_src = restored.queues.get("src.fifo").unwrap();
    restored_src
        .lock()
        .delete(&handle, t.plus_millis(12))
        .unwrap();
    assert!(
        restored.queues.cut(|| 0).1.next_uid > original.queues.uid("plain").unwrap(),
        "queue uids are never reused"
    );
}

/// Move tasks as logged: more started and cancelled than a queue keeps, and one running when
/// its queue is deleted. Replaying the log keeps the same ten and the failed one.
#[test]
fn replaying_move_tasks_keeps_the_same_tasks() {
    let recorder = Arc::new(Recorder::default());
    let t = Timestamp(1_000_000);
    let mut original: Engine<()> = Engine::new("000000000000", "us-east-1");
    original.set_log(recorder.clone());
    original.queues.keep_receipt_key();
    let redrive = |dlq: &str| {
        pairs(&[(
            "RedrivePolicy",
            &format!(
                r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{dlq}","maxReceiveCount":1}}"#
            ),
        )])
    };
    for (dlq, src) in [("dlq", "src"), ("doomed", "feeds-doomed")] {
        original.queues.create_from(dlq, &[], &[], t).unwrap();
        original
            .queues
            .create_from(src, &redrive(dlq), &[], t)
            .unwrap();
    }
    let arn = original.queues.arn("dlq");
    for i in 0..13 {
        let task = original
            .start_move_task(&arn, (None, Default::default()), None, t.plus_millis(i))
            .unwrap();
        original.cancel_move_task(&task.handle()).unwrap();
    }
    original
        .start_move_task(&arn, (None, Default::default()), None, t.plus_millis(20))
        .unwrap();
    let doomed = original.queues.arn("doomed");
    original
        .start_move_task(&doomed, (None, Default::default()), None, t.plus_millis(21))
        .unwrap();
    original.delete_queue("doomed", t.plus_millis(22)).unwrap();
    assert_eq!(original.move_tasks.of_source(&arn).len(), 10);
    let failed = original.move_tasks.of_source(&doomed);
    assert_eq!(
        failed[0].status,
        crate::engine::move_task::MoveStatus::Failed
    );

    let restored: Engine<()> = Engine::new("000000000000", "us-east-1");
    for bytes in recorder.0.lock().unwrap().iter() {
        restored.replay_change(crate::persist::format::decode_record(bytes).unwrap().1);
    }
    assert_eq!(restored.state_for_tests(), original.state_for_tests());
    assert!(restored
        .move_tasks
        .running()
        .iter()
        .all(|t| t.source_arn == arn));
}

/// Notes, for each change, how many groups (`ChangeLog::hold`) were open when it came.
#[derive(Default)]
struct GroupWatch {
    open: Mutex<usize>,
    submitted: Mutex<Vec<usize>>,
}

impl ChangeLog for GroupWatch {
    fn submit(&self, _change: &Change) {
        let open = *self.open.lock().unwrap();
        self.submitted.lock().unwrap().push(open);
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
    /// The changes since the last call, each with whether a group was open; and whether
    /// every group opened was closed.
    fn take(&self) -> (Vec<bool>, bool) {
        let submitted = std::mem::take(&mut *self.submitted.lock().unwrap());
        let closed = *self.open.lock().unwrap() == 0;
        (submitted.into_iter().map(|open| open > 0).collect(), closed)
    }
}

#[test]
fn changes_spanning_queues_are_made_inside_one_group() {
    let watch = Arc::new(GroupWatch::default());
    let t = Timestamp(3_000_000);
    let engine = source_and_dlq(watch.clone(), &[], t);
    let topic_attrs = pairs(&[
        ("FifoTopic", "true"),
        ("ContentBasedDeduplication", "true"),
        ("ArchivePolicy", r#"{"MessageRetentionPeriod":"1"}"#),
    ]);
    let arn = engine
        .topics
        .create("t.fifo", &topic_attrs, &[], t)
        .unwrap();
    for queue in ["src.fifo", "dlq.fifo"] {
        let endpoint = format!("arn:aws:sqs:us-east-1:000000000000:{queue}");
        engine
            .subscribe(
                &arn,
                "sqs",
                Some(&endpoint),
                &[],
                "http://localhost",
                None,
                t,
            )
            .unwrap();
    }
    watch.take();

    // A publish: a copy to each queue and the topic's dedup entry.
    engine
        .publish(&arn, &publish_request("p", "g"), "http://localhost", t)
        .unwrap();
    let (published, closed) = watch.take();
    assert!(closed);
    assert_eq!(published, vec![true; 3]);

    // A receive that dead-letters: the DLQ's put and the source's removal.
    let src = engine.queues.get("src.fifo").unwrap();
    let once = ReceiveRequest {
        max_messages: Some(1),
        visibility_timeout: Some(0),
        attempt_id: None,
    };
    engine.receive(&src, &once, t.plus_millis(1)).unwrap();
    watch.take();
    let (outcome, dlq) = engine.receive(&src, &once, t.plus_millis(2)).unwrap();
    assert!(
        outcome.received.is_empty() && dlq.is_some(),
        "dead-lettered"
    );
    let (dead_lettered, closed) = watch.take();
    assert!(closed);
    assert!(dead_lettered.len() >= 2, "{dead_lettered:?}");
    assert!(dead_lettered.iter().all(|open| *open));

    // A move task's step: the put back, the removal from the DLQ, the task's count.
    let dlq_arn = "arn:aws:sqs:us-east-1:000000000000:dlq.fifo";
    let task = engine
        .start_move_task(dlq_arn, (None, Default::default()), None, t.plus_millis(3))
        .unwrap();
    watch.take();
    engine.move_step(&task.id, dlq_arn, 10, t.plus_millis(4));
    let (step, closed) = watch.take();
    assert!(closed);
    assert!(step.len() >= 3, "{step:?}");
    assert!(step.iter().all(|open| *open));

    // A replay from the archive: the copy and the replay's completion.
    let fifo = pairs(&[("FifoQueue", "true"), ("ContentBasedDeduplication", "true")]);
    engine
        .queues
        .create_from("late.fifo", &fifo, &[], t)
        .unwrap();
    // The publish above was at t: 1970-01-01T00:50:00Z.
    let replay = pairs(&[(
        "ReplayPolicy",
        r#"{"PointType":"Timestamp","StartingPoint":"1970-01-01T00:50:00.000Z"}"#,
    )]);
    let endpoint = "arn:aws:sqs:us-east-1:000000000000:late.fifo";
    let late = engine
        .subscribe(
            &arn,
            "sqs",
            Some(endpoint),
            &replay,
            "http://localhost",
            None,
            t.plus_millis(5),
        )
        .unwrap();
    watch.take();
    let touched = engine
        .replay(&late.arn, "http://localhost", t.plus_millis(6))
        .unwrap();
    assert_eq!(touched.len(), 1, "the archived publish was replayed");
    let (replayed, closed) = watch.take();
    assert!(closed);
    assert_eq!(replayed, vec![true; 2]);

    // A webhook notification out of retries: its dead-letter copy and its removal.
    use crate::engine::webhook::Outcome;
    engine.queues.create_from("hooks-dlq", &[], &[], t).unwrap();
    let hooks = engine.topics.create("hooks", &[], &[], t).unwrap();
    let redrive = pairs(&[(
        "RedrivePolicy",
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:hooks-dlq"}"#,
    )]);
    engine
        .subscribe(
            &hooks,
            "http",
            Some("http://h/a"),
            &redrive,
            "http://o",
            None,
            t,
        )
        .unwrap();
    let confirmation = engine.webhooks.take_due(t, 10);
    let body: serde_json::Value = serde_json::from_str(&confirmation[0].delivery.body).unwrap();
    engine.finish_delivery(&confirmation[0], Outcome::Delivered, t);
    engine
        .confirm_subscription(&hooks, body["Token"].as_str().unwrap(), true, false, t)
        .unwrap();
    let mut request = publish_request("hook", "g");
    request.group_id = None;
    engine.publish(&hooks, &request, "http://o", t).unwrap();
    let attempt = engine.webhooks.take_due(t, 10).remove(0);
    watch.take();
    let result = engine.finish_delivery(&attempt, Outcome::Permanent, t);
    assert!(matches!(
        result,
        crate::engine::webhooks::AttemptResult::DeadLettered(_)
    ));
    let (dead_lettered, closed) = watch.take();
    assert!(closed);
    assert_eq!(dead_lettered, vec![true; 2]);
}

fn publish_request(body: &str, group: &str) -> PublishRequest {
    PublishRequest {
        message: body.into(),
        subject: None,
        structured: false,
        attributes: Default::default(),
        group_id: Some(group.into()),
        dedup_id: None,
        trace_header: None,
    }
}

#[test]
fn topics_subscriptions_history_and_signer_survive_a_replay() {
    let recorder = Arc::new(Recorder::default());
    let mut original: Engine<()> = Engine::new("000000000000", "us-east-1");
    original.set_log(recorder.clone());
    let t = Timestamp(2_000_000);
    let fifo = pairs(&[("FifoQueue", "true"), ("ContentBasedDeduplication", "true")]);
    original
        .queues
        .create_from("prices.fifo", &fifo, &[], t)
        .unwrap();
    let topic_attrs = pairs(&[
        ("FifoTopic", "true"),
        ("ContentBasedDeduplication", "true"),
        ("ArchivePolicy", r#"{"MessageRetentionPeriod":"7"}"#),
    ]);
    let arn = original
        .topics
        .create("prices.fifo", &topic_attrs, &pairs(&[("team", "a")]), t)
        .unwrap();
    let gone = original.topics.create("gone", &[], &[], t).unwrap();
    original.delete_topic(&gone).unwrap();
    let filter = pairs(&[
        ("FilterPolicyScope", "MessageBody"),
        ("FilterPolicy", r#"{"side":["buy"]}"#),
    ]);
    let sub = original
        .subscribe(
            &arn,
            "sqs",
            Some("arn:aws:sqs:us-east-1:000000000000:prices.fifo"),
            &filter,
            "http://localhost",
            None,
            t,
        )
        .unwrap();
    original
        .topics
        .with_subscription(&sub.arn, |_, s| s.set("RawMessageDelivery", "true", ""))
        .unwrap();
    original
        .topics
        .with_tags(&arn, |tags| {
            tags.insert("env".into(), "ci".into());
            Ok(())
        })
        .unwrap();
    let first = original
        .publish(
            &arn,
            &publish_request(r#"{"side":"buy"}"#, "g"),
            "http://x",
            t,
        )
        .unwrap();
    original
        .publish(
            &arn,
            &publish_request(r#"{"side":"sell"}"#, "g"),
            "http://x",
            t,
        )
        .unwrap();
    let certificate = original.topics.signer().unwrap().certificate_pem.clone();

    let restored: Engine<()> = Engine::new("000000000000", "us-east-1");
    for bytes in recorder.0.lock().unwrap().iter() {
        restored.replay_change(crate::persist::format::decode_record(bytes).unwrap().1);
    }
    assert_eq!(restored.state_for_tests(), original.state_for_tests());
    assert!(restored.topics.get(&gone).is_err());
    assert_eq!(restored.queues.get("prices.fifo").unwrap().lock().len(), 1);
    let later = t.plus_millis(1);
    let again = restored
        .publish(
            &arn,
            &publish_request(r#"{"side":"buy"}"#, "g"),
            "http://x",
            later,
        )
        .unwrap();
    assert!(again.publication.duplicate, "dedup history restored");
    assert_eq!(again.publication.message_id, first.publication.message_id);
    let next = restored
        .publish(
            &arn,
            &publish_request(r#"{"side":"buy","n":2}"#, "g"),
            "http://x",
            later,
        )
        .unwrap();
    assert!(
        next.publication.sequence_number > first.publication.sequence_number.map(|s| s + 1000),
        "sequence numbers are not reused"
    );
    restored
        .publish(
            &arn,
            &publish_request(r#"{"side":"sell","n":3}"#, "g"),
            "http://x",
            later,
        )
        .unwrap();
    // The filter still applies after the restart: the new buy arrived, the sell did not.
    assert_eq!(restored.queues.get("prices.fifo").unwrap().lock().len(), 2);
    assert_eq!(
        restored.topics.signer().unwrap().certificate_pem,
        certificate
    );
    let signer = restored.topics.signer().unwrap();
    assert_eq!(
        signer.sign("2", "text"),
        original.topics.signer().unwrap().sign("2", "text")
    );
}

#[test]
fn pending_webhook_deliveries_and_tokens_survive_a_replay() {
    use crate::engine::webhook::{Kind, Outcome};
    let recorder = Arc::new(Recorder::default());
    let mut original: Engine<()> = Engine::new("000000000000", "us-east-1");
    original.set_log(recorder.clone());
    let t = Timestamp(3_000_000);
    let arn = original.topics.create("hooks", &[], &[], t).unwrap();
    let sub = original
        .subscribe(&arn, "http", Some("http://h/a"), &[], "http://o", None, t)
        .unwrap();
    let confirmation = original.webhooks.take_due(t, 10);
    assert_eq!(
        confirmation[0].delivery.kind,
        Kind::SubscriptionConfirmation
    );
    let body: serde_json::Value = serde_json::from_str(&confirmation[0].delivery.body).unwrap();
    let token = body["Token"].as_str().unwrap().to_string();
    original.finish_delivery(&confirmation[0], Outcome::Delivered, t);
    // A second endpoint stays pending: its token must still confirm it after the restart.
    original
        .subscribe(&arn, "http", Some("http://h/b"), &[], "http://o", None, t)
        .unwrap();
    original
        .confirm_subscription(&arn, &token, true, false, t)
        .unwrap();
    for body in ["one", "two", "three"] {
        let mut request = publish_request(body, "g");
        request.group_id = None;
        original.publish(&arn, &request, "http://o", t).unwrap();
    }
    // "one" is delivered, "two" fails once (retry pending), "three" is untouched.
    let attempts = original.webhooks.take_due(t, 10);
    let find = |text: &str| {
        attempts
            .iter()
            .find(|a| a.delivery.body.contains(text))
            .unwrap()
            .clone()
    };
    original.finish_delivery(&find("\"one\""), Outcome::Delivered, t);
    original.finish_delivery(&find("\"two\""), Outcome::Retryable, t);
    let pending_b = original
        .topics
        .list_subscriptions(Some(&arn))
        .unwrap()
        .into_iter()
        .find(|(_, s)| s.endpoint == "http://h/b")
        .unwrap()
        .1;
    assert!(pending_b.pending);

    let restored: Engine<()> = Engine::new("000000000000", "us-east-1");
    for bytes in recorder.0.lock().unwrap().iter() {
        restored.replay_change(crate::persist::format::decode_record(bytes).unwrap().1);
    }
    let ids = |engine: &Engine<()>| -> Vec<(u64, String)> {
        let (_, deliveries, _) = engine.webhooks.image(|| 0);
        deliveries
            .into_iter()
            .map(|(id, d, _)| (id, d.body.clone()))
            .collect()
    };
    assert_eq!(ids(&restored), ids(&original));
    let pending: Vec<String> = ids(&restored).into_iter().map(|(_, b)| b).collect();
    assert!(pending.iter().any(|b| b.contains("\"two\"")));
    assert!(pending.iter().any(|b| b.contains("\"three\"")));
    assert!(
        !pending.iter().any(|b| b.contains("\"one\"")),
        "delivered stays delivered"
    );
    assert!(sub.pending);
    assert!(
        !restored.topics.list_subscriptions(Some(&arn)).unwrap()[0]
            .1
            .pending,
        "the confirmation was logged"
    );
    // The pending subscription's token, issued before the restart, confirms it after.
    let b_token = restored
        .webhooks
        .image(|| 0)
        .2
        .into_iter()
        .find_map(|record| match record.grant {
            crate::engine::webhook::changes::GrantImage::Confirm(arn) if arn == pending_b.arn => {
                Some(record.token)
            }
            _ => None,
        })
        .expect("token restored");
    restored
        .confirm_subscription(&arn, &b_token, true, false, t.plus_millis(5))
        .unwrap();
}
