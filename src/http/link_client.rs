//! The asking side of a link between nodes (`link_server` answers): one connection to each node
//! requests are passed to, opened at the first request and kept, on which every request
//! passed there goes as a frame, numbered, while earlier ones are still out.
//!
//! What the caller is told matches what HTTP would tell it: a link that cannot be opened is a
//! request that never reached the node (to be sent again once a node can be reached), a link
//! lost once the request's frame was begun leaves its outcome unknown, and one lost before
//! leaves it unsent; so does a node's closing frame, which says it read nothing more. A node
//! that answers the preface as HTTP (an earlier build, answering 400) is asked over HTTP for a
//! while instead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::link_frame::{self, LinkRequest, LinkResponse, Next, HEAD, PREFACE};

/// How long a node that answered the preface as HTTP is asked over HTTP before a link is tried
/// again (it may have been upgraded meanwhile).
const HTTP_FOR: Duration = Duration::from_secs(60);

/// How long after a failed attempt to open a link the requests that waited for it are told at
/// once that the node cannot be reached, rather than each trying again in turn.
const FAILED_FOR: Duration = Duration::from_secs(1);

/// How long a link may sit idle (nothing to send, nothing unacknowledged: requests waiting for
/// their answers, long polls) before the kernel probes the other machine, three times a second
/// apart, and ends the link if none is answered. A node whose machine vanished without closing
/// its connections (powered off, cut off) so leaves no request waiting out its whole time.
pub(super) const PROBE_AFTER: Duration = Duration::from_secs(5);

/// What a link reads at most at once.
const READ_BYTES: usize = 64 * 1024;

/// The most an answer's frame may hold: `link_server` sends no body past 256 MiB, and its head
/// is far within the rest.
const ANSWER_BYTES: usize = (256 << 20) + (1 << 20);

/// What became of a request sent on a link.
#[derive(Debug)]
pub enum Passed {
    Answered(LinkResponse),
    /// It never reached the node; it may be sent again.
    NotSent(String),
    /// It may have reached the node.
    Unknown(String),
    /// The node does not take links: ask it over HTTP.
    UseHttp,
}

/// This node's links, one to each node it passes requests to.
pub struct Links {
    connect_timeout: Duration,
    /// The longest a request's answer is waited for once its frame is begun.
    request_timeout: Duration,
    peers: Mutex<HashMap<String, Arc<Peer>>>,
    /// Counts the writes of frames, each link's.
    writes: Counter,
}

#[derive(Default)]
struct Peer {
    /// The link in use, if one is open; opened by whichever request finds none.
    open: tokio::sync::Mutex<Option<Arc<Link>>>,
    /// Until when the node is asked over HTTP (it answered the preface so).
    http_until: Mutex<Option<Instant>>,
    /// When the last attempt to open a link failed, and why.
    failed: Mutex<Option<(Instant, String)>>,
}

/// One open connection. Frames wait in `out`. A request whose frame finds nothing there
/// writes it itself, once the runtime has run what else is ready, with the frames queued
/// meanwhile; what the socket does not take then, the link's task writes as the socket takes
/// it. So requests cost it no hand-over between tasks (with the runtime's threads asleep, a
/// thread's wake-up) but when the other node is slow to read.
struct Link {
    stream: Arc<TcpStream>,
    out: Mutex<BytesMut>,
    /// Tells the link's task that `out` holds something.
    queued: Notify,
    waiting: Waiting,
    next: AtomicU64,
    /// Reads that brought something, counted: a request that waited past its time on a link
    /// that heard nothing meanwhile finds the link silent.
    reads: AtomicU64,
    writes: Counter,
}

/// The requests out on a link, each with whom to tell and whether its frame was begun (its
/// fate is then unknown if the link is lost).
#[derive(Default)]
struct Waiting {
    by_id: Mutex<HashMap<u64, (oneshot::Sender<Passed>, bool)>>,
    lost: AtomicBool,
}

impl Waiting {
    /// The link is gone: every request out is told, by whether its frame was begun (or, once
    /// the node said it read no more, as never read). A request's frame is begun only while
    /// it is listed here, so none is begun after this.
    fn lose(&self, cause: &str, unread: bool) {
        self.lost.store(true, Ordering::Release);
        let out = std::mem::take(&mut *self.by_id.lock().unwrap_or_else(|p| p.into_inner()));
        for (_, (tell, begun)) in out {
            let _ = tell.send(match begun && !unread {
                true => Passed::Unknown(cause.to_string()),
                false => Passed::NotSent(cause.to_string()),
            });
        }
    }
}

/// Takes a request's place back if its caller gives up (a timeout, the leader moved).
struct Out<'a> {
    waiting: &'a Waiting,
    id: u64,
}

impl Drop for Out<'_> {
    fn drop(&mut self) {
        (self.waiting.by_id.lock().unwrap_or_else(|p| p.into_inner())).remove(&self.id);
    }
}

impl Links {
    /// Links whose writes of frames `writes` counts.
    pub fn new(connect_timeout: Duration, request_timeout: Duration, writes: Counter) -> Links {
        Links {
            connect_timeout,
            request_timeout,
            peers: Mutex::new(HashMap::new()),
            writes,
        }
    }

    /// Whether requests for `url` may go on a link: a plain-HTTP node not known to answer
    /// only HTTP.
    pub fn usable(&self, url: &str) -> bool {
        if authority(url).is_none() {
            return false;
        }
        let peer = self.peer(url);
        let until = *peer.http_until.lock().unwrap_or_else(|p| p.into_inner());
        until.is_none_or(|until| Instant::now() >= until)
    }

    /// Sends `request` to the node at `url` on its link, opening one if none is open.
    pub async fn send(&self, url: &str, request: &LinkRequest) -> Passed {
        let peer = self.peer(url);
        let link = match self.link(&peer, url).await {
            Ok(link) => link,
            Err(passed) => return passed,
        };
        let id = link.next.fetch_add(1, Ordering::Relaxed);
        let (tell, told) = oneshot::channel();
        (link.waiting.by_id.lock().unwrap_or_else(|p| p.into_inner())).insert(id, (tell, false));
        let _out = Out {
            waiting: &link.waiting,
            id,
        };
        let mut frame = BytesMut::with_capacity(HEAD + request.body.len() + 1024);
        link_frame::encode_request(&mut frame, id, request);
        let reads = link.reads.load(Ordering::Acquire);
        // Lost meanwhile (before the insert, or since): nothing of it was written.
        let first = match link.waiting.lost.load(Ordering::Acquire) {
            true => None,
            false => link.queue(id, &frame),
        };
        let Some(first) = first else {
            return Passed::NotSent("the link to the node closed".into());
        };
        if first {
            // The frames other requests queue while the runtime runs what is ready go out
            // with this one, in one write: each write is a call into the kernel here and a
            // wake-up at the other node. The runtime runs this again once it has nothing
            // else ready (or at its next look at the sockets).
            let flush = Flush { link: Some(&link) };
            tokio::task::yield_now().await;
            flush.now();
        }
        match tokio::time::timeout(self.request_timeout, told).await {
            Ok(Ok(passed)) => passed,
            Ok(Err(_)) => Passed::Unknown("the link to the node closed".into()),
            Err(_) => {
                let cause = format!("no answer within {} s", self.request_timeout.as_secs());
                // Nothing heard on the link all that time: the node's machine may be gone
                // without closing it (there is no keepalive), so later requests open another.
                if link.reads.load(Ordering::Acquire) == reads {
                    link.waiting.lose(&cause, false);
                }
                Passed::Unknown(cause)
            }
        }
    }

    fn peer(&self, url: &str) -> Arc<Peer> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(peer) = peers.get(url) {
            return peer.clone();
        }
        peers.entry(url.to_string()).or_default().clone()
    }

    /// The peer's open link, or a new one. One request opens it while the others wait (at
    /// most the connection's wait); if it fails, those that waited are told so at once.
    async fn link(&self, peer: &Arc<Peer>, url: &str) -> Result<Arc<Link>, Passed> {
        let not_reached = |cause: &str| Passed::NotSent(format!("no link to {url}: {cause}"));
        let began = Instant::now();
        let Ok(mut open) = tokio::time::timeout(self.connect_timeout, peer.open.lock()).await
        else {
            return Err(not_reached("another request is still opening one"));
        };
        if let Some(link) = (open.as_ref()).filter(|l| !l.waiting.lost.load(Ordering::Acquire)) {
            return Ok(link.clone());
        }
        // Found to answer HTTP while this request waited.
        let http_until = *peer.http_until.lock().unwrap_or_else(|p| p.into_inner());
        if http_until.is_some_and(|until| Instant::now() < until) {
            return Err(Passed::UseHttp);
        }
        if let Some((at, cause)) = &*peer.failed.lock().unwrap_or_else(|p| p.into_inner()) {
            if *at >= began || at.elapsed() < FAILED_FOR {
                return Err(not_reached(cause));
            }
        }
        let authority = authority(url).ok_or(Passed::UseHttp)?;
        let opened = tokio::time::timeout(self.connect_timeout, connect(&authority)).await;
        let stream = match opened {
            Ok(Ok(Opened::Link(stream))) => stream,
            Ok(Ok(Opened::Http)) => {
                *peer.http_until.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(Instant::now() + HTTP_FOR);
                return Err(Passed::UseHttp);
            }
            Ok(Err(error)) => return Err(peer.failed_now(not_reached, error.to_string())),
            Err(_) => return Err(peer.failed_now(not_reached, "not open within its wait".into())),
        };
        *peer.failed.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let link = Arc::new(Link {
            stream: Arc::new(stream),
            out: Mutex::new(BytesMut::new()),
            queued: Notify::new(),
            waiting: Waiting::default(),
            next: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            writes: self.writes.clone(),
        });
        tokio::spawn(run(link.clone(), peer.clone()));
        *open = Some(link.clone());
        Ok(link)
    }
}

impl Peer {
    /// Notes that a link could not be opened, for `cause`; what to tell the request.
    fn failed_now(&self, not_reached: impl Fn(&str) -> Passed, cause: String) -> Passed {
        let passed = not_reached(&cause);
        *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), cause));
        passed
    }
}

impl Link {
    /// Queues request `id`'s `frame` to be written after what waits before it: `Some(true)`
    /// when nothing waited, so that the caller writes it (`Flush`), with whatever other
    /// requests queue meanwhile; `Some(false)` when a write is due already (a caller's, or
    /// the link's task's, the socket being full). `None`, queuing nothing, if the request was
    /// taken out meanwhile (the link lost).
    fn queue(&self, id: u64, frame: &[u8]) -> Option<bool> {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        // Marked begun before any of it goes, under the lock the link's loss takes: once the
        // link is lost, nothing more of any request is written.
        match (self.waiting.by_id.lock().unwrap_or_else(|p| p.into_inner())).get_mut(&id) {
            Some((_, begun)) => *begun = true,
            None => return None,
        }
        let first = out.is_empty();
        out.extend_from_slice(frame);
        Some(first)
    }

    /// Writes what waits in `out` as far as the socket takes it now: whether all of it went,
    /// or the error that lost the link.
    fn flush(&self) -> Result<bool, std::io::Error> {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        while !out.is_empty() {
            match self.stream.try_write(&out) {
                Ok(written) => {
                    self.writes.inc();
                    let _ = out.split_to(written);
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(error) => return Err(error),
            }
        }
        Ok(true)
    }
}

/// The write a request owes for the frames queued from its own on (`Link::queue`): made by
/// `now`, or, if the request is given up first, left to the link's task.
struct Flush<'a> {
    link: Option<&'a Link>,
}

impl Flush<'_> {
    /// Writes what is queued; what the socket does not take now, the link's task writes as it
    /// takes it. A failure loses the link: every request out is told.
    fn now(mut self) {
        let Some(link) = self.link.take() else { return };
        match link.flush() {
            Ok(true) => {}
            Ok(false) => link.queued.notify_one(),
            Err(error) => {
                (link.waiting).lose(&format!("the link to the node failed: {error}"), false)
            }
        }
    }
}

impl Drop for Flush<'_> {
    fn drop(&mut self) {
        if let Some(link) = self.link {
            link.queued.notify_one();
        }
    }
}

/// Has the kernel probe `stream` once idle for `PROBE_AFTER`, and end it if the other machine
/// answers none of the probes. No bound is set on data left unacknowledged (TCP's user
/// timeout): it would also end a link whose live peer holds its window shut, as one running
/// its most requests (long polls among them) does, and it overrides the probes' count. A
/// request whose frame a vanished machine never acknowledged is bounded by its own time.
pub(super) fn notice_a_vanished_machine(stream: &TcpStream) -> std::io::Result<()> {
    let probes = socket2::TcpKeepalive::new()
        .with_time(PROBE_AFTER)
        .with_interval(Duration::from_secs(1))
        .with_retries(3);
    socket2::SockRef::from(stream).set_tcp_keepalive(&probes)
}

/// `host:port` of a plain-HTTP URL, port 80 when it names none; `None` for any other URL.
pub(super) fn authority(url: &str) -> Option<String> {
    let uri: axum::http::Uri = url.parse().ok()?;
    if uri.scheme_str() != Some("http") {
        return None;
    }
    let host = uri.host().filter(|host| !host.is_empty())?;
    Some(format!("{host}:{}", uri.port_u16().unwrap_or(80)))
}

/// What a node answered the preface with.
enum Opened {
    Link(TcpStream),
    /// HTTP: a node that takes no links.
    Http,
}

/// A connection to `authority`, and what the node answered the preface with there.
async fn connect(authority: &str) -> std::io::Result<Opened> {
    let mut stream = TcpStream::connect(authority).await?;
    stream.set_nodelay(true)?;
    notice_a_vanished_machine(&stream)?;
    stream.write_all(PREFACE).await?;
    let mut answer = [0u8; PREFACE.len()];
    stream.read_exact(&mut answer).await?;
    if &answer == PREFACE {
        Ok(Opened::Link(stream))
    } else if answer.starts_with(b"HTTP/") {
        Ok(Opened::Http)
    } else {
        Err(std::io::Error::other(
            "the node answered the link's opening with neither a link nor HTTP",
        ))
    }
}

/// The link's task: reads answers, each to the request it answers, and writes what requests
/// left waiting, until the link is lost.
async fn run(link: Arc<Link>, peer: Arc<Peer>) {
    // However the task ends (a panic included), the link's requests are told and the peer's
    // next request opens another.
    let _ended = Ended {
        link: &link,
        peer: &peer,
    };
    let mut read = BytesMut::with_capacity(READ_BYTES);
    let mut unwritten = false;
    let (cause, unread) = loop {
        tokio::select! {
            ready = link.stream.readable() => {
                if let Err(error) = ready {
                    break (format!("the link to the node failed: {error}"), false);
                }
                if read.capacity() - read.len() < READ_BYTES / 4 {
                    read.reserve(READ_BYTES);
                }
                match link.stream.try_read_buf(&mut read) {
                    Ok(0) => break ("the node closed the link".to_string(), false),
                    Ok(_) => {
                        link.reads.fetch_add(1, Ordering::Release);
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(error) => break (format!("the link to the node failed: {error}"), false),
                }
                match answer_all(&link.waiting, &mut read) {
                    Ok(true) => {}
                    // Every request it has not answered, it never read.
                    Ok(false) => break ("the node is stopping".to_string(), true),
                    Err(cause) => break (cause, false),
                }
            }
            () = link.queued.notified(), if !unwritten => match link.flush() {
                Ok(all) => unwritten = !all,
                Err(error) => break (format!("the link to the node failed: {error}"), false),
            },
            ready = link.stream.writable(), if unwritten => match ready.and_then(|()| link.flush()) {
                Ok(all) => unwritten = !all,
                Err(error) => break (format!("the link to the node failed: {error}"), false),
            },
        }
    };
    link.waiting.lose(&cause, unread);
}

/// Ends a link's task: its requests are told (if not told already), and the peer's next
/// request opens another link, so this one's connection closes once no request holds it
/// (unless a request holds the peer's place now: then once replaced).
struct Ended<'a> {
    link: &'a Arc<Link>,
    peer: &'a Peer,
}

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        if !self.link.waiting.lost.load(Ordering::Acquire) {
            self.link.waiting.lose("the link's task ended", false);
        }
        if let Ok(mut open) = self.peer.open.try_lock() {
            if open
                .as_ref()
                .is_some_and(|open| Arc::ptr_eq(open, self.link))
            {
                *open = None;
            }
        }
    }
}

/// Hands each whole answer in `read` to its request: false once the node's closing frame
/// came, an error if an answer was malformed or past any bound.
fn answer_all(waiting: &Waiting, read: &mut BytesMut) -> Result<bool, String> {
    loop {
        let (id, rest) = match link_frame::next_frame(read, ANSWER_BYTES) {
            Next::Frame(id, rest) => (id, rest),
            Next::Incomplete => return Ok(true),
            Next::TooLong { .. } => return Err("the node sent an answer past any bound".into()),
            Next::Malformed => return Err("the node sent a malformed frame".into()),
        };
        if id == link_frame::CLOSING {
            return Ok(false);
        }
        let Some(answer) = link_frame::decode_response(rest) else {
            return Err("the node sent a malformed answer".into());
        };
        let tell = (waiting.by_id.lock().unwrap_or_else(|p| p.into_inner())).remove(&id);
        // One whose caller gave up is told no one.
        if let Some((tell, _)) = tell {
            let _ = tell.send(Passed::Answered(answer));
        }
    }
}
