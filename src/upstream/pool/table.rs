//! The upstream connection table (`max_upstream_connections`): every upstream connection, pooled
//! or tunnelled, holds one of its slots while it is open, idle in the pool too. When the table is
//! full, a new connection does not wait for an idle one to time out (up to 90 s: a crawl over
//! thousands of new hosts would stall once the table filled): the pooled connection that has been
//! idle longest is asked to close, and its slot goes to the new one. A connection carrying a
//! request is never closed this way.
//!
//! A connection is idle when every request begun on it has been answered and its response read
//! (or given up): its state counts the requests begun (a write after a read, seen by the
//! connection's I/O: HTTP/1.1 never has two requests in flight on one connection) and the
//! request whose response was read last (marked by an [`IdleMark`] that travels with the
//! response). Asked to close, an idle connection ends its next read as if the origin had closed
//! it, which the pooled client handles like any origin's close of a kept-alive connection.
//!
//! An HTTP/2 connection carries many requests at once, which this count cannot follow: once a
//! response has come over HTTP/2 on it, a connection is never idle here (never closed for a new
//! one); the pool closes it after its idle timeout like any other. One HTTP/2 connection per host
//! holds one slot where HTTP/1.1 held up to `concurrency`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::util::locks;

/// The upstream connections open at once, all hosts and parents together
/// (`max_upstream_connections`): each holds a slot from here for its life, idle in the pool too.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamSlots {
    slots: Arc<Semaphore>,
    idle: Arc<IdleList>,
    max: usize,
    wait: Duration,
}

/// No upstream connection slot came free in time: a local limit, never the target's failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{max} upstream connections are open (max_upstream_connections), all of them busy, and none closed within {wait_s}s"
)]
pub(crate) struct UpstreamsExhausted {
    max: usize,
    wait_s: f64,
}

impl UpstreamSlots {
    /// `max` slots; a new connection waits up to `wait` for one when every open one is busy.
    pub(crate) fn new(max: usize, wait: Duration) -> Self {
        UpstreamSlots {
            slots: Arc::new(Semaphore::new(max)),
            idle: Arc::new(IdleList::new(max)),
            max,
            wait,
        }
    }

    /// A slot for one upstream connection, held until it closes. With the table full, the
    /// connection idle longest is asked to close for it; with every connection busy, waits up to
    /// the connect timeout for one to close or fall idle.
    pub(crate) async fn take(&self) -> Result<OwnedSemaphorePermit, UpstreamsExhausted> {
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Ok(slot);
        }
        let exhausted = || UpstreamsExhausted {
            max: self.max,
            wait_s: self.wait.as_secs_f64(),
        };
        let deadline = Instant::now() + self.wait;
        self.idle.waiting.fetch_add(1, Ordering::SeqCst);
        let _unwait = Unwait(&self.idle);
        loop {
            // Registered before the look at the list, so that a connection falling idle after
            // the look still wakes this waiter.
            let fell_idle = self.idle.fell_idle.notified();
            tokio::pin!(fell_idle);
            fell_idle.as_mut().enable();
            self.idle.close_longest_idle();
            tokio::select! {
                slot = self.slots.clone().acquire_owned() => {
                    return slot.map_err(|_| exhausted());
                }
                () = &mut fell_idle => {}
                () = tokio::time::sleep_until(deadline) => return Err(exhausted()),
            }
        }
    }

    /// The state a new connection shares with the table: its requests and whether it is idle.
    pub(crate) fn new_connection(&self) -> Arc<ConnState> {
        Arc::new(ConnState::new(Arc::downgrade(&self.idle)))
    }
}

/// Takes a waiter off the count when its wait ends, however it ends.
struct Unwait<'a>(&'a IdleList);

impl Drop for Unwait<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The pooled connections that have fallen idle, longest idle first. A connection is listed
/// once (its place kept while it is reused, checked when it comes to the front); the list is
/// bounded, dropping its oldest entries, most of them closed connections.
#[derive(Debug)]
struct IdleList {
    entries: Mutex<VecDeque<Listed>>,
    /// Entries kept at most.
    cap: usize,
    /// Connections waiting for a slot now: only then does falling idle wake anyone.
    waiting: AtomicUsize,
    /// Told when a connection falls idle while someone waits for a slot.
    fell_idle: Notify,
    /// The origin of the idle times in [`ConnState::idle_since`].
    epoch: Instant,
}

/// One entry of the list: the connection and when it was listed (ms since the epoch).
#[derive(Debug)]
struct Listed {
    conn: Weak<ConnState>,
    at_ms: u64,
}

/// Entries looked at per close, at most: the lock is held that long.
const LOOKS_PER_CLOSE: usize = 256;

impl IdleList {
    fn new(max: usize) -> Self {
        IdleList {
            entries: Mutex::new(VecDeque::new()),
            cap: max.saturating_mul(2).max(16),
            waiting: AtomicUsize::new(0),
            fell_idle: Notify::new(),
            epoch: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Lists `conn`, which has just fallen idle (unless it is listed already).
    fn list(&self, conn: &Arc<ConnState>, now_ms: u64) {
        if !conn.listed.swap(true, Ordering::AcqRel) {
            let mut entries = locks::lock(&self.entries);
            while entries.len() >= self.cap {
                if let Some(dropped) = entries.pop_front() {
                    if let Some(c) = dropped.conn.upgrade() {
                        c.listed.store(false, Ordering::Release);
                    }
                }
            }
            entries.push_back(Listed {
                conn: Arc::downgrade(conn),
                at_ms: now_ms,
            });
        }
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.fell_idle.notify_waiters();
        }
    }

    /// Asks the connection idle longest to close, if one is idle.
    fn close_longest_idle(&self) {
        let mut entries = locks::lock(&self.entries);
        for _ in 0..LOOKS_PER_CLOSE {
            let Some(front) = entries.pop_front() else {
                return;
            };
            let Some(conn) = front.conn.upgrade() else {
                continue;
            };
            if !conn.is_idle() || conn.closing.load(Ordering::Acquire) {
                // Busy: it lists itself again when it falls idle.
                conn.listed.store(false, Ordering::Release);
                continue;
            }
            if conn.idle_since_ms.load(Ordering::Acquire) > front.at_ms {
                // Used again since it was listed: its turn comes after the others.
                entries.push_back(Listed {
                    conn: front.conn,
                    at_ms: conn.idle_since_ms.load(Ordering::Acquire),
                });
                continue;
            }
            conn.listed.store(false, Ordering::Release);
            conn.closing.store(true, Ordering::Release);
            conn.reader.wake();
            return;
        }
    }
}

/// What one upstream connection shares with the table and with the responses it carries.
#[derive(Debug)]
pub(crate) struct ConnState {
    /// Requests answered on it (an answer or a failure counted by `super::reuse`).
    pub(crate) answered: AtomicU32,
    /// Requests begun on it: writes that follow a read (or start the connection).
    begun: AtomicU64,
    /// The `begun` number of the request whose response was read last.
    done: AtomicU64,
    /// When it last fell idle, in ms since the list's epoch.
    idle_since_ms: AtomicU64,
    /// Asked to close: its next read ends the connection (while it is idle).
    closing: AtomicBool,
    /// In the idle list now.
    listed: AtomicBool,
    /// It carries HTTP/2 (requests in flight at once): never idle here.
    multiplexed: AtomicBool,
    /// Never to carry another request (an answer's framing was suspect, `crate::proxy`'s sanitizing): its
    /// next read once idle ends it, and a request begun on it fails before a byte is sent.
    retired: AtomicBool,
    /// The task reading the connection, woken to close it.
    reader: AtomicWaker,
    table: Weak<IdleList>,
}

impl ConnState {
    fn new(table: Weak<IdleList>) -> Self {
        ConnState {
            answered: AtomicU32::new(0),
            begun: AtomicU64::new(0),
            done: AtomicU64::new(0),
            idle_since_ms: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            listed: AtomicBool::new(false),
            multiplexed: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            reader: AtomicWaker::new(),
            table,
        }
    }

    /// A state that no table lists (a connection outside `max_upstream_connections`).
    pub(crate) fn unlisted() -> Arc<Self> {
        Arc::new(ConnState::new(Weak::new()))
    }

    /// Every request begun on it has been answered and read (never, for an HTTP/2 connection).
    fn is_idle(&self) -> bool {
        !self.multiplexed.load(Ordering::Acquire)
            && self.done.load(Ordering::Acquire) == self.begun.load(Ordering::Acquire)
    }

    /// The connection carries HTTP/2: from now on it is never idle here.
    pub(crate) fn set_multiplexed(&self) {
        self.multiplexed.store(true, Ordering::Release);
    }

    /// A request begins on the connection (its first write after a read).
    pub(crate) fn begin_request(&self) {
        self.begun.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether a read should end the connection now (asked to close or retired, and idle),
    /// registering the reading task otherwise so that a later ask wakes it.
    pub(crate) fn read_ends(&self, waker: &std::task::Waker) -> bool {
        self.reader.register(waker);
        (self.closing.load(Ordering::Acquire) || self.is_retired()) && self.is_idle()
    }

    /// The connection is never to carry another request (RFC 9112 6.3: an answer with both
    /// `Transfer-Encoding` and `Content-Length`, or one courtesy refused): it closes as soon as
    /// the answer in flight has been read or given up, and a request that begins on it before
    /// then (the pooled client may have taken it up again meanwhile) fails unsent.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        if self.is_idle() {
            self.reader.wake();
        }
    }

    /// Whether the connection is retired: a request must not begin on it.
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// The mark for the response that arrived now: the connection falls idle when it is
    /// dropped (the response read, or given up).
    pub(crate) fn answered_now(self: &Arc<Self>) -> IdleMark {
        IdleMark {
            conn: self.clone(),
            request: self.begun.load(Ordering::Acquire),
        }
    }
}

/// Held with a response until its body has been read (or given up): dropped, it marks the
/// connection that carried it idle, unless another request has begun on it since.
#[derive(Debug)]
pub struct IdleMark {
    conn: Arc<ConnState>,
    request: u64,
}

impl Drop for IdleMark {
    fn drop(&mut self) {
        let conn = &self.conn;
        conn.done.fetch_max(self.request, Ordering::AcqRel);
        if conn.is_retired() {
            // Read to the end: the reader closes it now, and it never joins the idle list.
            if conn.is_idle() {
                conn.reader.wake();
            }
            return;
        }
        let Some(table) = conn.table.upgrade() else {
            return;
        };
        if conn.is_idle() {
            let now = table.now_ms();
            conn.idle_since_ms.store(now, Ordering::Release);
            table.list(conn, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waker() -> std::task::Waker {
        futures_util::task::noop_waker()
    }

    /// A connection of `slots` that has carried one request and read its response.
    fn idle_connection(slots: &UpstreamSlots) -> Arc<ConnState> {
        let conn = slots.new_connection();
        conn.begin_request();
        drop(conn.answered_now());
        conn
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_table_closes_the_connection_idle_longest() {
        let slots = UpstreamSlots::new(2, Duration::from_secs(10));
        let first = slots.take().await.unwrap();
        let oldest = idle_connection(&slots);
        tokio::time::sleep(Duration::from_millis(5)).await;
        let second = slots.take().await.unwrap();
        let newer = idle_connection(&slots);
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.take().await }
        });
        tokio::task::yield_now().await;
        assert!(
            oldest.read_ends(&waker()),
            "the longest idle is asked to close"
        );
        assert!(!newer.read_ends(&waker()), "the newer one stays");
        // Its read ends the connection, which gives its slot back.
        drop(first);
        let slot = waiting.await.unwrap();
        assert!(slot.is_ok(), "the waiter got the freed slot");
        drop(second);
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_connection_is_never_closed_and_the_waiter_times_out() {
        let slots = UpstreamSlots::new(1, Duration::from_secs(3));
        let _held = slots.take().await.unwrap();
        let busy = slots.new_connection();
        busy.begin_request();
        let mark = busy.answered_now();
        // A second request begins before the first one's mark is dropped: still busy.
        busy.begin_request();
        drop(mark);
        let started = Instant::now();
        let refused = slots.take().await;
        assert!(
            refused.is_err(),
            "no slot while the only connection is busy"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert!(!busy.read_ends(&waker()), "never asked to close while busy");
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_connection_is_never_closed_for_a_new_one() {
        let slots = UpstreamSlots::new(1, Duration::from_secs(2));
        let held = slots.take().await.unwrap();
        let conn = slots.new_connection();
        conn.set_multiplexed();
        // Two streams begun in one write, one answered and read: the other is still in flight.
        conn.begin_request();
        drop(conn.answered_now());
        assert!(slots.take().await.is_err(), "no slot taken from it");
        assert!(!conn.read_ends(&waker()), "never asked to close");
        drop(held);
    }

    #[test]
    fn a_retired_connection_ends_once_its_answer_is_read_and_is_never_listed_idle() {
        let slots = UpstreamSlots::new(4, Duration::from_secs(1));
        let conn = slots.new_connection();
        conn.begin_request();
        let mark = conn.answered_now();
        assert!(!conn.is_retired());
        conn.retire();
        assert!(conn.is_retired());
        assert!(
            !conn.read_ends(&waker()),
            "the answer in flight is read to its end"
        );
        drop(mark);
        assert!(conn.read_ends(&waker()), "then the connection ends");
        assert!(
            !conn.listed.load(Ordering::Acquire),
            "never offered as an idle connection"
        );
        // Retired between answers: its next read ends it.
        let idle = slots.new_connection();
        idle.retire();
        assert!(idle.read_ends(&waker()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_falling_idle_while_one_waits_gives_its_slot() {
        let slots = UpstreamSlots::new(1, Duration::from_secs(10));
        let held = slots.take().await.unwrap();
        let conn = slots.new_connection();
        conn.begin_request();
        let mark = conn.answered_now();
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.take().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "waits while the connection is busy");
        // The response is read: the connection falls idle, the waiter asks it to close.
        drop(mark);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(conn.read_ends(&waker()), "asked to close once idle");
        drop(held);
        assert!(waiting.await.unwrap().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_reused_since_it_was_listed_goes_after_the_others() {
        let slots = UpstreamSlots::new(2, Duration::from_secs(10));
        let _a = slots.take().await.unwrap();
        let _b = slots.take().await.unwrap();
        let reused = idle_connection(&slots);
        tokio::time::sleep(Duration::from_millis(5)).await;
        let other = idle_connection(&slots);
        tokio::time::sleep(Duration::from_millis(5)).await;
        // `reused` carries another request and falls idle again: now the most recent.
        reused.begin_request();
        drop(reused.answered_now());
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.take().await }
        });
        tokio::task::yield_now().await;
        assert!(other.read_ends(&waker()), "the one idle longest goes first");
        assert!(!reused.read_ends(&waker()));
        waiting.abort();
    }

    #[test]
    fn the_list_stays_bounded_when_no_one_waits() {
        let slots = UpstreamSlots::new(4, Duration::from_secs(1));
        for _ in 0..1000 {
            // Each connection falls idle once, then closes (its state dropped).
            drop(idle_connection(&slots));
        }
        let listed = locks::lock(&slots.idle.entries).len();
        assert!(listed <= slots.idle.cap, "{listed} entries kept");
    }
}
