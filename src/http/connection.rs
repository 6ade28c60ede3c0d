//! One client connection's clock: how long it may sit idle between requests, and how long a
//! request's headers may take once their first byte is in. The socket is wrapped so that a
//! read waiting past either deadline fails, and hyper closes the connection. While a request
//! is being handled (a long poll may wait 20 s) neither deadline applies; the body has its own
//! (see `body.rs`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The two waits a connection may do between requests.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionTimeouts {
    pub idle: Duration,
    pub header: Duration,
}

/// What the handler side tells the socket side: requests in flight, and when the last one ended.
#[derive(Debug)]
pub struct ConnectionState {
    in_flight: AtomicUsize,
    /// When the connection opened; `idle_since` counts nanoseconds from here (an atomic, so a
    /// socket read costs no lock).
    opened: Instant,
    idle_since: AtomicU64,
    /// A read that waited while a request was in flight has no timer running: woken when the
    /// request ends, it starts the idle clock.
    reader: Mutex<Option<Waker>>,
}

impl ConnectionState {
    pub fn new() -> Arc<Self> {
        Arc::new(ConnectionState {
            in_flight: AtomicUsize::new(0),
            opened: Instant::now(),
            idle_since: AtomicU64::new(0),
            reader: Mutex::new(None),
        })
    }

    /// Marks a request as handled until the guard drops (also when its future is cancelled).
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    fn idle_since(&self) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let nanos = self.idle_since.load(Ordering::Acquire);
        Some(self.opened + Duration::from_nanos(nanos))
    }
}

pub struct InFlight(Arc<ConnectionState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        // Set the clock before the count drops, so a reader never sees zero with an old time.
        let nanos = u64::try_from(self.0.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.0.idle_since.store(nanos, Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Some(reader) = self.0.reader.lock().expect("reader").take() {
            reader.wake();
        }
    }
}

/// A socket whose reads time out while no request is in flight: `idle` after the last request
/// ended (or the connection opened), `header` after the first byte of the next one.
pub struct Watched<T> {
    inner: T,
    state: Arc<ConnectionState>,
    timeouts: ConnectionTimeouts,
    /// When the first byte after the last request's end arrived (headers being read).
    first_byte: Option<Instant>,
    /// The idle period `first_byte` belongs to; a new period starts a new header clock.
    period: Option<Instant>,
    timer: Pin<Box<Sleep>>,
}

impl<T> Watched<T> {
    pub fn new(inner: T, state: Arc<ConnectionState>, timeouts: ConnectionTimeouts) -> Self {
        Watched {
            inner,
            state,
            timeouts,
            first_byte: None,
            period: None,
            timer: Box::pin(tokio::time::sleep(timeouts.idle)),
        }
    }

    /// The deadline the next read must beat, or None while a request is in flight.
    fn deadline(&mut self) -> Option<Instant> {
        let since = self.state.idle_since()?;
        if self.period != Some(since) {
            self.period = Some(since);
            self.first_byte = None;
        }
        Some(match self.first_byte {
            Some(first) => first + self.timeouts.header,
            None => since + self.timeouts.idle,
        })
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before
                    && this.first_byte.is_none()
                    && this.deadline().is_some()
                {
                    this.first_byte = Some(Instant::now());
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let Some(deadline) = this.deadline() else {
                    *this.state.reader.lock().expect("reader") = Some(cx.waker().clone());
                    // The request may have ended between the look and the registration.
                    if this.state.in_flight.load(Ordering::Acquire) == 0 {
                        cx.waker().wake_by_ref();
                    }
                    return Poll::Pending;
                };
                if this.timer.deadline() != deadline {
                    this.timer.as_mut().reset(deadline);
                }
                match this.timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        if this.first_byte.is_some() {
                            "request headers not received in time"
                        } else {
                            "connection idle"
                        },
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
