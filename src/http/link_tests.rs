//! A link between nodes end to end, on real sockets: `link_client` asking, `link_server`
//! answering with a router of its own.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::routing::post;
use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use super::link_client::{authority, Links, Passed};
use super::link_frame::LinkRequest;
use super::link_server::{opens_link, serve_link, LinkLimits};

/// A router that echoes the body, holding `/slow` (which notifies `started`) until `release`
/// is notified, and a listener that serves links with it; the listener's URL.
async fn linked(release: Arc<Notify>, started: Arc<Notify>) -> (String, watch::Sender<bool>) {
    let router = axum::Router::new()
        .route(
            "/echo",
            post(|headers: HeaderMap, body: Bytes| async move {
                let length = (headers.get("content-length").cloned())
                    .unwrap_or(HeaderValue::from_static("none"));
                ([("x-length", length)], body)
            }),
        )
        .route(
            "/panic",
            post(|| async {
                if true {
                    panic!("a handler that panics");
                }
                "never"
            }),
        )
        .route(
            "/slow",
            post(move || async move {
                started.notify_one();
                release.notified().await;
                "slow"
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    let (closing, closed) = watch::channel(false);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let mut first = [0u8; 1];
            assert_eq!(stream.peek(&mut first).await.expect("peeked"), 1);
            assert!(opens_link(first[0]));
            let (router, closed) = (router.clone(), closed.clone());
            let limits = LinkLimits {
                frame_bytes: 4096,
                idle: Duration::from_secs(60),
            };
            tokio::spawn(serve_link(stream, move || router.clone(), limits, closed));
        }
    });
    (url, closing)
}

fn request(path: &str, body: &'static [u8]) -> LinkRequest {
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("client.example"));
    LinkRequest {
        method: Method::POST,
        path: path.into(),
        headers,
        body: Bytes::from_static(body),
    }
}

/// `count` requests to `/echo` on `url`, each begun at once on a task of its own, whose body
/// names its number: each task's number and what became of its request.
fn echoes(
    links: &Arc<Links>,
    url: &str,
    count: usize,
) -> Vec<tokio::task::JoinHandle<(usize, Passed)>> {
    (0..count)
        .map(|i| {
            let (links, url) = (links.clone(), url.to_string());
            tokio::spawn(async move {
                let body: &'static [u8] = Box::leak(format!("body {i}").into_bytes().into());
                (i, links.send(&url, &request("/echo", body)).await)
            })
        })
        .collect()
}

#[tokio::test]
async fn answers_come_back_each_to_its_request_and_a_slow_one_holds_back_no_other() {
    let release = Arc::new(Notify::new());
    let (url, _closing) = linked(release.clone(), Arc::new(Notify::new())).await;
    let links = Arc::new(Links::new(
        Duration::from_secs(2),
        Duration::from_secs(60),
        Counter::default(),
    ));
    assert!(links.usable(&url));

    let slow = tokio::spawn({
        let (links, url) = (links.clone(), url.clone());
        async move { links.send(&url, &request("/slow", b"")).await }
    });
    // Many at once, on the one link, while the slow one waits.
    for echo in echoes(&links, &url, 64) {
        let (i, sent) = echo.await.expect("sent");
        let Passed::Answered(answer) = sent else {
            panic!("request {i}: {sent:?}");
        };
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.body, format!("body {i}"));
        // The length the client's signature may cover is given as it sent it.
        let length = format!("body {i}").len().to_string();
        assert_eq!(answer.headers["x-length"], length.as_str());
    }
    assert!(!slow.is_finished());
    release.notify_one();
    let Passed::Answered(answer) = slow.await.expect("sent") else {
        panic!("the slow request was not answered");
    };
    assert_eq!(answer.body, "slow");
}

#[tokio::test]
async fn a_frame_past_the_limit_is_refused_alone_and_the_link_goes_on() {
    let (url, _closing) = linked(Arc::new(Notify::new()), Arc::new(Notify::new())).await;
    let links = Arc::new(Links::new(
        Duration::from_secs(2),
        Duration::from_secs(60),
        Counter::default(),
    ));
    let big: &'static [u8] = Box::leak(vec![b'x'; 8192].into_boxed_slice());
    // Sent at once with a small one behind it on the same link.
    let (big, small) = (request("/echo", big), request("/echo", b"after"));
    let (refused, after) = tokio::join!(links.send(&url, &big), links.send(&url, &small));
    let Passed::Answered(refused) = refused else {
        panic!("a frame past the limit: {refused:?}");
    };
    assert_eq!(refused.status, StatusCode::PAYLOAD_TOO_LARGE);
    let Passed::Answered(after) = after else {
        panic!("the request after it: {after:?}");
    };
    assert_eq!(after.body, "after");
}

#[tokio::test]
async fn a_link_idle_past_its_time_closes_saying_it_read_nothing_more() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let address = listener.local_addr().expect("an address");
    let router = axum::Router::new();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("accepted");
        let limits = LinkLimits {
            frame_bytes: 4096,
            idle: Duration::from_millis(100),
        };
        let (_closing, closed) = watch::channel(false);
        serve_link(stream, move || router.clone(), limits, closed).await;
    });
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connected");
    stream
        .write_all(super::link_frame::PREFACE)
        .await
        .expect("written");
    // The preface back, then, with nothing asked, the closing frame and the end.
    let mut heard = Vec::new();
    stream
        .read_to_end(&mut heard)
        .await
        .expect("read to the end");
    let mut heard = bytes::BytesMut::from(&heard[..]);
    assert_eq!(&heard.split_to(16)[..], &super::link_frame::PREFACE[..]);
    match super::link_frame::next_frame(&mut heard, 1 << 20) {
        super::link_frame::Next::Frame(id, _) => assert_eq!(id, super::link_frame::CLOSING),
        other => panic!("not the closing frame: {other:?}"),
    }
    assert!(heard.is_empty());
}

#[tokio::test]
async fn a_node_that_answers_the_preface_with_http_is_asked_over_http() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accepted");
        let mut preface = [0u8; 16];
        let _ = stream.read_exact(&mut preface).await;
        let _ = (stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")).await;
    });
    let links = Links::new(
        Duration::from_secs(2),
        Duration::from_secs(60),
        Counter::default(),
    );
    assert!(links.usable(&url));
    assert!(matches!(
        links.send(&url, &request("/echo", b"x")).await,
        Passed::UseHttp
    ));
    assert!(!links.usable(&url));
    // Nor is a link tried to a node whose URL is not plain HTTP; one that names no port is
    // asked on HTTP's.
    assert!(!links.usable("https://127.0.0.1:1"));
    assert!(links.usable("http://node-a"));
    assert_eq!(authority("http://node-a").as_deref(), Some("node-a:80"));
    assert_eq!(
        authority("http://[::1]:4566/").as_deref(),
        Some("[::1]:4566")
    );
}

#[tokio::test]
async fn a_node_that_cannot_be_reached_leaves_the_request_unsent() {
    // A port just freed: nothing listens there.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    drop(listener);
    let links = Links::new(
        Duration::from_secs(2),
        Duration::from_secs(60),
        Counter::default(),
    );
    assert!(matches!(
        links.send(&url, &request("/echo", b"x")).await,
        Passed::NotSent(_)
    ));
    assert!(links.usable(&url), "tried again at the next request");
}

#[tokio::test]
async fn a_closing_server_answers_what_it_took_refuses_what_comes_after_then_closes() {
    let (release, started) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (url, closing) = linked(release.clone(), started.clone()).await;
    let links = Arc::new(Links::new(
        Duration::from_secs(2),
        Duration::from_secs(60),
        Counter::default(),
    ));
    let slow = tokio::spawn({
        let (links, url) = (links.clone(), url.clone());
        async move { links.send(&url, &request("/slow", b"")).await }
    });
    started.notified().await;
    closing.send(true).expect("a link listens");
    // Come once the node is closing: refused as not served, so sent to another node.
    let Passed::Answered(refused) = links.send(&url, &request("/echo", b"late")).await else {
        panic!("no answer to a late request");
    };
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused
        .headers
        .contains_key(super::node_headers::NOT_SERVED));
    assert!(!slow.is_finished());
    release.notify_one();
    let Passed::Answered(answer) = slow.await.expect("sent") else {
        panic!("a request taken before closing was not answered");
    };
    assert_eq!(answer.body, "slow");
    // Later: on that link (if its closing frame has not come yet) it is never read, and the
    // closing frame says so; on the next it is refused alike while the node closes. Either
    // way it is known not to have been served.
    match links.send(&url, &request("/echo", b"later")).await {
        Passed::NotSent(_) => {}
        Passed::Answered(refused) => assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE),
        other => panic!("a request after the close: {other:?}"),
    }
}

#[tokio::test]
async fn a_request_that_panics_or_carries_too_many_headers_is_refused_alone() {
    let (url, _closing) = linked(Arc::new(Notify::new()), Arc::new(Notify::new())).await;
    let links = Links::new(
        Duration::from_secs(2),
        Duration::from_secs(60),
        Counter::default(),
    );
    let Passed::Answered(panicked) = links.send(&url, &request("/panic", b"")).await else {
        panic!("no answer to a request that panicked");
    };
    assert_eq!(panicked.status, StatusCode::INTERNAL_SERVER_ERROR);
    let mut crowded = request("/echo", b"x");
    for i in 0..300 {
        let name = axum::http::HeaderName::try_from(format!("x-h{i}")).expect("a name");
        crowded.headers.insert(name, HeaderValue::from_static("v"));
    }
    let Passed::Answered(refused) = links.send(&url, &crowded).await else {
        panic!("no answer to a request of 300 headers");
    };
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    // The link goes on.
    let Passed::Answered(echo) = links.send(&url, &request("/echo", b"still")).await else {
        panic!("the link did not go on");
    };
    assert_eq!(echo.body, "still");
}

#[tokio::test]
async fn a_request_that_waited_its_time_on_a_silent_link_gives_the_link_up() {
    // A node that opens links and then answers nothing, as one whose machine froze.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    let (opened, mut opens) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (mut stream, _) = listener.accept().await.expect("accepted");
            let mut preface = [0u8; 16];
            stream.read_exact(&mut preface).await.expect("a preface");
            stream.write_all(&preface).await.expect("answered");
            held.push(stream);
            let _ = opened.send(());
        }
    });
    let links = Links::new(
        Duration::from_secs(2),
        Duration::from_millis(200),
        Counter::default(),
    );
    assert!(matches!(
        links.send(&url, &request("/echo", b"x")).await,
        Passed::Unknown(_)
    ));
    opens.recv().await.expect("a first link");
    // The next request opens another link rather than waiting on the silent one.
    let second_request = request("/echo", b"y");
    let next = links.send(&url, &second_request);
    let (passed, second) = tokio::join!(next, opens.recv());
    assert!(second.is_some(), "no second link was opened");
    assert!(matches!(passed, Passed::Unknown(_)));
}

#[tokio::test]
async fn requests_on_a_link_the_other_node_reset_are_each_told_at_once() {
    // A node that opens links and closes each at once, unread, so writes on it fail.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.expect("accepted");
            let mut preface = [0u8; 16];
            stream.read_exact(&mut preface).await.expect("a preface");
            stream.write_all(&preface).await.expect("answered");
            drop(stream);
        }
    });
    let links = Arc::new(Links::new(
        Duration::from_secs(2),
        Duration::from_secs(60),
        Counter::default(),
    ));
    let sends: Vec<_> = (0..32)
        .map(|_| {
            let (links, url) = (links.clone(), url.clone());
            tokio::spawn(async move {
                let big: &'static [u8] = Box::leak(vec![b'x'; 3000].into_boxed_slice());
                links.send(&url, &request("/echo", big)).await
            })
        })
        .collect();
    for send in sends {
        let told = tokio::time::timeout(Duration::from_secs(10), send).await;
        let passed = told.expect("told within 10 s").expect("sent");
        assert!(
            matches!(passed, Passed::NotSent(_) | Passed::Unknown(_)),
            "{passed:?}"
        );
    }
}

#[tokio::test]
async fn requests_passed_on_together_share_a_write() {
    let (url, _closing) = linked(Arc::new(Notify::new()), Arc::new(Notify::new())).await;
    let writes = Counter::default();
    let links = Arc::new(Links::new(
        Duration::from_secs(2),
        Duration::from_secs(60),
        writes.clone(),
    ));
    // Open the link first, so that the requests below are not held by its opening.
    assert!(matches!(
        links.send(&url, &request("/echo", b"open")).await,
        Passed::Answered(_)
    ));
    let before = writes.get();
    // Each begun in one turn of the runtime, as requests from many clients come together.
    for echo in echoes(&links, &url, 64) {
        let (i, sent) = echo.await.expect("sent");
        let Passed::Answered(answer) = sent else {
            panic!("request {i}: {sent:?}");
        };
        assert_eq!(answer.body, format!("body {i}"));
    }
    // One write each would be 64; the runtime's look at its sockets every 61 tasks may end a
    // write early.
    let taken = writes.get() - before;
    assert!((1..=4).contains(&taken), "64 frames took {taken} writes");
}
