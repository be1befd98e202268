//! What the limiter does to a host's pacing state (`crate::pacing::policy::Pacing`), as
//! operations of [`HostState`]: each takes the host's own policy from the state where the pacing
//! needs it, so that no caller holds the pacing and the policy apart (the state lends out
//! `&Pacing` to read, never `&mut`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::HostState;
use crate::config::HostPolicy;
use crate::pacing::policy::{CooldownCause, Observation, PacingRecord, Reaction, WaitReason};

impl HostState {
    /// Takes `share` of the host's budget (`1.0`: the whole; a fallen instance's share of a
    /// shared one), its burst scaled alike.
    pub(crate) fn take_share(&mut self, share: f64, now: Instant) {
        let burst = self.policy.pacing.burst;
        self.pacing.set_share(share, burst, now);
    }

    /// Refills the bucket for `since` the last turn (a fall to the local budget releases no
    /// burst).
    pub(crate) fn refill_since_last_turn(&mut self, since: Duration, now: Instant) {
        self.pacing.refilled_since_last_turn(since, now);
    }

    /// The host's byte debt and when it is paid, if any.
    pub(crate) fn byte_debt(&mut self, now: Instant) -> Option<(u64, Instant)> {
        self.pacing.byte_debt(now)
    }

    /// When the next token comes, and what the next request waits for until then.
    pub(crate) fn next_turn(&mut self, now: Instant) -> (Instant, WaitReason) {
        self.pacing.next_turn(now)
    }

    /// Spends a token now, unless the host's jitter holds this turn back (`sample` uniform in
    /// [0, 1)). `true` when spent.
    pub(crate) fn try_take(&mut self, now: Instant, sample: f64) -> bool {
        let jitter = self.policy.pacing.jitter;
        self.pacing.try_take(now, jitter, sample)
    }

    /// Gives back the token of a turn whose request never left.
    pub(crate) fn refund(&mut self, now: Instant) {
        self.pacing.refund(now);
    }

    /// Charges `bytes` of response body to the host's byte budgets.
    pub(crate) fn charge_bytes(&mut self, bytes: u64, now: Instant) {
        self.pacing.charge_bytes(bytes, now);
    }

    /// Learns from an upstream answer under the host's policy (`sample` uniform in [0, 1), for
    /// backoff jitter).
    pub(crate) fn observe(
        &mut self,
        observation: &Observation,
        now: Instant,
        sample: f64,
    ) -> Reaction {
        self.pacing.observe(observation, &self.policy, now, sample)
    }

    /// Pauses the host for a block seen in a response, under its policy: the pause if a new one
    /// started.
    pub(crate) fn pause_for_block(
        &mut self,
        cause: CooldownCause,
        now: Instant,
    ) -> Option<Duration> {
        self.pacing.pause_for_block(cause, &self.policy, now)
    }

    /// Takes on the shared store's learned rate and operator's override.
    pub(crate) fn adopt_shared(&mut self, rate: f64, rate_override: Option<f64>, now: Instant) {
        self.pacing.adopt_shared(rate, rate_override, now);
    }

    /// Closes the host until `until`: an operator's pause (`cause` is `Operator`), or a
    /// cooldown; either only ever grows.
    pub(crate) fn close(&mut self, until: Instant, cause: CooldownCause, now: Instant) {
        if cause == CooldownCause::Operator {
            if self
                .pacing
                .operator_paused_until(now)
                .is_none_or(|p| p < until)
            {
                self.pacing.operator_pause(until);
            }
        } else {
            self.pacing.pause(until, cause, now);
        }
    }

    /// An operator's pause until `until` (it replaces the one in force).
    pub(crate) fn operator_pause(&mut self, until: Instant) {
        self.pacing.operator_pause(until);
    }

    /// Lifts an operator's pause and a block pause.
    pub(crate) fn operator_resume(&mut self) {
        self.pacing.operator_resume();
    }

    /// Sets or clears an operator's rate.
    pub(crate) fn set_rate_override(&mut self, rate: Option<f64>, now: Instant) {
        self.pacing.set_rate_override(rate, now);
    }

    /// Caps the rate at a robots.txt Crawl-delay's, or lifts the cap.
    pub(crate) fn set_robots_cap(&mut self, rate: Option<f64>, now: Instant) {
        self.pacing.set_robots_cap(rate, now);
    }

    /// Limits the host to robots.txt's Visit-time window (UTC), or lifts the limit.
    pub(crate) fn set_robots_visit(
        &mut self,
        window: Option<crate::pacing::robots_pacing::VisitWindow>,
        now: Instant,
    ) {
        self.pacing
            .set_robots_visit(window, now, std::time::SystemTime::now());
    }

    /// Puts a reloaded policy in force, the pacing moved to it in the same step (a rate lowered
    /// by feedback stays lowered); the old policy is returned.
    pub(crate) fn apply_policy(
        &mut self,
        policy: Arc<HostPolicy>,
        now: Instant,
    ) -> Arc<HostPolicy> {
        let wall = std::time::SystemTime::now();
        self.pacing.apply_policy(&self.policy, &policy, now, wall);
        std::mem::replace(&mut self.policy, policy)
    }

    /// Restores what a restart record kept of the pacing, under the host's policy.
    pub(crate) fn restore(&mut self, record: &PacingRecord, now: Instant) {
        self.pacing.restore(record, &self.policy, now);
    }
}
