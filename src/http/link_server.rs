//! The listening side of a link between nodes: a connection that opens with the link's
//! preface (`link_frame::PREFACE`) instead of an HTTP request carries requests other nodes pass
//! on, as frames. Each is answered by the same router an HTTP request is, as if it had come
//! alone on a connection of its own, and its answer goes back as a frame once ready: answers
//! need not come in the order asked.
//!
//! This saves each request passed on what HTTP costs both nodes (a client's connection
//! handling, the head's encoding and parsing, a write and a wake-up each way per request);
//! the request itself is checked here as fully as one that came over HTTP.

use std::time::Duration;

use tokio::time::Instant;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use bytes::{Bytes, BytesMut};
use std::panic::AssertUnwindSafe;

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::ServiceExt;

use super::link_client::notice_a_vanished_machine;
use super::link_frame::{self, LinkResponse, Next, PREFACE};

/// Requests of one link answered at once (every request one node passes to another goes on
/// one link, long polls among them); the link reads no further frame until one ends.
const IN_FLIGHT: usize = 4096;

/// Answers not yet written past which a link reads no further frame: a node that does not read
/// its answers is not answered without bound.
const OUT_BYTES: usize = 32 << 20;

/// The bytes of requests one link may hold at once (or one request's largest frame, if more):
/// a link is bound as HTTP connections are, each of which holds one request at a time.
const LINK_BYTES: usize = 32 << 20;

/// The most an answer may hold: the largest the API gives (ten messages of 1 MiB, escaped) is
/// far below it.
const ANSWER_BYTES: usize = 256 << 20;

/// What a link reads at most at once.
const READ_BYTES: usize = 64 * 1024;

/// What a request's frame may hold besides its body: its method, path and headers, within
/// what the HTTP server reads of a request's head.
pub const HEAD_BYTES: usize = 64 * 1024 + 1024;

/// How long the preface may take to come in full once its first byte has.
const PREFACE_WAIT: Duration = Duration::from_secs(5);

/// How long a closing link reads on after its closing frame for the other side to close.
const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// How long a stopping link may take to answer what it took and have its answers read.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// The bounds of links into this node.
#[derive(Clone, Copy, Debug)]
pub struct LinkLimits {
    /// The longest frame read: a request's body limit and head.
    pub frame_bytes: usize,
    /// How long a link with no request under way may hear nothing before it closes
    /// (`--idle-timeout`), as it closes when the node stops.
    pub idle: Duration,
}

/// Whether the connection's first byte (`first`) opens a link.
pub fn opens_link(first: u8) -> bool {
    first == PREFACE[0]
}

/// Serves the link on `stream`, whose first byte opens one, with the router `served` gives at
/// each request (the current generation's), until the other node closes it or `closing` turns
/// true; in flight then, requests are answered first.
///
/// One task does it all: it reads frames, runs their requests side by side, and writes each
/// answer as it is ready, so a request costs no hand-over between tasks here (which, with the
/// runtime's threads asleep, is a wake-up of a thread).
pub async fn serve_link(
    mut stream: TcpStream,
    served: impl Fn() -> axum::Router,
    limits: LinkLimits,
    mut closing: watch::Receiver<bool>,
) {
    let mut preface = [0u8; PREFACE.len()];
    match tokio::time::timeout(PREFACE_WAIT, stream.read_exact(&mut preface)).await {
        Ok(Ok(_)) if &preface == PREFACE => {}
        _ => return,
    }
    // A link whose asking node's machine vanished is let go, not kept with answers no one
    // will read. Set before the link is opened, so a failure leaves none open.
    if notice_a_vanished_machine(&stream).is_err() || stream.write_all(PREFACE).await.is_err() {
        return;
    }
    let mut link = Served {
        stream,
        read: BytesMut::with_capacity(READ_BYTES),
        out: BytesMut::new(),
        held: 0,
        skip: 0,
    };
    let budget = LINK_BYTES.max(limits.frame_bytes);
    let mut answering = FuturesUnordered::new();
    // Once closing (or idle past `limits.idle`), frames still coming are answered as not
    // served (the node that sent them sends them elsewhere) until every request taken before
    // is answered; then a closing frame says that whatever was not answered was never read,
    // and the link closes.
    let mut stopping = false;
    let mut stop_by = Instant::now();
    let mut heard = Instant::now();
    loop {
        // Frames are taken while there is room: a request's bytes, the requests at once and
        // the answers not yet written are each bounded, and a link whose answers go unread
        // reads no more.
        // Stopping with nothing under way, it reads no more: the closing frame says so.
        let done = stopping && answering.is_empty();
        while !done
            && answering.len() < IN_FLIGHT
            && link.held < budget
            && link.out.len() < OUT_BYTES
        {
            if link.skip > 0 {
                let skipped = link.skip.min(link.read.len());
                let _ = link.read.split_to(skipped);
                link.skip -= skipped;
                if link.skip > 0 {
                    break;
                }
            }
            match link_frame::next_frame(&mut link.read, limits.frame_bytes) {
                Next::Frame(id, _) if stopping => link.push(id, &not_served()),
                Next::Frame(id, rest) => {
                    link.held += rest.len();
                    answering.push(answer(served(), id, rest));
                }
                Next::TooLong { id, length } => {
                    // Refused alone, as HTTP refuses a body past the limit; its bytes are let
                    // by as they come.
                    link.push(id, &too_large(length, limits.frame_bytes));
                    link.skip = length;
                }
                Next::Incomplete => break,
                Next::Malformed => {
                    tracing::warn!("a link sent a malformed frame; closed");
                    return;
                }
            }
        }
        if !link.write_some() {
            return;
        }
        // Closed once every answer is out (checked after each write, as nothing else may wake
        // the loop then): the closing frame then goes alone.
        if done && link.out.is_empty() {
            link.push(link_frame::CLOSING, &not_served());
            break;
        }
        let room = !done
            && answering.len() < IN_FLIGHT
            && link.held < budget
            && link.out.len() < OUT_BYTES;
        let idle_until = heard + limits.idle;
        let quiet = answering.is_empty() && link.out.is_empty();
        tokio::select! {
            ready = link.stream.readable(), if room => {
                if ready.is_err() || !link.read_some() {
                    return;
                }
                heard = Instant::now();
            }
            ready = link.stream.writable(), if !link.out.is_empty() => {
                if ready.is_err() || !link.write_some() {
                    return;
                }
                heard = Instant::now();
            }
            Some((id, length, answer)) = answering.next() => {
                link.held -= length;
                link.push(id, &answer);
                // Answers ready together (a commit answers many) go in one write: each write
                // is a call into the kernel here and a wake-up at the other node. Polled
                // again with this task's waker at the next turn, so no wake-up is lost.
                while link.out.len() < OUT_BYTES {
                    let Some(Some((id, length, answer))) = answering.next().now_or_never() else {
                        break;
                    };
                    link.held -= length;
                    link.push(id, &answer);
                }
                heard = Instant::now();
            }
            _ = closing.wait_for(|closing| *closing), if !stopping => {
                stopping = true;
                stop_by = Instant::now() + STOP_WAIT;
            }
            () = tokio::time::sleep_until(idle_until), if !stopping && quiet => {
                stopping = true;
                stop_by = Instant::now() + STOP_WAIT;
            }
            // A node that does not read its answers is not waited for without end.
            () = tokio::time::sleep_until(stop_by), if stopping => return,
        }
    }
    // The closing frame and whatever is left, then the other node's close, read on a moment:
    // frames left unread would turn the close into a reset, which could overtake the closing
    // frame. A node that reads nothing is not waited for past `DRAIN_WAIT`.
    let Served {
        mut stream, out, ..
    } = link;
    let _ = tokio::time::timeout(DRAIN_WAIT, async {
        stream.write_all(&out).await?;
        stream.shutdown().await?;
        tokio::io::copy(&mut stream, &mut tokio::io::sink()).await
    })
    .await;
}

/// A link being served: its connection, what has been read and not yet taken as frames, the
/// answers not yet written, and the bytes of the requests being answered.
struct Served {
    stream: TcpStream,
    read: BytesMut,
    out: BytesMut,
    held: usize,
    /// Bytes still to come of a frame refused as too large, let by unread.
    skip: usize,
}

impl Served {
    /// Reads what has come; false once the other node closed or the connection failed.
    fn read_some(&mut self) -> bool {
        if self.read.capacity() - self.read.len() < READ_BYTES / 4 {
            self.read.reserve(READ_BYTES);
        }
        match self.stream.try_read_buf(&mut self.read) {
            Ok(0) => false,
            Ok(_) => true,
            Err(error) => error.kind() == std::io::ErrorKind::WouldBlock,
        }
    }

    /// Writes what the socket takes now of the answers waiting; false if the connection failed.
    fn write_some(&mut self) -> bool {
        while !self.out.is_empty() {
            match self.stream.try_write(&self.out) {
                Ok(written) => {
                    let _ = self.out.split_to(written);
                }
                Err(error) => return error.kind() == std::io::ErrorKind::WouldBlock,
            }
        }
        true
    }

    fn push(&mut self, id: u64, answer: &LinkResponse) {
        link_frame::encode_response(&mut self.out, id, answer);
    }
}

/// Request `id`'s number and length, with the router's answer to it.
async fn answer(router: axum::Router, id: u64, rest: Bytes) -> (u64, usize, LinkResponse) {
    let length = rest.len();
    (id, length, answer_to(router, rest).await)
}

/// The router's answer to the request in `rest`; a request whose handling panicked is
/// answered 500 alone, as it would have ended its own HTTP connection.
async fn answer_to(router: axum::Router, rest: Bytes) -> LinkResponse {
    let answered = AssertUnwindSafe(answer_whole(router, rest))
        .catch_unwind()
        .await;
    answered.unwrap_or_else(|_| {
        plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the request ended without an answer",
        )
    })
}

async fn answer_whole(router: axum::Router, rest: Bytes) -> LinkResponse {
    let whole = rest.len();
    let Some(request) = link_frame::decode_request(rest) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "a malformed frame on a link between nodes",
        );
    };
    let length = request.body.len();
    if whole - length > HEAD_BYTES {
        return plain(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "a request's head on a link past what the HTTP server reads",
        );
    }
    let mut built = axum::http::Request::builder()
        .method(request.method)
        .uri(request.path);
    if let Some(headers) = built.headers_mut() {
        *headers = request.headers;
        // What the client's signature may cover, as it sent it.
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    let Ok(built) = built.body(Body::from(request.body)) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "a request on a link with no valid path",
        );
    };
    let Ok(response) = router.oneshot(built).await;
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, ANSWER_BYTES).await {
        Ok(body) => LinkResponse {
            status: parts.status,
            headers: parts.headers,
            body,
        },
        Err(error) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the answer could not be read whole: {error}"),
        ),
    }
}

/// The answer to a request whose frame is past the limit, as HTTP's server answers a body
/// past `--max-request-bytes`.
fn too_large(length: usize, limit: usize) -> LinkResponse {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("a request of {length} bytes on a link, past this node's limit of {limit}"),
    )
}

/// The answer to a request that came once the node was stopping: nothing of it was read.
fn not_served() -> LinkResponse {
    let mut answer = plain(StatusCode::SERVICE_UNAVAILABLE, "this node is stopping");
    (answer.headers).insert(
        super::node_headers::NOT_SERVED,
        HeaderValue::from_static("1"),
    );
    answer
}

fn plain(status: StatusCode, message: &str) -> LinkResponse {
    let mut headers = axum::http::HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    LinkResponse {
        status,
        headers,
        body: Bytes::from(message.to_string()),
    }
}
