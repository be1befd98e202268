//! The Lua scripts that keep a host's shared budget in Redis, each one atomic and run by one
//! round trip (`EVALSHA`, `EVAL` once after the store restarted).
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
const PRELUDE: &str = r#"
local function now_us(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function int(x) return string.format('%d', x) end
local function real(x) return string.format('%.17g', x) end
local function free_hint(waiting, channel, host)
  local first = waiting and redis.call('ZRANGE', waiting, 0, 0) or {}
  if first[1] then
    redis.call('PUBLISH', channel, 'free ' .. host .. ' ' .. first[1])
  else
    redis.call('PUBLISH', channel, 'free ' .. host)
  end
end
local function keep_at_least(key, ms)
  local ttl = redis.call('PTTL', key)
  if ttl < ms then redis.call('PEXPIRE', key, ms) end
end
local function table_from(t, first)
  local out = {}
  for i = first, #t do out[#out + 1] = t[i] end
  return out
end
"#;

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
/// Returns one string (read by `calls::ReserveReply` into `calls::ReserveAnswer`),
/// `kind|µs|cause|learned rate|operator rate|tat|interval|start|now` (one bulk
/// string: the client parses an array element by element, at about 1.5k instructions each, and
/// this reply is on every request's path), and for a `go` of more than one turn `|tat|start` for
/// each turn after the first. `now` is the store's clock, from which the instance sets its
/// deadlines. `go`: a turn is reserved `µs` from now, at `start` on the store's clock; `tat` and
/// `interval` undo it if it is never used. `ahead`: an allowance of `tat` tokens and `interval`
/// slots. `cool`: the host is closed for `µs` more, for `cause`.
/// `busy`: every concurrency slot is taken; ask again in `µs` (the first lease's expiry, or the
/// waiting list's renewal). `behind`: instances that waited longer come first; ask again in
/// `µs` or at a `free` hint. `later`: the next turn is beyond the horizon; ask again in `µs`.
/// `stale`: past the deadline, nothing reserved. `settled`: the call wanted no turn (`n` = 0),
/// only to settle its allowance.
pub(super) const RESERVE: &str = r#"
local budget_key = KEYS[1]
local leases_key = KEYS[2]
local waiting_key = KEYS[3]
local waiting_expiry_key = KEYS[4]
local allowances_key = KEYS[5]
local now = now_us(ARGV[1])
local mine = tonumber(ARGV[2])
local configured_rate = tonumber(ARGV[3])
local burst = tonumber(ARGV[4])
local concurrency = tonumber(ARGV[5])
local lease_us = tonumber(ARGV[6])
local member = ARGV[7]
local horizon_us = tonumber(ARGV[8])
local rejoin = ARGV[9] == '1'
local idle_ttl_us = tonumber(ARGV[10])
local channel = ARGV[11]
local host = ARGV[12]
local want = tonumber(ARGV[13]) or 1
local who = ARGV[14] or ''
local waited_us = tonumber(ARGV[15]) or 0
local deadline_us = tonumber(ARGV[16] or '')
local waiting_place_us = tonumber(ARGV[17])
local ask_seq = tonumber(ARGV[18])
local ask_spent = tonumber(ARGV[19])
local ask_tokens = tonumber(ARGV[20])
local ask_slots = tonumber(ARGV[21])
local ask_in_use = tonumber(ARGV[22])
local byte_rate = tonumber(ARGV[23])
local byte_burst = tonumber(ARGV[24])
local ended = table_from(ARGV, 25)
-- (The header above names every key and argument once, in the order `calls::ReserveCall` writes
-- them; a unit test compares the two. Named arguments rather than one encoded table: no decoder
-- in Lua or encoder in Rust on every request's path, and each stays a plain Redis string.)
local BATCH_AHEAD_US = 2000
local AHEAD_MIN = 16
local function reply_of(fields, more)
  return table.concat(fields, '|') .. '|' .. int(now) .. (more or '')
end
local freed = 0
for i = 1, #ended, 4 do
  local ended_member, ended_refund, ended_tat, ended_interval = unpack(ended, i, i + 3)
  if redis.call('ZREM', leases_key, ended_member) == 1 then
    freed = freed + 1
    if ended_refund == '1' then
      local tat = redis.call('HGET', budget_key, 'tat')
      if tat == ended_tat then
        redis.call('HSET', budget_key, 'tat', int(tonumber(tat) - tonumber(ended_interval)))
      end
    end
  end
end
local h = redis.call('HMGET', budget_key, 'tat', 'cd', 'cdc', 'op', 'ovr', 'rate', 'cap', 'capx', 'ah', 'as', 'w', 'bt')
local learned = tonumber(h[6]) or configured_rate
local view_rate, view_ovr = real(learned), h[5] or ''
local rate = tonumber(h[5]) or learned
local cap = tonumber(h[7])
if cap and cap > 0 and (tonumber(h[8]) or 0) > now and cap < rate then rate = cap end
if mine and mine > 0 and mine < rate then rate = mine end
if not rate or rate <= 0 then rate = configured_rate end
local interval = math.ceil(1000000 / rate)
-- Allowances: what every instance holds, and this instance's record.
local stored_tat = tonumber(h[1]) or 0
local held, held_slots = tonumber(h[9]) or 0, tonumber(h[10]) or 0
local held0, slots0, tat0 = held, held_slots, stored_tat
local function charge(n)
  if n > 0 then
    if stored_tat < now then stored_tat = now end
    stored_tat = stored_tat + n * interval
  end
end
local function fields_of(rec)
  local t = {}
  for x in string.gmatch(rec or '', '[^|]+') do t[#t + 1] = tonumber(x) end
  return t
end
if allowances_key and (held > 0 or held_slots > 0) then
  -- Allowances whose instance stopped calling: every token counts as spent.
  local first = redis.call('ZRANGE', allowances_key, 0, 0, 'WITHSCORES')
  if first[2] and tonumber(first[2]) <= now then
    for _, inst in ipairs(redis.call('ZRANGEBYSCORE', allowances_key, '-inf', int(now))) do
      local r = fields_of(redis.call('HGET', budget_key, 'a:' .. inst))
      held = held - (r[1] or 0)
      held_slots = held_slots - (r[2] or 0)
      charge(r[1] or 0)
      redis.call('HDEL', budget_key, 'a:' .. inst)
    end
    redis.call('ZREMRANGEBYSCORE', allowances_key, '-inf', int(now))
  end
end
local record = nil
local kept_slots = 0
if allowances_key and who ~= '' and ask_seq then
  local r = fields_of(redis.call('HGET', budget_key, 'a:' .. who))
  -- A late copy (its seq not above the record's) changes nothing and is granted nothing.
  if ask_seq > (r[4] or -1) then
    -- Spent tokens are charged now, the rest given back; the slots in use stay held.
    local spent = math.min(math.max(ask_spent - (r[3] or 0), 0), r[1] or 0)
    charge(spent)
    held = held - (r[1] or 0)
    kept_slots = ask_in_use or 0
    held_slots = held_slots - (r[2] or 0) + kept_slots
    if (r[2] or 0) > kept_slots or (r[1] or 0) > spent then freed = freed + 1 end
    record = {0, kept_slots, ask_spent, ask_seq}
  end
end
if held < 0 then held = 0 end
if held_slots < 0 then held_slots = 0 end
local function persist()
  if stored_tat ~= tat0 then redis.call('HSET', budget_key, 'tat', int(stored_tat)) end
  if held ~= held0 then redis.call('HSET', budget_key, 'ah', int(held)) end
  if held_slots ~= slots0 then redis.call('HSET', budget_key, 'as', int(held_slots)) end
  if record then
    redis.call('HSET', budget_key, 'a:' .. who, table.concat(record, '|'))
    redis.call('ZADD', allowances_key, int(now + lease_us), who)
    keep_at_least(allowances_key, math.ceil(lease_us / 1000) + 1000)
  end
end
if freed > 0 and redis.call('HDEL', budget_key, 'w') == 1 then
  free_hint(waiting_key, channel, host)
end
if deadline_us and deadline_us > 0 and now > deadline_us then
  persist()
  return reply_of({'stale', '0', '', view_rate, view_ovr, '', '0', '0'})
end
-- A call that only settles this instance's allowance (it wants no turn).
if want == 0 then
  persist()
  return reply_of({'settled', '0', '', view_rate, view_ovr, '', '0', '0'})
end
local function refused(fields)
  -- Others' allowances may be what holds this caller back: they give them back.
  if held > 0 or held_slots > kept_slots then
    redis.call('PUBLISH', channel, 'yield ' .. host .. ' ' .. who)
  end
  persist()
  return reply_of(fields)
end
local block, cause = 0, ''
local cd, op = tonumber(h[2]) or 0, tonumber(h[4]) or 0
if cd > now then block = cd; cause = h[3] or 'restored' end
if op > now and op > block then block = op; cause = 'operator' end
if block > now then
  persist()
  return reply_of({'cool', int(block - now), cause, view_rate, view_ovr, '', '0', '0'})
end
local fair = waiting_expiry_key ~= nil and who ~= ''
local arrival, older, refresh, listed = now, 0, 0, 0
if fair then
  arrival = now - waited_us
  refresh = math.floor(waiting_place_us / 4)
  -- Nobody listed (the usual case of a host nobody contends for): one command.
  if redis.call('ZCARD', waiting_key) > 0 then
    -- Places whose instance stopped asking: looked for only when the first has run out.
    local first = redis.call('ZRANGE', waiting_expiry_key, 0, 0, 'WITHSCORES')
    if first[2] and tonumber(first[2]) <= now then
      local gone = redis.call('ZRANGEBYSCORE', waiting_expiry_key, '-inf', int(now))
      for _, m in ipairs(gone) do redis.call('ZREM', waiting_key, m) end
      redis.call('ZREMRANGEBYSCORE', waiting_expiry_key, '-inf', int(now))
    end
    redis.call('ZREM', waiting_key, who)
    redis.call('ZREM', waiting_expiry_key, who)
    listed = redis.call('ZCARD', waiting_key)
    older = redis.call('ZCOUNT', waiting_key, '-inf', '(' .. int(arrival))
  end
end
local function wait_in_line(until_us)
  if fair then
    local ttl = waiting_place_us
    redis.call('ZADD', waiting_key, int(arrival), who)
    redis.call('ZADD', waiting_expiry_key, int(now + ttl), who)
    -- Nothing else writes these keys: their TTL is simply the place's, and a second.
    redis.call('PEXPIRE', waiting_key, math.ceil(ttl / 1000) + 1000)
    redis.call('PEXPIRE', waiting_expiry_key, math.ceil(ttl / 1000) + 1000)
    if until_us > refresh then until_us = refresh end
  end
  return until_us
end
redis.call('ZREMRANGEBYSCORE', leases_key, '-inf', int(now))
local free = concurrency - redis.call('ZCARD', leases_key) - held_slots
-- An allowance, when nobody waits and it leaves as much again to the others.
local want_tokens, want_slots = ask_tokens or 0, math.max(ask_slots or 0, kept_slots)
if record and want_tokens > 0 and listed == 0 and h[11] ~= '1' and not rejoin then
  local owed = 0
  if stored_tat > now then owed = (stored_tat - now) / interval end
  local tokens = math.min(want_tokens, math.floor((burst - held - owed) / 2))
  if tokens >= AHEAD_MIN and free + kept_slots >= 2 * want_slots then
    held = held + tokens
    held_slots = held_slots - kept_slots + want_slots
    record = {tokens, want_slots, ask_spent, ask_seq}
    keep_at_least(budget_key, math.ceil((lease_us + idle_ttl_us) / 1000))
    persist()
    return reply_of({'ahead', '0', '', view_rate, view_ovr, int(tokens), int(want_slots), int(now)})
  end
end
if free <= 0 then
  redis.call('HSET', budget_key, 'w', '1')
  local first = redis.call('ZRANGE', leases_key, 0, 0, 'WITHSCORES')
  local retry = refresh
  if first[2] then retry = tonumber(first[2]) - now end
  if not fair and not first[2] then retry = interval end
  retry = wait_in_line(retry)
  return refused({'busy', int(retry), '', view_rate, view_ovr, '', '0', '0'})
end
-- The bucket's depth for this caller: the burst less what allowances hold.
local tau = (burst - held - 1) * interval
local tat = stored_tat
if tat < now then tat = now end
if rejoin and tat < now + tau then tat = now + tau end
local slot = tat - tau
if slot < now then slot = now end
-- A byte debt holds the turn until it is paid (the byte budget's burst is its credit).
if byte_rate and byte_rate > 0 then
  local byte_slot = (tonumber(h[12]) or 0) - math.floor((byte_burst or 0) * 1000000 / byte_rate)
  if byte_slot > slot then slot = byte_slot end
end
if older > 0 and (free <= older or slot > now) then
  redis.call('HSET', budget_key, 'w', '1')
  local retry = wait_in_line(math.max(slot - now, interval))
  return refused({'behind', int(retry), '', view_rate, view_ovr, '', '0', '0'})
end
if slot - now > horizon_us then
  local retry = wait_in_line(slot - now - horizon_us)
  return refused({'later', int(retry), '', view_rate, view_ovr, '', '0', '0'})
end
local new_tat = tat + interval
redis.call('ZADD', leases_key, int(slot + lease_us), member)
local reply = {'go', int(slot - now), '', view_rate, view_ovr, int(new_tat), int(interval), int(slot)}
local more = {}
local last = slot
local turns = want
-- One at a time while waiting, or when the response's bytes decide the next turn.
if older > 0 or byte_rate then turns = 1 end
for k = 2, turns do
  if redis.call('ZCARD', leases_key) + held_slots >= concurrency then break end
  local next_slot = new_tat - tau
  if next_slot < now then next_slot = now end
  if next_slot - now > horizon_us or next_slot - now > BATCH_AHEAD_US then break end
  new_tat = new_tat + interval
  redis.call('ZADD', leases_key, int(next_slot + lease_us), member .. '.' .. k)
  more[#more + 1] = int(new_tat)
  more[#more + 1] = int(next_slot)
  last = next_slot
end
stored_tat = new_tat
persist()
keep_at_least(budget_key, math.ceil((new_tat - now + idle_ttl_us) / 1000))
keep_at_least(leases_key, math.ceil((last - now + lease_us) / 1000) + 1000)
if #more > 0 then return reply_of(reply, '|' .. table.concat(more, '|')) end
return reply_of(reply)
"#;

/// Ends a turn (`calls::ReleaseCall`). `KEYS`: `budget_key`, `leases_key`, `waiting_key`.
/// `ARGV`: `now` (unused), `member` (the lease member), `refund` (`1`: the request never left),
/// `tat` (the one its reservation wrote), `interval`, `channel`, `host`. Returns `1` if the
/// lease was still there, else `0`. A
/// refund undoes the reservation only if no later one was made on top of it. When a reservation
/// was answered `busy` since the last release (the `w` flag), the hint `free <host> <instance>`
/// wakes the instance that waited longest for a slot (`free <host>`, every instance, when the
/// waiting list is empty); otherwise nobody waits and nothing is sent.
pub(super) const RELEASE: &str = r#"
local budget_key = KEYS[1]
local leases_key = KEYS[2]
local waiting_key = KEYS[3]
local now = ARGV[1]
local member = ARGV[2]
local refund = ARGV[3] == '1'
local tat = ARGV[4]
local interval = tonumber(ARGV[5])
local channel = ARGV[6]
local host = ARGV[7]
local removed = redis.call('ZREM', leases_key, member)
if removed == 1 and refund then
  local stored = redis.call('HGET', budget_key, 'tat')
  if stored == tat then
    redis.call('HSET', budget_key, 'tat', int(tonumber(stored) - interval))
  end
end
if removed == 1 and redis.call('HDEL', budget_key, 'w') == 1 then
  free_hint(waiting_key, channel, host)
end
return removed
"#;

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
pub(super) const REPORT: &str = r#"
local budget_key = KEYS[1]
local now = now_us(ARGV[1])
local cooldown_us = tonumber(ARGV[2])
local cause = ARGV[3]
local rate_before = tonumber(ARGV[4])
local rate_after = tonumber(ARGV[5])
local started_us = tonumber(ARGV[6])
local min_rate = tonumber(ARGV[7])
local ceiling = tonumber(ARGV[8])
local configured_rate = tonumber(ARGV[9])
local burst = tonumber(ARGV[10])
local cap = ARGV[11]
local cap_us = tonumber(ARGV[12])
local channel = ARGV[13]
local host = ARGV[14]
local idle_ttl_us = tonumber(ARGV[15])
local h = redis.call('HMGET', budget_key, 'rate', 'cut', 'cd', 'tat', 'ovr')
local rate = tonumber(h[1]) or configured_rate
if rate_after < rate_before then
  if started_us >= (tonumber(h[2]) or 0) then
    rate = math.max(rate * rate_after / rate_before, math.min(min_rate, rate))
    redis.call('HSET', budget_key, 'cut', int(now))
  end
elseif rate_after > rate_before then
  if rate < ceiling then rate = math.min(rate + (rate_after - rate_before), ceiling) end
end
redis.call('HSET', budget_key, 'rate', real(rate))
local ttl = idle_ttl_us
local left = 0
local cd = tonumber(h[3]) or 0
if cooldown_us > 0 then
  local ends = now + cooldown_us
  if ends > cd then
    redis.call('HSET', budget_key, 'cd', int(ends), 'cdc', cause)
    local interval = math.ceil(1000000 / (tonumber(h[5]) or rate))
    local tau = (burst - 1) * interval
    if (tonumber(h[4]) or 0) < ends + tau then
      redis.call('HSET', budget_key, 'tat', int(ends + tau))
    end
    redis.call('PUBLISH', channel, 'cool ' .. host .. ' ' .. int(math.ceil(cooldown_us / 1000)) .. ' ' .. cause)
    cd = ends
  end
end
if cd > now then left = cd - now end
if cap ~= '' then
  redis.call('HSET', budget_key, 'cap', cap, 'capx', int(now + cap_us))
  keep_at_least(budget_key, math.ceil((cap_us + ttl) / 1000))
end
keep_at_least(budget_key, math.ceil((left + ttl) / 1000))
return {real(rate), left}
"#;

/// Charges response bytes to a host's shared byte budget (`max_bytes_per_second`,
/// `calls::BillCall`). `KEYS`: `budget_key`. `ARGV`: `now`, `bytes`, `byte_rate` (bytes per
/// second), `idle_ttl_us`. `bt` (when the byte debt is paid)
/// moves on by the time those bytes take at that rate, from now if it had passed: the byte
/// budget's GCRA, whose credit (the byte burst) the reservation allows for. Returns `bt`.
pub(super) const BILL: &str = r#"
local budget_key = KEYS[1]
local now = now_us(ARGV[1])
local bytes = tonumber(ARGV[2])
local byte_rate = tonumber(ARGV[3])
local idle_ttl_us = tonumber(ARGV[4])
local bt = tonumber(redis.call('HGET', budget_key, 'bt')) or 0
if bt < now then bt = now end
bt = bt + math.ceil(bytes * 1000000 / byte_rate)
redis.call('HSET', budget_key, 'bt', int(bt))
keep_at_least(budget_key, math.ceil((bt - now + idle_ttl_us) / 1000))
return int(bt)
"#;

/// An operator's action, for every instance (`calls::OperatorCall`). `KEYS`: `budget_key`.
/// `ARGV`: `now`, `action` (`pause`, `resume`, `rate`, `unrate`), `value` (the pause in µs, or
/// the rate), `channel`, `host`, `idle_ttl_us`. Returns `1`. A resume ends the operator's pause and a block pause (`cdc` `soft_block` or
/// `hard_block`: the operator says it was no block; `tat` comes back to now if the pause had moved
/// it later), never a cooldown the server asked for.
pub(super) const OPERATOR: &str = r#"
local budget_key = KEYS[1]
local now = now_us(ARGV[1])
local action = ARGV[2]
local value = ARGV[3]
local channel = ARGV[4]
local host = ARGV[5]
local idle_ttl_us = tonumber(ARGV[6])
if action == 'pause' then
  local ends = now + tonumber(value)
  redis.call('HSET', budget_key, 'op', int(ends))
  keep_at_least(budget_key, math.ceil((ends - now + idle_ttl_us) / 1000))
  redis.call('PUBLISH', channel, 'pause ' .. host .. ' ' .. int(math.ceil(tonumber(value) / 1000)))
elseif action == 'resume' then
  redis.call('HDEL', budget_key, 'op')
  local cause = redis.call('HGET', budget_key, 'cdc')
  if cause == 'soft_block' or cause == 'hard_block' then
    redis.call('HDEL', budget_key, 'cd', 'cdc')
    if (tonumber(redis.call('HGET', budget_key, 'tat')) or 0) > now then
      redis.call('HSET', budget_key, 'tat', int(now))
    end
  end
  redis.call('PUBLISH', channel, 'resume ' .. host)
elseif action == 'rate' then
  redis.call('HSET', budget_key, 'ovr', value)
  keep_at_least(budget_key, math.ceil(idle_ttl_us / 1000))
  redis.call('PUBLISH', channel, 'rate ' .. host .. ' ' .. value)
elseif action == 'unrate' then
  redis.call('HDEL', budget_key, 'ovr')
  redis.call('PUBLISH', channel, 'rate ' .. host .. ' -')
end
return 1
"#;

/// Takes an instance out of a host's waiting list (its queue for the host emptied,
/// `calls::WithdrawCall`). `KEYS`: `waiting_key`, `waiting_expiry_key`, `budget_key`. `ARGV`:
/// `who` (the instance id), `channel`, `host`. Returns `1`. Others
/// still listed are woken (`free`) if one was refused since, since the place they waited behind
/// is gone.
pub(super) const WITHDRAW: &str = r#"
local waiting_key = KEYS[1]
local waiting_expiry_key = KEYS[2]
local budget_key = KEYS[3]
local who = ARGV[1]
local channel = ARGV[2]
local host = ARGV[3]
redis.call('ZREM', waiting_key, who)
redis.call('ZREM', waiting_expiry_key, who)
if redis.call('ZCARD', waiting_key) > 0 and redis.call('HDEL', budget_key, 'w') == 1 then
  free_hint(waiting_key, channel, host)
end
return 1
"#;

/// Says this instance is alive and counts the live ones (`calls::HeartbeatCall`). `KEYS`:
/// `instances_key`. `ARGV`: `now`, `instance` (its id), `live_for_us` (how long an instance
/// counts as live after its last beat). Returns `{live
/// instances, the store's clock (µs)}`: the clock sets the deadlines of reservations.
pub(super) const HEARTBEAT: &str = r#"
local instances_key = KEYS[1]
local now = now_us(ARGV[1])
local instance = ARGV[2]
local live_for_us = tonumber(ARGV[3])
redis.call('ZADD', instances_key, int(now), instance)
redis.call('ZREMRANGEBYSCORE', instances_key, '-inf', int(now - live_for_us))
keep_at_least(instances_key, math.ceil(live_for_us / 1000) * 2)
return {redis.call('ZCARD', instances_key), int(now)}
"#;

/// Keeps this instance's leases of one host alive (`calls::RenewCall`). `KEYS`: `leases_key`.
/// `ARGV`: `now`, `lease_us`, then the tail `members`. Returns `1`. A member already gone (released, or expired) is not brought back.
pub(super) const RENEW: &str = r#"
local leases_key = KEYS[1]
local now = now_us(ARGV[1])
local lease_us = tonumber(ARGV[2])
local members = table_from(ARGV, 3)
local expiry = int(now + lease_us)
for _, member in ipairs(members) do redis.call('ZADD', leases_key, 'XX', expiry, member) end
keep_at_least(leases_key, math.ceil(lease_us / 1000) + 1000)
return 1
"#;

/// A script with the prelude, ready to run.
pub(super) fn script(body: &str) -> redis::Script {
    redis::Script::new(&format!("{PRELUDE}{body}"))
}
