//! Answers from other nodes are read only up to a bound, from a real HTTP server on a socket.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::routing::{get, post};
use bytes::Bytes;
use tokio::net::TcpListener;

use super::between_nodes::{answered, Peers, Unread, PARCELS};
use crate::backend::{BackendError, OtherNodes};
use crate::persist::format::between_nodes::{decode_pull, PairPull};

/// A body of `size` bytes, sent a chunk at a time, with no length said.
fn streamed(size: usize) -> Body {
    let chunk = Bytes::from(vec![7u8; 1 << 16]);
    let chunks = (0..size.div_ceil(1 << 16)).map(move |i| {
        let n = (size - i * (1 << 16)).min(1 << 16);
        Ok::<_, std::io::Error>(chunk.slice(..n))
    });
    Body::from_stream(futures_util::stream::iter(chunks))
}

/// A server answering `/whole` with `size` bytes and a length, `/streamed` with `size` bytes
/// in chunks of 64 KiB and no length; its URL.
async fn serving(size: usize) -> String {
    let router = axum::Router::new()
        .route("/whole", get(move || async move { vec![7u8; size] }))
        .route("/streamed", get(move || async move { streamed(size) }));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

async fn read(url: &str, path: &str, most: usize) -> Result<Bytes, String> {
    let answer = reqwest::get(format!("{url}{path}"))
        .await
        .expect("answered");
    answered(url, answer, most)
        .await
        .map_err(|unread| match unread {
            Unread::TooLong(error) => format!("too long: {error}"),
            Unread::Failed(error) => format!("failed: {error}"),
        })
}

#[tokio::test]
async fn an_answer_within_the_bound_is_read_whole_with_or_without_a_length() {
    let url = serving(300_000).await;
    for path in ["/whole", "/streamed"] {
        let bytes = read(&url, path, 300_000).await.expect(path);
        assert_eq!(bytes.len(), 300_000, "{path}");
        assert!(bytes.iter().all(|b| *b == 7), "{path}");
    }
}

#[tokio::test]
async fn an_answer_past_the_bound_is_refused_whether_its_length_is_said_or_not() {
    let url = serving(300_001).await;
    for path in ["/whole", "/streamed"] {
        let refused = read(&url, path, 300_000).await.expect_err(path);
        assert!(refused.starts_with("too long: "), "{path}: {refused}");
        assert!(
            refused.contains("more than 300000 bytes"),
            "{path}: {refused}"
        );
    }
}

/// A node answering each pull with `parcel` bytes for every parcel it is asked for, whatever
/// their size, as a node of an earlier build did (streamed, so neither side need hold it
/// whole); its URL, and the counts it was asked for.
async fn answering_as_asked(parcel: usize) -> (String, Arc<Mutex<Vec<u32>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let router = axum::Router::new().route(
        PARCELS,
        post(move |body: Bytes| async move {
            let (_, max) = decode_pull(&body).expect("a pull");
            seen.lock().expect("not poisoned").push(max);
            streamed(parcel * max as usize)
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, asked)
}

/// What the pulls of these tests ask for: one pair of shards, from the start.
const PAIRS: [PairPull; 1] = [PairPull {
    from: 1,
    to: 2,
    after: 0,
}];

fn peers() -> Peers {
    Peers {
        standby: super::standby::tests::standby(),
        name: "this-node".into(),
    }
}

#[tokio::test]
async fn a_pull_answered_past_the_bound_is_asked_again_for_half_as_many_until_it_fits() {
    // 1,024 copies of 256 KiB would be a quarter of a GiB in one answer.
    let (url, asked) = answering_as_asked(256 << 10).await;
    let bytes = peers().pull(&url, &PAIRS, 1024).await.expect("pulled");
    let asked = asked.lock().expect("not poisoned").clone();
    assert_eq!(asked, [1024, 512, 256, 128]);
    assert_eq!(bytes.len(), 128 * (256 << 10));
}

#[tokio::test]
async fn a_pull_whose_single_parcel_is_past_the_bound_fails_once_asked_for_one() {
    let (url, asked) = answering_as_asked(100 << 20).await;
    let failed = peers().pull(&url, &PAIRS, 8).await.expect_err("too long");
    assert!(matches!(&failed, BackendError::Unavailable(said) if said.contains("more than")));
    assert_eq!(*asked.lock().expect("not poisoned"), [8, 4, 2, 1]);
}
