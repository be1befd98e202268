//! The dispatcher: while a host's queue is not empty, one task hands out its turns in FIFO order.
//! It looks at the head of the queue, asks the budget for a turn, and otherwise sleeps until the
//! token's instant, a free host slot or a free global slot; never a poll.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use super::ahead::Keep;
use super::budget::{Kept, NotNow, Turn};
use super::host::{DispatcherDone, Host};
use super::permit::{hand_to_head, Paced, Permit};
use super::shared::{settle_ahead, take_shared_turn};
use super::Limiter;

/// How long before a token's instant the dispatcher hands over from tokio's millisecond timer to an
/// OS sleep with nanosecond resolution: tokio wakes up to about 1.5 ms late, and the OS sleep should
/// get the last stretch.
const FINE_MARGIN: Duration = Duration::from_millis(2);

impl Limiter {
    /// Sleeps until `at`, never returning before it.
    ///
    /// tokio's timer counts whole milliseconds and wakes about 1 ms after the deadline. With
    /// `burst = 1` a late turn can never be made up (the bucket is full, the token that would have
    /// accrued meanwhile is lost), so at 20/s that lateness alone is 2 % below the budget. So tokio's
    /// timer covers all but the last [`FINE_MARGIN`], and a blocking-pool thread sleeps the rest
    /// with the OS's nanosecond timer (Linux keeps it within its 50 µs timer slack). Waiting still
    /// costs no CPU. tokio does not auto-advance a paused test clock while a blocking task runs, and
    /// the final check on tokio's clock lets the paused clock do the last stretch exactly.
    /// Without `fine` (slow hosts, see [`FINE_MIN_RATE`]), tokio's timer does it all.
    pub(super) async fn sleep_until(&self, at: Instant, fine: bool) {
        if !(fine && self.fine_waits) {
            return sleep_until(at).await;
        }
        if let Some(coarse) = at.checked_sub(FINE_MARGIN) {
            if coarse > Instant::now() {
                sleep_until(coarse).await;
            }
        }
        let rest = at.saturating_duration_since(Instant::now());
        if !rest.is_zero() {
            // A JoinError means the runtime is shutting down; the check below still holds.
            let _ = tokio::task::spawn_blocking(move || std::thread::sleep(rest)).await;
        }
        if Instant::now() < at {
            sleep_until(at).await;
        }
    }
}

/// What the dispatcher does next after one look at the host: its own states, or what the budget's
/// answer says to wait for ([`NotNow`], matched on as it is).
enum Next {
    /// The queue is empty: the task ends (giving up this instance's place in the host's waiting
    /// list in the shared store, if it held one).
    Exit(DispatcherDone),
    /// Look again at once (a turn was given).
    Again,
    /// Not now: wait for what the budget said (and keep what it kept).
    Wait(NotNow),
    /// The queue is empty but an allowance is held: wait until this instant or a wake-up.
    KeepAhead(Instant),
    /// The queue is empty: give the allowance back to the store (or refresh the slots kept).
    SettleAhead,
}

/// Hands out turns for one host in FIFO order while its queue is not empty.
pub(super) async fn dispatch(limiter: Arc<Limiter>, host: Arc<Host>) {
    let mut kept = Kept::default();
    loop {
        let mut unsent: Option<Permit> = None;
        let next = {
            let mut state = host.lock();
            let now = Instant::now();
            state.drop_gone_fronts();
            let keep = match limiter.budget.store() {
                Some(store) if state.queue().is_empty() && !store.in_fallback() => {
                    state.shared().map_or(Keep::Nothing, |t| {
                        let closing = limiter.shutting_down.load(Ordering::Acquire);
                        t.ahead.keep(now, store.settings().lease, closing)
                    })
                }
                _ => Keep::Nothing,
            };
            if keep != Keep::Nothing {
                match keep {
                    Keep::Until(at) => Next::KeepAhead(at),
                    _ => Next::SettleAhead,
                }
            } else if let Some(done) = state.dispatcher_done() {
                Next::Exit(done)
            } else {
                let ceilings = (limiter.egress.as_ref(), limiter.downlink.as_ref());
                let turn = limiter.budget.take_turn(
                    &mut state,
                    &limiter.global,
                    ceilings,
                    std::mem::take(&mut kept),
                    now,
                );
                match turn {
                    Turn::Go { slot } => {
                        let permit =
                            Permit::new(host.clone(), &limiter, Some(slot), Paced::Limited);
                        unsent = hand_to_head(&mut state, permit, now);
                        Next::Again
                    }
                    Turn::GoAhead { slot, generation } => {
                        let permit =
                            Permit::new(host.clone(), &limiter, Some(slot), Paced::Limited)
                                .with_ahead(generation);
                        unsent = hand_to_head(&mut state, permit, now);
                        Next::Again
                    }
                    Turn::NotNow(not_now) => {
                        // What the front waits for from now on (`waits.rs`); a turn given needs
                        // no note.
                        if let Some(front) = state.queue().front().map(|w| w.id) {
                            state.front_waits(front, not_now.reason(), now);
                        }
                        Next::Wait(not_now)
                    }
                }
            }
        };
        drop(unsent);
        match next {
            Next::Exit(DispatcherDone { leave_waiting_list }) => {
                if let (true, Some(store)) = (leave_waiting_list, limiter.budget.store()) {
                    let store = store.clone();
                    let key = host.key.clone();
                    tokio::spawn(async move { store.withdraw(&key).await });
                }
                return;
            }
            Next::Again => {}
            Next::KeepAhead(at) => {
                tokio::select! {
                    _ = sleep_until(at) => {}
                    _ = host.wake.notified() => {}
                }
            }
            Next::SettleAhead => {
                if let Some(store) = limiter.budget.store() {
                    settle_ahead(&host, store).await;
                }
            }
            Next::Wait(NotNow::AskStore {
                slot,
                egress,
                limits,
            }) => {
                if let Some(store) = limiter.budget.store() {
                    let store = store.clone();
                    take_shared_turn(&limiter, &host, &store, slot, egress, limits).await;
                }
            }
            Next::Wait(NotNow::Held { slot, egress }) => {
                kept = Kept {
                    slot: Some(slot),
                    egress,
                };
            }
            Next::Wait(NotNow::NotBefore { at, precise, .. }) => {
                kept = Kept::default();
                tokio::select! {
                    _ = limiter.sleep_until(at, precise) => {}
                    _ = host.wake.notified() => {}
                }
            }
            Next::Wait(NotNow::NoHostSlot) => {
                kept = Kept::default();
                host.wake.notified().await;
            }
            Next::Wait(NotNow::NoGlobalSlot { egress }) => {
                kept.egress = egress;
                tokio::select! {
                    slot = limiter.global.clone().acquire_owned() => {
                        kept.slot = slot.ok();
                    }
                    _ = host.wake.notified() => {}
                }
            }
            Next::Wait(NotNow::NoEgressToken) => {
                if let Some(egress) = &limiter.egress {
                    let line = egress.wait();
                    tokio::select! {
                        token = line => kept.egress = token.ok(),
                        _ = host.wake.notified() => {}
                    }
                }
            }
        }
    }
}
