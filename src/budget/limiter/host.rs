//! One budget in the table (a target `host:port`, or every name of a domain or an address, see
//! `crate::budget::keys`): its policy, its pacing state, its FIFO of waiting requests, and the lock that
//! keeps them together. The lock is held for a few lines at a time and
//! never across an `.await`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

mod pacing;

use super::grant::Reply;
use super::lanes::{JobTag, Lanes, Priority};
use super::names::Names;
use super::shadow::{self, HostView, Shadow};
use super::stats::HostStats;
use super::verdicts::{ShadowReason, ShadowVerdict};
use super::waits::{Asker, HeadWait, Verdict};
use crate::budget::keys::BudgetKey;
use crate::config::{HostPolicy, KeyMode, OnCooldown};
use crate::pacing::policy::{InFlight, Pacing, WaitReason};

/// The pacing state of one budget: a target host (`host:port`), or the names sharing a key.
#[derive(Debug)]
pub struct Host {
    /// `host:port` (`[v6]:port`), the host part read from it, not stored twice; or a shared key
    /// (a domain, an address), whose names are in the state.
    pub(super) key: Arc<str>,
    /// The port of the (first) name.
    pub(super) port: u16,
    /// What the key was made from.
    pub(super) kind: KeyMode,
    state: Mutex<HostState>,
    /// Tells the dispatcher to look again: a slot came free, a waiter left, shutdown.
    pub(super) wake: Notify,
}

/// Everything about a host that changes, behind its lock.
///
/// Its fields are private: what must hold between them is kept here, by the methods that change
/// them together. **One dispatcher per host**: a request enters the queue only through
/// [`HostState::enqueue`], which says when a dispatcher must be started and marks it running in
/// the same call; a dispatcher ends only through [`HostState::dispatcher_done`], which lets it go
/// only when the queue is empty. So a queued request always has exactly one dispatcher, and no
/// code outside this file can start a second one or leave a queue without one. **One budget per
/// host**: [`HostState::retire_if_idle`] drops a host from the table only with nothing queued, in
/// flight or dispatching, and whoever still holds it sees [`HostState::is_retired`].
#[derive(Debug)]
pub(crate) struct HostState {
    policy: Arc<HostPolicy>,
    pacing: Pacing,
    in_flight: InFlight,
    /// The requests waiting for a turn, fair between jobs (`lanes.rs`).
    queue: Lanes<Waiter>,
    /// The id the next request queued gets.
    next_id: u64,
    /// A dispatcher task runs for this host (set by `enqueue`, cleared by `dispatcher_done`).
    dispatcher_running: bool,
    /// Set by the sweeper when it drops the host from the table: whoever still holds the `Arc` must
    /// look the host up again, so that one host never has two budgets.
    retired: bool,
    last_active: Instant,
    stats: HostStats,
    /// The operator's rate override was forced past the config's ceiling.
    forced: bool,
    /// What a shared budget's host keeps of its turns from the store (boxed: a local
    /// budget's hosts need none of it).
    shared: Option<Box<SharedTurns>>,
    /// A report-only host's would-be schedule and counts (boxed: most hosts enforce).
    shadow: Option<Box<Shadow>>,
    /// The names sharing a key other than `host:port` (boxed: most budgets have one name).
    names: Option<Box<Names>>,
    /// What the front of the queue has waited for (boxed, and only while a queue exists:
    /// `waits.rs`).
    waits: Option<Box<HeadWait>>,
}

/// What the caller of [`HostState::enqueue`] must do about the host's dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a queue that needs a dispatcher must get one"]
pub(super) enum Dispatcher {
    /// None ran: the state now says one runs, and the caller must spawn it (after the lock).
    Start,
    /// One runs and may be keeping an allowance while the queue was empty: wake it.
    Wake,
    /// One runs and will see the request.
    Running,
}

/// A request just queued: who it is for the wait accounting, and what its dispatcher needs.
#[derive(Debug)]
#[must_use = "a queue that needs a dispatcher must get one"]
pub(super) struct Enqueued {
    /// The request as the wait accounting sees it (its id is its place in the queue).
    pub(super) asker: Asker,
    /// Whether a dispatcher must be started or woken.
    pub(super) dispatcher: Dispatcher,
}

/// A dispatcher that found its host's queue empty and ended (see [`HostState::dispatcher_done`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DispatcherDone {
    /// This instance held a place in the host's waiting list in the shared store: give it up.
    pub(super) leave_waiting_list: bool,
}

/// What a host of a shared budget keeps of its turns from the store.
#[derive(Debug, Default)]
pub(crate) struct SharedTurns {
    /// The store's rejoin count at this host's last shared turn (see `Store::epoch`).
    pub(crate) epoch: u32,
    /// One more than the store's fall count at this host's last shared turn (`0`: it had none;
    /// see `Store::falls`).
    pub(crate) falls: u32,
    /// This instance holds a place in the host's waiting list in the shared store (its last
    /// reservation was refused): it gives it up when its queue empties.
    pub(crate) listed: bool,
    /// When this instance last handed out a shared turn of the host.
    pub(crate) last_turn_at: Option<Instant>,
    /// This instance's allowance of the host: turns leased ahead (`ahead.rs`).
    pub(crate) ahead: super::ahead::Ahead,
    /// Response bytes charged here and not yet billed to the store's byte budget.
    pub(crate) unbilled: u64,
}

impl HostState {
    /// The state of a host first seen `now` under `policy`.
    fn new(key: &BudgetKey, policy: Arc<HostPolicy>, now: Instant) -> Self {
        HostState {
            pacing: Pacing::new(&policy, now, std::time::SystemTime::now()),
            policy,
            in_flight: InFlight::default(),
            queue: Lanes::new(),
            next_id: 0,
            dispatcher_running: false,
            retired: false,
            last_active: now,
            stats: HostStats::default(),
            forced: false,
            shared: None,
            shadow: None,
            names: key.is_shared().then(|| Box::new(Names::new(key))),
            waits: None,
        }
    }

    /// The host's policy (its `[[host]]` rule, or the defaults).
    pub(crate) fn policy(&self) -> &Arc<HostPolicy> {
        &self.policy
    }

    /// The host's pacing state (pure: `crate::pacing::policy`), to read; it changes only by the
    /// state's operations (`host/pacing.rs`).
    pub(crate) fn pacing(&self) -> &Pacing {
        &self.pacing
    }

    /// The host's requests in flight.
    pub(crate) fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// The host's requests in flight, to start or finish one.
    pub(crate) fn in_flight_mut(&mut self) -> &mut InFlight {
        &mut self.in_flight
    }

    /// The requests waiting for a turn (to read: a request enters only by
    /// [`HostState::enqueue`]).
    pub(crate) fn queue(&self) -> &Lanes<Waiter> {
        &self.queue
    }

    /// The host's counters.
    pub(crate) fn stats(&self) -> &HostStats {
        &self.stats
    }

    /// The host's counters, to count.
    pub(crate) fn stats_mut(&mut self) -> &mut HostStats {
        &mut self.stats
    }

    /// Whether the operator's rate override was forced past the config's ceiling.
    pub(crate) fn forced(&self) -> bool {
        self.forced
    }

    /// Notes whether the operator's rate override is forced past the config's ceiling.
    pub(crate) fn set_forced(&mut self, forced: bool) {
        self.forced = forced;
    }

    /// What this host keeps of its shared turns, if it has had any.
    pub(crate) fn shared(&self) -> Option<&SharedTurns> {
        self.shared.as_deref()
    }

    /// What this host keeps of its shared turns, if it has had any, to change it.
    pub(crate) fn shared_mut(&mut self) -> Option<&mut SharedTurns> {
        self.shared.as_deref_mut()
    }

    /// The host's shared turns, made on first use.
    pub(crate) fn shared_turns(&mut self) -> &mut SharedTurns {
        self.shared.get_or_insert_with(Box::default)
    }

    /// A report-only host's schedule and counts, if it has judged a request yet.
    pub(crate) fn shadow(&self) -> Option<&Shadow> {
        self.shadow.as_deref()
    }

    /// Judges one request to this report-only host at `now` and counts the verdict
    /// (`shadow.rs`); `refused` is a refusal already decided before the budget.
    pub(super) fn judge_shadow(
        &mut self,
        refused: Option<ShadowReason>,
        job: Option<&JobTag>,
        now: Instant,
    ) -> ShadowVerdict {
        let view = HostView {
            pacing: &self.pacing,
            policy: &self.policy,
            in_flight: &self.in_flight,
        };
        let shadow = self.shadow.get_or_insert_with(Box::default);
        shadow::judge(shadow, view, refused, job, now)
    }

    /// The names sharing a key other than `host:port`.
    pub(crate) fn names(&self) -> Option<&Names> {
        self.names.as_deref()
    }

    /// The names sharing a key other than `host:port`, to note one.
    pub(crate) fn names_mut(&mut self) -> Option<&mut Names> {
        self.names.as_deref_mut()
    }

    /// What the front of the queue has waited for, while a queue exists.
    pub(crate) fn waits(&self) -> Option<&HeadWait> {
        self.waits.as_deref()
    }

    /// Notes that the host was used `now` (the sweeper forgets hosts idle long enough).
    pub(crate) fn touch(&mut self, now: Instant) {
        self.last_active = now;
    }

    /// Whether the sweeper dropped this host from the table: look it up again.
    pub(crate) fn is_retired(&self) -> bool {
        self.retired
    }

    /// Retires the host if nothing holds it: nothing queued, in flight or dispatching, unused for
    /// `idle`, and its pacing as fresh as a new host's. `true` when it was retired: the sweeper
    /// then drops it from the table.
    pub(crate) fn retire_if_idle(&mut self, idle: Duration, now: Instant) -> bool {
        let forget = self.queue.is_empty()
            && self.in_flight.current == 0
            && !self.dispatcher_running
            && now.saturating_duration_since(self.last_active) >= idle
            && self.pacing.is_fresh(&self.policy, now);
        if forget {
            self.retired = true;
        }
        forget
    }

    /// Queues a request of `job` in class `priority` that arrived `now`, with its own answer to a
    /// cooldown and where its turn is to be sent: it gets the next id, and the host a dispatcher
    /// if it had none (marked running here; the caller spawns it, [`Dispatcher::Start`]).
    pub(super) fn enqueue(
        &mut self,
        (job, priority): (&JobTag, Priority),
        on_cooldown: Option<OnCooldown>,
        reply: Reply,
        now: Instant,
    ) -> Enqueued {
        let id = self.next_id;
        self.next_id += 1;
        let asker = Asker {
            id,
            arrived: now,
            behind_own: self.queue.waiting_for(job),
        };
        let waiter = Waiter {
            id,
            arrived: now,
            on_cooldown,
            behind_own: asker.behind_own,
            reply,
        };
        self.queue.push(job, priority, waiter);
        let dispatcher = if !self.dispatcher_running {
            self.dispatcher_running = true;
            Dispatcher::Start
        } else if self.queue.len() == 1 {
            Dispatcher::Wake
        } else {
            Dispatcher::Running
        };
        Enqueued { asker, dispatcher }
    }

    /// The dispatcher's exit: with the queue empty, the host has no dispatcher from here on (the
    /// caller's task must end), keeps no queue buffer (there may be a million idle hosts) and no
    /// wait record. `None` while a request waits: the dispatcher goes on.
    pub(super) fn dispatcher_done(&mut self) -> Option<DispatcherDone> {
        if !self.queue.is_empty() {
            return None;
        }
        self.dispatcher_running = false;
        self.queue.shrink();
        self.waits = None;
        let leave_waiting_list = self
            .shared
            .as_mut()
            .is_some_and(|t| std::mem::take(&mut t.listed));
        Some(DispatcherDone { leave_waiting_list })
    }

    /// Drops the requests at the front of the queue that went away before their turn (they used
    /// none of their job's share).
    pub(super) fn drop_gone_fronts(&mut self) {
        while self.queue.front().is_some_and(|w| w.reply.is_closed()) {
            self.queue.discard_front();
        }
    }

    /// Takes the request whose turn is next out of the queue.
    pub(super) fn pop_front(&mut self) -> Option<Waiter> {
        self.queue.pop_front()
    }

    /// Takes the request with id `id` out of the queue (it went away), if it is still there.
    pub(super) fn remove(&mut self, id: u64) -> Option<Waiter> {
        self.queue.remove_first(|w| w.id == id)
    }

    /// Takes every request `pred` picks out of the queue, in order.
    pub(super) fn take_where(&mut self, pred: impl FnMut(&Waiter) -> bool) -> Vec<Waiter> {
        self.queue.take_where(pred)
    }

    /// Takes every request out of the queue (shutdown).
    pub(super) fn drain(&mut self) -> Vec<Waiter> {
        self.queue.drain()
    }

    /// When the queue of `room` places is full and a job other than `job` holds more than its
    /// share of them, takes that job's last request out to make room.
    pub(super) fn evict_over_share(&mut self, job: &JobTag, room: usize) -> Option<Waiter> {
        let over = self.queue.over_share(job, room)?;
        self.queue.pop_back_of(over)
    }

    /// Notes that the front of the queue, `front`, waits for `reason` from `now` on.
    pub(crate) fn front_waits(&mut self, front: u64, reason: WaitReason, now: Instant) {
        match &mut self.waits {
            Some(waits) => waits.look(front, reason, now),
            None => self.waits = Some(Box::new(HeadWait::new(front, reason, now))),
        }
    }

    /// What held `asker` back, now that its turn came (`waits.rs`): read once per turn.
    pub(super) fn verdict(&mut self, asker: Asker, now: Instant) -> Verdict {
        match &mut self.waits {
            Some(waits) => waits.verdict(asker, now),
            None => Verdict::default(),
        }
    }

    /// Notes that the shared store answered the front's request for a turn at `answered`.
    pub(crate) fn store_answered(&mut self, answered: Instant) {
        if let Some(waits) = &mut self.waits {
            waits.store_answered(answered);
        }
    }
}

/// A request waiting in a host's queue for its turn.
#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) arrived: Instant,
    /// The request's own answer to a cooldown; `None`, the host's `on_cooldown`.
    pub(super) on_cooldown: Option<OnCooldown>,
    /// Requests of its own job were waiting for the host when it arrived.
    pub(super) behind_own: bool,
    /// Where its turn (a grant) or its refusal is sent.
    pub(super) reply: Reply,
}

impl Waiter {
    /// The waiter as the wait accounting sees it.
    pub(super) fn asker(&self) -> Asker {
        Asker {
            id: self.id,
            arrived: self.arrived,
            behind_own: self.behind_own,
        }
    }
}

impl Host {
    pub(super) fn new(key: &BudgetKey, policy: Arc<HostPolicy>, now: Instant) -> Self {
        Host {
            key: Arc::from(key.key.as_str()),
            port: key.port,
            kind: key.kind,
            state: Mutex::new(HostState::new(key, policy, now)),
            wake: Notify::new(),
        }
    }

    /// The host part of a `host:port` key (without brackets for IPv6).
    fn name(&self) -> &str {
        let host = self.key.rsplit_once(':').map_or(&*self.key, |(h, _)| h);
        host.trim_start_matches('[').trim_end_matches(']')
    }

    /// The name whose rule gives this budget its policy: the target of a `host:port` key, the
    /// first name seen for a shared one.
    pub(super) fn policy_name(&self, state: &HostState) -> (String, u16) {
        match state.names() {
            Some(names) => names.first.clone(),
            None => (self.name().to_string(), self.port),
        }
    }

    /// Locks the state. A panic while the lock was held cannot leave the plain counters in a state
    /// worse than the panic itself, so a poisoned lock is used as it is.
    pub(super) fn lock(&self) -> MutexGuard<'_, HostState> {
        crate::util::locks::lock(&self.state)
    }
}
