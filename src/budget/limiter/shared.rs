//! The limiter's side of a shared budget: asking the store for a host's next turn, waiting for
//! it and handing it to the head of the queue; and applying the store's hints (a slot came free,
//! a cooldown began through another instance, an operator acted through one).
//!
//! One reservation is in flight per host and instance, so that a thousand queued requests cost
//! one round trip per turn, not a thousand; it asks for one turn per request waiting (within this
//! instance's free slots, at most 16), and the store grants the ones that start within 2 ms, so a
//! host whose turns come faster than a round trip gets several per call. A turn reserved ahead belongs to the dispatcher,
//! not to a request: if the head leaves meanwhile, the next in line gets it; if nobody waits any
//! more, or the host closes meanwhile (a hint), the turns left go back to the store unused.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{sleep, Instant};

use super::budget::FINE_MIN_RATE;
use super::egress::EgressToken;
use super::grant::{Grant, Paced};
use super::herald::{Look, RateWhy, Source};
use super::host::Host;
use super::permit::hand_to_head;
use super::refusal::refuse_queue;
use super::Limiter;
use crate::pacing::policy::CooldownCause;
use crate::store::{AheadAsk, Hint, Lease, Limits, RedisStore, Reservation};

/// The most turns one reservation asks for: a queue that waits gets up to this many turns per
/// round trip.
const MAX_TURNS_PER_CALL: usize = 16;

/// Asks the store for the next turns of `host` (one for each request waiting, within this
/// instance's free slots, at most [`MAX_TURNS_PER_CALL`]) and sees them through: sleeps until
/// each reserved instant and gives the turn to the first request still waiting, takes on a
/// cooldown the store knows of, or waits for a slot or for the horizon. Returns when the
/// dispatcher should look again.
pub(super) async fn take_shared_turn(
    limiter: &Arc<Limiter>,
    host: &Arc<Host>,
    store: &Arc<RedisStore>,
    slot: OwnedSemaphorePermit,
    token: Option<EgressToken>,
    limits: Limits,
) {
    let ask = ask_of(limiter, host, store, (slot, token.is_some()), &limits);
    let want = u32::try_from(ask.slots.len()).unwrap_or(1);
    // Never dropped half-way: a reservation the store made must be known here to be given back.
    let reserved = store
        .reserve(&host.key, limits, want, ask.waited, ask.ahead)
        .await;
    if let Some(sent) = &ask.ahead {
        note_allowance(host, sent, &reserved);
    }
    let Ok(reservation) = reserved else {
        // The store is away: the next look takes this instance's share locally.
        return;
    };
    match reservation {
        Reservation::Ahead { view, .. } => {
            // The dispatcher's next look spends it.
            granted(host, store, view, Instant::now());
        }
        Reservation::Settled => {}
        Reservation::Go {
            wait,
            lease,
            more,
            view,
        } => {
            let answered = Instant::now();
            granted(host, store, view, answered);
            let turns = std::iter::once((wait, lease)).chain(more);
            let fine = limits.rate >= FINE_MIN_RATE;
            hand_over_all(
                (limiter, host, store),
                turns,
                ask.slots,
                token,
                (answered, fine),
            )
            .await;
        }
        Reservation::Cool {
            remaining,
            cause,
            view,
        } => cool(limiter, host, (remaining, cause), view),
        Reservation::Busy { retry_in } | Reservation::Later { retry_in } => {
            drop(ask.slots);
            wait_for_room(host, store, retry_in).await;
        }
    }
}

/// What one reservation asks the store for: a global slot per turn wanted, how long the next
/// request has waited, and what this instance says of its allowance.
struct Ask {
    /// One global slot per turn wanted (the first is the dispatcher's).
    slots: Vec<OwnedSemaphorePermit>,
    /// How long the next request has waited for its job's turn.
    waited: Duration,
    /// The settlement of this instance's allowance, and a new one wanted.
    ahead: Option<AheadAsk>,
}

/// The reservation to ask for, under the host's lock and then among the global slots: as many
/// turns as requests wait, within the host's room and [`MAX_TURNS_PER_CALL`], and one at a time
/// with a ceiling on all hosts (`one_at_a_time`: an egress token per turn).
fn ask_of(
    limiter: &Limiter,
    host: &Host,
    store: &RedisStore,
    (slot, one_at_a_time): (OwnedSemaphorePermit, bool),
    limits: &Limits,
) -> Ask {
    let (want, waited, ahead) = {
        let mut state = host.lock();
        let want = turns_wanted(state.queue().len(), state.in_flight().current, limits);
        let ahead = settle_with_reservation(&mut state, store, limits);
        let now = Instant::now();
        let waited = state
            .queue()
            .front_with_served_at()
            .map_or(Duration::ZERO, |(w, served)| {
                waited_for_turn(w.arrived, served, now)
            });
        (want, waited, ahead)
    };
    let mut slots = vec![slot];
    if !one_at_a_time {
        while slots.len() < want {
            match limiter.global.clone().try_acquire_owned() {
                Ok(more) => slots.push(more),
                Err(_) => break,
            }
        }
    }
    Ask {
        slots,
        waited,
        ahead,
    }
}

/// How many turns to ask for: one per request `queued`, within the host's room beside the
/// requests `in_flight` and [`MAX_TURNS_PER_CALL`].
fn turns_wanted(queued: usize, in_flight: u32, limits: &Limits) -> usize {
    let room = limits.concurrency.saturating_sub(in_flight) as usize;
    queued.min(room).min(MAX_TURNS_PER_CALL)
}

/// How long the next request has waited for its job's turn at `now`: since it `arrived`, or
/// since its job last got a turn here (`served`), whichever is later. The store places instances
/// by it, so that a job flooding this instance does not hold back another job's request on
/// another instance (and instances with equal demand take turns).
fn waited_for_turn(arrived: Instant, served: Option<Instant>, now: Instant) -> Duration {
    let since = served.map_or(arrived, |at| at.max(arrived));
    now.saturating_duration_since(since)
}

/// Takes on what the store answered to the allowance this instance `sent` with a reservation.
fn note_allowance(
    host: &Host,
    sent: &AheadAsk,
    reserved: &Result<Reservation, crate::store::StoreDown>,
) {
    let mut state = host.lock();
    let turns = state.shared_turns();
    match reserved {
        Ok(Reservation::Ahead { tokens, slots, .. }) => {
            turns
                .ahead
                .answered(Some((*tokens, *slots)), sent, Instant::now());
        }
        Ok(_) => turns.ahead.answered(None, sent, Instant::now()),
        Err(_) => turns.ahead.unanswered(sent),
    }
}

/// Sees the reserved `turns` through, each with its global slot: sleeps until each one's
/// instant (`answered` + its wait; timed finely with `fine`) and hands it to the first request
/// still waiting. When the host closes meanwhile or nobody waits any more, the turns left go
/// back to the store unused; a turn without a slot goes back at once.
async fn hand_over_all(
    (limiter, host, store): (&Arc<Limiter>, &Arc<Host>, &RedisStore),
    mut turns: impl Iterator<Item = (Duration, Lease)>,
    slots: Vec<OwnedSemaphorePermit>,
    mut token: Option<EgressToken>,
    (answered, fine): (Instant, bool),
) {
    let mut slots = slots.into_iter();
    while let Some((wait, lease)) = turns.next() {
        let Some(slot) = slots.next() else {
            store.release(lease, false);
            continue;
        };
        let handed = if until_turn(limiter, host, answered + wait, fine).await {
            // A turn handed to nobody goes back when its permit drops.
            hand_over(limiter, host, slot, lease, wait)
        } else {
            // Closed meanwhile (a hint): this turn goes back unused, its lease with it
            // (a lease never released would hold one of the host's slots in the store
            // until it expires).
            store.release(lease, false);
            false
        };
        if !handed {
            // Closed, or nobody waits any more: the turns left go back unused.
            for (_, unused) in turns {
                store.release(unused, false);
            }
            return;
        }
        if let Some(token) = token.take() {
            token.spend();
        }
    }
}

/// Takes on a cooldown (or an operator's pause) the store knows of, `(remaining, cause)`, with
/// the store's rates, and refuses the queue.
fn cool(
    limiter: &Limiter,
    host: &Host,
    (remaining, cause): (Duration, CooldownCause),
    view: crate::store::SharedView,
) {
    let now = Instant::now();
    let refused = {
        let mut state = host.lock();
        state.adopt_shared(view.rate, view.rate_override, now);
        state.close(now + remaining, cause, now);
        let why = (Look::Change, Source::Shared);
        limiter.herald().look_at(&host.key, &state, why, now);
        refuse_queue(&mut state, now)
    };
    limiter.budget.persist_signal().notify_one();
    for (waiter, refusal) in refused {
        let _ = waiter.reply.send(Err(refusal));
    }
}

/// Every slot of the host is taken, or instances that waited longer come first: this instance
/// holds a place in the store's waiting list and waits `retry_in`, for a hint, or for the store
/// to fall or come back.
async fn wait_for_room(host: &Host, store: &RedisStore, retry_in: Duration) {
    host.lock().shared_turns().listed = true;
    // A fall to the local budget (or a rejoin) wakes this at once: a queued request never
    // sleeps on a store that is gone.
    let changed = store.mode_changed();
    if store.in_fallback() {
        return;
    }
    tokio::select! {
        _ = sleep(retry_in.max(Duration::from_millis(1))) => {}
        _ = host.wake.notified() => {}
        _ = changed => {}
    }
}

/// Takes on what the store said with a grant (turns reserved, or an allowance) `at`: its
/// learned and operator's rates, this instance's standing with the store (its epoch and falls,
/// no place in the waiting list), and that the wait for the store is over.
fn granted(host: &Host, store: &RedisStore, view: crate::store::SharedView, at: Instant) {
    let mut state = host.lock();
    state.store_answered(at);
    state.adopt_shared(view.rate, view.rate_override, at);
    let turns = state.shared_turns();
    turns.epoch = store.epoch();
    turns.falls = store.falls() + 1;
    turns.listed = false;
}

/// What this instance says of its allowance of the host with a reservation: the settlement of
/// the one it holds, and a new one wanted if the host looks roomy (no jitter to apply per turn,
/// a burst and a cap with room to lease from). Under the host's lock.
fn settle_with_reservation(
    state: &mut super::host::HostState,
    store: &RedisStore,
    limits: &Limits,
) -> Option<AheadAsk> {
    let demand = state.in_flight().current + state.queue().len() as u32;
    let jitter = state.policy().pacing.jitter > 0.0;
    let wanted = match state.shared() {
        _ if jitter => None,
        Some(turns) => turns.ahead.wanted(limits, demand),
        None => super::ahead::Ahead::default().wanted(limits, demand),
    };
    if wanted.is_none() && state.shared().is_none() {
        return None;
    }
    state.shared_turns().ahead.settle(wanted, store.next_seq())
}

/// Gives this instance's allowance of an idle host back to the store (the span ended, another
/// instance waits, or only slots that came free are left), or tells the store again of the slots
/// still in use: one round trip that reserves nothing.
pub(super) async fn settle_ahead(host: &Arc<Host>, store: &Arc<RedisStore>) {
    let (sent, limits) = {
        let mut state = host.lock();
        let limits = super::budget::shared_limits(&state, store, Instant::now());
        match state.shared_mut() {
            Some(turns) => (turns.ahead.settle(None, store.next_seq()), limits),
            None => return,
        }
    };
    let Some(sent) = sent else {
        return;
    };
    let settled = store
        .reserve(&host.key, limits, 0, Duration::ZERO, Some(sent))
        .await;
    let mut state = host.lock();
    let turns = state.shared_turns();
    match settled {
        Ok(_) => turns.ahead.answered(None, &sent, Instant::now()),
        Err(_) => turns.ahead.unanswered(&sent),
    }
}

/// Sleeps until `at` unless the host closes first (a hint): `true` when the turn came, `false`
/// when the host closed.
async fn until_turn(limiter: &Arc<Limiter>, host: &Arc<Host>, at: Instant, fine: bool) -> bool {
    loop {
        if host.lock().pacing().block(Instant::now()).is_some() {
            return false;
        }
        if Instant::now() >= at {
            return true;
        }
        tokio::select! {
            _ = limiter.sleep_until(at, fine) => {}
            _ = host.wake.notified() => {}
        }
    }
}

/// Gives a reserved turn to the first request still waiting (`true`), or back to the store.
fn hand_over(
    limiter: &Arc<Limiter>,
    host: &Arc<Host>,
    slot: OwnedSemaphorePermit,
    lease: Lease,
    wait: Duration,
) -> bool {
    let now = Instant::now();
    let mut state = host.lock();
    state.shared_turns().last_turn_at = Some(now);
    let paced = paced_for(wait, state.queue().len());
    state.in_flight_mut().start();
    let grant = Grant::new(Some(slot), paced).with_lease(lease);
    let unsent = hand_to_head((limiter, host), &mut state, grant, now);
    drop(state);
    // A turn nobody took ends unused: its drop frees the slot and gives the turn to the store.
    let handed = unsent.is_none();
    drop(unsent);
    handed
}

/// Whether a reserved turn `wait` away, with `queued` requests waiting, was held back by the
/// pace: only a request that had to wait for its turn may raise the rate when the answer is
/// healthy.
fn paced_for(wait: Duration, queued: usize) -> Paced {
    if !wait.is_zero() || queued > 1 {
        Paced::Limited
    } else {
        Paced::AtOnce
    }
}

impl Limiter {
    /// Applies a hint from the store to a host this instance knows; others learn the store's
    /// state with their first reservation.
    pub(crate) fn apply_hint(&self, hint: Hint) {
        // A slot freed for the instance that waited longest wakes only that one; an instance's
        // own call to yield is not for it.
        let me = self.budget.store().map(|store| store.instance());
        match &hint {
            Hint::Free(_, Some(target)) if me.is_some_and(|me| me != target) => return,
            Hint::Yield(_, from) if me.is_some_and(|me| me == from) => return,
            _ => {}
        }
        let key = match &hint {
            Hint::Free(k, _)
            | Hint::Cool(k, ..)
            | Hint::Pause(k, _)
            | Hint::Resume(k)
            | Hint::Rate(k, _)
            | Hint::Yield(k, _) => k,
        };
        let Some(host) = self.hosts.get(key.as_str()).map(|e| e.value().clone()) else {
            return;
        };
        let now = Instant::now();
        let look = match &hint {
            Hint::Resume(_) => Some(Look::Operator),
            Hint::Cool(..) | Hint::Pause(..) => Some(Look::Change),
            _ => None,
        };
        let rate_hint = matches!(hint, Hint::Rate(..));
        let refused = {
            let mut state = host.lock();
            let rate_before = state.pacing().effective_rate(now);
            let refused = match hint {
                Hint::Free(..) => Vec::new(),
                Hint::Cool(_, d, cause) => {
                    state.close(now + d, cause, now);
                    refuse_queue(&mut state, now)
                }
                Hint::Pause(_, d) => {
                    state.close(now + d, CooldownCause::Operator, now);
                    refuse_queue(&mut state, now)
                }
                Hint::Resume(_) => {
                    state.operator_resume();
                    Vec::new()
                }
                Hint::Rate(_, rate) => {
                    state.set_rate_override(rate, now);
                    Vec::new()
                }
                Hint::Yield(..) => {
                    if let Some(turns) = state.shared_mut() {
                        turns.ahead.yield_now();
                    }
                    Vec::new()
                }
            };
            if let Some(look) = look {
                self.herald()
                    .look_at(&host.key, &state, (look, Source::Shared), now);
            }
            if rate_hint {
                let why = (RateWhy::Operator, Source::Shared);
                self.herald()
                    .rate_moved(&host.key, (&state, rate_before), why, now);
            }
            refused
        };
        for (waiter, refusal) in refused {
            let _ = waiter.reply.send(Err(refusal));
        }
        host.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(concurrency: u32) -> Limits {
        Limits {
            rate: 10.0,
            configured_rate: 10.0,
            burst: 1,
            concurrency,
            rejoin: false,
            answered: true,
            bytes: None,
        }
    }

    #[test]
    fn one_turn_is_asked_per_request_waiting_within_the_room_and_the_cap() {
        assert_eq!(turns_wanted(3, 0, &limits(10)), 3);
        assert_eq!(turns_wanted(3, 8, &limits(10)), 2, "two slots free");
        assert_eq!(turns_wanted(3, 12, &limits(10)), 0, "over the cap: none");
        assert_eq!(turns_wanted(100, 0, &limits(1000)), MAX_TURNS_PER_CALL);
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_counts_from_arrival_or_the_jobs_last_turn_whichever_is_later() {
        let arrived = Instant::now();
        tokio::time::advance(Duration::from_millis(300)).await;
        let served = Instant::now();
        tokio::time::advance(Duration::from_millis(200)).await;
        let now = Instant::now();
        assert_eq!(
            waited_for_turn(arrived, None, now),
            Duration::from_millis(500)
        );
        assert_eq!(
            waited_for_turn(arrived, Some(served), now),
            Duration::from_millis(200)
        );
        let before = arrived - Duration::from_secs(1);
        assert_eq!(
            waited_for_turn(arrived, Some(before), now),
            Duration::from_millis(500),
            "a turn before its arrival does not count"
        );
    }

    #[test]
    fn only_a_turn_that_waited_or_had_company_is_paced() {
        assert_eq!(paced_for(Duration::ZERO, 1), Paced::AtOnce);
        assert_eq!(paced_for(Duration::from_millis(5), 1), Paced::Limited);
        assert_eq!(paced_for(Duration::ZERO, 2), Paced::Limited);
    }
}
