//! A job's quota: at most `max_requests` per window of `per_seconds`, the window starting with
//! the job's first request after the last one ended (a fixed window, as the RateLimit draft's
//! `RateLimit-Policy: q;w` describes). A request reserves its place before it waits for a turn,
//! spends it when it goes upstream, and gives it back if it never does (refused, gone), so that
//! neither waiting requests nor refused ones can take a job past its quota.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::JobState;
use crate::util::locks::lock;

/// One window of a job's quota.
#[derive(Debug, Default)]
pub(super) struct Window {
    /// When the window began; `None` before the job's first request.
    start: Option<Instant>,
    /// Requests of this window that went upstream.
    used: u64,
    /// Requests holding a place, not yet gone upstream.
    reserved: u64,
}

impl Window {
    /// Starts a new window when the last one is over.
    fn roll(&mut self, per: Duration, now: Instant) {
        match self.start {
            Some(start) if now.saturating_duration_since(start) < per => {}
            _ => {
                self.start = Some(now);
                self.used = 0;
            }
        }
    }

    fn reset_in(&self, per: Duration, now: Instant) -> Duration {
        self.start
            .map_or(per, |s| (s + per).saturating_duration_since(now))
    }
}

/// What is left of a job's quota, for its `RateLimit` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaLeft {
    /// Requests per window (`q`).
    pub max: u64,
    /// The window's length (`w`).
    pub per: Duration,
    /// Requests left in this window (`r`).
    pub remaining: u64,
    /// Until the window ends (`t`).
    pub reset: Duration,
}

impl QuotaLeft {
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers) for the job.
    pub fn headers(&self) -> (String, String) {
        let secs = |d: Duration| d.as_secs() + u64::from(d.subsec_nanos() > 0);
        (
            format!("\"courtesy\";q={};w={}", self.max, secs(self.per)),
            format!("\"courtesy\";r={};t={}", self.remaining, secs(self.reset)),
        )
    }
}

/// A request's place in its job's quota (if the job has one): spent when it goes upstream, given
/// back when dropped unspent. It also counts the job's requests served.
#[derive(Debug)]
pub struct QuotaTicket {
    job: Option<Arc<JobState>>,
    /// A place of the quota is held (the job has a quota).
    reserved: bool,
}

impl QuotaTicket {
    /// A ticket that counts nothing (a report-only host's request past its job's quota).
    pub fn none() -> Self {
        QuotaTicket {
            job: None,
            reserved: false,
        }
    }

    /// A ticket of `job`, which has no quota: it only counts the request when served.
    pub(super) fn unlimited(job: &Arc<JobState>) -> Self {
        QuotaTicket {
            job: Some(job.clone()),
            reserved: false,
        }
    }

    /// The request goes upstream: its place is used, and it counts as served.
    pub fn spend(&mut self) {
        if let Some(job) = self.job.take() {
            if std::mem::take(&mut self.reserved) {
                let mut w = lock(&job.quota);
                w.reserved = w.reserved.saturating_sub(1);
                w.used += 1;
            }
            job.served.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for QuotaTicket {
    fn drop(&mut self) {
        if let (Some(job), true) = (self.job.take(), self.reserved) {
            let mut w = lock(&job.quota);
            w.reserved = w.reserved.saturating_sub(1);
        }
    }
}

/// Reserves a place of `job`'s quota (`max` per `per`), or says when the window frees.
pub(super) fn reserve(
    job: &Arc<JobState>,
    max: u64,
    per: Duration,
    now: Instant,
) -> Result<QuotaTicket, Duration> {
    let mut w = lock(&job.quota);
    w.roll(per, now);
    if w.used + w.reserved >= max {
        return Err(w.reset_in(per, now).max(Duration::from_secs(1)));
    }
    w.reserved += 1;
    Ok(QuotaTicket {
        job: Some(job.clone()),
        reserved: true,
    })
}

/// What is left of `job`'s quota now.
pub(super) fn left(job: &JobState, max: u64, per: Duration, now: Instant) -> QuotaLeft {
    let (used, reset) = {
        let mut w = lock(&job.quota);
        w.roll(per, now);
        (w.used + w.reserved, w.reset_in(per, now))
    };
    QuotaLeft {
        max,
        per,
        remaining: max.saturating_sub(used),
        reset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Arc<JobState> {
        Arc::new(JobState::new("a", true))
    }

    #[test]
    fn a_quota_reserves_spends_gives_back_and_rolls() {
        let job = job();
        let per = Duration::from_secs(60);
        let t0 = Instant::now();
        let mut first = reserve(&job, 2, per, t0).unwrap();
        let second = reserve(&job, 2, per, t0).unwrap();
        // Two places held: the third waits for the window.
        let wait = reserve(&job, 2, per, t0).unwrap_err();
        assert_eq!(wait, per);
        first.spend();
        drop(second); // never went upstream: given back
        let left = left(&job, 2, per, t0 + Duration::from_secs(10));
        assert_eq!((left.remaining, left.reset), (1, Duration::from_secs(50)));
        let _third = reserve(&job, 2, per, t0 + Duration::from_secs(10)).unwrap();
        assert!(reserve(&job, 2, per, t0 + Duration::from_secs(59)).is_err());
        // A new window: the used place is free again (the held one still holds).
        let _fourth = reserve(&job, 2, per, t0 + Duration::from_secs(61)).unwrap();
        assert!(reserve(&job, 2, per, t0 + Duration::from_secs(61)).is_err());
        assert_eq!(job.served.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn headers_say_the_policy_and_what_is_left() {
        let left = QuotaLeft {
            max: 100,
            per: Duration::from_secs(3600),
            remaining: 42,
            reset: Duration::from_millis(1500),
        };
        assert_eq!(
            left.headers(),
            (
                "\"courtesy\";q=100;w=3600".to_string(),
                "\"courtesy\";r=42;t=2".to_string()
            )
        );
    }
}
