//! `--init FILE`: the example file sets up the price-updates fan-out before the server listens; a
//! second start with the file changes nothing, a changed file is reported and not applied; a bad
//! file stops the start with an error naming file, entry and field.

use std::path::{Path, PathBuf};

use aws_sdk_sqs::types::QueueAttributeName as A;
use orderly::app::App;
use orderly::config::Config;

use crate::common::{drain, durable, string_attribute, Stoppable};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/price-updates.toml")
}

fn with_init(mut config: Config, file: &Path) -> Config {
    config.init = Some(file.to_path_buf());
    config
}

async fn attribute(server: &crate::common::Server, queue: &str, name: A) -> Option<String> {
    server
        .sqs
        .get_queue_attributes()
        .queue_url(server.queue_url(queue))
        .attribute_names(name.clone())
        .send()
        .await
        .unwrap()
        .attributes
        .and_then(|mut a| a.remove(&name))
}

#[tokio::test]
async fn the_example_sets_up_the_price_updates_fan_out() {
    let app = App::bind(&with_init(Config::ephemeral(), &example()))
        .await
        .unwrap();
    let report = app.init_report.as_ref().unwrap();
    assert_eq!(report.created.len(), 4 + 1 + 3, "{:?}", report.created);
    assert!(report.differences.is_empty(), "{:?}", report.differences);
    let running = Stoppable::start(app).await;
    let server = &running.server;

    let redrive = attribute(server, "prices-eu.fifo", A::RedrivePolicy)
        .await
        .unwrap();
    assert!(
        redrive.contains("arn:aws:sqs:us-east-1:000000000000:prices-dlq.fifo"),
        "{redrive}"
    );
    let topic = "arn:aws:sns:us-east-1:000000000000:prices.fifo";
    server
        .sns
        .publish()
        .topic_arn(topic)
        .message("AAPL 189.50")
        .message_group_id("AAPL")
        .message_attributes("region", string_attribute("eu"))
        .send()
        .await
        .unwrap();
    server
        .sns
        .publish()
        .topic_arn(topic)
        .message(r#"{"market": "NYSE", "symbol": "IBM", "price": 170}"#)
        .message_group_id("IBM")
        .send()
        .await
        .unwrap();
    let eu = drain(server, &server.queue_url("prices-eu.fifo")).await;
    assert_eq!(
        eu.iter().map(|m| m.0.as_str()).collect::<Vec<_>>(),
        ["AAPL 189.50"]
    );
    let us = drain(server, &server.queue_url("prices-us.fifo")).await;
    assert_eq!(us.len(), 1);
    assert!(us[0].0.contains("IBM"));
    let audit = drain(server, &server.queue_url("prices-audit.fifo")).await;
    assert_eq!(audit.len(), 2, "every update, in envelopes");
    let envelope: serde_json::Value = serde_json::from_str(&audit[0].0).unwrap();
    assert_eq!(envelope["Type"], "Notification");
    let tags = server
        .sns
        .list_tags_for_resource()
        .resource_arn(topic)
        .send()
        .await
        .unwrap();
    assert_eq!(tags.tags().len(), 1);
    running.stop().await;
}

const FIRST: &str = r#"
[[queues]]
name = "jobs"
attributes = { VisibilityTimeout = 30, RedrivePolicy = { deadLetterTargetArn = "jobs-dlq", maxReceiveCount = 3 } }

# Named after the queue that uses it.
[[queues]]
name = "jobs-dlq"

[[topics]]
name = "events"

[[subscriptions]]
topic = "events"
queue = "jobs"
attributes = { FilterPolicy = { kind = ["job"] } }
"#;

#[tokio::test]
async fn a_second_start_changes_nothing_and_a_changed_file_is_reported_not_applied() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("init.toml");
    let data = dir.path().join("data");
    std::fs::write(&file, FIRST).unwrap();

    let app = App::bind(&with_init(durable(&data), &file)).await.unwrap();
    assert_eq!(app.init_report.as_ref().unwrap().created.len(), 4);
    Stoppable::start(app).await.stop().await;

    let app = App::bind(&with_init(durable(&data), &file)).await.unwrap();
    let report = app.init_report.as_ref().unwrap();
    assert!(report.created.is_empty(), "{:?}", report.created);
    assert!(report.differences.is_empty(), "{:?}", report.differences);
    Stoppable::start(app).await.stop().await;

    let changed = FIRST
        .replace("VisibilityTimeout = 30", "VisibilityTimeout = 60")
        .replace(r#"kind = ["job"]"#, r#"kind = ["task"]"#);
    std::fs::write(&file, changed).unwrap();
    let app = App::bind(&with_init(durable(&data), &file)).await.unwrap();
    let report = app.init_report.as_ref().unwrap();
    assert_eq!(report.differences.len(), 2, "{:?}", report.differences);
    let queue = &report.differences[0];
    assert!(
        queue.contains("init.toml")
            && queue.contains("queues[0] (jobs)")
            && queue.contains("attributes.VisibilityTimeout")
            && queue.contains("\"60\"")
            && queue.contains("\"30\""),
        "{queue}"
    );
    assert!(
        report.differences[1].contains("subscriptions[0] (events): attributes.FilterPolicy"),
        "{}",
        report.differences[1]
    );
    let running = Stoppable::start(app).await;
    assert_eq!(
        attribute(&running.server, "jobs", A::VisibilityTimeout)
            .await
            .as_deref(),
        Some("30"),
        "left as it was"
    );
    running.stop().await;
}

async fn refused(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, text).unwrap();
    match App::bind(&with_init(Config::ephemeral(), &file)).await {
        Ok(_) => panic!("started with {text}"),
        Err(error) => error.to_string(),
    }
}

#[tokio::test]
async fn a_bad_file_stops_the_start_naming_file_entry_and_field() {
    let error = refused(
        "[[queues]]\nname = \"fine\"\n[[queues]]\nname = \"slow\"\nattributes = { VisibilityTimeout = 99999 }\n",
    )
    .await;
    assert!(
        error.contains("bad.toml: queues[1] (slow): attributes.VisibilityTimeout: "),
        "{error}"
    );
    let error = refused("[[subscriptions]]\ntopic = \"missing\"\nqueue = \"q\"\n").await;
    assert!(
        error.contains("bad.toml: subscriptions[0] (missing): "),
        "{error}"
    );
    let error = refused("[[subscriptions]]\ntopic = \"t\"\n").await;
    assert!(
        error.contains("subscriptions[0] (t): queue: give either"),
        "{error}"
    );
    let error = refused("[[queues]]\nname = 5\n").await;
    assert!(
        error.contains("bad.toml") && error.contains("line 2"),
        "{error}"
    );
}

/// A file refused part way takes back what it made before the refusal, so the corrected
/// file, at the next start, applies whole (rather than find its first half made without what
/// came later, and leave it so).
#[tokio::test]
async fn a_file_refused_part_way_leaves_nothing_and_applies_whole_once_corrected() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("init.toml");
    let data = dir.path().join("data");
    let good = r#"
[[queues]]
name = "jobs-dlq"

[[queues]]
name = "jobs"
attributes = { RedrivePolicy = { deadLetterTargetArn = "jobs-dlq", maxReceiveCount = 3 } }

[[topics]]
name = "events"

[[subscriptions]]
topic = "events"
queue = "jobs"
"#;
    // The dead-letter queue misnamed, and a subscription to a topic the file never makes.
    let bad = good.replace(
        "deadLetterTargetArn = \"jobs-dlq\"",
        "deadLetterTargetArn = \"nope\"",
    );
    for bad in [bad, good.replace("topic = \"events\"", "topic = \"other\"")] {
        std::fs::write(&file, &bad).unwrap();
        let refused = App::bind(&with_init(durable(&data), &file)).await;
        assert!(refused.is_err(), "started with {bad}");
        let app = App::bind(&durable(&data)).await.unwrap();
        let running = Stoppable::start(app).await;
        let queues = running.server.sqs.list_queues().send().await.unwrap();
        assert!(queues.queue_urls().is_empty(), "{queues:?}");
        let topics = running.server.sns.list_topics().send().await.unwrap();
        assert!(topics.topics().is_empty(), "{topics:?}");
        running.stop().await;
    }
    std::fs::write(&file, good).unwrap();
    let app = App::bind(&with_init(durable(&data), &file)).await.unwrap();
    assert_eq!(app.init_report.as_ref().unwrap().created.len(), 4);
    let running = Stoppable::start(app).await;
    let policy = attribute(&running.server, "jobs", A::RedrivePolicy).await;
    assert!(policy.is_some_and(|p| p.contains("jobs-dlq")));
    running.stop().await;
}
