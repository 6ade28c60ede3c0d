//! Against a real PostgreSQL: `ORDERLY_TEST_POSTGRES` names a database whose user may create
//! databases (`scripts/postgres-cluster start` makes one; `scripts/test` and CI do so). Each
//! test works in a database of its own.

use std::sync::Arc;

use super::*;
use crate::backend::QueueAdmin;
use crate::clock::{Clock, ManualClock};
use crate::engine::{EngineError, QueueConfig, Timestamp};

use super::test_database::fresh_database;

mod database_crash;

fn settings(url: &str) -> Settings {
    Settings {
        url: url.into(),
        account_id: "000000000000".into(),
        region: "us-east-1".into(),
        delete_cooldown_ms: 0,
        pool_size: 4,
        long_polls: Default::default(),
        in_flight_limit: crate::engine::queue::INFLIGHT_LIMIT,
        webhook_max_pending: 100_000,
        webhook_lease_ms: 90_000,
        fifo_http_subscriptions: true,
        deliveries: Default::default(),
    }
}

async fn node(url: &str, clock: &Arc<ManualClock>) -> Arc<Postgres> {
    Postgres::connect(settings(url), clock.clone())
        .await
        .expect("connects and migrates")
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(Timestamp(1_764_000_000_000)))
}

#[tokio::test]
async fn keeps_the_rules_of_queue_administration() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    let backend = node(&url, &clock).await;
    crate::backend::conformance::queue_administration(&*backend, clock.now()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_is_created_once_and_a_newer_one_is_refused() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    // Four nodes starting together: one migrates, the others find it done.
    let starts: Vec<_> = (0..4)
        .map(|_| tokio::spawn(Postgres::connect(settings(&url), clock.clone())))
        .collect();
    for started in starts {
        started.await.unwrap().expect("every node starts");
    }
    let (client, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
    tokio::spawn(connection);
    let version: i32 = client
        .query_one("SELECT version FROM orderly_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, schema::VERSION);
    let rows = client
        .query("SELECT * FROM orderly_schema", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    // What a newer Orderly would leave behind.
    client
        .execute("UPDATE orderly_schema SET version = version + 1", &[])
        .await
        .unwrap();
    match Postgres::connect(settings(&url), clock.clone()).await {
        Err(PostgresError::NewerSchema { found, known }) => {
            assert_eq!((found, known), (schema::VERSION + 1, schema::VERSION));
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a newer schema was accepted"),
    }
}

#[tokio::test]
async fn every_node_must_run_with_the_databases_region_and_account() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    let first = node(&url, &clock).await;
    let _second = node(&url, &clock).await;
    for (region, account) in [("eu-west-1", "000000000000"), ("us-east-1", "111111111111")] {
        let mut elsewhere = settings(&url);
        elsewhere.region = region.into();
        elsewhere.account_id = account.into();
        match Postgres::connect(elsewhere, clock.clone()).await {
            Err(error @ PostgresError::OtherHome { .. }) => {
                let said = error.to_string();
                assert!(
                    said.contains("--region us-east-1 --account-id 000000000000"),
                    "{said}"
                );
            }
            Err(other) => panic!("refused for another reason: {other}"),
            Ok(_) => panic!("a node of {region}/{account} was let in"),
        }
    }
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_share_one_set_of_queues() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    let (a, b) = (node(&url, &clock).await, node(&url, &clock).await);
    // Both nodes create the same queue at once: one row, both answered with it.
    let create = |backend: Arc<Postgres>| {
        let now = clock.now();
        tokio::spawn(async move {
            let attributes = vec![("VisibilityTimeout".to_string(), "40".to_string())];
            let config = QueueConfig::for_create("prices", &attributes, now).unwrap();
            let request = crate::backend::CreateQueue {
                name: "prices".into(),
                config,
                attributes,
                tags: Vec::new(),
                now,
            };
            backend.create_queue(request).await
        })
    };
    let (first, second) = (create(a.clone()), create(b.clone()));
    assert_eq!(&*first.await.unwrap().unwrap(), "prices");
    assert_eq!(&*second.await.unwrap().unwrap(), "prices");
    let attributes = vec![("DelaySeconds".to_string(), "3".to_string())];
    a.set_queue_attributes("prices", attributes, clock.now())
        .await
        .unwrap();
    let seen = b.describe_queue("prices", clock.now()).await.unwrap();
    assert_eq!(
        (seen.config.delay_seconds, seen.config.visibility_timeout),
        (3, 40)
    );
    b.delete_queue("prices", clock.now()).await.unwrap();
    let gone = a.find_queue("prices").await;
    assert!(matches!(
        gone,
        Err(crate::backend::BackendError::Rejected(
            EngineError::QueueDoesNotExist
        ))
    ));
}

#[tokio::test]
async fn a_deleted_name_waits_out_the_cooldown() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    let backend = Postgres::connect(
        Settings {
            delete_cooldown_ms: 60_000,
            ..settings(&url)
        },
        clock.clone(),
    )
    .await
    .unwrap();
    let create = |now| crate::backend::CreateQueue {
        name: "q".into(),
        config: QueueConfig::for_create("q", &[], now).unwrap(),
        attributes: Vec::new(),
        tags: Vec::new(),
        now,
    };
    backend.create_queue(create(clock.now())).await.unwrap();
    backend.delete_queue("q", clock.now()).await.unwrap();
    clock.advance_millis(59_999);
    let early = backend.create_queue(create(clock.now())).await;
    assert!(matches!(
        early,
        Err(crate::backend::BackendError::Rejected(
            EngineError::QueueDeletedRecently
        ))
    ));
    clock.advance_millis(1);
    backend.create_queue(create(clock.now())).await.unwrap();
}

#[tokio::test]
async fn an_unreachable_database_is_reported_at_start() {
    let clock = clock();
    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://orderly@127.0.0.1:{port}/orderly?connect_timeout=2");
    match Postgres::connect(settings(&url), clock).await {
        Err(PostgresError::Connect(_)) => {}
        Err(other) => panic!("another error: {other}"),
        Ok(_) => panic!("connected to nothing"),
    }
}

#[tokio::test]
async fn keeps_the_rules_of_messages() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    let backend = node(&url, &clock).await;
    crate::backend::conformance::messages(&*backend, &clock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_on_two_nodes_never_hold_one_group_at_once() {
    use crate::backend::Messages;
    use crate::engine::body::Body;
    use crate::engine::queue::{ReceiveRequest, SendRequest};
    const GROUPS: usize = 16;
    const PER_GROUP: usize = 20;
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    let nodes = [
        Arc::new(node(&url, &clock).await),
        Arc::new(node(&url, &clock).await),
    ];
    let attributes = vec![("FifoQueue".to_string(), "true".to_string())];
    let now = clock.now();
    let request = crate::backend::CreateQueue {
        name: "q.fifo".into(),
        config: QueueConfig::for_create("q.fifo", &attributes, now).unwrap(),
        attributes,
        tags: Vec::new(),
        now,
    };
    nodes[0].create_queue(request).await.unwrap();
    // Each group's messages in order, in batches of 10, alternating between the nodes.
    for i in (0..PER_GROUP).step_by(10) {
        for group in 0..GROUPS {
            let batch = (i..i + 10)
                .map(|n| SendRequest {
                    body: Body::new(format!("{group}:{n}")),
                    group_id: Some(format!("g{group}").into()),
                    dedup_id: Some(format!("{group}-{n}").into()),
                    sender_id: "test".into(),
                    ..SendRequest::default()
                })
                .collect();
            let sent = nodes[group % 2].send_batch("q.fifo", batch).await.unwrap();
            assert!(sent.iter().all(Result::is_ok));
        }
    }
    // Four consumers, two per node: record what each receive returned, then delete it.
    let seen = Arc::new(std::sync::Mutex::new(Vec::<(usize, usize)>::new()));
    let consumers: Vec<_> = (0..4)
        .map(|c| {
            let (node, seen) = (nodes[c % 2].clone(), seen.clone());
            tokio::spawn(async move {
                while seen.lock().unwrap().len() < GROUPS * PER_GROUP {
                    let request = ReceiveRequest {
                        max_messages: Some(10),
                        ..ReceiveRequest::default()
                    };
                    let got = node.receive("q.fifo", request, Some(0)).await.unwrap();
                    seen.lock().unwrap().extend(got.iter().map(|r| {
                        let (group, n) = r.message.body.split_once(':').unwrap();
                        (group.parse().unwrap(), n.parse().unwrap())
                    }));
                    let handles = got.iter().map(|r| r.receipt_handle.as_str()).collect();
                    let deleted = node.delete("q.fifo", handles).await.unwrap();
                    assert!(deleted.iter().all(Result::is_ok), "{deleted:?}");
                }
            })
        })
        .collect();
    let guard = std::time::Duration::from_secs(60);
    for consumer in consumers {
        tokio::time::timeout(guard, consumer)
            .await
            .expect("done in time")
            .unwrap();
    }
    // Every group's messages, once each, in order: a second consumer never got a group while
    // the first still held messages of it.
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), GROUPS * PER_GROUP);
    for group in 0..GROUPS {
        let order: Vec<usize> = seen
            .iter()
            .filter(|(g, _)| *g == group)
            .map(|(_, n)| *n)
            .collect();
        assert_eq!(order, (0..PER_GROUP).collect::<Vec<_>>(), "group {group}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_on_one_node_wakes_a_long_poll_on_another() {
    use crate::backend::Messages;
    use crate::engine::body::Body;
    use crate::engine::queue::{ReceiveRequest, SendRequest};
    let Some(url) = fresh_database().await else {
        return;
    };
    // The clock never moves: only a notification can end the poll before the guard.
    let clock = clock();
    let (a, b) = (node(&url, &clock).await, node(&url, &clock).await);
    let now = clock.now();
    let request = crate::backend::CreateQueue {
        name: "q".into(),
        config: QueueConfig::for_create("q", &[], now).unwrap(),
        attributes: Vec::new(),
        tags: Vec::new(),
        now,
    };
    a.create_queue(request).await.unwrap();
    let poll = a.receive("q", ReceiveRequest::default(), Some(20));
    let send = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let message = SendRequest {
            body: Body::new("from b"),
            sender_id: "test".into(),
            ..SendRequest::default()
        };
        b.send("q", message).await.unwrap();
    };
    let guard = std::time::Duration::from_secs(10);
    let (got, ()) = tokio::time::timeout(guard, async { tokio::join!(poll, send) })
        .await
        .expect("woken by the other node's send");
    let got = got.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(&*got[0].message.body, "from b");
}

#[tokio::test]
async fn keeps_the_rules_of_inspection() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    let backend = node(&url, &clock).await;
    crate::backend::conformance::inspection(&*backend, &clock).await;
}

#[tokio::test]
async fn keeps_the_rules_of_recorded_messages() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let backend = node(&url, &clock()).await;
    crate::backend::conformance::recorded_messages(&*backend).await;
}

#[tokio::test]
async fn keeps_the_rules_of_move_tasks() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    let backend = node(&url, &clock).await;
    crate::backend::conformance::move_tasks(&*backend, &clock).await;
}

/// A move task is paced by one node at a time: another takes it over only once that node
/// stops (or its lease lapses), and the task moves each message once.
#[tokio::test]
async fn a_move_task_runs_on_one_node_and_another_takes_over() {
    use crate::backend::{Messages, MoveTasks, StartMove};
    use crate::engine::move_task::MoveStatus;
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    let (a, b) = (node(&url, &clock).await, node(&url, &clock).await);
    let arn = |name: &str| format!("arn:aws:sqs:us-east-1:000000000000:{name}");
    let create = |name: &str, attributes: Vec<(String, String)>| crate::backend::CreateQueue {
        name: name.into(),
        config: QueueConfig::for_create(name, &attributes, clock.now()).unwrap(),
        attributes,
        tags: Vec::new(),
        now: clock.now(),
    };
    a.create_queue(create("dlq", Vec::new())).await.unwrap();
    let redrive = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":1}}"#,
        arn("dlq")
    );
    let policy = vec![("RedrivePolicy".to_string(), redrive)];
    a.create_queue(create("work", policy)).await.unwrap();
    for i in 0..20 {
        let request = crate::engine::queue::SendRequest {
            body: crate::engine::body::Body::new(format!("m{i}")),
            ..Default::default()
        };
        a.send("dlq", request).await.unwrap();
    }
    let (source, destination) = (arn("dlq"), arn("work"));
    let task = a
        .start_move_task(StartMove {
            source_arn: &source,
            destination_arn: Some(&destination),
            rate: Some(5),
        })
        .await
        .unwrap();
    b.resume_move_tasks();
    let runner = || async {
        let client = a.client().await.unwrap();
        let row = client
            .query_one(
                "SELECT runner, moved FROM move_tasks WHERE id = $1",
                &[&task.id],
            )
            .await
            .unwrap();
        (row.get::<_, String>(0), row.get::<_, i64>(1))
    };
    let tick = || async {
        clock.advance_millis(100);
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    for _ in 0..10 {
        tick().await;
    }
    let (holder, moved) = runner().await;
    assert_eq!(holder, a.node, "B does not take a task A holds");
    assert!((1..20).contains(&moved), "{moved}");

    a.stop_move_tasks().await.unwrap();
    let mut finished = None;
    for _ in 0..300 {
        tick().await;
        let listed = b.list_move_tasks(&source).await.unwrap();
        if listed[0].status != MoveStatus::Running {
            finished = Some(listed[0].clone());
            break;
        }
    }
    let finished = finished.expect("B finished the task");
    assert_eq!(
        (finished.status, finished.moved),
        (MoveStatus::Completed, 20)
    );
    assert_eq!(runner().await.0, b.node);
    let visible = |name: &'static str| {
        let backend = b.clone();
        let now = clock.now();
        async move {
            backend
                .describe_queue(name, now)
                .await
                .unwrap()
                .counts
                .visible
        }
    };
    assert_eq!((visible("dlq").await, visible("work").await), (0, 20));
    b.stop_move_tasks().await.unwrap();
}

#[tokio::test]
async fn keeps_the_rules_of_topics() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    let backend = node(&url, &clock).await;
    crate::backend::conformance::topics(&*backend, &clock).await;
}

/// The in-flight limit: a receive takes only the room left; a standard queue at the limit
/// answers OverLimit until messages leave flight and the next count sees it.
#[tokio::test]
async fn the_in_flight_limit_holds() {
    use crate::backend::Messages;
    use crate::engine::body::Body;
    use crate::engine::queue::{ReceiveRequest, SendRequest};
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    let lowered = Settings {
        in_flight_limit: 2,
        ..settings(&url)
    };
    let backend = Postgres::connect(lowered, clock.clone()).await.unwrap();
    backend
        .create_queue(crate::backend::CreateQueue {
            name: "busy".into(),
            config: QueueConfig::for_create("busy", &[], clock.now()).unwrap(),
            attributes: Vec::new(),
            tags: Vec::new(),
            now: clock.now(),
        })
        .await
        .unwrap();
    for body in ["a", "b", "c"] {
        let request = SendRequest {
            body: Body::new(body),
            ..SendRequest::default()
        };
        backend.send("busy", request).await.unwrap();
    }
    let receive = || {
        let request = ReceiveRequest {
            max_messages: Some(10),
            ..ReceiveRequest::default()
        };
        backend.receive("busy", request, Some(0))
    };
    let first = receive().await.unwrap();
    assert_eq!(first.len(), 2, "only the room left");
    let over = receive().await;
    assert!(
        matches!(
            over,
            Err(crate::backend::BackendError::Rejected(
                EngineError::OverLimit(_)
            ))
        ),
        "{over:?}"
    );
    backend
        .delete("busy", vec![first[0].receipt_handle.as_str()])
        .await
        .unwrap();
    clock.advance_millis(1_000);
    assert_eq!(
        receive().await.unwrap().len(),
        1,
        "counted again: room for one"
    );
}

#[tokio::test]
async fn a_webhook_delivery_a_dead_node_held_is_taken_when_its_lease_ends() {
    use crate::backend::{CreateTopic, Deliveries, DeliveryResult, Subscribe, Topics};
    use crate::engine::webhook::{Kind, Outcome};
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    let (a, b) = (node(&url, &clock).await, node(&url, &clock).await);
    let topic = a
        .create_topic(CreateTopic {
            name: "alerts".into(),
            attributes: Vec::new(),
            tags: Vec::new(),
        })
        .await
        .unwrap();
    a.subscribe(Subscribe {
        topic_arn: &topic,
        protocol: "http",
        endpoint: Some("http://127.0.0.1:9/hook"),
        attributes: Vec::new(),
        base_url: "http://localhost:4566",
        principal: "arn:aws:iam::000000000000:root",
    })
    .await
    .unwrap();
    // The SubscriptionConfirmation is due on every node; A takes it.
    let now = clock.now();
    assert_eq!(b.next_delivery_due().await.unwrap(), Some(now));
    let taken = a.take_deliveries(now, 10).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(
        (taken[0].delivery.kind, taken[0].number),
        (Kind::SubscriptionConfirmation, 1)
    );
    assert!(
        b.take_deliveries(now, 10).await.unwrap().is_empty(),
        "A holds it"
    );
    // A dies with it in flight: B takes it once A's lease (90 s in these settings) ends.
    clock.advance_millis(89_999);
    assert!(b.take_deliveries(clock.now(), 10).await.unwrap().is_empty());
    clock.advance_millis(1);
    let again = b.take_deliveries(clock.now(), 10).await.unwrap();
    assert_eq!(
        (again.len(), again[0].id, again[0].number),
        (1, taken[0].id, 2)
    );
    // A's late report does not count: B's attempt decides.
    let late = a.finish_delivery(&taken[0], Outcome::Delivered, clock.now());
    assert_eq!(late.await.unwrap(), DeliveryResult::Gone);
    assert!(b.next_delivery_due().await.unwrap().is_some(), "still B's");
    let done = b.finish_delivery(&again[0], Outcome::Delivered, clock.now());
    assert_eq!(done.await.unwrap(), DeliveryResult::Delivered);
    assert_eq!(a.next_delivery_due().await.unwrap(), None);
}

#[tokio::test]
async fn an_archive_keeps_its_retention_and_goes_when_switched_off() {
    use crate::backend::{CreateTopic, Topics};
    use crate::engine::topic::PublishRequest;
    let Some(url) = fresh_database().await else {
        return;
    };
    let clock = clock();
    let backend = node(&url, &clock).await;
    let topic = backend
        .create_topic(CreateTopic {
            name: "kept.fifo".into(),
            attributes: vec![
                ("FifoTopic".into(), "true".into()),
                (
                    "ArchivePolicy".into(),
                    r#"{"MessageRetentionPeriod":"1"}"#.into(),
                ),
            ],
            tags: Vec::new(),
        })
        .await
        .unwrap();
    let publish = |n: u32| PublishRequest {
        message: format!("m{n}"),
        subject: None,
        structured: false,
        attributes: Default::default(),
        group_id: Some("g".into()),
        dedup_id: Some(format!("d{n}")),
        trace_header: None,
    };
    let kept = || async {
        let client = backend.client().await.unwrap();
        let row = client
            .query_one("SELECT count(*) FROM topic_archive", &[])
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    for n in 0..3 {
        backend.publish(&topic, publish(n), "").await.unwrap();
    }
    // A duplicate is not archived again.
    backend.publish(&topic, publish(2), "").await.unwrap();
    assert_eq!(kept().await, 3);
    // A day later the next publish drops what passed the one-day retention.
    clock.advance_millis(86_400_001);
    backend.publish(&topic, publish(3), "").await.unwrap();
    assert_eq!(kept().await, 1);
    backend
        .set_topic_attribute(&topic, "ArchivePolicy", "{}")
        .await
        .unwrap();
    assert_eq!(kept().await, 0, "switched off, the archive goes");
}

/// A server error is told by its message and code, not tokio-postgres's bare "db error".
#[tokio::test]
async fn a_database_error_says_what_it_was() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let error = client.query("SELECT 1 / 0", &[]).await.unwrap_err();
    match unavailable(error) {
        crate::backend::BackendError::Unavailable(cause) => {
            assert_eq!(cause, "PostgreSQL: ERROR: division by zero (22012)")
        }
        other => panic!("{other:?}"),
    }
}
