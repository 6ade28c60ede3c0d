//! Yesterday's data opens today: data directories written by commit bd5fd91 (log records and
//! snapshots with no format version) and by commit 0e98fa6c (format version 4; see
//! `tests/fixtures/make_data_dir.py`), and databases written by commits 258491bd (tables of
//! version 2, before shards) and 6255a1e3 (version 3, before shard maps), are opened by this
//! build, and every kind of state they hold is checked through the SDKs: queues of both kinds
//! with visible, delayed, in-flight and deduplicated messages, attempt ids, a DLQ and a move task
//! still running, FIFO and standard topics with raw, filtered and webhook subscriptions, webhook
//! deliveries still pending (delivered now, signed with the key kept in the directory), and an
//! archive that replays. The clock is set to when the directory was written, so delays,
//! visibility timeouts and deduplication windows are still running.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName as Q;
use clap::Parser;
use orderly::config::Config;
use serde_json::Value;

use crate::common::{drain, queue_attributes, start_with_clock, subscription_attributes, Server};
use crate::receiver::{verify_signature, Receiver};

/// Written by commit bd5fd91: no format version (read as version 1).
const UNVERSIONED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/data-bd5fd91");
/// Written by commit 0e98fa6c: format version 4, the last before SNS's mobile state.
const VERSION_4: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/data-0e98fa6c");

/// Copies a fixture into a private temporary directory (opening writes to it).
fn copy_fixture(fixtures: &str, name: &str) -> (tempfile::TempDir, PathBuf, u64) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    for entry in std::fs::read_dir(Path::new(fixtures).join(name)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    (tmp, dir, written_at(fixtures, name))
}

#[tokio::test]
async fn a_log_written_by_bd5fd91_opens_with_everything_back() {
    directory_back(UNVERSIONED, "log").await;
}

#[tokio::test]
async fn a_snapshot_written_by_bd5fd91_opens_with_everything_back() {
    directory_back(UNVERSIONED, "snapshot").await;
}

#[tokio::test]
async fn a_log_of_format_version_4_opens_with_everything_back() {
    directory_back(VERSION_4, "log").await;
}

#[tokio::test]
async fn a_snapshot_of_format_version_4_opens_with_everything_back() {
    directory_back(VERSION_4, "snapshot").await;
}

/// Written by commit 258491bd: the log's tables at version 2, one log for every queue and topic.
pub(crate) const DATABASE_VERSION_2: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/database-258491bd"
);

#[tokio::test]
async fn a_log_in_a_database_of_version_2_opens_with_everything_back() {
    database_back(DATABASE_VERSION_2, "log").await;
}

#[tokio::test]
async fn a_snapshot_in_a_database_of_version_2_opens_with_everything_back() {
    database_back(DATABASE_VERSION_2, "snapshot").await;
}

/// Written by commit 6255a1e3: the log's tables at version 3 (keyed by shard), before shard
/// maps named each database.
const DATABASE_VERSION_3: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/database-6255a1e3"
);

#[tokio::test]
async fn a_log_in_a_database_of_version_3_opens_with_everything_back() {
    database_back(DATABASE_VERSION_3, "log").await;
}

#[tokio::test]
async fn a_snapshot_in_a_database_of_version_3_opens_with_everything_back() {
    database_back(DATABASE_VERSION_3, "snapshot").await;
}

/// Replays a fixture's dump into a fresh database and opens it.
async fn database_back(fixtures: &str, fixture: &str) {
    let Some(url) = crate::common::fresh_database().await else {
        return;
    };
    let client = replay_dump(&url, &format!("{fixtures}/{fixture}.sql")).await;
    let written_at = written_at(fixtures, fixture);
    // Subscriptions carried their subscribers' principals by then.
    let principal = "arn:aws:iam::000000000000:user/test";
    everything_back(["--storage", &url], written_at, principal).await;
    // Upgraded in place: one shard, whose log is the one the dump held.
    let row = client
        .query_one(
            "SELECT version, shards, (SELECT count(*) FROM log_batches WHERE shard <> 0) \
             FROM log_home",
            &[],
        )
        .await
        .unwrap();
    let upgraded: (i32, i32, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(upgraded, (4, 1, 0));
}

/// The database written by commit 258491bd with a snapshot and a log after it.
pub(crate) const DATABASE_VERSION_2_SNAPSHOT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/database-258491bd/snapshot.sql"
);

/// Replays the dump at `path` (`tests/fixtures/make_data_dir.py`) into the database at `url`;
/// answers a client of it.
pub(crate) async fn replay_dump(url: &str, path: &str) -> tokio_postgres::Client {
    let dump = std::fs::read_to_string(path).unwrap();
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client.batch_execute(&dump).await.expect("the dump replays");
    // The dump empties the session's search path for its own statements.
    client.batch_execute("RESET search_path").await.unwrap();
    client
}

/// When a fixture's state was written (its manifest's `written_at_ms`).
pub(crate) fn written_at(fixtures: &str, name: &str) -> u64 {
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(fixtures).join(format!("{name}.json"))).unwrap(),
    )
    .unwrap();
    manifest["written_at_ms"].as_u64().unwrap()
}

/// Every fixture's webhooks point at one port: one test at a time listens there, or opens a
/// fixture at all (its pending deliveries would reach another's receiver).
pub(crate) static RECEIVER_PORT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn directory_back(fixtures: &str, fixture: &str) {
    let (_tmp, dir, written_at) = copy_fixture(fixtures, fixture);
    // Subscriptions made before subscribers' principals were recorded belong to the owner
    // account's root, as before; later ones to whoever subscribed.
    let principal = if fixtures == UNVERSIONED {
        "arn:aws:iam::000000000000:root"
    } else {
        "arn:aws:iam::000000000000:user/test"
    };
    everything_back(["--data-dir", dir.to_str().unwrap()], written_at, principal).await;
}

/// Opens what `storage` names (its flag and value) with the clock just after `written_at`,
/// and checks every kind of state the fixtures hold.
async fn everything_back(storage: [&str; 2], written_at: u64, principal: &str) {
    let _port = RECEIVER_PORT.lock().await;
    // Started first: the pending deliveries are retried as soon as the clock reaches them.
    let receiver = Receiver::start_on(29871).await;
    let clock = std::sync::Arc::new(orderly::clock::ManualClock::new(
        orderly::engine::Timestamp(written_at + 1_000),
    ));
    let config = Config::parse_from([
        "orderly",
        "--bind",
        "127.0.0.1:0",
        "--fifo-http-subscriptions",
        storage[0],
        storage[1],
    ]);
    let server = start_with_clock(config, clock.clone()).await;
    let task = || async {
        server
            .sqs
            .list_message_move_tasks()
            .source_arn("arn:aws:sqs:us-east-1:000000000000:jobs-dlq")
            .send()
            .await
            .unwrap()
            .results
            .unwrap()[0]
            .clone()
    };
    // Before the clock moves: the task is where the directory left it.
    let running = task().await;

    queues_are_back(&server).await;
    fifo_state_is_back(&server).await;
    topics_are_back(&server, principal).await;

    // The delayed message becomes visible when its 900 s are up, not before.
    let plain = server.queue_url("plain");
    assert_eq!(counts(&server, &plain).await, (0, 1, 1));
    clock.advance_millis(900_000);
    assert_eq!(counts(&server, &plain).await, (1, 1, 0));

    // Pending webhook deliveries go out to the same endpoints, in order, signed by the key the
    // directory kept.
    let mut by_path: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for _ in 0..5 {
        let request = loop {
            if let Some(r) = receiver.within(200).await {
                break r;
            }
            clock.advance_millis(60_000);
        };
        let mut message = request.json();
        assert_eq!(message["Type"], "Notification");
        // The envelope was made before the restart, with the port the server had then; the
        // certificate is served under the same name now.
        let cert = message["SigningCertURL"].as_str().unwrap();
        let file = cert.rsplit('/').next().unwrap();
        message["SigningCertURL"] = format!("{}/{file}", server.url()).into();
        verify_signature(&message).await.unwrap();
        let text = message["Message"].as_str().unwrap().to_string();
        by_path.entry(request.path).or_default().push(text);
    }
    assert_eq!(by_path["/ordered"], ["u0", "u1", "u2"]);
    assert_eq!(by_path["/news"].len(), 2, "{by_path:?}");

    // The move task that was running goes on from where it was, one message a second of the
    // server's clock (moved above), and finishes: every job is back in its source queue, once.
    assert_eq!(running.status(), Some("RUNNING"));
    assert!(running.approximate_number_of_messages_moved < 20);
    clock.advance_millis(30_000);
    let mut status = String::new();
    // Bounded: the steps now due are taken by the task's own runner, as it is scheduled.
    for _ in 0..100 {
        status = task().await.status().unwrap().to_string();
        if status == "COMPLETED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(status, "COMPLETED");
    assert_eq!(task().await.approximate_number_of_messages_moved, 20);
    let mut jobs: Vec<String> = drain(&server, &server.queue_url("jobs"))
        .await
        .into_iter()
        .map(|(body, _)| body)
        .collect();
    jobs.sort();
    assert_eq!(
        jobs,
        (0..20).map(|i| format!("job-{i:02}")).collect::<Vec<_>>()
    );
}

/// (visible, in flight, delayed)
async fn counts(server: &Server, url: &str) -> (u64, u64, u64) {
    let attrs = queue_attributes(server, url).await;
    let n = |name: Q| attrs[&name].parse().unwrap();
    (
        n(Q::ApproximateNumberOfMessages),
        n(Q::ApproximateNumberOfMessagesNotVisible),
        n(Q::ApproximateNumberOfMessagesDelayed),
    )
}

async fn queues_are_back(server: &Server) {
    let urls = server.sqs.list_queues().send().await.unwrap().queue_urls;
    let names: BTreeSet<String> = urls
        .unwrap_or_default()
        .iter()
        .map(|u| u.rsplit('/').next().unwrap().to_string())
        .collect();
    let expected = [
        "fanout-a.fifo",
        "fanout-b.fifo",
        "jobs",
        "jobs-dlq",
        "news-q",
        "plain",
        "prices-dlq.fifo",
        "prices.fifo",
        "sub-dlq.fifo",
    ];
    assert_eq!(names, expected.into_iter().map(String::from).collect());

    let plain = server.queue_url("plain");
    let attrs = queue_attributes(server, &plain).await;
    assert_eq!(attrs[&Q::VisibilityTimeout], "45");
    assert!(attrs[&Q::Policy].contains("sqs:SendMessage"));
    let tags = server
        .sqs
        .list_queue_tags()
        .queue_url(&plain)
        .send()
        .await
        .unwrap()
        .tags
        .unwrap();
    assert_eq!(tags.get("tier").map(String::as_str), Some("gold"));
    assert_eq!(tags.len(), 2);

    // Two visible, one received for 12 hours, one delayed for 900 s.
    assert_eq!(counts(server, &plain).await, (2, 1, 1));
    let got = server
        .sqs
        .receive_message()
        .queue_url(&plain)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    let mut bodies: Vec<&str> = got.iter().map(|m| m.body().unwrap()).collect();
    bodies.sort();
    assert_eq!(bodies, ["p1", "p2"]);
    let p1 = got.iter().find(|m| m.body() == Some("p1")).unwrap();
    let attributes = p1.message_attributes().unwrap();
    assert_eq!(attributes["price"].string_value(), Some("189.5"));
    assert_eq!(
        attributes["raw"].binary_value().unwrap().as_ref(),
        b"\x00\x01\xff"
    );
    for m in &got {
        server
            .sqs
            .delete_message()
            .queue_url(&plain)
            .receipt_handle(m.receipt_handle().unwrap())
            .send()
            .await
            .unwrap();
    }
}

async fn fifo_state_is_back(server: &Server) {
    let prices = server.queue_url("prices.fifo");
    let attrs = queue_attributes(server, &prices).await;
    assert_eq!(attrs[&Q::ContentBasedDeduplication], "true");
    assert_eq!(attrs[&Q::DeduplicationScope], "messageGroup");
    assert_eq!(attrs[&Q::FifoThroughputLimit], "perMessageGroupId");
    assert!(attrs[&Q::RedrivePolicy].contains("prices-dlq.fifo"));
    assert_eq!(counts(server, &prices).await, (4, 1, 0));

    // Deduplication ids (explicit and content-based) are still remembered.
    for (group, body, id) in [("AAPL", "again", Some("dedup-a2")), ("MSFT", "m1", None)] {
        server
            .sqs
            .send_message()
            .queue_url(&prices)
            .message_group_id(group)
            .message_body(body)
            .set_message_deduplication_id(id.map(String::from))
            .send()
            .await
            .unwrap();
    }
    assert_eq!(counts(server, &prices).await, (4, 1, 0));

    // The attempt id answers with the message it returned before; AAPL stays locked by it.
    let retried = server
        .sqs
        .receive_message()
        .queue_url(&prices)
        .receive_request_attempt_id("attempt-1")
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(retried[0].body(), Some("a1"));
    let got: Vec<(String, Option<String>)> = drain(server, &prices).await;
    assert_eq!(
        got,
        [
            ("m1".to_string(), Some("MSFT".to_string())),
            ("m2".to_string(), Some("MSFT".to_string()))
        ]
    );
    let dlq = server.queue_url("jobs-dlq");
    let (visible, _, _) = counts(server, &dlq).await;
    assert!(visible <= 20 && visible > 0, "{visible} left in the DLQ");
}

async fn topics_are_back(server: &Server, principal: &str) {
    let topics: BTreeSet<String> = server
        .sns
        .list_topics()
        .send()
        .await
        .unwrap()
        .topics
        .unwrap()
        .iter()
        .map(|t| {
            t.topic_arn()
                .unwrap()
                .rsplit(':')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(topics, ["news", "updates.fifo"].map(String::from).into());
    let updates = "arn:aws:sns:us-east-1:000000000000:updates.fifo";
    let attrs = crate::common::topic_attributes(server, updates).await;
    assert_eq!(attrs["ContentBasedDeduplication"], "true");
    assert!(attrs["ArchivePolicy"].contains("30"));
    let tags = server
        .sns
        .list_tags_for_resource()
        .resource_arn(updates)
        .send()
        .await
        .unwrap()
        .tags
        .unwrap();
    assert_eq!(tags[0].value(), "prices");

    let mut statuses = BTreeMap::new();
    for topic in [updates, "arn:aws:sns:us-east-1:000000000000:news"] {
        let subs = server
            .sns
            .list_subscriptions_by_topic()
            .topic_arn(topic)
            .send()
            .await
            .unwrap()
            .subscriptions
            .unwrap();
        for sub in subs {
            let arn = sub.subscription_arn().unwrap().to_string();
            let endpoint = sub.endpoint().unwrap().rsplit(['/', ':']).next().unwrap();
            statuses.insert(endpoint.to_string(), arn);
        }
    }
    assert_eq!(statuses["unconfirmed"], "PendingConfirmation");
    let raw = subscription_attributes(server, &statuses["fanout-a.fifo"]).await;
    assert_eq!(raw["RawMessageDelivery"], "true");
    assert_eq!(raw["SubscriptionPrincipal"], principal);
    assert_eq!(
        raw.keys()
            .filter(|k| k.contains("SubscriptionPrincipal"))
            .count(),
        1
    );
    let filtered = subscription_attributes(server, &statuses["fanout-b.fifo"]).await;
    assert!(filtered["FilterPolicy"].contains("AAPL"));
    assert!(filtered["RedrivePolicy"].contains("sub-dlq.fifo"));
    let by_body = subscription_attributes(server, &statuses["news-q"]).await;
    assert_eq!(by_body["FilterPolicyScope"], "MessageBody");

    // Topic-wide deduplication still remembers what was published.
    server
        .sns
        .publish()
        .topic_arn(updates)
        .message("u0")
        .message_group_id("AAPL")
        .send()
        .await
        .unwrap();
    let fanned = |v: Vec<(String, Option<String>)>| -> Vec<String> {
        v.into_iter().map(|(body, _)| body).collect()
    };
    assert_eq!(
        fanned(drain(server, &server.queue_url("fanout-a.fifo")).await),
        ["u0", "u2", "u1"]
    );
    let b: Vec<String> = fanned(drain(server, &server.queue_url("fanout-b.fifo")).await)
        .iter()
        .map(|envelope| serde_json::from_str::<Value>(envelope).unwrap()["Message"].to_string())
        .collect();
    assert_eq!(b, ["\"u0\"", "\"u2\""]);
    let news = fanned(drain(server, &server.queue_url("news-q")).await);
    assert_eq!(news.len(), 1);
    assert!(news[0].contains("n1"), "{news:?}");

    // The archive replays into a new subscription.
    let replay = crate::common::fifo_queue(server, "replay.fifo", &[]).await;
    let start = &attrs["BeginningArchiveTime"];
    server
        .sns
        .subscribe()
        .topic_arn(updates)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:replay.fifo")
        .attributes("RawMessageDelivery", "true")
        .attributes(
            "ReplayPolicy",
            format!(r#"{{"PointType":"Timestamp","StartingPoint":"{start}"}}"#),
        )
        .send()
        .await
        .unwrap();
    let mut replayed = fanned(drain(server, &replay).await);
    replayed.sort();
    assert_eq!(replayed, ["u0", "u1", "u2"]);
}

/// A version 4 directory, opened by this build, takes SNS's mobile state (format version 5)
/// beside what it held, and both come back at the next start.
#[tokio::test]
async fn a_version_4_directory_keeps_mobile_state_after_the_upgrade() {
    // Its pending webhooks go to the fixtures' port: no other test may listen there meanwhile.
    let _port = RECEIVER_PORT.lock().await;
    let (_tmp, dir, _) = copy_fixture(VERSION_4, "log");
    let app = orderly::app::App::bind(&crate::common::durable(&dir))
        .await
        .unwrap();
    let running = crate::common::Stoppable::start(app).await;
    let sns = &running.server.sns;
    let app_arn = sns
        .create_platform_application()
        .name("upgraded")
        .platform("GCM")
        .attributes("PlatformCredential", "key")
        .send()
        .await
        .unwrap()
        .platform_application_arn
        .unwrap();
    let endpoint = sns
        .create_platform_endpoint()
        .platform_application_arn(&app_arn)
        .token("device")
        .send()
        .await
        .unwrap()
        .endpoint_arn
        .unwrap();
    let stopped = reqwest::Client::new()
        .post(format!(
            "{}/_orderly/sns/opted-out?phoneNumber=%2B15550100",
            running.server.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status().as_u16(), 204);
    running.stop().await;

    let app = orderly::app::App::bind(&crate::common::durable(&dir))
        .await
        .unwrap();
    let running = crate::common::Stoppable::start(app).await;
    let server = &running.server;
    let listed = server
        .sns
        .list_endpoints_by_platform_application()
        .platform_application_arn(&app_arn)
        .send()
        .await
        .unwrap()
        .endpoints
        .unwrap();
    assert_eq!(listed[0].endpoint_arn.as_deref(), Some(endpoint.as_str()));
    let opted_out = server
        .sns
        .list_phone_numbers_opted_out()
        .send()
        .await
        .unwrap();
    assert_eq!(opted_out.phone_numbers.unwrap(), ["+15550100"]);
    let queues = server.sqs.list_queues().send().await.unwrap();
    assert!(
        queues
            .queue_urls
            .unwrap()
            .iter()
            .any(|u| u.ends_with("/prices.fifo")),
        "the version 4 queues are still there"
    );
    running.stop().await;
}
