//! Clients that are broken or malicious: each request here once crashed the server, held a resource
//! forever, or ran an action nobody signed for. Timeouts are set to a second so that the waits
//! these tests must do on real sockets stay short.

use std::time::{Duration, Instant};

use orderly::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{self, query, signed, xml_text};

fn quick_timeouts() -> Config {
    let mut config = Config::ephemeral();
    config.idle_timeout = 1;
    config.header_timeout = 1;
    config.body_timeout = 1;
    config
}

/// Reads what the server sends until it closes the connection (or `within` passes).
pub(crate) async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&answer).into()),
            Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
        }
    }
}

async fn unsigned_post(server: &common::Server, content_type: &str, body: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(server.url())
        .header("content-type", content_type)
        .body(body.to_string())
        .send()
        .await
        .expect("answer");
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn parameter_names_nested_thousands_deep_get_errors_and_the_server_lives() {
    let server = common::start().await;
    // SNS: ~2,100 dots overflowed the stack, also as an unsigned GET.
    let name = "a.".repeat(2_100) + "a";
    let response = reqwest::get(format!("{}/?Action=ListTopics&{name}=1", server.url()))
        .await
        .expect("an answer, not a dropped connection");
    assert_eq!(response.status().as_u16(), 400);
    let body = response.text().await.unwrap();
    assert_eq!(
        xml_text(&body, "Code"),
        Some("InvalidParameter"),
        "{body:.300}"
    );
    // SQS: ~1,300 levels of batch entries did the same.
    let queue = common::create_queue(&server, "deep", &[]).await;
    let name = "SendMessageBatchRequestEntry.1.".repeat(1_300) + "Id";
    let (status, body) = query(
        &server,
        "/",
        &[
            ("Action", "SendMessageBatch"),
            ("QueueUrl", &queue),
            (&name, "x"),
        ],
    )
    .await;
    assert_eq!(status, 400, "{body:.300}");
    assert_eq!(xml_text(&body, "Code"), Some("InvalidParameterValue"));
    let health = reqwest::get(format!("{}/health", server.url()))
        .await
        .unwrap();
    assert_eq!(health.text().await.unwrap(), "ok");
}

#[tokio::test]
async fn a_body_past_the_limit_gets_an_aws_413_whether_declared_or_streamed() {
    let mut config = Config::ephemeral();
    config.max_request_bytes = 64 * 1024;
    let server = common::start_with(config).await;
    // Declared: refused before the body is read.
    let response = reqwest::Client::new()
        .post(server.url())
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amz-target", "AmazonSQS.ListQueues")
        .header("authorization", signed("sqs"))
        .body(vec![b' '; 64 * 1024 + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let error: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert!(
        error["__type"]
            .as_str()
            .unwrap()
            .ends_with("#RequestEntityTooLargeException"),
        "{error}"
    );
    // Streamed in chunks with no length: nothing past the limit is kept, the rest is read
    // and dropped, and the answer arrives whole (not a reset).
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\nAuthorization: {}\r\nConnection: close\r\n\r\n",
        server.addr,
        signed("sqs")
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = format!("4000\r\n{}\r\n", "a".repeat(0x4000));
    for _ in 0..8 {
        stream.write_all(chunk.as_bytes()).await.unwrap();
    }
    stream.write_all(b"0\r\n\r\n").await.unwrap();
    let answer = read_until_closed(&mut stream, Duration::from_secs(5))
        .await
        .expect("closed");
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:.300}");
    assert!(
        answer.contains("<Code>RequestEntityTooLarge</Code>"),
        "{answer:.500}"
    );
}

#[tokio::test]
async fn the_largest_message_fits_when_every_character_is_escaped_threefold() {
    let server = common::start().await;
    let queue = common::create_queue(&server, "big", &[]).await;
    // 1 MiB of two-byte characters: each is six bytes once form encoded (%C3%A9).
    let body = "é".repeat(512 * 1024);
    let (status, answer) = query(
        &server,
        "/",
        &[
            ("Action", "SendMessage"),
            ("QueueUrl", &queue),
            ("MessageBody", &body),
        ],
    )
    .await;
    assert_eq!(status, 200, "{answer:.300}");
}

#[tokio::test]
async fn idle_connections_and_slow_headers_are_closed() {
    let server = common::start_with(quick_timeouts()).await;
    // Opened, never used.
    let started = Instant::now();
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    assert!(read_until_closed(&mut idle, Duration::from_secs(5))
        .await
        .is_some());
    assert!(started.elapsed() >= Duration::from_millis(900));
    // Slowloris: a header byte every 200 ms keeps the socket busy but the headers never end.
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    let closed = async {
        for byte in b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaa"
        {
            if slow.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    closed.await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "headers were still read after {:?}",
        started.elapsed()
    );
    // Kept alive after a request: closed once idle for the timeout.
    let mut kept = TcpStream::connect(server.addr).await.unwrap();
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut kept, Duration::from_secs(5))
        .await
        .expect("closed after idling");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn a_long_poll_outlives_the_idle_and_header_timeouts() {
    let server = common::start_with(quick_timeouts()).await;
    let queue = common::create_queue(&server, "long", &[]).await;
    let started = Instant::now();
    let received = server
        .sqs
        .receive_message()
        .queue_url(&queue)
        .wait_time_seconds(3)
        .send()
        .await
        .expect("the long poll's connection stays open while it waits");
    assert!(received.messages.unwrap_or_default().is_empty());
    assert!(started.elapsed() >= Duration::from_millis(2_900));
}

#[tokio::test]
async fn a_stalled_body_is_answered_408_and_closed() {
    let server = common::start_with(quick_timeouts()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nAction=ListQueues",
        server.addr
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut stream, Duration::from_secs(5))
        .await
        .expect("closed");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:.300}");
    assert!(
        answer.contains("<Code>RequestTimeout</Code>"),
        "{answer:.500}"
    );
}

/// `count` connections, each answered once so the server has taken it, kept open. With other
/// nodes beside the server, one refused at the limit is asked again (for 5 s at most): one of
/// their connections holds a client's slot until its first request shows whose it is.
pub(crate) async fn take_every_slot(server: &common::Server, count: usize) -> Vec<TcpStream> {
    take_every_slot_beside(server, count, !server.others.is_empty()).await
}

/// `take_every_slot`, with other nodes beside `server` or none.
pub(crate) async fn take_every_slot_beside(
    server: &common::Server,
    count: usize,
    others: bool,
) -> Vec<TcpStream> {
    let started = Instant::now();
    let mut open = Vec::new();
    while open.len() < count {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        while !answer.ends_with(b"ok") {
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                .await
                .expect("an answer within 5 s")
                .unwrap();
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
        }
        if answer.starts_with(b"HTTP/1.1 200") && answer.ends_with(b"ok") {
            open.push(stream);
            continue;
        }
        let text = String::from_utf8_lossy(&answer);
        assert!(
            text.starts_with("HTTP/1.1 503"),
            "closed before answering: {text}"
        );
        // Alone, nothing but this test's connections holds a slot.
        assert!(others, "{} of {count} connections held: {text}", open.len());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{} of {count} connections held: {text}",
            open.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    open
}

/// A client's connection to `server`, every slot held: asks, and is answered 503 and closed;
/// the answer.
pub(crate) async fn refused_at_the_limit(server: &common::Server) -> String {
    let mut refused = TcpStream::connect(server.addr).await.unwrap();
    refused
        .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut refused, Duration::from_secs(5))
        .await
        .expect("answered and closed");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    answer
}

#[tokio::test]
async fn connections_past_the_limit_are_answered_503_and_the_open_ones_keep_working() {
    let mut config = Config::ephemeral();
    config.max_connections = Some(4);
    let server = common::start_with(config).await;
    let mut open = take_every_slot(&server, 4).await;
    // The fifth is told so once it asks, and closed; nothing of its request is acted on.
    let answer = refused_at_the_limit(&server).await;
    assert!(
        answer.contains("<Code>ServiceUnavailable</Code>"),
        "{answer}"
    );
    assert!(answer.contains("x-orderly-not-served: 1"), "{answer}");
    // One that never asks is closed once its time is up.
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    assert_eq!(
        read_until_closed(&mut silent, Duration::from_secs(5)).await,
        Some(String::new())
    );
    for stream in &mut open {
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = read_until_closed(stream, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    // Their slots are free again.
    let health = reqwest::get(format!("{}/health", server.url()))
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
}

/// The opening of a link between nodes, as another node sends it and this one answers it.
const LINK_PREFACE: &[u8; 16] = b"\0orderly-link/1\n";

/// Opens a link as another node would: whether the server answered its opening as a link.
async fn open_link(server: &common::Server) -> (TcpStream, bool) {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(LINK_PREFACE).await.unwrap();
    let mut answer = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut answer))
        .await
        .expect("answered or closed within 5 s");
    let linked = read.is_ok() && &answer == LINK_PREFACE;
    (stream, linked)
}

#[tokio::test]
async fn links_from_other_nodes_take_none_of_the_clients_connections_and_open_past_their_limit() {
    let mut config = Config::ephemeral();
    config.max_connections = Some(2);
    let server = common::start_with(config).await;
    // A link opened first leaves both connections to clients.
    let (_first_link, linked) = open_link(&server).await;
    assert!(linked, "the link was answered");
    let mut open = take_every_slot(&server, 2).await;
    // With every client's connection held, another node's link still opens.
    let (_second_link, linked) = open_link(&server).await;
    assert!(linked, "a link past the clients' limit was answered");
    // The links took nothing from the clients' limit, nor gave them more.
    refused_at_the_limit(&server).await;
    // The clients' connections free, the figures say two connections are the other nodes'.
    for stream in &mut open {
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        read_until_closed(stream, Duration::from_secs(5)).await;
    }
    let started = Instant::now();
    loop {
        let metrics = reqwest::get(format!("{}/metrics", server.url())).await;
        let text = match metrics {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let peers = (text.lines())
            .find_map(|line| line.strip_prefix("orderly_peer_connections "))
            .and_then(|value| value.trim().parse::<u64>().ok());
        // Beside other nodes, theirs are counted too.
        let alone = server.others.is_empty();
        if peers.is_some_and(|peers| peers == 2 || (!alone && peers > 2)) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_past_the_limit_is_answered_even_hundreds_at_once() {
    let mut config = Config::ephemeral();
    config.max_connections = Some(2);
    let server = common::start_with(config).await;
    // Each connection costs this process two descriptors (the test's end and the server's),
    // beside what tests running alongside hold: as the binary does by default, take the
    // hard limit, so a soft limit of a few hundred does not refuse a socket.
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let _open = take_every_slot(&server, 2).await;
    // Far more at once than the server answers at a time (64): the rest wait to be accepted
    // and are answered in turn, none closed unread (a node passing a request on could not
    // tell whether it was acted on). No more than 64 and the listen backlog of Linux before
    // 5.4 (`somaxconn`, 128): past the backlog a connection's request is dropped and sent
    // again a second or more later, after the server gave up waiting for it.
    let asking: Vec<_> = (0..150)
        .map(|_| {
            let addr = server.addr;
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await.unwrap();
                stream
                    .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    .await
                    .unwrap();
                read_until_closed(&mut stream, Duration::from_secs(20)).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in asking {
        answers.push(task.await);
    }
    let unanswered = answers
        .iter()
        .filter(|answer| {
            !matches!(answer, Ok(Some(text)) if text.starts_with("HTTP/1.1 503")
                && text.contains("x-orderly-not-served: 1"))
        })
        .count();
    assert_eq!(unanswered, 0, "of {}", answers.len());
}

#[tokio::test]
async fn unsigned_requests_may_read_but_not_change_anything() {
    let server = common::start().await;
    let queue = common::create_queue(&server, "kept", &[]).await;
    // A form a web page could post cross-origin without a preflight.
    let (status, body) = unsigned_post(
        &server,
        "text/plain",
        &format!("Action=DeleteQueue&QueueUrl={queue}"),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(xml_text(&body, "Code"), Some("MissingAuthenticationToken"));
    let response = reqwest::Client::new()
        .post(server.url())
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amz-target", "AmazonSQS.SendMessage")
        .body(format!(r#"{{"QueueUrl":"{queue}","MessageBody":"x"}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    // SNS as an unsigned GET.
    let response = reqwest::get(format!("{}/?Action=CreateTopic&Name=t", server.url()))
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    // Reads stay open to hand-written scripts.
    let listed = reqwest::get(format!("{}/?Action=ListQueues", server.url()))
        .await
        .unwrap();
    assert_eq!(listed.status().as_u16(), 200);
    assert!(listed.text().await.unwrap().contains(&queue));
    let attributes = server
        .sqs
        .get_queue_attributes()
        .queue_url(&queue)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .expect("the queue is still there");
    assert_eq!(
        attributes.attributes.unwrap()
            [&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages],
        "0"
    );
    let topics = server.sns.list_topics().send().await.unwrap();
    assert!(topics.topics.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn webhooks_are_not_sent_to_orderly_itself() {
    let server = common::start().await;
    let queue = common::create_queue(&server, "target", &[]).await;
    let topic = server
        .sns
        .create_topic()
        .name("hooks")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    // The subscription confirmation is posted at Subscribe, to the endpoint's URL with its query.
    let endpoint = format!(
        "{}/?Action=DeleteQueue&Version=2012-11-05&QueueUrl={queue}",
        server.url()
    );
    server
        .sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("http")
        .endpoint(&endpoint)
        .send()
        .await
        .unwrap();
    // Unsubscribe is open to unsigned requests (it is the UnsubscribeURL), so only the
    // own-address rule keeps a webhook from unsubscribing someone else.
    let victim = server
        .sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint("arn:aws:sqs:us-east-1:000000000000:target")
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap();
    let unsubscriber = format!(
        "{}/?Action=Unsubscribe&SubscriptionArn={victim}",
        server.url()
    );
    server
        .sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("http")
        .endpoint(&unsubscriber)
        .send()
        .await
        .unwrap();
    // Both confirmations were attempted and refused: the inspection API keeps why. A
    // standby's leader sends from another address, so there the standby refuses them itself
    // (403: it passes on no request that carries SNS's message-type header); a node never
    // posts them to its own address.
    let errors = common::delivery_errors(&server, 2).await;
    // Through nodes leading their shares, the node leading the topic refuses another node's
    // address as it refuses its own.
    let why: &[&str] = match common::test_storage() {
        Some(common::TestStorage::Standby) => &["HTTP 403"],
        Some(common::TestStorage::Spread) => &[
            "this server's own address",
            "another node of this server's database",
        ],
        _ => &["this server's own address"],
    };
    let said = |e: &String| why.iter().any(|why| e.contains(why));
    assert!(errors.iter().all(said), "{errors:?}");
    let attributes = server
        .sns
        .get_subscription_attributes()
        .subscription_arn(&victim)
        .send()
        .await;
    assert!(attributes.is_ok(), "the webhook unsubscribed {victim}");
    server
        .sqs
        .get_queue_url()
        .queue_name("target")
        .send()
        .await
        .expect("the queue survived the webhook");
}

#[tokio::test]
async fn query_parameters_that_are_not_utf8_are_refused_and_nothing_is_stored() {
    let server = common::start().await;
    let queue = common::create_queue(&server, "utf8", &[]).await;
    let response = reqwest::Client::new()
        .post(server.url())
        .header("content-type", "application/x-www-form-urlencoded")
        .header("authorization", signed("sqs"))
        .body(format!(
            "Action=SendMessage&QueueUrl={queue}&MessageBody=ok%FF%FE"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let body = response.text().await.unwrap();
    assert_eq!(
        xml_text(&body, "Code"),
        Some("InvalidParameterValue"),
        "{body}"
    );
    let received = server
        .sqs
        .receive_message()
        .queue_url(&queue)
        .send()
        .await
        .unwrap();
    assert!(received.messages.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn a_json_array_is_no_request() {
    let server = common::start().await;
    let response = reqwest::Client::new()
        .post(server.url())
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amz-target", "AmazonSQS.ListQueues")
        .header("authorization", signed("sqs"))
        .body("[]")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let error: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert!(
        error["__type"]
            .as_str()
            .unwrap()
            .ends_with("#SerializationException"),
        "{error}"
    );
}

#[tokio::test]
async fn a_host_no_url_can_hold_is_refused_and_a_huge_one_never_read() {
    let server = common::start().await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    // Under .localhost, so that it passes the loopback-name rule and meets the length rule.
    let host = "h".repeat(1_000) + ".localhost";
    let request =
        format!("GET /?Action=ListQueues HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut stream, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:.300}");
    assert!(!answer.contains(&host));
    // 200 KB of Host: past the head limit, refused by the HTTP layer without an echo.
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let host = "h".repeat(200_000);
    let request = format!("GET /?Action=ListQueues HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let _ = stream.write_all(request.as_bytes()).await;
    let answer = read_until_closed(&mut stream, Duration::from_secs(5))
        .await
        .unwrap_or_default();
    assert!(answer.len() < 1_000, "{answer:.300}");
    assert!(!answer.starts_with("HTTP/1.1 200"), "{answer:.300}");
}

#[tokio::test]
async fn the_data_directory_and_its_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    let mut config = Config::ephemeral();
    config.ephemeral = false;
    config.data_dir = dir.clone();
    let server = common::start_with(config).await;
    let queue = common::create_queue(&server, "private", &[]).await;
    server
        .sqs
        .send_message()
        .queue_url(&queue)
        .message_body("secret")
        .send()
        .await
        .unwrap();
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        files
            .iter()
            .any(|f| f.extension().is_some_and(|e| e == "wal")),
        "{files:?}"
    );
    for file in files {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
}

#[tokio::test]
async fn pages_on_other_origins_are_refused_and_allowed_ones_get_cors_answers() {
    let server = common::start().await;
    let create = |origin: &'static str, url: String| {
        reqwest::Client::new()
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("authorization", signed("sqs"))
            .header("origin", origin)
            .body("Action=CreateQueue&QueueName=from-a-page")
            .send()
    };
    let refused = create("http://evil.test", server.url()).await.unwrap();
    assert_eq!(refused.status().as_u16(), 403);
    let body = refused.text().await.unwrap();
    assert_eq!(xml_text(&body, "Code"), Some("AccessDenied"), "{body}");
    let queues = server.sqs.list_queues().send().await.unwrap();
    assert!(queues.queue_urls.unwrap_or_default().is_empty());

    let mut config = Config::ephemeral();
    config.cors_allow = "http://app.test".into();
    let server = common::start_with(config).await;
    let preflight = reqwest::Client::new()
        .request(reqwest::Method::OPTIONS, server.url())
        .header("origin", "http://app.test")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, x-amz-target",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status().as_u16(), 200);
    let headers = preflight.headers();
    assert_eq!(headers["access-control-allow-origin"], "http://app.test");
    assert!(headers["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .contains("x-amz-target"));
    // The developer endpoint that forgets captured deliveries is asked with DELETE.
    let methods = headers["access-control-allow-methods"].to_str().unwrap();
    assert!(
        methods.contains("DELETE") && methods.contains("POST"),
        "{methods}"
    );
    let allowed = create("http://app.test", server.url()).await.unwrap();
    assert_eq!(allowed.status().as_u16(), 200);
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "http://app.test"
    );
    assert!(allowed.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .contains("x-amzn-requestid"));
    let other = create("http://evil.test", server.url()).await.unwrap();
    assert_eq!(other.status().as_u16(), 403);
}

#[tokio::test]
async fn a_rebound_host_name_is_refused_while_listening_on_loopback() {
    let server = common::start().await;
    let ask = |host: &'static str| {
        let addr = server.addr;
        async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let request = format!(
                "GET /?Action=ListQueues HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            read_until_closed(&mut stream, Duration::from_secs(5))
                .await
                .unwrap()
        }
    };
    let answer = ask("attacker.example:4566").await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer:.300}");
    assert!(
        answer.contains("<Code>AccessDenied</Code>"),
        "{answer:.500}"
    );
    for host in [
        "localhost:4566",
        "127.0.0.1:4566",
        "sqs.localhost.localstack.cloud:4566",
    ] {
        let answer = ask(host).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{host}: {answer:.300}");
    }
}

#[tokio::test]
async fn a_proxy_in_the_environment_is_not_used_for_webhooks() {
    let proxy = crate::receiver::Receiver::start().await;
    let endpoint = crate::receiver::Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy_url = proxy.url("");
    let server = crate::binary::start_with_env(
        dir.path(),
        &[],
        "error",
        &[
            ("HTTP_PROXY", proxy_url.as_str()),
            ("http_proxy", proxy_url.as_str()),
            ("ALL_PROXY", proxy_url.as_str()),
        ],
    );
    let sns = common::sns_client(server.addr);
    let topic = sns.create_topic().name("proxied").send().await.unwrap();
    // A host name, which a proxy would resolve where the allow-list cannot see.
    let hook = endpoint.url("/hook").replace("127.0.0.1", "localhost");
    sns.subscribe()
        .topic_arn(topic.topic_arn().unwrap())
        .protocol("http")
        .endpoint(&hook)
        .send()
        .await
        .unwrap();
    let confirmation = endpoint.within(5_000).await;
    assert!(confirmation.is_some(), "the endpoint got no confirmation");
    // Sent through the proxy, it would have reached the proxy (which answers, and forwards
    // nothing) instead of the endpoint.
    assert!(proxy.within(0).await.is_none(), "the proxy was used");
}
