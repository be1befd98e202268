//! The ceiling on all hosts together (`[proxy] global_rate`, `global_burst`): one token bucket over
//! this instance's egress, on top of every host's budget, and a FIFO of the hosts waiting for its
//! tokens, served by one pacer task that sleeps until each token (never a poll) and ends when no
//! host waits.
//!
//! The byte ceiling (`[proxy] global_bytes_per_second`) is [`Downlink`]: a byte budget that
//! every response is charged to, whose debt holds every host's next turn.
//!
//! A host asks for a token only when it could otherwise send at once, so a token is never held by
//! a host that waits for something else; a token that was not used after all goes back.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tokio::time::{sleep_until, Instant};

use crate::pacing::policy::{Bucket, ByteBudget};
use crate::util::locks::lock;

/// The global ceiling's bucket and the hosts waiting for it.
#[derive(Debug)]
pub(crate) struct Egress {
    state: Mutex<EgressState>,
}

#[derive(Debug)]
struct EgressState {
    bucket: Bucket,
    waiting: VecDeque<oneshot::Sender<EgressToken>>,
    pacer_running: bool,
}

/// One token of the global ceiling: spent by [`EgressToken::spend`], given back if dropped unspent.
#[derive(Debug)]
pub(crate) struct EgressToken {
    egress: Option<Arc<Egress>>,
}

impl EgressToken {
    /// The request leaves: the token is gone for good.
    pub(crate) fn spend(mut self) {
        self.egress = None;
    }
}

impl Drop for EgressToken {
    fn drop(&mut self) {
        if let Some(egress) = self.egress.take() {
            lock(&egress.state).bucket.refund(Instant::now());
        }
    }
}

impl Egress {
    /// A ceiling of `rate` requests per second with `burst` back to back.
    pub(crate) fn new(rate: f64, burst: u32) -> Arc<Egress> {
        Arc::new(Egress {
            state: Mutex::new(EgressState {
                bucket: Bucket::new(rate, burst, Instant::now()),
                waiting: VecDeque::new(),
                pacer_running: false,
            }),
        })
    }

    /// Changes the ceiling (a reload).
    pub(crate) fn set(&self, rate: f64, burst: u32) {
        let now = Instant::now();
        let mut state = lock(&self.state);
        state.bucket.set_rate(rate, now);
        state.bucket.set_burst(burst, now);
    }

    /// A token now, if one is free and no host is waiting ahead (FIFO across hosts).
    pub(crate) fn try_take(self: &Arc<Self>, now: Instant) -> Option<EgressToken> {
        let mut state = lock(&self.state);
        if !state.waiting.is_empty() || !state.bucket.try_take(now, 0.0, 0.0) {
            return None;
        }
        Some(EgressToken {
            egress: Some(self.clone()),
        })
    }

    /// Joins the line for a token; it comes through the receiver, in order.
    pub(crate) fn wait(self: &Arc<Self>) -> oneshot::Receiver<EgressToken> {
        let (tx, rx) = oneshot::channel();
        let mut state = lock(&self.state);
        state.waiting.push_back(tx);
        if !state.pacer_running {
            state.pacer_running = true;
            tokio::spawn(pace(self.clone()));
        }
        rx
    }
}

/// Hands out tokens to the waiting hosts in order, sleeping until each one.
async fn pace(egress: Arc<Egress>) {
    loop {
        let now = Instant::now();
        let (next, wake_at) = {
            let mut state = lock(&egress.state);
            while state.waiting.front().is_some_and(|w| w.is_closed()) {
                state.waiting.pop_front();
            }
            if state.waiting.is_empty() {
                state.pacer_running = false;
                return;
            }
            let ready = state.bucket.ready_at(now);
            if ready <= now && state.bucket.try_take(now, 0.0, 0.0) {
                (state.waiting.pop_front(), None)
            } else {
                (None, Some(ready.max(now)))
            }
        };
        if let Some(waiter) = next {
            let token = EgressToken {
                egress: Some(egress.clone()),
            };
            // A host that left the line meanwhile hands the token back (its drop refunds it,
            // outside the lock).
            drop(waiter.send(token));
        }
        if let Some(at) = wake_at {
            sleep_until(at).await;
        }
    }
}

/// The ceiling on response bytes from all hosts together (`[proxy] global_bytes_per_second`):
/// one byte budget every response is charged to as it streams. While it is in debt, no host's
/// next turn starts (each dispatcher sleeps until the debt is paid, then looks again); nothing is
/// slowed while it streams.
#[derive(Debug)]
pub(crate) struct Downlink {
    budget: Mutex<ByteBudget>,
}

impl Downlink {
    /// A ceiling of `rate` bytes per second, saving up one second's worth.
    pub(crate) fn new(rate: u64) -> Arc<Downlink> {
        Arc::new(Downlink {
            budget: Mutex::new(ByteBudget::new(rate, rate, Instant::now())),
        })
    }

    /// Changes the ceiling (a reload); a debt is kept.
    pub(crate) fn set(&self, rate: u64) {
        lock(&self.budget).set(rate, rate, Instant::now());
    }

    /// Charges `bytes` that went by at `now`.
    pub(crate) fn charge(&self, bytes: u64, now: Instant) {
        lock(&self.budget).charge(bytes, now);
    }

    /// When the next turn of any host may start: `now` without a debt.
    pub(crate) fn ready_at(&self, now: Instant) -> Instant {
        lock(&self.budget).ready_at(now)
    }

    /// The debt at `now` in bytes, and the ceiling in bytes per second.
    pub(crate) fn debt(&self, now: Instant) -> (u64, u64) {
        let mut budget = lock(&self.budget);
        (budget.debt(now), budget.rate())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn tokens_go_in_line_at_the_ceiling_and_unspent_ones_come_back() {
        let egress = Egress::new(10.0, 2);
        let start = Instant::now();
        let a = egress.try_take(start).expect("the burst");
        let b = egress.try_take(start).expect("the burst");
        assert!(egress.try_take(start).is_none());
        a.spend();
        b.spend();
        // Three hosts line up; they get their tokens 100 ms apart, in order.
        let lines: Vec<_> = (0..3).map(|_| egress.wait()).collect();
        let mut at = Vec::new();
        for rx in lines {
            let token = rx.await.unwrap();
            at.push(Instant::now().duration_since(start));
            token.spend();
        }
        assert_eq!(
            at,
            [100, 200, 300].map(Duration::from_millis).to_vec(),
            "one every 100 ms, in line order"
        );
        // Nobody waits: a token is free 100 ms later; an unspent one comes back at once.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t = egress.try_take(Instant::now()).expect("a token");
        drop(t);
        assert!(
            egress.try_take(Instant::now()).is_some(),
            "the token came back"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_ahead_in_line_is_never_overtaken() {
        let egress = Egress::new(1.0, 2);
        egress.try_take(Instant::now()).unwrap().spend();
        // One token is left, but a host is in line: a newcomer does not jump it.
        let first = egress.wait();
        assert!(egress.try_take(Instant::now()).is_none());
        let started = Instant::now();
        assert!(first.await.is_ok());
        assert_eq!(
            Instant::now(),
            started,
            "the one in line gets the free token at once"
        );
    }
}
