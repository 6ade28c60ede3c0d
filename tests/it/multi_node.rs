//! Several Orderly nodes on one PostgreSQL database: one leads the log, the others pass their
//! requests on to it. Three nodes share one FIFO
//! queue; producers and consumers are spread across them, 64 groups, with visibility timeouts
//! left to expire at random and messages handed back early with ChangeMessageVisibility 0.
//! Checked: no group is ever held by two consumers at once, each group's messages are deleted
//! exactly once and in order, and nothing acknowledged is lost.
//!
//! The nodes share one manual clock (they run in this process), moved forward by the test, so
//! visibility timeouts pass quickly without the test sleeping through them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use orderly::clock::Clock;
use orderly::config::Config;

use crate::common::{self, Server};

const GROUPS: usize = 64;
const PER_GROUP: usize = 12;
const NODES: usize = 3;
const CONSUMERS_PER_NODE: usize = 2;
const VISIBILITY_MS: u64 = 2_000;

/// What the consumers saw, checked as it happens.
#[derive(Default)]
struct Ledger {
    /// Per group: the consumer holding it and the earliest its hold may have ended (clock ms).
    held: HashMap<usize, (usize, u64)>,
    /// Per group, the messages deleted, in the order their deletes were acknowledged.
    deleted: HashMap<usize, Vec<usize>>,
    /// A group received while another consumer's hold surely lasted.
    violations: Vec<String>,
}

/// xorshift: the consumers' choices, reproducible per consumer.
struct Choices(u64);

impl Choices {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % 100
    }
}

/// A consumer slower than its visibility timeout: the only failure allowed (the message then
/// came back to someone, who may have deleted it already).
fn expired<E: aws_sdk_sqs::error::ProvideErrorMetadata + std::fmt::Debug>(error: &E) {
    let text = error.message().unwrap_or_default();
    assert!(
        text.contains("receipt handle has expired") || text.contains("Message does not exist"),
        "{error:?}"
    );
}

fn parse(body: &str) -> (usize, usize) {
    let (group, index) = body.split_once(':').expect("group:index");
    (group.parse().unwrap(), index.parse().unwrap())
}

async fn produce(server: &Server, url: &str, node: usize) {
    // Each group has one producer, so its order is the order of that producer's sends.
    for group in (node..GROUPS).step_by(NODES) {
        let entries: Vec<_> = (0..PER_GROUP)
            .map(|index| {
                SendMessageBatchRequestEntry::builder()
                    .id(format!("m{index}"))
                    .message_body(format!("{group}:{index}"))
                    .message_group_id(format!("g{group}"))
                    .message_deduplication_id(format!("{group}-{index}"))
                    .build()
                    .unwrap()
            })
            .collect();
        for batch in entries.chunks(10) {
            let sent = server
                .sqs
                .send_message_batch()
                .queue_url(url)
                .set_entries(Some(batch.to_vec()))
                .send()
                .await
                .expect("acknowledged");
            assert!(sent.failed().is_empty(), "{:?}", sent.failed());
        }
    }
}

async fn consume(
    server: &Server,
    url: &str,
    consumer: usize,
    clock: &orderly::clock::ManualClock,
    ledger: &Mutex<Ledger>,
) {
    let mut choices = Choices(0x9e37_79b9_7f4a_7c15 ^ ((consumer as u64 + 1) * 0x1000_0001));
    let total = GROUPS * PER_GROUP;
    loop {
        if ledger
            .lock()
            .unwrap()
            .deleted
            .values()
            .map(Vec::len)
            .sum::<usize>()
            == total
        {
            return;
        }
        // Before asking: the hold ends no earlier than this reading plus the timeout.
        let asked_at = clock.now().millis();
        let got = server
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        let received_at = clock.now().millis();
        for message in got.messages() {
            let (group, index) = parse(message.body().unwrap());
            {
                let mut ledger = ledger.lock().unwrap();
                if let Some(&(holder, until)) = ledger.held.get(&group) {
                    if holder != consumer && received_at < until {
                        let text = format!(
                            "group {group} message {index} went to consumer {consumer} at {received_at} while consumer {holder} held it until at least {until}"
                        );
                        ledger.violations.push(text);
                    }
                }
                ledger
                    .held
                    .insert(group, (consumer, asked_at + VISIBILITY_MS));
            }
        }
        // The group's messages in order: settle each, or walk away from the rest.
        for message in got.messages() {
            let (group, index) = parse(message.body().unwrap());
            let handle = message.receipt_handle().unwrap();
            match choices.next() {
                // Left to time out: this and the rest of the batch come back later.
                0..=7 => break,
                // Handed back at once.
                8..=11 => {
                    ledger.lock().unwrap().held.remove(&group);
                    let changed = server
                        .sqs
                        .change_message_visibility()
                        .queue_url(url)
                        .receipt_handle(handle)
                        .visibility_timeout(0)
                        .send()
                        .await;
                    if let Err(error) = changed {
                        expired(&error);
                    }
                    break;
                }
                _ => {
                    // Noted in the ledger and released first: once the delete lands, another consumer
                    // may take the group's next message.
                    {
                        let mut ledger = ledger.lock().unwrap();
                        ledger.held.remove(&group);
                        ledger.deleted.entry(group).or_default().push(index);
                    }
                    let deleted = server
                        .sqs
                        .delete_message()
                        .queue_url(url)
                        .receipt_handle(handle)
                        .send()
                        .await;
                    if let Err(error) = deleted {
                        expired(&error);
                        let mut ledger = ledger.lock().unwrap();
                        let list = ledger.deleted.get_mut(&group).unwrap();
                        assert_eq!(list.pop(), Some(index));
                        break;
                    }
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_keep_every_fifo_rule() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let clock = common::manual_clock();
    let servers = start_nodes(&url, NODES, &clock, |_| {}).await;
    let queue = common::fifo_queue(&servers[0], "load.fifo", &[("VisibilityTimeout", "2")]).await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));

    // Time passes while they work: timeouts left to expire come back to someone.
    let ticking = {
        let clock = clock.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                clock.advance_millis(100);
            }
        })
    };
    let mut work = Vec::new();
    for (node, on_node) in servers.iter().enumerate() {
        let (server, url) = (on_node.clone(), queue.clone());
        work.push(tokio::spawn(
            async move { produce(&server, &url, node).await },
        ));
        for c in 0..CONSUMERS_PER_NODE {
            let (server, url) = (on_node.clone(), queue.clone());
            let (clock, ledger) = (clock.clone(), ledger.clone());
            let consumer = node * CONSUMERS_PER_NODE + c;
            work.push(tokio::spawn(async move {
                consume(&server, &url, consumer, &clock, &ledger).await
            }));
        }
    }
    let all = async {
        for task in work {
            task.await.expect("no task panicked");
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), all)
        .await
        .expect("every message deleted within two minutes");
    ticking.abort();

    {
        let ledger = ledger.lock().unwrap();
        assert!(ledger.violations.is_empty(), "{:#?}", ledger.violations);
        assert_eq!(ledger.deleted.len(), GROUPS);
        for (group, deleted) in &ledger.deleted {
            let expected: Vec<usize> = (0..PER_GROUP).collect();
            assert_eq!(deleted, &expected, "group {group}: in order, each once");
        }
    }
    let left = servers[1]
        .sqs
        .get_queue_attributes()
        .queue_url(&queue)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let attributes = left.attributes().unwrap();
    for name in [
        aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages,
        aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
    ] {
        assert_eq!(attributes[&name], "0", "{name:?}");
    }
}

/// `count` nodes in this process on the database at `url`, sharing one manual clock.
pub async fn start_nodes(
    url: &str,
    count: usize,
    clock: &Arc<orderly::clock::ManualClock>,
    configure: impl Fn(&mut Config),
) -> Vec<Arc<Server>> {
    let mut servers = Vec::new();
    for _ in 0..count {
        let mut config = Config::ephemeral();
        config.ephemeral = false;
        config.storage = Some(url.to_string());
        configure(&mut config);
        servers.push(Arc::new(
            common::start_with_clock(config, clock.clone()).await,
        ));
    }
    servers
}

/// What the captured protocols' endpoints would have received is the leader's: any node
/// lists (and forgets) what any node captured, a fan-out's and a Publish to a phone number's.
#[tokio::test]
async fn every_node_lists_every_nodes_captured_messages() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let nodes = start_nodes(&url, 2, &common::manual_clock(), |_| {}).await;
    let (a, b) = (&nodes[0], &nodes[1]);
    let created = a.sns.create_topic().name("alerts").send().await.unwrap();
    let topic = created.topic_arn.unwrap();
    let subscription = a.sns.subscribe().topic_arn(&topic).protocol("sms");
    subscription.endpoint("+15555550100").send().await.unwrap();
    let publish = a.sns.publish().topic_arn(&topic).message("from a");
    publish.send().await.unwrap();
    let direct = b
        .sns
        .publish()
        .phone_number("+15555550199")
        .message("from b");
    direct.send().await.unwrap();
    use crate::common::get_json;
    use crate::sns_captured_protocols::deliveries;
    let bodies = |listed: Vec<serde_json::Value>| {
        let texts = listed
            .iter()
            .map(|d| d["message"].as_str().unwrap().to_string());
        texts.collect::<Vec<_>>()
    };
    for node in [a, b] {
        let listing = deliveries(node, "?protocol=sms").await;
        assert_eq!(bodies(listing), ["from a", "from b"]);
        let localstack = get_json(node, "/_aws/sns/sms-messages").await;
        let numbers = localstack["sms_messages"].as_object().unwrap();
        assert_eq!(numbers.len(), 2, "{localstack}");
    }
    let forget = reqwest::Client::new()
        .delete(format!(
            "{}/_orderly/sns/deliveries?endpoint=%2B15555550100",
            b.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(forget.status(), 204);
    assert_eq!(bodies(deliveries(a, "").await), ["from b"]);
}
