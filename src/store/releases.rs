//! The ends of turns: a turn that ended is not released with a round trip of its own but carried
//! by the host's next reservation (`RESERVE` releases it first, atomically), so that a busy host
//! costs one round trip per request. A turn no reservation carries within [`CARRY_WINDOW`] (the
//! host went quiet) is released on its own by [`run_releases`], and at shutdown every one is.
//!
//! A turn released late only keeps its concurrency slot a little longer in the store: the other
//! instances may wait for it, none may exceed the budget. This module does not decide when turns
//! end (`crate::budget::limiter`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Lease, LeaseTurn, RedisStore};
use crate::util::locks::lock;

/// The turns that ended, by host, each with whether its request left and when it ended.
pub(super) type EndedTurns = std::collections::HashMap<Arc<str>, Vec<EndedTurn>>;

/// One ended turn: its lease, whether its request left, and when it ended.
pub(super) type EndedTurn = (LeaseTurn, bool, Instant);

/// How long an ended turn waits for the host's next reservation to carry it.
pub(crate) const CARRY_WINDOW: Duration = Duration::from_millis(5);

impl RedisStore {
    /// Ends a turn: its slot is freed and, for a request that never left, its token given back,
    /// by the host's next reservation or within [`CARRY_WINDOW`].
    pub(crate) fn release(&self, mut lease: Lease, sent: bool) {
        if let Some(turn) = lease.turn.take() {
            self.end(turn, sent);
        }
    }

    /// Queues one ended turn for release (see [`RedisStore::release`]).
    pub(super) fn end(&self, turn: LeaseTurn, sent: bool) {
        {
            let mut live = lock(&self.live);
            if let Some(members) = live.get_mut(&turn.host) {
                members.retain(|m| *m != turn.member);
                if members.is_empty() {
                    live.remove(&turn.host);
                }
            }
        }
        lock(&self.ended)
            .entry(turn.host.clone())
            .or_default()
            .push((turn, sent, Instant::now()));
        self.turn_ended.notify_one();
    }

    /// The turns of `host` that ended and are not released yet, taken: the latest reservation
    /// first, as a refund must undo them (each one's `tat` is the one the next undoes to).
    pub(super) fn take_ended(&self, host: &str) -> Vec<EndedTurn> {
        let mut turns = lock(&self.ended).remove(host).unwrap_or_default();
        latest_first(&mut turns);
        turns
    }

    /// Puts back ended turns whose release the store did not answer, to be released once it
    /// answers again (a release is idempotent, so one that did run meanwhile costs nothing).
    /// A turn older than a lease is dropped: its lease has run out in the store anyway.
    pub(super) fn keep_ended(&self, turns: Vec<EndedTurn>) {
        let lease = self.settings.lease;
        let mut ended = lock(&self.ended);
        for turn in turns {
            if turn.2.elapsed() < lease {
                ended.entry(turn.0.host.clone()).or_default().push(turn);
            }
        }
    }

    /// Releases every ended turn no reservation carried, each with its own round trip; while
    /// the store is away they wait for it (the rejoin wakes this).
    async fn release_ended(&self) {
        if self.in_fallback() {
            return;
        }
        let hosts: Vec<Arc<str>> = lock(&self.ended).keys().cloned().collect();
        for host in hosts {
            let mut turns = self.take_ended(&host).into_iter();
            while let Some((turn, sent, at)) = turns.next() {
                if !self.release_now(&turn, sent).await {
                    self.keep_ended(std::iter::once((turn, sent, at)).chain(turns).collect());
                    return;
                }
            }
        }
    }
}

/// Orders ended turns for release: by the `tat` their reservations wrote, latest first.
fn latest_first(turns: &mut [EndedTurn]) {
    turns.sort_by_key(|(turn, ..)| std::cmp::Reverse(turn.tat));
}

/// Releases the ended turns no reservation carried within [`CARRY_WINDOW`], until `stop`; then
/// releases what is left.
pub(crate) async fn run_releases(store: Arc<RedisStore>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = store.turn_ended.notified() => {}
            _ = stop.cancelled() => break,
        }
        tokio::select! {
            _ = tokio::time::sleep(CARRY_WINDOW) => {}
            _ = stop.cancelled() => break,
        }
        store.release_ended().await;
    }
    store.release_ended().await;
}
