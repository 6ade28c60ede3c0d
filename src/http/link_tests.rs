//! A link between nodes end to end, on real sockets: `link_client` asking, `link_server`
//! answering with a router of its own.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::routing::post;
use bytes::Bytes;
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

#[tokio::test]
async fn answers_come_back_each_to_its_request_and_a_slow_one_holds_back_no_other() {
    let release = Arc::new(Notify::new());
    let (url, _closing) = linked(release.clone(), Arc::new(Notify::new())).await;
    let links = Arc::new(Links::new(Duration::from_secs(2), Duration::from_secs(60)));
    assert!(links.usable(&url));

    let slow = tokio::spawn({
        let (links, url) = (links.clone(), url.clone());
        async move { links.send(&url, &request("/slow", b"")).await }
    });
    // Many at once, on the one link, while the slow one waits.
    let echoes: Vec<_> = (0..64)
        .map(|i| {
            let (links, url) = (links.clone(), url.clone());
            tokio::spawn(async move {
                let body: &'static [u8] = Box::leak(format!("body {i}").into_bytes().into());
                (i, links.send(&url, &request("/echo", body)).await)
            })
        })
        .collect();
    for echo in echoes {
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
    let links = Arc::new(Links::new(Duration::from_secs(2), Duration::from_secs(60)));
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
    let links = Links::new(Duration::from_secs(2), Duration::from_secs(60));
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
    let links = Links::new(Duration::from_secs(2), Duration::from_secs(60));
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
    let links = Arc::new(Links::new(Duration::from_secs(2), Duration::from_secs(60)));
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
