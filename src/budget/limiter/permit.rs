//! A request's turn: the [`Permit`] that holds a host slot and a global slot while the request is
//! in flight, through which its [`Answer`] is reported. Dropping the permit ends the turn; a request that
//! never left gets its token back (a cancelled request spends nothing). A WebSocket handshake's
//! permit becomes a [`ByteMeter`] on the `101`: the turn ends, the socket's bytes are still
//! charged to the host, and the socket is counted in [`OpenSockets`] while open.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::time::Instant;

use super::budget::Budget;
use super::egress::Downlink;
use super::grant::{Grant, Paced, WaitRecord};
use super::herald::{rate_step, EventKind, Look, RateWhy, Source};
use super::host::{Host, HostState};
use super::refusal::refuse_queue;
use super::verdicts::ShadowVerdict;
use super::Limiter;
use crate::config::HostPolicy;
use crate::pacing::policy::{Answer, CooldownCause, Observation, Reaction, WaitReason};

/// Response bytes a permit counts before it charges them to its host (and to the byte ceiling of
/// all hosts): one lock per this many bytes, not one per frame. The rest is charged when the
/// turn ends, before its slot comes free.
const BILL_EVERY: u64 = 64 * 1024;

/// Response bytes of a host with a byte budget that go to the shared store's byte budget at
/// once, in one round trip off the body's path; the rest goes when the turn ends.
const STORE_BILL_EVERY: u64 = 1024 * 1024;

/// The right to send one request to a host now: holds one of the host's concurrency slots and one
/// global slot until dropped. Dropped without [`Permit::mark_sent`], it also gives its token back,
/// because a request that never left must not spend budget (invariant 5, Cancellation, in `docs/ARCHITECTURE.md`).
///
/// Its concerns are kept apart, each in a part of its own: the turn itself ([`Grant`]: the
/// global slot it holds, how long and why the request waited, its part in the shared store;
/// the host's concurrency slot is counted in the host's `InFlight` and freed by
/// `Budget::end_turn` when the permit drops), the response bytes it counts and charges
/// ([`Bytes`]), and what reporting the answer needs ([`Report`]).
#[derive(Debug)]
pub struct Permit {
    host: Arc<Host>,
    budget: Budget,
    grant: Grant,
    bytes: Bytes,
    report: Report,
}

/// The response bytes a turn counts and where they are charged: the host's byte budget (under
/// its lock), and the ceiling on all hosts together.
#[derive(Debug)]
struct Bytes {
    /// Response bytes counted and not yet charged.
    unbilled: u64,
    /// The ceiling on response bytes of all hosts together, if set (`None` for a report-only
    /// host's request: it holds nobody back).
    downlink: Option<Arc<Downlink>>,
}

impl Bytes {
    /// Counts `bytes` that went by; the bytes due for charging once [`BILL_EVERY`] are counted.
    fn count(&mut self, bytes: usize) -> Option<u64> {
        self.unbilled = self.unbilled.saturating_add(bytes as u64);
        (self.unbilled >= BILL_EVERY).then(|| self.take_rest())
    }

    /// The bytes counted and not yet charged, taken (the end of the turn).
    fn take_rest(&mut self) -> u64 {
        std::mem::take(&mut self.unbilled)
    }

    /// Charges `bytes` to the ceiling on all hosts, if there is one. Outside the host's lock.
    fn charge_downlink(&self, bytes: u64, now: Instant) {
        if let Some(downlink) = &self.downlink {
            downlink.charge(bytes, now);
        }
    }
}

/// What reporting the request's answer needs besides its turn: when it left, and for a
/// report-only host what courtesy would have done.
#[derive(Debug)]
struct Report {
    /// When the request left (`None`: not yet, or never; then its token is given back).
    sent_at: Option<Instant>,
    /// What courtesy would have done, for a report-only host's request (which took no token).
    shadow: Option<Box<ShadowVerdict>>,
}

impl Report {
    /// What the pacing learns from `answer`, with `others` requests of the host in flight, for
    /// a request `paced` or not.
    fn observation(&self, answer: &Answer, paced: Paced, others: u32, now: Instant) -> Observation {
        Observation {
            answer: answer.clone(),
            sent_at: self.sent_at.unwrap_or(now),
            limited: paced == Paced::Limited,
            others_in_flight: others,
        }
    }

    /// Whether the turn's token is spent for good: the request left, or it took none (a
    /// report-only host's request), so there is none to give back.
    fn spent(&self) -> bool {
        self.sent_at.is_some() || self.shadow.is_some()
    }
}

/// Why an answer moved the rate: RateLimit headers, a cut after trouble, latency, or recovery.
fn rate_why(answer: &Answer, reaction: &Reaction) -> RateWhy {
    use crate::pacing::feedback::Feedback;
    if answer.server.is_some() {
        RateWhy::Ratelimit
    } else if reaction.rate_after > reaction.rate_before {
        RateWhy::Recovery
    } else if matches!(
        answer.feedback,
        Feedback::Throttled | Feedback::Overloaded | Feedback::Failed
    ) {
        RateWhy::Backoff
    } else {
        RateWhy::Latency
    }
}

/// Why bytes are billed to the shared store's byte budget now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreBill {
    /// Bytes went by: billed once [`STORE_BILL_EVERY`] are due.
    Counted,
    /// The turn ends: whatever is due is billed.
    TurnEnd,
}

impl Permit {
    /// The permit of `grant`, a turn of `host` (taken at once, or handed to a request that
    /// waited: [`hand_to_head`]).
    pub(super) fn new(host: Arc<Host>, limiter: &Limiter, grant: Grant) -> Self {
        Permit {
            host,
            budget: limiter.budget.clone(),
            grant,
            bytes: Bytes {
                unbilled: 0,
                downlink: limiter.downlink.clone(),
            },
            report: Report {
                sent_at: None,
                shadow: None,
            },
        }
    }

    /// Counts `bytes` of the response body that just went by to the client: they are charged to
    /// the host's byte budget (and the ceiling of all hosts) every [`BILL_EVERY`] bytes and when
    /// the turn ends. Counting never slows the body; a debt holds the host's next turn.
    pub fn count_bytes(&mut self, bytes: usize) {
        if let Some(bytes) = self.bytes.count(bytes) {
            let now = Instant::now();
            let mut state = self.host.lock();
            charge(&mut state, bytes, now);
            self.bill_store(&mut state, bytes, StoreBill::Counted, now);
            drop(state);
            self.bytes.charge_downlink(bytes, now);
        }
    }

    /// Ends the turn now and keeps charging the host for bytes that go by afterwards: the
    /// permit of a WebSocket handshake answered `101`. The socket's frames are never paced and
    /// hold no concurrency slot, but they spend the host's byte budget (and the ceiling on all
    /// hosts) like a response body does.
    pub fn into_meter(self, limiter: &Limiter) -> ByteMeter {
        // Counted before the turn ends: the sweeper never sees the host with neither.
        limiter.sockets.open(&self.host.key);
        let meter = ByteMeter {
            sockets: limiter.sockets.clone(),
            host: self.host.clone(),
            budget: self.budget.clone(),
            bytes: Bytes {
                unbilled: 0,
                downlink: self.bytes.downlink.clone(),
            },
            shadow: self.report.shadow.is_some(),
        };
        // The handshake's own bytes are charged as the turn ends, before its slot comes free.
        drop(self);
        meter
    }

    /// With a shared budget and a byte budget: counts `bytes` for the store's byte budget and
    /// bills them (off the body's path) every [`STORE_BILL_EVERY`] and at the end of the turn,
    /// so that every instance's next turn of the host waits for the debt. Under the host's lock.
    fn bill_store(&self, state: &mut HostState, bytes: u64, why: StoreBill, now: Instant) {
        if self.report.shadow.is_none() {
            bill_store(&self.budget, &self.host, state, (bytes, why), now);
        }
    }

    /// Makes this the permit of a report-only host's request: forwarded at once, with what
    /// courtesy would have done.
    pub(super) fn with_shadow(mut self, verdict: ShadowVerdict) -> Self {
        self.report.shadow = Some(Box::new(verdict));
        self.bytes.downlink = None;
        self
    }

    /// For a report-only host (`enforce = false`), what courtesy would have done with this request.
    pub fn shadow(&self) -> Option<ShadowVerdict> {
        self.report.shadow.as_deref().copied()
    }

    /// When a shared turn started on the store's clock, for the wave rule: its lease's start, or
    /// for a turn spent from an allowance, when it was sent (now if not yet).
    fn lease_start(&self) -> Option<i64> {
        if let Some(lease) = self.grant.lease.as_deref() {
            return Some(lease.starts_us());
        }
        let store = self.budget.store().filter(|_| self.grant.ahead.is_some())?;
        Some(store.clock_at(self.report.sent_at.unwrap_or_else(Instant::now)))
    }

    /// Records that the request is about to go out: from here on its token is spent for good.
    pub fn mark_sent(&mut self) {
        self.report.sent_at = Some(Instant::now());
    }

    /// Feeds an upstream answer back into the host's pacing: adapts the rate, starts or extends a
    /// cooldown and, with `on_cooldown = "reject"`, answers everything queued for the host at once.
    /// With a shared budget the lesson goes to the store in the background.
    pub fn report(&self, answer: &Answer) -> Reaction {
        self.report_inner(answer).0
    }

    /// Like [`Permit::report`]; with a shared budget, a cooldown the answer started is in the
    /// store (or the store is found away) before this returns, so that no instance sends inside
    /// a window the client has already heard of.
    pub async fn report_settled(&self, answer: &Answer) -> Reaction {
        let (reaction, teaching) = self.report_inner(answer);
        if let Some(task) = teaching.filter(|_| reaction.cooldown.is_some()) {
            let _ = task.await;
        }
        reaction
    }

    fn report_inner(&self, answer: &Answer) -> (Reaction, Option<tokio::task::JoinHandle<()>>) {
        let now = Instant::now();
        let mut state = self.host.lock();
        let others = state.in_flight().current.saturating_sub(1);
        let observation = self
            .report
            .observation(answer, self.grant.paced, others, now);
        let (reaction, teaching) = self.budget.report(
            &self.host,
            &mut state,
            &observation,
            self.lease_start(),
            now,
        );
        state.stats_mut().answered(answer.status);
        self.tell_reaction(&state, answer, &reaction, now);
        let refused = if reaction.cooldown.is_some() {
            refuse_queue(&mut state, now)
        } else {
            Vec::new()
        };
        drop(state);
        for (waiter, refusal) in refused {
            let _ = waiter.reply.send(Err(refusal));
        }
        self.host.wake.notify_one();
        (reaction, teaching)
    }

    /// Tells what an answer's `reaction` changed (under the host's lock, `state`): a hard block,
    /// a cooldown or pause begun or grown, the rate moved far enough to be told again.
    fn tell_reaction(&self, state: &HostState, answer: &Answer, reaction: &Reaction, now: Instant) {
        let herald = self.budget.herald();
        let key = &self.host.key;
        if reaction.hard_block {
            let after = state.policy().blocks.hard_block_after;
            let kind = EventKind::BlockDetected {
                signal: "hard_block",
                detail: format!("{after} answers 403 in a row"),
                status: answer.status,
            };
            herald.tell(key, Source::Local, kind);
        }
        if reaction.cooldown.is_some() || reaction.hard_block {
            herald.look_at(key, state, (Look::Change, Source::Local), now);
        }
        let (before, after) = (reaction.rate_before, reaction.rate_after);
        if before != after && rate_step(before) != rate_step(after) {
            let kind = EventKind::RateChanged {
                old: reaction.rate_before,
                new: reaction.rate_after,
                why: rate_why(answer, reaction),
            };
            herald.tell(key, Source::Local, kind);
        }
    }

    /// Pauses this permit's host for a soft block (a challenge page was seen in its response of
    /// `status`; `what` says how, for the event). Returns the pause if a new one started (so the
    /// caller logs and alerts once).
    pub fn soft_block(&self, what: &str, status: u16) -> Option<Duration> {
        let now = Instant::now();
        let mut state = self.host.lock();
        let pause = self.budget.pause_for_block(
            &self.host,
            &mut state,
            CooldownCause::SoftBlock,
            self.lease_start(),
            now,
        )?;
        let kind = EventKind::BlockDetected {
            signal: "soft_block",
            detail: what.to_string(),
            status: Some(status),
        };
        let herald = self.budget.herald();
        herald.tell(&self.host.key, Source::Local, kind);
        herald.look_at(&self.host.key, &state, (Look::Change, Source::Local), now);
        let refused = refuse_queue(&mut state, now);
        drop(state);
        for (waiter, refusal) in refused {
            let _ = waiter.reply.send(Err(refusal));
        }
        self.host.wake.notify_one();
        Some(pause)
    }

    /// How long the request waited in the queue for this permit.
    pub fn waited(&self) -> Duration {
        self.grant.wait.waited
    }

    /// What held the request longest while it waited for this permit
    /// ([`WaitReason::None`]: it did not wait).
    pub fn wait_reason(&self) -> WaitReason {
        self.grant.wait.verdict.reason
    }

    /// The shared store's round trip that gave this turn: how long before the turn it began and
    /// how long it lasted.
    pub fn store_trip(&self) -> Option<(Duration, Duration)> {
        self.grant.wait.store_trip()
    }

    /// The host's rate in effect now, for log lines.
    pub fn host_rate(&self) -> f64 {
        self.host.lock().pacing().effective_rate(Instant::now())
    }

    /// How long the host's cooldown or pause has left now (`None`: it takes requests), so
    /// that a retry of courtesy's own is tried only through a window it would be held through.
    pub fn cooldown_left(&self) -> Option<Duration> {
        let now = Instant::now();
        let state = self.host.lock();
        state
            .pacing()
            .block(now)
            .map(|c| c.until.saturating_duration_since(now))
    }

    /// The HTTP version this permit's host answers over, or its fallback to HTTP/1.1.
    pub fn upstream_protocol(&self) -> super::UpstreamProtocol {
        self.host.lock().stats().protocol()
    }

    /// Notes the HTTP version an answer of this permit's host came over (or a fallback).
    pub fn note_protocol(&self, protocol: super::UpstreamProtocol) {
        self.host.lock().stats_mut().note_protocol(protocol);
    }

    /// The policy of this permit's host.
    pub fn policy(&self) -> Arc<HostPolicy> {
        self.host.lock().policy().clone()
    }

    /// The host key this permit is for.
    pub fn host_key(&self) -> &str {
        &self.host.key
    }
}

/// With a shared budget and a byte budget: counts `bytes` for the store's byte budget and
/// bills them (off the body's path) every [`STORE_BILL_EVERY`] and when `why` is the end, so
/// that every instance's next turn of `host` waits for the debt. Under the host's lock.
fn bill_store(
    budget: &Budget,
    host: &Arc<Host>,
    state: &mut HostState,
    (bytes, why): (u64, StoreBill),
    now: Instant,
) {
    if state.policy().pacing.max_bytes_per_second.is_none() {
        return;
    }
    let Some(store) = budget.store().filter(|s| !s.in_fallback()) else {
        return;
    };
    let limits = super::budget::shared_limits(state, store, now);
    let turns = state.shared_turns();
    turns.unbilled = turns.unbilled.saturating_add(bytes);
    if turns.unbilled == 0 || (why == StoreBill::Counted && turns.unbilled < STORE_BILL_EVERY) {
        return;
    }
    let Some((rate, _)) = limits.bytes else {
        return;
    };
    let bytes = std::mem::take(&mut turns.unbilled);
    let store = store.clone();
    let host = host.clone();
    tokio::spawn(async move { store.bill(&host.key, bytes, rate).await });
}

/// The bytes of an open WebSocket after its handshake's turn ended ([`Permit::into_meter`]):
/// charged to the host's byte budget, its response-byte counter and the ceiling on all hosts
/// every [`BILL_EVERY`] bytes and when dropped. Holds no slot and waits for nothing: a debt
/// holds the host's next turn, never the socket.
#[derive(Debug)]
pub struct ByteMeter {
    host: Arc<Host>,
    /// Where the socket is counted while open.
    sockets: Arc<OpenSockets>,
    budget: Budget,
    bytes: Bytes,
    /// A report-only host's socket: counted, never billed to the shared store.
    shadow: bool,
}

impl ByteMeter {
    /// Counts `bytes` that went by on the socket, either way.
    pub fn count(&mut self, bytes: usize) {
        if let Some(bytes) = self.bytes.count(bytes) {
            self.charge(bytes, StoreBill::Counted);
        }
    }

    /// The host key the socket belongs to.
    pub fn host_key(&self) -> &str {
        &self.host.key
    }

    fn charge(&self, bytes: u64, why: StoreBill) {
        let now = Instant::now();
        let mut state = self.host.lock();
        charge(&mut state, bytes, now);
        if !self.shadow {
            bill_store(&self.budget, &self.host, &mut state, (bytes, why), now);
        }
        drop(state);
        self.bytes.charge_downlink(bytes, now);
    }
}

impl Drop for ByteMeter {
    fn drop(&mut self) {
        let bytes = self.bytes.take_rest();
        if bytes > 0 {
            self.charge(bytes, StoreBill::TurnEnd);
        }
        self.sockets.close(&self.host.key);
    }
}

/// The WebSockets open now, by host key; only hosts with one have an entry. Counted by
/// [`ByteMeter`] (opened with [`Permit::into_meter`], closed when dropped) and shown in `/hosts`;
/// a host with one open is never forgotten by the sweeper (its bytes are still charged to it).
#[derive(Debug, Default)]
pub(crate) struct OpenSockets(DashMap<Arc<str>, u32>);

impl OpenSockets {
    /// One more socket open to `key`.
    fn open(&self, key: &Arc<str>) {
        let mut open = self.0.entry(key.clone()).or_insert(0);
        *open = open.saturating_add(1);
    }

    /// One socket to `key` closed.
    fn close(&self, key: &Arc<str>) {
        self.0.remove_if_mut(key, |_, open| {
            *open = open.saturating_sub(1);
            *open == 0
        });
    }

    /// The sockets open to `key` now.
    pub(crate) fn count(&self, key: &str) -> u32 {
        self.0.get(key).map_or(0, |open| *open)
    }
}

/// Charges `bytes` of response body to the host: its byte budget and its counter.
fn charge(state: &mut HostState, bytes: u64, now: Instant) {
    state.charge_bytes(bytes, now);
    state.stats_mut().add_response_bytes(bytes);
}

/// Gives `grant`, a turn of `host`, to the first request in the host's queue that still waits,
/// with the time it waited; when none does, gives it back as the permit it would have been
/// (`Some`). Called under the host's lock: a permit that comes back is dropped after the lock is
/// released (its drop locks too), which ends the turn unused.
pub(super) fn hand_to_head(
    (limiter, host): (&Limiter, &Arc<Host>),
    state: &mut HostState,
    mut grant: Grant,
    now: Instant,
) -> Option<Permit> {
    // Gone before its turn: it used none of its job's share.
    state.drop_gone_fronts();
    while let Some(waiter) = state.pop_front() {
        grant.wait = WaitRecord {
            waited: now.saturating_duration_since(waiter.arrived),
            verdict: state.verdict(waiter.asker(), now),
        };
        match waiter.reply.send(Ok(grant)) {
            Ok(()) => return None,
            // The request went away: the next in line gets the turn.
            Err(Ok(back)) => grant = back,
            // Only a grant was sent, so only a grant comes back.
            Err(Err(_)) => return None,
        }
    }
    Some(Permit::new(host.clone(), limiter, grant))
}

impl Drop for Permit {
    fn drop(&mut self) {
        let lease = self.grant.lease.take().map(|lease| *lease);
        let now = Instant::now();
        let bytes = self.bytes.take_rest();
        let mut state = self.host.lock();
        // The last bytes are charged before the slot comes free: the next turn sees them.
        if bytes > 0 {
            charge(&mut state, bytes, now);
            self.bytes.charge_downlink(bytes, now);
        }
        self.bill_store(&mut state, bytes, StoreBill::TurnEnd, now);
        // A report-only request took no token: there is none to give back.
        let spent = self.report.spent();
        let settle = self
            .budget
            .end_turn(&mut state, spent, lease, self.grant.ahead, now);
        let wake = settle || !state.queue().is_empty();
        drop(state);
        if wake {
            self.host.wake.notify_one();
        }
    }
}
