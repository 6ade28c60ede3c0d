//! Ordered webhooks across the loss of the leader, with real processes on one PostgreSQL
//! database and a real receiver: the leader is killed (SIGKILL), or frozen past its lease
//! (SIGSTOP) and woken once another node leads (SIGCONT), while two other nodes publish to a
//! FIFO topic with an HTTP subscription. Per message group the receiver must never see a
//! sequence number go back, nor one sequence number on two messages, and every acknowledged
//! publish must arrive at least once. (The tests' names start with `multi_node`, so the
//! suite's passes on a database, which start no nodes of their own, leave them out.)

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};

use crate::common;
use crate::log_in_database::{cluster, process_server, signal};

const GROUPS: usize = 4;

/// What the receiver got, in arrival order per group: (sequence number, publish index).
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) arrivals: HashMap<usize, Vec<(u128, usize)>>,
    /// Who sent each notification, and when it arrived.
    pub(crate) senders: Vec<(IpAddr, Instant)>,
    subscribe_url: Option<String>,
    /// Answer every notification 500 (it is retried), and how many were.
    failing: bool,
    refused: usize,
}

impl Seen {
    pub(crate) fn arrived(&self) -> usize {
        self.arrivals.values().map(Vec::len).sum()
    }
}

async fn endpoint(
    State(seen): State<Arc<Mutex<Seen>>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    let json: serde_json::Value = serde_json::from_str(&body).expect("an SNS JSON message");
    let kind = headers
        .get("x-amz-sns-message-type")
        .and_then(|v| v.to_str().ok());
    let mut seen = seen.lock().unwrap();
    seen.senders.push((peer.ip(), Instant::now()));
    if kind == Some("SubscriptionConfirmation") {
        seen.subscribe_url = Some(json["SubscribeURL"].as_str().unwrap().to_string());
        return StatusCode::OK;
    }
    if seen.failing {
        seen.refused += 1;
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let (group, index) = json["Message"].as_str().unwrap().split_once(':').unwrap();
    let sequence: u128 = json["SequenceNumber"].as_str().unwrap().parse().unwrap();
    let arrival = (sequence, index.parse().unwrap());
    seen.arrivals
        .entry(group.parse().unwrap())
        .or_default()
        .push(arrival);
    StatusCode::OK
}

/// The receiver on `ip` (a free port), for the rest of the test; returns its URL.
pub(crate) async fn start_endpoint(ip: &str, seen: Arc<Mutex<Seen>>) -> String {
    let app = axum::Router::new()
        .route("/prices", axum::routing::post(endpoint))
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/prices")
}

/// Subscribes `endpoint` to `topic` through `server` and confirms it.
pub(crate) async fn subscribe(
    server: &common::Server,
    topic: &str,
    endpoint: &str,
    seen: &Mutex<Seen>,
) {
    // Retries a second apart, enough that none runs out while a leader is replaced.
    let policy = r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":1,"numRetries":100,"numNoDelayRetries":0,"numMinDelayRetries":100,"numMaxDelayRetries":0,"backoffFunction":"linear"}}"#;
    let subscribe = server.sns.subscribe().topic_arn(topic).protocol("http");
    let subscribe = subscribe.attributes("DeliveryPolicy", policy);
    subscribe.endpoint(endpoint).send().await.unwrap();
    // Real time, bounded: the confirmation is a real request to the endpoint.
    let deadline = Instant::now() + Duration::from_secs(20);
    let subscribe_url = loop {
        if let Some(url) = seen.lock().unwrap().subscribe_url.clone() {
            break url;
        }
        assert!(Instant::now() < deadline, "no confirmation came");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let confirmed = reqwest::get(&subscribe_url).await.unwrap();
    assert_eq!(confirmed.status(), 200);
}

/// Publishes to `group` through `server` until told to stop, noting each acknowledged index.
pub(crate) async fn publish(
    server: Arc<common::Server>,
    topic: String,
    group: usize,
    acknowledged: Arc<Mutex<Vec<(usize, usize)>>>,
    stop: Arc<AtomicBool>,
) {
    for index in 0.. {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let sent = server
            .sns
            .publish()
            .topic_arn(&topic)
            .message(format!("{group}:{index}"))
            .message_group_id(format!("g{group}"))
            .send()
            .await;
        match sent {
            Ok(_) => acknowledged.lock().unwrap().push((group, index)),
            // No leader for a moment: that publish may or may not be kept; go on.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

enum Loss {
    Killed,
    Frozen,
}

fn across(loss: Loss) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(url) = runtime.block_on(common::fresh_database()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let args = ["--storage", url.as_str(), "--fifo-http-subscriptions"];
    let mut leader = crate::binary::start(dir.path(), &args, "warn");
    let others = [
        crate::binary::start(dir.path(), &args, "warn"),
        crate::binary::start(dir.path(), &args, "warn"),
    ];
    let on_leader = process_server(leader.addr);
    let publishers: Vec<Arc<common::Server>> = others
        .iter()
        .map(|node| Arc::new(process_server(node.addr)))
        .collect();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let endpoint = runtime.block_on(start_endpoint("127.0.0.1", seen.clone()));
    let topic = runtime.block_on(common::fifo_topic(&publishers[0], "prices.fifo"));
    runtime.block_on(subscribe(&publishers[0], &topic, &endpoint, &seen));

    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let work: Vec<_> = (0..GROUPS)
        .map(|group| {
            let server = publishers[group % 2].clone();
            let (topic, acknowledged, stop) = (topic.clone(), acknowledged.clone(), stop.clone());
            runtime.spawn(publish(server, topic, group, acknowledged, stop))
        })
        .collect();
    let arrived = || -> usize { seen.lock().unwrap().arrived() };
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    until("no notification under load", &|| arrived() >= 100);
    let leads = |server: &common::Server| runtime.block_on(cluster(server))["role"] == "leader";
    match loss {
        Loss::Killed => {
            leader.child.kill().expect("SIGKILL");
            let _ = leader.child.wait();
            until("nobody leads", &|| publishers.iter().any(|p| leads(p)));
        }
        Loss::Frozen => {
            // Frozen with retries scheduled: they fall due while it sleeps, so the moment it
            // wakes it would send them (nothing to write first) unless it knows it may not.
            seen.lock().unwrap().failing = true;
            until("no notification refused", &|| {
                seen.lock().unwrap().refused >= GROUPS
            });
            signal(&leader, "-STOP");
            until("nobody leads", &|| publishers.iter().any(|p| leads(p)));
            seen.lock().unwrap().failing = false;
            // Past the lease by far: the old leader's deliveries are the new leader's now.
            let after_takeover = arrived() + 100;
            until("no notification after the takeover", &|| {
                arrived() >= after_takeover
            });
            signal(&leader, "-CONT");
            until("the woken leader never stepped down", &|| {
                runtime.block_on(cluster(&on_leader))["role"] == "standby"
            });
        }
    }
    let after_loss = arrived() + 100;
    until("no notification after the loss", &|| {
        arrived() >= after_loss
    });
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(async {
        for task in work {
            task.await.expect("no publisher panicked");
        }
    });

    assert_in_order_and_all_arrived(&acknowledged.lock().unwrap(), &seen);
    drop((leader, others));
}

/// Every acknowledged publish arrives (retries included; waited for, with a bound); per
/// group, no sequence number goes back or names two messages.
pub(crate) fn assert_in_order_and_all_arrived(acknowledged: &[(usize, usize)], seen: &Mutex<Seen>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !acknowledged.iter().all(|(group, index)| {
        let seen = seen.lock().unwrap();
        let arrivals = seen.arrivals.get(group);
        arrivals.is_some_and(|a| a.iter().any(|(_, i)| i == index))
    }) {
        assert!(
            Instant::now() < deadline,
            "an acknowledged publish never arrived"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let seen = seen.lock().unwrap();
    for (group, arrivals) in &seen.arrivals {
        let mut numbered: HashMap<u128, usize> = HashMap::new();
        for pair in arrivals.windows(2) {
            let ((before, _), (after, _)) = (pair[0], pair[1]);
            assert!(
                after >= before,
                "group {group}: {after} after {before}: {arrivals:?}"
            );
        }
        for (sequence, index) in arrivals {
            let first = *numbered.entry(*sequence).or_insert(*index);
            assert_eq!(first, *index, "group {group}: {sequence} on two messages");
        }
    }
    eprintln!(
        "{} acknowledged publishes, {} notifications received",
        acknowledged.len(),
        seen.arrived()
    );
}

#[test]
fn multi_node_webhooks_keep_group_order_when_the_leader_is_killed() {
    across(Loss::Killed);
}

#[test]
fn multi_node_webhooks_keep_group_order_when_the_leader_is_frozen_and_woken() {
    across(Loss::Frozen);
}
