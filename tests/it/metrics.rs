//! `GET /metrics`: scraped, parsed with a Prometheus text-format parser, and checked
//! against the work the test did.

use prometheus_parse::{Scrape, Value};

use crate::common::{create_queue, fifo_queue, leading_nodes, start_with_manual_clock, Server};

/// The server's figures: with its shards spread over several nodes, each node's, a series
/// every node gives summed over them (each node counts what it served).
async fn scrape(server: &Server) -> Scrape {
    let mut nodes = leading_nodes(server).await.into_iter();
    let mut all = scrape_of(&nodes.next().expect("a node")).await;
    for node in nodes {
        for sample in scrape_of(&node).await.samples {
            let labels = |s: &prometheus_parse::Sample| {
                let mut labels: Vec<(String, String)> = s
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                labels.sort();
                labels
            };
            let same = (all.samples.iter_mut())
                .find(|s| s.metric == sample.metric && labels(s) == labels(&sample));
            match (same, &sample.value) {
                (Some(same), Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v)) => {
                    if let Value::Counter(sum) | Value::Gauge(sum) | Value::Untyped(sum) =
                        &mut same.value
                    {
                        *sum += v;
                    }
                }
                (Some(_), _) => {}
                (None, _) => all.samples.push(sample),
            }
        }
    }
    all
}

async fn scrape_of(node: &str) -> Scrape {
    let response = reqwest::get(format!("{node}/metrics")).await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    // One family per name, as OpenMetrics requires (several shards' figures among them).
    let mut described: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .collect();
    let count = described.len();
    described.sort_unstable();
    described.dedup();
    assert_eq!(described.len(), count, "a family described twice: {text}");
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap()
}

/// The value of the sample named `metric` whose labels include all of `labels`.
fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric)
        .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            Value::Summary(_) => f64::NAN,
        })
}

#[tokio::test]
async fn the_scrape_counts_what_was_done() {
    let (server, clock) = start_with_manual_clock().await;
    create_queue(&server, "work-dlq", &[]).await;
    let redrive = crate::common::redrive_to("work-dlq", 3);
    let plain = create_queue(&server, "work", &[("RedrivePolicy", &redrive)]).await;
    let fifo = fifo_queue(&server, "orders.fifo", &[]).await;
    for i in 0..3 {
        server
            .sqs
            .send_message()
            .queue_url(&plain)
            .message_body(format!("m{i}"))
            .send()
            .await
            .unwrap();
    }
    for group in ["a", "b"] {
        server
            .sqs
            .send_message()
            .queue_url(&fifo)
            .message_body(group)
            .message_group_id(group)
            .message_deduplication_id(group)
            .send()
            .await
            .unwrap();
    }
    server
        .sqs
        .receive_message()
        .queue_url(&plain)
        .send()
        .await
        .unwrap();
    server
        .sqs
        .receive_message()
        .queue_url(&fifo)
        .send()
        .await
        .unwrap();
    let missing = server.sqs.get_queue_url().queue_name("nope").send().await;
    assert!(missing.is_err());
    clock.advance_millis(7_000);

    let scrape = scrape(&server).await;
    let sqs = |action| vec![("service", "sqs"), ("action", action)];
    assert_eq!(
        value(&scrape, "orderly_requests_total", &sqs("SendMessage")),
        Some(5.0)
    );
    assert_eq!(
        value(&scrape, "orderly_requests_total", &sqs("ReceiveMessage")),
        Some(2.0)
    );
    assert_eq!(
        value(&scrape, "orderly_requests_total", &sqs("DeleteQueue")),
        Some(0.0),
        "every action is listed from the start"
    );
    let mut error = sqs("GetQueueUrl");
    error.push(("code", "NonExistentQueue"));
    assert_eq!(
        value(&scrape, "orderly_request_errors_total", &error),
        Some(1.0)
    );
    assert_eq!(
        value(
            &scrape,
            "orderly_request_duration_seconds_count",
            &sqs("SendMessage")
        )
        .or_else(|| value(
            &scrape,
            "orderly_request_duration_seconds",
            &sqs("SendMessage")
        )),
        Some(5.0)
    );

    let work = [("queue", "work")];
    assert_eq!(value(&scrape, "orderly_queue_sent_total", &work), Some(3.0));
    assert_eq!(
        value(&scrape, "orderly_queue_received_total", &work),
        Some(1.0)
    );
    assert_eq!(
        value(&scrape, "orderly_queue_deleted_total", &work),
        Some(0.0)
    );
    let state = |queue, state| vec![("queue", queue), ("state", state)];
    assert_eq!(
        value(&scrape, "orderly_queue_messages", &state("work", "visible")),
        Some(2.0)
    );
    assert_eq!(
        value(
            &scrape,
            "orderly_queue_messages",
            &state("work", "in_flight")
        ),
        Some(1.0)
    );
    let fifo_labels = [("queue", "orders.fifo"), ("fifo", "true")];
    assert_eq!(
        value(
            &scrape,
            "orderly_queue_dead_letter_target",
            &[("queue", "work"), ("target", "work-dlq")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&scrape, "orderly_queue_groups", &fifo_labels),
        Some(2.0)
    );
    assert_eq!(
        value(&scrape, "orderly_queue_locked_groups", &fifo_labels),
        Some(1.0)
    );
    assert_eq!(
        value(
            &scrape,
            "orderly_queue_oldest_message_age_seconds",
            &[("queue", "work")]
        ),
        Some(7.0)
    );
}

/// The sample dashboard and alert rules name only metrics the server exports.
#[tokio::test]
async fn the_examples_use_exported_metrics() {
    // With a data directory, so the log's and snapshots' families are exported too.
    let dir = tempfile::tempdir().unwrap();
    let server = crate::common::start_with_clock(
        crate::common::durable(dir.path()),
        crate::common::manual_clock(),
    )
    .await;
    create_queue(&server, "dlq", &[]).await;
    let redrive = crate::common::redrive_to("dlq", 3);
    create_queue(&server, "q", &[("RedrivePolicy", &redrive)]).await;
    fifo_queue(&server, "f.fifo", &[]).await;
    // A webhook with traffic, so its families have samples.
    let receiver = crate::receiver::Receiver::start().await;
    let topic = server
        .sns
        .create_topic()
        .name("t")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    server
        .sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("http")
        .endpoint(receiver.url("/hook"))
        .send()
        .await
        .unwrap();
    let confirmation = receiver.next().await.json();
    server
        .sns
        .confirm_subscription()
        .topic_arn(&topic)
        .token(confirmation["Token"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    server
        .sns
        .publish()
        .topic_arn(&topic)
        .message("m")
        .send()
        .await
        .unwrap();
    receiver.next().await;
    // And an error answer.
    assert!(server
        .sqs
        .get_queue_url()
        .queue_name("nope")
        .send()
        .await
        .is_err());
    let text = reqwest::get(format!("{}/metrics", server.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let exported: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/monitoring");
    for file in ["orderly-alerts.yml", "orderly-dashboard.json"] {
        let example = std::fs::read_to_string(root.join(file)).unwrap();
        let named: Vec<&str> = example
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|token| token.starts_with("orderly_"))
            .collect();
        assert!(!named.is_empty(), "{file}");
        for name in named {
            let family = ["_total", "_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name);
            assert!(
                exported.contains(&family),
                "{file} names {name}, not exported"
            );
        }
    }
}

#[tokio::test]
async fn waiting_long_polls_open_connections_and_the_log_are_reported() {
    let (server, clock) = start_with_manual_clock().await;
    let url = create_queue(&server, "empty", &[]).await;
    let sqs = server.sqs.clone();
    let waiting = tokio::spawn(async move {
        sqs.receive_message()
            .queue_url(url)
            .wait_time_seconds(20)
            .send()
            .await
            .unwrap()
    });
    let mut polls = None;
    for _ in 0..200 {
        polls = value(&scrape(&server).await, "orderly_long_polls_waiting", &[]);
        if polls == Some(1.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(polls, Some(1.0));
    let open = value(&scrape(&server).await, "orderly_open_connections", &[]).unwrap();
    assert!(
        open >= 2.0,
        "the poll's connection and the scrape's: {open}"
    );
    clock.advance_millis(20_000);
    assert!(waiting.await.unwrap().messages().is_empty());
    assert_eq!(
        value(&scrape(&server).await, "orderly_long_polls_waiting", &[]),
        Some(0.0)
    );

    // A server with a data directory reports its log.
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::common::durable(dir.path());
    // A snapshot as soon as the log holds anything.
    config.snapshot_after = 1;
    let durable = crate::common::start_with(config).await;
    let queue = create_queue(&durable, "kept", &[]).await;
    durable
        .sqs
        .send_message()
        .queue_url(&queue)
        .message_body("m")
        .send()
        .await
        .unwrap();
    let log = scrape(&durable).await;
    assert!(value(&log, "orderly_log_records_total", &[]).unwrap() >= 2.0);
    assert!(value(&log, "orderly_log_bytes_total", &[]).unwrap() > 100.0);
    let syncs = value(&log, "orderly_log_sync_seconds_count", &[])
        .or_else(|| value(&log, "orderly_log_sync_seconds", &[]))
        .unwrap();
    assert!(syncs >= 2.0, "{syncs}");
    let mut snapshots = None;
    for _ in 0..300 {
        snapshots = value(&scrape(&durable).await, "orderly_snapshots_total", &[]);
        if snapshots.is_some_and(|n| n >= 1.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(snapshots.is_some_and(|n| n >= 1.0), "{snapshots:?}");
    // Its background loops are counted by name while they run (by process: other tests'
    // servers share this one).
    let workers = scrape(&durable).await;
    for worker in ["log-writer", "snapshots", "webhooks"] {
        let running = value(&workers, "orderly_workers_running", &[("worker", worker)]);
        assert!(running.is_some_and(|n| n >= 1.0), "{worker}: {running:?}");
    }
    // What no snapshot covers: at most what was logged (all of it, when the snapshot came
    // after the last write, as it may on a busy machine).
    let log = scrape(&durable).await;
    let uncovered = value(&log, "orderly_log_bytes_since_snapshot", &[]).unwrap();
    let total = value(&log, "orderly_log_bytes_total", &[]).unwrap();
    assert!((0.0..=total).contains(&uncovered), "{uncovered} of {total}");
    // Written after that snapshot, a message is not covered until the next one: the figure
    // grows by what was written, or a snapshot has come since (counted).
    let snapshots_before = value(&log, "orderly_snapshots_total", &[]).unwrap_or(0.0);
    (durable.sqs.send_message().queue_url(&queue))
        .message_body("after the snapshot")
        .send()
        .await
        .unwrap();
    let log = scrape(&durable).await;
    let now_uncovered = value(&log, "orderly_log_bytes_since_snapshot", &[]).unwrap();
    let snapshots_now = value(&log, "orderly_snapshots_total", &[]).unwrap_or(0.0);
    assert!(
        now_uncovered > uncovered || snapshots_now > snapshots_before,
        "{now_uncovered} after {uncovered}, snapshots {snapshots_before} then {snapshots_now}"
    );
}

/// A log in a database is durable once its insert commits: the log's sync times are its
/// inserts', each a round trip to the database, not the nothing its sync has left to do; each
/// observed once, by the time the send it carried is answered (with two inserts allowed, the
/// writer may look at a finished insert only once the next records come).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_in_a_database_reports_its_commits_as_its_syncs() {
    for inserts in [1, 2] {
        let Some(url) = crate::common::fresh_database().await else {
            return;
        };
        let mut config = crate::log_in_database::on_log(&url);
        config.database_inserts = inserts;
        let server = crate::common::start_with(config).await;
        let queue = create_queue(&server, &format!("committed-{inserts}"), &[]).await;
        let syncs = |log: &Scrape| {
            let count = value(log, "orderly_log_sync_seconds_count", &[])
                .or_else(|| value(log, "orderly_log_sync_seconds", &[]))
                .unwrap();
            (
                count,
                value(log, "orderly_log_sync_seconds_sum", &[]).unwrap(),
            )
        };
        let (first, first_sum) = syncs(&scrape(&server).await);
        assert!(first >= 1.0, "the queue's creation committed: {first}");
        for n in 1..=5 {
            (server.sqs.send_message().queue_url(&queue))
                .message_body(format!("m{n}"))
                .send()
                .await
                .unwrap();
            let (count, _) = syncs(&scrape(&server).await);
            assert_eq!(
                count,
                first + f64::from(n),
                "{inserts} insert(s): one sync for each send, once it is answered"
            );
        }
        let (count, sum) = syncs(&scrape(&server).await);
        // A commit over a connection takes tens of microseconds at least; a sync with nothing
        // to do, tens of nanoseconds.
        let mean = (sum - first_sum) / (count - first);
        assert!(mean >= 20e-6, "{inserts} insert(s): {mean} s a send");
    }
}

/// A data directory cut into shards reports each shard's log, labelled with its number, one
/// family per figure (`scrape` checks): the shard that holds a queue has logged its sends.
#[tokio::test]
async fn each_shards_log_is_reported_by_its_number() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::common::durable(dir.path());
    config.shards = 2;
    let server = crate::common::start_with(config).await;
    let name = "kept";
    // A queue of the home region and account is keyed by its name.
    let home = orderly::engine::shard::Shard::of(2, name);
    let queue = create_queue(&server, name, &[]).await;
    for body in ["a", "b", "c"] {
        (server.sqs.send_message().queue_url(&queue))
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let log = scrape(&server).await;
    let unlabelled = (log.samples.iter())
        .filter(|s| s.metric == "orderly_log_records_total")
        .filter(|s| !s.labels.contains_key("shard"))
        .count();
    assert_eq!(unlabelled, 0, "no figure without its shard");
    let records = |shard: u32| {
        let shard = shard.to_string();
        value(&log, "orderly_log_records_total", &[("shard", &shard)])
    };
    let (holding, other) = (records(home).unwrap(), records(1 - home).unwrap());
    assert!(holding >= 4.0, "the queue and its three sends: {holding}");
    assert!(holding > other, "{holding} against {other}");
    for shard in ["0", "1"] {
        let bytes = value(
            &log,
            "orderly_log_bytes_since_snapshot",
            &[("shard", shard)],
        );
        assert!(bytes.is_some(), "shard {shard}");
    }
}

#[tokio::test]
async fn topics_and_subscriptions_are_counted() {
    let (server, _clock) = start_with_manual_clock().await;
    let topic = crate::common::fifo_topic(&server, "prices.fifo").await;
    fifo_queue(&server, "all.fifo", &[]).await;
    fifo_queue(&server, "eu.fifo", &[]).await;
    let all = crate::common::subscribe(&server, &topic, "all.fifo", true).await;
    let eu = crate::common::subscribe_with(
        &server,
        &topic,
        "eu.fifo",
        &[("FilterPolicy", r#"{"region":["eu"]}"#)],
    )
    .await
    .unwrap();
    for (dedup, region) in [("a", "eu"), ("a", "eu"), ("b", "us")] {
        server
            .sns
            .publish()
            .topic_arn(&topic)
            .message(region)
            .message_group_id("g")
            .message_deduplication_id(dedup)
            .message_attributes("region", crate::common::string_attribute(region))
            .send()
            .await
            .unwrap();
    }
    // A copy is counted once its queue holds it, maybe in another shard.
    crate::common::carried(&server).await;
    let scrape = scrape(&server).await;
    let prices = [("topic", "prices.fifo")];
    assert_eq!(
        value(&scrape, "orderly_topic_published_total", &prices),
        Some(2.0)
    );
    assert_eq!(
        value(&scrape, "orderly_topic_deduplicated_total", &prices),
        Some(1.0)
    );
    let copies = |subscription: &str, fate| {
        value(
            &scrape,
            "orderly_subscription_copies_total",
            &[("subscription", subscription), ("fate", fate)],
        )
    };
    assert_eq!(copies(&all, "queued"), Some(2.0));
    assert_eq!(copies(&eu, "queued"), Some(1.0));
    assert_eq!(copies(&eu, "filteredOut"), Some(1.0));
}

/// A send to a queue whose receives come back full (its consumers behind) and which was sent
/// over a thousand messages more than were received is answered after its turns, and counted;
/// one to a queue whose receive got less than it asked for, or that nobody receives from, or
/// within the lead, is not. Either way the messages are all there.
#[tokio::test]
async fn sends_to_a_queue_whose_consumers_are_behind_are_paced_and_counted() {
    let server = crate::common::start().await;
    let behind = create_queue(&server, "pace-behind", &[]).await;
    let keeping_up = create_queue(&server, "pace-keeping-up", &[]).await;
    let unread = create_queue(&server, "pace-unread", &[]).await;
    let send = |url: String, count: usize| {
        let sqs = server.sqs.clone();
        async move {
            let entries = (0..count).map(|i| {
                aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(format!("e{i}"))
                    .message_body(format!("m{i}"))
                    .build()
                    .unwrap()
            });
            let sent = sqs
                .send_message_batch()
                .queue_url(url)
                .set_entries(Some(entries.collect()))
                .send()
                .await
                .unwrap();
            assert_eq!(sent.successful.len(), count, "{:?}", sent.failed);
        }
    };
    let receive = |url: String, most: i32| {
        let sqs = server.sqs.clone();
        async move {
            let got = sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(most)
                .send()
                .await
                .unwrap();
            got.messages.unwrap_or_default().len()
        }
    };
    let paced = || async { value(&scrape(&server).await, "orderly_sends_paced_total", &[]) };

    send(keeping_up.clone(), 3).await;
    assert_eq!(
        receive(keeping_up.clone(), 10).await,
        3,
        "fewer than asked for"
    );
    send(behind.clone(), 1).await;
    assert_eq!(receive(behind.clone(), 1).await, 1, "as many as asked for");
    for _ in 0..90 {
        send(behind.clone(), 10).await;
        send(keeping_up.clone(), 10).await;
        send(unread.clone(), 10).await;
    }
    assert_eq!(paced().await, Some(0.0), "within the lead, or not behind");

    // A queue counts as behind for a second after a full receive: on a machine slow enough to
    // take longer between a receive and the send that passes the lead, the pair is tried again.
    let (mut counted, mut tries) = (0.0, 0);
    while tries < 3 {
        tries += 1;
        assert_eq!(receive(behind.clone(), 1).await, 1, "as many as asked for");
        for _ in 0..20 {
            send(behind.clone(), 10).await;
        }
        counted = paced().await.expect("the counter");
        if counted > 0.0 {
            break;
        }
    }
    assert!(
        (1.0..=20.0).contains(&counted),
        "paced once past the lead: {counted}"
    );

    let left = |url: String| {
        let server = &server;
        async move {
            let attributes = crate::common::queue_attributes(server, &url).await;
            let count = |name| attributes[&name].parse::<u64>().unwrap();
            count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
                + count(
                    aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
                )
        }
    };
    assert_eq!(
        left(behind).await,
        1 + 900 + 200 * tries,
        "paced sends are kept like any other"
    );
    assert_eq!(left(unread).await, 900);
}

/// A FIFO receive retried with its attempt id gets the same messages again: they came off the
/// lead once, so retries do not hide consumers that are behind.
#[tokio::test]
async fn a_receive_retried_with_its_attempt_id_comes_off_the_lead_once() {
    let server = crate::common::start().await;
    let url = fifo_queue(
        &server,
        "pace-retried.fifo",
        &[("ContentBasedDeduplication", "true")],
    )
    .await;
    let sent = std::sync::atomic::AtomicUsize::new(0);
    let send = |count: usize| {
        let (sqs, url, sent) = (server.sqs.clone(), url.clone(), &sent);
        async move {
            let entries = (0..count).map(|i| {
                let n = sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(format!("e{i}"))
                    .message_body(format!("m{n}"))
                    .message_group_id(format!("g{}", n % 20))
                    .build()
                    .unwrap()
            });
            let done = (sqs.send_message_batch().queue_url(url))
                .set_entries(Some(entries.collect()))
                .send()
                .await
                .unwrap();
            assert_eq!(done.successful.len(), count, "{:?}", done.failed);
        }
    };
    let receive = |attempt: String| {
        let (sqs, url) = (server.sqs.clone(), url.clone());
        async move {
            let got = (sqs.receive_message().queue_url(url))
                .max_number_of_messages(10)
                .visibility_timeout(600)
                .receive_request_attempt_id(attempt)
                .send()
                .await
                .unwrap();
            (got.messages.unwrap_or_default().into_iter())
                .map(|m| m.receipt_handle.unwrap())
                .collect::<Vec<_>>()
        }
    };
    let paced = || async { value(&scrape(&server).await, "orderly_sends_paced_total", &[]) };

    // The lead is counted from a queue's first full receive.
    send(10).await;
    assert_eq!(receive("start".into()).await.len(), 10);
    for _ in 0..100 {
        send(10).await;
    }
    assert_eq!(paced().await, Some(0.0), "within the lead");
    // Each try: 10 received (the lead 10 less), the same 10 three times more, 20 sent. Counted
    // once, the lead passes 1,000 at the first try's sends; with each retry counted too, it
    // would fall by 20 a try and never pass. A queue counts as behind for a second after a full
    // receive: on a machine slow enough to take longer, the try is made again.
    let (mut counted, mut tries) = (0.0, 0);
    while tries < 3 {
        tries += 1;
        let attempt = format!("try-{tries}");
        let first = receive(attempt.clone()).await;
        assert_eq!(first.len(), 10, "as many as asked for");
        for _ in 0..3 {
            assert_eq!(
                receive(attempt.clone()).await,
                first,
                "the same messages again"
            );
        }
        send(10).await;
        send(10).await;
        counted = paced().await.expect("the counter");
        if counted > 0.0 {
            break;
        }
    }
    assert!(
        (1.0..=2.0).contains(&counted),
        "paced once past the lead: {counted}"
    );
}
