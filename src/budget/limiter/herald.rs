//! What the limiter tells about a host's state as it changes (`GET /v1/events`): the events
//! ([`HostEvent`]), told once each, where the state really changes, to a sink that a higher layer
//! gives (`crate::observe::events`, through [`Herald::listen`]: a closure, since the limiter
//! imports nothing above it).
//!
//! A cooldown or a pause ends by time passing, not by an event: the herald keeps what it told
//! of each host in trouble (its [`Record`], one per host with something announced, dropped when
//! all of it has ended) and a min-heap of when those things end; one task
//! ([`Limiter::announce_ends`]) sleeps to the earliest and then looks at the host's state again
//! (a cooldown may have grown or been lifted meanwhile). A healthy host costs nothing: no record,
//! no heap entry, no work per request. Telling never awaits and never blocks: the sink takes the
//! event at once (or drops it).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::host::HostState;
use super::Limiter;
use crate::pacing::policy::{Cooldown, CooldownCause};
use crate::util::locks::lock;

/// A cooldown already told grows by at least this before it is told again
/// (`cooldown_started` with `extended: true`): the 429s of one wave, each a few milliseconds
/// later, tell nothing new.
const TOLD_AGAIN_AFTER: Duration = Duration::from_secs(1);

/// At most one `queue_full` per host in this long: a flood of refused requests does not flood
/// the stream.
pub(crate) const QUEUE_FULL_EVERY: Duration = Duration::from_secs(1);

/// Hosts whose last `queue_full` time is kept before the oldest are forgotten (bounded memory
/// however many hosts overflow).
const QUEUE_FULL_KEPT: usize = 4096;

/// The adaptive controller's rate is told (`rate_changed`) when it crosses a step of a ladder
/// with this ratio between steps (…, 0.91, 1.0, 1.1, 1.21, …): its small moves after each answer
/// are not each an event, and nothing per host is kept to know it (a known host stays small).
const RATE_STEP: f64 = 1.1;

/// The step of the ladder of [`RATE_STEP`] that `rate` (requests per second) is on.
pub(super) fn rate_step(rate: f64) -> i64 {
    if rate > 0.0 && rate.is_finite() {
        (rate.ln() / RATE_STEP.ln()).floor() as i64
    } else {
        i64::MIN
    }
}

/// One change of a host's state, as `/v1/events` tells it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HostEvent {
    /// The budget key (`host:port`, a domain, an address), as `/hosts` names it.
    pub(crate) host: Arc<str>,
    /// Where this instance learned it.
    pub(crate) source: Source,
    /// When it was told.
    pub(crate) at: SystemTime,
    /// What changed.
    pub(crate) kind: EventKind,
}

/// Where a change was learned: here, or from another instance through the shared store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// This instance saw it (an answer, an operator, time passing).
    Local,
    /// Another instance did, and the shared store told this one (`[shared]`).
    Shared,
}

/// Who or what lifted a pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResumedBy {
    /// An operator's `POST /hosts/<host>/resume`.
    Operator,
    /// Its time ran out.
    Expired,
}

/// Who paused a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PausedBy {
    /// An operator's `POST /hosts/<host>/pause`.
    Operator,
    /// A block (a challenge page, a redirect to a block page, 403s in a row).
    Block,
}

/// Why the rate moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RateWhy {
    /// Cut after a 429, an overload status or failures.
    Backoff,
    /// Raised again after healthy answers.
    Recovery,
    /// Moved by the answers' latency.
    Latency,
    /// Moved by the host's RateLimit headers.
    Ratelimit,
    /// An operator's rate, set or cleared.
    Operator,
    /// robots.txt's Crawl-delay or Request-rate, put in force or lifted.
    Robots,
}

/// What changed, with what the event tells of it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum EventKind {
    /// A cooldown began (or one already told grew by [`TOLD_AGAIN_AFTER`] or more: `extended`).
    CooldownStarted {
        /// When it ends, as now known.
        until: SystemTime,
        /// Why.
        cause: CooldownCause,
        /// It was told before and has grown.
        extended: bool,
    },
    /// A cooldown told before has ended.
    CooldownEnded {
        /// Why it had begun.
        cause: CooldownCause,
    },
    /// An operator's pause or a block's pause began (or was set again).
    Paused {
        /// When it ends.
        until: SystemTime,
        /// Who paused.
        by: PausedBy,
        /// Why, in words.
        reason: String,
    },
    /// A pause told before has ended.
    Resumed {
        /// Who or what lifted it.
        by: ResumedBy,
    },
    /// A block was seen in an answer and paused the host.
    BlockDetected {
        /// `soft_block` or `hard_block`.
        signal: &'static str,
        /// What matched, in words (the marker, the header, the redirect, the 403s).
        detail: String,
        /// The status of the answer, when known.
        status: Option<u16>,
    },
    /// The host's rate moved.
    RateChanged {
        /// The rate told before (requests per second).
        old: f64,
        /// The rate now.
        new: f64,
        /// Why.
        why: RateWhy,
    },
    /// robots.txt was fetched.
    RobotsFetched {
        /// Its status, or `None` when it could not be reached.
        status: Option<u16>,
        /// Whether its rules disallow anything for the group courtesy obeys.
        disallows_any: bool,
        /// The seconds between requests it asks for, if any.
        crawl_delay_s: Option<f64>,
    },
    /// A request was refused because the host's queue was full (at most one a second a host).
    QueueFull {
        /// The host's `max_queue`.
        max_queue: usize,
    },
}

/// What closes a host at one instant, as the herald compares it with what it told.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Closed {
    /// The cooldown in force (block pauses included).
    pub(crate) cooldown: Option<Cooldown>,
    /// The end of an operator's pause in force.
    pub(crate) operator: Option<Instant>,
    /// Outside robots.txt's Visit-time hours: when they begin.
    pub(crate) visit: Option<Instant>,
    /// Inside them: when they end (the host closes then; not told, only timed).
    pub(crate) visit_closes: Option<Instant>,
}

impl Closed {
    /// What closes the host of `state` at `now`.
    pub(super) fn of(state: &HostState, now: Instant) -> Self {
        let (visit, visit_closes) = state.pacing().visit_edges(now);
        Closed {
            cooldown: state.pacing().cooldown(now),
            operator: state.pacing().operator_paused_until(now),
            visit,
            visit_closes,
        }
    }

    /// The earliest end of what closes the host, or of its Visit-time hours: when the timer
    /// looks at it again.
    pub(super) fn end(&self) -> Option<Instant> {
        [
            self.cooldown.map(|c| c.until),
            self.operator,
            self.visit,
            self.visit_closes,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// What made the herald look at a host again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// An answer, a block, a hint, a restart record.
    Change,
    /// An operator's action (a pause lifted now was lifted by the operator).
    Operator,
    /// The timer of an end.
    Timer,
}

/// A cooldown as it was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ToldCooldown {
    started: Instant,
    until: Instant,
    cause: CooldownCause,
    source: Source,
}

/// What the herald told of one host that has not ended yet.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Record {
    cooldown: Option<ToldCooldown>,
    /// An operator's pause told: its end, and where it was learned.
    operator: Option<(Instant, Source)>,
    /// A block's pause told, and where it was learned.
    block: Option<Source>,
    /// A closing by robots.txt's Visit-time told.
    visit: bool,
    /// The end the timer is set for.
    wake: Option<Instant>,
}

impl Record {
    /// Nothing told is still running.
    pub(super) fn is_empty(&self) -> bool {
        self.cooldown.is_none() && self.operator.is_none() && self.block.is_none() && !self.visit
    }
}

/// `instant` (monotonic) as wall-clock time, seen from `now` / `wall`.
fn wall_of(instant: Instant, now: Instant, wall: SystemTime) -> SystemTime {
    match instant.checked_duration_since(now) {
        Some(ahead) => wall + ahead,
        None => wall
            .checked_sub(now.saturating_duration_since(instant))
            .unwrap_or(SystemTime::UNIX_EPOCH),
    }
}

/// What is told when `record` (what was told) meets `live` (the host's state at `now`); the
/// record is brought up to date. Pure: the heart of the herald, tested on its own.
pub(crate) fn changes(
    record: &mut Record,
    live: Closed,
    (look, source): (Look, Source),
    (now, wall): (Instant, SystemTime),
) -> Vec<(EventKind, Source)> {
    let mut out = Vec::new();
    let lifted_by = if look == Look::Operator {
        ResumedBy::Operator
    } else {
        ResumedBy::Expired
    };
    // The cooldown: ended (or replaced by another one), begun, grown.
    if let Some(told) = record.cooldown {
        let same = live.cooldown.filter(|c| c.started == told.started);
        if same.is_none() {
            out.push((EventKind::CooldownEnded { cause: told.cause }, told.source));
            record.cooldown = None;
        } else if let Some(c) = same.filter(|c| c.until >= told.until + TOLD_AGAIN_AFTER) {
            let until = wall_of(c.until, now, wall);
            let kind = EventKind::CooldownStarted {
                until,
                cause: c.cause,
                extended: true,
            };
            out.push((kind, source));
            record.cooldown = Some(ToldCooldown {
                until: c.until,
                cause: c.cause,
                ..told
            });
        }
    }
    if let (None, Some(c)) = (record.cooldown, live.cooldown) {
        let until = wall_of(c.until, now, wall);
        let kind = EventKind::CooldownStarted {
            until,
            cause: c.cause,
            extended: false,
        };
        out.push((kind, source));
        record.cooldown = Some(ToldCooldown {
            started: c.started,
            until: c.until,
            cause: c.cause,
            source,
        });
    }
    visit_changes(record, live, (now, wall), &mut out);
    block_changes(record, live, (lifted_by, source), (now, wall), &mut out);
    operator_changes(record, live, (lifted_by, source), (now, wall), &mut out);
    out
}

/// robots.txt's Visit-time hours: the host closes when they end (a cooldown of cause
/// `visit_time` until they begin again) and opens when they begin.
fn visit_changes(
    record: &mut Record,
    live: Closed,
    (now, wall): (Instant, SystemTime),
    out: &mut Vec<(EventKind, Source)>,
) {
    let cause = CooldownCause::VisitTime;
    match (record.visit, live.visit) {
        (true, None) => {
            out.push((EventKind::CooldownEnded { cause }, Source::Local));
            record.visit = false;
        }
        (false, Some(opens)) => {
            let kind = EventKind::CooldownStarted {
                until: wall_of(opens, now, wall),
                cause,
                extended: false,
            };
            out.push((kind, Source::Local));
            record.visit = true;
        }
        _ => {}
    }
}

/// The block's pause: a cooldown whose cause is a block, told as a pause too.
fn block_changes(
    record: &mut Record,
    live: Closed,
    (lifted_by, source): (ResumedBy, Source),
    (now, wall): (Instant, SystemTime),
    out: &mut Vec<(EventKind, Source)>,
) {
    let blocked = live.cooldown.filter(|c| is_block(c.cause));
    match (record.block, blocked) {
        (Some(told), None) => {
            out.push((EventKind::Resumed { by: lifted_by }, told));
            record.block = None;
        }
        (None, Some(c)) => {
            let kind = EventKind::Paused {
                until: wall_of(c.until, now, wall),
                by: PausedBy::Block,
                reason: c.cause.to_string(),
            };
            out.push((kind, source));
            record.block = Some(source);
        }
        _ => {}
    }
}

/// The operator's pause: begun, set again (to another end), lifted or run out.
fn operator_changes(
    record: &mut Record,
    live: Closed,
    (lifted_by, source): (ResumedBy, Source),
    (now, wall): (Instant, SystemTime),
    out: &mut Vec<(EventKind, Source)>,
) {
    match (record.operator, live.operator) {
        (Some((_, told)), None) => {
            out.push((EventKind::Resumed { by: lifted_by }, told));
            record.operator = None;
        }
        (told, Some(until)) if told.is_none_or(|(end, _)| moved(end, until, source)) => {
            let kind = EventKind::Paused {
                until: wall_of(until, now, wall),
                by: PausedBy::Operator,
                reason: CooldownCause::Operator.to_string(),
            };
            out.push((kind, source));
            record.operator = Some((until, source));
        }
        _ => {}
    }
}

/// Whether an operator's pause told to end at `told` and now ending at `until` was set again:
/// here, any other end is an operator's new pause; through the store, where an instance hears
/// its own pause back a few milliseconds later, only one at least [`TOLD_AGAIN_AFTER`] apart.
fn moved(told: Instant, until: Instant, source: Source) -> bool {
    match source {
        Source::Local => told != until,
        Source::Shared => {
            told.max(until).saturating_duration_since(told.min(until)) >= TOLD_AGAIN_AFTER
        }
    }
}

/// Whether a cooldown of this cause is a block's pause.
fn is_block(cause: CooldownCause) -> bool {
    matches!(cause, CooldownCause::SoftBlock | CooldownCause::HardBlock)
}

/// Where events go: given once by a higher layer.
type Sink = Box<dyn Fn(HostEvent) + Send + Sync>;

/// The limiter's teller of host events: the sink, what was told of each host in trouble, and
/// when those things end.
#[derive(Default)]
pub(crate) struct Herald {
    sink: OnceLock<Sink>,
    told: Mutex<Told>,
    /// Tells the end timer that an earlier end was set.
    rescheduled: Notify,
}

impl std::fmt::Debug for Herald {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Herald")
            .field("listening", &self.sink.get().is_some())
            .finish_non_exhaustive()
    }
}

/// What the herald keeps, behind its lock (taken after a host's lock, never before one).
#[derive(Debug, Default)]
struct Told {
    /// Per host in trouble: what was told and has not ended.
    records: HashMap<Arc<str>, Record>,
    /// The ends to look at, earliest first.
    ends: BinaryHeap<Reverse<(Instant, Arc<str>)>>,
    /// When each host last told `queue_full`.
    queue_full: HashMap<Arc<str>, Instant>,
}

impl Herald {
    /// Sends every event from now on to `sink` (called once, at start-up; a second sink is
    /// ignored). Before, events are dropped: nobody can be listening.
    pub(crate) fn listen(&self, sink: impl Fn(HostEvent) + Send + Sync + 'static) {
        let _ = self.sink.set(Box::new(sink));
    }

    /// Tells one event about `host`, learned from `source`.
    pub(crate) fn tell(&self, host: &Arc<str>, source: Source, kind: EventKind) {
        if let Some(sink) = self.sink.get() {
            sink(HostEvent {
                host: host.clone(),
                source,
                at: SystemTime::now(),
                kind,
            });
        }
    }

    /// Compares what closes `host` now (`live`) with what was told of it, tells the difference
    /// and sets the timer for the next end. Called under the host's lock, after a change (or by
    /// the timer), so that one host's events are told in order.
    pub(crate) fn look(&self, host: &Arc<str>, live: Closed, why: (Look, Source), now: Instant) {
        let mut told = lock(&self.told);
        if live == Closed::default() && !told.records.contains_key(host) {
            return;
        }
        let record = told.records.entry(host.clone()).or_default();
        let events = changes(record, live, why, (now, SystemTime::now()));
        // The live end, not the one told: a cooldown grown by less than a second is not told
        // again, but its end is looked at when it really comes.
        let next = live.end().unwrap_or(now);
        // The timer is set again only for an earlier end: a cooldown that grows keeps its timer,
        // which looks again at the old end and sets itself for the new one then. So the heap
        // holds about one entry per host in trouble, however often its cooldown grows.
        // A host inside its Visit-time hours keeps its record (empty) for the timer of their end.
        let earlier = if record.is_empty() && live.visit_closes.is_none() {
            told.records.remove(host);
            false
        } else if record.wake.is_none_or(|wake| next < wake) {
            record.wake = Some(next);
            let earlier = told.ends.peek().is_none_or(|Reverse((at, _))| next < *at);
            told.ends.push(Reverse((next, host.clone())));
            earlier
        } else {
            false
        };
        drop(told);
        for (kind, source) in events {
            self.tell(host, source, kind);
        }
        if earlier {
            self.rescheduled.notify_one();
        }
    }

    /// Tells what changed in what closes the host `key` (a cooldown, a block's or an operator's
    /// pause), learned from `source`; `state` is its lock, held so that its events keep their
    /// order.
    pub(super) fn look_at(
        &self,
        key: &Arc<str>,
        state: &HostState,
        why: (Look, Source),
        now: Instant,
    ) {
        self.look(key, Closed::of(state, now), why, now);
    }

    /// Tells `rate_changed` when the rate in force of the host `key` moved from `before` (an
    /// operator's rate, robots.txt's cap: each told as it is set); `state` is its lock.
    pub(super) fn rate_moved(
        &self,
        key: &Arc<str>,
        (state, before): (&HostState, f64),
        (why, source): (RateWhy, Source),
        now: Instant,
    ) {
        let after = state.pacing().effective_rate(now);
        if (after - before).abs() > f64::EPSILON * before.abs().max(1.0) {
            let kind = EventKind::RateChanged {
                old: before,
                new: after,
                why,
            };
            self.tell(key, source, kind);
        }
    }

    /// Tells `queue_full` for `host`, at most once every [`QUEUE_FULL_EVERY`].
    pub(crate) fn queue_full(&self, host: &Arc<str>, max_queue: usize, now: Instant) {
        if self.sink.get().is_none() {
            return;
        }
        let mut told = lock(&self.told);
        if told
            .queue_full
            .get(host)
            .is_some_and(|last| now.saturating_duration_since(*last) < QUEUE_FULL_EVERY)
        {
            return;
        }
        if told.queue_full.len() >= QUEUE_FULL_KEPT {
            told.queue_full
                .retain(|_, last| now.saturating_duration_since(*last) < QUEUE_FULL_EVERY);
        }
        if told.queue_full.len() < QUEUE_FULL_KEPT {
            told.queue_full.insert(host.clone(), now);
        }
        drop(told);
        self.tell(host, Source::Local, EventKind::QueueFull { max_queue });
    }

    /// The earliest end to look at, if any.
    fn next_end(&self) -> Option<Instant> {
        lock(&self.told).ends.peek().map(|Reverse((at, _))| *at)
    }

    /// Takes the hosts whose ends are due at `now` (each once).
    fn due(&self, now: Instant) -> Vec<Arc<str>> {
        let mut told = lock(&self.told);
        let mut due: Vec<Arc<str>> = Vec::new();
        while told.ends.peek().is_some_and(|Reverse((at, _))| *at <= now) {
            if let Some(Reverse((at, host))) = told.ends.pop() {
                let current = told.records.get_mut(&host).filter(|r| r.wake == Some(at));
                if let Some(record) = current {
                    record.wake = None;
                    if !due.contains(&host) {
                        due.push(host);
                    }
                }
            }
        }
        due
    }

    /// How many hosts have something told that has not ended, and ends set (for tests).
    #[cfg(test)]
    pub(crate) fn pending(&self) -> (usize, usize) {
        let told = lock(&self.told);
        (told.records.len(), told.ends.len())
    }
}

impl Limiter {
    /// The teller of this limiter's host events.
    pub(crate) fn herald(&self) -> &Herald {
        self.budget.herald()
    }

    /// Tells one event about the budget `key`, seen here (robots.txt fetched, for one).
    pub(crate) fn tell(&self, key: &str, kind: EventKind) {
        self.herald().tell(&Arc::from(key), Source::Local, kind);
    }

    /// Tells the ends of cooldowns and pauses as time runs them out: sleeps to the earliest end
    /// and looks at that host again, until `stop`. One task for every host; no polling.
    pub(crate) async fn announce_ends(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let next = self.herald().next_end();
            let sleep = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.herald().rescheduled.notified() => continue,
                () = sleep => {}
            }
            let now = Instant::now();
            for key in self.herald().due(now) {
                self.look_again(&key, now);
            }
        }
    }

    /// Looks at the host of `key` again for the timer: what ended is told.
    fn look_again(&self, key: &Arc<str>, now: Instant) {
        let host = self.hosts.get(&**key).map(|e| e.value().clone());
        match host {
            Some(host) => {
                let state = host.lock();
                self.herald()
                    .look_at(key, &state, (Look::Timer, Source::Local), now);
            }
            // Forgotten by the sweeper: nothing closes it any more.
            None => self
                .herald()
                .look(key, Closed::default(), (Look::Timer, Source::Local), now),
        }
    }
}
