//! The books of an HTTP session served inside a CONNECT tunnel: what the tunnel was asked with
//! ([`Inside`]), the requests in flight in it ([`InFlight`]), and the end of a session that has
//! had none for a while ([`quiet_for`]). A tunnel's connection counts as carrying only while a
//! request inside is in flight, so an idle one is closed like an idle kept-alive connection.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::target::Target;
use super::Asking;
use crate::front::gate::{Busy, Extra};
use crate::wire::scheme::Scheme;

/// What every request inside one tunnel shares: its target, scheme, client and the CONNECT's
/// asking, and the CONNECT's own hold on the connection until the first request begins.
#[derive(Debug)]
pub(super) struct Inside {
    /// Where every request inside goes.
    pub(super) target: Target,
    /// `https` inside intercepted TLS, else `http`.
    pub(super) scheme: Scheme,
    /// The client's address.
    pub(super) client: SocketAddr,
    /// The CONNECT's job, cooldown choice, priority and connection place.
    pub(super) asking: Asking,
    /// The CONNECT's hold on its connection (not closed to make room), dropped when the first
    /// request inside begins.
    pub(super) opening: Mutex<Option<Busy>>,
}

impl Inside {
    /// The books of a tunnel to `target`, asked with `asking`, held by `opening` until its first
    /// request.
    pub(super) fn new(
        target: Target,
        scheme: Scheme,
        client: SocketAddr,
        (asking, opening): (Asking, Option<Busy>),
    ) -> Self {
        Inside {
            target,
            scheme,
            client,
            asking,
            opening: Mutex::new(opening),
        }
    }
}

/// What a request inside a tunnel holds until its answer has been sent: its connection marked
/// carrying, its place among the client's connections (HTTP/2), and its count in flight.
pub(super) type InsideBusy = (Option<Busy>, Option<Extra>, InFlight);

/// One request in flight in a session: counted in its session's load until dropped.
#[derive(Debug)]
pub(super) struct InFlight {
    load: Arc<watch::Sender<usize>>,
}

impl InFlight {
    /// Counts one more request in flight on `load`.
    pub(super) fn begin(load: &Arc<watch::Sender<usize>>) -> Self {
        load.send_modify(|n| *n += 1);
        InFlight { load: load.clone() }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.load.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Resolves once the session's load has been 0 for `idle` without a break: a request that
/// begins (and even ends) meanwhile starts the count again. Costs one timer while waiting.
pub(super) async fn quiet_for(mut load: watch::Receiver<usize>, idle: Duration) {
    loop {
        if load.wait_for(|n| *n == 0).await.is_err() {
            // The session is gone: nothing to close.
            return std::future::pending().await;
        }
        load.borrow_and_update();
        tokio::select! {
            () = tokio::time::sleep(idle) => {
                if *load.borrow() == 0 && !load.has_changed().unwrap_or(false) {
                    return;
                }
            }
            changed = load.changed() => {
                if changed.is_err() {
                    return std::future::pending().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[tokio::test(start_paused = true)]
    async fn a_session_is_quiet_only_after_the_whole_idle_time_without_a_request() {
        let (load, quiet) = watch::channel(0usize);
        let load = Arc::new(load);
        let idle = Duration::from_secs(5);
        let started = Instant::now();
        let waiting = tokio::spawn(quiet_for(quiet, idle));
        // A request from 3 s to 4 s: quiet from 4 s, so the session ends at 9 s.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let request = InFlight::begin(&load);
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(request);
        // A long request (from 6 s to 20 s) is never cut, however long it takes.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let long = InFlight::begin(&load);
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
}
