//! The AutoThrottle baseline (simulation only): Scrapy's rule for the delay between requests,
//! learned from latency alone. Each answer's latency over the target concurrency is a target
//! delay; the delay moves halfway towards it, never below it; an answer that is not a 200 may
//! lengthen the delay but never shorten it. Bounded by a minimum delay and 60 s.

/// Scrapy's default `AUTOTHROTTLE_TARGET_CONCURRENCY`.
const TARGET_CONCURRENCY: f64 = 1.0;
/// Scrapy's default `AUTOTHROTTLE_MAX_DELAY`.
const MAX_DELAY: f64 = 60.0;

/// The delay AutoThrottle keeps for one site.
#[derive(Debug, Clone, Copy)]
pub(super) struct AutoThrottle {
    delay: f64,
    min_delay: f64,
}

impl AutoThrottle {
    /// Starting at `delay` seconds between requests, never below `min_delay`.
    pub(super) fn new(delay: f64, min_delay: f64) -> Self {
        AutoThrottle { delay, min_delay }
    }

    /// Requests per second the delay allows.
    pub(super) fn rate(&self) -> f64 {
        1.0 / self.delay
    }

    /// Moves the delay after an answer with `status` that took `latency` seconds.
    pub(super) fn observe(&mut self, status: u16, latency: f64) {
        let target = latency / TARGET_CONCURRENCY;
        let next = ((self.delay + target) / 2.0)
            .max(target)
            .clamp(self.min_delay, MAX_DELAY);
        if status != 200 && next <= self.delay {
            return;
        }
        self.delay = next;
    }
}
