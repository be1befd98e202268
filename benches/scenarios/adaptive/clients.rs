//! The clients of scenario 7: polite crawlers (one request at a time, each sleeping a 429's
//! `Retry-After`, as the seed article's crawler), and AutoThrottle's delay for the runs that
//! pace in the clients.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::header::RETRY_AFTER;

use crate::common::client::Client;
use crate::load::tokio_at;

/// AutoThrottle's delay, shared by the clients of one run (Scrapy keeps one per site): each
/// answer's latency is a target delay, the delay moves halfway to it and never below it; an
/// answer that is not a 200 never shortens it. Between 0.1 s and 60 s.
pub struct Throttle {
    pub delay: f64,
    pub next: Instant,
}

impl Throttle {
    /// The instant the next request may go, taking it.
    fn slot(&mut self) -> Instant {
        let at = self.next.max(Instant::now());
        self.next = at + Duration::from_secs_f64(self.delay);
        at
    }

    fn observe(&mut self, status: u16, latency: f64) {
        let next = ((self.delay + latency) / 2.0).max(latency).clamp(0.1, 60.0);
        if status == 200 || next > self.delay {
            self.delay = next;
        }
    }
}

/// A polite client: one request at a time until `deadline` (at most 5000), sleeping a 429's
/// `Retry-After`; with `throttle`, each request waits for its AutoThrottle slot first.
pub async fn polite(
    courtesy: std::net::SocketAddr,
    url: String,
    host: String,
    deadline: Instant,
    throttle: Option<Arc<Mutex<Throttle>>>,
) {
    let Ok(mut client) = Client::connect(courtesy).await else {
        return;
    };
    for _ in 0..5000 {
        if Instant::now() >= deadline {
            return;
        }
        if let Some(t) = &throttle {
            let slot = t.lock().unwrap_or_else(|p| p.into_inner()).slot();
            tokio::time::sleep_until(tokio_at(slot.min(deadline))).await;
        }
        let sent = Instant::now();
        let got = tokio::time::timeout_at(tokio_at(deadline), client.get_with_headers(&url, &host));
        let Ok(Ok((status, headers, _))) = got.await else {
            return;
        };
        if let Some(t) = &throttle {
            let latency = sent.elapsed().as_secs_f64();
            t.lock()
                .unwrap_or_else(|p| p.into_inner())
                .observe(status, latency);
        }
        if status == 429 || status == 503 {
            let wait = headers
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(1);
            let until = (Instant::now() + Duration::from_secs(wait.min(600))).min(deadline);
            tokio::time::sleep_until(tokio_at(until)).await;
        }
    }
}
