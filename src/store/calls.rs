//! The scripts' calls as types (issue 36): one struct per script call, its fields named as the
//! script names them; one function that writes it into the script's invocation (its keys and
//! arguments, in the one order the script reads them); one that reads the script's reply into a
//! type, a malformed reply being a [`BadReply`], never a panic.
//!
//! The order of a call lives in two places only: the field list of its [`write_fields!`] here,
//! and the header of its script (`scripts.rs`), where every key and argument is given its name
//! once, at the top. The test at the end of this file holds the two together: a call whose names
//! differ from its script's header, in count or in order, fails it.

use redis::Value;

use super::{Op, StoreAction};
use crate::pacing::policy::CooldownCause;

/// Where a call is written: a script's invocation, or (in the tests) a list of the names
/// written, to compare with the script's header.
pub(super) trait CallOut {
    /// The next key, named as the script's header names it.
    fn key(&mut self, name: &'static str, key: String);
    /// The next argument, named as the script's header names it.
    fn arg(&mut self, name: &'static str, value: String);
    /// One item of the call's tail (the arguments after the named ones, repeated per item), each
    /// value with its name in the script's loop over `tail`.
    fn tail(&mut self, tail: &'static str, item: &[(&'static str, String)]);
}

impl CallOut for redis::ScriptInvocation<'_> {
    fn key(&mut self, _name: &'static str, key: String) {
        redis::ScriptInvocation::key(self, key);
    }

    fn arg(&mut self, _name: &'static str, value: String) {
        redis::ScriptInvocation::arg(self, value);
    }

    fn tail(&mut self, _tail: &'static str, item: &[(&'static str, String)]) {
        for (_, value) in item {
            redis::ScriptInvocation::arg(self, value);
        }
    }
}

/// A value as the scripts read it: one argument, written the way they parse it (numbers in
/// decimal, a flag as `1`/`0`, nothing as `''`).
pub(super) trait Wire {
    /// The argument's text.
    fn wire(&self) -> String;
}

impl Wire for f64 {
    fn wire(&self) -> String {
        self.to_string()
    }
}

impl Wire for i64 {
    fn wire(&self) -> String {
        self.to_string()
    }
}

impl Wire for u64 {
    fn wire(&self) -> String {
        self.to_string()
    }
}

impl Wire for u32 {
    fn wire(&self) -> String {
        self.to_string()
    }
}

impl Wire for bool {
    fn wire(&self) -> String {
        if *self { "1" } else { "0" }.to_string()
    }
}

impl Wire for &str {
    fn wire(&self) -> String {
        (*self).to_string()
    }
}

impl Wire for String {
    fn wire(&self) -> String {
        self.clone()
    }
}

impl<T: Wire> Wire for Option<T> {
    fn wire(&self) -> String {
        self.as_ref().map_or(String::new(), Wire::wire)
    }
}

/// Writes a call's keys, then its arguments, each under its field's name (the name its script's
/// header gives it), so that a name and its value cannot come apart and the order is this list's.
macro_rules! write_fields {
    ($out:ident, $call:ident; keys($keys:expr): $($key:ident),+; args: $($arg:ident),+ $(,)?) => {{
        let keys = $keys;
        $( $out.key(stringify!($key), keys.$key()); )+
        $( $out.arg(stringify!($arg), Wire::wire(&$call.$arg)); )+
    }};
}

/// One call of a script: how it is written, and how its reply is read.
pub(super) trait Call {
    /// What the script answers, read.
    type Reply;
    /// The script's body (without the prelude), whose header names this call's fields.
    const SCRIPT: &'static str;
    /// The operation, for the script to run and the error metrics.
    const OP: Op;
    /// Writes the call's keys and arguments, in the order the script's header reads them.
    fn write(&self, out: &mut impl CallOut);
    /// Reads the script's reply.
    fn read(value: Value) -> Result<Self::Reply, BadReply>;
}

/// A reply no script gives: what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BadReply(pub(super) String);

impl std::fmt::Display for BadReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The keys of one host. They share the hash tag `{<host>}`, so that Redis Cluster keeps every
/// key of one call in one slot.
#[derive(Debug, Clone, Copy)]
pub(super) struct HostKeys<'a> {
    /// `[shared] key_prefix`.
    pub(super) prefix: &'a str,
    /// The host key (`host:port`).
    pub(super) host: &'a str,
}

impl HostKeys<'_> {
    /// `<prefix>:{<host>}:<suffix>`.
    fn key(&self, suffix: &str) -> String {
        format!("{}:{{{}}}:{suffix}", self.prefix, self.host)
    }

    /// The budget hash (`tat`, cooldown, rates, allowances' records...).
    pub(super) fn budget_key(&self) -> String {
        self.key("b")
    }

    /// The lease set: one member per turn in flight, scored by its expiry.
    pub(super) fn leases_key(&self) -> String {
        self.key("l")
    }

    /// The waiting list: instances refused a turn, scored by when their wait began.
    pub(super) fn waiting_key(&self) -> String {
        self.key("q")
    }

    /// The waiting list's expiries: when each place runs out unless renewed.
    pub(super) fn waiting_expiry_key(&self) -> String {
        self.key("qx")
    }

    /// The allowances' expiries, by instance.
    pub(super) fn allowances_key(&self) -> String {
        self.key("a")
    }
}

/// The keys of the group of instances, not of a host.
#[derive(Debug, Clone, Copy)]
pub(super) struct GroupKeys<'a> {
    /// `[shared] key_prefix`.
    pub(super) prefix: &'a str,
}

impl GroupKeys<'_> {
    /// The live instances, scored by their last beat.
    pub(super) fn instances_key(&self) -> String {
        format!("{}:instances", self.prefix)
    }
}

/// `scripts::RESERVE`: asks for a host's next turns, settles this instance's allowance, and
/// releases the host's turns that ended meanwhile (see the script for every field's meaning).
#[derive(Debug, Clone)]
pub(super) struct ReserveCall<'a> {
    /// `[shared] key_prefix` (the keys' prefix, not an argument).
    pub(super) prefix: &'a str,
    /// The time (µs), `None`: the store's clock (tests inject one).
    pub(super) now: Option<i64>,
    /// The rate this instance would use (its caps included).
    pub(super) mine: f64,
    /// The configured rate: where the learned rate starts.
    pub(super) configured_rate: f64,
    /// The configured burst, for all instances together.
    pub(super) burst: u32,
    /// The configured concurrency, for all instances together.
    pub(super) concurrency: u32,
    /// How long a lease lasts unless renewed (µs).
    pub(super) lease_us: i64,
    /// The first turn's lease member (the `k`-th further turn's is `<member>.<k>`).
    pub(super) member: &'a str,
    /// How far ahead a turn may be reserved (µs).
    pub(super) horizon_us: i64,
    /// Whether the bucket starts empty (the host's first turn since this instance rejoined).
    pub(super) rejoin: bool,
    /// How long the host's keys outlive the call when nothing else uses them (µs).
    pub(super) idle_ttl_us: i64,
    /// The hint channel.
    pub(super) channel: &'a str,
    /// The host key (`host:port`): the keys' hash tag and the hints' subject.
    pub(super) host: &'a str,
    /// The most turns wanted (`0`: none, only settle the allowance).
    pub(super) want: u32,
    /// This instance's id (`''`: no waiting list, no allowance).
    pub(super) who: &'a str,
    /// How long this instance's next request has waited for its turn (µs).
    pub(super) waited_us: i64,
    /// The store's clock past which the call reserves nothing (µs, `0`: none).
    pub(super) deadline_us: i64,
    /// How long a place in the waiting list lasts unless renewed (µs).
    pub(super) waiting_place_us: i64,
    /// The allowance's call order (`None`: no allowance, and none wanted; so for every `ask_`).
    pub(super) ask_seq: Option<u64>,
    /// Turns spent from allowances since the record began (a running count).
    pub(super) ask_spent: Option<u64>,
    /// Turns wanted ahead.
    pub(super) ask_tokens: Option<u32>,
    /// Slots wanted with them.
    pub(super) ask_slots: Option<u32>,
    /// Slots that still carry requests sent on an allowance.
    pub(super) ask_in_use: Option<u32>,
    /// The host's byte budget, bytes per second (`None`: none).
    pub(super) byte_rate: Option<u64>,
    /// Its burst, in bytes.
    pub(super) byte_burst: Option<u64>,
    /// The host's turns that ended since this instance's last call, the latest first.
    pub(super) ended: Vec<EndedTurn<'a>>,
}

/// A turn that ended, released by the reservation that carries it (what `RELEASE` takes).
#[derive(Debug, Clone, Copy)]
pub(super) struct EndedTurn<'a> {
    /// Its lease member.
    pub(super) member: &'a str,
    /// Whether its token is given back (its request never left).
    pub(super) refund: bool,
    /// The `tat` its reservation wrote.
    pub(super) tat: i64,
    /// Its interval (µs).
    pub(super) interval: i64,
}

impl ReserveCall<'_> {
    /// This call with `ask` as its allowance (`None`: none).
    pub(super) fn with_ask(mut self, ask: Option<super::AheadAsk>) -> Self {
        self.ask_seq = ask.map(|a| a.seq);
        self.ask_spent = ask.map(|a| a.spent);
        self.ask_tokens = ask.map(|a| a.want_tokens);
        self.ask_slots = ask.map(|a| a.want_slots);
        self.ask_in_use = ask.map(|a| a.in_use);
        self
    }
}

impl Call for ReserveCall<'_> {
    type Reply = ReserveReply;
    const SCRIPT: &'static str = super::scripts::RESERVE;
    const OP: Op = Op::Reserve;

    fn write(&self, out: &mut impl CallOut) {
        write_fields!(out, self;
            keys(HostKeys { prefix: self.prefix, host: self.host }):
                budget_key, leases_key, waiting_key, waiting_expiry_key, allowances_key;
            args: now, mine, configured_rate, burst, concurrency, lease_us, member, horizon_us,
                rejoin, idle_ttl_us, channel, host, want, who, waited_us, deadline_us,
                waiting_place_us, ask_seq, ask_spent, ask_tokens, ask_slots, ask_in_use,
                byte_rate, byte_burst);
        for turn in &self.ended {
            out.tail(
                "ended",
                &[
                    ("ended_member", turn.member.wire()),
                    ("ended_refund", turn.refund.wire()),
                    ("ended_tat", turn.tat.wire()),
                    ("ended_interval", turn.interval.wire()),
                ],
            );
        }
    }

    fn read(value: Value) -> Result<ReserveReply, BadReply> {
        ReserveReply::parse(text_of(&value)?)
    }
}

/// The reservation script's reply: what it answered, and what every answer carries.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ReserveReply {
    /// The store's clock when it answered (µs): the instance's deadlines start from it.
    pub(super) now: i64,
    /// The rate the instances learned together.
    pub(super) rate: f64,
    /// An operator's rate.
    pub(super) rate_override: Option<f64>,
    /// The answer.
    pub(super) answer: ReserveAnswer,
}

/// What the reservation script answered (`scripts::RESERVE`, "Returns").
#[derive(Debug, Clone, PartialEq)]
pub(super) enum ReserveAnswer {
    /// Turns are reserved, the first `wait_us` from now.
    Go {
        /// How long until the first turn (µs).
        wait_us: i64,
        /// The host's interval (µs), to undo a turn never used.
        interval: i64,
        /// The first turn.
        first: ReservedTurn,
        /// The turns reserved after it in the same call.
        more: Vec<ReservedTurn>,
    },
    /// An allowance: turns and concurrency slots to spend without a round trip each.
    Ahead {
        /// Turns to spend.
        tokens: u32,
        /// Concurrency slots they may use at once.
        slots: u32,
    },
    /// The host is closed.
    Cool {
        /// For how much longer (µs).
        remaining_us: i64,
        /// Why.
        cause: CooldownCause,
    },
    /// Every concurrency slot is taken: ask again in `retry_us` or at a hint.
    Busy {
        /// When to ask again (µs).
        retry_us: i64,
    },
    /// Instances that waited longer come first: ask again in `retry_us` or at a hint.
    Behind {
        /// When to ask again (µs).
        retry_us: i64,
    },
    /// The next turn is beyond the horizon: ask again in `retry_us`.
    Later {
        /// When to ask again (µs).
        retry_us: i64,
    },
    /// The call ran past its deadline: nothing was reserved.
    Stale,
    /// The call wanted no turn: it only settled the allowance.
    Settled,
}

/// One reserved turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReservedTurn {
    /// The `tat` its reservation wrote (what a refund compares).
    pub(super) tat: i64,
    /// When it starts, on the store's clock (µs).
    pub(super) start: i64,
}

impl ReserveAnswer {
    /// The script's word for this answer.
    #[cfg(test)]
    pub(super) fn word(&self) -> &'static str {
        match self {
            ReserveAnswer::Go { .. } => "go",
            ReserveAnswer::Ahead { .. } => "ahead",
            ReserveAnswer::Cool { .. } => "cool",
            ReserveAnswer::Busy { .. } => "busy",
            ReserveAnswer::Behind { .. } => "behind",
            ReserveAnswer::Later { .. } => "later",
            ReserveAnswer::Stale => "stale",
            ReserveAnswer::Settled => "settled",
        }
    }
}

impl ReserveReply {
    /// Reads the reply's one string: `kind|µs|cause|learned rate|operator rate|tat|interval|
    /// start|now`, then `|tat|start` for each further turn of a `go`. An `ahead` carries its
    /// tokens and slots where a `go` carries its `tat` and interval.
    fn parse(text: &str) -> Result<ReserveReply, BadReply> {
        let mut fields = text.split('|');
        let mut next = |what: &str| {
            fields
                .next()
                .ok_or_else(|| BadReply(format!("a reservation reply without its {what}")))
        };
        let kind = next("kind")?;
        let micros = number(next("µs")?, "µs")?;
        let cause = next("cause")?;
        let rate = next("learned rate")?
            .parse()
            .ok()
            .filter(|r: &f64| r.is_finite() && *r > 0.0)
            .ok_or_else(|| BadReply("a reservation reply without a learned rate".into()))?;
        let rate_override = next("operator rate")?
            .parse()
            .ok()
            .filter(|r: &f64| r.is_finite() && *r > 0.0);
        let (tat, interval, start) = (next("tat")?, next("interval")?, next("start")?);
        let now = number(next("clock")?, "clock")?;
        let rest: Vec<&str> = fields.collect();
        let answer = match kind {
            "go" => {
                if rest.len() % 2 != 0 {
                    return Err(BadReply("a further turn without its start".into()));
                }
                let more = rest
                    .chunks(2)
                    .map(|pair| {
                        Ok(ReservedTurn {
                            tat: number(pair[0], "tat")?,
                            start: number(pair[1], "start")?,
                        })
                    })
                    .collect::<Result<Vec<_>, BadReply>>()?;
                ReserveAnswer::Go {
                    wait_us: micros,
                    interval: number(interval, "interval")?,
                    first: ReservedTurn {
                        tat: number(tat, "tat")?,
                        start: number(start, "start")?,
                    },
                    more,
                }
            }
            "ahead" => ReserveAnswer::Ahead {
                tokens: number(tat, "tokens")?,
                slots: number(interval, "slots")?,
            },
            "cool" => ReserveAnswer::Cool {
                remaining_us: micros,
                cause: CooldownCause::from_word(Some(cause)),
            },
            "busy" => ReserveAnswer::Busy { retry_us: micros },
            "behind" => ReserveAnswer::Behind { retry_us: micros },
            "later" => ReserveAnswer::Later { retry_us: micros },
            "stale" => ReserveAnswer::Stale,
            "settled" => ReserveAnswer::Settled,
            other => return Err(BadReply(format!("an unknown answer {other:?}"))),
        };
        if !rest.is_empty() && !matches!(answer, ReserveAnswer::Go { .. }) {
            return Err(BadReply(format!("further turns after {kind:?}")));
        }
        Ok(ReserveReply {
            now,
            rate,
            rate_override,
            answer,
        })
    }
}

/// `scripts::RELEASE`: ends one turn with a round trip of its own.
#[derive(Debug, Clone)]
pub(super) struct ReleaseCall<'a> {
    /// `[shared] key_prefix`.
    pub(super) prefix: &'a str,
    /// The time (µs; unused by the script, kept for the calls' common shape).
    pub(super) now: Option<i64>,
    /// The turn's lease member.
    pub(super) member: &'a str,
    /// Whether its token is given back (its request never left).
    pub(super) refund: bool,
    /// The `tat` its reservation wrote.
    pub(super) tat: i64,
    /// Its interval (µs).
    pub(super) interval: i64,
    /// The hint channel.
    pub(super) channel: &'a str,
    /// The host key.
    pub(super) host: &'a str,
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReleaseReply {
    /// Whether the lease was still there (released now, not before, nor expired).
    pub(super) removed: bool,
}

impl Call for ReleaseCall<'_> {
    type Reply = ReleaseReply;
    const SCRIPT: &'static str = super::scripts::RELEASE;
    const OP: Op = Op::Release;

    fn write(&self, out: &mut impl CallOut) {
        write_fields!(out, self;
            keys(HostKeys { prefix: self.prefix, host: self.host }):
                budget_key, leases_key, waiting_key;
            args: now, member, refund, tat, interval, channel, host);
    }

    fn read(value: Value) -> Result<ReleaseReply, BadReply> {
        match integer(value)? {
            0 => Ok(ReleaseReply { removed: false }),
            1 => Ok(ReleaseReply { removed: true }),
            n => Err(BadReply(format!("{n} leases removed"))),
        }
    }
}

/// `scripts::REPORT`: what one answer taught.
#[derive(Debug, Clone)]
pub(super) struct ReportCall<'a> {
    /// `[shared] key_prefix`.
    pub(super) prefix: &'a str,
    /// The time (µs), `None`: the store's clock.
    pub(super) now: Option<i64>,
    /// A cooldown that started or grew (µs, `0`: none).
    pub(super) cooldown_us: i64,
    /// Its cause (`CooldownCause::word`, `''` without one).
    pub(super) cause: String,
    /// This instance's rate before the answer.
    pub(super) rate_before: f64,
    /// And after it.
    pub(super) rate_after: f64,
    /// When the answered turn started, on the store's clock (µs): the wave rule.
    pub(super) started_us: i64,
    /// The lowest rate a cut reaches.
    pub(super) min_rate: f64,
    /// The highest rate a raise reaches.
    pub(super) ceiling: f64,
    /// The configured rate: where the learned rate starts.
    pub(super) configured_rate: f64,
    /// The configured burst.
    pub(super) burst: u32,
    /// A standing cap on the rate (`None`: none).
    pub(super) cap: Option<f64>,
    /// How long the cap stands (µs).
    pub(super) cap_us: i64,
    /// The hint channel.
    pub(super) channel: &'a str,
    /// The host key.
    pub(super) host: &'a str,
    /// How long the host's keys outlive the call when nothing else uses them (µs).
    pub(super) idle_ttl_us: i64,
}

/// What the store has after a report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ReportReply {
    /// The learned rate.
    pub(super) rate: f64,
    /// The cooldown left (µs).
    pub(super) cooldown_left_us: i64,
}

impl Call for ReportCall<'_> {
    type Reply = ReportReply;
    const SCRIPT: &'static str = super::scripts::REPORT;
    const OP: Op = Op::Report;

    fn write(&self, out: &mut impl CallOut) {
        write_fields!(out, self;
            keys(HostKeys { prefix: self.prefix, host: self.host }): budget_key;
            args: now, cooldown_us, cause, rate_before, rate_after, started_us, min_rate,
                ceiling, configured_rate, burst, cap, cap_us, channel, host, idle_ttl_us);
    }

    fn read(value: Value) -> Result<ReportReply, BadReply> {
        let (rate, left): (String, i64) = redis::from_redis_value(value)
            .map_err(|e| BadReply(format!("a report reply of another shape: {e}")))?;
        Ok(ReportReply {
            rate: number(&rate, "learned rate")?,
            cooldown_left_us: left,
        })
    }
}

/// `scripts::BILL`: response bytes charged to the host's byte budget.
#[derive(Debug, Clone)]
pub(super) struct BillCall<'a> {
    /// `[shared] key_prefix`.
    pub(super) prefix: &'a str,
    /// The host key (the keys' hash tag only: not an argument).
    pub(super) host: &'a str,
    /// The time (µs), `None`: the store's clock.
    pub(super) now: Option<i64>,
    /// The bytes.
    pub(super) bytes: u64,
    /// The byte budget, bytes per second.
    pub(super) byte_rate: u64,
    /// How long the host's keys outlive the call when nothing else uses them (µs).
    pub(super) idle_ttl_us: i64,
}

/// What a bill did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BillReply {
    /// When the byte debt is paid, on the store's clock (µs).
    pub(super) paid_at_us: i64,
}

impl Call for BillCall<'_> {
    type Reply = BillReply;
    const SCRIPT: &'static str = super::scripts::BILL;
    const OP: Op = Op::Bill;

    fn write(&self, out: &mut impl CallOut) {
        write_fields!(out, self;
            keys(HostKeys { prefix: self.prefix, host: self.host }): budget_key;
            args: now, bytes, byte_rate, idle_ttl_us);
    }

    fn read(value: Value) -> Result<BillReply, BadReply> {
        Ok(BillReply {
            paid_at_us: number(text_of(&value)?, "debt's end")?,
        })
    }
}

/// `scripts::OPERATOR`: an operator's action, for every instance.
#[derive(Debug, Clone)]
pub(super) struct OperatorCall<'a> {
    /// `[shared] key_prefix`.
    pub(super) prefix: &'a str,
    /// The time (µs), `None`: the store's clock.
    pub(super) now: Option<i64>,
    /// `pause`, `resume`, `rate` or `unrate`.
    pub(super) action: &'static str,
    /// The pause in µs, or the rate (`''` for the others).
    pub(super) value: String,
    /// The hint channel.
    pub(super) channel: &'a str,
    /// The host key.
    pub(super) host: &'a str,
    /// How long the host's keys outlive the call when nothing else uses them (µs).
    pub(super) idle_ttl_us: i64,
}

impl OperatorCall<'_> {
    /// The script's action and value for `action`.
    pub(super) fn words(action: StoreAction) -> (&'static str, String) {
        match action {
            StoreAction::Pause(d) => ("pause", super::micros(d).to_string()),
            StoreAction::Resume => ("resume", String::new()),
            StoreAction::Rate(Some(r)) => ("rate", r.to_string()),
            StoreAction::Rate(None) => ("unrate", String::new()),
        }
    }
}

impl Call for OperatorCall<'_> {
    type Reply = ();
    const SCRIPT: &'static str = super::scripts::OPERATOR;
    const OP: Op = Op::Operator;

    fn write(&self, out: &mut impl CallOut) {
        write_fields!(out, self;
            keys(HostKeys { prefix: self.prefix, host: self.host }): budget_key;
            args: now, action, value, channel, host, idle_ttl_us);
    }

    fn read(value: Value) -> Result<(), BadReply> {
        done(value)
    }
}

/// `scripts::WITHDRAW`: an instance leaves a host's waiting list.
#[derive(Debug, Clone)]
pub(super) struct WithdrawCall<'a> {
    /// `[shared] key_prefix`.
    pub(super) prefix: &'a str,
    /// This instance's id.
    pub(super) who: &'a str,
    /// The hint channel.
    pub(super) channel: &'a str,
    /// The host key.
    pub(super) host: &'a str,
}

impl Call for WithdrawCall<'_> {
    type Reply = ();
    const SCRIPT: &'static str = super::scripts::WITHDRAW;
    const OP: Op = Op::Withdraw;

    fn write(&self, out: &mut impl CallOut) {
        write_fields!(out, self;
            keys(HostKeys { prefix: self.prefix, host: self.host }):
                waiting_key, waiting_expiry_key, budget_key;
            args: who, channel, host);
    }

    fn read(value: Value) -> Result<(), BadReply> {
        done(value)
    }
}

/// `scripts::HEARTBEAT`: this instance is alive.
#[derive(Debug, Clone)]
pub(super) struct HeartbeatCall<'a> {
    /// `[shared] key_prefix`.
    pub(super) prefix: &'a str,
    /// The time (µs), `None`: the store's clock.
    pub(super) now: Option<i64>,
    /// This instance's id.
    pub(super) instance: &'a str,
    /// How long an instance counts as live after its last beat (µs).
    pub(super) live_for_us: i64,
}

/// What a beat counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HeartbeatReply {
    /// The live instances.
    pub(super) live: u32,
    /// The store's clock (µs).
    pub(super) now: i64,
}

impl Call for HeartbeatCall<'_> {
    type Reply = HeartbeatReply;
    const SCRIPT: &'static str = super::scripts::HEARTBEAT;
    const OP: Op = Op::Heartbeat;

    fn write(&self, out: &mut impl CallOut) {
        write_fields!(out, self;
            keys(GroupKeys { prefix: self.prefix }): instances_key;
            args: now, instance, live_for_us);
    }

    fn read(value: Value) -> Result<HeartbeatReply, BadReply> {
        let (live, now): (u32, String) = redis::from_redis_value(value)
            .map_err(|e| BadReply(format!("a heartbeat reply of another shape: {e}")))?;
        Ok(HeartbeatReply {
            live,
            now: number(&now, "clock")?,
        })
    }
}

/// `scripts::RENEW`: keeps this instance's leases of one host alive.
#[derive(Debug, Clone)]
pub(super) struct RenewCall<'a> {
    /// `[shared] key_prefix`.
    pub(super) prefix: &'a str,
    /// The host key (the keys' hash tag only: not an argument).
    pub(super) host: &'a str,
    /// The time (µs), `None`: the store's clock.
    pub(super) now: Option<i64>,
    /// How long a lease lasts from now (µs).
    pub(super) lease_us: i64,
    /// The lease members to renew.
    pub(super) members: &'a [String],
}

impl Call for RenewCall<'_> {
    type Reply = ();
    const SCRIPT: &'static str = super::scripts::RENEW;
    const OP: Op = Op::Renew;

    fn write(&self, out: &mut impl CallOut) {
        write_fields!(out, self;
            keys(HostKeys { prefix: self.prefix, host: self.host }): leases_key;
            args: now, lease_us);
        for member in self.members {
            out.tail("members", &[("member", member.clone())]);
        }
    }

    fn read(value: Value) -> Result<(), BadReply> {
        done(value)
    }
}

/// A reply as text (a bulk or simple string).
fn text_of(value: &Value) -> Result<&str, BadReply> {
    match value {
        Value::BulkString(bytes) => {
            std::str::from_utf8(bytes).map_err(|_| BadReply("a reply not in UTF-8".into()))
        }
        Value::SimpleString(text) => Ok(text.as_str()),
        other => Err(BadReply(format!("{other:?} where a string was due"))),
    }
}

/// A reply that is one integer.
fn integer(value: Value) -> Result<i64, BadReply> {
    redis::from_redis_value(value).map_err(|e| BadReply(format!("no integer: {e}")))
}

/// The `1` of a script that answers nothing else.
fn done(value: Value) -> Result<(), BadReply> {
    match integer(value)? {
        1 => Ok(()),
        n => Err(BadReply(format!("{n} where 1 was due"))),
    }
}

/// A field read as a number.
fn number<T: std::str::FromStr>(text: &str, what: &str) -> Result<T, BadReply> {
    text.parse()
        .map_err(|_| BadReply(format!("{text:?} as the {what}")))
}

#[cfg(test)]
mod tests {
    //! The calls written here against their scripts' headers: a field added, dropped or moved on
    //! one side only fails these tests.

    use super::*;

    /// The names a call writes, in order, or a script's header gives.
    #[derive(Debug, Default, PartialEq, Eq)]
    struct Names {
        keys: Vec<String>,
        args: Vec<String>,
        /// The tail's name and the names of one item's values.
        tail: Option<(String, Vec<String>)>,
    }

    impl CallOut for Names {
        fn key(&mut self, name: &'static str, _key: String) {
            assert!(self.args.is_empty(), "key {name} after the arguments");
            self.keys.push(name.into());
        }

        fn arg(&mut self, name: &'static str, _value: String) {
            assert!(self.tail.is_none(), "argument {name} after the tail");
            self.args.push(name.into());
        }

        fn tail(&mut self, tail: &'static str, item: &[(&'static str, String)]) {
            let names: Vec<String> = item.iter().map(|(n, _)| n.to_string()).collect();
            match &self.tail {
                None => self.tail = Some((tail.into(), names)),
                Some(first) => assert_eq!(first, &(tail.to_string(), names), "items differ"),
            }
        }
    }

    /// The names `call` writes.
    fn written(call: &impl Call) -> Names {
        let mut names = Names::default();
        call.write(&mut names);
        names
    }

    /// The names a script's header gives its keys and arguments: the `local <name> = ...KEYS[i]`
    /// and `local <name> = ...ARGV[i]` lines at the top, `i` counting up from 1 in each, then at
    /// most one `local <tail> = table_from(ARGV, <n + 1>)`; one tail item's names come from
    /// `local a, b = unpack(<tail>, i, i + 1)` (or `for _, a in ipairs(<tail>)`) below. Nothing
    /// below the header may read `KEYS` or `ARGV`.
    fn header(script: &str) -> Result<Names, String> {
        let mut names = Names::default();
        let mut lines = script
            .lines()
            .map(str::trim)
            .skip_while(|l| l.is_empty() || l.starts_with("--"))
            .peekable();
        while let Some(line) = lines.peek() {
            let Some((name, expr)) = line
                .strip_prefix("local ")
                .and_then(|rest| rest.split_once(" = "))
            else {
                break;
            };
            if let Some(i) = index_after(expr, "KEYS[") {
                if i != names.keys.len() + 1 || !names.args.is_empty() {
                    return Err(format!("{name} is KEYS[{i}], out of order"));
                }
                names.keys.push(name.into());
            } else if let Some(i) = index_after(expr, "table_from(ARGV, ") {
                if i != names.args.len() + 1 {
                    return Err(format!("the tail {name} starts at ARGV[{i}], out of order"));
                }
                names.tail = Some((name.into(), Vec::new()));
            } else if let Some(i) = index_after(expr, "ARGV[") {
                if i != names.args.len() + 1 || names.tail.is_some() {
                    return Err(format!("{name} is ARGV[{i}], out of order"));
                }
                names.args.push(name.into());
            } else {
                break;
            }
            lines.next();
        }
        let rest: Vec<&str> = lines.collect();
        if let Some(line) = rest
            .iter()
            .find(|l| l.contains("KEYS") || l.contains("ARGV"))
        {
            return Err(format!("read below the header: {line}"));
        }
        if let Some((tail, item)) = &mut names.tail {
            let unpack = format!("= unpack({tail}, i, i + ");
            let each = format!(" in ipairs({tail}) do");
            for line in &rest {
                if let Some((left, _)) = line.split_once(&unpack) {
                    let list = left.trim().strip_prefix("local ").unwrap_or(left);
                    item.extend(list.split(',').map(|n| n.trim().to_string()));
                } else if let Some((left, _)) = line.split_once(&each) {
                    item.extend(left.strip_prefix("for _, ").map(str::to_string));
                }
            }
        }
        Ok(names)
    }

    /// The number after `marker` in `expr`.
    fn index_after(expr: &str, marker: &str) -> Option<usize> {
        let (_, after) = expr.split_once(marker)?;
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    }

    /// Checks a call against its script's header.
    fn check(call: &impl Call, script: &str) -> Result<(), String> {
        let header = header(script)?;
        let written = written(call);
        if header == written {
            Ok(())
        } else {
            Err(format!("written {written:?}\nheader  {header:?}"))
        }
    }

    fn reserve() -> ReserveCall<'static> {
        ReserveCall {
            prefix: "t",
            now: None,
            mine: 1.0,
            configured_rate: 1.0,
            burst: 1,
            concurrency: 1,
            lease_us: 1,
            member: "m",
            horizon_us: 1,
            rejoin: false,
            idle_ttl_us: 1,
            channel: "c",
            host: "h:80",
            want: 1,
            who: "w",
            waited_us: 0,
            deadline_us: 0,
            waiting_place_us: 1,
            ask_seq: None,
            ask_spent: None,
            ask_tokens: None,
            ask_slots: None,
            ask_in_use: None,
            byte_rate: None,
            byte_burst: None,
            ended: vec![EndedTurn {
                member: "e",
                refund: true,
                tat: 1,
                interval: 1,
            }],
        }
    }

    #[test]
    fn every_call_writes_what_its_script_header_reads_in_its_order() {
        let (prefix, host, channel) = ("t", "h:80", "c");
        let results = [
            ("reserve", check(&reserve(), ReserveCall::SCRIPT)),
            (
                "release",
                check(
                    &ReleaseCall {
                        prefix,
                        now: None,
                        member: "m",
                        refund: false,
                        tat: 0,
                        interval: 0,
                        channel,
                        host,
                    },
                    ReleaseCall::SCRIPT,
                ),
            ),
            (
                "report",
                check(
                    &ReportCall {
                        prefix,
                        now: None,
                        cooldown_us: 0,
                        cause: String::new(),
                        rate_before: 1.0,
                        rate_after: 1.0,
                        started_us: 0,
                        min_rate: 1.0,
                        ceiling: 1.0,
                        configured_rate: 1.0,
                        burst: 1,
                        cap: None,
                        cap_us: 0,
                        channel,
                        host,
                        idle_ttl_us: 0,
                    },
                    ReportCall::SCRIPT,
                ),
            ),
            (
                "bill",
                check(
                    &BillCall {
                        prefix,
                        host,
                        now: None,
                        bytes: 1,
                        byte_rate: 1,
                        idle_ttl_us: 1,
                    },
                    BillCall::SCRIPT,
                ),
            ),
            (
                "operator",
                check(
                    &OperatorCall {
                        prefix,
                        now: None,
                        action: "resume",
                        value: String::new(),
                        channel,
                        host,
                        idle_ttl_us: 1,
                    },
                    OperatorCall::SCRIPT,
                ),
            ),
            (
                "withdraw",
                check(
                    &WithdrawCall {
                        prefix,
                        who: "w",
                        channel,
                        host,
                    },
                    WithdrawCall::SCRIPT,
                ),
            ),
            (
                "heartbeat",
                check(
                    &HeartbeatCall {
                        prefix,
                        now: None,
                        instance: "i",
                        live_for_us: 1,
                    },
                    HeartbeatCall::SCRIPT,
                ),
            ),
            (
                "renew",
                check(
                    &RenewCall {
                        prefix,
                        host,
                        now: None,
                        lease_us: 1,
                        members: &["m".to_string()],
                    },
                    RenewCall::SCRIPT,
                ),
            ),
        ];
        for (name, result) in results {
            assert_eq!(result, Ok(()), "{name}");
        }
    }

    /// The check has teeth: two arguments swapped, one dropped, or one read below the header,
    /// on either side, fail it.
    #[test]
    fn a_slip_on_either_side_fails_the_check() {
        let script = ReserveCall::SCRIPT;
        // The Lua's header with two lines swapped.
        let swapped = script.replacen(
            "local burst = tonumber(ARGV[4])\nlocal concurrency = tonumber(ARGV[5])",
            "local concurrency = tonumber(ARGV[4])\nlocal burst = tonumber(ARGV[5])",
            1,
        );
        assert_ne!(swapped, script, "the test's edit applies");
        assert!(check(&reserve(), &swapped).is_err());
        // A line dropped: every later index is out of order.
        let dropped = script.replacen("local who = ARGV[14] or ''\n", "", 1);
        assert_ne!(dropped, script);
        assert!(check(&reserve(), &dropped).is_err());
        // A positional read below the header.
        let stray = format!("{script}\nlocal late = ARGV[3]\n");
        assert!(check(&reserve(), &stray).is_err());
        // The tail's item in another order.
        let item = script.replacen(
            "local ended_member, ended_refund,",
            "local ended_refund, ended_member,",
            1,
        );
        assert_ne!(item, script);
        assert!(check(&reserve(), &item).is_err());
        // On the Rust side: a writer that leaves a field out.
        struct Short;
        impl Call for Short {
            type Reply = ();
            const SCRIPT: &'static str = super::super::scripts::BILL;
            const OP: Op = Op::Bill;
            fn write(&self, out: &mut impl CallOut) {
                out.key("budget_key", String::new());
                out.arg("now", String::new());
                out.arg("byte_rate", String::new());
                out.arg("bytes", String::new());
                out.arg("idle_ttl_us", String::new());
            }
            fn read(_: Value) -> Result<(), BadReply> {
                Ok(())
            }
        }
        assert!(check(&Short, Short::SCRIPT).is_err());
    }

    #[test]
    fn a_reservation_reply_reads_into_its_answer() {
        let read = |text: &str| ReserveCall::read(Value::BulkString(text.as_bytes().to_vec()));
        assert_eq!(
            read("go|5||10||1000|300|20|40|1002|30|1004|40"),
            Ok(ReserveReply {
                now: 40,
                rate: 10.0,
                rate_override: None,
                answer: ReserveAnswer::Go {
                    wait_us: 5,
                    interval: 300,
                    first: ReservedTurn {
                        tat: 1000,
                        start: 20
                    },
                    more: vec![
                        ReservedTurn {
                            tat: 1002,
                            start: 30
                        },
                        ReservedTurn {
                            tat: 1004,
                            start: 40
                        }
                    ],
                },
            })
        );
        let ahead = read("ahead|0||10|2.5|64|8|77|77").map(|r| (r.answer, r.rate_override));
        assert_eq!(
            ahead,
            Ok((
                ReserveAnswer::Ahead {
                    tokens: 64,
                    slots: 8
                },
                Some(2.5)
            ))
        );
        assert_eq!(
            read("cool|3000|status:429|10|||0|0|5").map(|r| r.answer),
            Ok(ReserveAnswer::Cool {
                remaining_us: 3000,
                cause: CooldownCause::Status(429)
            })
        );
        assert_eq!(
            read("behind|7||10|||0|0|5").map(|r| r.answer),
            Ok(ReserveAnswer::Behind { retry_us: 7 })
        );
        // Malformed replies are errors, never a panic.
        for bad in [
            "",
            "go",
            "go|5||10||x|300|20|40",
            "go|5||10||1000|300|20|40|1002",
            "go|5||0||1000|300|20|40",
            "what|5||10|||0|0|5",
            "busy|5||10|||0|0|5|1|2",
            "ahead|0||10||-1|8|0|5",
        ] {
            assert!(read(bad).is_err(), "{bad:?}");
        }
        assert!(ReserveCall::read(Value::Int(1)).is_err());
        assert!(ReserveCall::read(Value::Nil).is_err());
    }

    #[test]
    fn the_other_replies_read_into_their_types_or_an_error() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(
            ReportCall::read(Value::Array(vec![bulk("2.5"), Value::Int(7)])),
            Ok(ReportReply {
                rate: 2.5,
                cooldown_left_us: 7
            })
        );
        assert!(ReportCall::read(Value::Array(vec![bulk("x"), Value::Int(7)])).is_err());
        assert!(ReportCall::read(Value::Int(1)).is_err());
        assert_eq!(
            HeartbeatCall::read(Value::Array(vec![Value::Int(3), bulk("99")])),
            Ok(HeartbeatReply { live: 3, now: 99 })
        );
        assert!(HeartbeatCall::read(Value::Array(vec![Value::Int(3)])).is_err());
        assert_eq!(
            ReleaseCall::read(Value::Int(1)),
            Ok(ReleaseReply { removed: true })
        );
        assert!(ReleaseCall::read(Value::Int(2)).is_err());
        assert_eq!(BillCall::read(bulk("12")), Ok(BillReply { paid_at_us: 12 }));
        assert!(BillCall::read(Value::Nil).is_err());
        assert_eq!(OperatorCall::read(Value::Int(1)), Ok(()));
        assert!(WithdrawCall::read(bulk("no")).is_err());
    }
}
