//! The shared budget's store: Redis (or Valkey), where several instances with the same
//! `[shared] redis_url` and `key_prefix` keep one budget per host, so that the site sees one
//! courtesy.
//!
//! One script call reserves each turn (`reserve`, the only round trip before a request), and
//! releases the host's turns that ended meanwhile (`releases.rs`); a lesson (`report`) runs after
//! the answer, off the request's path. Pub/sub hints
//! (`hints.rs`) wake an instance early (a slot came free, a cooldown began elsewhere) but are
//! never the truth: the store is. When the store fails or is slower than `timeout_ms`, the instance
//! falls back to its share of every budget (`share`) and keeps every cooldown it knows; the
//! heartbeat (`heartbeat.rs`) finds the store again and the instance rejoins without a burst.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the store's calls and the mode (shared or fallback) |
//! | `connection.rs` | how the store is reached: one server, a Redis Cluster, or Sentinel's master |
//! | `scripts.rs` | the Lua, with the semantics of every field |
//! | `calls.rs` | each script's call as a type: its named fields, the one writer of their order, the reader of its reply |
//! | `hints.rs` | the pub/sub subscriber |
//! | `releases.rs` | ended turns: carried by the host's next reservation, or released on their own |
//! | `heartbeat.rs` | live instances, lease renewal, finding the store again |
//!
//! It decides nothing about pacing itself: the limiter asks it for turns through its budget seam.

#[cfg(test)]
mod ahead_tests;
mod calls;
mod connection;
mod heartbeat;
mod hints;
mod releases;
mod scripts;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use redis::Value;
use tokio::time::Instant;

use crate::config::SharedSettings;
use crate::pacing::policy::CooldownCause;
use crate::util::locks::lock;
use calls::Call;

pub(crate) use heartbeat::run_heartbeat;
pub(crate) use hints::{run_hints, Hint};
pub(crate) use releases::run_releases;

/// The fewest turns an allowance holds (the script's `AHEAD_MIN`): fewer would not pay for the
/// round trip that settles it.
pub(crate) const AHEAD_MIN: u32 = 16;

/// How far ahead a turn may be reserved. Beyond it the instance sleeps and asks again: a turn
/// reserved long before it is used holds a concurrency slot and cannot learn of a cooldown that
/// starts meanwhile except through a hint.
const HORIZON: Duration = Duration::from_secs(1);

/// How long an instance's place in a host's waiting list lasts unless it asks again (it asks
/// at least four times as often).
const WAITING_PLACE: Duration = Duration::from_secs(3);

/// How long an idle host's shared state outlives its last use: the learned rate is worth keeping
/// a day.
const IDLE_TTL: Duration = Duration::from_secs(24 * 3600);

/// How long the shared state of a host that has not answered yet outlives its last use. Any
/// client may name any `host:port`; one that never resolves or connects has nothing worth a day
/// in the store, and a day of keys per invented name would let a client fill a team's Redis
/// (issue 35: 2,000 names in under a second). A minute covers what the state is for while the
/// host is being tried: every call while requests flow extends it, so pacing, leases and a
/// cooldown (which keeps its key until it ends) are never cut short; a host's first answer
/// (`RedisStore::report`, sent once per host by each instance) raises it to [`IDLE_TTL`], and a
/// shorter TTL never shortens a longer one another instance set (`keep_at_least`).
pub(crate) const UNANSWERED_TTL: Duration = Duration::from_secs(60);

/// The store of one group of instances.
#[derive(Debug)]
pub(crate) struct RedisStore {
    settings: SharedSettings,
    /// How the store is reached (`connection.rs`).
    conn: connection::Connection,
    /// This instance's id in the store (leases and the live set).
    instance: String,
    /// The pub/sub channel of the hints.
    channel: String,
    fallback: AtomicBool,
    /// Counts the times this instance rejoined the store; a host's first turn after a rejoin
    /// starts with an empty bucket.
    epoch: AtomicU32,
    /// The most live instances counted by the recent heartbeats.
    seen: AtomicU32,
    /// The live instances counted by the last heartbeat.
    live_now: AtomicU32,
    next_lease: AtomicU64,
    /// Leases in flight, by host, for the heartbeat to renew.
    live: Mutex<HashMap<Arc<str>, Vec<String>>>,
    /// Turns that ended, by host, for the host's next reservation to release (`releases.rs`),
    /// and whether each request left.
    ended: Mutex<releases::EndedTurns>,
    /// Wakes the releaser of turns no reservation carries.
    turn_ended: tokio::sync::Notify,
    /// The store's clock as last read (µs) and the local instant of that reading, for the
    /// deadlines of reservations.
    clock: Mutex<Option<(Instant, i64)>>,
    /// Counts the times this instance fell back: a host's first local turn after a fall starts
    /// with an empty bucket, since its shared turns just went.
    falls: AtomicU32,
    /// Why this instance is in fallback (the first word of the cause) and when that was logged.
    fallen_for: Mutex<Option<(String, Instant)>>,
    /// Wakes every host waiting on the store (a slot, the horizon) when the mode changes.
    mode_changed: tokio::sync::Notify,
    /// This store, for the leases it grants (a dropped lease releases itself through it).
    me: std::sync::Weak<RedisStore>,
    scripts: Scripts,
    /// Round trips to the store, for `/metrics`.
    pub(crate) round_trip: Histogram,
    /// Failed or timed-out calls by operation, for `/metrics`.
    pub(crate) errors: Family<OpLabel, Counter>,
}

/// The `op` label of `courtesy_shared_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub(crate) struct OpLabel {
    /// The call that failed.
    pub(crate) op: Op,
}

impl OpLabel {
    /// A family with every operation's counter at zero from the start, so that `rate()` and
    /// the alerts see a store that never failed rather than no data at all.
    fn family() -> Family<OpLabel, Counter> {
        let family = Family::default();
        for op in Op::ALL {
            let _ = family.get_or_create(&OpLabel { op });
        }
        family
    }
}

/// A call to the store: one per script.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Op {
    Reserve,
    Report,
    Release,
    Operator,
    Heartbeat,
    Renew,
    Withdraw,
    Bill,
}

impl Op {
    /// Every operation (a new one is added here too, for its series at zero).
    const ALL: [Op; 8] = [
        Op::Reserve,
        Op::Report,
        Op::Release,
        Op::Operator,
        Op::Heartbeat,
        Op::Renew,
        Op::Withdraw,
        Op::Bill,
    ];

    /// Its label value.
    fn as_str(self) -> &'static str {
        match self {
            Op::Reserve => "reserve",
            Op::Report => "report",
            Op::Release => "release",
            Op::Operator => "operator",
            Op::Heartbeat => "heartbeat",
            Op::Renew => "renew",
            Op::Withdraw => "withdraw",
            Op::Bill => "bill",
        }
    }
}

impl prometheus_client::encoding::EncodeLabelValue for Op {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelValueEncoder,
    ) -> Result<(), std::fmt::Error> {
        self.as_str().encode(encoder)
    }
}

/// Every script, ready to run.
#[derive(Debug)]
struct Scripts {
    reserve: redis::Script,
    release: redis::Script,
    report: redis::Script,
    operator: redis::Script,
    heartbeat: redis::Script,
    renew: redis::Script,
    withdraw: redis::Script,
    bill: redis::Script,
}

impl Scripts {
    /// The script of `op`.
    fn of(&self, op: Op) -> &redis::Script {
        match op {
            Op::Reserve => &self.reserve,
            Op::Report => &self.report,
            Op::Release => &self.release,
            Op::Operator => &self.operator,
            Op::Heartbeat => &self.heartbeat,
            Op::Renew => &self.renew,
            Op::Withdraw => &self.withdraw,
            Op::Bill => &self.bill,
        }
    }
}

/// What the store says about one host besides a turn: the learned rate and an operator's rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SharedView {
    /// The rate the instances learned together.
    pub(crate) rate: f64,
    /// An operator's rate, set through any instance.
    pub(crate) rate_override: Option<f64>,
}

/// The store's answer to "may this host's next request go?". `L`, a reserved turn: a [`Lease`],
/// or as the script's reply gives it (`calls::ReservedTurn`) until it is one.
#[derive(Debug)]
pub(crate) enum Reservation<L = Lease> {
    /// A turn is reserved `wait` from now.
    Go {
        /// How long until the turn.
        wait: Duration,
        /// The concurrency slot it holds.
        lease: L,
        /// The turns reserved after it in the same call, each with how long until it.
        more: Vec<(Duration, L)>,
        /// The host's shared state.
        view: SharedView,
    },
    /// An allowance: this many turns and concurrency slots, spent here without a round trip
    /// each until the instance comes back (`scripts::RESERVE`, "Allowances").
    Ahead {
        /// Turns to spend.
        tokens: u32,
        /// Concurrency slots they may use at once.
        slots: u32,
        /// The host's shared state.
        view: SharedView,
    },
    /// The host is closed for `remaining` more.
    Cool {
        /// How long it stays closed.
        remaining: Duration,
        /// Why.
        cause: CooldownCause,
        /// The host's shared state.
        view: SharedView,
    },
    /// Every concurrency slot is taken, or instances that waited longer come first: ask again
    /// in `retry_in` or at a hint. This instance holds a place in the host's waiting list.
    Busy {
        /// When to ask again if no hint comes first.
        retry_in: Duration,
    },
    /// The call wanted no turn: it only settled the instance's allowance.
    Settled,
    /// The next turn is beyond the reservation horizon: ask again in `retry_in`.
    Later {
        /// When to ask again.
        retry_in: Duration,
    },
}

impl<T> Reservation<T> {
    /// The same answer with each reserved turn made an `L` by `make`, given the turn's place
    /// (`0` for the first).
    fn map_turns<L>(self, mut make: impl FnMut(usize, T) -> L) -> Reservation<L> {
        match self {
            Reservation::Go {
                wait,
                lease,
                more,
                view,
            } => Reservation::Go {
                wait,
                lease: make(0, lease),
                more: (more.into_iter().enumerate())
                    .map(|(i, (after, turn))| (after, make(i + 1, turn)))
                    .collect(),
                view,
            },
            Reservation::Ahead {
                tokens,
                slots,
                view,
            } => Reservation::Ahead {
                tokens,
                slots,
                view,
            },
            Reservation::Cool {
                remaining,
                cause,
                view,
            } => Reservation::Cool {
                remaining,
                cause,
                view,
            },
            Reservation::Busy { retry_in } => Reservation::Busy { retry_in },
            Reservation::Settled => Reservation::Settled,
            Reservation::Later { retry_in } => Reservation::Later { retry_in },
        }
    }
}

/// A reserved turn's concurrency slot in the store, released when the turn ends: by
/// [`RedisStore::release`], or, on any path that forgets to, when it is dropped (as a turn whose
/// request may have left: no token is given back). A lease no live instance holds would keep
/// one of the host's slots in the store until it expired (`lease_seconds`).
#[derive(Debug)]
pub(crate) struct Lease {
    turn: Option<LeaseTurn>,
    store: std::sync::Weak<RedisStore>,
}

/// What the store needs to release a turn.
#[derive(Debug)]
pub(super) struct LeaseTurn {
    host: Arc<str>,
    member: String,
    /// The `tat` the reservation wrote and its interval, to undo it if the turn is never used.
    tat: i64,
    interval: i64,
    /// When the turn starts on the store's clock (µs), for the wave rule.
    starts_us: i64,
}

impl Lease {
    /// When the turn starts on the store's clock (µs), for the wave rule.
    pub(crate) fn starts_us(&self) -> i64 {
        self.turn.as_ref().map_or(0, |t| t.starts_us)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let (Some(turn), Some(store)) = (self.turn.take(), self.store.upgrade()) {
            store.end(turn, true);
        }
    }
}

/// What one answer taught, in the terms the store keeps (see `scripts::REPORT`).
#[derive(Debug, Clone)]
pub(crate) struct Lesson {
    /// A cooldown that started or grew, and its cause.
    pub(crate) cooldown: Option<(Duration, CooldownCause)>,
    /// The instance's rate before and after the answer.
    pub(crate) rate_before: f64,
    /// See `rate_before`.
    pub(crate) rate_after: f64,
    /// A standing cap on the rate (Crawl-delay, a RateLimit policy), shared for an hour.
    pub(crate) cap: Option<f64>,
    /// Whether the host has answered (this answer or an earlier one): see [`Limits::answered`].
    pub(crate) answered: bool,
}

/// How long a host's keys outlive a call about it when nothing else uses them: a day once it
/// has answered, a minute until then ([`UNANSWERED_TTL`]).
fn idle_ttl(answered: bool) -> Duration {
    if answered {
        IDLE_TTL
    } else {
        UNANSWERED_TTL
    }
}

/// The limits of one host that a reservation needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The rate this instance would use (its caps included).
    pub(crate) rate: f64,
    /// The configured rate.
    pub(crate) configured_rate: f64,
    /// Burst and concurrency as configured (for all instances together).
    pub(crate) burst: u32,
    /// See `burst`.
    pub(crate) concurrency: u32,
    /// Whether this host's turn is the first since this instance rejoined the store.
    pub(crate) rejoin: bool,
    /// The byte budget (`max_bytes_per_second`, its burst), for all instances together.
    pub(crate) bytes: Option<(u64, u64)>,
    /// Whether the host has answered here (a response of any status came back): until then its
    /// keys live [`UNANSWERED_TTL`], not [`IDLE_TTL`].
    pub(crate) answered: bool,
}

/// What an instance says of its allowance of a host with a reservation (`scripts::RESERVE`,
/// "Allowances"): in absolute terms, so that a late copy of an older call changes nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AheadAsk {
    /// Orders the calls: the store ignores one not above the last it applied.
    pub(crate) seq: u64,
    /// Turns spent from allowances of this host since the record began (a running count).
    pub(crate) spent: u64,
    /// Turns wanted ahead (`0`: none, give everything back).
    pub(crate) want_tokens: u32,
    /// Slots wanted with them.
    pub(crate) want_slots: u32,
    /// Slots that still carry requests sent on an allowance: held until they end.
    pub(crate) in_use: u32,
}

/// The bounds a reported rate moves within.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RateBounds {
    /// See `HostPolicy::min_rate`.
    pub(crate) min_rate: f64,
    /// The highest rate adaptation may reach.
    pub(crate) ceiling: f64,
    /// The configured rate.
    pub(crate) configured_rate: f64,
    /// The configured burst.
    pub(crate) burst: u32,
}

/// An operator's action as the store applies it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum StoreAction {
    /// Pause for this long.
    Pause(Duration),
    /// End the operator's pause.
    Resume,
    /// Pin the rate, or (`None`) return to the learned one.
    Rate(Option<f64>),
}

/// The store could not be used (an error, or no answer within `timeout_ms`).
#[derive(Debug)]
pub(crate) struct StoreDown(pub(crate) String);

impl RedisStore {
    /// A store for `settings`; nothing is connected yet (the first call connects, and a store
    /// that cannot be reached starts this instance in fallback, not as a start-up failure).
    pub(crate) fn new(settings: &SharedSettings) -> Result<Arc<RedisStore>, String> {
        // rediss:// goes through rustls, on the same provider as the rest of courtesy.
        let _ = crate::upstream::tls::default_provider().install_default();
        let conn = connection::Connection::open(settings)?;
        let instance = format!("{:016x}", rand::random::<u64>());
        Ok(Arc::new_cyclic(|me| RedisStore {
            channel: format!("{}:hints", settings.key_prefix),
            settings: settings.clone(),
            conn,
            instance,
            fallback: AtomicBool::new(false),
            epoch: AtomicU32::new(0),
            seen: AtomicU32::new(0),
            live_now: AtomicU32::new(0),
            next_lease: AtomicU64::new(0),
            live: Mutex::new(HashMap::new()),
            ended: Mutex::new(HashMap::new()),
            turn_ended: tokio::sync::Notify::new(),
            clock: Mutex::new(None),
            falls: AtomicU32::new(0),
            mode_changed: tokio::sync::Notify::new(),
            fallen_for: Mutex::new(None),
            me: me.clone(),
            scripts: Scripts {
                reserve: scripts::script(<calls::ReserveCall as Call>::SCRIPT),
                release: scripts::script(<calls::ReleaseCall as Call>::SCRIPT),
                report: scripts::script(<calls::ReportCall as Call>::SCRIPT),
                operator: scripts::script(<calls::OperatorCall as Call>::SCRIPT),
                heartbeat: scripts::script(<calls::HeartbeatCall as Call>::SCRIPT),
                renew: scripts::script(<calls::RenewCall as Call>::SCRIPT),
                withdraw: scripts::script(<calls::WithdrawCall as Call>::SCRIPT),
                bill: scripts::script(<calls::BillCall as Call>::SCRIPT),
            },
            round_trip: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            errors: OpLabel::family(),
        }))
    }

    /// This instance's id in the store (a `free` hint may name it).
    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    /// Whether the instance keeps its share of the budget locally because the store failed.
    pub(crate) fn in_fallback(&self) -> bool {
        self.fallback.load(Ordering::Acquire)
    }

    /// The fall count: a host whose last turn was before this instance's latest fall takes its
    /// first local turn with an empty bucket (its shared turns just went).
    pub(crate) fn falls(&self) -> u32 {
        self.falls.load(Ordering::Acquire)
    }

    /// Resolves when this instance falls back or rejoins after the call (a future created before
    /// the change sees it, polled or not).
    pub(crate) fn mode_changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.mode_changed.notified()
    }

    /// The rejoin count: a host whose last turn was in an earlier epoch starts with an empty
    /// bucket.
    pub(crate) fn epoch(&self) -> u32 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The share of each budget this instance keeps in fallback: `1/instances`, or one over the
    /// most live instances seen recently.
    pub(crate) fn share(&self) -> f64 {
        1.0 / f64::from(self.expected().max(1))
    }

    /// How many instances share the budgets: `instances`, or the most seen recently (0 before
    /// the store was ever reached).
    fn expected(&self) -> u32 {
        self.settings
            .instances
            .unwrap_or_else(|| self.seen.load(Ordering::Acquire))
    }

    /// The part of each shared budget the instances on the store may use together: all of it
    /// while every instance expected (`instances`, or the most seen recently) is live on the
    /// store; less while some are not, because an instance cut off from the store keeps its
    /// share locally (so that all of them together never exceed one budget).
    pub(crate) fn live_part(&self) -> f64 {
        let expected = self.expected();
        let live = self.live_now.load(Ordering::Acquire);
        if expected == 0 || live == 0 || live >= expected {
            1.0
        } else {
            f64::from(live) / f64::from(expected)
        }
    }

    /// How many live instances the last heartbeats counted.
    pub(crate) fn instances_seen(&self) -> u32 {
        self.seen.load(Ordering::Acquire)
    }

    /// The settings in force.
    pub(crate) fn settings(&self) -> &SharedSettings {
        &self.settings
    }

    /// The keys' prefix (`[shared] key_prefix`).
    fn prefix(&self) -> &str {
        &self.settings.key_prefix
    }

    /// Runs one script call (`calls.rs`) within the timeout and reads its reply; a store that
    /// fails or does not answer switches this instance to fallback, a reply of another shape is
    /// an error of its own.
    async fn run<C: calls::Call + Sync>(&self, call: &C) -> Result<C::Reply, StoreDown> {
        let value = self.send(call).await?;
        read_reply::<C>(value)
    }

    /// Sends one script call within the timeout (see [`RedisStore::run`]): its reply, unread.
    async fn send<C: calls::Call + Sync>(&self, call: &C) -> Result<Value, StoreDown> {
        let mut invocation = self.scripts.of(C::OP).prepare_invoke();
        call.write(&mut invocation);
        self.call(C::OP, &invocation).await
    }

    /// Runs one script call within the timeout; a failure switches this instance to fallback.
    async fn call(
        &self,
        op: Op,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<Value, StoreDown> {
        let started = Instant::now();
        let result =
            tokio::time::timeout(self.settings.timeout, self.conn.script(invocation)).await;
        let error = match result {
            Ok(Ok(value)) => {
                self.round_trip.observe(started.elapsed().as_secs_f64());
                return Ok(value);
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {} ms", self.settings.timeout.as_millis()),
        };
        self.errors.get_or_create(&OpLabel { op }).inc();
        self.fall_back(&error);
        Err(StoreDown(error))
    }

    /// Switches to fallback (once, logged at `warn`).
    pub(crate) fn fall_back(&self, why: &str) {
        if !self.fallback.swap(true, Ordering::AcqRel) {
            self.falls.fetch_add(1, Ordering::AcqRel);
            // Hosts waiting on the store (for a slot, the horizon, their place in line) look
            // again at once, and take this instance's share locally.
            self.mode_changed.notify_waiters();
            if self.settings.instances.is_none() && self.instances_seen() == 0 {
                tracing::warn!(
                    "the store was never reached, so this instance does not know how many share \
                     the budgets and keeps all of each: set [shared] instances"
                );
            }
            tracing::warn!(
                store = %self.settings.redacted_url(),
                share = self.share(),
                "shared budget store unreachable ({why}): each host keeps this instance's share \
                 of its budget until it answers again"
            );
            *lock(&self.fallen_for) = Some((kind_of(why), Instant::now()));
            return;
        }
        // Still away, for another reason (a timeout, then a refusal of the ACL): said too, at
        // most every ten seconds, so that the log shows what keeps the store away.
        let mut last = lock(&self.fallen_for);
        let kind = kind_of(why);
        if last
            .as_ref()
            .is_some_and(|(k, at)| *k != kind && at.elapsed() >= CAUSE_LOG_EVERY)
        {
            tracing::warn!(
                store = %self.settings.redacted_url(),
                "shared budget store still unreachable, now: {why}"
            );
            *last = Some((kind, Instant::now()));
        }
    }

    /// Loads every script into the store, so that the first calls after a start or a store
    /// restart do not each meet `NOSCRIPT` on the request's path.
    pub(crate) async fn load_scripts(&self) {
        let s = &self.scripts;
        for script in [
            &s.reserve,
            &s.release,
            &s.report,
            &s.operator,
            &s.heartbeat,
            &s.renew,
            &s.withdraw,
            &s.bill,
        ] {
            let loaded = tokio::time::timeout(self.settings.timeout, self.conn.load_script(script));
            if !matches!(loaded.await, Ok(Ok(_))) {
                return;
            }
        }
    }

    /// Switches back to the shared budget after the store answered again (`why`: what answered).
    pub(crate) fn rejoin(&self, why: &str) -> bool {
        let rejoined = self.fallback.swap(false, Ordering::AcqRel);
        if rejoined {
            self.epoch.fetch_add(1, Ordering::AcqRel);
            self.mode_changed.notify_waiters();
            // Turns that ended while the store was away are released now.
            self.turn_ended.notify_one();
            tracing::warn!(
                store = %self.settings.redacted_url(),
                "shared budget store answers again ({why}): back on the shared budget"
            );
        }
        rejoined
    }

    /// Asks the store for the next turn of `host` (one round trip); `waited` is how long this
    /// instance's oldest request for it has waited (its place in the host's waiting list);
    /// `ahead`, this instance's allowance of the host, settled by the same call.
    pub(crate) async fn reserve(
        &self,
        host: &Arc<str>,
        limits: Limits,
        want: u32,
        waited: Duration,
        ahead: Option<AheadAsk>,
    ) -> Result<Reservation, StoreDown> {
        let member = format!(
            "{}:{}",
            self.instance,
            self.next_lease.fetch_add(1, Ordering::Relaxed)
        );
        // The host's turns that ended meanwhile are released by this same call (even one past
        // its deadline); if the call fails they are kept for the next, since a release is
        // idempotent.
        let ended = self.take_ended(host);
        let call = calls::ReserveCall {
            prefix: self.prefix(),
            now: None,
            mine: limits.rate,
            configured_rate: limits.configured_rate,
            burst: limits.burst.max(1),
            concurrency: limits.concurrency.max(1),
            lease_us: micros(self.settings.lease),
            member: &member,
            horizon_us: micros(HORIZON),
            rejoin: limits.rejoin,
            idle_ttl_us: micros(idle_ttl(limits.answered)),
            channel: &self.channel,
            host,
            want,
            who: &self.instance,
            waited_us: micros(waited),
            deadline_us: self.deadline_us(),
            waiting_place_us: micros(WAITING_PLACE),
            ask: ahead,
            byte_rate: limits.bytes.map(|(rate, _)| rate.max(1)),
            byte_burst: limits.bytes.map(|(_, burst)| burst),
            ended: ended
                .iter()
                .map(|(turn, sent, _)| calls::EndedTurn {
                    member: &turn.member,
                    refund: !*sent,
                    tat: turn.tat,
                    interval: turn.interval,
                })
                .collect(),
        };
        let value = match self.send(&call).await {
            Ok(value) => value,
            Err(down) => {
                self.keep_ended(ended);
                return Err(down);
            }
        };
        // A reply of another shape came from a call that ran: its turns were released.
        let reply = read_reply::<calls::ReserveCall>(value)?;
        self.read_clock(reply.now);
        Ok(self.leases(host, &member, reply.reservation))
    }

    /// A reservation's turns made leases of `host` (`member` the first's, `<member>.<k>` the
    /// `k`-th's), and listed as this instance's live ones.
    fn leases(
        &self,
        host: &Arc<str>,
        member: &str,
        reserved: Reservation<calls::ReservedTurn>,
    ) -> Reservation {
        let member_of = |k: usize| match k {
            0 => member.to_string(),
            k => format!("{member}.{}", k + 1),
        };
        let reservation = reserved.map_turns(|k, turn| Lease {
            turn: Some(LeaseTurn {
                host: host.clone(),
                member: member_of(k),
                tat: turn.tat,
                interval: turn.interval,
                starts_us: turn.start,
            }),
            store: self.me.clone(),
        });
        if let Reservation::Go { more, .. } = &reservation {
            let mut live = lock(&self.live);
            let members = live.entry(host.clone()).or_default();
            members.extend((0..=more.len()).map(member_of));
        }
        reservation
    }

    /// The deadline of a call sent now, on the store's clock (µs): the store's time as last
    /// read, moved on by the local time since, plus the timeout. The reading is late by up to
    /// a round trip, so the deadline is early by as much, never late; `0` (none) before the
    /// first reading.
    fn deadline_us(&self) -> i64 {
        match *lock(&self.clock) {
            None => 0,
            Some((at, store_us)) => store_us
                .saturating_add(micros(at.elapsed()))
                .saturating_add(micros(self.settings.timeout)),
        }
    }

    /// The store's clock at the local instant `at` (µs), from the last reading (`0` before
    /// any): when a turn spent from an allowance started, for the wave rule.
    pub(crate) fn clock_at(&self, at: Instant) -> i64 {
        match *lock(&self.clock) {
            None => 0,
            Some((read, store_us)) => {
                let after = micros(at.saturating_duration_since(read));
                let before = micros(read.saturating_duration_since(at));
                store_us.saturating_add(after).saturating_sub(before)
            }
        }
    }

    /// A number above every one this instance used before: orders its allowance's calls.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_lease.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Notes the store's clock as a reply just told it.
    fn read_clock(&self, store_us: i64) {
        if store_us > 0 {
            *lock(&self.clock) = Some((Instant::now(), store_us));
        }
    }

    /// Takes this instance out of `host`'s waiting list (its queue for the host emptied), so
    /// that the others do not wait for a place nobody will use.
    pub(crate) async fn withdraw(&self, host: &str) {
        let call = calls::WithdrawCall {
            prefix: self.prefix(),
            who: &self.instance,
            channel: &self.channel,
            host,
        };
        // A failure leaves the place to expire (`WAITING_PLACE`).
        let _ = self.run(&call).await;
    }

    /// Releases one ended turn with a round trip of its own (see `releases.rs` for the usual
    /// way): frees its slot and, for a request that never left, gives its token back. `false`
    /// when the store did not answer (the turn is still to release).
    async fn release_now(&self, turn: &LeaseTurn, sent: bool) -> bool {
        let call = calls::ReleaseCall {
            prefix: self.prefix(),
            now: None,
            member: &turn.member,
            refund: !sent,
            tat: turn.tat,
            interval: turn.interval,
            channel: &self.channel,
            host: &turn.host,
        };
        self.run(&call).await.is_ok()
    }

    /// Applies what an answer taught to the shared state; returns the learned rate and the
    /// cooldown left, as the store has them now.
    pub(crate) async fn report(
        &self,
        host: &str,
        lesson: &Lesson,
        starts_us: i64,
        bounds: RateBounds,
    ) -> Result<(f64, Duration), StoreDown> {
        let (cooldown_us, cause) = match lesson.cooldown {
            Some((d, cause)) => (micros(d), cause.word()),
            None => (0, String::new()),
        };
        let call = calls::ReportCall {
            prefix: self.prefix(),
            now: None,
            cooldown_us,
            cause,
            rate_before: lesson.rate_before,
            rate_after: lesson.rate_after,
            started_us: starts_us,
            min_rate: bounds.min_rate,
            ceiling: bounds.ceiling,
            configured_rate: bounds.configured_rate,
            burst: bounds.burst.max(1),
            cap: lesson.cap,
            cap_us: micros(Duration::from_secs(3600)),
            channel: &self.channel,
            host,
            idle_ttl_us: micros(idle_ttl(lesson.answered)),
        };
        let reply = self.run(&call).await?;
        Ok((reply.rate, duration_us(reply.cooldown_left_us)))
    }

    /// Charges `bytes` of response body to `host`'s shared byte budget of `rate` bytes per
    /// second, so that every instance's next turn waits for the debt (`scripts::BILL`).
    pub(crate) async fn bill(&self, host: &str, bytes: u64, rate: u64) {
        let call = calls::BillCall {
            prefix: self.prefix(),
            host,
            now: None,
            bytes,
            byte_rate: rate.max(1),
            idle_ttl_us: micros(IDLE_TTL),
        };
        // A bill the store did not take is lost with the fall to fallback, where each instance
        // keeps its share of the byte budget locally.
        let _ = self.run(&call).await;
    }

    /// Applies an operator's action for every instance.
    pub(crate) async fn operator(&self, host: &str, action: StoreAction) -> Result<(), StoreDown> {
        let (action, value) = calls::OperatorCall::words(action);
        let call = calls::OperatorCall {
            prefix: self.prefix(),
            now: None,
            action,
            value,
            channel: &self.channel,
            host,
            idle_ttl_us: micros(IDLE_TTL),
        };
        self.run(&call).await
    }
}

/// How often a new cause of being away from the store is logged while in fallback.
const CAUSE_LOG_EVERY: Duration = Duration::from_secs(10);

/// The kind of a store failure, for telling one cause from another: its first word (`NOPERM`,
/// `no answer`, `Connection refused`...).
fn kind_of(why: &str) -> String {
    why.split([':', ' ']).next().unwrap_or("").to_string()
}

/// A duration in whole microseconds, as the scripts count.
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Reads a script's reply (`calls.rs`); one of another shape is an error, never a panic.
fn read_reply<C: calls::Call>(value: Value) -> Result<C::Reply, StoreDown> {
    C::read(value).map_err(|bad| StoreDown(format!("the {} script answered {bad}", C::OP.as_str())))
}

/// A duration of whole microseconds as a reply gives it (`0` for a negative one).
fn duration_us(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

#[cfg(test)]
mod op_label_tests {
    use super::*;

    #[test]
    fn every_operation_has_its_series_at_zero_from_the_start() {
        let mut registry = prometheus_client::registry::Registry::with_prefix("courtesy");
        registry.register("shared_errors", "errors", OpLabel::family());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap_or_default();
        for op in [
            "reserve",
            "report",
            "release",
            "operator",
            "heartbeat",
            "renew",
            "withdraw",
            "bill",
        ] {
            let line = format!("courtesy_shared_errors_total{{op=\"{op}\"}} 0");
            assert!(text.contains(&line), "{line} missing from:\n{text}");
        }
    }
}
