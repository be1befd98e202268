//! The refusal of a whole queue when a host starts cooling down in `on_cooldown = "reject"` mode
//! (the refusal itself, [`Refusal`], is `verdicts.rs`'s).

use tokio::time::Instant;

use super::host::{HostState, Waiter};
use super::verdicts::Refusal;

/// With a cooldown or pause in force, takes every queued request that is not held through it
/// (its own `Courtesy-On-Cooldown`, else the host's `on_cooldown`, against the time left and
/// `max_hold_seconds`) out with its refusal (to be sent after the lock is released).
pub(super) fn refuse_queue(state: &mut HostState, now: Instant) -> Vec<(Waiter, Refusal)> {
    let Some(c) = state.pacing().block(now) else {
        return Vec::new();
    };
    let remaining = c.until.saturating_duration_since(now);
    // Copied out: the queue is changed below while the policy is read.
    let (policy, max_hold) = (
        state.policy().cooldown.on_cooldown,
        state.policy().cooldown.max_hold,
    );
    let rejects = |w: &Waiter| !w.on_cooldown.unwrap_or(policy).holds(remaining, max_hold);
    if !state.queue().iter().any(rejects) {
        return Vec::new();
    }
    let refusal = Refusal::CoolingDown {
        remaining,
        cause: c.cause,
    };
    // Those that asked to be held (or whose host holds) keep their places.
    let refused = state.take_where(rejects);
    let refused: Vec<(Waiter, Refusal)> =
        refused.into_iter().map(|w| (w, refusal.clone())).collect();
    for _ in &refused {
        state.stats_mut().refused(&refusal);
    }
    refused
}
