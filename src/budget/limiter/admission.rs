//! One request asking for its turn ([`Limiter::admit`]): first tried at once under the host's
//! lock (`try_now`: a report-only host's permit, a refusal, a free turn, or a place in the host's
//! queue, fair between jobs: `lanes.rs`), then, if queued, the wait for the dispatcher's hand-over or the deadline
//! (`wait_in_line`). This module decides nothing about pacing (the budget seam does) and sends
//! nothing (`crate::proxy`).

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::{timeout_at, Instant};

use super::budget::{Kept, Turn};
use super::grant::{Grant, Incoming, Paced};
use super::host::{Dispatcher, Enqueued, Host, HostState};
use super::lanes::{JobTag, Priority};
use super::verdicts::ShadowReason;
use super::waits::Asker;
use super::{dispatch, Limiter, Permit, Refusal};
use crate::budget::keys::BudgetKey;
use crate::config::OnCooldown;
use crate::pacing::policy::WaitReason;

/// What the limiter needs to know of one request asking for its turn: the budget it spends, its
/// own answer to a cooldown, and a refusal already decided before the budget.
#[derive(Debug, Clone)]
pub struct Admission<'a> {
    key: Cow<'a, BudgetKey>,
    on_cooldown: Option<OnCooldown>,
    refused: Option<ShadowReason>,
    job: Option<JobTag>,
    priority: Priority,
}

impl<'a> Admission<'a> {
    /// A request spending the budget of `key` (a `host:port`, or a domain or address that
    /// several names share), with the host's own answer to a cooldown.
    pub fn of(key: &'a BudgetKey) -> Self {
        Admission {
            key: Cow::Borrowed(key),
            on_cooldown: None,
            refused: None,
            job: None,
            priority: Priority::Normal,
        }
    }

    /// The job the request belongs to and its class within the job: while it waits, the host's
    /// turns are shared between the jobs waiting by weight, and within a job by class. Without
    /// it, the request is job "anonymous"'s, normal.
    pub fn job(mut self, job: JobTag, priority: Priority) -> Self {
        self.job = Some(job);
        self.priority = priority;
        self
    }

    /// This request's own answer to a cooldown instead of the host's `on_cooldown` (`None`: the
    /// host's): `Hold` waits it out (clients that send `Courtesy-On-Cooldown: hold`), `Auto`
    /// waits out a window of at most the host's `max_hold_seconds` (courtesy's own retries do),
    /// `Reject` is answered at once.
    pub fn on_cooldown(mut self, on_cooldown: Option<OnCooldown>) -> Self {
        self.on_cooldown = on_cooldown;
        self
    }

    /// For a report-only host (`enforce = false`), a refusal decided before the budget
    /// (robots.txt, `skip_resources`) that the request is forwarded despite, so that its
    /// [`super::ShadowVerdict`] counts it.
    pub fn refused(mut self, refused: Option<ShadowReason>) -> Self {
        self.refused = refused;
        self
    }
}

/// A request to `host`:`port` (already lowercased), keyed by its `host:port`.
impl<S: AsRef<str>> From<(S, u16)> for Admission<'static> {
    fn from((host, port): (S, u16)) -> Self {
        Admission {
            key: Cow::Owned(BudgetKey::of_host(host.as_ref(), port)),
            on_cooldown: None,
            refused: None,
            job: None,
            priority: Priority::Normal,
        }
    }
}

/// The job of requests that name none.
static ANONYMOUS: std::sync::LazyLock<JobTag> =
    std::sync::LazyLock::new(|| JobTag::new(super::lanes::ANONYMOUS, 1.0));

/// What trying a request at once came to.
enum TryNow {
    /// Its turn, now.
    Now(Permit),
    /// Refused, now.
    Refused(Refusal),
    /// A place in the host's queue, until the deadline.
    InLine(InLine),
}

/// A request waiting in a host's queue: its place (where its turn comes), until when it waits.
struct InLine {
    place: QueuedTurn,
    deadline: Instant,
    asker: Asker,
}

impl Limiter {
    /// Waits for the turn of one request. The returned future may be dropped at any point (the
    /// client went away): then nothing is spent and the request leaves the queue.
    pub async fn admit(
        self: &Arc<Self>,
        request: impl Into<Admission<'_>>,
    ) -> Result<Permit, Refusal> {
        match self.try_now(&request.into()) {
            TryNow::Now(permit) => Ok(permit),
            TryNow::Refused(refusal) => Err(refusal),
            TryNow::InLine(line) => line.wait().await,
        }
    }

    /// Under the host's lock: a report-only host's permit, a refusal (shutting down, a cooldown
    /// in reject mode, a full queue), the turn if it is free and nobody waits, or a place at the
    /// back of the queue (starting the host's dispatcher if none runs).
    fn try_now(self: &Arc<Self>, request: &Admission<'_>) -> TryNow {
        loop {
            let entry = self.host(&request.key);
            let mut state = entry.lock();
            if state.is_retired() {
                continue;
            }
            if let Some(names) = state.names_mut() {
                names.note(&request.key);
            }
            if self.shutting_down.load(Ordering::Acquire) {
                return TryNow::Refused(Refusal::ShuttingDown);
            }
            let now = Instant::now();
            state.touch(now);
            if !state.policy().scope.enforce {
                let verdict = state.judge_shadow(request.refused, request.job.as_ref(), now);
                state.in_flight_mut().start();
                drop(state);
                let permit = Permit::new(entry, self, Grant::new(None, Paced::AtOnce));
                return TryNow::Now(permit.with_shadow(verdict));
            }
            if let Some(refusal) = cooldown_refusal(&mut state, request.on_cooldown, now) {
                return TryNow::Refused(refusal);
            }
            // What the request waits for if it is the first in line (else: those ahead of it).
            let first_waits = match self.free_turn(&mut state, now) {
                Ok(grant) => {
                    drop(state);
                    return TryNow::Now(Permit::new(entry, self, grant));
                }
                Err(first_waits) => first_waits,
            };
            return self.queue_up(&entry, state, request, first_waits, now);
        }
    }

    /// The turn of a request that finds the host's queue empty, if the budget has one now;
    /// otherwise what the request waits for if it queues (`None`: those ahead of it).
    fn free_turn(&self, state: &mut HostState, now: Instant) -> Result<Grant, Option<WaitReason>> {
        if !state.queue().is_empty() {
            return Err(None);
        }
        let ceilings = (self.egress.as_ref(), self.downlink.as_ref());
        match self
            .budget
            .take_turn(state, &self.global, ceilings, Kept::default(), now)
        {
            Turn::Go { slot } => Ok(Grant::new(Some(slot), Paced::AtOnce)),
            Turn::GoAhead { slot, generation } => {
                Ok(Grant::new(Some(slot), Paced::AtOnce).with_ahead(generation))
            }
            Turn::NotNow(not_now) => Err(Some(not_now.reason())),
        }
    }

    /// Puts the request at the back of `entry`'s queue (`state` is its lock), making room if a
    /// job holds more than its share of a full one, and starts or wakes the dispatcher; a
    /// refusal if the queue stays full. `first_waits`: what the request waits for if it is the
    /// first in line.
    fn queue_up(
        self: &Arc<Self>,
        entry: &Arc<Host>,
        mut state: MutexGuard<'_, HostState>,
        request: &Admission<'_>,
        first_waits: Option<WaitReason>,
        now: Instant,
    ) -> TryNow {
        let job = request.job.as_ref().unwrap_or(&ANONYMOUS);
        let max_queue = state.policy().pacing.max_queue;
        if state.queue().len() >= max_queue {
            make_room(entry, &mut state, job, now);
        }
        if state.queue().len() >= max_queue {
            let refusal = queue_full(&state, now);
            state.stats_mut().refused(&refusal);
            self.herald().queue_full(&entry.key, max_queue, now);
            return TryNow::Refused(refusal);
        }
        let (tx, answer) = oneshot::channel();
        let Enqueued { asker, dispatcher } =
            state.enqueue((job, request.priority), request.on_cooldown, tx, now);
        if let Some(reason) = first_waits {
            state.front_waits(asker.id, reason, now);
        }
        let deadline = now + state.policy().pacing.max_wait;
        match dispatcher {
            Dispatcher::Start => {
                tokio::spawn(dispatch::dispatch(self.clone(), entry.clone()));
            }
            // A dispatcher that keeps an allowance while the queue is empty waits to be told.
            Dispatcher::Wake => entry.wake.notify_one(),
            Dispatcher::Running => {}
        }
        drop(state);
        TryNow::InLine(InLine {
            place: QueuedTurn {
                limiter: self.clone(),
                host: entry.clone(),
                id: asker.id,
                answer,
            },
            deadline,
            asker,
        })
    }
}

/// The refusal of a request for a host that cools down, if the request is not held through what
/// is left of it (`on_cooldown`: the request's own answer, else the host's); counted.
fn cooldown_refusal(
    state: &mut HostState,
    on_cooldown: Option<OnCooldown>,
    now: Instant,
) -> Option<Refusal> {
    let cooldown = &state.policy().cooldown;
    let c = state
        .pacing()
        .block(now)
        .filter(|c| !cooldown.holds(on_cooldown, c.until.saturating_duration_since(now)))?;
    let refusal = Refusal::CoolingDown {
        remaining: c.until.saturating_duration_since(now),
        cause: c.cause,
    };
    state.stats_mut().refused(&refusal);
    Some(refusal)
}

/// In `host`'s full queue: a job other than `job` over its share of the room gives its last
/// place to `job`'s request (refused as a full queue).
fn make_room(host: &Host, state: &mut HostState, job: &JobTag, now: Instant) {
    let max_queue = state.policy().pacing.max_queue;
    if let Some(evicted) = state.evict_over_share(job, max_queue) {
        let refusal = queue_full(state, now);
        state.stats_mut().refused(&refusal);
        // Its waiter may have gone (then the send fails and nothing is owed).
        let _ = evicted.reply.send(Err(refusal));
        host.wake.notify_one();
    }
}

/// The refusal of a request the host's full queue has no room for, with when to come back.
fn queue_full(state: &HostState, now: Instant) -> Refusal {
    let rate = state.pacing().effective_rate(now);
    let ahead = state.queue().len() as f64 + 1.0;
    let retry_after = Duration::from_secs_f64((ahead / rate).clamp(1.0, 3600.0));
    Refusal::QueueFull {
        max_queue: state.policy().pacing.max_queue,
        retry_after,
    }
}

impl InLine {
    /// Waits for the dispatcher to hand this request its turn, or for the deadline. Dropping
    /// this future drops the place, which takes the request out of the queue; a turn already
    /// sent is ended unused and refunds its token.
    async fn wait(mut self) -> Result<Permit, Refusal> {
        let answered = timeout_at(self.deadline, &mut self.place.answer).await;
        match answered {
            Ok(Ok(outcome)) => {
                self.place.forget();
                let place = &self.place;
                outcome.map(|grant| Permit::new(place.host.clone(), &place.limiter, grant))
            }
            Ok(Err(_)) => Err(Refusal::ShuttingDown),
            Err(_) => {
                let now = Instant::now();
                let mut state = self.place.host.lock();
                let asker = self.asker;
                let refusal = match state.pacing().block(now) {
                    Some(c) => Refusal::CoolingDown {
                        remaining: c.until.saturating_duration_since(now),
                        cause: c.cause,
                    },
                    None => Refusal::WaitedTooLong {
                        waited: now.saturating_duration_since(asker.arrived),
                        reason: state
                            .waits()
                            .map_or(WaitReason::Queue, |w| w.reason_for(asker, now)),
                    },
                };
                state.stats_mut().refused(&refusal);
                Err(refusal)
            }
        }
    }
}

/// A place in a host's queue and where its turn comes. Dropped before [`QueuedTurn::forget`], it
/// leaves the queue; dropped with a turn sent and not taken (the request went away as its turn
/// came), it ends that turn unused.
struct QueuedTurn {
    /// What a turn's permit is made with.
    limiter: Arc<Limiter>,
    host: Arc<Host>,
    id: u64,
    /// Where the dispatcher's grant (or a refusal) comes.
    answer: Incoming,
}

impl QueuedTurn {
    /// The request has its answer: it is out of the queue already.
    fn forget(&mut self) {
        self.id = u64::MAX;
    }
}

impl Drop for QueuedTurn {
    fn drop(&mut self) {
        if self.id != u64::MAX {
            let mut state = self.host.lock();
            let removed = state.remove(self.id);
            drop(state);
            drop(removed);
            self.host.wake.notify_one();
        }
        // Out of the queue now: no turn can come after this, and one that came is ended unused
        // (its permit's drop frees the slots and gives the token back).
        self.answer.close();
        if let Ok(Ok(grant)) = self.answer.try_recv() {
            drop(Permit::new(self.host.clone(), &self.limiter, grant));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, HostPolicy};
    use crate::pacing::policy::CooldownCause;

    fn limiter(rate: f64, burst: u32) -> Arc<Limiter> {
        let mut policy = HostPolicy::default();
        policy.pacing.rate = rate;
        policy.pacing.burst = burst;
        policy.pacing.concurrency = 10;
        let config = Config {
            defaults: Arc::new(policy),
            ..Config::default()
        };
        Limiter::coarse(Arc::new(config))
    }

    #[tokio::test(start_paused = true)]
    async fn a_cooldown_refuses_only_the_requests_not_held_through_it() {
        let limiter = limiter(10.0, 1);
        let host = limiter.host(&BudgetKey::of_host("a.example", 80));
        let mut state = host.lock();
        let now = Instant::now();
        assert_eq!(cooldown_refusal(&mut state, None, now), None, "no cooldown");
        state.close(
            now + Duration::from_secs(30),
            CooldownCause::Status(429),
            now,
        );
        let refused = cooldown_refusal(&mut state, Some(OnCooldown::Reject), now);
        assert_eq!(
            refused,
            Some(Refusal::CoolingDown {
                remaining: Duration::from_secs(30),
                cause: CooldownCause::Status(429),
            })
        );
        assert_eq!(
            cooldown_refusal(&mut state, Some(OnCooldown::Hold), now),
            None,
            "a request that holds waits it out"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_turn_is_taken_at_once_and_the_next_says_what_it_waits_for() {
        let limiter = limiter(2.0, 1);
        let host = limiter.host(&BudgetKey::of_host("a.example", 80));
        let mut state = host.lock();
        let now = Instant::now();
        let grant = limiter.free_turn(&mut state, now);
        assert!(grant.as_ref().is_ok_and(|g| g.paced == Paced::AtOnce));
        drop(grant);
        match limiter.free_turn(&mut state, now) {
            Err(reason) => assert_eq!(reason, Some(WaitReason::Rate)),
            Ok(_) => panic!("one token at 2/s: the second waits"),
        }
    }
}
