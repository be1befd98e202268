//! Seeing and steering the host table: snapshots for `/hosts` and `/metrics`, operator actions,
//! reloaded policies, and the records that outlive a restart.
//!
//! Everything here takes the same per-host lock as the request path, briefly, and wakes the host's
//! dispatcher when a change could let a request leave sooner or must refuse the queue.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::herald::{Look, RateWhy, Source};
use super::host::{Host, Waiter};
use super::refusal::refuse_queue;
use super::{BudgetKey, HostStats, Limiter, OpenSockets, Refusal, ShadowCounts, WaitReason};
use crate::config::{Config, HostPolicy, KeyMode};
use crate::pacing::policy::{Cooldown, CooldownCause, Pacing, PacingRecord};
use crate::pacing::ratelimit::NamedPolicy;
use crate::pacing::robots_pacing::VisitWindow;
use crate::store::StoreAction;
use crate::wire::host_key::host_key;

/// One host as the operator sees it.
#[derive(Debug, Clone)]
pub struct HostSnapshot {
    /// `host:port`, or the domain or address several names share.
    pub key: String,
    /// What the key was made from (`key`).
    pub kind: KeyMode,
    /// The host part (of the first name, for a shared key).
    pub host: String,
    /// The port (of the first name, for a shared key).
    pub port: u16,
    /// For a shared key: the names (`host:port`) seen sharing it, in order.
    pub names: Vec<String>,
    /// More names shared it than `names` lists.
    pub names_truncated: bool,
    /// Its resolved policy.
    pub policy: Arc<HostPolicy>,
    /// The rate in effect (after the operator's rate and the server's caps).
    pub rate: f64,
    /// courtesy's own (adaptive) rate.
    pub own_rate: f64,
    /// Requests waiting.
    pub queued: usize,
    /// The jobs with requests waiting, and how many each (empty while nothing waits).
    pub waiting_by_job: Vec<(String, usize)>,
    /// Requests in flight.
    pub in_flight: u32,
    /// What keeps requests from leaving: a cooldown or an operator's pause.
    pub block: Option<Cooldown>,
    /// Time left in `block`.
    pub block_remaining: Option<Duration>,
    /// Time left in an operator's pause (even under a longer cooldown).
    pub operator_pause_remaining: Option<Duration>,
    /// The operator's rate, if set.
    pub rate_override: Option<f64>,
    /// Whether that rate was forced past the config's ceiling.
    pub forced: bool,
    /// Counters.
    pub stats: HostStats,
    /// WebSockets open to the host now (joined after a `101`; they hold no concurrency slot).
    pub websockets_open: u32,
    /// For a report-only host (`enforce = false`), what would have happened so far.
    pub shadow: Option<ShadowCounts>,
    /// With `max_bytes_per_second`: the byte debt (bytes) and the time until it is paid back
    /// (when the host's next turn may start, as far as bytes go).
    pub byte_debt: Option<(u64, Duration)>,
    /// With a shared budget: this instance's allowance of the host (turns leased ahead): turns
    /// left, slots held, slots in use; `None` when it holds none.
    pub ahead: Option<(u32, u32, u32)>,
    /// What the host's own pacing makes its next request wait for, and how long from now
    /// (`None`: a token is free now): the rate, Crawl-delay, a byte debt, a cooldown or pause.
    pub next_turn: Option<(Duration, WaitReason)>,
    /// While requests wait: what the first in line waits for now (the dispatcher's last look:
    /// also a slot, a global cap, the shared store).
    pub front_waits: Option<WaitReason>,
    /// The ceiling on requests in flight now: `concurrency`, or the server's `concurrency`
    /// policy if lower.
    pub concurrency_cap: u32,
    /// The RateLimit policies the host last announced, as written (name, quota, unit,
    /// partition key, counters).
    pub server_policies: Option<Arc<[NamedPolicy]>>,
    /// The rate robots.txt's delay caps the host at (1 / Crawl-delay or Request-rate interval).
    pub robots_cap: Option<f64>,
    /// robots.txt's Visit-time window (`0600-0845 UTC`), if any.
    pub visit_time: Option<String>,
}

impl HostSnapshot {
    /// One word for the host's state: `paused`, `cooling_down`, `queued`, `active` or `idle`.
    pub fn state(&self) -> &'static str {
        match &self.block {
            Some(b) if b.cause == CooldownCause::Operator => "paused",
            Some(_) => "cooling_down",
            None if self.queued > 0 => "queued",
            None if self.in_flight > 0 => "active",
            None => "idle",
        }
    }
}

/// What an operator can do to a host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OperatorAction {
    /// Let nothing leave for this long (requests get `on_cooldown`'s answer).
    Pause(Duration),
    /// End an operator's pause (a cooldown the server asked for still runs).
    Resume,
    /// Use this rate; above the config's ceiling only when forced.
    SetRate {
        /// Requests per second.
        rate: f64,
        /// Allow a rate above the ceiling.
        force: bool,
    },
    /// Go back to courtesy's own rate.
    ClearRate,
}

/// Why an operator action was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OperatorError {
    /// The rate is above the config's ceiling and was not forced.
    #[error("rate {rate} is above this host's ceiling of {ceiling} (max_rate when adaptive, else rate); add ?force=true to override")]
    AboveCeiling {
        /// What was asked.
        rate: f64,
        /// The ceiling.
        ceiling: f64,
    },
    /// Not a usable rate.
    #[error("rate must be a number > 0, got {0}")]
    BadRate(f64),
}

/// What a restart must not forget about one host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostRecord {
    /// The host part of the key (of the first name, for a shared key).
    pub host: String,
    /// The port.
    pub port: u16,
    /// A key several names share (a domain or an address) and what it was made from; `None`:
    /// `host:port`.
    pub shared_key: Option<(String, KeyMode)>,
    /// The pacing state worth keeping.
    pub pacing: PacingRecord,
    /// Whether the operator's rate was forced.
    pub forced: bool,
}

impl Limiter {
    /// Every known host, sorted by key.
    pub fn snapshots(&self) -> Vec<HostSnapshot> {
        let hosts: Vec<Arc<Host>> = self.hosts.iter().map(|e| e.value().clone()).collect();
        let mut out: Vec<HostSnapshot> = hosts
            .iter()
            .map(|h| snapshot_of(h, &self.sockets))
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// Requests waiting for a turn, by job, all hosts together (for `/jobs` and the job metrics).
    pub fn waiting_by_job(&self) -> std::collections::HashMap<String, usize> {
        let mut waiting = std::collections::HashMap::new();
        let hosts: Vec<Arc<Host>> = self.hosts.iter().map(|e| e.value().clone()).collect();
        for host in hosts {
            let state = host.lock();
            for (job, n) in state.queue().waiting_by_job() {
                *waiting.entry(job.to_string()).or_insert(0) += n;
            }
        }
        waiting
    }

    /// One host, if known.
    pub fn snapshot(&self, host: &str, port: u16) -> Option<HostSnapshot> {
        self.snapshot_by_key(&host_key(host, port))
    }

    /// The budget with this table key (`host:port`, a domain or an address), if known.
    pub fn snapshot_by_key(&self, key: &str) -> Option<HostSnapshot> {
        let entry = self.hosts.get(key)?.value().clone();
        Some(snapshot_of(&entry, &self.sockets))
    }

    /// The key of the known budget whose table key is `key` (`host:port`, a domain or an
    /// address).
    pub fn known_key(&self, key: &str) -> Option<BudgetKey> {
        let host = self.hosts.get(key)?.value().clone();
        let state = host.lock();
        let (name, port) = host.policy_name(&state);
        Some(BudgetKey {
            key: host.key.to_string(),
            kind: host.kind,
            host: name,
            port,
        })
    }

    /// Applies an operator's action to `host`:`port` (known or not) and returns the host after it.
    pub fn operate(
        &self,
        host: &str,
        port: u16,
        action: OperatorAction,
    ) -> Result<HostSnapshot, OperatorError> {
        self.operate_on(&BudgetKey::of_host(host, port), action)
    }

    /// Applies an operator's action to the budget of `key` (known or not) and returns it after.
    pub fn operate_on(
        &self,
        key: &BudgetKey,
        action: OperatorAction,
    ) -> Result<HostSnapshot, OperatorError> {
        let entry = loop {
            let entry = self.host(key);
            if !entry.lock().is_retired() {
                break entry;
            }
        };
        let key = &key.key;
        let now = Instant::now();
        let mut refused: Vec<(Waiter, Refusal)> = Vec::new();
        {
            let mut state = entry.lock();
            state.touch(now);
            let rate_before = state.pacing().effective_rate(now);
            match action {
                OperatorAction::Pause(length) => {
                    state.operator_pause(now + length);
                    refused = refuse_queue(&mut state, now);
                }
                OperatorAction::Resume => state.operator_resume(),
                OperatorAction::SetRate { rate, force } => {
                    if !rate.is_finite() || rate <= 0.0 {
                        return Err(OperatorError::BadRate(rate));
                    }
                    let ceiling = ceiling(state.policy());
                    if rate > ceiling && !force {
                        return Err(OperatorError::AboveCeiling { rate, ceiling });
                    }
                    state.set_rate_override(Some(rate), now);
                    state.set_forced(rate > ceiling);
                }
                OperatorAction::ClearRate => {
                    state.set_rate_override(None, now);
                    state.set_forced(false);
                }
            }
            let herald = self.herald();
            herald.look_at(&entry.key, &state, (Look::Operator, Source::Local), now);
            let why = (RateWhy::Operator, Source::Local);
            herald.rate_moved(&entry.key, (&state, rate_before), why, now);
        }
        warn!(host = %key, ?action, "operator override");
        for (waiter, refusal) in refused {
            let _ = waiter.reply.send(Err(refusal));
        }
        entry.wake.notify_one();
        let shared_action = match action {
            OperatorAction::Pause(length) => StoreAction::Pause(length),
            OperatorAction::Resume => StoreAction::Resume,
            OperatorAction::SetRate { rate, .. } => StoreAction::Rate(Some(rate)),
            OperatorAction::ClearRate => StoreAction::Rate(None),
        };
        self.budget.operator_changed(&entry.key, shared_action);
        Ok(snapshot_of(&entry, &self.sockets))
    }

    /// Caps `host`:`port` at `rate` (1 / robots.txt Crawl-delay) or lifts the cap; returns
    /// whether that changed anything.
    pub fn set_robots_cap(&self, host: &str, port: u16, rate: Option<f64>) -> bool {
        self.set_robots_cap_for(&BudgetKey::of_host(host, port), rate)
    }

    /// Caps the budget of `key` at `rate`, the Crawl-delay of `key`'s name, or lifts that name's
    /// cap; a budget several names share keeps to the strictest of theirs. Returns whether that
    /// changed anything.
    pub fn set_robots_cap_for(&self, key: &BudgetKey, rate: Option<f64>) -> bool {
        self.put_robots(key, rate, None).0
    }

    /// Puts what robots.txt asks of the budget of `key` in force in one look at the host: the
    /// cap at `rate` (as [`Limiter::set_robots_cap_for`]) and the Visit-time `window` (UTC;
    /// outside it the host is closed as by a pause: requests are held or get the local 429 as
    /// `on_cooldown` says). Returns whether each changed.
    pub(crate) fn set_robots_pacing_for(
        &self,
        key: &BudgetKey,
        rate: Option<f64>,
        window: Option<VisitWindow>,
    ) -> (bool, bool) {
        self.put_robots(key, rate, Some(window))
    }

    /// The cap at `rate` and, when `window` is given, the Visit-time window, put in force on
    /// the budget of `key` under one lock; the dispatcher woken when either changed.
    fn put_robots(
        &self,
        key: &BudgetKey,
        rate: Option<f64>,
        window: Option<Option<VisitWindow>>,
    ) -> (bool, bool) {
        let entry = self.host(key);
        let mut state = entry.lock();
        let rate = match state.names_mut() {
            Some(names) => names.set_cap(key, rate),
            None => rate,
        };
        let now = Instant::now();
        let capped = state.pacing().robots_cap() != rate;
        if capped {
            let before = state.pacing().effective_rate(now);
            state.set_robots_cap(rate, now);
            let why = (RateWhy::Robots, Source::Local);
            self.herald()
                .rate_moved(&entry.key, (&state, before), why, now);
        }
        let window = window.filter(|w| state.pacing().robots_visit() != *w);
        let closed = window.is_some();
        if let Some(window) = window {
            state.set_robots_visit(window, now);
            let why = (Look::Change, Source::Local);
            self.herald().look_at(&entry.key, &state, why, now);
        }
        drop(state);
        if capped || closed {
            entry.wake.notify_one();
        }
        (capped, closed)
    }

    /// Switches to a new config, for everyone sharing the limiter's [`crate::config::LiveConfig`]:
    /// every known host gets its new policy at once (queued requests keep their place), new hosts
    /// get it from the start.
    pub fn reload(&self, config: Arc<Config>) {
        let old = self.config.replace(config.clone());
        if config.proxy.max_in_flight > old.proxy.max_in_flight {
            self.global
                .add_permits(config.proxy.max_in_flight - old.proxy.max_in_flight);
        } else if config.proxy.max_in_flight < old.proxy.max_in_flight {
            let wanted = old.proxy.max_in_flight - config.proxy.max_in_flight;
            let forgotten = self.global.forget_permits(wanted);
            if forgotten < wanted {
                warn!(
                    max_in_flight = config.proxy.max_in_flight,
                    "requests in flight above the new max_in_flight finish first; the rest of the cut applies at the next restart"
                );
            }
        }
        if let (Some(egress), Some(rate)) = (&self.egress, config.proxy.global_rate) {
            egress.set(rate, config.proxy.global_burst);
        }
        if let (Some(downlink), Some(rate)) = (&self.downlink, config.proxy.global_bytes_per_second)
        {
            downlink.set(rate);
        }
        let hosts: Vec<Arc<Host>> = self.hosts.iter().map(|e| e.value().clone()).collect();
        let now = Instant::now();
        for host in &hosts {
            {
                let mut state = host.lock();
                let (name, port) = host.policy_name(&state);
                let policy = config.policy_for(&name, port);
                state.apply_policy(policy, now);
            }
            host.wake.notify_one();
        }
        info!(source = %config.source, hosts = hosts.len(), "config reloaded");
    }

    /// The hosts whose state differs from a fresh one: cooldowns, pauses, operator rates, learned
    /// rates.
    pub fn records(&self) -> Vec<HostRecord> {
        let now = Instant::now();
        let hosts: Vec<Arc<Host>> = self.hosts.iter().map(|e| e.value().clone()).collect();
        let mut out = Vec::new();
        for host in hosts {
            let state = host.lock();
            let record = state.pacing().record(now);
            let fresh_rate = Pacing::initial_rate(state.policy());
            let worth_keeping = record.cooldown.is_some()
                || record.operator_pause.is_some()
                || record.rate_override.is_some()
                || (record.rate - fresh_rate).abs() > 1e-9;
            if worth_keeping {
                let (name, port) = host.policy_name(&state);
                out.push(HostRecord {
                    shared_key: (host.kind != KeyMode::Host)
                        .then(|| (host.key.to_string(), host.kind)),
                    host: name,
                    port,
                    pacing: record,
                    forced: state.forced(),
                });
            }
        }
        out.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
        out
    }

    /// Puts back what an earlier run saved.
    pub fn restore(&self, records: &[HostRecord]) {
        let now = Instant::now();
        for record in records {
            let key = match &record.shared_key {
                Some((key, kind)) => BudgetKey {
                    key: key.clone(),
                    kind: *kind,
                    host: record.host.clone(),
                    port: record.port,
                },
                None => BudgetKey::of_host(&record.host, record.port),
            };
            let entry = self.host(&key);
            let mut state = entry.lock();
            state.restore(&record.pacing, now);
            let why = (Look::Change, Source::Local);
            self.herald().look_at(&entry.key, &state, why, now);
            state.set_forced(record.forced);
            state.touch(now);
        }
    }
}

/// The highest rate an operator may set without forcing it.
fn ceiling(policy: &HostPolicy) -> f64 {
    if policy.adaptive.enabled {
        policy.adaptive.max_rate
    } else {
        policy.pacing.rate
    }
}

fn snapshot_of(host: &Host, sockets: &OpenSockets) -> HostSnapshot {
    let now = Instant::now();
    let mut state = host.lock();
    let block = state.pacing().block(now);
    let byte_debt = state
        .byte_debt(now)
        .map(|(debt, at)| (debt, at.saturating_duration_since(now)));
    let (name, port) = host.policy_name(&state);
    let (at, why) = state.next_turn(now);
    let next_turn = (at > now).then(|| (at.saturating_duration_since(now), why));
    let front_waits = match state.waits() {
        Some(waits) if !state.queue().is_empty() => Some(waits.waiting_for()),
        _ => None,
    };
    HostSnapshot {
        key: host.key.to_string(),
        kind: host.kind,
        host: name,
        port,
        names: state.names().map(|n| n.list()).unwrap_or_default(),
        names_truncated: state.names().is_some_and(|n| n.truncated),
        policy: state.policy().clone(),
        rate: state.pacing().effective_rate(now),
        own_rate: state.pacing().rate(),
        queued: state.queue().len(),
        waiting_by_job: state
            .queue()
            .waiting_by_job()
            .map(|(job, n)| (job.to_string(), n))
            .collect(),
        in_flight: state.in_flight().current,
        block_remaining: block.map(|b| b.until.saturating_duration_since(now)),
        block,
        operator_pause_remaining: state
            .pacing()
            .operator_paused_until(now)
            .map(|p| p.saturating_duration_since(now)),
        rate_override: state.pacing().rate_override(),
        forced: state.forced(),
        stats: state.stats().clone(),
        websockets_open: sockets.count(&host.key),
        shadow: (!state.policy().scope.enforce)
            .then(|| state.shadow().map(|s| s.counts).unwrap_or_default()),
        byte_debt,
        ahead: state
            .shared()
            .map(|t| t.ahead.view())
            .filter(|&(turns, slots, _)| turns > 0 || slots > 0),
        next_turn,
        front_waits,
        concurrency_cap: state
            .pacing()
            .concurrency_cap(state.policy().pacing.concurrency),
        server_policies: state.pacing().server_policies().cloned(),
        robots_cap: state.pacing().robots_cap(),
        visit_time: state.pacing().robots_visit().map(|w| w.text()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(policy: HostPolicy) -> Arc<Limiter> {
        Limiter::new(Arc::new(Config {
            defaults: Arc::new(policy),
            ..Config::default()
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn pause_refuses_at_once_and_resume_lets_requests_go() {
        let l = limiter(HostPolicy::default());
        let snap = l
            .operate("a.test", 80, OperatorAction::Pause(Duration::from_secs(60)))
            .unwrap();
        assert_eq!(snap.state(), "paused");
        let refused = l.admit(("a.test", 80)).await.unwrap_err();
        assert!(matches!(
            refused,
            Refusal::CoolingDown {
                cause: CooldownCause::Operator,
                ..
            }
        ));
        assert_eq!(l.snapshot("a.test", 80).unwrap().stats.refused_paused, 1);
        l.operate("a.test", 80, OperatorAction::Resume).unwrap();
        let mut p = l.admit(("a.test", 80)).await.unwrap();
        p.mark_sent();
    }

    #[tokio::test(start_paused = true)]
    async fn an_operator_rate_is_bounded_by_the_ceiling_unless_forced() {
        let l = limiter(HostPolicy::default());
        let err = l
            .operate(
                "b.test",
                80,
                OperatorAction::SetRate {
                    rate: 3.0,
                    force: false,
                },
            )
            .unwrap_err();
        assert_eq!(
            err,
            OperatorError::AboveCeiling {
                rate: 3.0,
                ceiling: 1.0
            }
        );
        let snap = l
            .operate(
                "b.test",
                80,
                OperatorAction::SetRate {
                    rate: 3.0,
                    force: true,
                },
            )
            .unwrap();
        assert_eq!((snap.rate, snap.forced), (3.0, true));
        let snap = l
            .operate(
                "b.test",
                80,
                OperatorAction::SetRate {
                    rate: 0.5,
                    force: false,
                },
            )
            .unwrap();
        assert_eq!((snap.rate, snap.forced), (0.5, false));
        let snap = l.operate("b.test", 80, OperatorAction::ClearRate).unwrap();
        assert_eq!(snap.rate, 1.0);
    }

    #[tokio::test(start_paused = true)]
    async fn reload_applies_new_policies_to_queued_requests() {
        let l = limiter({
            let mut p = HostPolicy::default();
            p.pacing.rate = 0.1;
            p
        });
        let mut first = l.admit(("c.test", 80)).await.unwrap();
        first.mark_sent();
        drop(first);
        let waiting = {
            let l = l.clone();
            tokio::spawn(async move { l.admit(("c.test", 80)).await.map(|mut p| p.mark_sent()) })
        };
        tokio::task::yield_now().await;
        assert_eq!(l.snapshot("c.test", 80).unwrap().queued, 1);
        let start = Instant::now();
        l.reload(Arc::new(Config {
            defaults: Arc::new({
                let mut p = HostPolicy::default();
                p.pacing.rate = 10.0;
                p
            }),
            ..Config::default()
        }));
        waiting.await.unwrap().unwrap();
        // At 0.1/s the next token was 10 s away; at 10/s it is 0.1 s away (tokens earned so far
        // at the old rate are kept).
        assert!(
            start.elapsed() <= Duration::from_millis(100),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn records_keep_what_differs_from_fresh_and_restore_it() {
        let l = limiter(HostPolicy::default());
        l.operate(
            "d.test",
            80,
            OperatorAction::Pause(Duration::from_secs(100)),
        )
        .unwrap();
        l.admit(("e.test", 80)).await.unwrap().mark_sent();
        let records = l.records();
        assert_eq!(records.len(), 1, "only the paused host differs from fresh");
        let other = limiter(HostPolicy::default());
        other.restore(&records);
        let snap = other.snapshot("d.test", 80).unwrap();
        assert_eq!(snap.state(), "paused");
        assert_eq!(
            snap.operator_pause_remaining,
            Some(Duration::from_secs(100))
        );
    }
}
