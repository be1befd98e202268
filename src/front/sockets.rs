//! Connections that outlive their request: WebSockets and blind CONNECT tunnels. Each holds an
//! upstream connection for its whole life and carries bytes no turn paces, so each is bounded
//! here:
//!
//! - a share of the upstream table (`max_upstream_sockets`): sockets and tunnels together never
//!   hold all of `max_upstream_connections`, so plain requests always find room;
//! - WebSockets per client (`max_websockets_per_client`, an IPv6 client by its /64) and per host
//!   (`max_websockets_per_host`);
//! - an idle timeout (`socket_idle_timeout_seconds`): no byte either way for that long, and the
//!   socket closes ([`pipe`]);
//! - an end on the operator's word: a host's pause or block, or `POST /hosts/<h>/close-sockets`,
//!   closes every socket and tunnel to it ([`Sockets::close_host`]).
//!
//! This module counts and closes; the handshake and the joining are `crate::proxy::connect::upgrade`'s,
//! the tunnel `crate::proxy::connect`'s.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::util::locks;

/// What a socket is, for its caps: a WebSocket counts against the per-client and per-host caps,
/// a blind tunnel only against the upstream share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A WebSocket, from this client (as `crate::wire::client_group` groups it), if known.
    WebSocket(Option<IpAddr>),
    /// A blind CONNECT tunnel.
    Tunnel,
}

/// The caps a new socket is checked against (read from the config in force when it opens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SocketCaps {
    /// `max_websockets_per_client`.
    pub(crate) per_client: usize,
    /// `max_websockets_per_host`.
    pub(crate) per_host: usize,
}

/// Why a socket was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SocketRefused {
    /// The client has this many WebSockets open.
    #[error("this client has {0} WebSockets open (max_websockets_per_client)")]
    PerClient(usize),
    /// The host has this many WebSockets open.
    #[error("this host has {0} WebSockets open (max_websockets_per_host)")]
    PerHost(usize),
    /// This many upstream connections are held by sockets and tunnels.
    #[error("{0} upstream connections are held by WebSockets and tunnels (max_upstream_sockets)")]
    Upstream(usize),
}

/// The open sockets and tunnels, by host and by client.
#[derive(Debug)]
pub(crate) struct Sockets {
    books: Mutex<Books>,
    /// `max_upstream_sockets`: one permit per open socket or tunnel.
    upstream: Arc<Semaphore>,
    upstream_max: usize,
}

/// The counts under the lock.
#[derive(Debug, Default)]
struct Books {
    /// WebSockets per client.
    per_client: HashMap<IpAddr, usize>,
    /// Every open socket and tunnel per host (budget key): its close signal, and whether it is
    /// a WebSocket (counted against the host's cap).
    per_host: HashMap<Arc<str>, HashMap<u64, (CancellationToken, bool)>>,
    next: u64,
}

impl Sockets {
    /// No socket open yet; at most `upstream_max` at once.
    pub(crate) fn new(upstream_max: usize) -> Arc<Self> {
        let upstream_max = upstream_max.max(1);
        Arc::new(Sockets {
            books: Mutex::new(Books::default()),
            upstream: Arc::new(Semaphore::new(upstream_max)),
            upstream_max,
        })
    }

    /// A place for one socket of `kind` to `host` (its budget key), or why there is none.
    pub(crate) fn open(
        self: &Arc<Self>,
        kind: Kind,
        host: &str,
        caps: SocketCaps,
    ) -> Result<OpenSocket, SocketRefused> {
        let mut books = locks::lock(&self.books);
        let (client, websocket) = match kind {
            Kind::WebSocket(client) => (client, true),
            Kind::Tunnel => (None, false),
        };
        if let Some(client) = client {
            if books.per_client.get(&client).copied().unwrap_or(0) >= caps.per_client {
                return Err(SocketRefused::PerClient(caps.per_client));
            }
        }
        if websocket {
            let at_host = books
                .per_host
                .get(host)
                .map_or(0, |open| open.values().filter(|(_, ws)| *ws).count());
            if at_host >= caps.per_host {
                return Err(SocketRefused::PerHost(caps.per_host));
            }
        }
        let upstream = self
            .upstream
            .clone()
            .try_acquire_owned()
            .map_err(|_| SocketRefused::Upstream(self.upstream_max))?;
        books.next += 1;
        let id = books.next;
        let close = CancellationToken::new();
        let host: Arc<str> = Arc::from(host);
        books
            .per_host
            .entry(host.clone())
            .or_default()
            .insert(id, (close.clone(), websocket));
        if let Some(client) = client {
            *books.per_client.entry(client).or_insert(0) += 1;
        }
        Ok(OpenSocket {
            sockets: self.clone(),
            id,
            host,
            client,
            close,
            _upstream: upstream,
        })
    }

    /// Closes every socket and tunnel open to `host` (its budget key); returns how many.
    pub(crate) fn close_host(&self, host: &str) -> usize {
        let books = locks::lock(&self.books);
        let Some(open) = books.per_host.get(host) else {
            return 0;
        };
        for (close, _) in open.values() {
            close.cancel();
        }
        open.len()
    }

    /// Sockets and tunnels open to `host` now.
    #[cfg(test)]
    pub(crate) fn open_to(&self, host: &str) -> usize {
        locks::lock(&self.books)
            .per_host
            .get(host)
            .map_or(0, HashMap::len)
    }
}

/// One open socket's place: given back when it drops.
#[derive(Debug)]
pub(crate) struct OpenSocket {
    sockets: Arc<Sockets>,
    id: u64,
    host: Arc<str>,
    client: Option<IpAddr>,
    close: CancellationToken,
    _upstream: OwnedSemaphorePermit,
}

impl OpenSocket {
    /// Resolves when the socket is to be closed (its host paused or blocked, or the operator
    /// asked).
    pub(crate) fn closing(&self) -> impl Future<Output = ()> + Send + 'static {
        self.close.clone().cancelled_owned()
    }
}

impl Drop for OpenSocket {
    fn drop(&mut self) {
        let mut books = locks::lock(&self.sockets.books);
        if let Some(open) = books.per_host.get_mut(&self.host) {
            open.remove(&self.id);
            if open.is_empty() {
                books.per_host.remove(&self.host);
            }
        }
        if let Some(client) = self.client {
            if let Some(count) = books.per_client.get_mut(&client) {
                *count -= 1;
                if *count == 0 {
                    books.per_client.remove(&client);
                }
            }
        }
    }
}

/// How a [`pipe`] ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// A side closed (or failed): the bytes copied up and down, or the error.
    Done(io::Result<(u64, u64)>),
    /// No byte either way for the idle timeout.
    Idle,
    /// Asked to close (`close` resolved).
    Closed,
}

/// Copies bytes both ways between `a` and `b` until a side closes, no byte has gone either way
/// for `idle`, or `close` resolves. Waiting costs nothing: one timer, reset only when it fires.
pub(crate) async fn pipe<A, B>(
    a: &mut A,
    b: &mut B,
    idle: Duration,
    close: impl Future<Output = ()>,
) -> Ended
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let activity = Activity::new();
    let mut a = Stamped {
        io: a,
        activity: &activity,
    };
    let mut b = Stamped {
        io: b,
        activity: &activity,
    };
    let copy = tokio::io::copy_bidirectional(&mut a, &mut b);
    tokio::pin!(copy, close);
    loop {
        let deadline = activity.last() + idle;
        tokio::select! {
            copied = &mut copy => return Ended::Done(copied),
            () = &mut close => return Ended::Closed,
            () = tokio::time::sleep_until(deadline) => {
                if activity.last() + idle <= Instant::now() {
                    return Ended::Idle;
                }
            }
        }
    }
}

/// When a byte last went either way through a [`pipe`].
#[derive(Debug)]
struct Activity {
    base: Instant,
    /// Nanoseconds after `base`.
    last: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            base: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn stamp(&self) {
        let nanos = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.store(nanos, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.base + Duration::from_nanos(self.last.load(Ordering::Relaxed))
    }
}

/// One side of a [`pipe`], stamping [`Activity`] on every byte read or written.
struct Stamped<'a, S: ?Sized> {
    io: &'a mut S,
    activity: &'a Activity,
}

impl<S: AsyncRead + Unpin + ?Sized> AsyncRead for Stamped<'_, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut *this.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.stamp();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin + ?Sized> AsyncWrite for Stamped<'_, S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut *this.io).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.stamp();
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const CAPS: SocketCaps = SocketCaps {
        per_client: 2,
        per_host: 3,
    };

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn websockets_are_capped_per_client_and_per_host_and_all_by_the_upstream_share() {
        let sockets = Sockets::new(5);
        let a1 = sockets.open(Kind::WebSocket(ip("127.0.0.1")), "h:80", CAPS);
        let a2 = sockets.open(Kind::WebSocket(ip("127.0.0.1")), "h:80", CAPS);
        let (a1, _a2) = (a1.unwrap(), a2.unwrap());
        assert_eq!(
            sockets
                .open(Kind::WebSocket(ip("127.0.0.1")), "other:80", CAPS)
                .unwrap_err(),
            SocketRefused::PerClient(2)
        );
        let _b1 = sockets
            .open(Kind::WebSocket(ip("127.0.0.2")), "h:80", CAPS)
            .unwrap();
        assert_eq!(
            sockets
                .open(Kind::WebSocket(ip("127.0.0.3")), "h:80", CAPS)
                .unwrap_err(),
            SocketRefused::PerHost(3)
        );
        // A blind tunnel is not a WebSocket: only the upstream share bounds it.
        let _t1 = sockets.open(Kind::Tunnel, "h:80", CAPS).unwrap();
        let _t2 = sockets.open(Kind::Tunnel, "h:443", CAPS).unwrap();
        assert_eq!(
            sockets.open(Kind::Tunnel, "h:443", CAPS).unwrap_err(),
            SocketRefused::Upstream(5)
        );
        assert_eq!(sockets.open_to("h:80"), 4);
        drop(a1);
        assert_eq!(sockets.open_to("h:80"), 3);
        assert!(sockets.open(Kind::Tunnel, "h:443", CAPS).is_ok());
    }

    #[tokio::test]
    async fn closing_a_host_closes_its_sockets_only() {
        let sockets = Sockets::new(10);
        let here = sockets.open(Kind::Tunnel, "h:80", CAPS).unwrap();
        let there = sockets.open(Kind::Tunnel, "g:80", CAPS).unwrap();
        assert_eq!(sockets.close_host("h:80"), 1);
        here.closing().await;
        assert!(!there.close.is_cancelled());
        assert_eq!(sockets.close_host("nowhere:80"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pipe_ends_after_the_idle_timeout_and_not_while_bytes_flow() {
        let (mut client, mut near) = tokio::io::duplex(64);
        let (mut far, mut origin) = tokio::io::duplex(64);
        let idle = Duration::from_secs(10);
        let piped =
            tokio::spawn(
                async move { pipe(&mut near, &mut far, idle, std::future::pending()).await },
            );
        let started = Instant::now();
        // A byte every 6 s keeps it open past the idle timeout.
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            client.write_all(b"x").await.unwrap();
            let mut one = [0u8; 1];
            origin.read_exact(&mut one).await.unwrap();
        }
        assert!(!piped.is_finished());
        let ended = piped.await.unwrap();
        assert!(matches!(ended, Ended::Idle), "{ended:?}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(34) && took <= Duration::from_secs(35),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pipe_ends_when_asked() {
        let (_client, mut near) = tokio::io::duplex(64);
        let (mut far, _origin) = tokio::io::duplex(64);
        let close = CancellationToken::new();
        let asked = close.clone();
        let piped = tokio::spawn(async move {
            pipe(
                &mut near,
                &mut far,
                Duration::from_secs(3600),
                asked.cancelled_owned(),
            )
            .await
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        close.cancel();
        assert!(matches!(piped.await.unwrap(), Ended::Closed));
    }
}
