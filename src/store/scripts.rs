//! The Lua scripts that keep a host's shared budget in Redis, each one atomic and run by one
//! round trip (`EVALSHA`, `EVAL` once after the store restarted).
//!
//! Each script is a file of its own under `lua/` (`reserve.lua`, ...; the helpers of `PRELUDE` in
//! `prelude.lua`), read in here with `include_str!` and checked by `luacheck` in `scripts/test`
//! (settings in `lua/.luacheckrc`: Lua 5.1, as Redis runs it, and Redis' globals).
//!
//! Every script names its keys and arguments once, in a header at its top (`local budget_key =
//! KEYS[1]`, `local now = now_us(ARGV[1])`, ...; a repeated tail as `table_from(ARGV, n)`), and
//! reads them by those names only. The header's order is the one its call's type writes
//! (`calls.rs`), and a unit test there fails if the two differ in count or order. Named
//! arguments rather than one encoded table: nothing to decode in Lua nor encode in Rust on every
//! request's path, and each argument stays a plain Redis string, as the stored fields are.
//!
//! Every script reads the time from Redis (`TIME`, in microseconds: whole seconds would break any
//! rate above one a second), so instances' clocks never matter; tests pass an explicit `now`
//! instead. Times and counts are kept as whole microseconds written with `%d`: Lua's
//! `tostring` keeps only 14 digits, which would lose the microseconds of a Unix time.
//!
//! Keys of one host share a hash tag (`<prefix>:{<host:port>}:b` and `...:l`), so Redis Cluster
//! keeps them in one slot. The budget hash holds `tat` (the GCRA theoretical arrival time: the
//! next turn is free from `tat - τ` on, where `τ = (burst - 1) × interval`), `cd`/`cdc` (the
//! cooldown's end and cause), `op` (an operator's pause), `ovr` (an operator's rate), `rate` and
//! `cut` (the learned rate and when it was last cut), `cap`/`capx` (a Crawl-delay or server cap and
//! its end), `w` (some instance waits for a slot). The lease set holds one member per turn in
//! flight, scored by its expiry.

/// Shared helpers, prepended to every script.
const PRELUDE: &str = include_str!("lua/prelude.lua");

/// Asks for a turn (`calls::ReserveCall`). `KEYS`: `budget_key`, `leases_key`, `waiting_key`,
/// `waiting_expiry_key`, `allowances_key`. `ARGV`: `now`, `mine` (the rate this instance would
/// use, its caps included), `configured_rate` (the learned rate's start), `burst`,
/// `concurrency`, `lease_us`, `member` (the lease member), `horizon_us`, `rejoin` (`1`: the
/// bucket starts empty), `idle_ttl_us`, `channel` (the hints'), `host` (the host key), `want`
/// (the most turns wanted, `n`: as many as wait in the instance's queue, within its slots;
/// `0`: none, only settle the allowance), `who` (this instance's id; `''`: no waiting list, no
/// allowance), `waited_us` (how long its next request has waited for its turn: since it arrived,
/// or since its job's last turn there if later), `deadline_us` (on the store's clock; `''` or
/// `0`: none), `waiting_place_us` (how long a place in the waiting list lasts unless renewed),
/// this instance's allowance as `ask_seq`, `ask_spent`, `ask_tokens` (wanted), `ask_slots`
/// (wanted), `ask_in_use` (slots in use) (all `''`: it has none and wants none; see below), the
/// host's byte budget as `byte_rate` (bytes per second) and `byte_burst` (`''`: none; a turn
/// waits while the response bytes the instances billed (`BILL`) are in debt, `bt` being when
/// the debt is paid); then the tail `ended`, four for each turn of this host that ended since
/// this instance's last call: `ended_member`, `ended_refund`, `ended_tat` (the `tat` its
/// reservation wrote), `ended_interval` (what `RELEASE` takes), the latest turn first. Those
/// are released first, as `RELEASE` would, so that a busy host's turns end without a round trip
/// of their own; they are released even by a call past its deadline.
///
/// **Allowances** (turns leased ahead, for hosts with room to spare). A call may be answered
/// `ahead`: `tokens` turns and `slots` concurrency slots that the instance spends locally, with
/// no round trip per request, until it comes back. The held turns are out of the bucket: the
/// bucket's depth for everyone else is `burst − ah` (`ah`: every instance's held tokens), so that
/// what the bucket holds plus what is held never exceeds `burst`, and the sends in any window
/// stay within `burst + rate × T` however late a held turn is spent. Held slots count against
/// the concurrency cap (`as`). Each instance's allowance is one record, the field
/// `a:<instance>` = `tokens|slots|spent|seq`, with its expiry (`lease µs` after its last call) in
/// the allowances set. Every call of an instance that has one says, in absolute terms, what it
/// spent since the record began (`spent`, a running count) and which slots still carry its
/// requests: the spent tokens are charged to `tat` now (later than they were sent: only
/// stricter), the rest given back, the slots in use kept; then a new allowance may be granted.
/// A call whose `seq` is not above the record's is a late copy and changes nothing, so that a
/// call that timed out and ran later never undoes a newer one. Granted only while nobody waits
/// (no instance listed, none answered `busy` since the last release), not at a rejoin, and only
/// when it leaves as much again to the others: `tokens` ≤ half of what the bucket holds (and at
/// least 16), `slots` ≤ half of the free ones (and at least the slots in use). A call refused
/// while others hold allowances publishes `yield <host> <instance>`: the holders give theirs back
/// at once.
/// An allowance whose instance stopped calling runs out after `lease µs`; all its tokens then
/// count as spent.
///
/// **Deadline.** A call that runs after its deadline (the instance gave up on it: the store
/// stalled, or the network held it) reserves and grants nothing and answers `stale` (what it
/// gives back, it still gives back): no lease exists that no instance knows it holds.
///
/// **Fair across instances.** The waiting list holds, for each instance refused a turn of this
/// host, when its next request began to wait (the store's clock minus the wait it sent).
/// A caller whose wait began after that of `k > 0` listed instances gets a turn only if
/// more than `k` slots are free and the turn is due now; otherwise it is answered `behind` and
/// listed itself. So a slot that comes free goes to the instance that has waited longest (not
/// to the one that freed it and asks again at once), and a paced host's turns go round the
/// instances in the order their waits began. A place lasts a quarter of its TTL between
/// renewals at most (every refusal's wait is capped at that), and places whose instance stopped
/// asking are forgotten after the TTL. A slot freed while instances are listed wakes only the
/// one listed first (`free <host> <instance>`): the others would only be refused again.
///
/// Up to `n` turns are reserved in a row (only one while older instances wait), each by the same
/// rule as one (a free concurrency slot, within the horizon), the `k`-th with the lease member
/// `<member>.<k>`, as long as they start within 2 ms of now: a host whose pace spaces its turns
/// further apart gets one per call, because a lease for a later turn would hold one of its
/// concurrency slots unused until then (the soak saw a held host's throughput halve when turns
/// up to a second ahead were batched).
///
/// Returns one string (read by `calls::ReserveReply` into the limiter's `Reservation`),
/// `kind|µs|cause|learned rate|operator rate|tat|interval|start|now` (one bulk
/// string: the client parses an array element by element, at about 1.5k instructions each, and
/// this reply is on every request's path), and for a `go` of more than one turn `|tat|start` for
/// each turn after the first, for an `ahead` `|tokens|slots`. `now` is the store's clock, from
/// which the instance sets its deadlines. `go`: a turn is reserved `µs` from now, at `start` on
/// the store's clock; `tat` and `interval` undo it if it is never used. `ahead`: an allowance of
/// `tokens` turns and `slots` concurrency slots (fields of its own, after `now`). `cool`: the
/// host is closed for `µs` more, for `cause`.
/// `busy`: every concurrency slot is taken; ask again in `µs` (the first lease's expiry, or the
/// waiting list's renewal). `behind`: instances that waited longer come first; ask again in
/// `µs` or at a `free` hint. `later`: the next turn is beyond the horizon; ask again in `µs`.
/// `stale`: past the deadline, nothing reserved. `settled`: the call wanted no turn (`n` = 0),
/// only to settle its allowance.
pub(super) const RESERVE: &str = include_str!("lua/reserve.lua");

/// Ends a turn (`calls::ReleaseCall`). `KEYS`: `budget_key`, `leases_key`, `waiting_key`.
/// `ARGV`: `now` (unused), `member` (the lease member), `refund` (`1`: the request never left),
/// `tat` (the one its reservation wrote), `interval`, `channel`, `host`. Returns `1` if the
/// lease was still there, else `0`. A
/// refund undoes the reservation only if no later one was made on top of it. When a reservation
/// was answered `busy` since the last release (the `w` flag), the hint `free <host> <instance>`
/// wakes the instance that waited longest for a slot (`free <host>`, every instance, when the
/// waiting list is empty); otherwise nobody waits and nothing is sent.
pub(super) const RELEASE: &str = include_str!("lua/release.lua");

/// Applies what one answer taught (`calls::ReportCall`). `KEYS`: `budget_key`. `ARGV`: `now`,
/// `cooldown_us` (`0`: none), `cause`, `rate_before` and `rate_after` (the answer's, as this
/// instance computed them), `started_us` (the turn's start, on Redis' clock), `min_rate`,
/// `ceiling`, `configured_rate`, `burst`, `cap` (`''`: none), `cap_us`, `channel`, `host`,
/// `idle_ttl_us`.
///
/// A cut applies once per wave: only an answer to a request that started after the last cut cuts
/// again, so N instances that see one storm of 429s cut once. A cut or a raise moves the shared
/// rate by the same factor or step as the instance's own. A cooldown only ever grows; when it
/// starts or grows, `tat` is moved so that one request (not a burst) may leave at its end, and
/// `cool <host> <ms> <cause>` tells the other instances at once. Returns `{learned rate,
/// cooldown µs left}`.
pub(super) const REPORT: &str = include_str!("lua/report.lua");

/// Charges response bytes to a host's shared byte budget (`max_bytes_per_second`,
/// `calls::BillCall`). `KEYS`: `budget_key`. `ARGV`: `now`, `bytes`, `byte_rate` (bytes per
/// second), `idle_ttl_us`. `bt` (when the byte debt is paid)
/// moves on by the time those bytes take at that rate, from now if it had passed: the byte
/// budget's GCRA, whose credit (the byte burst) the reservation allows for. Returns `bt`.
pub(super) const BILL: &str = include_str!("lua/bill.lua");

/// An operator's action, for every instance (`calls::OperatorCall`). `KEYS`: `budget_key`.
/// `ARGV`: `now`, `action` (`pause`, `resume`, `rate`, `unrate`), `value` (the pause in µs, or
/// the rate), `channel`, `host`, `idle_ttl_us`. Returns `1`. A resume ends the operator's pause and a block pause (`cdc` `soft_block` or
/// `hard_block`: the operator says it was no block; `tat` comes back to now if the pause had moved
/// it later), never a cooldown the server asked for.
pub(super) const OPERATOR: &str = include_str!("lua/operator.lua");

/// Takes an instance out of a host's waiting list (its queue for the host emptied,
/// `calls::WithdrawCall`). `KEYS`: `waiting_key`, `waiting_expiry_key`, `budget_key`. `ARGV`:
/// `who` (the instance id), `channel`, `host`. Returns `1`. Others
/// still listed are woken (`free`) if one was refused since, since the place they waited behind
/// is gone.
pub(super) const WITHDRAW: &str = include_str!("lua/withdraw.lua");

/// Says this instance is alive and counts the live ones (`calls::HeartbeatCall`). `KEYS`:
/// `instances_key`. `ARGV`: `now`, `instance` (its id), `live_for_us` (how long an instance
/// counts as live after its last beat). Returns `{live
/// instances, the store's clock (µs)}`: the clock sets the deadlines of reservations.
pub(super) const HEARTBEAT: &str = include_str!("lua/heartbeat.lua");

/// Keeps this instance's leases of one host alive (`calls::RenewCall`). `KEYS`: `leases_key`.
/// `ARGV`: `now`, `lease_us`, then the tail `members`. Returns `1`. A member already gone (released, or expired) is not brought back.
pub(super) const RENEW: &str = include_str!("lua/renew.lua");

/// A script with the prelude, ready to run.
pub(super) fn script(body: &str) -> redis::Script {
    redis::Script::new(&format!("{PRELUDE}{body}"))
}
