//! The learned limit from the quota a server announces (`controller = "cubic"`): where RateLimit
//! headers say how many requests a window allows, the learned limit stands just under that
//! quota per window as soon as it is said or changed, without a 429 to learn it from. Where the
//! server says only the quota, the learned limit goes `learned_margin` under it, up or down, and
//! its probe stops there. Where the server also counts the window down (remaining and reset),
//! the hard rules already keep each window within the quota and obey a lowered one at once: the
//! learned limit then only rises to a raised quota (the quota itself, no margin), and may probe
//! past it to spend what an earlier window left. A 429 still cuts below it (the server may
//! count others against the same quota).
//!
//! The budget's hard rules (the policy rate, what `remaining` allows until the reset, a pause at
//! `remaining = 0`) stay where they are, in `Pacing::apply_server_budget` and
//! `Pacing::effective_rate`: this only moves courtesy's own rate.

use tokio::time::Instant;

use super::super::Pacing;
use super::Learned;
use crate::config::HostPolicy;
use crate::pacing::feedback::ServerBudget;

/// A change of the announced rate smaller than this share is the same announcement (a window
/// guessed from resets wobbles).
const SAME: f64 = 0.01;

/// What the server announced of its quota.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::pacing::policy) struct Announced {
    /// Requests per window.
    limit: u64,
    /// The window in seconds: as said (`;w=`), else the longest reset seen with this limit (a
    /// window's reset counts down from its length).
    window: f32,
    /// Whether the server said the window (rather than courtesy guessing it from resets).
    said: bool,
    /// Whether the server also says what is left of the window and when it resets: the
    /// budget's hard rules then keep every window within the quota, so the learned limit needs
    /// no margin under it.
    counted: bool,
}

impl Announced {
    /// The quota as a rate: requests per second.
    fn rate(&self) -> f64 {
        self.limit as f64 / f64::from(self.window)
    }

    /// Where the learned limit stands: the quota, less `learned_margin` unless the server counts
    /// the window down itself; not below `min_rate`.
    fn target(&self, policy: &HostPolicy) -> f64 {
        let margin = if self.counted {
            0.0
        } else {
            policy.adaptive.learned_margin
        };
        (self.rate() * (1.0 - margin)).max(policy.adaptive.min_rate)
    }
}

impl Pacing {
    /// Takes the quota `budget` announces: on the first announcement and on every change, the
    /// rate and the learned limit move at once to just under it (within `min_rate` and the
    /// ceiling of a healthy raise); a quota the server counts down only raises them, since the
    /// hard rules already obey a lowered one.
    pub(super) fn cubic_announced(
        &mut self,
        budget: &ServerBudget,
        policy: &HostPolicy,
        now: Instant,
    ) {
        let Some(quota) = budget.quota.filter(|q| q.limit > 0) else {
            return;
        };
        let before = self.rare().announced;
        let window = match quota.window {
            Some(w) => w.as_secs_f64(),
            None => {
                let seen = budget.reset.map_or(0.0, |r| r.as_secs_f64());
                let kept = before
                    .filter(|b| b.limit == quota.limit && !b.said)
                    .map_or(0.0, |b| f64::from(b.window));
                seen.max(kept)
            }
        };
        if !(window > 0.0 && window.is_finite()) {
            return;
        }
        let announced = Announced {
            limit: quota.limit,
            window: window as f32,
            said: quota.window.is_some(),
            counted: budget.remaining.is_some() && budget.reset.is_some(),
        };
        let target = announced.target(policy);
        let changed = before.is_none_or(|b| (b.target(policy) - target).abs() > SAME * target);
        self.rare_mut().announced = Some(announced);
        if changed {
            let mut target = target.min(self.raise_ceiling(policy));
            if announced.counted {
                target = target.max(self.rate);
            }
            self.rate = target;
            let before = self.rare().learned;
            self.rare_mut().learned = Some(Learned::announced(target, before, policy, now));
        }
    }

    /// Where the learned limit's probe stops, if the server announced a quota but does not
    /// count it down (where it does, the hard rules pace each window, and a rate above the
    /// quota lets them spend what an earlier window left).
    pub(super) fn announced_ceiling(&self, policy: &HostPolicy) -> Option<f64> {
        let a = self.rare().announced.filter(|a| !a.counted)?;
        Some(a.target(policy))
    }
}
