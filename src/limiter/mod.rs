//! The host table and the per-host holding queue: the only place requests wait.
//!
//! Each budget (a target host, or the names sharing a key: `crate::keys`) has one [`Host`]: its pure pacing state (`crate::policy`), a FIFO of waiting
//! requests and, while that FIFO is not empty, one dispatcher task that hands out turns in order. A
//! request whose turn is free right away (empty queue, a token, a slot) never touches the
//! dispatcher. Every turn is asked of the budget seam (`budget.rs`), and every answer reported
//! to it. Waiting is a timer or a notification, never a poll.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the table, admission (`admit`), shutdown |
//! | `host.rs` | one host's state and its lock |
//! | `names.rs` | the names sharing a budget keyed by domain or address |
//! | `budget.rs` | the seam: a turn asked, an answer reported |
//! | `permit.rs` | a request's turn while it is in flight |
//! | `dispatch.rs` | handing out queued turns in order, the fine-grained wait |
//! | `egress.rs` | the ceiling on all hosts together (`global_rate`), FIFO across hosts |
//! | `refusal.rs` | why a request gets no turn |
//! | `shared.rs` | turns from a shared store, and its hints |
//! | `shadow.rs` | report-only hosts (`enforce = false`): what would have happened |
//! | `sweep.rs` | forgetting idle hosts |
//! | `steer.rs` | snapshots, operator actions, reloads, restart records |
//! | `stats.rs` | per-host counters |
//!
//! This module decides *when* a request may leave; it does not send it (`crate::proxy`) and does
//! not judge responses (`crate::feedback`).

mod budget;
mod dispatch;
mod egress;
mod host;
mod names;
mod permit;
mod refusal;
mod shadow;
mod shared;
mod stats;
mod steer;
mod sweep;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::{oneshot, Semaphore};
use tokio::time::{timeout_at, Instant};

pub use host::Host;
pub use permit::Permit;
pub use refusal::Refusal;
pub use shadow::{ShadowCounts, ShadowVerdict, SHADOW_REASONS};
pub use stats::HostStats;
pub use steer::{HostRecord, HostSnapshot, OperatorAction, OperatorError};
pub use sweep::Swept;

use crate::config::{Config, LiveConfig, OnCooldown};
pub use crate::keys::{host_key, BudgetKey};
use budget::{Budget, Kept, Turn};
use egress::Egress;
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
    shutting_down: AtomicBool,
    /// The most hosts known at a sweep since memory was last handed back to the OS.
    peak_hosts: AtomicUsize,
    /// Whether the last stretch of each wait for a token is an OS sleep (sub-millisecond) rather
    /// than tokio's timer (whole milliseconds, about 1 ms late).
    fine_waits: bool,
}

impl Limiter {
    /// A limiter with no hosts yet; policies come from `config`. Turns are timed to within a tenth
    /// of a millisecond.
    pub fn new(config: Arc<Config>) -> Arc<Self> {
        Self::build(LiveConfig::new(config), true)
    }

    /// A limiter that reads its policies from `config`, shared with the rest of courtesy (a reload
    /// through [`Limiter::reload`] replaces it for everyone).
    pub fn with_live(config: LiveConfig) -> Arc<Self> {
        Self::build(config, true)
    }

    /// Like [`Limiter::with_live`], with every host's budget kept in `store`, shared with the other
    /// instances on it.
    pub(crate) fn with_store(config: LiveConfig, store: Arc<crate::shared::Store>) -> Arc<Self> {
        let persist = Arc::new(tokio::sync::Notify::new());
        Self::with_budget(config, Budget::Shared { persist, store }, true)
    }

    /// A limiter that waits on tokio's timer alone: turns may come about 1 ms late, but a test on
    /// the paused clock spends no real time on the last stretch of each wait.
    #[cfg(test)]
    fn coarse(config: Arc<Config>) -> Arc<Self> {
        Self::build(LiveConfig::new(config), false)
    }

    fn build(config: LiveConfig, fine_waits: bool) -> Arc<Self> {
        let persist = Arc::new(tokio::sync::Notify::new());
        Self::with_budget(config, Budget::Local { persist }, fine_waits)
    }

    fn with_budget(config: LiveConfig, budget: Budget, fine_waits: bool) -> Arc<Self> {
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
            config,
            shutting_down: AtomicBool::new(false),
            peak_hosts: AtomicUsize::new(0),
            fine_waits,
        })
    }

    /// The config in force (replaced by a reload).
    pub fn config(&self) -> Arc<Config> {
        self.config.get()
    }

    /// Waits for the turn of one request to `host`:`port` (already lowercased). The returned future
    /// may be dropped at any point (the client went away): then nothing is spent and the request
    /// leaves the queue.
    pub async fn admit(self: &Arc<Self>, host: &str, port: u16) -> Result<Permit, Refusal> {
        self.admit_with(host, port, None).await
    }

    /// Like [`Limiter::admit`], with this request's own answer to a cooldown instead of the host's
    /// `on_cooldown` when `on_cooldown` is given: `Hold` waits it out (courtesy's own retries do,
    /// and clients that send `Courtesy-On-Cooldown: hold`), `Reject` is answered at once.
    pub async fn admit_with(
        self: &Arc<Self>,
        host: &str,
        port: u16,
        on_cooldown: Option<OnCooldown>,
    ) -> Result<Permit, Refusal> {
        self.admit_asking(host, port, on_cooldown, None).await
    }

    /// Like [`Limiter::admit_with`]; for a report-only host (`enforce = false`), `refused` is a
    /// refusal decided before the budget (robots.txt, `skip_resources`) that the request is
    /// forwarded despite. Report-only hosts get their permit at once, with a
    /// [`ShadowVerdict`] saying what would have happened.
    pub async fn admit_asking(
        self: &Arc<Self>,
        host: &str,
        port: u16,
        on_cooldown: Option<OnCooldown>,
        refused: Option<&'static str>,
    ) -> Result<Permit, Refusal> {
        self.admit_for(&BudgetKey::of_host(host, port), on_cooldown, refused)
            .await
    }

    /// Like [`Limiter::admit_asking`], spending the budget of `key` (a `host:port`, or a domain or
    /// address that several names share).
    pub async fn admit_for(
        self: &Arc<Self>,
        key: &BudgetKey,
        on_cooldown: Option<OnCooldown>,
        refused: Option<&'static str>,
    ) -> Result<Permit, Refusal> {
        let (entry, rx, deadline, arrived) = loop {
            let entry = self.host(key);
            let mut state = entry.lock();
            if state.retired {
                continue;
            }
            if let Some(names) = &mut state.names {
                names.note(key);
            }
            if self.shutting_down.load(Ordering::Acquire) {
                return Err(Refusal::ShuttingDown);
            }
            let now = Instant::now();
            state.last_active = now;
            if !state.policy.enforce {
                let verdict = shadow::judge(&mut state, refused, now);
                state.in_flight.start();
                drop(state);
                let permit = Permit::new(entry, self.budget.clone(), None, Duration::ZERO, false);
                return Ok(permit.with_shadow(verdict));
            }
            let rejecting = on_cooldown.unwrap_or(state.policy.on_cooldown) == OnCooldown::Reject;
            if let Some(c) = state.pacing.block(now).filter(|_| rejecting) {
                let refusal = Refusal::CoolingDown {
                    remaining: c.until.saturating_duration_since(now),
                    cause: c.cause,
                };
                state.stats.refused(&refusal);
                return Err(refusal);
            }
            if state.queue.is_empty() {
                let turn = self.budget.take_turn(
                    &mut state,
                    &self.global,
                    self.egress.as_ref(),
                    Kept::default(),
                    now,
                );
                if let Turn::Go(global) = turn {
                    drop(state);
                    return Ok(Permit::new(
                        entry,
                        self.budget.clone(),
                        Some(global),
                        Duration::ZERO,
                        false,
                    ));
                }
            }
            if state.queue.len() >= state.policy.max_queue {
                let rate = state.pacing.effective_rate(now);
                let ahead = state.queue.len() as f64 + 1.0;
                let retry_after = Duration::from_secs_f64((ahead / rate).clamp(1.0, 3600.0));
                let refusal = Refusal::QueueFull {
                    max_queue: state.policy.max_queue,
                    retry_after,
                };
                state.stats.refused(&refusal);
                return Err(refusal);
            }
            let (tx, rx) = oneshot::channel();
            let id = state.next_id;
            state.next_id += 1;
            state.queue.push_back(Waiter {
                id,
                arrived: now,
                on_cooldown,
                reply: tx,
            });
            let deadline = now + state.policy.max_wait;
            if !state.dispatcher_running {
                state.dispatcher_running = true;
                tokio::spawn(dispatch::dispatch(self.clone(), entry.clone()));
            }
            drop(state);
            break (QueuedTurn { host: entry, id }, rx, deadline, now);
        };
        // From here, dropping this future drops `entry` (the queued turn), which takes the waiter out
        // of the queue; a permit already sent into `rx` is dropped unused and refunds its token.
        match timeout_at(deadline, rx).await {
            Ok(Ok(outcome)) => {
                entry.forget();
                outcome
            }
            Ok(Err(_)) => Err(Refusal::ShuttingDown),
            Err(_) => {
                let now = Instant::now();
                let mut state = entry.host.lock();
                let refusal = match state.pacing.block(now) {
                    Some(c) => Refusal::CoolingDown {
                        remaining: c.until.saturating_duration_since(now),
                        cause: c.cause,
                    },
                    None => Refusal::WaitedTooLong {
                        waited: now.saturating_duration_since(arrived),
                    },
                };
                state.stats.refused(&refusal);
                Err(refusal)
            }
        }
    }

    /// The entry of `key`, made (with the policy of `key`'s name) if the table has none.
    fn host(&self, key: &BudgetKey) -> Arc<Host> {
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
                let drained: Vec<Waiter> = state.queue.drain(..).collect();
                for _ in &drained {
                    state.stats.refused(&Refusal::ShuttingDown);
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
    pub(crate) fn store(&self) -> Option<&Arc<crate::shared::Store>> {
        self.budget.store()
    }

    /// How many hosts are in the table.
    pub fn host_count(&self) -> usize {
        self.hosts.len()
    }
}

/// A place in a host's queue. Dropped before [`QueuedTurn::forget`], it leaves the queue.
struct QueuedTurn {
    host: Arc<Host>,
    id: u64,
}

impl QueuedTurn {
    fn forget(mut self) {
        self.id = u64::MAX;
    }
}

impl Drop for QueuedTurn {
    fn drop(&mut self) {
        if self.id == u64::MAX {
            return;
        }
        let mut state = self.host.lock();
        if let Some(pos) = state.queue.iter().position(|w| w.id == self.id) {
            let removed = state.queue.remove(pos);
            drop(state);
            drop(removed);
            self.host.wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests;
