//! How an adaptive host's own rate moves on each answer: the two controllers behind
//! `controller = "aimd" | "cubic"`, as methods of [`Pacing`] that touch only the rate and the
//! controller's own state.
//!
//! `Pacing::observe` classifies and keeps every other rule (cooldowns, server budgets, blocks,
//! caps); it asks the controller of the host's policy only how far to raise the rate after a
//! healthy answer ([`Pacing::after_healthy`]), how far to cut it on a new wave of trouble
//! ([`Pacing::after_trouble`]) and where to resume after a cooldown ([`Pacing::resume_after`]).
//! A host without `adaptive` follows AIMD's climb back to its configured rate, whatever its
//! controller.
//!
//! | file | owns |
//! |---|---|
//! | `aimd.rs` | additive increase, multiplicative decrease (the rules of round one) |
//! | `cubic.rs` | the learned limit: where a 429 met the curve and what it says, latency |
//! | `learned.rs` | the learned limit's state: the curve back to the limit and past it, the meters |
//! | `announced.rs` | the learned limit from a quota the server announces in RateLimit headers |

mod aimd;
mod announced;
mod cubic;
mod learned;

use std::time::Duration;

use tokio::time::Instant;

pub(super) use announced::Announced;
pub(super) use learned::Learned;

use super::{Observation, Pacing};
use crate::config::{Controller, HostPolicy};
use crate::pacing::feedback::ServerBudget;

/// The controller that moves `policy`'s rate: AIMD unless the host is adaptive and asks for the
/// learned limit.
fn learned_limit(policy: &HostPolicy) -> bool {
    policy.adaptive.enabled && policy.adaptive.controller == Controller::Cubic
}

impl Pacing {
    /// Moves the rate after a healthy (2xx/3xx) answer.
    pub(super) fn after_healthy(&mut self, obs: &Observation, policy: &HostPolicy, now: Instant) {
        if learned_limit(policy) {
            self.cubic_healthy(obs, policy, now);
        } else {
            self.aimd_healthy(obs, policy, now);
        }
    }

    /// Cuts the rate for the first answer of a new wave of 429s, overload or failures; `wait` is
    /// the cooldown the answer asked for (Retry-After or the backoff), if any.
    pub(super) fn after_trouble(
        &mut self,
        wait: Option<Duration>,
        sent: Instant,
        policy: &HostPolicy,
        now: Instant,
    ) {
        if !policy.adaptive.enabled {
            return;
        }
        if learned_limit(policy) {
            self.cubic_trouble(wait, sent, policy, now);
        } else {
            self.aimd_trouble(policy);
        }
    }

    /// Takes what a server announced of its quota after an answer (and after any cut it caused):
    /// the learned limit follows the quota; AIMD leaves it to the budget's hard rules.
    pub(super) fn after_budget(
        &mut self,
        budget: &ServerBudget,
        policy: &HostPolicy,
        now: Instant,
    ) {
        if learned_limit(policy) {
            self.cubic_announced(budget, policy, now);
        }
    }

    /// The rate when a fresh cooldown starts, from `rate_before` the answer: AIMD resumes at
    /// `resume_factor` of it; the learned limit already chose its resume rate in its cut.
    pub(super) fn resume_after(&mut self, rate_before: f64, policy: &HostPolicy) {
        if !learned_limit(policy) {
            self.aimd_resume(rate_before, policy);
        }
    }

    /// The highest rate a healthy answer may raise the host to: `max_rate` when adaptive (else
    /// the configured rate), under robots.txt's Crawl-delay (never below the rate already
    /// reached under the ceiling).
    fn raise_ceiling(&self, policy: &HostPolicy) -> f64 {
        let mut ceiling = if policy.adaptive.enabled {
            policy.adaptive.max_rate
        } else {
            policy.pacing.rate
        };
        if let Some(cap) = self.rare().robots_cap {
            ceiling = ceiling.min(cap).max(self.rate.min(ceiling));
        }
        ceiling
    }
}
