//! The gate's books: the connections counted against the caps, and which of them may be closed to
//! make room.
//!
//! A connection's own state (the requests it carries, whether it has carried one, since when it
//! has been idle) is kept in atomics beside it, and changes on every request without the gate's
//! lock: with the books under one lock taken three times per request, two workers serving
//! requests took turns at it and moved its memory between their cores on every request. The lock
//! now guards only the list of connections: taken when one opens or closes, and when one must
//! make room at a cap, where the idle-longest connection is found by a scan (of the client's own
//! connections at its cap, of all of them at the total cap) and claimed with a compare-and-swap,
//! so that a request arriving at the same moment either keeps its connection or finds it closing,
//! never both.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// `idle_since` of a connection receiving or carrying a request: not closed to make room.
const NOT_IDLE: u64 = 0;

/// `idle_since` of a connection asked to close to make room.
const CLOSING: u64 = u64::MAX;

/// How many times an eviction looks again when the connection it picked took a request at that
/// very moment, before it gives up and the newcomer is refused.
const EVICTION_TRIES: usize = 8;

/// One counted connection, shared by its holder and the books.
#[derive(Debug)]
pub(super) struct ConnState {
    /// The client, as the caps count it.
    ip: IpAddr,
    /// Requests (or a CONNECT tunnel) it carries now.
    busy: AtomicUsize,
    /// Whether it has carried a request: a fresh connection that has not is never closed to make
    /// room (its client may be about to send on it and would not retry, while clients expect a
    /// kept-alive connection to close and retry on a new one).
    used: AtomicBool,
    /// The gate's sequence number when it last became idle, [`NOT_IDLE`] while a request is
    /// arriving or carried, [`CLOSING`] once asked to close.
    idle_since: AtomicU64,
    /// Cancelled to ask the connection to close.
    pub(super) close: CancellationToken,
}

impl ConnState {
    /// The client, as the caps count it.
    pub(super) fn ip(&self) -> IpAddr {
        self.ip
    }

    /// Bytes of a request came: the connection is in use, not closed to make room, until it is
    /// idle again. Nothing changes on one already in use, or closing.
    pub(super) fn heard(&self) {
        let since = self.idle_since.load(Ordering::Acquire);
        if since != NOT_IDLE && since != CLOSING {
            // Lost only to an eviction (then it is closing) or another `heard` (then in use).
            let _ = self.idle_since.compare_exchange(
                since,
                NOT_IDLE,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    /// One more request carried.
    pub(super) fn carry(&self) {
        self.busy.fetch_add(1, Ordering::AcqRel);
        self.used.store(true, Ordering::Release);
        self.heard();
    }

    /// One request fewer; when it was the last, idle from the next of `sequence`.
    pub(super) fn done(&self, sequence: &AtomicU64) {
        if self.busy.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let at = sequence.fetch_add(1, Ordering::Relaxed) + 1;
        // A closing connection stays closing.
        let _ = self
            .idle_since
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |since| {
                (since != CLOSING).then_some(at)
            });
    }

    /// When it became idle, if it may be closed to make room: kept alive after a request, no
    /// byte of the next one come, not closing.
    fn evictable_since(&self) -> Option<u64> {
        let since = self.idle_since.load(Ordering::Acquire);
        let idle = since != NOT_IDLE && since != CLOSING;
        (idle && self.used.load(Ordering::Acquire) && self.busy.load(Ordering::Acquire) == 0)
            .then_some(since)
    }
}

/// The connections counted, under the gate's lock.
#[derive(Debug, Default)]
pub(super) struct Books {
    /// Connections counted, by id (ours, not a client's: hashed fast).
    conns: HashMap<u64, Arc<ConnState>, foldhash::fast::RandomState>,
    /// The connections of each client.
    per_client: HashMap<IpAddr, HashSet<u64, foldhash::fast::RandomState>>,
    /// Extra places ([`super::Extra`]): busy for good, never closed to make room, so only
    /// counted, in all and per client.
    extras: usize,
    extras_per_client: HashMap<IpAddr, usize>,
    /// The next id.
    next: u64,
}

impl Books {
    /// Places counted now: connections and extra places.
    pub(super) fn len(&self) -> usize {
        self.conns.len() + self.extras
    }

    /// Places of `ip` counted now.
    pub(super) fn of_client(&self, ip: IpAddr) -> usize {
        let extras = self.extras_per_client.get(&ip).copied().unwrap_or(0);
        self.per_client.get(&ip).map_or(0, HashSet::len) + extras
    }

    /// Counts an extra place of `ip`.
    pub(super) fn add_extra(&mut self, ip: IpAddr) {
        self.extras += 1;
        *self.extras_per_client.entry(ip).or_insert(0) += 1;
    }

    /// Stops counting an extra place of `ip`.
    pub(super) fn forget_extra(&mut self, ip: IpAddr) {
        self.extras = self.extras.saturating_sub(1);
        if let Some(count) = self.extras_per_client.get_mut(&ip) {
            *count -= 1;
            if *count == 0 {
                self.extras_per_client.remove(&ip);
            }
        }
    }

    /// Counts a new connection of `ip`, idle from `sequence`'s next number: a fresh one, never
    /// closed to make room until it has carried a request.
    pub(super) fn add(&mut self, ip: IpAddr, sequence: &AtomicU64) -> (u64, Arc<ConnState>) {
        self.next += 1;
        let id = self.next;
        let state = Arc::new(ConnState {
            ip,
            busy: AtomicUsize::new(0),
            used: AtomicBool::new(false),
            idle_since: AtomicU64::new(sequence.fetch_add(1, Ordering::Relaxed) + 1),
            close: CancellationToken::new(),
        });
        self.conns.insert(id, state.clone());
        self.per_client.entry(ip).or_default().insert(id);
        (id, state)
    }

    /// Stops counting `id` (closed, or asked to close); nothing if it is not counted.
    pub(super) fn forget(&mut self, id: u64) {
        let Some(conn) = self.conns.remove(&id) else {
            return;
        };
        if let Some(ids) = self.per_client.get_mut(&conn.ip) {
            ids.remove(&id);
            if ids.is_empty() {
                self.per_client.remove(&conn.ip);
            }
        }
    }

    /// Asks the connection idle longest (of `ip`, or of anyone) to close, and stops counting it;
    /// `false` when none may be closed.
    pub(super) fn evict(&mut self, ip: Option<IpAddr>) -> bool {
        for _ in 0..EVICTION_TRIES {
            let Some((id, conn, since)) = self.idle_longest(ip) else {
                return false;
            };
            let claimed = conn
                .idle_since
                .compare_exchange(since, CLOSING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if !claimed {
                continue; // A request came on it: look again.
            }
            if conn.busy.load(Ordering::Acquire) != 0 {
                // It took a request after all (between the look and the claim): it stays.
                conn.idle_since.store(NOT_IDLE, Ordering::Release);
                continue;
            }
            self.forget(id);
            conn.close.cancel();
            return true;
        }
        false
    }

    /// The connection that may be closed and has been idle longest (of `ip`, or of anyone): its
    /// id, itself, and when it became idle.
    fn idle_longest(&self, ip: Option<IpAddr>) -> Option<(u64, Arc<ConnState>, u64)> {
        let since = |id: &u64| {
            let conn = self.conns.get(id)?;
            conn.evictable_since().map(|since| (*id, conn, since))
        };
        let (id, conn, since) = match ip {
            Some(ip) => self
                .per_client
                .get(&ip)?
                .iter()
                .filter_map(since)
                .min_by_key(|(_, _, s)| *s),
            None => self
                .conns
                .keys()
                .filter_map(since)
                .min_by_key(|(_, _, s)| *s),
        }?;
        Some((id, conn.clone(), since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn books_with(n: usize) -> (Books, AtomicU64, Vec<(u64, Arc<ConnState>)>) {
        let (mut books, sequence) = (Books::default(), AtomicU64::new(0));
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let conns = (0..n).map(|_| books.add(ip, &sequence)).collect();
        (books, sequence, conns)
    }

    #[test]
    fn a_request_that_arrives_as_its_connection_is_picked_keeps_it() {
        let (mut books, sequence, conns) = books_with(2);
        let ip = Some("127.0.0.1".parse().unwrap());
        for (_, conn) in &conns {
            conn.carry();
            conn.done(&sequence);
        }
        let (first, second) = (&conns[0].1, &conns[1].1);
        // The first is idle longest, but a request took it between the look and the claim: the
        // claim fails, the next look picks the second.
        let (id, _, since) = books.idle_longest(ip).unwrap();
        assert_eq!(id, conns[0].0);
        first.heard();
        assert!(first
            .idle_since
            .compare_exchange(since, CLOSING, Ordering::AcqRel, Ordering::Acquire)
            .is_err());
        assert!(books.evict(ip));
        assert!(!first.close.is_cancelled() && second.close.is_cancelled());
        assert_eq!(books.len(), 1);
        // A connection asked to close stays closing whatever happens on it.
        second.heard();
        second.carry();
        second.done(&sequence);
        assert_eq!(second.idle_since.load(Ordering::Acquire), CLOSING);
    }

    #[test]
    fn a_connection_busy_again_is_never_closed_and_idle_order_follows_the_last_request() {
        let (mut books, sequence, conns) = books_with(3);
        let client: IpAddr = "127.0.0.1".parse().unwrap();
        let ip = Some(client);
        assert!(!books.evict(ip), "fresh connections are never closed");
        for (_, conn) in &conns {
            conn.carry();
        }
        assert!(!books.evict(ip), "busy connections are never closed");
        // They go idle in the order 2, 0, 1: 2 is closed first, then 0.
        for i in [2, 0, 1] {
            conns[i].1.done(&sequence);
        }
        assert!(books.evict(ip));
        assert!(conns[2].1.close.is_cancelled());
        assert!(books.evict(None));
        assert!(conns[0].1.close.is_cancelled());
        assert_eq!(books.of_client(client), 1);
        books.forget(conns[1].0);
        books.forget(conns[1].0);
        assert_eq!((books.len(), books.of_client(client)), (0, 0));
        books.add_extra(client);
        assert_eq!((books.len(), books.of_client(client)), (1, 1));
        assert!(!books.evict(None), "an extra place is never closed");
        books.forget_extra(client);
        assert_eq!((books.len(), books.of_client(client)), (0, 0));
    }
}
