//! The budget seam: the one place where a request asks for its turn and where its answer is
//! reported. Everything around it (the host table, the FIFO queue, the dispatcher, the refusals)
//! and the pure policy under it are the same body of code whatever keeps the budget.
//!
//! [`Budget::Local`] keeps each host's token bucket, concurrency count and cooldowns in this
//! process (`Pacing` and `InFlight` inside the host's state). [`Budget::Shared`] keeps them in a
//! store shared by several instances (`crate::store`): a turn is then a reservation the dispatcher
//! asks the store for ([`NotNow::AskStore`], see `shared.rs`), and every answer's lesson goes to the
//! store after it. While the store cannot be reached, the shared budget is the local one at this
//! instance's share. Chosen once at start-up; callers do not change.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::egress::{Downlink, Egress, EgressToken};
use super::herald::Herald;
use super::host::{Host, HostState};
use crate::pacing::policy::{CooldownCause, Observation, Reaction, WaitReason};
use crate::store::{Lease, Lesson, Limits, RateBounds, RedisStore, StoreAction};

/// The rate from which a host's turns are timed to the sub-millisecond. Below one turn a second,
/// tokio's ~1 ms of lateness is under 0.1 % of the budget, not worth a thread wake-up per turn.
pub(super) const FINE_MIN_RATE: f64 = 1.0;

/// Where the budget of every host is kept.
#[derive(Debug, Clone)]
pub(crate) enum Budget {
    /// In this process: each host's pacing state. `persist` (in `signals`) is told whenever a
    /// cooldown, block pause or operator's setting begins or grows, so that it reaches the state
    /// file within milliseconds (a crash must not forget it).
    Local {
        /// Wakes the state saver; tells host events.
        signals: Arc<Signals>,
    },
    /// In a store shared with other instances; cooldowns are kept here too (and saved), so that
    /// they hold while the store is away.
    Shared {
        /// Wakes the state saver; tells host events.
        signals: Arc<Signals>,
        /// The store.
        store: Arc<RedisStore>,
    },
}

/// What a budget tells beyond itself, in one allocation that every permit shares with the
/// budget (no second reference count to move per request): the state saver's signal and the
/// herald of host events.
#[derive(Debug, Default)]
pub(crate) struct Signals {
    /// Wakes the state saver.
    pub(crate) persist: Notify,
    /// Tells host events (`herald.rs`).
    pub(crate) herald: Herald,
}

/// The answer to "may the next request to this host go now?".
#[derive(Debug)]
pub(crate) enum Turn {
    /// Yes: a token is spent and a host slot taken; here is the global slot.
    Go {
        /// The global in-flight slot the turn holds.
        slot: OwnedSemaphorePermit,
    },
    /// Yes, from this instance's allowance of a shared host (`ahead.rs`): a turn and a host slot
    /// are spent; here is the global slot.
    GoAhead {
        /// The global in-flight slot the turn holds.
        slot: OwnedSemaphorePermit,
        /// The generation of the allowance the turn was spent from.
        generation: u32,
    },
    /// Not now: what the next request waits for.
    NotNow(NotNow),
}

/// Why the next request of a host may not go now, and what the one who asked keeps meanwhile:
/// what a dispatcher waits for (it matches on this, see `dispatch.rs`).
#[derive(Debug)]
pub(crate) enum NotNow {
    /// Not before `at` (a token arrives then, a cooldown ends...: `reason` says which).
    NotBefore {
        /// The instant the turn may come.
        at: Instant,
        /// Worth timing to the sub-millisecond (a host paced at [`FINE_MIN_RATE`] or more).
        precise: bool,
        /// What the request waits for.
        reason: WaitReason,
    },
    /// Every host slot is taken: wait until one comes free.
    NoHostSlot,
    /// The ceiling on all hosts together (`global_rate`) has no token: wait in its line.
    NoEgressToken,
    /// The global in-flight cap is full; the egress token already taken is kept.
    NoGlobalSlot {
        /// The token of the ceiling on all hosts already taken, if any.
        egress: Option<EgressToken>,
    },
    /// Jitter held this turn back; the global slot and egress token are kept for the next look.
    Held {
        /// The global slot taken.
        slot: OwnedSemaphorePermit,
        /// The token of the ceiling on all hosts taken, if any.
        egress: Option<EgressToken>,
    },
    /// The shared store keeps the budget: ask it (outside the lock) for a turn within `limits`,
    /// holding this global slot (and egress token) meanwhile.
    AskStore {
        /// The global slot taken.
        slot: OwnedSemaphorePermit,
        /// The token of the ceiling on all hosts taken, if any.
        egress: Option<EgressToken>,
        /// The limits of the reservation.
        limits: Limits,
    },
}

impl From<NotNow> for Turn {
    fn from(not_now: NotNow) -> Self {
        Turn::NotNow(not_now)
    }
}

impl NotNow {
    /// What the next request waits for.
    pub(crate) fn reason(&self) -> WaitReason {
        match self {
            NotNow::NotBefore { reason, .. } => *reason,
            NotNow::NoHostSlot => WaitReason::Concurrency,
            NotNow::NoEgressToken | NotNow::NoGlobalSlot { .. } => WaitReason::GlobalCap,
            // Jitter is part of the host's pacing.
            NotNow::Held { .. } => WaitReason::Rate,
            NotNow::AskStore { .. } => WaitReason::SharedStore,
        }
    }
}

/// What a dispatcher keeps from one look at its host to the next: a global slot and a token of
/// the global ceiling, so that it does not lose its place for them.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    /// A global in-flight slot.
    pub(crate) slot: Option<OwnedSemaphorePermit>,
    /// A token of `global_rate`.
    pub(crate) egress: Option<EgressToken>,
}

impl Budget {
    /// Takes a turn now if the host has a slot and a token (and no byte debt), the global
    /// ceilings a token (`egress`) and no byte debt (`downlink`), and the global cap room
    /// (`kept`: what an earlier look already holds). Called under the host's lock.
    pub(crate) fn take_turn(
        &self,
        state: &mut HostState,
        global: &Arc<Semaphore>,
        (egress, downlink): (Option<&Arc<Egress>>, Option<&Arc<Downlink>>),
        kept: Kept,
        now: Instant,
    ) -> Turn {
        // A byte debt of all hosts together holds every host's next turn.
        if let Some(at) = downlink.map(|d| d.ready_at(now)).filter(|at| *at > now) {
            return NotNow::NotBefore {
                at,
                precise: false,
                reason: WaitReason::GlobalCap,
            }
            .into();
        }
        match self {
            Budget::Local { .. } => {
                // The server's `concurrency` policy, if lower, is the ceiling.
                let cap = state
                    .pacing()
                    .concurrency_cap(state.policy().pacing.concurrency);
                local_turn(state, (global, egress), kept, cap, now)
            }
            Budget::Shared { store, .. } if store.in_fallback() => {
                fallback_turn(state, store, (global, egress), kept, now)
            }
            Budget::Shared { store, .. } => shared_turn(state, store, (global, egress), kept, now),
        }
    }

    /// Reports an upstream answer (or failure) of a request that had its turn; `lease_start` is
    /// when a shared turn started on the store's clock. Called under the host's lock.
    pub(crate) fn report(
        &self,
        host: &Arc<Host>,
        state: &mut HostState,
        observation: &Observation,
        lease_start: Option<i64>,
        now: Instant,
    ) -> (Reaction, Option<JoinHandle<()>>) {
        let policy = state.policy().clone();
        let reaction = state.observe(observation, now, rand::random::<f64>());
        let mut teaching = None;
        if reaction.cooldown.is_some() || reaction.hard_block {
            self.persist_signal().notify_one();
        }
        // An answer that changed nothing teaches the store nothing: no round trip for it, except
        // the host's first answer here, which keeps its keys a day (`shared::UNANSWERED_TTL`).
        let first_answer = observation.answer.status.is_some() && !state.stats().has_answered();
        let taught = reaction.cooldown.is_some()
            || reaction.rate_after != reaction.rate_before
            || first_answer;
        if let (Budget::Shared { store, .. }, Some(start), true) = (self, lease_start, taught) {
            let cooldown = reaction.cooldown.map(|window| {
                let cause = state
                    .pacing()
                    .cooldown(now)
                    .map_or(CooldownCause::Restored, |c| c.cause);
                (window, cause)
            });
            let lesson = Lesson {
                cooldown,
                rate_before: reaction.rate_before,
                rate_after: reaction.rate_after,
                cap: state.pacing().standing_cap(),
                answered: observation.answer.status.is_some() || state.stats().has_answered(),
            };
            teaching = teach(store, host, lesson, start, &policy);
        }
        (reaction, teaching)
    }

    /// Pauses the host for a block seen in a response; the pause if a new one started (`None`
    /// when a pause of that kind is already in force). Called under the host's lock.
    pub(crate) fn pause_for_block(
        &self,
        host: &Arc<Host>,
        state: &mut HostState,
        cause: CooldownCause,
        lease_start: Option<i64>,
        now: Instant,
    ) -> Option<Duration> {
        let policy = state.policy().clone();
        let before = state.pacing().rate();
        let pause = state.pause_for_block(cause, now)?;
        self.persist_signal().notify_one();
        if let (Budget::Shared { store, .. }, Some(start)) = (self, lease_start) {
            let lesson = Lesson {
                cooldown: Some((pause, cause)),
                rate_before: before,
                rate_after: state.pacing().rate(),
                cap: None,
                // A block is seen in a response.
                answered: true,
            };
            // The block's reaction runs inside the body's poll: the lesson goes on alone.
            drop(teach(store, host, lesson, start, &policy));
        }
        Some(pause)
    }

    /// Says that an operator changed a host's pacing (a pause, a resume, a rate): it is kept at
    /// once, like a cooldown, and with a shared budget it goes to every instance.
    pub(crate) fn operator_changed(&self, key: &Arc<str>, action: StoreAction) {
        self.persist_signal().notify_one();
        if let Budget::Shared { store, .. } = self {
            if store.in_fallback() {
                return;
            }
            let store = store.clone();
            let key = key.clone();
            tokio::spawn(async move {
                if let Err(e) = store.operator(&key, action).await {
                    tracing::warn!(host = %key, "the operator's action reached only this instance: {}", e.0);
                }
            });
        }
    }

    /// The word for the budget in force.
    pub(crate) fn mode(&self) -> &'static str {
        match self {
            Budget::Local { .. } => "local",
            Budget::Shared { store, .. } if store.in_fallback() => "fallback",
            Budget::Shared { .. } => "shared",
        }
    }

    /// The shared store, if the budget is kept in one.
    pub(crate) fn store(&self) -> Option<&Arc<RedisStore>> {
        match self {
            Budget::Local { .. } => None,
            Budget::Shared { store, .. } => Some(store),
        }
    }

    /// What wakes the state saver: a cooldown, a block pause or an operator's change.
    pub(crate) fn persist_signal(&self) -> &Notify {
        match self {
            Budget::Local { signals } | Budget::Shared { signals, .. } => &signals.persist,
        }
    }

    /// What tells host events (`herald.rs`).
    pub(crate) fn herald(&self) -> &Herald {
        match self {
            Budget::Local { signals } | Budget::Shared { signals, .. } => &signals.herald,
        }
    }

    /// Ends a turn: frees the host slot and, for a request that never left, gives its token back
    /// (to the store, for a shared turn, after the lock is released; to the allowance, for a turn
    /// spent from one, of generation `ahead`). Called under the host's lock. `true` when the
    /// host's dispatcher should look (an allowance has only free slots left to give back).
    pub(crate) fn end_turn(
        &self,
        state: &mut HostState,
        sent: bool,
        lease: Option<Lease>,
        ahead: Option<u32>,
        now: Instant,
    ) -> bool {
        state.in_flight_mut().finish();
        if let Some(generation) = ahead {
            return state
                .shared_mut()
                .is_some_and(|turns| turns.ahead.end(generation, sent));
        }
        match (self, lease) {
            (Budget::Shared { store, .. }, Some(lease)) => store.release(lease, sent),
            _ => {
                if !sent {
                    state.refund(now);
                }
            }
        }
        false
    }
}

/// The limits of a host's next reservation from this instance. While some instances are away
/// from the store (each keeping its share locally), those on it keep to the rest of the budget.
pub(super) fn shared_limits(state: &HostState, store: &RedisStore, now: Instant) -> Limits {
    let part = store.live_part();
    let scaled = |whole: u32| (f64::from(whole) * part).floor().max(1.0) as u32;
    Limits {
        rate: state.pacing().effective_rate(now) * part,
        configured_rate: state.policy().pacing.rate,
        burst: scaled(state.policy().pacing.burst),
        concurrency: scaled(
            state
                .pacing()
                .concurrency_cap(state.policy().pacing.concurrency),
        ),
        rejoin: state.shared().map_or(0, |t| t.epoch) != store.epoch(),
        answered: state.stats().has_answered(),
        bytes: state.policy().pacing.max_bytes_per_second.map(|rate| {
            let burst = crate::pacing::policy::ByteBudget::default_burst(
                rate,
                state.policy().pacing.max_bytes_burst,
            );
            let part = |whole: u64| ((whole as f64) * part).floor() as u64;
            (part(rate).max(1), part(burst))
        }),
    }
}

/// A turn of a shared host while the store is away: a local turn within this instance's share
/// of the budget. The first one after a fall comes at the share's pace after the last shared
/// turn this instance took: the switch releases no burst.
fn fallback_turn(
    state: &mut HostState,
    store: &RedisStore,
    global: (&Arc<Semaphore>, Option<&Arc<Egress>>),
    kept: Kept,
    now: Instant,
) -> Turn {
    state.take_share(store.share(), now);
    let fell = store.falls() + 1;
    if let Some(turns) = state
        .shared_mut()
        .filter(|t| t.falls != 0 && t.falls != fell)
    {
        turns.falls = fell;
        let since = turns
            .last_turn_at
            .map_or(Duration::MAX, |at| now.saturating_duration_since(at));
        state.refill_since_last_turn(since, now);
    }
    let share = state.pacing().share_of(state.policy().pacing.concurrency);
    let cap = state.pacing().concurrency_cap(share);
    local_turn(state, global, kept, cap, now)
}

/// A turn of a shared host with the store there: refused on what this instance knows (no host
/// slot, a cooldown, its own byte debt), spent from its allowance, or asked of the store
/// ([`NotNow::AskStore`]) with a global slot (and egress token) held meanwhile.
fn shared_turn(
    state: &mut HostState,
    store: &RedisStore,
    (global, egress): (&Arc<Semaphore>, Option<&Arc<Egress>>),
    kept: Kept,
    now: Instant,
) -> Turn {
    state.take_share(1.0, now);
    let cap = state
        .pacing()
        .concurrency_cap(state.policy().pacing.concurrency);
    if !state.in_flight().has_room(cap) {
        return NotNow::NoHostSlot.into();
    }
    // What this instance knows closes the host without asking (a cooldown learned here, or kept
    // from before the store went away).
    if let Some(block) = state.pacing().block(now) {
        return NotNow::NotBefore {
            at: block.until,
            precise: false,
            reason: WaitReason::of_cooldown(block.cause),
        }
        .into();
    }
    // This instance's own byte debt with the host (byte budgets are per instance).
    if let Some((_, at)) = state.byte_debt(now).filter(|(_, at)| *at > now) {
        return NotNow::NotBefore {
            at,
            precise: false,
            reason: WaitReason::ByteBudget,
        }
        .into();
    }
    let (token, slot) = match egress_and_slot(global, egress, kept, now) {
        Ok(both) => both,
        Err(not_now) => return not_now.into(),
    };
    // A turn leased ahead, spent without a round trip.
    if let Some(turns) = state.shared_mut() {
        if let Some(generation) = turns.ahead.try_spend(now) {
            turns.last_turn_at = Some(now);
            state.in_flight_mut().start();
            if let Some(token) = token {
                token.spend();
            }
            return Turn::GoAhead { slot, generation };
        }
    }
    let limits = shared_limits(state, store, now);
    NotNow::AskStore {
        slot,
        egress: token,
        limits,
    }
    .into()
}

/// What a request needs beyond its host's budget: a token of the global ceiling when there is one
/// (kept, or free now with nobody in line ahead) and a global slot (kept, or free now). Otherwise
/// the turn that says which to wait for, keeping what was taken.
fn egress_and_slot(
    global: &Arc<Semaphore>,
    egress: Option<&Arc<Egress>>,
    kept: Kept,
    now: Instant,
) -> Result<(Option<EgressToken>, OwnedSemaphorePermit), NotNow> {
    let token = match egress {
        None => None,
        Some(egress) => match kept.egress.or_else(|| egress.try_take(now)) {
            Some(token) => Some(token),
            None => return Err(NotNow::NoEgressToken),
        },
    };
    match kept
        .slot
        .or_else(|| global.clone().try_acquire_owned().ok())
    {
        Some(slot) => Ok((token, slot)),
        None => Err(NotNow::NoGlobalSlot { egress: token }),
    }
}

/// A local turn: a host slot under `cap`, a token, one of the global ceiling, a global slot.
fn local_turn(
    state: &mut HostState,
    (global, egress): (&Arc<Semaphore>, Option<&Arc<Egress>>),
    kept: Kept,
    cap: u32,
    now: Instant,
) -> Turn {
    if !state.in_flight().has_room(cap) {
        return NotNow::NoHostSlot.into();
    }
    let (ready, reason) = state.next_turn(now);
    if ready > now {
        let precise = state.pacing().pacing_rate() >= FINE_MIN_RATE;
        return NotNow::NotBefore {
            at: ready,
            precise,
            reason,
        }
        .into();
    }
    let (token, slot) = match egress_and_slot(global, egress, kept, now) {
        Ok(both) => both,
        Err(not_now) => return not_now.into(),
    };
    let jitter = state.policy().pacing.jitter;
    let sample = if jitter > 0.0 {
        rand::random::<f64>()
    } else {
        0.0
    };
    if !state.try_take(now, sample) {
        return NotNow::Held {
            slot,
            egress: token,
        }
        .into();
    }
    state.in_flight_mut().start();
    if let Some(token) = token {
        token.spend();
    }
    Turn::Go { slot }
}

/// Sends an answer's lesson to the store in a task of its own; the learned rate it answers with
/// becomes the host's here. The caller may wait for it (a cooldown must be in the store before the
/// client hears the answer that caused it) or let it run (everything else).
fn teach(
    store: &Arc<RedisStore>,
    host: &Arc<Host>,
    lesson: Lesson,
    start: i64,
    policy: &crate::config::HostPolicy,
) -> Option<JoinHandle<()>> {
    if store.in_fallback() {
        return None;
    }
    let bounds = RateBounds {
        min_rate: policy.adaptive.min_rate,
        ceiling: if policy.adaptive.enabled {
            policy.adaptive.max_rate
        } else {
            policy.pacing.rate
        },
        configured_rate: policy.pacing.rate,
        burst: policy.pacing.burst,
    };
    let store = store.clone();
    let host = host.clone();
    Some(tokio::spawn(async move {
        if let Ok((rate, _)) = store.report(&host.key, &lesson, start, bounds).await {
            let now = Instant::now();
            let mut state = host.lock();
            let rate_override = state.pacing().rate_override();
            state.adopt_shared(rate, rate_override, now);
        }
    }))
}
