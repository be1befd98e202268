//! Who gets a connection at all, decided before a byte is read: a client outside
//! `allow_clients` is closed at accept; a client over `max_connections_per_client`, or any client
//! while `max_connections` are open, gets a short 503 and a close; a connection that sends nothing
//! within `header_timeout_seconds` is closed. The caps are sized from the process's file
//! descriptor limit (raised to its hard limit at start) where the config leaves them unset, and
//! kept below it where it sets them. Closing an idle connection to make room is a last resort at
//! a cap: only one kept alive after a request, with no byte of the next one come; never a fresh
//! one, never one a request is arriving on. When `accept` fails for lack of
//! descriptors all the same, one spare descriptor is given up to take the waiting connection and
//! close it, so the listener never spins on the same failure.
//!
//! This module admits and refuses connections; serving them is `crate::front::connections`, and what a
//! request may do is `crate::proxy` and `crate::admin`.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::util::locks;
use books::{Books, ConnState};

mod books;

/// File descriptors kept out of the connection caps: upstream connections' share is counted
/// separately (one per proxied connection), these are for the state file, the CA, the cache, DNS
/// and the store.
const RESERVED_FDS: u64 = 128;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the soft limit in force after.
pub(crate) fn raise_fd_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if let (Some(current), Some(maximum)) = (limit.current, limit.maximum) {
        if current < maximum {
            limit.current = Some(maximum);
            match setrlimit(Resource::Nofile, limit) {
                Ok(()) => info!(from = current, to = maximum, "raised the open file limit"),
                Err(e) => warn!("cannot raise the open file limit from {current}: {e}"),
            }
        }
    }
    getrlimit(Resource::Nofile).current
}

/// The connection caps of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    /// Connections open at once, from all clients.
    pub(crate) total: usize,
    /// Connections open at once from one client address.
    pub(crate) per_client: usize,
}

/// The most upstream connections that fit beside the listeners' `proxy` and `admin` caps under
/// `fd_limit`.
pub(crate) fn upstream_fit(max: usize, proxy: Caps, admin: Caps, fd_limit: Option<u64>) -> usize {
    let Some(limit) = fd_limit else {
        return max;
    };
    let room = limit.saturating_sub(RESERVED_FDS) as usize;
    let fit = room
        .saturating_sub(proxy.total)
        .saturating_sub(admin.total)
        .max(1);
    if fit < max {
        warn!(
            fd_limit = limit,
            max_upstream_connections = fit,
            "max_upstream_connections lowered to fit the open file limit"
        );
    }
    max.min(fit)
}

/// The most proxy connections courtesy sizes itself for when `max_connections` is unset: a
/// bound on the memory unfinished heads can pin (each at most `max_request_head_bytes`).
pub(crate) const AUTO_MAX_CONNECTIONS: usize = 16_384;

/// `max_connections_per_client` when unset on a listener that is not on loopback (a team's
/// proxy): one client's share; on loopback (a sidecar) the only clients are the crawler's own,
/// so the share is the whole listener's.
pub(crate) const TEAM_PER_CLIENT: usize = 256;

/// The proxy listener's caps as the config sets them, `None` where it leaves them to courtesy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Asked {
    /// `max_connections`.
    pub(crate) total: Option<usize>,
    /// `max_connections_per_client`.
    pub(crate) per_client: Option<usize>,
}

/// The proxy listener's caps: what the config sets, and where it sets nothing, sized from
/// `fd_limit` (half the descriptors left beside the admin listener's and the reserve, each
/// proxied connection may hold an upstream one; at most [`AUTO_MAX_CONNECTIONS`]) and, per
/// client, the whole of it on a `loopback` listener or [`TEAM_PER_CLIENT`] elsewhere.
pub(crate) fn proxy_caps(asked: Asked, admin: Caps, fd_limit: Option<u64>, loopback: bool) -> Caps {
    let total = asked.total.unwrap_or_else(|| match fd_limit {
        Some(limit) => {
            let room = limit.saturating_sub(RESERVED_FDS) as usize;
            (room.saturating_sub(admin.total) / 2).clamp(1, AUTO_MAX_CONNECTIONS)
        }
        None => 4096,
    });
    let per_client = asked.per_client.unwrap_or(if loopback {
        total
    } else {
        TEAM_PER_CLIENT.min(total)
    });
    Caps { total, per_client }
}

/// The caps of the proxy and admin listeners, lowered to fit `fd_limit` (each proxied
/// connection may hold an upstream connection too, so it counts twice).
pub(crate) fn fit_to_fd_limit(proxy: Caps, admin: Caps, fd_limit: Option<u64>) -> (Caps, Caps) {
    let Some(limit) = fd_limit else {
        return (proxy, admin);
    };
    let room = limit.saturating_sub(RESERVED_FDS) as usize;
    let admin_total = admin.total.min(room / 8).max(1);
    let proxy_total = proxy.total.min(room.saturating_sub(admin_total) / 2).max(1);
    if proxy_total < proxy.total || admin_total < admin.total {
        warn!(
            fd_limit = limit,
            max_connections = proxy_total,
            admin_max_connections = admin_total,
            "connection caps lowered to fit the open file limit"
        );
    }
    (
        Caps {
            total: proxy_total,
            per_client: proxy.per_client.min(proxy_total),
        },
        Caps {
            total: admin_total,
            per_client: admin.per_client.min(admin_total),
        },
    )
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    /// `max_connections` are open, every one carrying a request.
    #[error("{0} connections are open (max_connections)")]
    Total(usize),
    /// This client (an IPv6 client by its /64) has `max_connections_per_client` open, every one
    /// carrying a request.
    #[error("this client has {0} connections open (max_connections_per_client)")]
    PerClient(usize),
}

/// The open connections of one listener, counted against its caps. Each is idle (kept alive
/// between requests, or accepted and silent so far), receiving a request, or carrying requests;
/// at a cap the kept-alive one idle longest is closed to make room (an idle connection may be
/// closed at any time, RFC 9112 9.6), and the new one is refused when none is.
#[derive(Debug)]
pub(crate) struct Gate {
    caps: Caps,
    /// The connections counted; locked when one opens, closes or must make room.
    books: Mutex<Books>,
    /// Orders the moments connections become idle (the one idle longest makes room first).
    sequence: AtomicU64,
}

/// One admitted connection: its place is given back when the last clone drops (a CONNECT tunnel
/// keeps one for its life), or earlier when it is asked to close to make room.
#[derive(Debug)]
pub(crate) struct Slot {
    gate: Arc<Gate>,
    id: u64,
    /// Its client (as the caps count it), what it carries and since when it is idle, changed
    /// without the gate's lock.
    state: Arc<ConnState>,
}

/// A request (or a CONNECT tunnel) carried by a connection: the connection is not idle, so not
/// closed to make room, until every `Busy` of it is dropped (at the end of the response body).
#[derive(Debug)]
pub(crate) struct Busy {
    slot: Arc<Slot>,
}

impl Gate {
    /// No connections yet, under `caps`.
    pub(crate) fn new(caps: Caps) -> Arc<Self> {
        Arc::new(Gate {
            caps,
            books: Mutex::new(Books::default()),
            sequence: AtomicU64::new(0),
        })
    }

    /// A place for a connection from `ip` (idle until it carries a request), or why there is
    /// none. At a cap the connection idle longest (the client's at `per_client`, anyone's at
    /// `total`) is asked to close and stops counting at once.
    pub(crate) fn let_in(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refused> {
        let ip = crate::wire::client_group::client_group(ip);
        let (id, state) = self.room(ip)?.add(ip, &self.sequence);
        Ok(Slot {
            gate: self.clone(),
            id,
            state,
        })
    }

    /// Makes room for one more place of `ip` (already grouped) at a cap, as `let_in` says, and
    /// returns the books to count it in; or why there is none.
    fn room(&self, ip: IpAddr) -> Result<MutexGuard<'_, Books>, Refused> {
        let mut books = locks::lock(&self.books);
        if books.of_client(ip) >= self.caps.per_client && !books.evict(Some(ip)) {
            return Err(Refused::PerClient(self.caps.per_client));
        }
        if books.len() >= self.caps.total && !books.evict(None) {
            return Err(Refused::Total(self.caps.total));
        }
        Ok(books)
    }

    /// Connections counted now.
    #[cfg(test)]
    fn open(&self) -> usize {
        locks::lock(&self.books).len()
    }
}

impl Slot {
    /// Resolves when this connection is asked to close to make room for another.
    pub(crate) fn evicted(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.state.close.clone().cancelled_owned()
    }

    /// Bytes came from the client: while the connection was idle, they are the start of a
    /// request, so it is not closed to make room until it is idle again.
    pub(crate) fn heard(&self) {
        self.state.heard();
    }

    /// The client of this connection, as the caps count it (an IPv6 client by its /64).
    pub(crate) fn client(&self) -> IpAddr {
        self.state.ip()
    }

    /// One more place for this connection's client, counted against both caps as a connection
    /// of its own (a WebSocket on an HTTP/2 stream, a stream in flight inside a tunnel: one
    /// connection must not carry more than the client's share), or why there is none.
    pub(crate) fn extra(&self) -> Result<Extra, Refused> {
        let ip = self.client();
        self.gate.room(ip)?.add_extra(ip);
        Ok(Extra {
            gate: self.gate.clone(),
            ip,
        })
    }

    /// Marks the connection as carrying a request until the returned guard drops.
    pub(crate) fn carrying(self: &Arc<Self>) -> Busy {
        self.state.carry();
        Busy { slot: self.clone() }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.slot.state.done(&self.slot.gate.sequence);
    }
}

/// A place counted for a client beside its connections ([`Slot::extra`]): busy for its life,
/// given back when it drops.
#[derive(Debug)]
pub(crate) struct Extra {
    gate: Arc<Gate>,
    ip: IpAddr,
}

impl Drop for Extra {
    fn drop(&mut self) {
        locks::lock(&self.gate.books).forget_extra(self.ip);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        locks::lock(&self.gate.books).forget(self.id);
    }
}

/// A response body that keeps its connection [`Busy`] (or whatever `G` marks the request in
/// flight with) until it ends, fails or is dropped.
#[derive(Debug)]
pub(crate) struct Carried<B, G = Busy> {
    body: B,
    busy: Option<G>,
}

impl<B, G> Carried<B, G> {
    /// `body`, carrying `busy`.
    pub(crate) fn new(body: B, busy: G) -> Self {
        Carried {
            body,
            busy: Some(busy),
        }
    }
}

impl<B: http_body::Body + Unpin, G: Unpin> http_body::Body for Carried<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let this = &mut *self;
        let polled = std::pin::Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            std::task::Poll::Ready(None | Some(Err(_))) => this.busy = None,
            std::task::Poll::Ready(Some(Ok(_))) if this.body.is_end_stream() => this.busy = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The short answer to a connection over a cap, written without reading the request (it fits in
/// a fresh socket's send buffer; if it does not, the close alone is the answer).
pub(crate) fn refuse_busy(stream: &TcpStream, why: Refused) {
    let reason = why.to_string();
    let body = format!("courtesy: 503 (connection_limit_reached): {reason}\n");
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nproxy-status: courtesy; error=connection_limit_reached; \
         details=\"{reason}\"\r\nretry-after: 1\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(head.as_bytes());
}

/// `served` (a request's answer on `slot`'s connection), with the connection marked as carrying
/// the request from now until the answer's body has been sent.
pub(crate) fn carry<B>(
    slot: &Arc<Slot>,
    served: impl std::future::Future<Output = Result<hyper::Response<B>, std::convert::Infallible>>,
) -> impl std::future::Future<Output = Result<hyper::Response<Carried<B>>, std::convert::Infallible>>
{
    let busy = slot.carrying();
    async move {
        let response = served.await?;
        Ok(response.map(|body| Carried::new(body, busy)))
    }
}

/// Waits up to `timeout` for the client's first byte; `false` when none came (or it hung up),
/// or when `stopping` (shutdown) or `evicted` (its place given to a newer connection) came
/// first: a silent connection has nothing to finish.
pub(crate) async fn first_byte(
    stream: &TcpStream,
    timeout: Duration,
    stopping: impl std::future::Future<Output = ()>,
    evicted: impl std::future::Future<Output = ()>,
) -> bool {
    let mut one = [0u8; 1];
    tokio::select! {
        peeked = tokio::time::timeout(timeout, stream.peek(&mut one)) => {
            matches!(peeked, Ok(Ok(n)) if n > 0)
        }
        () = stopping => false,
        () = evicted => false,
    }
}

/// A spare file descriptor, given up when `accept` fails for lack of them so that the waiting
/// connection can be taken and closed instead of failing again at once.
#[derive(Debug)]
pub(crate) struct Spare {
    file: Option<std::fs::File>,
    last_warning: Option<Instant>,
}

impl Spare {
    /// Holds one descriptor (of `/dev/null`).
    pub(crate) fn new() -> Self {
        Spare {
            file: std::fs::File::open("/dev/null").ok(),
            last_warning: None,
        }
    }

    /// The accepted connection, or `None` after handling a failed accept: out of descriptors, the
    /// waiting connection is accepted on the spare one and closed; any other error pauses the
    /// listener briefly. A warning at most once a second.
    pub(crate) async fn accepted(
        &mut self,
        accepted: io::Result<(TcpStream, SocketAddr)>,
        listener: &TcpListener,
    ) -> Option<(TcpStream, SocketAddr)> {
        let e = match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                return Some((stream, peer));
            }
            Err(e) => e,
        };
        let now = Instant::now();
        if self
            .last_warning
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
        {
            warn!("accept failed: {e}; refusing new connections until descriptors are free");
            self.last_warning = Some(now);
        }
        if is_out_of_descriptors(&e) {
            self.file = None;
            if let Some(Ok((stream, _))) = listener.accept().now_or_never() {
                drop(stream);
            }
            self.file = std::fs::File::open("/dev/null").ok();
            if self.file.is_none() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

/// Whether `e` is this machine running out of something (descriptors, buffers, memory, local
/// ports): a local failure, never the target's.
pub(crate) fn is_local_exhaustion(e: &io::Error) -> bool {
    // EMFILE, ENFILE, ENOBUFS, ENOMEM, EADDRNOTAVAIL (no local port left).
    matches!(e.raw_os_error(), Some(24 | 23 | 105 | 12 | 99))
}

/// EMFILE or ENFILE.
fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(24 | 23))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `slot` was asked to close.
    fn is_evicted(slot: &Slot) -> bool {
        slot.evicted().now_or_never().is_some()
    }

    /// A place for a connection from `ip` in `gate`, which must be given.
    fn admitted(gate: &Arc<Gate>, ip: &str) -> Arc<Slot> {
        Arc::new(gate.let_in(ip.parse().unwrap()).unwrap())
    }

    #[test]
    fn caps_per_client_and_in_total_and_places_come_back() {
        let gate = Gate::new(Caps {
            total: 3,
            per_client: 2,
        });
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let a1 = admitted(&gate, "127.0.0.1");
        let a2 = admitted(&gate, "127.0.0.1");
        let (_c1, _c2) = (a1.carrying(), a2.carrying());
        assert_eq!(gate.let_in(a).unwrap_err(), Refused::PerClient(2));
        let b1 = admitted(&gate, "::ffff:127.0.0.2");
        let _c3 = b1.carrying();
        assert_eq!(
            gate.let_in("127.0.0.3".parse().unwrap()).unwrap_err(),
            Refused::Total(3)
        );
        drop((_c1, a1));
        assert_eq!(gate.open(), 2);
        assert!(gate.let_in(a).is_ok());
    }

    #[test]
    fn at_the_per_client_cap_the_longest_idle_kept_alive_connection_makes_room() {
        let gate = Gate::new(Caps {
            total: 100,
            per_client: 3,
        });
        let fresh = admitted(&gate, "127.0.0.1");
        let older = admitted(&gate, "127.0.0.1");
        let newer = admitted(&gate, "127.0.0.1");
        // `older` and `newer` each carried a request; `older`'s ended first.
        drop(older.carrying());
        drop(newer.carrying());
        let fourth = admitted(&gate, "127.0.0.1");
        assert!(
            is_evicted(&older),
            "the longest idle kept-alive one goes first"
        );
        assert!(!is_evicted(&fresh) && !is_evicted(&newer));
        assert_eq!(gate.open(), 3);
        // Dropping the evicted slot later does not give its place back twice.
        drop(older);
        assert_eq!(gate.open(), 3);
        // The first bytes of a request on `newer` make it in use: not closed for a new one.
        newer.heard();
        assert_eq!(
            gate.let_in("127.0.0.1".parse().unwrap()).unwrap_err(),
            Refused::PerClient(3)
        );
        assert!(!is_evicted(&newer));
        // Its request answered, it is idle again, and may make room.
        drop(newer.carrying());
        let fifth = admitted(&gate, "127.0.0.1");
        assert!(is_evicted(&newer));
        // A fresh connection that never carried a request is never closed for another: with
        // the rest busy, the next one is refused.
        let (_c4, _c5) = (fourth.carrying(), fifth.carrying());
        assert_eq!(
            gate.let_in("127.0.0.1".parse().unwrap()).unwrap_err(),
            Refused::PerClient(3)
        );
        assert!(!is_evicted(&fresh));
        // Another client is not touched by this one's cap.
        assert!(gate.let_in("127.0.0.2".parse().unwrap()).is_ok());
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64() {
        let gate = Gate::new(Caps {
            total: 100,
            per_client: 2,
        });
        let a = admitted(&gate, "2001:db8:1:2::1");
        let b = admitted(&gate, "2001:db8:1:2:ffff::9");
        let (_a, _b) = (a.carrying(), b.carrying());
        assert_eq!(
            gate.let_in("2001:db8:1:2:1234::1".parse().unwrap())
                .unwrap_err(),
            Refused::PerClient(2),
            "another address of the same /64 is the same client"
        );
        assert!(gate.let_in("2001:db8:1:3::1".parse().unwrap()).is_ok());
    }

    #[test]
    fn extra_places_count_against_both_caps_and_are_never_evicted() {
        let gate = Gate::new(Caps {
            total: 4,
            per_client: 3,
        });
        let conn = admitted(&gate, "127.0.0.1");
        let _busy = conn.carrying();
        let first = conn.extra().unwrap();
        let _second = conn.extra().unwrap();
        assert_eq!(conn.extra().unwrap_err(), Refused::PerClient(3));
        assert_eq!(
            gate.let_in("127.0.0.1".parse().unwrap()).unwrap_err(),
            Refused::PerClient(3)
        );
        let other = admitted(&gate, "127.0.0.2");
        assert_eq!(gate.open(), 4);
        let _other = other.carrying();
        assert_eq!(
            gate.let_in("127.0.0.3".parse().unwrap()).unwrap_err(),
            Refused::Total(4),
            "an extra place is never closed to make room"
        );
        drop(first);
        assert!(conn.extra().is_ok());
    }

    #[test]
    fn at_the_total_cap_anyones_idle_kept_alive_connection_makes_room() {
        let gate = Gate::new(Caps {
            total: 2,
            per_client: 2,
        });
        let a = admitted(&gate, "127.0.0.1");
        drop(a.carrying());
        let b = admitted(&gate, "127.0.0.2");
        let _busy = b.carrying();
        let c = admitted(&gate, "127.0.0.3");
        assert!(is_evicted(&a) && !is_evicted(&b));
        // `c` is fresh: kept, and the next one refused.
        assert_eq!(
            gate.let_in("127.0.0.4".parse().unwrap()).unwrap_err(),
            Refused::Total(2)
        );
        assert!(!is_evicted(&c));
    }

    #[test]
    fn running_out_locally_is_told_from_the_hosts_failures() {
        for errno in [24, 23, 105, 12, 99] {
            assert!(is_local_exhaustion(&io::Error::from_raw_os_error(errno)));
        }
        assert!(!is_local_exhaustion(&io::Error::from_raw_os_error(111)));
        assert!(!is_local_exhaustion(&io::Error::other("x")));
    }

    #[test]
    fn unset_caps_are_sized_from_the_fd_limit_and_a_sidecar_has_one_client() {
        let admin = Caps {
            total: 64,
            per_client: 16,
        };
        let unset = Asked {
            total: None,
            per_client: None,
        };
        let sidecar = proxy_caps(unset, admin, Some(20_000), true);
        assert_eq!(sidecar.total, (20_000 - RESERVED_FDS as usize - 64) / 2);
        assert_eq!(sidecar.per_client, sidecar.total);
        let team = proxy_caps(unset, admin, Some(20_000), false);
        assert_eq!(
            (team.total, team.per_client),
            (sidecar.total, TEAM_PER_CLIENT)
        );
        // A huge limit is bounded; a tiny one still admits a connection.
        assert_eq!(
            proxy_caps(unset, admin, Some(10_000_000), true).total,
            AUTO_MAX_CONNECTIONS
        );
        assert_eq!(proxy_caps(unset, admin, Some(100), false).per_client, 1);
        // What the config sets is kept as it is (then fitted like any other).
        let set = Asked {
            total: Some(300),
            per_client: Some(7),
        };
        let caps = proxy_caps(set, admin, Some(20_000), true);
        assert_eq!((caps.total, caps.per_client), (300, 7));
        let (fitted, _) = fit_to_fd_limit(sidecar, admin, Some(20_000));
        assert_eq!(fitted, sidecar, "the sized caps fit as they are");
    }

    #[test]
    fn caps_fit_under_the_fd_limit() {
        let proxy = Caps {
            total: 10_000,
            per_client: 512,
        };
        let admin = Caps {
            total: 64,
            per_client: 16,
        };
        let (p, a) = fit_to_fd_limit(proxy, admin, Some(1024));
        assert!(
            p.total * 2 + a.total + RESERVED_FDS as usize <= 1024,
            "{p:?} {a:?}"
        );
        assert!(p.per_client <= p.total);
        assert_eq!(
            fit_to_fd_limit(proxy, admin, Some(1_000_000)),
            (proxy, admin)
        );
    }
}
