//! The token bucket and the in-flight count: the arithmetic of one host's budget.
//!
//! Pure functions of an explicit `now` and, for jitter, an explicit random sample. How the rate moves
//! (adaptation, cooldowns) is the parent module's; waiting is `crate::budget::limiter`'s.

use std::time::Duration;

use tokio::time::Instant;

/// Slack for floating-point error when asking whether a whole token is there.
const EPSILON: f64 = 1e-9;

/// A token bucket with the seed article's semantics: it starts full with `burst` tokens, refills at
/// `rate` tokens per second up to `burst`, and each request takes one whole token.
///
/// Jitter never lets a request leave earlier than the bucket allows: it only stretches a wait for a
/// token by a random extra of up to `jitter / rate`, so `rate` stays a ceiling (invariant 1, Rate).
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    updated: Instant,
    /// Set at a take that left less than one token: the next token may not be used before this
    /// instant, which is when it arrives plus a random extra. Only ever delays.
    jitter_until: Option<Instant>,
}

impl Bucket {
    /// A full bucket. `rate` must be > 0 and `burst` ≥ 1 (the config guarantees both).
    pub(crate) fn new(rate: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Bucket {
            rate: rate.max(f64::MIN_POSITIVE),
            burst,
            tokens: burst,
            updated: now,
            jitter_until: None,
        }
    }

    /// Tokens per second currently in effect.
    pub(crate) fn rate(&self) -> f64 {
        self.rate
    }

    /// Tokens available at `now` (fractional).
    pub(crate) fn tokens(&mut self, now: Instant) -> f64 {
        self.refill(now);
        self.tokens
    }

    /// Whether the bucket is full at `now`, that is, indistinguishable from a fresh one.
    pub(crate) fn is_full(&mut self, now: Instant) -> bool {
        self.tokens(now) >= self.burst
    }

    /// Changes the rate from `now` on. Tokens earned so far at the old rate are kept.
    pub(crate) fn set_rate(&mut self, rate: f64, now: Instant) {
        self.refill(now);
        self.rate = rate.max(f64::MIN_POSITIVE);
    }

    /// Changes the burst from `now` on; tokens above the new burst are dropped.
    pub(crate) fn set_burst(&mut self, burst: u32, now: Instant) {
        self.refill(now);
        self.burst = f64::from(burst.max(1));
        self.tokens = self.tokens.min(self.burst);
    }

    fn refill(&mut self, now: Instant) {
        if now > self.updated {
            let earned = now.duration_since(self.updated).as_secs_f64() * self.rate;
            self.tokens = (self.tokens + earned).min(self.burst);
            self.updated = now;
        }
    }

    /// The earliest instant at which a request may take a token, `now` if one is available.
    pub(crate) fn ready_at(&mut self, now: Instant) -> Instant {
        self.refill(now);
        let token_at = if self.tokens >= 1.0 - EPSILON {
            now
        } else {
            now + self.time_for(1.0 - self.tokens)
        };
        match self.jitter_until {
            Some(until) if until > token_at => until,
            _ => token_at,
        }
    }

    /// Time to earn `tokens`, rounded up to whole microseconds so that waking at the end of it always
    /// finds them earned.
    fn time_for(&self, tokens: f64) -> Duration {
        Duration::from_micros((tokens / self.rate * 1e6).ceil().min(1e15) as u64)
    }

    /// Takes one token at `now` if one is available. `jitter` is the configured jitter (0..=1) and
    /// `sample` a uniform random number in [0, 1) that sets the extra wait of the next request.
    pub(crate) fn try_take(&mut self, now: Instant, jitter: f64, sample: f64) -> bool {
        if self.ready_at(now) > now {
            return false;
        }
        self.tokens -= 1.0;
        let extra = jitter.clamp(0.0, 1.0) * sample.clamp(0.0, 1.0) / self.rate;
        self.jitter_until = (extra > 0.0 && self.tokens < 1.0 - EPSILON).then(|| {
            now + self.time_for(1.0 - self.tokens) + Duration::from_secs_f64(extra.min(3600.0))
        });
        true
    }

    /// Drops tokens above `max` (at most one request may leave right after a cooldown).
    pub(crate) fn clamp_tokens(&mut self, max: f64, now: Instant) {
        self.refill(now);
        self.tokens = self.tokens.min(max);
    }

    /// Gives back a token taken at an earlier instant for a request that was never sent.
    /// Refunding can only leave the bucket at or below where it would be had the take not happened.
    pub(crate) fn refund(&mut self, now: Instant) {
        self.refill(now);
        self.tokens = (self.tokens + 1.0).min(self.burst);
    }
}

/// Requests in flight to one host against its `concurrency` cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct InFlight {
    /// Requests sent and not yet finished.
    pub current: u32,
}

impl InFlight {
    /// Whether one more request may start under `cap`.
    pub(crate) fn has_room(&self, cap: u32) -> bool {
        self.current < cap
    }

    /// Counts one request out.
    pub(crate) fn start(&mut self) {
        self.current += 1;
    }

    /// Counts one request back in.
    pub(crate) fn finish(&mut self) {
        self.current = self.current.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn a_new_bucket_is_full_and_gives_its_burst_at_once() {
        let t0 = Instant::now();
        let mut b = Bucket::new(2.0, 3, t0);
        assert!(b.try_take(t0, 0.0, 0.0));
        assert!(b.try_take(t0, 0.0, 0.0));
        assert!(b.try_take(t0, 0.0, 0.0));
        assert!(!b.try_take(t0, 0.0, 0.0));
        assert_eq!(b.ready_at(t0), t0 + secs(0.5));
    }

    #[test]
    fn refill_is_linear_and_capped_at_burst() {
        let t0 = Instant::now();
        let mut b = Bucket::new(4.0, 2, t0);
        assert!(b.try_take(t0, 0.0, 0.0));
        assert!(b.try_take(t0, 0.0, 0.0));
        assert!((b.tokens(t0 + secs(0.125)) - 0.5).abs() < 1e-9);
        assert!((b.tokens(t0 + secs(10.0)) - 2.0).abs() < 1e-9);
        assert!(b.is_full(t0 + secs(10.0)));
    }

    #[test]
    fn ready_at_is_exact_and_a_token_is_there_at_that_instant() {
        let t0 = Instant::now();
        let mut b = Bucket::new(3.0, 1, t0);
        assert!(b.try_take(t0, 0.0, 0.0));
        let at = b.ready_at(t0);
        assert!(at >= t0 + secs(1.0 / 3.0));
        assert!(at <= t0 + secs(1.0 / 3.0) + Duration::from_micros(1));
        assert!(!b.try_take(at - Duration::from_micros(2), 0.0, 0.0));
        assert!(b.try_take(at, 0.0, 0.0));
    }

    #[test]
    fn jitter_only_ever_delays() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1.0, 1, t0);
        assert!(b.try_take(t0, 1.0, 0.5));
        // The token is back at 1 s; the drawn jitter adds 0.5 s on top.
        assert_eq!(b.ready_at(t0 + secs(0.2)), t0 + secs(1.0) + secs(0.5));
        assert!(!b.try_take(t0 + secs(1.2), 1.0, 0.0));
        assert!(b.try_take(t0 + secs(1.5), 1.0, 0.0));
        // With no jitter drawn, spacing is exactly 1/rate again.
        assert_eq!(b.ready_at(t0 + secs(1.5)), t0 + secs(2.5));
    }

    #[test]
    fn jitter_does_not_hold_back_a_request_when_a_token_is_available() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1.0, 2, t0);
        assert!(b.try_take(t0, 1.0, 0.9));
        assert!(b.try_take(t0, 1.0, 0.9));
    }

    #[test]
    fn refund_never_exceeds_burst() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1.0, 2, t0);
        assert!(b.try_take(t0, 0.0, 0.0));
        b.refund(t0 + secs(5.0));
        assert!((b.tokens(t0 + secs(5.0)) - 2.0).abs() < 1e-9);
        assert!(b.try_take(t0 + secs(5.0), 0.0, 0.0));
        b.refund(t0 + secs(5.0));
        assert!((b.tokens(t0 + secs(5.0)) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn rate_changes_keep_earned_tokens() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1.0, 1, t0);
        assert!(b.try_take(t0, 0.0, 0.0));
        b.set_rate(2.0, t0 + secs(0.5)); // half a token earned at the old rate
        assert_eq!(b.ready_at(t0 + secs(0.5)), t0 + secs(0.75));
        assert_eq!(b.rate(), 2.0);
    }

    #[test]
    fn in_flight_counts_against_the_cap() {
        let mut f = InFlight::default();
        assert!(f.has_room(2));
        f.start();
        f.start();
        assert!(!f.has_room(2));
        f.finish();
        assert!(f.has_room(2));
        f.finish();
        f.finish();
        assert_eq!(f.current, 0);
    }

    mod invariant_rate {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Invariant 1: for any arrival pattern and any window T, the takes that succeed in the
            /// window are at most burst + rate × T.
            #[test]
            fn takes_in_any_window_fit_the_budget(
                rate in 0.1f64..50.0,
                burst in 1u32..6,
                jitter in 0.0f64..1.0,
                gaps_ms in proptest::collection::vec(0u64..700, 1..300),
                samples in proptest::collection::vec(0.0f64..1.0, 300),
            ) {
                let t0 = Instant::now();
                let mut b = Bucket::new(rate, burst, t0);
                let mut now = t0;
                let mut sent: Vec<Instant> = Vec::new();
                // Each arrival retries at ready_at until it gets a token, like a queued request.
                for (i, gap) in gaps_ms.iter().enumerate() {
                    now = now.max(now + Duration::from_millis(*gap));
                    loop {
                        let at = b.ready_at(now);
                        now = now.max(at);
                        if b.try_take(now, jitter, samples[i % samples.len()]) {
                            sent.push(now);
                            break;
                        }
                    }
                }
                for (i, start) in sent.iter().enumerate() {
                    for (j, end) in sent.iter().enumerate().skip(i) {
                        let window = end.duration_since(*start).as_secs_f64();
                        let count = (j - i + 1) as f64;
                        prop_assert!(
                            count <= f64::from(burst) + rate * window + 1e-6,
                            "{} sends in {:.6}s at rate {} burst {}", count, window, rate, burst
                        );
                    }
                }
            }
        }
    }
}
