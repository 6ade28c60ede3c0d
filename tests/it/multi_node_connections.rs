//! Connections between nodes and `--max-connections`: what another node opens to this one (a
//! link for the requests it passes on, connections for its pulls) is held in slots of its own,
//! so clients crowding a node to its limit do not cut the other nodes off from it.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{self, Server};
use crate::hostile_clients::{read_until_closed, refused_at_the_limit, take_every_slot_beside};
use crate::log_in_database::database;
use crate::multi_node_shards::{bodies, publish, spread_on, two_spread_nodes_with};
use crate::shards::{drain, name_in, topic_into};

/// A gauge's value in `server`'s `/metrics`, read on a connection closed after it.
pub(crate) async fn gauge(server: &Server, name: &str) -> Option<i64> {
    let mut stream = TcpStream::connect(server.addr).await.ok()?;
    let ask = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    stream.write_all(ask.as_bytes()).await.ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await.ok()?;
    let line = text
        .lines()
        .find(|line| line.starts_with(&format!("{name} ")))?;
    line[name.len() + 1..].trim().parse().ok()
}

/// The name `server` announced itself by in the database at `url`, which its requests to
/// other nodes carry.
async fn announced_name(url: &str, server: &Server) -> String {
    announced_as(url, &server.url())
        .await
        .expect("the node's announcement")
}

/// The name the node reached at `node_url` announced itself by in the database at `url`, once
/// it has.
async fn announced_as(url: &str, node_url: &str) -> Option<String> {
    let row = database(url)
        .await
        .query_opt(
            "SELECT node FROM log_nodes WHERE url = $1 AND node LIKE 'survey %'",
            &[&node_url],
        )
        .await
        .expect("read");
    row.map(|row| row.get(0))
}

/// `server`'s answer to a shard read of the queues in `shard`, asked as `node` on a connection
/// of its own.
async fn shard_read_as(server: &Server, node: &str, shard: u64) -> String {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let ask = format!(
        "GET /_orderly/shard-read?shard={shard}&read=queues&prefix= HTTP/1.1\r\n\
         Host: localhost\r\nX-Orderly-Node: {node}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(ask.as_bytes()).await.unwrap();
    read_until_closed(&mut stream, Duration::from_secs(5))
        .await
        .expect("answered and closed")
}

/// A ListQueues sent to `server` as if `node` had passed it on over HTTP, on a connection of
/// its own: the connection, and the answer's first bytes (all of it when `close`).
async fn passed_on_as(server: &Server, node: &str, close: bool) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let connection = if close { "close" } else { "keep-alive" };
    let ask = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-amz-json-1.0\r\n\
         X-Amz-Target: AmazonSQS.ListQueues\r\nX-Orderly-Forwarded: 1\r\n\
         X-Orderly-Node: {node}\r\nConnection: {connection}\r\nContent-Length: 2\r\n\r\n{{}}"
    );
    stream.write_all(ask.as_bytes()).await.unwrap();
    let answer = if close {
        read_until_closed(&mut stream, Duration::from_secs(5)).await
    } else {
        let mut first = vec![0u8; 8192];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut first)).await;
        let read = read.expect("answered").unwrap();
        Some(String::from_utf8_lossy(&first[..read]).into_owned())
    };
    (stream, answer.expect("answered"))
}

/// With its clients holding every one of its `--max-connections`, a node still serves the
/// other node: what that node passes on comes on its link, its pulls of what crosses shards
/// on their connections, and a read on a connection it opens then, all held in the peers'
/// slots. A client's connection past the limit is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_clients_hold_every_connection_still_serves_the_other_node() {
    still_serves_the_other_node(true).await;
}

/// As above, with requests passed on over HTTP (`--node-link false`, as to a node whose URL
/// is `https://`): they carry the passing node's name, so their connections are held in the
/// peers' slots too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_clients_hold_every_connection_still_serves_what_is_passed_on_over_http() {
    still_serves_the_other_node(false).await;
}

async fn still_serves_the_other_node(node_link: bool) {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let (first, second, led) = two_spread_nodes_with(&url, |config| {
        config.max_connections = Some(4);
        config.node_link = node_link;
        // An HTTP client may open a connection for a request that another one, freed first,
        // then carries: the new one waits unused (so unknown, in a client's slot) until its
        // pool lets it go, at half this.
        config.idle_timeout = 4;
    })
    .await;
    let (of_first, of_second) = (&led[0], &led[1]);
    let shard = |n: u64| n as u32;
    // A topic the second node leads, copied into a queue each node leads, all used through
    // the first: the second is reached on the first's link, and the first pulls the copies
    // for its own queue from the second.
    let topic = name_in("prices", ".fifo", shard(of_second[0]));
    let queues = [
        name_in("desk", ".fifo", shard(of_first[0])),
        name_in("audit", ".fifo", shard(of_second[1])),
    ];
    let (topic, urls) = topic_into(&first.server, &topic, &queues).await;
    publish(&first.server, &topic, 0..3).await;
    for url in &urls {
        assert_eq!(bodies(drain(&first.server, url, 3).await), ["0", "1", "2"]);
    }
    // The first node's link and pull connections sit in the peers' slots; nothing else but
    // the gauge's own reading holds a client's (once any the first opened and never used
    // has closed). Without the link, what was passed on over HTTP went on pooled connections
    // that close once idle: only the pull's is sure to stay.
    let least_peers = if node_link { 2 } else { 1 };
    let started = Instant::now();
    loop {
        let open = gauge(&second.server, "orderly_open_connections").await;
        let peers = gauge(&second.server, "orderly_peer_connections").await;
        if let (Some(open), Some(peers)) = (open, peers) {
            if peers >= least_peers && open - peers <= 1 {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "open {open:?}, of them the other node's {peers:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A connection whose first request the first node passed on over HTTP moves into a
    // peer's slot too, leaving all four to clients.
    let name = announced_name(&url, &first.server).await;
    let (_passed, answer) = passed_on_as(&second.server, &name, false).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let _held = take_every_slot_beside(&second.server, 4, true).await;
    // Every client's slot is held: a fifth is refused.
    refused_at_the_limit(&second.server).await;
    // A connection the first node opens now (a shard read for a listing) is served once its
    // request names that node; the same request naming no node of the database is refused.
    let read = shard_read_as(&second.server, &name, of_second[1]).await;
    assert!(read.starts_with("HTTP/1.1 200"), "{read}");
    assert!(read.contains("audit"), "{read}");
    let stranger = format!("survey {}", uuid::Uuid::new_v4());
    let read = shard_read_as(&second.server, &stranger, of_second[1]).await;
    assert!(read.starts_with("HTTP/1.1 503"), "{read}");
    // So is a request passed on over HTTP, on a connection opened now.
    let (_, answer) = passed_on_as(&second.server, &name, true).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("QueueUrls"), "{answer}");
    let (_, answer) = passed_on_as(&second.server, &stranger, true).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    // The second node still serves the first: the topic's publishes, a receive from its own
    // queue passed on, and the pulls of the copies into the first's queue.
    publish(&first.server, &topic, 3..6).await;
    for url in &urls {
        assert_eq!(bodies(drain(&first.server, url, 3).await), ["3", "4", "5"]);
    }
    second.stop().await;
    first.stop().await;
}

/// Over HTTPS, a connection past the limit is answered too, once its handshake is done: a
/// client's 503, not closed unanswered; one whose first request between nodes names a live
/// node of the database is served (nodes whose URLs are `https://` speak HTTP to one another).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_https_a_connection_past_the_limit_is_answered_and_a_nodes_served() {
    let Some(url) = common::fresh_database().await else {
        return;
    };
    let (ca, cert, key) = crate::tls::certificates();
    let dir = tempfile::tempdir().unwrap();
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_file, cert).unwrap();
    std::fs::write(&key_file, key).unwrap();
    let mut config = spread_on(&url, 2);
    config.tls_cert = Some(cert_file);
    config.tls_key = Some(key_file);
    config.max_connections = Some(2);
    // The connections holding the clients' slots never finish their handshakes.
    config.header_timeout = 60;
    let node =
        common::Stoppable::start(orderly::app::App::bind(&config).await.expect("bind")).await;
    let addr = node.server.addr;
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .resolve("localhost", addr)
        // Each request on a connection of its own.
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let base = format!("https://localhost:{}", addr.port());
    let read_as = |name: &str| {
        (client.get(format!(
            "{base}/_orderly/shard-read?shard=1&read=queues&prefix="
        )))
        .header("x-orderly-node", name)
        .send()
    };
    // Once the node has announced itself and read its own announcement, a read naming it is
    // taken as a node's.
    let started = Instant::now();
    let name = loop {
        if let Some(name) = announced_as(&url, &format!("https://{addr}")).await {
            if read_as(&name)
                .await
                .is_ok_and(|answer| answer.status() == 200)
            {
                break name;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(10), "not announced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _held = [
        TcpStream::connect(addr).await.unwrap(),
        TcpStream::connect(addr).await.unwrap(),
    ];
    // Both slots held (a health check past them is refused, after its handshake).
    let started = Instant::now();
    loop {
        let health = client.get(format!("{base}/health")).send().await;
        let health = health.expect("answered over TLS, not closed");
        if health.status() == 503 {
            assert_eq!(health.headers()["x-orderly-not-served"], "1");
            assert!(health.text().await.unwrap().contains("ServiceUnavailable"));
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{health:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let read = read_as(&name).await.expect("answered");
    assert_eq!(read.status(), 200);
    let stranger = format!("survey {}", uuid::Uuid::new_v4());
    let refused = read_as(&stranger).await.expect("answered");
    assert_eq!(refused.status(), 503);
    // The handshakes never finished hold no stop up.
    let stopping = Instant::now();
    node.stop().await;
    assert!(stopping.elapsed() < Duration::from_secs(10));
}
