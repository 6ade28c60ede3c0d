//! A connection some of whose bytes were read before it was known how to serve it (the head of
//! a request past the connection limit): those bytes are read again first, then the rest.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `stream`, with `ahead` read from it already.
pub struct ReadAhead<S> {
    ahead: Vec<u8>,
    /// How much of `ahead` was read again.
    taken: usize,
    stream: S,
}

impl<S> ReadAhead<S> {
    pub fn new(ahead: Vec<u8>, stream: S) -> ReadAhead<S> {
        ReadAhead {
            ahead,
            taken: 0,
            stream,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadAhead<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let left = &this.ahead[this.taken..];
        if left.is_empty() {
            return Pin::new(&mut this.stream).poll_read(cx, buf);
        }
        let given = left.len().min(buf.remaining());
        buf.put_slice(&left[..given]);
        this.taken += given;
        if this.taken == this.ahead.len() {
            // Read again whole: its memory is not kept for the connection's life.
            this.ahead = Vec::new();
            this.taken = 0;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ReadAhead<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::ReadAhead;

    #[tokio::test]
    async fn the_bytes_read_ahead_come_first_then_the_streams_and_writes_go_through() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut stream = ReadAhead::new(b"GET / HTTP/1.1\r\n".to_vec(), near);
        far.write_all(b"Host: x\r\n\r\n").await.unwrap();
        let mut small = [0u8; 5];
        stream.read_exact(&mut small).await.unwrap();
        assert_eq!(&small, b"GET /");
        let mut rest = vec![0u8; "GET / HTTP/1.1\r\nHost: x\r\n\r\n".len() - 5];
        stream.read_exact(&mut rest).await.unwrap();
        assert_eq!(rest, b" HTTP/1.1\r\nHost: x\r\n\r\n");
        stream.write_all(b"answer").await.unwrap();
        stream.shutdown().await.unwrap();
        let mut answer = String::new();
        far.read_to_string(&mut answer).await.unwrap();
        assert_eq!(answer, "answer");
    }
}
