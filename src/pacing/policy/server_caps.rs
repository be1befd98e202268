//! What a server's RateLimit policies cap beside the request rate (draft-ietf-httpapi-ratelimit-
//! headers, `qu`): a `content-bytes` policy is a byte budget of its own (quota ÷ window bytes per
//! second, charged with every response byte like `max_bytes_per_second`, so it slows bytes, not
//! requests; its debt holds a turn at most `max_retry_after`, like every wait a server asks
//! for), a spent `content-bytes` counter closes the host until its reset, and a
//! `concurrency` policy is a ceiling on the host's `concurrency`. The request policies are
//! `window.rs`'s and the rate's (`Pacing::standing_cap`).
//!
//! Pure, like all of `policy/`: each method takes `now`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{ByteBudget, CooldownCause, Extra, Pacing};
use crate::config::HostPolicy;
use crate::pacing::feedback::ServerBudget;
use crate::pacing::ratelimit::NamedPolicy;

impl Pacing {
    /// Takes the byte and concurrency policies of an answer. A `RateLimit-Policy` that lists
    /// policies and none of a kind lifts that kind's cap (the server's list is its whole word);
    /// an answer without the field keeps what was known. Returns the cooldown a spent byte
    /// counter started, if any.
    pub(super) fn apply_server_caps(
        &mut self,
        budget: &ServerBudget,
        policy: &HostPolicy,
        now: Instant,
    ) -> Option<Duration> {
        if let Some(policies) = &budget.policies {
            self.note_policies(policies);
        }
        let listed = budget
            .policies
            .as_ref()
            .is_some_and(|p| p.iter().any(|p| p.quota.is_some()));
        match budget.bytes {
            Some(quota) => {
                // One second's worth of credit at most (the quota if a window is shorter).
                let rate = quota.rate.ceil().max(1.0) as u64;
                let burst = rate.min(quota.quota);
                let rare = self.rare_mut();
                let longest = policy.cooldown.max_retry_after;
                match rare.server_bytes.as_mut() {
                    Some(b) if b.rate() == rate => {}
                    Some(b) => b.set(rate, burst, now),
                    None => {
                        let fresh = ByteBudget::new(rate, burst, now).with_max_wait(longest);
                        rare.server_bytes = Some(fresh);
                    }
                }
            }
            None if listed => {
                if let Some(rare) = self.rare.as_mut() {
                    rare.server_bytes = None;
                }
            }
            None => {}
        }
        match budget.concurrency {
            Some(cap) => self.rare_mut().server_concurrency = Some(cap.max(1)),
            None if listed => {
                if let Some(rare) = self.rare.as_mut() {
                    rare.server_concurrency = None;
                }
            }
            None => {}
        }
        let spent = budget.bytes_spent?.min(policy.cooldown.max_retry_after);
        if spent.is_zero() {
            return None;
        }
        self.extend_cooldown(now + spent, CooldownCause::ServerBudget, now)
            .then_some(spent)
    }

    /// The host's ceiling on requests in flight: `configured` (its `concurrency`, or this
    /// instance's share of it), or the server's `concurrency` policy if lower (at least 1).
    pub fn concurrency_cap(&self, configured: u32) -> u32 {
        match self.rare().server_concurrency {
            Some(server) => configured.min(server.max(1)),
            None => configured,
        }
    }

    /// The RateLimit policies the server announced last, as written (for `/hosts`).
    pub fn server_policies(&self) -> Option<&Arc<[NamedPolicy]>> {
        self.extra.as_ref()?.announced.as_ref()
    }

    /// Keeps the policies an answer announced (unchanged ones are not copied again).
    fn note_policies(&mut self, policies: &Arc<[NamedPolicy]>) {
        match self.extra.as_mut() {
            Some(extra) if extra.announced.as_ref() == Some(policies) => {}
            Some(extra) => extra.announced = Some(policies.clone()),
            None => self.extra = Extra::boxed(None, None, Some(policies.clone())),
        }
    }

    /// The server's byte budget (`qu="content-bytes"`) in bytes per second, if one is known.
    pub fn server_byte_rate(&self) -> Option<u64> {
        self.rare().server_bytes.map(|b| b.rate())
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::pacing::feedback::{ByteQuota, Feedback};
    use crate::pacing::policy::{Answer, Observation, WaitReason};
    use crate::pacing::ratelimit::{NamedPolicy, QuotaUnit};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn policy() -> HostPolicy {
        let mut p = HostPolicy::default();
        p.pacing.rate = 10.0;
        p.pacing.burst = 1;
        p.pacing.concurrency = 8;
        p
    }

    fn listed(unit: QuotaUnit, q: u64) -> NamedPolicy {
        NamedPolicy {
            name: "p".into(),
            quota: Some(q),
            window: Some(Duration::from_secs(1)),
            unit,
            partition: None,
            remaining: None,
            reset: None,
            legacy: false,
        }
    }

    fn observed(server: ServerBudget, at: Instant) -> Observation {
        Observation {
            answer: Answer {
                feedback: Feedback::Success,
                status: Some(200),
                latency: ms(10),
                retry_after: None,
                server: Some(server),
            },
            sent_at: at,
            limited: false,
            others_in_flight: 0,
        }
    }

    fn bytes_policy(rate: f64) -> ServerBudget {
        ServerBudget {
            bytes: Some(ByteQuota {
                rate,
                quota: rate as u64,
            }),
            policies: Some(Arc::from([listed(QuotaUnit::ContentBytes, rate as u64)])),
            ..ServerBudget::default()
        }
    }

    #[test]
    fn a_byte_policy_holds_turns_after_bytes_and_never_before() {
        let (p, t0) = (policy(), Instant::now());
        let mut pacing = Pacing::new(&p, t0, UNIX_EPOCH);
        pacing.observe(&observed(bytes_policy(10_000.0), t0), &p, t0, 0.0);
        // No bytes yet: the request rate alone (10/s) sets the turns.
        assert!(pacing.try_take(t0, 0.0, 0.0));
        assert_eq!(pacing.next_turn(t0).1, WaitReason::Rate);
        assert_eq!(pacing.ready_at(t0), t0 + ms(100));
        // 40 KB went by against 10 KB/s with 10 KB of credit: 3 s of debt, whatever the rate.
        pacing.charge_bytes(40_000, t0);
        assert_eq!(pacing.ready_at(t0), t0 + ms(3000));
        assert_eq!(pacing.next_turn(t0).1, WaitReason::ByteBudget);
        assert_eq!(pacing.byte_debt(t0), Some((30_000, t0 + ms(3000))));
        // Small answers cost no more than the request rate: the rate is untouched.
        assert_eq!(pacing.effective_rate(t0), 10.0);
    }

    #[test]
    fn a_new_byte_rate_keeps_the_debt_and_a_list_without_one_lifts_it() {
        let (p, t0) = (policy(), Instant::now());
        let mut pacing = Pacing::new(&p, t0, UNIX_EPOCH);
        pacing.observe(&observed(bytes_policy(1000.0), t0), &p, t0, 0.0);
        pacing.charge_bytes(3000, t0);
        assert_eq!(pacing.ready_at(t0), t0 + ms(2000));
        pacing.observe(&observed(bytes_policy(2000.0), t0), &p, t0, 0.0);
        assert_eq!(pacing.server_byte_rate(), Some(2000));
        assert_eq!(
            pacing.ready_at(t0),
            t0 + ms(1000),
            "2000 B of debt at 2000 B/s"
        );
        // An answer without the fields keeps it.
        pacing.observe(&observed(ServerBudget::default(), t0), &p, t0, 0.0);
        assert_eq!(pacing.server_byte_rate(), Some(2000));
        // A policy list without a byte policy lifts it.
        let requests_only = ServerBudget {
            policy_rate: Some(100.0),
            policies: Some(Arc::from([listed(QuotaUnit::Request, 100)])),
            ..ServerBudget::default()
        };
        pacing.observe(&observed(requests_only, t0), &p, t0, 0.0);
        assert_eq!(pacing.server_byte_rate(), None);
        assert_eq!(pacing.byte_debt(t0), None);
    }

    #[test]
    fn a_concurrency_policy_lowers_the_ceiling_and_never_raises_it() {
        let (p, t0) = (policy(), Instant::now());
        let mut pacing = Pacing::new(&p, t0, UNIX_EPOCH);
        assert_eq!(pacing.concurrency_cap(8), 8);
        let two = ServerBudget {
            concurrency: Some(2),
            policies: Some(Arc::from([listed(QuotaUnit::Concurrency, 2)])),
            ..ServerBudget::default()
        };
        pacing.observe(&observed(two, t0), &p, t0, 0.0);
        assert_eq!(pacing.concurrency_cap(8), 2);
        assert_eq!(pacing.concurrency_cap(1), 1, "a lower share stays");
        let hundred = ServerBudget {
            concurrency: Some(100),
            policies: Some(Arc::from([listed(QuotaUnit::Concurrency, 100)])),
            ..ServerBudget::default()
        };
        pacing.observe(&observed(hundred, t0), &p, t0, 0.0);
        assert_eq!(pacing.concurrency_cap(8), 8);
        let zero = ServerBudget {
            concurrency: Some(0),
            ..ServerBudget::default()
        };
        pacing.observe(&observed(zero, t0), &p, t0, 0.0);
        assert_eq!(pacing.concurrency_cap(8), 1, "never below one");
    }

    #[test]
    fn a_spent_byte_counter_closes_the_host_until_its_reset() {
        let (p, t0) = (policy(), Instant::now());
        let mut pacing = Pacing::new(&p, t0, UNIX_EPOCH);
        let spent = ServerBudget {
            bytes_spent: Some(Duration::from_secs(7)),
            ..ServerBudget::default()
        };
        let reaction = pacing.observe(&observed(spent, t0), &p, t0, 0.0);
        assert_eq!(reaction.cooldown, Some(Duration::from_secs(7)));
        let c = pacing.cooldown(t0).unwrap();
        assert_eq!(
            (c.until, c.cause),
            (t0 + ms(7000), CooldownCause::ServerBudget)
        );
        assert!(!pacing.try_take(t0 + ms(6999), 0.0, 0.0));
        assert!(pacing.try_take(t0 + ms(7000), 0.0, 0.0));
    }
}
