//! One budget in the table (a target `host:port`, or every name of a domain or an address, see
//! `crate::budget::keys`): its policy, its pacing state, its FIFO of waiting requests, and the lock that
//! keeps them together. The lock is held for a few lines at a time and
//! never across an `.await`.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::lanes::Lanes;
use super::names::Names;
use super::permit::Permit;
use super::refusal::Refusal;
use super::shadow::Shadow;
use super::stats::HostStats;
use super::waits::{Asker, HeadWait};
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
#[derive(Debug)]
pub(crate) struct HostState {
    pub(crate) policy: Arc<HostPolicy>,
    pub(crate) pacing: Pacing,
    pub(crate) in_flight: InFlight,
    /// The requests waiting for a turn, fair between jobs (`lanes.rs`).
    pub(crate) queue: Lanes<Waiter>,
    pub(crate) next_id: u64,
    pub(crate) dispatcher_running: bool,
    /// Set by the sweeper when it drops the host from the table: whoever still holds the `Arc` must
    /// look the host up again, so that one host never has two budgets.
    pub(crate) retired: bool,
    pub(crate) last_active: Instant,
    pub(crate) stats: HostStats,
    /// The operator's rate override was forced past the config's ceiling.
    pub(crate) forced: bool,
    /// What a shared budget's host keeps of its turns from the store (boxed: a local
    /// budget's hosts need none of it).
    pub(crate) shared: Option<Box<SharedTurns>>,
    /// A report-only host's would-be schedule and counts (boxed: most hosts enforce).
    pub(crate) shadow: Option<Box<Shadow>>,
    /// The names sharing a key other than `host:port` (boxed: most budgets have one name).
    pub(crate) names: Option<Box<Names>>,
    /// What the front of the queue has waited for (boxed, and only while a queue exists:
    /// `waits.rs`).
    pub(crate) waits: Option<Box<HeadWait>>,
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
    /// Notes that the front of the queue, `front`, waits for `reason` from `now` on.
    pub(crate) fn front_waits(&mut self, front: u64, reason: WaitReason, now: Instant) {
        match &mut self.waits {
            Some(waits) => waits.look(front, reason, now),
            None => self.waits = Some(Box::new(HeadWait::new(front, reason, now))),
        }
    }

    /// Notes that the shared store answered the front's request for a turn at `answered`.
    pub(crate) fn store_answered(&mut self, answered: Instant) {
        if let Some(waits) = &mut self.waits {
            waits.store_answered(answered);
        }
    }

    /// The host's shared turns, made on first use.
    pub(crate) fn shared_turns(&mut self) -> &mut SharedTurns {
        self.shared.get_or_insert_with(Box::default)
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
    pub(super) reply: oneshot::Sender<Result<Permit, Refusal>>,
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
            state: Mutex::new(HostState {
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
            }),
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
        match &state.names {
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
