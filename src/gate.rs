//! Who gets a connection at all, decided before a byte is read: a client outside
//! `allow_clients` is closed at accept; a client over `max_connections_per_client`, or any client
//! while `max_connections` are open, gets a short 503 and a close; a connection that sends nothing
//! within `header_timeout_seconds` is closed. The caps are kept below the process's file
//! descriptor limit (raised to its hard limit at start), and when `accept` fails for lack of
//! descriptors all the same, one spare descriptor is given up to take the waiting connection and
//! close it, so the listener never spins on the same failure.
//!
//! This module admits and refuses connections; serving them is `crate::connections`, and what a
//! request may do is `crate::proxy` and `crate::admin`.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::locks;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `max_connections` are open.
    Total(usize),
    /// This client has `max_connections_per_client` open.
    PerClient(usize),
}

/// The open connections of one listener, counted against its caps.
#[derive(Debug)]
pub(crate) struct Gate {
    caps: Caps,
    total: AtomicUsize,
    per_client: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection: its place is given back when the last clone drops (a CONNECT tunnel
/// keeps one for its life).
#[derive(Debug)]
pub(crate) struct Slot {
    gate: Arc<Gate>,
    ip: IpAddr,
}

impl Gate {
    /// No connections yet, under `caps`.
    pub(crate) fn new(caps: Caps) -> Arc<Self> {
        Arc::new(Gate {
            caps,
            total: AtomicUsize::new(0),
            per_client: Mutex::new(HashMap::new()),
        })
    }

    /// A place for a connection from `ip`, or why there is none.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refused> {
        let ip = crate::config::canonical_ip(ip);
        let mut per_client = locks::lock(&self.per_client);
        if self.total.load(Ordering::Relaxed) >= self.caps.total {
            return Err(Refused::Total(self.caps.total));
        }
        let count = per_client.entry(ip).or_insert(0);
        if *count >= self.caps.per_client {
            return Err(Refused::PerClient(self.caps.per_client));
        }
        *count += 1;
        self.total.fetch_add(1, Ordering::Relaxed);
        Ok(Slot {
            gate: self.clone(),
            ip,
        })
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut per_client = locks::lock(&self.gate.per_client);
        if let Some(count) = per_client.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                per_client.remove(&self.ip);
            }
        }
        self.gate.total.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The short answer to a connection over a cap, written without reading the request (it fits in
/// a fresh socket's send buffer; if it does not, the close alone is the answer).
pub(crate) fn refuse_busy(stream: &TcpStream, why: Refused) {
    let reason = match why {
        Refused::Total(n) => format!("{n} connections are open (max_connections)"),
        Refused::PerClient(n) => {
            format!("this client has {n} connections open (max_connections_per_client)")
        }
    };
    let body = format!("courtesy: 503 (connection_limit_reached): {reason}\n");
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nproxy-status: courtesy; error=connection_limit_reached; \
         details=\"{reason}\"\r\nretry-after: 1\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(head.as_bytes());
}

/// Waits up to `timeout` for the client's first byte; `false` when none came (or it hung up),
/// or when `stopping` (shutdown) came first: a silent connection has nothing to finish.
pub(crate) async fn first_byte(
    stream: &TcpStream,
    timeout: Duration,
    stopping: impl std::future::Future<Output = ()>,
) -> bool {
    let mut one = [0u8; 1];
    tokio::select! {
        peeked = tokio::time::timeout(timeout, stream.peek(&mut one)) => {
            matches!(peeked, Ok(Ok(n)) if n > 0)
        }
        () = stopping => false,
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

    #[test]
    fn caps_per_client_and_in_total_and_places_come_back() {
        let gate = Gate::new(Caps {
            total: 3,
            per_client: 2,
        });
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "::ffff:127.0.0.2".parse().unwrap();
        let a1 = gate.admit(a).unwrap();
        let _a2 = gate.admit(a).unwrap();
        assert_eq!(gate.admit(a).unwrap_err(), Refused::PerClient(2));
        let _b1 = gate.admit(b).unwrap();
        assert_eq!(
            gate.admit("127.0.0.3".parse().unwrap()).unwrap_err(),
            Refused::Total(3)
        );
        drop(a1);
        assert_eq!(gate.open(), 2);
        assert!(gate.admit(a).is_ok());
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
