//! Pure tests of the pacing state: explicit instants, no runtime.

use super::episode::WAVE_MEMORY;
use super::*;
use crate::config::OnCooldown;
use crate::pacing::feedback::ServerBudget;
use std::time::UNIX_EPOCH;

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// An adaptive host under AIMD (these tests describe AIMD's rules; `learned` is the default's).
fn adaptive(rate: f64) -> HostPolicy {
    {
        let mut p = HostPolicy::default();
        p.pacing.rate = rate;
        p.adaptive.enabled = true;
        p.adaptive.controller = crate::config::Controller::Aimd;
        p.adaptive.max_rate = 10.0;
        p.cooldown.on_cooldown = OnCooldown::Reject;
        p
    }
}

fn answer(feedback: Feedback, status: u16, sent_at: Instant) -> Observation {
    Observation {
        answer: Answer {
            feedback,
            status: Some(status),
            latency: Duration::from_millis(100),
            retry_after: None,
            server: None,
        },
        sent_at,
        limited: true,
        others_in_flight: 0,
    }
}

/// Changes one field of an observation; the tests build theirs from [`answer`] and say only
/// what differs.
trait Vary: Sized {
    fn with_status(self, status: Option<u16>) -> Self;
    fn with_latency(self, latency: Duration) -> Self;
    fn with_retry_after(self, retry_after: Option<Duration>) -> Self;
    fn with_server(self, server: Option<ServerBudget>) -> Self;
    fn with_sent_at(self, sent_at: Instant) -> Self;
    fn with_limited(self, limited: bool) -> Self;
    fn with_others_in_flight(self, others: u32) -> Self;
}

impl Vary for Observation {
    fn with_status(mut self, status: Option<u16>) -> Self {
        self.answer.status = status;
        self
    }
    fn with_latency(mut self, latency: Duration) -> Self {
        self.answer.latency = latency;
        self
    }
    fn with_retry_after(mut self, retry_after: Option<Duration>) -> Self {
        self.answer.retry_after = retry_after;
        self
    }
    fn with_server(mut self, server: Option<ServerBudget>) -> Self {
        self.answer.server = server;
        self
    }
    fn with_sent_at(mut self, sent_at: Instant) -> Self {
        self.sent_at = sent_at;
        self
    }
    fn with_limited(mut self, limited: bool) -> Self {
        self.limited = limited;
        self
    }
    fn with_others_in_flight(mut self, others: u32) -> Self {
        self.others_in_flight = others;
        self
    }
}

#[test]
fn healthy_limited_answers_creep_up_to_the_ceiling() {
    let t0 = Instant::now();
    let policy = adaptive(9.9);
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let r = p.observe(&answer(Feedback::Success, 200, t0), &policy, t0, 0.0);
    assert!((r.rate_after - 9.95).abs() < 1e-9);
    for _ in 0..10 {
        p.observe(&answer(Feedback::Success, 200, t0), &policy, t0, 0.0);
    }
    assert_eq!(p.rate(), 10.0, "max_rate holds even when healthy");
}

#[test]
fn unlimited_answers_do_not_raise_the_rate() {
    let t0 = Instant::now();
    let policy = adaptive(2.0);
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let obs = answer(Feedback::Success, 200, t0).with_limited(false);
    p.observe(&obs, &policy, t0, 0.0);
    assert_eq!(p.rate(), 2.0);
}

#[test]
fn slow_answers_cut_by_slow_factor_once_per_wave() {
    let t0 = Instant::now();
    let policy = adaptive(5.0);
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let slow = answer(Feedback::Success, 200, t0).with_latency(secs(2.5));
    p.observe(&slow, &policy, t0 + secs(1.0), 0.0);
    assert!((p.rate() - 4.0).abs() < 1e-9);
    // Another slow answer to a request sent before the cut: same wave, no second cut.
    p.observe(&slow, &policy, t0 + secs(1.1), 0.0);
    assert!((p.rate() - 4.0).abs() < 1e-9);
    let later = slow.with_sent_at(t0 + secs(1.2));
    p.observe(&later, &policy, t0 + secs(3.0), 0.0);
    assert!((p.rate() - 3.2).abs() < 1e-9);
}

#[test]
fn a_wave_of_429s_cuts_once() {
    let t0 = Instant::now();
    let policy = {
        let mut p = adaptive(8.0);
        p.cooldown.resume_factor = 1.0;
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    // Eight requests in flight together, all answered 429 with Retry-After: 1.
    for i in 0..8 {
        let obs = answer(Feedback::Throttled, 429, t0).with_retry_after(Some(secs(1.0)));
        p.observe(&obs, &policy, t0 + secs(0.1 + 0.01 * f64::from(i)), 0.0);
    }
    assert!((p.rate() - 4.0).abs() < 1e-9, "rate {}", p.rate());
}

#[test]
fn a_cooldown_blocks_then_resumes_at_resume_factor_with_no_burst() {
    let t0 = Instant::now();
    let policy = {
        let mut p = HostPolicy::default();
        p.pacing.rate = 4.0;
        p.pacing.burst = 5;
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let obs = answer(Feedback::Throttled, 429, t0).with_retry_after(Some(secs(30.0)));
    let r = p.observe(&obs, &policy, t0, 0.0);
    assert_eq!(r.cooldown, Some(secs(30.0)));
    assert_eq!(p.cooldown(t0).unwrap().cause, CooldownCause::Status(429));
    assert_eq!(p.rate(), 2.0, "resume at 0.5 x the rate before");
    assert_eq!(p.ready_at(t0 + secs(1.0)), t0 + secs(30.0));
    assert!(!p.try_take(t0 + secs(29.9), 0.0, 0.0));
    // After the window one request leaves, then 1/rate spacing: no saved-up burst.
    assert!(p.try_take(t0 + secs(30.0), 0.0, 0.0));
    assert!(!p.try_take(t0 + secs(30.0), 0.0, 0.0));
    assert_eq!(p.ready_at(t0 + secs(30.0)), t0 + secs(30.5));
}

#[test]
fn a_cooldown_never_shortens() {
    let t0 = Instant::now();
    let policy = HostPolicy::default();
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let long = answer(Feedback::Throttled, 429, t0).with_retry_after(Some(secs(60.0)));
    p.observe(&long, &policy, t0, 0.0);
    let short = answer(Feedback::Overloaded, 503, t0)
        .with_retry_after(Some(secs(5.0)))
        .with_sent_at(t0 + secs(1.0));
    let r = p.observe(&short, &policy, t0 + secs(2.0), 0.0);
    assert_eq!(r.cooldown, None);
    assert_eq!(p.cooldown(t0 + secs(2.0)).unwrap().until, t0 + secs(60.0));
    let longer = short.with_retry_after(Some(secs(100.0)));
    p.observe(&longer, &policy, t0 + secs(3.0), 0.0);
    let c = p.cooldown(t0 + secs(3.0)).unwrap();
    assert_eq!((c.started, c.until), (t0, t0 + secs(103.0)));
}

#[test]
fn retry_after_is_capped_by_max_retry_after() {
    let t0 = Instant::now();
    let policy = HostPolicy::default();
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let obs = answer(Feedback::Throttled, 429, t0).with_retry_after(Some(secs(86_400.0)));
    assert_eq!(
        p.observe(&obs, &policy, t0, 0.0).cooldown,
        Some(secs(600.0))
    );
}

#[test]
fn without_retry_after_backoff_doubles_per_wave_and_resets_when_healthy() {
    let t0 = Instant::now();
    let policy = HostPolicy::default();
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let mut now = t0;
    let mut windows = Vec::new();
    for _ in 0..10 {
        let obs = answer(Feedback::Overloaded, 503, now);
        let r = p.observe(&obs, &policy, now + secs(0.1), 0.0);
        let window = r.cooldown.unwrap();
        windows.push(window.as_secs_f64());
        now = now + secs(0.1) + window;
    }
    assert_eq!(
        windows,
        vec![2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0, 300.0]
    );
    p.observe(&answer(Feedback::Success, 200, now), &policy, now, 0.0);
    let r = p.observe(
        &answer(Feedback::Throttled, 429, now),
        &policy,
        now + secs(0.1),
        0.0,
    );
    assert_eq!(r.cooldown, Some(secs(2.0)));
}

#[test]
fn backoff_jitter_only_lengthens() {
    let t0 = Instant::now();
    let policy = HostPolicy::default();
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let r = p.observe(&answer(Feedback::Failed, 0, t0), &policy, t0, 0.99);
    let w = r.cooldown.unwrap().as_secs_f64();
    assert!((2.0..=2.5).contains(&w), "{w}");
}

#[test]
fn failures_back_off_like_overload() {
    let t0 = Instant::now();
    let policy = HostPolicy::default();
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let obs = answer(Feedback::Failed, 0, t0).with_status(None);
    let r = p.observe(&obs, &policy, t0, 0.0);
    assert_eq!(r.cooldown, Some(secs(2.0)));
    assert_eq!(p.cooldown(t0).unwrap().cause, CooldownCause::Failure);
}

#[test]
fn a_non_adaptive_host_recovers_to_its_configured_rate_only() {
    let t0 = Instant::now();
    let policy = {
        let mut p = HostPolicy::default();
        p.pacing.rate = 1.0;
        p.adaptive.increase_step = 0.25;
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let obs = answer(Feedback::Throttled, 429, t0).with_retry_after(Some(secs(1.0)));
    p.observe(&obs, &policy, t0, 0.0);
    assert_eq!(p.rate(), 0.5);
    for _ in 0..5 {
        p.observe(
            &answer(Feedback::Success, 200, t0),
            &policy,
            t0 + secs(2.0),
            0.0,
        );
    }
    assert_eq!(p.rate(), 1.0);
}

#[test]
fn neutral_answers_change_nothing() {
    let t0 = Instant::now();
    let policy = adaptive(3.0);
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let r = p.observe(&answer(Feedback::Neutral, 404, t0), &policy, t0, 0.0);
    assert_eq!((r.rate_after, r.cooldown), (3.0, None));
}

#[test]
fn the_servers_remaining_budget_is_spread_until_the_reset_and_never_exceeded() {
    let t0 = Instant::now();
    let policy = {
        let mut p = HostPolicy::default();
        p.pacing.rate = 100.0;
        p.pacing.burst = 10;
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let obs = answer(Feedback::Success, 200, t0).with_server(Some(ServerBudget {
        remaining: Some(3),
        reset: Some(secs(10.0)),
        policy_rate: None,
        quota: None,
        ..ServerBudget::default()
    }));
    p.observe(&obs, &policy, t0, 0.0);
    assert!((p.effective_rate(t0) - 0.3).abs() < 1e-9);
    // Hammer it every millisecond for ten seconds: at most 3 turns.
    let mut taken = 0;
    let mut now = t0;
    while now < t0 + secs(9.999) {
        if p.try_take(now, 0.0, 0.0) {
            taken += 1;
        }
        now += Duration::from_millis(1);
    }
    assert_eq!(taken, 3);
    // After the reset, our own rate is back.
    assert!(p.try_take(t0 + secs(10.0), 0.0, 0.0));
    assert_eq!(p.effective_rate(t0 + secs(10.0)), 100.0);
}

#[test]
fn zero_remaining_cools_down_until_the_reset() {
    let t0 = Instant::now();
    let policy = HostPolicy::default();
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let obs = answer(Feedback::Success, 200, t0).with_server(Some(ServerBudget {
        remaining: Some(0),
        reset: Some(secs(20.0)),
        policy_rate: None,
        quota: None,
        ..ServerBudget::default()
    }));
    let r = p.observe(&obs, &policy, t0, 0.0);
    assert_eq!(r.cooldown, Some(secs(20.0)));
    assert_eq!(p.cooldown(t0).unwrap().cause, CooldownCause::ServerBudget);
    assert_eq!(
        p.rate(),
        1.0,
        "an announced reset is not a complaint: no rate cut"
    );
}

#[test]
fn server_numbers_only_ever_make_courtesy_stricter() {
    let t0 = Instant::now();
    let policy = {
        let mut p = HostPolicy::default();
        p.pacing.rate = 2.0;
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let generous = answer(Feedback::Success, 200, t0).with_server(Some(ServerBudget {
        remaining: Some(1000),
        reset: Some(secs(1.0)),
        policy_rate: Some(500.0),
        quota: None,
        ..ServerBudget::default()
    }));
    p.observe(&generous, &policy, t0, 0.0);
    assert_eq!(p.effective_rate(t0), 2.0);
    let strict = generous.with_server(Some(ServerBudget {
        remaining: None,
        reset: None,
        policy_rate: Some(0.5),
        quota: None,
        ..ServerBudget::default()
    }));
    p.observe(&strict, &policy, t0, 0.0);
    assert_eq!(p.effective_rate(t0), 0.5);
}

#[test]
fn requests_in_flight_count_against_the_servers_remaining() {
    let t0 = Instant::now();
    let policy = HostPolicy::default();
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let obs = answer(Feedback::Success, 200, t0)
        .with_server(Some(ServerBudget {
            remaining: Some(2),
            reset: Some(secs(5.0)),
            policy_rate: None,
            quota: None,
            ..ServerBudget::default()
        }))
        .with_others_in_flight(2);
    assert_eq!(p.observe(&obs, &policy, t0, 0.0).cooldown, Some(secs(5.0)));
}

#[test]
fn an_operator_pause_blocks_until_resumed_but_never_shortens_a_server_cooldown() {
    let t0 = Instant::now();
    let policy = HostPolicy::default();
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    p.operator_pause(t0 + secs(100.0));
    assert_eq!(p.block(t0).unwrap().cause, CooldownCause::Operator);
    assert_eq!(p.ready_at(t0), t0 + secs(100.0));
    p.operator_resume();
    assert_eq!(p.ready_at(t0), t0);
    let obs = answer(Feedback::Throttled, 429, t0).with_retry_after(Some(secs(30.0)));
    p.observe(&obs, &policy, t0, 0.0);
    p.operator_pause(t0 + secs(10.0));
    p.operator_resume();
    assert_eq!(p.ready_at(t0 + secs(1.0)), t0 + secs(30.0));
    assert_eq!(p.block(t0).unwrap().cause, CooldownCause::Status(429));
}

#[test]
fn an_operator_rate_replaces_ours_but_server_caps_still_apply() {
    let t0 = Instant::now();
    let policy = HostPolicy::default();
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    p.set_rate_override(Some(4.0), t0);
    assert_eq!(p.effective_rate(t0), 4.0);
    let obs = answer(Feedback::Success, 200, t0).with_server(Some(ServerBudget {
        remaining: None,
        reset: None,
        policy_rate: Some(2.0),
        quota: None,
        ..ServerBudget::default()
    }));
    p.observe(&obs, &policy, t0, 0.0);
    assert_eq!(p.effective_rate(t0), 2.0);
    p.set_rate_override(None, t0);
    assert_eq!(p.effective_rate(t0), 1.0);
}

#[test]
fn a_record_restores_cooldowns_rates_and_overrides() {
    let t0 = Instant::now();
    let policy = {
        let mut p = HostPolicy::default();
        p.adaptive.enabled = true;
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let obs = answer(Feedback::Throttled, 429, t0).with_retry_after(Some(secs(120.0)));
    p.observe(&obs, &policy, t0, 0.0);
    p.set_rate_override(Some(0.7), t0);
    let record = p.record(t0 + secs(10.0));
    let mut fresh = Pacing::new(&policy, t0 + secs(10.0), UNIX_EPOCH);
    fresh.restore(&record, &policy, t0 + secs(10.0));
    assert_eq!(
        fresh.cooldown(t0 + secs(10.0)).unwrap().until,
        t0 + secs(120.0)
    );
    assert_eq!(fresh.rate(), p.rate());
    assert_eq!(fresh.rate_override(), Some(0.7));
}

#[test]
fn a_reloaded_policy_keeps_a_lowered_rate_lowered() {
    let t0 = Instant::now();
    let old = HostPolicy::default();
    let mut p = Pacing::new(&old, t0, UNIX_EPOCH);
    let new = {
        let mut p = HostPolicy::default();
        p.pacing.rate = 3.0;
        p.pacing.burst = 3;
        p
    };
    p.apply_policy(&old, &new, t0, UNIX_EPOCH);
    assert_eq!(p.rate(), 3.0, "an unlowered rate follows the config");
    let obs = answer(Feedback::Throttled, 429, t0).with_retry_after(Some(secs(1.0)));
    p.observe(&obs, &new, t0, 0.0);
    assert_eq!(p.rate(), 1.5);
    let newer = {
        let mut p = new.clone();
        p.pacing.rate = 10.0;
        p
    };
    p.apply_policy(&new, &newer, t0, UNIX_EPOCH);
    assert_eq!(p.rate(), 1.5, "a lowered rate is not raised by a reload");
}

#[test]
fn five_403s_in_a_row_are_a_hard_block() {
    let t0 = Instant::now();
    let policy = {
        let mut p = HostPolicy::default();
        p.pacing.rate = 4.0;
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    for _ in 0..4 {
        let r = p.observe(&answer(Feedback::Neutral, 403, t0), &policy, t0, 0.0);
        assert!(!r.hard_block);
    }
    // A 200 in between starts the count again.
    p.observe(&answer(Feedback::Success, 200, t0), &policy, t0, 0.0);
    for i in 0..5 {
        let r = p.observe(&answer(Feedback::Neutral, 403, t0), &policy, t0, 0.0);
        assert_eq!(r.hard_block, i == 4);
    }
    let c = p.cooldown(t0).unwrap();
    assert_eq!(
        (c.cause, c.until),
        (CooldownCause::HardBlock, t0 + secs(60.0)),
        "a host's first block pauses it for block_first_pause_seconds"
    );
    assert_eq!(p.rate(), 1.0, "resumes at block_resume_factor (0.25) x 4");
}

#[test]
fn a_soft_block_pauses_once_and_never_shortens() {
    let t0 = Instant::now();
    let policy = {
        let mut p = HostPolicy::default();
        p.pacing.rate = 2.0;
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    assert_eq!(
        p.pause_for_block(CooldownCause::SoftBlock, &policy, t0),
        Some(secs(60.0))
    );
    assert_eq!(
        p.pause_for_block(CooldownCause::SoftBlock, &policy, t0 + secs(1.0)),
        None
    );
    assert_eq!(p.rate(), 0.5, "cut once, not twice");
    let ready = p.ready_at(t0 + secs(10.0));
    assert!(
        ready >= t0 + secs(60.0) && ready <= t0 + secs(62.0),
        "closed for the first pause, 60 s: {:?}",
        ready - t0
    );
}

#[test]
fn block_pauses_double_up_to_block_pause_seconds_and_are_forgotten_after_it() {
    let t0 = Instant::now();
    let policy = {
        let mut p = HostPolicy::default();
        p.blocks.first_pause = secs(60.0);
        p.blocks.pause = secs(300.0);
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let mut now = t0;
    for want in [60.0, 120.0, 240.0, 300.0, 300.0] {
        let pause = p.pause_for_block(CooldownCause::SoftBlock, &policy, now);
        assert_eq!(pause, Some(secs(want)));
        assert_eq!(p.cooldown(now).map(|c| c.until), Some(now + secs(want)));
        // The next block comes 10 s after this pause ends.
        now += secs(want + 10.0);
    }
    // The last pause ended at now - 10 s; a whole block_pause_seconds later the repeats are
    // forgotten and the next block is a first one again.
    now += secs(300.0);
    p.sync(now);
    assert_eq!(p.block_pause_length(&policy, now), secs(60.0));
    assert_eq!(
        p.pause_for_block(CooldownCause::HardBlock, &policy, now),
        Some(secs(60.0))
    );
}

#[test]
fn an_operators_resume_lifts_a_block_pause_but_not_a_servers_cooldown() {
    let t0 = Instant::now();
    let policy = HostPolicy::default();
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    p.pause_for_block(CooldownCause::SoftBlock, &policy, t0);
    p.pause_for_block(CooldownCause::SoftBlock, &policy, t0 + secs(100.0));
    assert_eq!(p.block_pause_length(&policy, t0 + secs(300.0)), secs(240.0));
    p.operator_resume();
    assert!(
        p.cooldown(t0 + secs(101.0)).is_none(),
        "the block pause is lifted"
    );
    assert_eq!(
        p.block_pause_length(&policy, t0 + secs(101.0)),
        secs(60.0),
        "and its repeats forgotten"
    );
    // A cooldown the server asked for is not the operator's to shorten.
    p.pause(
        t0 + secs(500.0),
        CooldownCause::Status(429),
        t0 + secs(101.0),
    );
    p.operator_resume();
    assert!(p.cooldown(t0 + secs(102.0)).is_some());
}

#[test]
fn a_robots_crawl_delay_caps_the_rate_and_adaptation() {
    let t0 = Instant::now();
    let policy = adaptive(5.0);
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    p.set_robots_cap(Some(0.5), t0);
    assert_eq!(p.effective_rate(t0), 0.5);
    for _ in 0..100 {
        p.observe(&answer(Feedback::Success, 200, t0), &policy, t0, 0.0);
    }
    assert_eq!(p.effective_rate(t0), 0.5);
    assert_eq!(p.rate(), 5.0, "adaptation does not climb past where it was");
}

#[test]
fn off_peak_switches_the_rate_at_the_window_edges() {
    use std::time::SystemTime;
    let off_peak = crate::config::Config::parse(
        "[defaults]\nrate = 1\noff_peak = { hours = \"01:00-06:00\", timezone = \"Europe/Berlin\", rate = 5.0 }\n",
        "t.toml",
    )
    .unwrap()
    .defaults
    .as_ref()
    .clone();
    // 2026-01-15 00:59:00 in Berlin (UTC+1) is 23:59:00 UTC the day before.
    let wall = UNIX_EPOCH + Duration::from_secs(1_768_435_140);
    let t0 = Instant::now();
    let mut p = Pacing::new(&off_peak, t0, wall);
    assert_eq!(p.effective_rate(t0), 1.0);
    assert!(p.try_take(t0, 0.0, 0.0));
    // The next token would be 1 s away at 1/s, but the window opens in 60 s: wake then.
    assert_eq!(p.ready_at(t0 + secs(0.5)), t0 + secs(1.0));
    let opens = t0 + secs(60.0);
    assert!(!p.in_off_peak(opens - secs(0.001)));
    assert!(p.in_off_peak(opens));
    assert_eq!(p.effective_rate(opens), 5.0);
    // Five hours later it closes again.
    let closes = opens + secs(5.0 * 3600.0);
    assert_eq!(p.effective_rate(closes - secs(0.001)), 5.0);
    assert_eq!(p.effective_rate(closes), 1.0);
    // While waiting at 1/s a minute before the window, a sleeper wakes exactly at its edge.
    let mut q = Pacing::new(
        &{
            let mut p = off_peak.clone();
            p.pacing.rate = 0.001;
            p
        },
        t0,
        wall,
    );
    assert!(q.try_take(t0, 0.0, 0.0));
    assert_eq!(q.ready_at(t0), opens);
    let _ = SystemTime::now();
}

#[test]
fn a_host_is_fresh_only_when_nothing_is_remembered() {
    let t0 = Instant::now();
    let policy = HostPolicy::default();
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    assert!(p.is_fresh(&policy, t0));
    let obs = answer(Feedback::Throttled, 429, t0).with_retry_after(Some(secs(5.0)));
    p.observe(&obs, &policy, t0, 0.0);
    assert!(!p.is_fresh(&policy, t0 + secs(10.0)), "rate still lowered");
}

#[test]
fn a_crawl_delay_or_a_403_streak_does_not_keep_a_host_known() {
    let t0 = Instant::now();
    let policy = HostPolicy::default();
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    p.set_robots_cap(Some(0.5), t0);
    p.observe(&answer(Feedback::Neutral, 403, t0), &policy, t0, 0.0);
    assert!(p.rare.is_some());
    assert!(p.is_fresh(&policy, t0 + secs(10.0)));
}

#[test]
fn what_an_episode_left_is_freed_when_it_ends() {
    // The boxed state costs a healthy host nothing; after a 429 it exists until the cooldown,
    // the wave memory and the burst clamp have all run out.
    let t0 = Instant::now();
    let policy = {
        let mut p = HostPolicy::default();
        p.cooldown.resume_factor = 1.0;
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    assert!(p.rare.is_none());
    let obs = answer(Feedback::Throttled, 429, t0).with_retry_after(Some(secs(5.0)));
    p.observe(&obs, &policy, t0, 0.0);
    assert!(p.rare.is_some());
    assert!(!p.is_fresh(&policy, t0 + secs(4.0)), "cooling down");
    // The wave and the burst clamp are remembered, but do not keep an idle host from being
    // forgotten.
    assert!(p.is_fresh(&policy, t0 + secs(10.0)));
    assert!(p.rare.is_some());
    let later = t0 + WAVE_MEMORY + secs(1.0);
    assert!(p.try_take(later, 0.0, 0.0));
    p.ready_at(later);
    assert!(p.rare.is_none(), "nothing is left to remember");
}

#[test]
fn the_pacing_state_stays_small() {
    // Issue 16: the learned limit's per-host state is one f32 in what was padding; the rest
    // lives in the boxed episode of a host that had a cut. 64-bit targets.
    assert!(
        std::mem::size_of::<Pacing>() <= 88,
        "{}",
        std::mem::size_of::<Pacing>()
    );
}

fn learned(rate: f64) -> HostPolicy {
    {
        let mut p = adaptive(rate);
        p.adaptive.controller = crate::config::Controller::Cubic;
        p
    }
}

/// Healthy answers, one every `every` seconds from `from` to `to` (seconds after `t0`), each to a
/// request that waited for its turn; returns the instant after the last.
fn healthy_until(
    p: &mut Pacing,
    policy: &HostPolicy,
    t0: Instant,
    (from, to, every): (f64, f64, f64),
) -> Instant {
    let mut now = t0 + secs(from);
    while now < t0 + secs(to) {
        p.observe(&answer(Feedback::Success, 200, now), policy, now, 0.0);
        now += secs(every);
    }
    now
}

/// A host at 8/s with the learned limit, after its first 429 (at `t0`, `Retry-After: 1`).
fn cut_once() -> (Instant, HostPolicy, Pacing) {
    let t0 = Instant::now();
    let policy = learned(8.0);
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    p.observe(&throttled(t0, 1.0), &policy, t0, 0.0);
    (t0, policy, p)
}

fn throttled(sent_at: Instant, wait: f64) -> Observation {
    let mut obs = answer(Feedback::Throttled, 429, sent_at);
    obs.answer.retry_after = Some(secs(wait));
    obs
}

#[test]
fn the_learned_limit_resumes_near_what_the_server_served_not_at_half() {
    // The first 429 knows nothing served: the rate is cut by decrease_factor, to 4.
    let (t0, policy, mut p) = cut_once();
    assert!((p.rate() - 4.0 * 0.95).abs() < 1e-9, "{}", p.rate());
    // Healthy answers at 5/s for a minute after the cooldown bring the rate back to the limit
    // and past it.
    let now = healthy_until(&mut p, &policy, t0, (1.0, 61.0, 0.2));
    let peak = p.rate();
    assert!(peak > 4.0, "the rate came back past the limit: {peak}");
    // A 429 now: the limit is what was served lately (5/s), capped below the peak; the rate
    // resumes just under it, far above AIMD's half.
    p.observe(&throttled(now, 1.0), &policy, now, 0.0);
    let served = 5.0f64.min(peak * (1.0 - policy.adaptive.learned_margin));
    assert!(p.rate() <= peak * (1.0 - policy.adaptive.learned_margin));
    assert!(
        p.rate() >= 0.85 * served,
        "{} after a peak of {peak}",
        p.rate()
    );
    // The cooldown is still in force and the same wave does not cut again.
    assert!(p.cooldown(now + secs(0.5)).is_some());
    let before = p.rate();
    p.observe(&throttled(now - secs(0.1), 1.0), &policy, now, 0.0);
    assert_eq!(p.rate(), before);
}

#[test]
fn the_learned_limit_holds_while_latency_nears_slow_response() {
    let t0 = Instant::now();
    let policy = {
        let mut p = learned(5.0);
        p.adaptive.slow_response = Duration::from_millis(500);
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let mut obs = answer(Feedback::Success, 200, t0);
    obs.answer.latency = Duration::from_millis(450);
    for i in 0..20 {
        p.observe(&obs, &policy, t0 + secs(f64::from(i) * 0.2), 0.0);
    }
    assert_eq!(
        p.rate(),
        5.0,
        "between 80 % and 100 % of slow_response the rate holds"
    );
    obs.answer.latency = Duration::from_millis(1000);
    obs.sent_at = t0 + secs(5.0);
    for i in 0..5 {
        p.observe(&obs, &policy, t0 + secs(5.0 + f64::from(i) * 0.1), 0.0);
    }
    assert!(
        p.rate() < 5.0 && p.rate() >= 2.5,
        "cut in proportion: {}",
        p.rate()
    );
}

#[test]
fn with_a_shared_budget_the_learned_limit_comes_from_the_peak_alone() {
    let (t0, policy, mut p) = cut_once();
    // The store answers the lesson: the shared rate. This instance serves only its part of it
    // (one answer a second, while the host as a whole was served far more).
    p.adopt_shared(4.0, None, t0);
    let now = healthy_until(&mut p, &policy, t0, (1.0, 70.0, 1.0));
    let peak = p.rate();
    p.observe(&throttled(now, 1.0), &policy, now, 0.0);
    let expected = peak * (1.0 - policy.adaptive.learned_margin) * 0.95;
    assert!(
        (p.rate() - expected).abs() < 1e-3 * peak,
        "{} after {peak}",
        p.rate()
    );
}

/// A healthy answer at `now` announcing `limit` requests per `window` seconds (`None`: not
/// said), with `counted` = (remaining, reset seconds) if the server counts the window down.
fn announcing(
    now: Instant,
    limit: u64,
    window: Option<f64>,
    counted: Option<(u64, f64)>,
) -> Observation {
    let mut obs = answer(Feedback::Success, 200, now);
    obs.answer.server = Some(ServerBudget {
        remaining: counted.map(|c| c.0),
        reset: counted.map(|c| secs(c.1)),
        policy_rate: None,
        quota: Some(crate::pacing::feedback::Quota {
            limit,
            window: window.map(secs),
        }),
        ..ServerBudget::default()
    });
    obs
}

#[test]
fn an_announced_quota_moves_the_learned_limit_at_once_up_and_down() {
    let t0 = Instant::now();
    let policy = learned(10.0);
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let under = 1.0 - policy.adaptive.learned_margin;
    p.observe(&announcing(t0, 5, Some(1.0), None), &policy, t0, 0.0);
    assert!((p.rate() - 5.0 * under).abs() < 1e-6, "{}", p.rate());
    // The same quota again: the probe stops just under it.
    let mut now = t0;
    for _ in 0..600 {
        now += secs(0.2);
        p.observe(&announcing(now, 5, Some(1.0), None), &policy, now, 0.0);
    }
    assert!(p.rate() <= 5.0 * under + 1e-6, "{}", p.rate());
    // Raised and lowered: followed at once, without a 429.
    p.observe(&announcing(now, 8, Some(1.0), None), &policy, now, 0.0);
    assert!((p.rate() - 8.0 * under).abs() < 1e-6, "{}", p.rate());
    p.observe(&announcing(now, 2, Some(1.0), None), &policy, now, 0.0);
    assert!((p.rate() - 2.0 * under).abs() < 1e-6, "{}", p.rate());
    // A 429 still cuts below the quota.
    let mut obs = throttled(now, 1.0);
    obs.answer.server = announcing(now, 2, Some(1.0), None).answer.server;
    p.observe(&obs, &policy, now, 0.0);
    assert!(p.rate() < 2.0 * under, "{}", p.rate());
}

#[test]
fn a_counted_quota_raises_the_learned_limit_and_zero_remaining_still_pauses() {
    let t0 = Instant::now();
    let policy = learned(1.0);
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    // 50 per 10 s, counted down: the learned limit rises to the quota itself at once, and
    // R = 0 still pauses until the reset.
    let counted =
        |limit, remaining, reset| announcing(t0, limit, Some(10.0), Some((remaining, reset)));
    let r = p.observe(&counted(50, 0, 3.0), &policy, t0, 0.0);
    assert!((p.rate() - 5.0).abs() < 1e-6, "{}", p.rate());
    assert_eq!(r.cooldown, Some(secs(3.0)));
    assert_eq!(p.ready_at(t0), t0 + secs(3.0));
    // Lowered: the hard rules obey it at once (R ÷ T); our own rate is left to them.
    let later = t0 + secs(4.0);
    let mut obs = counted(20, 10, 5.0);
    obs.sent_at = later;
    p.observe(&obs, &policy, later, 0.0);
    assert!((p.rate() - 5.0).abs() < 1e-6, "{}", p.rate());
    assert!(p.effective_rate(later) <= 2.0 + 1e-9);
    // Without the window said, the longest reset seen with this limit stands for it.
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    for (remaining, reset) in [(50, 60.0), (40, 20.0)] {
        let obs = announcing(t0, 100, None, Some((remaining, reset)));
        p.observe(&obs, &policy, t0, 0.0);
        assert!((p.rate() - 100.0 / 60.0).abs() < 1e-6, "{}", p.rate());
    }
    // AIMD leaves an announced quota to the hard rules.
    let aimd = adaptive(10.0);
    let mut p = Pacing::new(&aimd, t0, UNIX_EPOCH);
    p.observe(&announcing(t0, 5, Some(1.0), None), &aimd, t0, 0.0);
    assert_eq!(p.rate(), 10.0);
}

/// `max_bytes_per_second`: a body's bytes push the next turn past the token bucket's (the
/// stricter wins), a reload keeps the debt at the new rate, and unsetting the key drops it.
#[test]
fn a_byte_debt_outlasts_the_token_and_a_reload_keeps_it() {
    let t0 = Instant::now();
    let mut policy = HostPolicy::default();
    policy.pacing.rate = 1.0;
    policy.pacing.max_bytes_per_second = Some(1000);
    policy.pacing.max_bytes_burst = Some(0);
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    assert!(p.try_take(t0, 0.0, 0.0));
    p.charge_bytes(3000, t0);
    assert_eq!(
        p.ready_at(t0),
        t0 + secs(3.0),
        "3 kB at 1 kB/s outlast the 1 s token"
    );
    assert!(
        !p.is_fresh(&policy, t0 + secs(0.5)),
        "a host that owes bytes is kept"
    );
    let mut faster = policy.clone();
    faster.pacing.max_bytes_per_second = Some(2000);
    p.apply_policy(&policy, &faster, t0 + secs(1.0), UNIX_EPOCH);
    assert_eq!(p.byte_debt(t0 + secs(1.0)), Some((2000, t0 + secs(2.0))));
    let mut none = faster.clone();
    none.pacing.max_bytes_per_second = None;
    p.apply_policy(&faster, &none, t0 + secs(1.0), UNIX_EPOCH);
    assert_eq!(p.byte_debt(t0 + secs(1.0)), None);
    assert_eq!(
        p.ready_at(t0 + secs(1.0)),
        t0 + secs(1.0),
        "only the token is left"
    );
}

/// A healthy answer (to a request sent at `sent`) counting a window down: `remaining` left,
/// the reset `reset` seconds away (whole seconds, as the draft's `t=`), and, with `quota`, the
/// policy `q=Q;w=1`.
fn counted_answer(sent: Instant, remaining: u64, reset: f64, quota: Option<u64>) -> Observation {
    answer(Feedback::Success, 200, sent).with_server(Some(ServerBudget {
        remaining: Some(remaining),
        reset: Some(secs(reset)),
        policy_rate: quota.map(|q| q as f64),
        quota: quota.map(|limit| crate::pacing::feedback::Quota {
            limit,
            window: Some(secs(1.0)),
        }),
        ..ServerBudget::default()
    }))
}

#[test]
fn a_window_spent_by_courtesys_own_turns_is_waited_out_not_refused() {
    let t0 = Instant::now();
    let policy = {
        let mut p = HostPolicy::default();
        p.pacing.rate = 10.0;
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    p.observe(
        &counted_answer(t0, 1, 1.0, None),
        &policy,
        t0 + secs(0.02),
        0.0,
    );
    // Courtesy takes the window's last turn; its answer says the window is spent.
    let sent = t0 + secs(0.1);
    assert!(p.try_take(sent, 0.0, 0.0));
    let answered = sent + secs(0.02);
    let r = p.observe(&counted_answer(sent, 0, 1.0, None), &policy, answered, 0.0);
    assert_eq!(r.cooldown, None, "a wait like a turn's: nobody is refused");
    assert!(p.block(answered).is_none());
    // Nothing leaves before the reset the server stated.
    assert_eq!(p.ready_at(answered), answered + secs(1.0));
    assert!(!p.try_take(answered + secs(0.999), 0.0, 0.0));
    assert!(p.try_take(answered + secs(1.0), 0.0, 0.0));
    // Found spent while courtesy thought turns were left (others spend it too): a cooldown.
    let mut q = Pacing::new(&policy, t0, UNIX_EPOCH);
    q.observe(
        &counted_answer(t0, 3, 1.0, None),
        &policy,
        t0 + secs(0.02),
        0.0,
    );
    let r = q.observe(
        &counted_answer(t0 + secs(0.05), 0, 1.0, None),
        &policy,
        t0 + secs(0.07),
        0.0,
    );
    assert_eq!(r.cooldown, Some(secs(1.0)));
    let cooldown = q.cooldown(t0 + secs(0.07)).map(|c| c.cause);
    assert_eq!(cooldown, Some(CooldownCause::ServerBudget));
}

#[test]
fn the_phase_of_whole_second_windows_is_learned_from_where_the_count_starts_again() {
    // A server counting 5 per whole second, its windows starting 0.3 s after t0, each reset
    // said as `t=1`: the resets alone say nothing of the phase.
    let t0 = Instant::now();
    let edge = |k: u32| t0 + secs(0.3 + f64::from(k));
    let policy = {
        let mut p = HostPolicy::default();
        p.pacing.rate = 10.0;
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    let see = |p: &mut Pacing, sent: Instant, remaining: u64| {
        let obs = counted_answer(sent, remaining, 1.0, Some(5));
        p.observe(&obs, &policy, sent + secs(0.02), 0.0);
    };
    // Window after window, the last request before an edge and the first after it come closer
    // to it: where the count starts again narrows the edge down.
    for k in 0..9 {
        let near = 0.4 / f64::from(k + 1);
        see(&mut p, edge(k) + secs(near / 2.0), 4);
        see(&mut p, edge(k + 1) - secs(near), 3);
    }
    // Known now: the next window's first answer lifts the policy's 5/s cap (5 per window, not
    // per second), and its turns go at the host's own pace early in the window, so that the
    // turn that spends it leaves the next window room.
    let first = edge(9) + secs(0.01);
    see(&mut p, first, 4);
    let now = first + secs(0.02);
    let rate = p.effective_rate(now);
    assert!(rate > 5.0 && rate <= 10.0, "{rate}");
    // Late in the window with one turn left: it waits for the edge (and counts in the next
    // window) rather than close the next one for most of a second.
    see(&mut p, edge(9) + secs(0.2), 3);
    see(&mut p, edge(9) + secs(0.4), 2);
    let late = edge(9) + secs(0.65);
    see(&mut p, late - secs(0.02), 1);
    let at = p.ready_at(late);
    assert!(
        at >= edge(10) && at <= edge(10) + secs(0.1),
        "{:?}",
        at - edge(10)
    );
    assert!(p.try_take(at, 0.0, 0.0));
}

#[test]
fn a_learned_limit_that_held_creeps_up_by_learned_margin_per_probe_at_most() {
    // At most 7/s: no probe goes twice past the limit (that would be a rise).
    let t0 = Instant::now();
    let policy = {
        let mut p = learned(7.0);
        p.adaptive.max_rate = 7.0;
        p
    };
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    p.observe(&throttled(t0, 1.0), &policy, t0, 0.0);
    // The first cut's guess (7 × 0.5) is rough: the next probe's 429 moves the limit to what
    // the server served in the second before it, learned_margin under it.
    let now = healthy_until(&mut p, &policy, t0, (1.0, 61.0, 0.2));
    p.observe(&throttled(now, 1.0), &policy, now, 0.0);
    let margin = 1.0 - policy.adaptive.learned_margin;
    let limit = p.rate() / 0.95;
    assert!(limit > 3.5 && limit <= 5.0 * margin + 1e-6, "{limit}");
    // That limit held a whole approach: the next probe's 429 moves it up by learned_margin at
    // most, however much more the server served lately.
    let later = healthy_until(&mut p, &policy, t0, (62.0, 122.0, 0.15));
    p.observe(&throttled(later, 1.0), &policy, later, 0.0);
    let crept = p.rate() / 0.95;
    assert!(
        crept > limit && crept <= limit * (2.0 - margin) + 1e-6,
        "{crept} after {limit}"
    );
}

#[test]
fn outside_its_visit_time_a_host_is_closed_until_the_window_opens() {
    use crate::pacing::robots_pacing::VisitWindow;
    let t0 = Instant::now();
    let policy = HostPolicy::default();
    let mut p = Pacing::new(&policy, t0, UNIX_EPOCH);
    // 05:00 UTC on some day; robots.txt welcomes crawlers 06:00 to 08:45.
    let five = UNIX_EPOCH + secs(20_000.0 * 86_400.0 + 5.0 * 3600.0);
    p.set_robots_visit(VisitWindow::parse("0600-0845"), t0, five);
    let closed = p.block(t0).unwrap();
    assert_eq!(closed.cause, CooldownCause::VisitTime);
    assert_eq!(closed.until, t0 + secs(3600.0));
    assert_eq!(p.ready_at(t0), t0 + secs(3600.0));
    assert_eq!(p.next_turn(t0).1, WaitReason::VisitTime);
    // Inside the window the host is open; at 08:45 it closes until the next morning.
    assert!(p.block(t0 + secs(3600.0)).is_none());
    let evening = t0 + secs(3.75 * 3600.0);
    assert_eq!(
        p.block(evening).unwrap().until,
        evening + secs(21.25 * 3600.0)
    );
    // A longer cooldown wins; the limit lifted, the host opens.
    p.operator_pause(t0 + secs(7200.0));
    assert_eq!(p.block(t0).unwrap().cause, CooldownCause::Operator);
    p.operator_resume();
    p.set_robots_visit(None, t0, five);
    assert!(p.block(t0).is_none());
    assert_eq!(p.robots_visit(), None);
}
