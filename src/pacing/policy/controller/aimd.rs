//! AIMD, the controller of round one (`controller = "aimd"`): + `increase_step` per healthy
//! answer that had to wait for its turn, × `slow_factor` per wave of slow answers,
//! × `decrease_factor` per wave of 429s, overload or failures, and `resume_factor` of the rate
//! before a cooldown when it ends. Also the climb back of a host without `adaptive`.

use tokio::time::Instant;

use super::super::{lowered, Observation, Pacing};
use crate::config::HostPolicy;

impl Pacing {
    pub(super) fn aimd_healthy(&mut self, obs: &Observation, policy: &HostPolicy, now: Instant) {
        if obs.answer.latency > policy.adaptive.slow_response {
            if policy.adaptive.enabled && self.new_wave(obs.sent_at) {
                self.rate = lowered(
                    self.rate,
                    policy.adaptive.slow_factor,
                    policy.adaptive.min_rate,
                );
                self.rare_mut().last_cut = Some(now);
            }
        } else if obs.limited {
            let ceiling = self.raise_ceiling(policy);
            if self.rate < ceiling {
                self.rate = (self.rate + policy.adaptive.increase_step).min(ceiling);
            }
        }
    }

    pub(super) fn aimd_trouble(&mut self, policy: &HostPolicy) {
        self.rate = lowered(
            self.rate,
            policy.adaptive.decrease_factor,
            policy.adaptive.min_rate,
        );
    }

    pub(super) fn aimd_resume(&mut self, rate_before: f64, policy: &HostPolicy) {
        let resume = lowered(
            rate_before,
            policy.cooldown.resume_factor,
            policy.adaptive.min_rate,
        );
        self.rate = self.rate.min(resume);
    }
}
