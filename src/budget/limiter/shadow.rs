//! Report-only (shadow) mode, `enforce = false`: every request to the host is forwarded at once,
//! and what courtesy would have done is judged and counted. The judgement keeps its own schedule of
//! the turns the host would have given (GCRA: the turn is free from `tat − (burst − 1) × interval`
//! on, the same arithmetic as the shared store's), so "would have waited 3.2 s" means what it says
//! for a crawl that never waited. Feedback (cooldowns, the adaptive rate, blocks) moves the host's
//! pacing as usual; it only never holds anything back.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::lanes::JobTag;
use super::verdicts::{ShadowCounts, ShadowReason, ShadowVerdict};
use crate::config::HostPolicy;
use crate::pacing::policy::{CooldownCause, InFlight, Pacing};

/// A report-only host's schedule of the turns it would have given, and its counts.
#[derive(Debug, Default)]
pub(crate) struct Shadow {
    tat: Option<Instant>,
    pub(crate) counts: ShadowCounts,
    /// Each job's would-be schedule of its share of the turns, while it has turns ahead.
    jobs: Vec<ShadowJob>,
}

/// One job's would-be schedule on a report-only host: turns at the host's pace divided by the
/// job's share of the weights of the jobs with turns ahead (the fluid model of the fair queue).
#[derive(Debug)]
struct ShadowJob {
    name: Arc<str>,
    tat: Instant,
    weight: f64,
}

/// Jobs followed per report-only host; past it, a job is judged as if alone.
const MAX_SHADOW_JOBS: usize = 64;

/// What the judgement reads of its host's state (lent by [`super::host::HostState`], which owns
/// it and the [`Shadow`] together).
#[derive(Clone, Copy)]
pub(super) struct HostView<'a> {
    pub(super) pacing: &'a Pacing,
    pub(super) policy: &'a HostPolicy,
    pub(super) in_flight: &'a InFlight,
}

/// Judges one request to a report-only host at `now` and counts the verdict in `shadow`;
/// `refused` is a refusal already decided before the budget (robots.txt, `skip_resources`).
pub(super) fn judge(
    shadow: &mut Shadow,
    state: HostView<'_>,
    refused: Option<ShadowReason>,
    job: Option<&JobTag>,
    now: Instant,
) -> ShadowVerdict {
    let block = state.pacing.block(now);
    let mut verdict = ShadowVerdict {
        inside_window: block.is_some_and(|c| {
            matches!(
                c.cause,
                CooldownCause::Status(_) | CooldownCause::ServerBudget
            )
        }),
        would_refuse: refused,
        ..ShadowVerdict::default()
    };
    if verdict.would_refuse.is_none() {
        schedule(shadow, state, block, &mut verdict, now);
    }
    if verdict.would_refuse.is_none() {
        verdict.job_would_wait = fair_wait(shadow, state, job, block, now);
    }
    shadow.counts.count(&verdict);
    verdict
}

/// Places the request in the host's would-be schedule: refused by a cooldown it is not held
/// through (`on_cooldown`, `max_hold_seconds`), a full
/// queue or `max_wait_seconds`, or given a turn, perhaps later than now.
fn schedule(
    shadow: &mut Shadow,
    state: HostView<'_>,
    block: Option<crate::pacing::policy::Cooldown>,
    verdict: &mut ShadowVerdict,
    now: Instant,
) {
    let policy = state.policy;
    if let Some(c) = block.filter(|c| {
        !policy
            .cooldown
            .holds(None, c.until.saturating_duration_since(now))
    }) {
        verdict.would_refuse = Some(if c.cause == CooldownCause::Operator {
            ShadowReason::Paused
        } else {
            ShadowReason::CoolingDown
        });
        return;
    }
    let rate = state.pacing.effective_rate(now).max(1e-9);
    let interval = Duration::from_secs_f64((1.0 / rate).min(86_400.0));
    let tolerance = interval * policy.pacing.burst.saturating_sub(1);
    let tat = shadow.tat.map_or(now, |t| t.max(now));
    let mut start = tat.checked_sub(tolerance).unwrap_or(now).max(now);
    if let Some(c) = block {
        start = start.max(c.until);
    }
    let wait = start.saturating_duration_since(now);
    if wait > policy.pacing.max_wait {
        verdict.would_refuse = Some(ShadowReason::WaitedTooLong);
        return;
    }
    if wait.as_secs_f64() * rate >= policy.pacing.max_queue as f64 {
        verdict.would_refuse = Some(ShadowReason::QueueFull);
        return;
    }
    shadow.tat = Some(tat.max(start) + interval);
    let cap = state.pacing.concurrency_cap(policy.pacing.concurrency);
    let slot_free = state.in_flight.has_room(cap);
    verdict.would_wait = wait;
    verdict.waits = !wait.is_zero() || !slot_free;
}

/// How long a request of `job` would have waited for its job's share of the host's turns: each
/// job with turns ahead keeps its own schedule, spaced by the host's interval over its share of
/// the weights of those jobs (a job alone: the host's own pace).
fn fair_wait(
    shadow: &mut Shadow,
    state: HostView<'_>,
    job: Option<&JobTag>,
    block: Option<crate::pacing::policy::Cooldown>,
    now: Instant,
) -> Duration {
    let rate = state.pacing.effective_rate(now).max(1e-9);
    let interval = (1.0 / rate).min(86_400.0);
    let tolerance =
        Duration::from_secs_f64(interval * f64::from(state.policy.pacing.burst.saturating_sub(1)));
    shadow.jobs.retain(|j| j.tat > now);
    let (name, weight) = job.map_or(("anonymous", 1.0), |j| (&*j.name, j.weight.max(1e-3)));
    let others: f64 = shadow
        .jobs
        .iter()
        .filter(|j| &*j.name != name)
        .map(|j| j.weight)
        .sum();
    let step = Duration::from_secs_f64((interval * (weight + others) / weight).min(86_400.0));
    let index = match shadow.jobs.iter().position(|j| &*j.name == name) {
        Some(i) => i,
        None if shadow.jobs.len() < MAX_SHADOW_JOBS => {
            shadow.jobs.push(ShadowJob {
                name: Arc::from(name),
                tat: now,
                weight,
            });
            shadow.jobs.len() - 1
        }
        None => return Duration::ZERO,
    };
    let entry = &mut shadow.jobs[index];
    entry.weight = weight;
    let tat = entry.tat.max(now);
    let mut start = tat.checked_sub(tolerance).unwrap_or(now).max(now);
    if let Some(c) = block {
        start = start.max(c.until);
    }
    entry.tat = tat.max(start) + step;
    start.saturating_duration_since(now)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::budget::limiter::host::Host;
    use crate::config::HostPolicy;

    fn host(rate: f64, burst: u32) -> Host {
        let policy = {
            let mut p = HostPolicy::default();
            p.pacing.rate = rate;
            p.pacing.burst = burst;
            p.pacing.concurrency = 100;
            p.scope.enforce = false;
            p
        };
        Host::new(
            &crate::budget::keys::BudgetKey::of_host("shadow.test", 80),
            Arc::new(policy),
            Instant::now(),
        )
    }

    #[test]
    fn every_reason_has_its_place_and_its_word() {
        for (i, reason) in ShadowReason::ALL.into_iter().enumerate() {
            assert_eq!(reason.index(), i);
        }
        let words: Vec<&str> = ShadowReason::ALL.map(ShadowReason::as_str).to_vec();
        assert_eq!(
            words,
            [
                "cooling_down",
                "paused",
                "queue_full",
                "waited_too_long",
                "robots",
                "skip_resources",
                "quota"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn requests_at_once_would_have_waited_their_turns() {
        let host = host(2.0, 2);
        let now = Instant::now();
        let mut state = host.lock();
        let waits: Vec<f64> = (0..5)
            .map(|_| state.judge_shadow(None, None, now).would_wait.as_secs_f64())
            .collect();
        // Burst 2 at once, then one every 0.5 s.
        assert_eq!(waits, vec![0.0, 0.0, 0.5, 1.0, 1.5]);
        let counts = state.shadow().unwrap().counts;
        assert_eq!(counts.would_wait, 3);
        assert!((counts.would_wait_seconds - 3.0).abs() < 1e-6);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cooldown_would_have_refused_and_a_robots_verdict_is_counted() {
        let host = host(10.0, 1);
        let now = Instant::now();
        let mut state = host.lock();
        state.close(
            now + Duration::from_secs(30),
            CooldownCause::Status(429),
            now,
        );
        let v = state.judge_shadow(None, None, now);
        assert_eq!(
            v.would_refuse.map(ShadowReason::as_str),
            Some("cooling_down")
        );
        assert!(v.inside_window);
        let v = state.judge_shadow(Some(ShadowReason::Robots), None, now);
        assert_eq!(v.would_refuse.map(ShadowReason::as_str), Some("robots"));
        let counts = state.shadow().unwrap().counts;
        assert_eq!(counts.would_refuse[0], 1);
        assert_eq!(counts.would_refuse[4], 1);
        assert_eq!(counts.inside_window, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_report_only_host_says_what_each_jobs_fair_share_would_have_made_it_wait() {
        let host = host(4.0, 1);
        let now = Instant::now();
        let mut state = host.lock();
        let (a, b) = (JobTag::new("a", 1.0), JobTag::new("b", 1.0));
        // Job A alone: its turns at the host's pace, 0.25 s apart.
        let alone: Vec<f64> = (0..4)
            .map(|_| {
                state
                    .judge_shadow(None, Some(&a), now)
                    .job_would_wait
                    .as_secs_f64()
            })
            .collect();
        assert_eq!(alone, vec![0.0, 0.25, 0.5, 0.75]);
        // Job B arrives: half the turns are its own, so its first is at once, not behind A's.
        let b_first = state.judge_shadow(None, Some(&b), now).job_would_wait;
        assert_eq!(b_first, Duration::ZERO);
        // With two jobs, each one's turns are twice as far apart.
        let b_second = state.judge_shadow(None, Some(&b), now).job_would_wait;
        assert_eq!(b_second, Duration::from_millis(500));
    }
}
