//! The budget seam: the one place where a request asks for its turn and where its answer is
//! reported. Everything around it (the host table, the FIFO queue, the dispatcher, the refusals)
//! and the pure policy under it are the same body of code whatever keeps the budget.
//!
//! Today the budget is [`Budget::Local`]: each host's token bucket, concurrency count and cooldowns
//! live in this process (`Pacing` and `InFlight` inside the host's state). A shared budget (several
//! instances on one store) becomes a second variant here, chosen once at start-up; callers do not
//! change.

use std::sync::Arc;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::host::HostState;
use crate::policy::{CooldownCause, Observation, Reaction};

/// The rate from which a host's turns are timed to the sub-millisecond. Below one turn a second,
/// tokio's ~1 ms of lateness is under 0.1 % of the budget, not worth a thread wake-up per turn.
const FINE_MIN_RATE: f64 = 1.0;

/// Where the budget of every host is kept.
#[derive(Debug, Clone)]
pub(crate) enum Budget {
    /// In this process: each host's pacing state. `persist` is told whenever a cooldown, block
    /// pause or operator's setting begins or grows, so that it reaches the state file within
    /// milliseconds (a crash must not forget it).
    Local {
        /// Wakes the state saver.
        persist: Arc<Notify>,
    },
}

/// The answer to "may the next request to this host go now?".
#[derive(Debug)]
pub(crate) enum Turn {
    /// Yes: a token is spent and a host slot taken; here is the global slot.
    Go(OwnedSemaphorePermit),
    /// Not before this instant (a token arrives then); with `true`, worth timing to the
    /// sub-millisecond.
    NotBefore(Instant, bool),
    /// Every host slot is taken: wait until one comes free.
    NoHostSlot,
    /// The global in-flight cap is full.
    NoGlobalSlot,
    /// Jitter held this turn back; the global slot is kept for the next look.
    Held(OwnedSemaphorePermit),
}

impl Budget {
    /// Takes a turn now if the host has a slot and a token and the global cap has room (`held` is a
    /// global slot kept from an earlier look). Called under the host's lock.
    pub(crate) fn take_turn(
        &self,
        state: &mut HostState,
        global: &Arc<Semaphore>,
        held: Option<OwnedSemaphorePermit>,
        now: Instant,
    ) -> Turn {
        match self {
            Budget::Local { .. } => {
                if !state.in_flight.has_room(state.policy.concurrency) {
                    return Turn::NoHostSlot;
                }
                let ready = state.pacing.ready_at(now);
                if ready > now {
                    return Turn::NotBefore(ready, state.pacing.pacing_rate() >= FINE_MIN_RATE);
                }
                let Some(slot) = held.or_else(|| global.clone().try_acquire_owned().ok()) else {
                    return Turn::NoGlobalSlot;
                };
                let jitter = state.policy.jitter;
                let sample = if jitter > 0.0 {
                    rand::random::<f64>()
                } else {
                    0.0
                };
                if !state.pacing.try_take(now, jitter, sample) {
                    return Turn::Held(slot);
                }
                state.in_flight.start();
                Turn::Go(slot)
            }
        }
    }

    /// Reports an upstream answer (or failure) of a request that had its turn. Called under the
    /// host's lock.
    pub(crate) fn report(
        &self,
        state: &mut HostState,
        observation: &Observation,
        now: Instant,
    ) -> Reaction {
        match self {
            Budget::Local { persist } => {
                let policy = state.policy.clone();
                let reaction =
                    state
                        .pacing
                        .observe(observation, &policy, now, rand::random::<f64>());
                if reaction.cooldown.is_some() || reaction.hard_block {
                    persist.notify_one();
                }
                reaction
            }
        }
    }

    /// Pauses the host for a block seen in a response; `false` when a pause of that kind is already
    /// in force. Called under the host's lock.
    pub(crate) fn pause_for_block(
        &self,
        state: &mut HostState,
        cause: CooldownCause,
        now: Instant,
    ) -> bool {
        match self {
            Budget::Local { persist } => {
                let policy = state.policy.clone();
                let paused = state.pacing.pause_for_block(cause, &policy, now);
                if paused {
                    persist.notify_one();
                }
                paused
            }
        }
    }

    /// Says that an operator changed a host's pacing (a pause, a resume, a rate): it is kept at
    /// once, like a cooldown.
    pub(crate) fn operator_changed(&self) {
        match self {
            Budget::Local { persist } => persist.notify_one(),
        }
    }

    /// The word for the budget in force.
    pub(crate) fn mode(&self) -> &'static str {
        match self {
            Budget::Local { .. } => "local",
        }
    }

    /// What wakes the state saver: a cooldown, a block pause or an operator's change.
    pub(crate) fn persist_signal(&self) -> Arc<Notify> {
        match self {
            Budget::Local { persist } => persist.clone(),
        }
    }

    /// Ends a turn: frees the host slot and, for a request that never left, gives its token back.
    /// Called under the host's lock.
    pub(crate) fn end_turn(&self, state: &mut HostState, sent: bool, now: Instant) {
        match self {
            Budget::Local { .. } => {
                state.in_flight.finish();
                if !sent {
                    state.pacing.refund(now);
                }
            }
        }
    }
}
