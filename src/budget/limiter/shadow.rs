//! Report-only (shadow) mode, `enforce = false`: every request to the host is forwarded at once,
//! and what courtesy would have done is judged and counted. The judgement keeps its own schedule of
//! the turns the host would have given (GCRA: the turn is free from `tat − (burst − 1) × interval`
//! on, the same arithmetic as the shared store's), so "would have waited 3.2 s" means what it says
//! for a crawl that never waited. Feedback (cooldowns, the adaptive rate, blocks) moves the host's
//! pacing as usual; it only never holds anything back.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::host::HostState;
use super::lanes::JobTag;
use crate::pacing::policy::CooldownCause;

/// Why a report-only host's request would have been refused, had courtesy enforced: one closed
/// set, carried as itself from the judgement to the counts, the metrics, the admin JSON and the
/// log, and spelled only by [`ShadowReason::as_str`] (its words are public: metric label values and
/// JSON keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ShadowReason {
    /// A cooldown the request would not be held through (`on_cooldown`, `max_hold_seconds`).
    CoolingDown = 0,
    /// An operator's pause the request would not be held through.
    Paused,
    /// The host's queue would have been full (`max_queue`).
    QueueFull,
    /// Its turn would have come after `max_wait_seconds`.
    WaitedTooLong,
    /// robots.txt disallows it.
    Robots,
    /// A resource kind the host skips (`skip_resources`).
    SkipResources,
    /// The job's quota was spent.
    Quota,
}

impl ShadowReason {
    /// How many reasons there are (for tables indexed by reason).
    pub const COUNT: usize = 7;

    /// Every reason, in the order of their numbers (the order of [`ShadowCounts::would_refuse`]).
    pub const ALL: [ShadowReason; ShadowReason::COUNT] = [
        ShadowReason::CoolingDown,
        ShadowReason::Paused,
        ShadowReason::QueueFull,
        ShadowReason::WaitedTooLong,
        ShadowReason::Robots,
        ShadowReason::SkipResources,
        ShadowReason::Quota,
    ];

    /// The reason as one word: the `reason` label of `courtesy_shadow_would_refuse_total`, the
    /// key in `/hosts`' `shadow.would_refuse`, the `would_refuse` of the log line.
    pub const fn as_str(self) -> &'static str {
        match self {
            ShadowReason::CoolingDown => "cooling_down",
            ShadowReason::Paused => "paused",
            ShadowReason::QueueFull => "queue_full",
            ShadowReason::WaitedTooLong => "waited_too_long",
            ShadowReason::Robots => "robots",
            ShadowReason::SkipResources => "skip_resources",
            ShadowReason::Quota => "quota",
        }
    }

    /// The reason's place in [`ShadowReason::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// What courtesy would have done with one request, had it enforced.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShadowVerdict {
    /// How long it would have waited for its turn (zero: it would have left at once). A wait for
    /// a concurrency slot counts as a wait, of unknown length (not added here).
    pub would_wait: Duration,
    /// Whether it would have waited at all.
    pub waits: bool,
    /// Why it would have been refused.
    pub would_refuse: Option<ShadowReason>,
    /// Whether it arrived inside a window the server announced (Retry-After, RateLimit reset).
    pub inside_window: bool,
    /// How long it would have waited with its job's fair share of the host's turns (the jobs
    /// seen lately sharing them by weight), for the job's own counts.
    pub job_would_wait: Duration,
}

/// A report-only host's counts since courtesy met it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShadowCounts {
    /// Requests that would have waited for their turn.
    pub would_wait: u64,
    /// How long they would have waited, in all.
    pub would_wait_seconds: f64,
    /// Requests that would have been refused, by reason (in [`ShadowReason::ALL`]'s order).
    pub would_refuse: [u64; ShadowReason::COUNT],
    /// Requests that arrived inside a window the server announced.
    pub inside_window: u64,
}

impl ShadowCounts {
    fn count(&mut self, verdict: &ShadowVerdict) {
        if verdict.waits {
            self.would_wait += 1;
            self.would_wait_seconds += verdict.would_wait.as_secs_f64();
        }
        if let Some(reason) = verdict.would_refuse {
            self.would_refuse[reason.index()] += 1;
        }
        if verdict.inside_window {
            self.inside_window += 1;
        }
    }
}

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

/// Judges one request to a report-only host at `now` and counts the verdict; `refused` is a
/// refusal already decided before the budget (robots.txt, `skip_resources`).
pub(super) fn judge(
    state: &mut HostState,
    refused: Option<ShadowReason>,
    job: Option<&JobTag>,
    now: Instant,
) -> ShadowVerdict {
    let block = state.pacing().block(now);
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
        schedule(state, block, &mut verdict, now);
    }
    if verdict.would_refuse.is_none() {
        verdict.job_would_wait = fair_wait(state, job, block, now);
    }
    state.shadow_mut().counts.count(&verdict);
    verdict
}

/// Places the request in the host's would-be schedule: refused by a cooldown it is not held
/// through (`on_cooldown`, `max_hold_seconds`), a full
/// queue or `max_wait_seconds`, or given a turn, perhaps later than now.
fn schedule(
    state: &mut HostState,
    block: Option<crate::pacing::policy::Cooldown>,
    verdict: &mut ShadowVerdict,
    now: Instant,
) {
    let policy = state.policy().clone();
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
    let rate = state.pacing().effective_rate(now).max(1e-9);
    let interval = Duration::from_secs_f64((1.0 / rate).min(86_400.0));
    let tolerance = interval * policy.pacing.burst.saturating_sub(1);
    let shadow = state.shadow_mut();
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
    let cap = state.pacing().concurrency_cap(policy.pacing.concurrency);
    let slot_free = state.in_flight().has_room(cap);
    verdict.would_wait = wait;
    verdict.waits = !wait.is_zero() || !slot_free;
}

/// How long a request of `job` would have waited for its job's share of the host's turns: each
/// job with turns ahead keeps its own schedule, spaced by the host's interval over its share of
/// the weights of those jobs (a job alone: the host's own pace).
fn fair_wait(
    state: &mut HostState,
    job: Option<&JobTag>,
    block: Option<crate::pacing::policy::Cooldown>,
    now: Instant,
) -> Duration {
    let rate = state.pacing().effective_rate(now).max(1e-9);
    let interval = (1.0 / rate).min(86_400.0);
    let tolerance = Duration::from_secs_f64(
        interval * f64::from(state.policy().pacing.burst.saturating_sub(1)),
    );
    let shadow = state.shadow_mut();
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
            .map(|_| judge(&mut state, None, None, now).would_wait.as_secs_f64())
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
        state.pacing_mut().pause(
            now + Duration::from_secs(30),
            CooldownCause::Status(429),
            now,
        );
        let v = judge(&mut state, None, None, now);
        assert_eq!(
            v.would_refuse.map(ShadowReason::as_str),
            Some("cooling_down")
        );
        assert!(v.inside_window);
        let v = judge(&mut state, Some(ShadowReason::Robots), None, now);
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
                judge(&mut state, None, Some(&a), now)
                    .job_would_wait
                    .as_secs_f64()
            })
            .collect();
        assert_eq!(alone, vec![0.0, 0.25, 0.5, 0.75]);
        // Job B arrives: half the turns are its own, so its first is at once, not behind A's.
        let b_first = judge(&mut state, None, Some(&b), now).job_would_wait;
        assert_eq!(b_first, Duration::ZERO);
        // With two jobs, each one's turns are twice as far apart.
        let b_second = judge(&mut state, None, Some(&b), now).job_would_wait;
        assert_eq!(b_second, Duration::from_millis(500));
    }
}
