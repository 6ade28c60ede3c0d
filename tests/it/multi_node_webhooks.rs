//! Ordered FIFO webhooks served by three Orderly nodes on one PostgreSQL database: the leader's
//! delivery worker sends what any node published. A real HTTP endpoint fails
//! some first attempts and answers slowly, and checks as requests arrive that no message group
//! ever has two requests in flight (whichever nodes send them) and that each group's requests
//! never go back in publish order. The subscription is confirmed through a node other than the
//! one that sent the confirmation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};

use crate::common::{self, Server};

const NODES: usize = 3;
const GROUPS: usize = 12;
const PER_GROUP: usize = 10;

/// What the endpoint saw, checked as it happens.
#[derive(Default)]
struct Seen {
    /// Per group, requests being answered right now.
    in_flight: HashMap<usize, usize>,
    /// Per group, the index of every request, in arrival order.
    requests: HashMap<usize, Vec<usize>>,
    /// Per group, the indexes answered 200, in order.
    delivered: HashMap<usize, Vec<usize>>,
    /// Requests per message, to fail some first attempts.
    attempts: HashMap<(usize, usize), u32>,
    violations: Vec<String>,
    subscribe_url: Option<String>,
}

fn parse(body: &str) -> (usize, usize) {
    let (group, index) = body.split_once(':').expect("group:index");
    (group.parse().unwrap(), index.parse().unwrap())
}

/// One message in three fails its first attempt with a 500 (retried by the policy).
fn fails_first(group: usize, index: usize) -> bool {
    (group * 7 + index).is_multiple_of(3)
}

async fn endpoint(
    State(seen): State<Arc<Mutex<Seen>>>,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    let json: serde_json::Value = serde_json::from_str(&body).expect("an SNS JSON message");
    if headers
        .get("x-amz-sns-message-type")
        .and_then(|v| v.to_str().ok())
        == Some("SubscriptionConfirmation")
    {
        let url = json["SubscribeURL"].as_str().unwrap().to_string();
        seen.lock().unwrap().subscribe_url = Some(url);
        return StatusCode::OK;
    }
    let (group, index) = parse(json["Message"].as_str().unwrap());
    let fail = {
        let mut seen = seen.lock().unwrap();
        let in_flight = seen.in_flight.entry(group).or_default();
        *in_flight += 1;
        if *in_flight > 1 {
            let text = format!("group {group}: {in_flight} requests in flight at once");
            seen.violations.push(text);
        }
        let requests = seen.requests.entry(group).or_default();
        let before = requests.last().copied();
        requests.push(index);
        if let Some(before) = before.filter(|before| *before > index) {
            let text = format!("group {group}: {index} sent after {before}");
            seen.violations.push(text);
        }
        let attempts = seen.attempts.entry((group, index)).or_default();
        *attempts += 1;
        *attempts == 1 && fails_first(group, index)
    };
    // Slow enough that another node would have time to send the group's next message.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut seen = seen.lock().unwrap();
    *seen.in_flight.get_mut(&group).unwrap() -= 1;
    if fail {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    seen.delivered.entry(group).or_default().push(index);
    StatusCode::OK
}

async fn start_endpoint(seen: Arc<Mutex<Seen>>) -> String {
    let app = axum::Router::new()
        .route("/prices", axum::routing::post(endpoint))
        .with_state(seen);
    format!("http://{}/prices", serve_on_loopback(app).await)
}

/// Serves `app` on a free loopback port for the rest of the test; returns its address.
pub(crate) async fn serve_on_loopback(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn publish_groups(server: &Server, topic: &str, node: usize) {
    // Each group has one publisher, so its order is the order of that publisher's calls.
    for group in (node..GROUPS).step_by(NODES) {
        for index in 0..PER_GROUP {
            server
                .sns
                .publish()
                .topic_arn(topic)
                .message(format!("{group}:{index}"))
                .message_group_id(format!("g{group}"))
                .send()
                .await
                .expect("published");
        }
    }
}

#[tokio::test]
async fn ordered_webhooks_keep_group_order_across_nodes() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let clock = common::manual_clock();
    let servers = crate::multi_node::start_nodes(&url, NODES, &clock, |config| {
        config.fifo_http_subscriptions = true;
    })
    .await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let endpoint = start_endpoint(seen.clone()).await;
    let topic = common::fifo_topic(&servers[0], "prices.fifo").await;
    // Retries a second apart, enough of them that no message runs out.
    let policy = r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":1,"numRetries":10,"numNoDelayRetries":0,"numMinDelayRetries":10,"numMaxDelayRetries":0,"backoffFunction":"linear"}}"#;
    servers[1]
        .sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("http")
        .endpoint(&endpoint)
        .attributes("DeliveryPolicy", policy)
        .send()
        .await
        .unwrap();
    // Real time, bounded: the confirmation is a real HTTP request to the endpoint.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let subscribe_url = loop {
        if let Some(url) = seen.lock().unwrap().subscribe_url.clone() {
            break url;
        }
        assert!(std::time::Instant::now() < deadline, "no confirmation came");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // Any node confirms what was subscribed through another.
    let on_node_2 = subscribe_url.replace(&servers[1].url(), &servers[2].url());
    assert_ne!(on_node_2, subscribe_url);
    let confirmed = reqwest::get(&on_node_2).await.unwrap();
    assert_eq!(
        confirmed.status(),
        200,
        "{}",
        confirmed.text().await.unwrap()
    );

    // Time passes while they work, so retries fall due.
    let ticking = {
        let clock = clock.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                clock.advance_millis(100);
            }
        })
    };
    let mut publishers = Vec::new();
    for (node, server) in servers.iter().enumerate() {
        let (server, topic) = (server.clone(), topic.clone());
        publishers.push(tokio::spawn(async move {
            publish_groups(&server, &topic, node).await
        }));
    }
    for publisher in publishers {
        publisher.await.expect("no publisher panicked");
    }
    let all_delivered = async {
        loop {
            let delivered: usize = seen.lock().unwrap().delivered.values().map(Vec::len).sum();
            if delivered >= GROUPS * PER_GROUP {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), all_delivered)
        .await
        .expect("every notification delivered within two minutes");
    // Anything sent twice would have been sent by the time the outbox holds nothing more,
    // waiting or in flight, on any node.
    let lane = || async {
        common::get_json(&servers[0], "/_orderly/webhooks").await["Subscriptions"][0].clone()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lane = lane().await;
        if lane["Pending"] == 0 && lane["InFlight"] == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "outbox not empty: {lane}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ticking.abort();

    let retried_and_failing = {
        let seen = seen.lock().unwrap();
        assert!(seen.violations.is_empty(), "{:#?}", seen.violations);
        let expected: Vec<usize> = (0..PER_GROUP).collect();
        for group in 0..GROUPS {
            assert_eq!(
                seen.delivered[&group], expected,
                "group {group}: in order, each once"
            );
        }
        let retried = seen.attempts.values().filter(|n| **n > 1).count();
        let failing = (0..GROUPS)
            .flat_map(|g| (0..PER_GROUP).map(move |i| (g, i)))
            .filter(|(g, i)| fails_first(*g, *i))
            .count();
        assert_eq!(retried, failing, "each failed first attempt retried once");
        failing
    };

    // The counters are the leader's: any node reports all nodes' deliveries.
    let lane = lane().await;
    assert_eq!(
        lane["Delivered"].as_u64(),
        Some((GROUPS * PER_GROUP) as u64)
    );
    assert_eq!(lane["Retries"].as_u64(), Some(retried_and_failing as u64));
    assert_eq!(lane["Pending"].as_u64(), Some(0));
}
