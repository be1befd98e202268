//! The host table and the per-host holding queue: the only place requests wait.
//!
//! Each budget (a target host, or the names sharing a key: `crate::budget::keys`) has one [`Host`]: its pure pacing state (`crate::pacing::policy`), a FIFO of waiting
//! requests and, while that FIFO is not empty, one dispatcher task that hands out turns in order. A
//! request whose turn is free right away (empty queue, a token, a slot) never touches the
//! dispatcher. Every turn is asked of the budget seam (`budget.rs`), and every answer reported
//! to it. Waiting is a timer or a notification, never a poll.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the table, shutdown |
//! | `admission.rs` | one request asking for its turn: tried now, else a place in line |
//! | `host.rs` | one host's state and its lock; `host/pacing.rs`, what the limiter does to its pacing, as the state's operations |
//! | `names.rs` | the names sharing a budget keyed by domain or address |
//! | `budget.rs` | the seam: a turn asked, an answer reported |
//! | `grant.rs` | a turn without its host (`Grant`), as a queued request's reply carries it |
//! | `herald.rs` | host events told as the state changes (`/v1/events`), and the timer of the ends |
//! | `permit.rs` | a request's turn while it is in flight |
//! | `dispatch.rs` | handing out queued turns in order, the fine-grained wait |
//! | `egress.rs` | the ceilings on all hosts together (`global_rate`, FIFO across hosts; `global_bytes_per_second`) |
//! | `verdicts.rs` | what the limiter answers, as plain values: why a request gets no turn (`Refusal`), a report-only host's verdicts and counts; it imports nothing from the limiter |
//! | `refusal.rs` | a whole queue refused when a cooldown starts |
//! | `shared.rs` | turns from a shared store, and its hints |
//! | `shadow.rs` | report-only hosts (`enforce = false`): the would-be schedule, judged from what the host lends it |
//! | `sweep.rs` | forgetting idle hosts |
//! | `steer.rs` | snapshots, operator actions, reloads, restart records |
//! | `stats.rs` | per-host counters |
//! | `waits.rs` | why and how long each request waited for its turn |
//!
//! The files import one way round (`tests/layers.rs`, which follows a name through this file's
//! re-exports to the file that defines it): `host.rs` builds on the leaves (`lanes.rs`,
//! `names.rs`, `stats.rs`, `waits.rs`, `verdicts.rs`, `shadow.rs`, `grant.rs`), and the rest on
//! it. A `Permit` holds its `Host`, so a host's queue carries a `Grant` (the permit without its
//! host), of which the request's side makes its permit.
//!
//! This module decides *when* a request may leave; it does not send it (`crate::proxy`) and does
//! not judge responses (`crate::pacing::feedback`).

mod admission;
mod ahead;
mod budget;
mod dispatch;
mod egress;
mod grant;
mod herald;
mod host;
#[doc(hidden)]
pub mod lanes;
mod names;
mod permit;
mod refusal;
mod shadow;
mod shared;
mod stats;
mod steer;
mod sweep;
mod verdicts;
mod waits;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::Semaphore;
use tokio::time::Instant;

pub(crate) use admission::Admission;
pub(crate) use herald::{EventKind, HostEvent, PausedBy, RateWhy, ResumedBy, Source};
pub use host::Host;
pub(crate) use permit::{ByteMeter, OpenSockets, Permit};
pub use stats::HostStats;
pub(crate) use stats::UpstreamProtocol;
pub(crate) use steer::{HostRecord, HostSnapshot, OperatorAction};
pub(crate) use sweep::Swept;
pub(crate) use verdicts::{Refusal, ShadowCounts, ShadowReason, ShadowVerdict};

pub(crate) use crate::pacing::policy::WaitReason;

pub(crate) use crate::budget::keys::BudgetKey;
use crate::config::{Config, LiveConfig};
use budget::Budget;
use egress::{Downlink, Egress};
use host::Waiter;

/// The table of hosts and the global in-flight cap, shared by every connection.
#[derive(Debug)]
pub struct Limiter {
    hosts: DashMap<Arc<str>, Arc<Host>>,
    /// Where turns come from and answers go.
    budget: Budget,
    config: LiveConfig,
    global: Arc<Semaphore>,
    /// The ceiling on all hosts together (`[proxy] global_rate`), if set.
    egress: Option<Arc<Egress>>,
    /// The ceiling on response bytes from all hosts together (`[proxy]
    /// global_bytes_per_second`), if set.
    downlink: Option<Arc<Downlink>>,
    shutting_down: AtomicBool,
    /// The most hosts known at a sweep since memory was last handed back to the OS.
    peak_hosts: AtomicUsize,
    /// Whether the last stretch of each wait for a token is an OS sleep (sub-millisecond) rather
    /// than tokio's timer (whole milliseconds, about 1 ms late): [`Timer::Fine`].
    fine_waits: bool,
    /// WebSockets open, by host: kept beside the hosts, not in them (few hosts ever have one,
    /// and a known host stays small).
    sockets: Arc<OpenSockets>,
}

/// How a limiter times the last stretch of each wait for a token (see `Limiter::sleep_until`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    /// An OS sleep, to the sub-millisecond.
    Fine,
    /// tokio's timer alone (whole milliseconds, about 1 ms late): a test on the paused clock
    /// spends no real time on the last stretch.
    #[cfg_attr(not(test), allow(dead_code))]
    Coarse,
}

impl Limiter {
    /// A limiter with no hosts yet; policies come from `config`. Turns are timed to within a tenth
    /// of a millisecond.
    pub fn new(config: Arc<Config>) -> Arc<Self> {
        Self::build(LiveConfig::new(config), Timer::Fine)
    }

    /// A limiter that reads its policies from `config`, shared with the rest of courtesy (a reload
    /// through [`Limiter::reload`] replaces it for everyone).
    pub fn with_live(config: LiveConfig) -> Arc<Self> {
        Self::build(config, Timer::Fine)
    }

    /// Like [`Limiter::with_live`], with every host's budget kept in `store`, shared with the other
    /// instances on it.
    pub(crate) fn with_store(
        config: LiveConfig,
        store: Arc<crate::store::RedisStore>,
    ) -> Arc<Self> {
        let signals = Arc::default();
        Self::with_budget(config, Budget::Shared { signals, store }, Timer::Fine)
    }

    /// A limiter that waits on tokio's timer alone: turns may come about 1 ms late, but a test on
    /// the paused clock spends no real time on the last stretch of each wait.
    #[cfg(test)]
    fn coarse(config: Arc<Config>) -> Arc<Self> {
        Self::build(LiveConfig::new(config), Timer::Coarse)
    }

    fn build(config: LiveConfig, timer: Timer) -> Arc<Self> {
        let signals = Arc::default();
        Self::with_budget(config, Budget::Local { signals }, timer)
    }

    fn with_budget(config: LiveConfig, budget: Budget, timer: Timer) -> Arc<Self> {
        Arc::new(Limiter {
            hosts: DashMap::new(),
            budget,
            global: Arc::new(Semaphore::new(config.get().proxy.max_in_flight)),
            egress: {
                let proxy = &config.get().proxy;
                proxy
                    .global_rate
                    .map(|r| Egress::new(r, proxy.global_burst))
            },
            downlink: config
                .get()
                .proxy
                .global_bytes_per_second
                .map(Downlink::new),
            config,
            shutting_down: AtomicBool::new(false),
            peak_hosts: AtomicUsize::new(0),
            fine_waits: timer == Timer::Fine,
            sockets: Arc::default(),
        })
    }

    /// The config in force (replaced by a reload).
    pub fn config(&self) -> Arc<Config> {
        self.config.get()
    }

    /// The entry of `key`, made (with the policy of `key`'s name) if the table has none.
    pub(super) fn host(&self, key: &BudgetKey) -> Arc<Host> {
        if let Some(found) = self.hosts.get(key.key.as_str()) {
            return found.value().clone();
        }
        let policy = self.config().policy_for(&key.host, key.port);
        // The table's key and the host's are one allocation.
        let fresh = Arc::new(Host::new(key, policy, Instant::now()));
        self.hosts
            .entry(fresh.key.clone())
            .or_insert(fresh)
            .value()
            .clone()
    }

    /// Refuses every queued request and every new one; requests in flight are left to finish.
    pub fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
        let hosts: Vec<Arc<Host>> = self.hosts.iter().map(|e| e.value().clone()).collect();
        for host in hosts {
            let drained: Vec<Waiter> = {
                let mut state = host.lock();
                let drained: Vec<Waiter> = state.drain();
                for _ in &drained {
                    state.stats_mut().refused(&Refusal::ShuttingDown);
                }
                drained
            };
            for waiter in drained {
                let _ = waiter.reply.send(Err(Refusal::ShuttingDown));
            }
            host.wake.notify_one();
        }
    }

    /// Resolves soon after a cooldown, block pause or operator's change began: the state saver
    /// waits on it, so that what a crash must not forget reaches the disk within milliseconds.
    pub(crate) async fn state_changed(&self) {
        self.budget.persist_signal().notified().await
    }

    /// Whether the table knows the budget with this key (`host:port`, a domain or an address, as
    /// [`Permit::host_key`]).
    pub fn knows(&self, key: &str) -> bool {
        self.hosts.contains_key(key)
    }

    /// Whether [`Limiter::shutdown`] has begun: no new turns are given.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// Which budget is in force, for `/readyz`, `/hosts` and `/metrics`: `"local"` (this
    /// instance's own), `"shared"` (on the store) or `"fallback"` (this instance's share, while
    /// the store cannot be reached).
    pub fn budget_mode(&self) -> &'static str {
        self.budget.mode()
    }

    /// The shared store, if the budget is kept in one.
    pub(crate) fn store(&self) -> Option<&Arc<crate::store::RedisStore>> {
        self.budget.store()
    }

    /// The debt of the ceiling on response bytes from all hosts together and that ceiling (bytes
    /// per second), if `[proxy] global_bytes_per_second` is set.
    pub fn downlink_debt(&self) -> Option<(u64, u64)> {
        self.downlink.as_ref().map(|d| d.debt(Instant::now()))
    }

    /// How many hosts are in the table.
    pub fn host_count(&self) -> usize {
        self.hosts.len()
    }
}

#[cfg(test)]
mod herald_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod wait_tests;
