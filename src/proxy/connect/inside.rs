//! The books of an HTTP session served inside a CONNECT tunnel: what the tunnel was asked with
//! ([`Inside`]), the requests in flight in it ([`InFlight`]), and the end of a session that has
//! had none for a while ([`quiet_for`]). A tunnel's connection counts as carrying only while a
//! request inside is in flight, so an idle one is closed like an idle kept-alive connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::front::gate::{Busy, Extra};
use crate::proxy::forward::target::Target;
use crate::proxy::Asking;
use crate::util::locks::lock;
use crate::wire::scheme::Scheme;

/// What every request inside one tunnel shares: its target, scheme, client and the CONNECT's
/// asking, and the CONNECT's own hold on the connection until the first request begins.
#[derive(Debug)]
pub(crate) struct Inside {
    /// Where every request inside goes.
    pub(crate) target: Target,
    /// `https` inside intercepted TLS, else `http`.
    pub(crate) scheme: Scheme,
    /// The client's address.
    pub(crate) client: SocketAddr,
    /// The CONNECT's job, cooldown choice, priority and connection place.
    pub(crate) asking: Asking,
    /// The hold on the tunnel's connection (not closed to make room): the CONNECT's until the
    /// session's first request, then taken again by a request that finds none, and given up by
    /// [`watch_session`] once no request has been in flight for [`RELEASE_AFTER`]. Requests
    /// are counted in [`Load`] under this lock, so the watcher never gives it up under one.
    held: Mutex<Option<Busy>>,
    /// Told when a request takes the hold again, so that the watcher looks at the session anew.
    taken: Notify,
    /// The requests in flight, and when the session was last busy.
    pub(crate) load: Arc<Load>,
}

/// How long a served tunnel stays marked carrying after its last request ended: requests that
/// follow each other on a kept-alive tunnel keep one hold instead of taking the connection
/// gate's lock twice each; a tunnel quiet this long is idle, and may be closed to make room.
pub(crate) const RELEASE_AFTER: Duration = Duration::from_secs(1);

/// What an accepted CONNECT opened, for the work after its 200: where it goes, whose it is, who
/// asked, and the CONNECT's hold on the client connection until the first request inside.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The CONNECT's target.
    pub(crate) target: Target,
    /// The client's address.
    pub(crate) client: SocketAddr,
    /// The CONNECT's job, cooldown choice, priority and connection place.
    pub(crate) asking: Asking,
    /// The CONNECT's hold on the client connection (`None`: no place to hold).
    pub(crate) opening: Option<Busy>,
}

impl Inside {
    /// The books of a session over `scheme` inside what a CONNECT `opened`, held by its opening
    /// until its first request.
    pub(crate) fn new(opened: Opened, scheme: Scheme) -> Self {
        let Opened {
            target,
            client,
            asking,
            opening,
        } = opened;
        Inside {
            target,
            scheme,
            client,
            asking,
            held: Mutex::new(opening),
            taken: Notify::new(),
            load: Load::new(),
        }
    }

    /// Counts a request that begins: in flight until the returned guard drops, the tunnel's
    /// connection held (taken again if the watcher gave it up).
    pub(crate) fn begin(&self) -> InFlight {
        let mut held = lock(&self.held);
        let in_flight = InFlight::begin(&self.load);
        if held.is_none() {
            *held = self.asking.slot.as_ref().map(|slot| slot.carrying());
            self.taken.notify_one();
        }
        in_flight
    }
}

/// Watches a served tunnel's session: gives up its connection's hold once no request has been in
/// flight for [`RELEASE_AFTER`] (it is idle from then on, and may be closed to make room), and
/// resolves once none has been for `idle` (the session is then closed). One timer at a time;
/// a request wakes it only when it takes the hold again.
pub(crate) async fn watch_session(inside: &Inside, idle: Duration) {
    loop {
        let now = Instant::now();
        let next = {
            let mut held = lock(&inside.held);
            let last = inside.load.last_busy();
            let quiet = inside.load.in_flight.load(Ordering::Acquire) == 0;
            if quiet && last + idle <= now {
                return;
            }
            if quiet && held.is_some() && last + RELEASE_AFTER <= now {
                held.take();
            }
            let due = if held.is_some() {
                last + RELEASE_AFTER
            } else {
                last + idle
            };
            // A request in flight past its due time: look again a moment later.
            due.max(now + RELEASE_AFTER.min(idle))
        };
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = inside.taken.notified() => {}
        }
    }
}

/// What a request inside a tunnel holds until its answer has been sent: its place among the
/// client's connections (HTTP/2), and its count in flight (which keeps the connection held).
pub(crate) type InsideBusy = (Option<Extra>, InFlight);

/// The requests in flight in one session, and when the last one ended: two atomics, so a
/// request costs two additions and a clock read, and the session's watcher ([`quiet_for`]) wakes
/// at most once per idle period, never per request.
#[derive(Debug)]
pub(crate) struct Load {
    /// Requests in flight now.
    in_flight: AtomicUsize,
    /// When the session was last busy: nanoseconds after `base`.
    last_busy: AtomicU64,
    base: Instant,
}

impl Load {
    /// A session with no request yet, quiet since now.
    fn new() -> Arc<Load> {
        Arc::new(Load {
            in_flight: AtomicUsize::new(0),
            last_busy: AtomicU64::new(0),
            base: Instant::now(),
        })
    }

    fn stamp(&self) {
        let nanos = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_busy.store(nanos, Ordering::Release);
    }

    /// When the session was last busy (a request began or ended).
    fn last_busy(&self) -> Instant {
        self.base + Duration::from_nanos(self.last_busy.load(Ordering::Acquire))
    }
}

/// One request in flight in a session: counted in its session's [`Load`] until dropped.
#[derive(Debug)]
pub(crate) struct InFlight {
    load: Arc<Load>,
}

impl InFlight {
    /// Counts one more request in flight on `load`.
    fn begin(load: &Arc<Load>) -> Self {
        load.in_flight.fetch_add(1, Ordering::AcqRel);
        load.stamp();
        InFlight { load: load.clone() }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.load.stamp();
        self.load.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inside() -> Inside {
        let asking = crate::proxy::Asking::for_tests();
        let opened = Opened {
            target: Target::of_connect(&"a.test:443".parse().unwrap()).unwrap(),
            client: "127.0.0.1:9".parse().unwrap(),
            asking,
            opening: None,
        };
        Inside::new(opened, Scheme::Https)
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_is_quiet_only_after_the_whole_idle_time_without_a_request() {
        let inside = Arc::new(inside());
        let idle = Duration::from_secs(5);
        let started = Instant::now();
        let watched = inside.clone();
        let waiting = tokio::spawn(async move { watch_session(&watched, idle).await });
        // A request from 3 s to 4 s: quiet from 4 s, so the session would end at 9 s.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let request = inside.begin();
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(request);
        // A long request (from 6 s to 20 s) is never cut, however long it takes.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let long = inside.begin();
        tokio::time::sleep(Duration::from_secs(14)).await;
        assert!(!waiting.is_finished());
        drop(long);
        waiting.await.unwrap();
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(25) && took < Duration::from_secs(26),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_with_no_request_at_all_ends_after_the_idle_time() {
        let inside = inside();
        let started = Instant::now();
        watch_session(&inside, Duration::from_secs(5)).await;
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(5) && took < Duration::from_secs(6),
            "{took:?}"
        );
    }
}
