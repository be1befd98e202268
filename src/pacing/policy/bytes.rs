//! The byte budget (`max_bytes_per_second`, `[proxy] global_bytes_per_second`): a bucket of
//! bytes that response bodies are charged to as they stream, and that may go into debt.
//!
//! A response is never slowed: its bytes are charged after they went by, however many they are,
//! and the balance may fall below zero. While it is below zero the budget's next turn waits, until
//! the refill at `rate` bytes per second has paid the debt back. So a 1 MiB body at 256 KiB/s
//! puts the next turn about 4 s after it. An idle budget saves up at most `burst` bytes of credit.
//!
//! Pure: every method takes `now`, so the arithmetic is a unit test on explicit instants.

use std::time::Duration;

use tokio::time::Instant;

/// A byte bucket that starts full with `burst` bytes, refills at `rate` bytes per second up to
/// `burst`, and is charged every byte a response brought, down into debt if need be.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ByteBudget {
    /// Bytes per second.
    rate: f64,
    /// The most credit an idle budget saves up, in bytes.
    burst: f64,
    /// Rate and burst as configured, before this instance's share of a shared budget.
    whole: (u64, u64),
    /// Credit in bytes at `updated`; negative is a debt.
    balance: f64,
    updated: Instant,
    /// The longest a debt may hold the next turn (`None`: no limit). A server's byte quota
    /// (`server_caps.rs`) is held to `max_retry_after`, as every wait a server asks for is.
    max_wait: Option<Duration>,
}

impl ByteBudget {
    /// A full budget of `rate` bytes per second (at least 1) saving up to `burst` bytes.
    pub(crate) fn new(rate: u64, burst: u64, now: Instant) -> Self {
        let whole = (rate, burst);
        let burst = burst as f64;
        ByteBudget {
            rate: (rate.max(1)) as f64,
            burst,
            whole,
            balance: burst,
            updated: now,
            max_wait: None,
        }
    }

    /// The same budget, its debt never holding the next turn longer than `max_wait`.
    pub(crate) fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// The burst of a budget whose file gave none: one second's worth.
    pub(crate) fn default_burst(rate: u64, burst: Option<u64>) -> u64 {
        burst.unwrap_or(rate)
    }

    /// Bytes per second.
    pub(crate) fn rate(&self) -> u64 {
        self.rate as u64
    }

    /// Changes rate and burst from `now` on (a reload); credit above the new burst is dropped, a
    /// debt is kept.
    pub(crate) fn set(&mut self, rate: u64, burst: u64, now: Instant) {
        self.whole = (rate, burst);
        self.set_in_force(rate, burst, now);
    }

    /// Keeps `share` of the configured rate and burst from `now` on (a shared budget's
    /// instance in fallback; `1.0`: all of it), a debt kept.
    pub(crate) fn share(&mut self, share: f64, now: Instant) {
        let (rate, burst) = self.whole;
        let part = |whole: u64| ((whole as f64) * share).floor() as u64;
        self.set_in_force(part(rate).max(1), part(burst), now);
    }

    fn set_in_force(&mut self, rate: u64, burst: u64, now: Instant) {
        self.refill(now);
        self.rate = rate.max(1) as f64;
        self.burst = burst as f64;
        self.balance = self.balance.min(self.burst);
    }

    fn refill(&mut self, now: Instant) {
        if now > self.updated {
            let earned = now.duration_since(self.updated).as_secs_f64() * self.rate;
            self.balance = (self.balance + earned).min(self.burst);
            self.updated = now;
        }
    }

    /// Charges `bytes` that went by at `now` (never refused: the balance may go into debt).
    pub(crate) fn charge(&mut self, bytes: u64, now: Instant) {
        self.refill(now);
        self.balance -= bytes as f64;
        if let Some(wait) = self.max_wait {
            self.balance = self.balance.max(-wait.as_secs_f64() * self.rate);
        }
    }

    /// The debt at `now` in bytes (0: none).
    pub(crate) fn debt(&mut self, now: Instant) -> u64 {
        self.refill(now);
        (-self.balance).max(0.0).ceil() as u64
    }

    /// The earliest instant the next turn may start: `now` without a debt, else when the refill
    /// has paid it back (rounded up to whole microseconds, so that waking then finds it paid).
    pub(crate) fn ready_at(&mut self, now: Instant) -> Instant {
        self.refill(now);
        if self.balance >= 0.0 {
            return now;
        }
        let secs = -self.balance / self.rate;
        now + Duration::from_micros((secs * 1e6).ceil().min(1e15) as u64)
    }

    /// Whether the budget is full at `now` (indistinguishable from a fresh one).
    pub(crate) fn is_full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.balance >= self.burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// `a` and `b` within a millisecond (floating-point refills round to whole microseconds).
    fn near(a: Instant, b: Instant) -> bool {
        let gap = if a > b { a - b } else { b - a };
        gap <= ms(1)
    }

    #[test]
    fn an_instance_in_fallback_keeps_its_share_of_the_bytes() {
        let t0 = Instant::now();
        let mut b = ByteBudget::new(256 * KIB, 64 * KIB, t0);
        b.share(0.25, t0);
        assert_eq!(b.rate(), 64 * KIB);
        assert!(b.is_full(t0), "credit within the new burst of 16 KiB");
        b.charge(64 * KIB + 16 * KIB, t0);
        assert_eq!(b.ready_at(t0), t0 + ms(1000), "64 KiB of debt at 64 KiB/s");
        b.share(1.0, t0);
        assert_eq!(b.rate(), 256 * KIB);
        assert_eq!(
            b.ready_at(t0),
            t0 + ms(250),
            "the debt kept, paid at the whole rate"
        );
    }

    #[test]
    fn a_mebibyte_at_256_kib_per_second_is_paid_back_in_four_seconds() {
        let t0 = Instant::now();
        let mut b = ByteBudget::new(256 * KIB, 0, t0);
        assert_eq!(b.ready_at(t0), t0, "a fresh budget has no debt");
        b.charge(1024 * KIB, t0);
        assert_eq!(b.debt(t0), 1024 * KIB);
        assert_eq!(b.ready_at(t0), t0 + ms(4000));
        // Half-way, half the debt is paid; the instant it is paid does not move.
        assert_eq!(b.debt(t0 + ms(2000)), 512 * KIB);
        assert_eq!(b.ready_at(t0 + ms(2000)), t0 + ms(4000));
        assert_eq!(b.ready_at(t0 + ms(4000)), t0 + ms(4000));
        assert_eq!(b.debt(t0 + ms(4000)), 0);
    }

    #[test]
    fn bytes_charged_as_they_stream_add_up_to_the_same_debt() {
        let t0 = Instant::now();
        let mut b = ByteBudget::new(256 * KIB, 0, t0);
        // 1 MiB in 16 charges of 64 KiB over one second: the refill meanwhile pays 256 KiB.
        for i in 0..16 {
            b.charge(64 * KIB, t0 + ms(i * 1000 / 15));
        }
        let end = t0 + ms(1000);
        assert!(b.debt(end).abs_diff(768 * KIB) <= 1);
        assert!(
            near(b.ready_at(end), t0 + ms(4000)),
            "4 s after the first byte"
        );
    }

    #[test]
    fn an_idle_budget_saves_up_its_burst_and_no_more() {
        let t0 = Instant::now();
        let mut b = ByteBudget::new(100 * KIB, 200 * KIB, t0);
        assert!(b.is_full(t0));
        b.charge(150 * KIB, t0);
        assert_eq!(b.ready_at(t0), t0, "within the burst: no debt");
        b.charge(150 * KIB, t0);
        assert_eq!(b.debt(t0), 100 * KIB);
        assert_eq!(b.ready_at(t0), t0 + ms(1000));
        // A long idle spell saves up the burst, not more.
        let later = t0 + ms(60_000);
        assert!(b.is_full(later));
        b.charge(300 * KIB, later);
        assert_eq!(b.ready_at(later), later + ms(1000));
    }

    #[test]
    fn a_reload_keeps_the_debt_and_pays_it_at_the_new_rate() {
        let t0 = Instant::now();
        let mut b = ByteBudget::new(100 * KIB, 0, t0);
        b.charge(400 * KIB, t0);
        assert_eq!(b.ready_at(t0), t0 + ms(4000));
        b.set(200 * KIB, 50 * KIB, t0 + ms(1000));
        assert_eq!(b.debt(t0 + ms(1000)), 300 * KIB);
        assert_eq!(b.ready_at(t0 + ms(1000)), t0 + ms(2500));
        assert_eq!(b.rate(), 200 * KIB);
    }

    #[test]
    fn a_debt_held_to_a_longest_wait_holds_the_turn_no_longer() {
        let t0 = Instant::now();
        let mut b = ByteBudget::new(KIB, 0, t0).with_max_wait(ms(60_000));
        b.charge(1024 * KIB, t0);
        assert_eq!(b.ready_at(t0), t0 + ms(60_000), "not 1024 s");
        assert_eq!(b.debt(t0), 60 * KIB);
    }

    #[test]
    fn the_default_burst_is_one_second_of_the_rate() {
        assert_eq!(ByteBudget::default_burst(1000, None), 1000);
        assert_eq!(ByteBudget::default_burst(1000, Some(0)), 0);
    }
}
