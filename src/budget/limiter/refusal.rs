//! Why a request was not given a turn, and the refusal of a whole queue when a host starts cooling
//! down in `on_cooldown = "reject"` mode. Each refusal becomes a locally made response
//! (`crate::proxy::response::refusal`).

use std::time::Duration;

use tokio::time::Instant;

use super::host::{HostState, Waiter};
use crate::pacing::policy::{CooldownCause, WaitReason};

/// Why a request was not given a turn. Each becomes a locally made response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The host's queue already holds `max_queue` requests.
    QueueFull {
        /// The queue's cap.
        max_queue: usize,
        /// A fair guess of when trying again could work.
        retry_after: Duration,
    },
    /// The request waited `max_wait_seconds` without getting a turn.
    WaitedTooLong {
        /// How long it waited.
        waited: Duration,
        /// What held it longest.
        reason: WaitReason,
    },
    /// courtesy is shutting down.
    ShuttingDown,
    /// The host is cooling down (`on_cooldown = "reject"`, or a held request ran out of time).
    CoolingDown {
        /// Time left in the window.
        remaining: Duration,
        /// What started it.
        cause: CooldownCause,
    },
}

impl Refusal {
    /// A short name for the reason, for counters and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::QueueFull { .. } => "queue_full",
            Refusal::WaitedTooLong { .. } => "waited_too_long",
            Refusal::ShuttingDown => "shutting_down",
            Refusal::CoolingDown {
                cause: CooldownCause::Operator,
                ..
            } => "paused",
            Refusal::CoolingDown { .. } => "cooling_down",
        }
    }

    /// What held the refused request back (or would have: a cooldown refused at once).
    pub fn wait_reason(&self) -> WaitReason {
        match self {
            Refusal::QueueFull { .. } => WaitReason::Queue,
            Refusal::WaitedTooLong { reason, .. } => *reason,
            Refusal::ShuttingDown => WaitReason::None,
            Refusal::CoolingDown { cause, .. } => WaitReason::of_cooldown(*cause),
        }
    }
}

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
