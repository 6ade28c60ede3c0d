use super::*;
use crate::backend::{BackendError, CreateQueue, Messages, QueueAdmin};
use crate::clock::ManualClock;
use crate::engine::body::Body;
use crate::engine::queue::{ReceiveRequest, SendRequest};
use crate::persist::segment_log::SegmentLog;
use crate::persist::storage::MemStorage;
use crate::persist::writer::FsyncMode;

/// The embedded backend over a log whose storage is `storage`.
fn backend(storage: MemStorage) -> (Embedded, Arc<LogWriter>) {
    let (backend, log_writer, _) = backend_on_clock(storage);
    (backend, log_writer)
}

/// The embedded backend, its log and the manual clock it reads.
fn backend_on_clock(storage: MemStorage) -> (Embedded, Arc<LogWriter>, Arc<ManualClock>) {
    let (log, _) = SegmentLog::open(storage, 1 << 20).unwrap();
    let log_writer = LogWriter::new();
    log_writer.start(log, 1, FsyncMode::Always);
    let mut engine = Engine::new("000000000000", "us-east-1");
    engine.set_log(log_writer.clone());
    let clock = Arc::new(ManualClock::new(Timestamp(1)));
    let backend = Embedded::new(
        Arc::new(engine),
        Some(log_writer.clone()),
        clock.clone(),
        Default::default(),
    );
    (backend, log_writer, clock)
}

fn create(name: &str) -> CreateQueue {
    CreateQueue {
        name: name.into(),
        config: crate::engine::QueueConfig::for_create(name, &[], Timestamp(1)).unwrap(),
        attributes: Vec::new(),
        tags: vec![("team".into(), "prices".into())],
        now: Timestamp(1),
    }
}

#[tokio::test]
async fn a_change_is_answered_once_the_log_holds_it() {
    let (backend, log_writer) = backend(MemStorage::default());
    let name = backend.create_queue(create("q")).await.unwrap();
    assert_eq!(&*name, "q");
    // Answered means durable: the record is already synced.
    assert_eq!(log_writer.durable().lsn, log_writer.next_lsn());
    assert_eq!(backend.queue_tags("q").await.unwrap()["team"], "prices");
    let error = backend.find_queue("missing").await.unwrap_err();
    assert!(matches!(error, BackendError::Rejected(_)), "{error}");
    log_writer.close();
}

#[tokio::test]
async fn a_change_the_log_cannot_take_is_unconfirmed_and_the_next_refused() {
    let (backend, log_writer) = backend(MemStorage {
        fail_append_after: Some(3),
        fail_truncate: true,
        ..MemStorage::default()
    });
    let error = backend.create_queue(create("q")).await.unwrap_err();
    assert!(matches!(error, BackendError::Unconfirmed(_)), "{error}");
    // Once the log is known to fail, a change is refused before it is made.
    let error = backend.create_queue(create("r")).await.unwrap_err();
    assert!(matches!(error, BackendError::Unavailable(_)), "{error}");
    log_writer.close();
}

fn message(body: &str) -> SendRequest {
    SendRequest {
        body: Body::new(body),
        attributes: Default::default(),
        trace_header: None,
        group_id: None,
        dedup_id: None,
        delay_seconds: None,
        sender_id: "AIDEXAMPLE".into(),
        bypass_dedup: false,
    }
}

fn receive_one() -> ReceiveRequest {
    ReceiveRequest {
        max_messages: Some(1),
        visibility_timeout: None,
        attempt_id: None,
    }
}

#[tokio::test]
async fn a_long_poll_is_woken_by_a_send_and_ends_when_the_clock_reaches_its_deadline() {
    let (backend, log_writer, clock) = backend_on_clock(MemStorage::default());
    let backend = Arc::new(backend);
    backend.create_queue(create("q")).await.unwrap();
    let poll = |backend: Arc<Embedded>| {
        tokio::spawn(async move { backend.receive("q", receive_one(), Some(20)).await })
    };

    let woken = poll(backend.clone());
    tokio::task::yield_now().await;
    assert!(!woken.is_finished(), "nothing to receive yet");
    backend.send("q", message("price")).await.unwrap();
    let received = tokio::time::timeout(std::time::Duration::from_secs(5), woken)
        .await
        .expect("the send wakes the poll")
        .unwrap()
        .unwrap();
    assert_eq!(received.len(), 1);
    assert_eq!(&*received[0].message.body, "price");
    // The receive is durable before it is answered, as sends are.
    assert_eq!(log_writer.durable().lsn, log_writer.next_lsn());

    let waiting = poll(backend.clone());
    tokio::task::yield_now().await;
    clock.advance_millis(19_999);
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "answered before its wait time");
    clock.advance_millis(1);
    assert!(waiting.await.unwrap().unwrap().is_empty());
    log_writer.close();
}

#[tokio::test]
async fn each_handle_of_a_batch_is_answered_on_its_own() {
    let (backend, log_writer) = backend(MemStorage::default());
    backend.create_queue(create("q")).await.unwrap();
    backend.send("q", message("a")).await.unwrap();
    let received = backend.receive("q", receive_one(), Some(0)).await.unwrap();
    let handle = received[0].receipt_handle.as_str();
    let results = backend.delete("q", vec![handle, "garbage"]).await.unwrap();
    assert!(results[0].is_ok());
    assert!(results[1].is_err(), "a malformed handle fails its entry");
    let missing = backend.delete("missing", vec![handle]).await.unwrap_err();
    assert!(matches!(missing, BackendError::Rejected(_)), "{missing}");
    log_writer.close();
}

#[tokio::test]
async fn keeps_the_rules_of_queue_administration() {
    let (backend, _log_writer, clock) = backend_on_clock(MemStorage::default());
    crate::backend::conformance::queue_administration(&backend, clock.now()).await;
}

#[tokio::test]
async fn keeps_the_rules_of_messages() {
    let (backend, _log_writer, clock) = backend_on_clock(MemStorage::default());
    crate::backend::conformance::messages(&backend, &clock).await;
}

#[tokio::test]
async fn keeps_the_rules_of_inspection() {
    let (backend, _log_writer, clock) = backend_on_clock(MemStorage::default());
    crate::backend::conformance::inspection(&backend, &clock).await;
}

#[tokio::test]
async fn keeps_the_rules_of_captured_messages() {
    let (backend, _log_writer, _clock) = backend_on_clock(MemStorage::default());
    crate::backend::conformance::captured_messages(&backend).await;
}

#[tokio::test]
async fn keeps_the_rules_of_move_tasks() {
    let (backend, _log_writer, clock) = backend_on_clock(MemStorage::default());
    crate::backend::conformance::move_tasks(&backend, &clock).await;
}

#[tokio::test]
async fn keeps_the_rules_of_topics() {
    let (backend, _log_writer, clock) = backend_on_clock(MemStorage::default());
    crate::backend::conformance::topics(&backend, &clock).await;
}

/// A webhook delivery is in the outbox as soon as its change is handed to the log; it is
/// taken for sending only once the log holds it (a POST before could carry what a crash then
/// loses), and handed back, not sent, when the log cannot hold it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_delivery_is_taken_only_once_its_record_is_durable() {
    use crate::backend::{CreateTopic, Deliveries, Subscribe, Topics};
    let (backend, log_writer) = backend(MemStorage::default());
    let backend = Arc::new(backend);
    let topic = backend
        .create_topic(CreateTopic {
            name: "prices".into(),
            attributes: Vec::new(),
            tags: Vec::new(),
        })
        .await
        .unwrap();
    log_writer.hold_writes(true);
    // The subscription's confirmation goes to the outbox; its answer waits for the log.
    let subscribing = {
        let (backend, topic) = (backend.clone(), topic.clone());
        tokio::spawn(async move {
            let request = Subscribe {
                topic_arn: &topic,
                protocol: "http",
                endpoint: Some("http://127.0.0.1:9/hook"),
                attributes: Vec::new(),
                base_url: "http://127.0.0.1:4566",
                principal: "arn:aws:iam::000000000000:root",
            };
            backend.subscribe(request).await.map(|s| s.arn)
        })
    };
    let taking = {
        let backend = backend.clone();
        tokio::spawn(async move {
            // Until the subscribe has put its confirmation in the outbox.
            loop {
                let taken = backend.take_deliveries(Timestamp(1), 10).await.unwrap();
                if !taken.is_empty() {
                    return taken;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    // Both wait for the log: the subscribe's answer and the confirmation's sending.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while log_writer.durability_waiters() < 2 {
        assert!(
            !taking.is_finished(),
            "a delivery was taken while the log held none of it"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "nothing waits for the log"
        );
        tokio::task::yield_now().await;
    }
    assert!(!taking.is_finished());
    log_writer.hold_writes(false);
    let taken = taking.await.unwrap();
    assert_eq!(taken.len(), 1);
    assert!(log_writer.durable().lsn >= log_writer.next_lsn());
    subscribing.await.unwrap().expect("subscribed");

    // A log that fails: the attempt taken is handed back, due again, its attempt not counted.
    backend.put_back_delivery(&taken[0], Timestamp(2));
    assert_eq!(
        backend.next_delivery_due().await.unwrap(),
        Some(Timestamp(2))
    );
    let again = backend.take_deliveries(Timestamp(2), 10).await.unwrap();
    assert_eq!((again.len(), again[0].number), (1, taken[0].number));
    log_writer.close();
}

/// A shard shut to hand it to another node: a receive waiting on it ends empty, a change
/// afterwards is refused before anything is done (nothing more reaches the log) and passed to
/// the shard's next leader, as one that changed nothing here, and no webhook is taken.
#[tokio::test]
async fn a_shut_shard_ends_waiting_receives_and_refuses_changes_to_be_passed_on() {
    use crate::backend::led_elsewhere::{noting, touched_shard};
    use crate::backend::Deliveries;
    let (backend, log_writer, clock) = backend_on_clock(MemStorage::default());
    backend.create_queue(create("q")).await.unwrap();
    // The manual clock never ends the wait: only the shut does.
    let waiting = backend.receive("q", ReceiveRequest::default(), Some(20));
    let shutting = async {
        tokio::task::yield_now().await;
        backend.shut();
    };
    let limit = std::time::Duration::from_secs(10);
    let (received, ()) = tokio::time::timeout(limit, async { tokio::join!(waiting, shutting) })
        .await
        .expect("the waiting receive ended");
    assert!(received.unwrap().is_empty());
    let logged = log_writer.next_lsn();
    let send = message("after");
    let (refused, noted) = noting(async {
        touched_shard(0);
        backend.send("q", send).await
    })
    .await;
    assert!(
        matches!(refused, Err(BackendError::LedElsewhere(0))),
        "{refused:?}"
    );
    assert_eq!(noted.passed_to, Some(0));
    assert_eq!(
        log_writer.next_lsn(),
        logged,
        "nothing more reached the log"
    );
    assert!(backend.take_deliveries(clock.now(), 10).await.is_err());
    log_writer.close();
}
