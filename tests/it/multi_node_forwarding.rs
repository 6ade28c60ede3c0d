//! How a standby passes requests on, as a hostile or merely old-fashioned client finds it: its
//! own host rules, requests with no path, no `Host` or every header allowed, a leader at its
//! connection limit, a leader frozen while it holds a request, and readiness for balancers.
//! Real processes on a real PostgreSQL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::binary::{start, Process};
use crate::common;
use crate::log_in_database::{cluster, process_server, signal};
use crate::multi_node_connections::gauge;

/// A leader started with `leader_args` besides the storage, then a standby of it.
fn leader_and_standby(url: &str, leader_args: &[&str]) -> (tempfile::TempDir, Process, Process) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut args = vec!["--storage", url];
    args.extend_from_slice(leader_args);
    let leader = start(dir.path(), &args, "warn");
    let standby = start(dir.path(), &["--storage", url], "warn");
    (dir, leader, standby)
}

/// Writes `request` on a new connection and reads until the server closes it (5 s at most).
async fn raw(addr: std::net::SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    stream.write_all(request.as_bytes()).await.expect("written");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer));
    read.await.expect("closed within 5 s").expect("read");
    String::from_utf8_lossy(&answer).into_owned()
}

fn status_line(answer: &str) -> &str {
    answer.lines().next().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_node_both_nodes_are_ready_and_a_standby_keeps_its_own_host_and_origin_rules() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    // The leader takes a name and an origin the standby does not.
    let leader_rules = [
        "--allow-host",
        "elsewhere.test",
        "--cors-allow",
        "http://page.test",
    ];
    let (_dir, leader, standby) = leader_and_standby(&url, &leader_rules);
    assert_eq!(
        cluster(&process_server(standby.addr)).await["role"],
        "standby"
    );
    for node in [&leader, &standby] {
        let ready = reqwest::get(format!("http://{}/health/ready", node.addr))
            .await
            .expect("answered");
        assert_eq!(ready.status().as_u16(), 200, "{}", node.addr);
    }
    let listing = |addr: std::net::SocketAddr| async move {
        let response = reqwest::Client::new()
            .get(format!(
                "http://{addr}/?Action=ListQueues&Version=2012-11-05"
            ))
            .header("host", format!("elsewhere.test:{}", addr.port()))
            .send()
            .await
            .expect("answered");
        let status = response.status().as_u16();
        (status, response.text().await.expect("a body"))
    };
    assert_eq!(
        listing(leader.addr).await.0,
        200,
        "the leader allows the name"
    );
    let (status, body) = listing(standby.addr).await;
    assert_eq!(status, 403, "the standby judges by its own rules: {body}");
    assert_eq!(
        common::xml_text(&body, "Code"),
        Some("AccessDenied"),
        "{body}"
    );
    // A page of an origin the leader allows, the standby not.
    let from_page = |addr: std::net::SocketAddr| async move {
        let response = reqwest::Client::new()
            .get(format!(
                "http://{addr}/?Action=ListQueues&Version=2012-11-05"
            ))
            .header("origin", "http://page.test")
            .send()
            .await
            .expect("answered");
        response.status().as_u16()
    };
    assert_eq!(
        from_page(leader.addr).await,
        200,
        "the leader allows the origin"
    );
    assert_eq!(from_page(standby.addr).await, 403, "the standby does not");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_node_odd_requests_through_a_standby_are_answered_as_the_leader_answers_them() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let (_dir, leader, standby) = leader_and_standby(&url, &[]);
    // No path: answered alike, never as a request of unknown outcome.
    let options = "OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let (direct, passed) = (
        raw(leader.addr, options).await,
        raw(standby.addr, options).await,
    );
    assert!(!status_line(&direct).contains(" 500"), "{direct}");
    assert_eq!(status_line(&passed), status_line(&direct), "{passed}");

    // Every header a request may have (128 lines), and one more.
    let headers = |count: usize| {
        let mut request = String::from("GET /?Action=ListQueues&Version=2012-11-05 HTTP/1.1\r\n");
        request.push_str("Host: 127.0.0.1\r\nConnection: close\r\n");
        for n in 0..count - 2 {
            request.push_str(&format!("x-filler-{n}: {n}\r\n"));
        }
        request + "\r\n"
    };
    let full = raw(standby.addr, &headers(128)).await;
    assert!(status_line(&full).contains(" 200"), "{full:.300}");
    let over = raw(leader.addr, &headers(129)).await;
    assert!(status_line(&over).contains(" 431"), "{over:.300}");

    // A header the client names in `Connection` stays with its connection.
    let named = "GET /?Action=ListQueues&Version=2012-11-05 HTTP/1.1\r\nHost: 127.0.0.1\r\n\
        Connection: close, x-amz-target\r\nx-amz-target: AmazonSQS.DeleteQueue\r\n\r\n";
    let answer = raw(standby.addr, named).await;
    assert!(status_line(&answer).contains(" 200"), "{answer:.500}");
    assert!(answer.contains("ListQueuesResult"), "{answer:.500}");

    // HTTP/1.0 without Host: URLs name the node the client reached.
    let on_standby = process_server(standby.addr);
    let queue = common::create_queue(&on_standby, "old-client", &[]).await;
    assert!(queue.contains(&leader.addr.to_string()) || queue.contains(&standby.addr.to_string()));
    let old = "GET /?Action=GetQueueUrl&QueueName=old-client&Version=2012-11-05 HTTP/1.0\r\n\r\n";
    let answer = raw(standby.addr, old).await;
    assert!(status_line(&answer).contains(" 200"), "{answer}");
    let named = common::xml_text(&answer, "QueueUrl").expect("a URL");
    assert!(named.contains(&standby.addr.to_string()), "{named}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_node_a_standby_does_not_use_up_the_leaders_connections() {
    // One link carries them all.
    standby_leaves_the_leaders_connections(&[], 1).await;
}

/// As above, the standby passing requests on over HTTP (as to a leader whose URL is
/// `https://`): each request names the standby, so its connections are held in the peers'
/// slots, whether opened within the leader's limit or past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_node_a_standby_passing_requests_on_over_http_does_not_use_up_the_leaders_connections(
) {
    // A connection for each poll, more than the leader lets clients hold.
    standby_leaves_the_leaders_connections(&["--node-link", "false"], 17).await;
}

/// Long polls through a standby started with `standby_args`, twice as many as the leader's
/// connection limit, are each answered at once (none refused and asked again); the leader
/// holds at least `peers` of the standby's connections in the peers' slots meanwhile.
async fn standby_leaves_the_leaders_connections(standby_args: &[&str], peers: i64) {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let leader = start(
        dir.path(),
        &["--storage", &url, "--max-connections", "16"],
        "warn",
    );
    let standby = start(
        dir.path(),
        &[&["--storage", &url][..], standby_args].concat(),
        "warn",
    );
    let queue = common::create_queue(&process_server(standby.addr), "polled", &[]).await;
    // Once the leader has read the standby's announcement, it knows the name the standby's
    // requests carry (as it would a second after the standby started).
    let on_leader = process_server(leader.addr);
    let started = Instant::now();
    while !cluster(&on_leader).await["nodes"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!(format!("http://{}", standby.addr)))
    {
        assert!(started.elapsed() < Duration::from_secs(10), "not announced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Twice the leader's limit in long polls at once, each on a connection of its own, each
    // asked once (the SDK's retries would hide a failure).
    let on_standby = Arc::new(process_server(standby.addr));
    let polls: Vec<_> = (0..30)
        .map(|_| {
            let (server, queue) = (on_standby.clone(), queue.clone());
            tokio::spawn(async move {
                let once = aws_sdk_sqs::config::Config::builder()
                    .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled());
                let poll = server.sqs.receive_message().queue_url(queue);
                let poll = poll.wait_time_seconds(2).customize().config_override(once);
                poll.send().await.map(|_| ()).map_err(|e| format!("{e:?}"))
            })
        })
        .collect();
    let mut most = 0;
    while !polls.iter().all(|poll| poll.is_finished()) {
        let held = gauge(&on_leader, "orderly_peer_connections").await;
        most = most.max(held.unwrap_or_default());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for poll in polls {
        poll.await
            .expect("no task panicked")
            .expect("every poll answered");
    }
    assert!(
        most >= peers,
        "the standby's connections in the peers' slots: {most}"
    );
    // What the standby keeps open is few and idle: the leader serves its own clients at once.
    let started = Instant::now();
    for _ in 0..20 {
        let answer = raw(
            leader.addr,
            "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(status_line(&answer).contains(" 200"), "{answer}");
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A leader frozen while it holds a request passed on: the request is answered once another node
/// leads (of unknown outcome, or served), not after the request timeout.
#[test]
fn multi_node_a_request_held_by_a_frozen_leader_is_answered_once_another_leads() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(url) = runtime.block_on(common::fresh_database()) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let args = ["--storage", url.as_str()];
    let old = start(dir.path(), &args, "warn");
    let others = [
        start(dir.path(), &args, "warn"),
        start(dir.path(), &args, "warn"),
    ];
    let nodes: Vec<Arc<common::Server>> = others
        .iter()
        .map(|node| Arc::new(process_server(node.addr)))
        .collect();
    let queue = runtime.block_on(common::create_queue(&nodes[0], "held", &[]));
    signal(&old, "-STOP");
    let asked = Instant::now();
    let address = format!(
        "http://{}/?Action=GetQueueAttributes&Version=2012-11-05&AttributeName.1=All&QueueUrl={queue}",
        others[1].addr
    );
    let answer = runtime.block_on(async {
        let response = reqwest::get(address).await.expect("answered");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    });
    let took = asked.elapsed();
    eprintln!("a request held by a frozen leader was answered in {took:?}: {answer:?}");
    signal(&old, "-CONT");
    // The lease, the other standby's next look at it, and a connection's grace: not the
    // request timeout (60 s).
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert!(matches!(answer.0, 200 | 500), "{answer:?}");
    // And the next request is served by the new leader.
    let attributes = runtime.block_on(common::queue_attributes(&nodes[1], &queue));
    assert!(!attributes.is_empty());
}
