//! The scripts' calls as types (issue 36): one struct per script call, its fields named as the
//! script names them; one function that writes it into the script's invocation (its keys and
//! arguments, in the one order the script reads them); one that reads the script's reply into a
//! type, a malformed reply being a [`BadReply`], never a panic.
//!
//! The order of a call lives in two places only: the field list of its [`write_fields!`] here,
//! and the header of its script (`scripts.rs`), where every key and argument is given its name
//! once, at the top. The test at the end of this file holds the two together: a call whose names
//! differ from its script's header, in count or in order, fails it.

use std::time::Duration;

use redis::Value;

use super::{duration_us, AheadAsk, Op, Reservation, SharedView, StoreAction};
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
    /// This instance's allowance of the host: what it spent, what it wants (`None`: it has none
    /// and wants none; written as `ask_seq`, `ask_spent`, `ask_tokens`, `ask_slots`,
    /// `ask_in_use`).
    pub(super) ask: Option<AheadAsk>,
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
                waiting_place_us);
        let ask = self.ask.as_ref();
        out.arg("ask_seq", ask.map(|a| a.seq).wire());
        out.arg("ask_spent", ask.map(|a| a.spent).wire());
        out.arg("ask_tokens", ask.map(|a| a.want_tokens).wire());
        out.arg("ask_slots", ask.map(|a| a.want_slots).wire());
        out.arg("ask_in_use", ask.map(|a| a.in_use).wire());
        out.arg("byte_rate", self.byte_rate.wire());
        out.arg("byte_burst", self.byte_burst.wire());
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

/// The reservation script's reply, read into the limiter's own answer.
#[derive(Debug)]
pub(super) struct ReserveReply {
    /// The store's clock when it answered (µs): the instance's deadlines start from it.
    pub(super) now: i64,
    /// The answer, its turns not yet leases (`RedisStore::reserve` makes them so). `behind`
    /// reads as `Busy` (this instance holds a place in the waiting list either way), `stale`
    /// as `Later` in a millisecond (nothing was reserved: ask again).
    pub(super) reservation: Reservation<ReservedTurn>,
    /// The script's word for the answer (`go`, `behind`, `stale`, ...), for the tests.
    #[cfg(test)]
    pub(super) word: String,
}

/// One reserved turn, before it is a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReservedTurn {
    /// The `tat` its reservation wrote (what a refund compares).
    pub(super) tat: i64,
    /// The host's interval (µs), to undo the turn if it is never used.
    pub(super) interval: i64,
    /// When it starts, on the store's clock (µs).
    pub(super) start: i64,
}

impl ReserveReply {
    /// Reads the reply's one string: `kind|µs|cause|learned rate|operator rate|tat|interval|
    /// start|now`, then `|tat|start` for each further turn of a `go`, or `|tokens|slots` for an
    /// `ahead`.
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
        let view = SharedView {
            rate,
            rate_override,
        };
        let wait = duration_us(micros);
        let reservation = match (kind, &rest[..]) {
            ("go", _) => go(wait, interval, (tat, start), &rest, view)?,
            ("ahead", [tokens, slots]) => Reservation::Ahead {
                tokens: number(tokens, "tokens")?,
                slots: number(slots, "slots")?,
                view,
            },
            ("ahead", _) => {
                return Err(BadReply("an allowance without its tokens and slots".into()))
            }
            (_, [_, ..]) => return Err(BadReply(format!("further fields after {kind:?}"))),
            ("cool", []) => Reservation::Cool {
                remaining: wait,
                cause: CooldownCause::from_word(Some(cause)),
                view,
            },
            ("busy" | "behind", []) => Reservation::Busy { retry_in: wait },
            ("later", []) => Reservation::Later { retry_in: wait },
            // Answered past its deadline (the clock read was off by more than a round trip):
            // nothing was reserved, ask again.
            ("stale", []) => Reservation::Later {
                retry_in: Duration::from_millis(1),
            },
            ("settled", []) => Reservation::Settled,
            (other, []) => return Err(BadReply(format!("an unknown answer {other:?}"))),
        };
        Ok(ReserveReply {
            now,
            reservation,
            #[cfg(test)]
            word: kind.to_string(),
        })
    }
}

/// A `go`: its first turn `wait` from now, and each further turn (`tat|start` pairs) later by
/// what its start is past the first's.
fn go(
    wait: Duration,
    interval: &str,
    (tat, start): (&str, &str),
    rest: &[&str],
    view: SharedView,
) -> Result<Reservation<ReservedTurn>, BadReply> {
    if rest.len() % 2 != 0 {
        return Err(BadReply("a further turn without its start".into()));
    }
    let interval = number(interval, "interval")?;
    let turn = |tat: &str, start: &str| {
        Ok(ReservedTurn {
            tat: number(tat, "tat")?,
            interval,
            start: number(start, "start")?,
        })
    };
    let first = turn(tat, start)?;
    let more = rest
        .chunks(2)
        .map(|pair| {
            let next = turn(pair[0], pair[1])?;
            Ok((wait + duration_us(next.start - first.start), next))
        })
        .collect::<Result<Vec<_>, BadReply>>()?;
    Ok(Reservation::Go {
        wait,
        lease: first,
        more,
        view,
    })
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
            ask: None,
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

    fn release() -> ReleaseCall<'static> {
        ReleaseCall {
            prefix: "t",
            now: None,
            member: "m",
            refund: false,
            tat: 0,
            interval: 0,
            channel: "c",
            host: "h:80",
        }
    }

    fn report() -> ReportCall<'static> {
        ReportCall {
            prefix: "t",
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
            channel: "c",
            host: "h:80",
            idle_ttl_us: 0,
        }
    }

    fn operator() -> OperatorCall<'static> {
        OperatorCall {
            prefix: "t",
            now: None,
            action: "resume",
            value: String::new(),
            channel: "c",
            host: "h:80",
            idle_ttl_us: 1,
        }
    }

    #[test]
    fn every_call_writes_what_its_script_header_reads_in_its_order() {
        let (prefix, host, channel) = ("t", "h:80", "c");
        let results = [
            ("reserve", check(&reserve(), ReserveCall::SCRIPT)),
            ("release", check(&release(), ReleaseCall::SCRIPT)),
            ("report", check(&report(), ReportCall::SCRIPT)),
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
            ("operator", check(&operator(), OperatorCall::SCRIPT)),
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
        let us = Duration::from_micros;
        let turn = |tat, start| ReservedTurn {
            tat,
            interval: 300,
            start,
        };
        let go = read("go|5||10||1000|300|20|40|1002|30|1004|40").map(|r| (r.now, r.reservation));
        assert!(
            matches!(&go, Ok((40, Reservation::Go { wait, lease, more, view }))
                if *wait == us(5) && *lease == turn(1000, 20)
                    && *more == vec![(us(15), turn(1002, 30)), (us(25), turn(1004, 40))]
                    && view.rate == 10.0 && view.rate_override.is_none()),
            "{go:?}"
        );
        let ahead = read("ahead|0||10|2.5||0|0|77|64|8").map(|r| r.reservation);
        assert!(
            matches!(&ahead, Ok(Reservation::Ahead { tokens: 64, slots: 8, view })
                if view.rate_override == Some(2.5)),
            "{ahead:?}"
        );
        let cool = read("cool|3000|status:429|10|||0|0|5").map(|r| r.reservation);
        assert!(
            matches!(&cool, Ok(Reservation::Cool { remaining, cause, .. })
                if *remaining == us(3000) && *cause == CooldownCause::Status(429)),
            "{cool:?}"
        );
        // `behind` is a `Busy` (a place held in the waiting list), `stale` a `Later` in 1 ms.
        let behind = read("behind|7||10|||0|0|5").map(|r| r.reservation);
        assert!(
            matches!(&behind, Ok(Reservation::Busy { retry_in }) if *retry_in == us(7)),
            "{behind:?}"
        );
        let stale = read("stale|0||10|||0|0|5").map(|r| r.reservation);
        assert!(
            matches!(&stale, Ok(Reservation::Later { retry_in }) if *retry_in == us(1000)),
            "{stale:?}"
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
            "ahead|0||10|||0|0|5|-1|8",
            "ahead|0||10|||0|0|5|64",
            "cool|5||10|||0|0|5|1|2",
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
