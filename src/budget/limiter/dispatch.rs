//! The dispatcher: while a host's queue is not empty, one task hands out its turns in FIFO order.
//! Each round is one look at the host under its lock ([`look`], synchronous: hand a turn to the
//! head of the queue, or say what to wait for) and then the wait it said ([`wait_for`], outside
//! the lock): the token's instant, a free host slot or a free global slot; never a poll.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use super::ahead::Keep;
use super::budget::{Kept, NotNow, Turn};
use super::grant::{Grant, Paced};
use super::host::{DispatcherDone, Host, HostState};
use super::permit::{hand_to_head, Permit};
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
#[derive(Debug)]
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
        let (next, unsent) = look(&limiter, &host, &mut kept);
        // A turn nobody took ends unused, outside the lock (its drop locks).
        drop(unsent);
        if wait_for(&limiter, &host, next, &mut kept).await.is_break() {
            return;
        }
    }
}

/// One look at the host, under its lock: what the dispatcher does next, and a turn it took that
/// nobody waited for any more (to drop after the lock). A turn is handed to the head of the
/// queue here; `kept` (what the last look kept) is spent on asking the budget for one.
fn look(limiter: &Limiter, host: &Arc<Host>, kept: &mut Kept) -> (Next, Option<Permit>) {
    let mut state = host.lock();
    let now = Instant::now();
    state.drop_gone_fronts();
    match keep_ahead(limiter, &state, now) {
        Keep::Nothing => {}
        Keep::Until(at) => return (Next::KeepAhead(at), None),
        _ => return (Next::SettleAhead, None),
    }
    if let Some(done) = state.dispatcher_done() {
        return (Next::Exit(done), None);
    }
    let ceilings = (limiter.egress.as_ref(), limiter.downlink.as_ref());
    let turn = limiter.budget.take_turn(
        &mut state,
        &limiter.global,
        ceilings,
        std::mem::take(kept),
        now,
    );
    let grant = match turn {
        Turn::Go { slot } => Grant::new(Some(slot), Paced::Limited),
        Turn::GoAhead { slot, generation } => {
            Grant::new(Some(slot), Paced::Limited).with_ahead(generation)
        }
        Turn::NotNow(not_now) => {
            // What the front waits for from now on (`waits.rs`); a turn given needs no note.
            if let Some(front) = state.queue().front().map(|w| w.id) {
                state.front_waits(front, not_now.reason(), now);
            }
            return (Next::Wait(not_now), None);
        }
    };
    let unsent = hand_to_head((limiter, host), &mut state, grant, now);
    (Next::Again, unsent)
}

/// What a host's allowance of a shared budget asks of its dispatcher while the queue is empty:
/// to be kept until an instant, settled with the store, or nothing.
fn keep_ahead(limiter: &Limiter, state: &HostState, now: Instant) -> Keep {
    match limiter.budget.store() {
        Some(store) if state.queue().is_empty() && !store.in_fallback() => {
            state.shared().map_or(Keep::Nothing, |t| {
                let closing = limiter.shutting_down.load(Ordering::Acquire);
                t.ahead.keep(now, store.settings().lease, closing)
            })
        }
        _ => Keep::Nothing,
    }
}

/// Waits for what `next` says, outside the host's lock, keeping in `kept` what the wait
/// brings (a global slot, an egress token) for the next look. `Break` when the task ends.
async fn wait_for(
    limiter: &Arc<Limiter>,
    host: &Arc<Host>,
    next: Next,
    kept: &mut Kept,
) -> ControlFlow<()> {
    match next {
        Next::Exit(DispatcherDone { leave_waiting_list }) => {
            if let (true, Some(store)) = (leave_waiting_list, limiter.budget.store()) {
                let store = store.clone();
                let key = host.key.clone();
                tokio::spawn(async move { store.withdraw(&key).await });
            }
            return ControlFlow::Break(());
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
                settle_ahead(host, store).await;
            }
        }
        Next::Wait(not_now) => wait_for_turn(limiter, host, not_now, kept).await,
    }
    ControlFlow::Continue(())
}

/// Waits for what the budget said the next turn waits for ([`NotNow`]).
async fn wait_for_turn(limiter: &Arc<Limiter>, host: &Arc<Host>, not_now: NotNow, kept: &mut Kept) {
    match not_now {
        NotNow::AskStore {
            slot,
            egress,
            limits,
        } => {
            if let Some(store) = limiter.budget.store() {
                let store = store.clone();
                take_shared_turn(limiter, host, &store, slot, egress, limits).await;
            }
        }
        NotNow::Held { slot, egress } => {
            *kept = Kept {
                slot: Some(slot),
                egress,
            };
        }
        NotNow::NotBefore { at, precise, .. } => {
            *kept = Kept::default();
            tokio::select! {
                _ = limiter.sleep_until(at, precise) => {}
                _ = host.wake.notified() => {}
            }
        }
        NotNow::NoHostSlot => {
            *kept = Kept::default();
            host.wake.notified().await;
        }
        NotNow::NoGlobalSlot { egress } => {
            kept.egress = egress;
            tokio::select! {
                slot = limiter.global.clone().acquire_owned() => {
                    kept.slot = slot.ok();
                }
                _ = host.wake.notified() => {}
            }
        }
        NotNow::NoEgressToken => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::keys::BudgetKey;
    use crate::config::{Config, HostPolicy};
    use crate::pacing::policy::WaitReason;

    fn limiter(rate: f64, burst: u32, concurrency: u32) -> Arc<Limiter> {
        let mut policy = HostPolicy::default();
        policy.pacing.rate = rate;
        policy.pacing.burst = burst;
        policy.pacing.concurrency = concurrency;
        let config = Config {
            defaults: Arc::new(policy),
            ..Config::default()
        };
        Limiter::coarse(Arc::new(config))
    }

    /// Queues a request on `host` the way admission does (the dispatcher marked running, as
    /// the test plays it), keeping where its answer comes.
    fn queue_one(host: &Host) -> super::super::grant::Incoming {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = crate::budget::limiter::lanes::JobTag::new("anonymous", 1.0);
        let queued = host.lock().enqueue(
            (&job, crate::config::Priority::Normal),
            None,
            tx,
            Instant::now(),
        );
        drop(queued);
        rx
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_queue_ends_the_dispatcher() {
        let limiter = limiter(1.0, 1, 1);
        let host = limiter.host(&BudgetKey::of_host("a.example", 80));
        let (next, unsent) = look(&limiter, &host, &mut Kept::default());
        assert!(matches!(
            next,
            Next::Exit(DispatcherDone {
                leave_waiting_list: false
            })
        ));
        assert!(unsent.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_turn_goes_to_the_head_and_the_next_waits_for_the_token() {
        let limiter = limiter(2.0, 1, 10);
        let host = limiter.host(&BudgetKey::of_host("a.example", 80));
        let mut first = queue_one(&host);
        let mut second = queue_one(&host);
        let (next, unsent) = look(&limiter, &host, &mut Kept::default());
        assert!(matches!(next, Next::Again));
        assert!(unsent.is_none(), "the head took the turn");
        let grant = first.try_recv().expect("the head was answered");
        assert!(grant.is_ok_and(|g| g.paced == Paced::Limited));
        let start = Instant::now();
        let (next, _) = look(&limiter, &host, &mut Kept::default());
        match next {
            Next::Wait(NotNow::NotBefore { at, reason, .. }) => {
                assert_eq!(
                    at - start,
                    Duration::from_millis(500),
                    "the next token, at 2/s"
                );
                assert_eq!(reason, WaitReason::Rate);
            }
            other => panic!("the second waits for the token: {other:?}"),
        }
        assert!(second.try_recv().is_err(), "not answered yet");
        tokio::time::advance(Duration::from_millis(500)).await;
        let (next, _) = look(&limiter, &host, &mut Kept::default());
        assert!(matches!(next, Next::Again));
        assert!(second.try_recv().is_ok_and(|g| g.is_ok()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_nobody_waits_for_comes_back_and_a_full_host_waits_for_a_slot() {
        let limiter = limiter(100.0, 10, 1);
        let host = limiter.host(&BudgetKey::of_host("a.example", 80));
        drop(queue_one(&host));
        let live = queue_one(&host);
        let (next, unsent) = look(&limiter, &host, &mut Kept::default());
        assert!(matches!(next, Next::Again));
        assert!(
            unsent.is_none(),
            "the gone head was skipped for the live one"
        );
        let mut waiting = queue_one(&host);
        let (next, _) = look(&limiter, &host, &mut Kept::default());
        assert!(matches!(next, Next::Wait(NotNow::NoHostSlot)), "{next:?}");
        assert!(waiting.try_recv().is_err());
        drop(live);
    }
}
