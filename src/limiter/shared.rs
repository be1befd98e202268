//! The limiter's side of a shared budget: asking the store for a host's next turn, waiting for
//! it and handing it to the head of the queue; and applying the store's hints (a slot came free,
//! a cooldown began through another instance, an operator acted through one).
//!
//! One reservation is in flight per host and instance, for the head of the queue, so that a
//! thousand queued requests cost one round trip per turn, not a thousand. A turn reserved ahead
//! belongs to the dispatcher, not to a request: if the head leaves meanwhile, the next in line
//! gets it; if the host closes meanwhile (a hint), the turn goes back to the store unused.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{sleep, Instant};

use super::budget::FINE_MIN_RATE;
use super::egress::EgressToken;
use super::host::Host;
use super::permit::{hand_to_head, Permit};
use super::refusal::refuse_queue;
use super::Limiter;
use crate::policy::CooldownCause;
use crate::shared::{Hint, Limits, Reservation, Store};

/// Asks the store for the next turn of `host` and sees it through: sleeps until the reserved
/// instant and gives the turn to the first request still waiting, takes on a cooldown the store
/// knows of, or waits for a slot or for the horizon. Returns when the dispatcher should look again.
pub(super) async fn take_shared_turn(
    limiter: &Arc<Limiter>,
    host: &Arc<Host>,
    store: &Arc<Store>,
    slot: OwnedSemaphorePermit,
    token: Option<EgressToken>,
    limits: Limits,
) {
    // Never dropped half-way: a reservation the store made must be known here to be given back.
    let Ok(reservation) = store.reserve(&host.key, limits).await else {
        // The store is away: the next look takes this instance's share locally.
        return;
    };
    match reservation {
        Reservation::Go { wait, lease, view } => {
            let at = Instant::now() + wait;
            {
                let mut state = host.lock();
                state
                    .pacing
                    .adopt_shared(view.rate, view.rate_override, Instant::now());
                state.epoch = store.epoch();
            }
            let fine = limits.rate >= FINE_MIN_RATE;
            loop {
                if host.lock().pacing.block(Instant::now()).is_some() {
                    // Closed meanwhile (a hint): the turn goes back unused.
                    store.release(lease, false);
                    return;
                }
                if Instant::now() >= at {
                    break;
                }
                tokio::select! {
                    _ = limiter.sleep_until(at, fine) => {}
                    _ = host.wake.notified() => {}
                }
            }
            if hand_over(limiter, host, slot, lease, wait) {
                if let Some(token) = token {
                    token.spend();
                }
            }
        }
        Reservation::Cool {
            remaining,
            cause,
            view,
        } => {
            let now = Instant::now();
            let refused = {
                let mut state = host.lock();
                state
                    .pacing
                    .adopt_shared(view.rate, view.rate_override, now);
                close(&mut state.pacing, now + remaining, cause, now);
                refuse_queue(&mut state, now)
            };
            limiter.budget.persist_signal().notify_one();
            for (waiter, refusal) in refused {
                let _ = waiter.reply.send(Err(refusal));
            }
        }
        Reservation::Busy { retry_in } | Reservation::Later { retry_in } => {
            drop(slot);
            tokio::select! {
                _ = sleep(retry_in.max(Duration::from_millis(1))) => {}
                _ = host.wake.notified() => {}
            }
        }
    }
}

/// Gives a reserved turn to the first request still waiting (`true`), or back to the store.
fn hand_over(
    limiter: &Arc<Limiter>,
    host: &Arc<Host>,
    slot: OwnedSemaphorePermit,
    lease: crate::shared::Lease,
    wait: Duration,
) -> bool {
    let now = Instant::now();
    let mut state = host.lock();
    // Only a request that had to wait for its turn may raise the rate when the answer is healthy.
    let limited = !wait.is_zero() || state.queue.len() > 1;
    state.in_flight.start();
    let permit = Permit::new(
        host.clone(),
        limiter.budget.clone(),
        Some(slot),
        Duration::ZERO,
        limited,
    )
    .with_lease(lease);
    let unsent = hand_to_head(&mut state, permit, now);
    drop(state);
    // A turn nobody took ends unused: its drop frees the slot and gives the turn to the store.
    let handed = unsent.is_none();
    drop(unsent);
    handed
}

/// Closes the host until `until`: an operator's pause, or a cooldown (only ever grown).
fn close(pacing: &mut crate::policy::Pacing, until: Instant, cause: CooldownCause, now: Instant) {
    if cause == CooldownCause::Operator {
        if pacing.operator_paused_until(now).is_none_or(|p| p < until) {
            pacing.operator_pause(until);
        }
    } else {
        pacing.pause(until, cause, now);
    }
}

impl Limiter {
    /// Applies a hint from the store to a host this instance knows; others learn the store's
    /// state with their first reservation.
    pub(crate) fn apply_hint(&self, hint: Hint) {
        let key = match &hint {
            Hint::Free(k)
            | Hint::Cool(k, ..)
            | Hint::Pause(k, _)
            | Hint::Resume(k)
            | Hint::Rate(k, _) => k,
        };
        let Some(host) = self.hosts.get(key.as_str()).map(|e| e.value().clone()) else {
            return;
        };
        let now = Instant::now();
        let refused = {
            let mut state = host.lock();
            match hint {
                Hint::Free(_) => Vec::new(),
                Hint::Cool(_, d, cause) => {
                    close(&mut state.pacing, now + d, cause, now);
                    refuse_queue(&mut state, now)
                }
                Hint::Pause(_, d) => {
                    close(&mut state.pacing, now + d, CooldownCause::Operator, now);
                    refuse_queue(&mut state, now)
                }
                Hint::Resume(_) => {
                    state.pacing.operator_resume();
                    Vec::new()
                }
                Hint::Rate(_, rate) => {
                    state.pacing.set_rate_override(rate, now);
                    Vec::new()
                }
            }
        };
        for (waiter, refusal) in refused {
            let _ = waiter.reply.send(Err(refusal));
        }
        host.wake.notify_one();
    }
}
