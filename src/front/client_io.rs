//! A client's connection as courtesy reads and writes it: a write the client accepts no byte of
//! for `send_timeout_seconds` fails (like nginx's `send_timeout`), and the first bytes of a
//! request tell the connection gate that the connection is in use.
//!
//! A client that stops reading a response leaves hyper's write pending forever: the response's
//! body is never polled again, so its permit (the host's concurrency slot and a global one) is
//! never given back, and every other request for that host waits. [`ClientIo`] starts a timer
//! when a write cannot go on and ends the write with `TimedOut` when the timer fires first;
//! hyper then drops the connection, its body and permit, and the host's next request goes. A
//! client reading slowly is not cut: every byte it accepts starts the timer over. The fault is
//! the client's: nothing is reported to the host's pacing (a permit dropped mid-body reports
//! nothing), and the cut is counted and logged as the client's.
//!
//! The wrapper sits under everything hyper writes to the client, so it also covers the bytes of
//! a CONNECT tunnel (intercepted or blind) and of a WebSocket, which travel over the same
//! connection once upgraded.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::gate::Slot;
use crate::observe::metrics::CLIENT_SEND_TIMEOUTS;

/// A client connection with a send timeout, telling its gate slot when a request starts coming.
#[derive(Debug)]
pub(crate) struct ClientIo<S> {
    inner: S,
    /// The longest a write may wait for the client to take a byte.
    send_timeout: Duration,
    /// Armed while a write waits; reset by every byte written.
    stalled: Option<Pin<Box<Sleep>>>,
    /// Whether the armed timer is in use (a disarmed one is kept to be reset, not reallocated).
    waiting: bool,
    /// The connection's place under the listener's caps, told when request bytes arrive.
    slot: Option<Arc<Slot>>,
}

impl<S> ClientIo<S> {
    /// `inner`, whose writes fail after `send_timeout` without progress; `slot` hears of reads.
    pub(crate) fn new(inner: S, send_timeout: Duration, slot: Option<Arc<Slot>>) -> Self {
        ClientIo {
            inner,
            send_timeout,
            stalled: None,
            waiting: false,
            slot,
        }
    }

    /// A write went on (or finished): the client is reading.
    fn progressed(&mut self) {
        self.waiting = false;
    }

    /// A write cannot go on: starts the timer (if it is not running) and says whether it has
    /// run out, registering the task to be woken when it does.
    fn stalled_too_long(&mut self, cx: &mut Context<'_>) -> bool {
        let deadline = Instant::now() + self.send_timeout;
        if !self.waiting {
            self.waiting = true;
            match &mut self.stalled {
                Some(sleep) => sleep.as_mut().reset(deadline),
                None => self.stalled = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
        match &mut self.stalled {
            Some(sleep) => sleep.as_mut().poll(cx).is_ready(),
            None => false,
        }
    }

    /// What a write (or flush) that `polled` the client's socket comes to: as it is when it went
    /// on, an error when it has waited `send_timeout` without progress.
    fn watched<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(done) => {
                self.progressed();
                Poll::Ready(done)
            }
            Poll::Pending if self.stalled_too_long(cx) => Poll::Ready(Err(self.timed_out())),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The error that ends a write the client took no byte of in time (counted once).
    fn timed_out(&mut self) -> io::Error {
        self.waiting = false;
        CLIENT_SEND_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            send_timeout_s = self.send_timeout.as_secs_f64(),
            "client accepted no byte for send_timeout_seconds: its connection is closed"
        );
        io::Error::new(
            io::ErrorKind::TimedOut,
            "the client accepted no byte for send_timeout_seconds",
        )
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ClientIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            if let Some(slot) = &this.slot {
                slot.heard();
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ClientIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watched(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watched(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.watched(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Ready(done) => Poll::Ready(done),
            // A close the client does not take either ends as a close: the socket is dropped.
            Poll::Pending if this.stalled_too_long(cx) => Poll::Ready(Ok(())),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[tokio::test(start_paused = true)]
    async fn a_write_the_reader_takes_nothing_of_fails_after_the_send_timeout() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut io = ClientIo::new(ours, Duration::from_secs(60), None);
        let started = Instant::now();
        let chunk = vec![b'x'; 4096];
        let failed = loop {
            if let Err(e) = io.write_all(&chunk).await {
                break e;
            }
        };
        assert_eq!(failed.kind(), io::ErrorKind::TimedOut);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(60) && waited < Duration::from_secs(61),
            "{waited:?}"
        );
        // The reader still gets what was written before.
        let mut got = vec![0u8; 1024];
        assert_eq!(theirs.read(&mut got).await.unwrap(), 1024);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_taking_bytes_is_never_cut() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut io = ClientIo::new(ours, Duration::from_secs(5), None);
        let reader = tokio::spawn(async move {
            let mut total = 0;
            let mut buf = [0u8; 16];
            while total < 4096 {
                // 16 bytes every 4 s: each within the send timeout of the last.
                tokio::time::sleep(Duration::from_secs(4)).await;
                total += theirs.read(&mut buf).await.unwrap();
            }
            total
        });
        io.write_all(&[b'y'; 4096]).await.unwrap();
        drop(io);
        assert!(reader.await.unwrap() >= 4096);
    }
}
