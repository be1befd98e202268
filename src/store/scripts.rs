//! The Lua scripts that keep a host's shared budget in Redis, each one atomic and run by one
//! round trip (`EVALSHA`, `EVAL` once after the store restarted).
//!
//! Every script reads the time from Redis (`TIME`, in microseconds: whole seconds would break any
//! rate above one a second), so instances' clocks never matter; tests pass an explicit `now` in
//! `ARGV[1]` instead. Times and counts are kept as whole microseconds written with `%d`: Lua's
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
"#;

/// Asks for a turn. `KEYS`: budget, leases, waiting list, waiting list's expiries, allowances
/// (optional: without it none is granted). `ARGV`: now,
/// the rate this instance would use (its caps), the configured rate (the learned rate's start),
/// burst, concurrency, lease µs, lease member, horizon µs, rejoin (`1`: the bucket starts empty),
/// idle TTL µs, hint channel, host key, the most turns wanted (`n`: as many as wait in the
/// instance's queue, within its slots), this instance's id, how long (µs) its next request has
/// waited for its turn (since it arrived, or since its job's last turn there if later), the
/// deadline (µs on the store's clock, `''` or `0`: none), how long (µs) a place in the waiting
/// list lasts unless renewed, this instance's allowance (`''`: it has none and wants none; else
/// `seq|spent|tokens wanted|slots wanted|slots in use`, see below), the host's byte budget
/// (`''`: none; else `bytes per second|byte burst`: a turn waits while the response bytes the
/// instances billed (`BILL`) are in debt, `bt` being when the debt is paid); then four for each turn of
/// this host that ended since this instance's last call: member, refund, the `tat` its
/// reservation wrote, its interval (what `RELEASE` takes), the latest turn first. Those are
/// released first, as `RELEASE` would, so that a busy host's turns end without a round trip of
/// their own; they are released even by a call past its deadline.
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
/// Returns one string, `kind|µs|cause|learned rate|operator rate|tat|interval|start|now` (one bulk
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
local BATCH_AHEAD_US = 2000
local AHEAD_MIN = 16
local now = now_us(ARGV[1])
local function reply_of(fields, more)
  return table.concat(fields, '|') .. '|' .. int(now) .. (more or '')
end
local freed = 0
for i = 20, #ARGV, 4 do
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
    freed = freed + 1
    if ARGV[i + 1] == '1' then
      local tat = redis.call('HGET', KEYS[1], 'tat')
      if tat == ARGV[i + 2] then
        redis.call('HSET', KEYS[1], 'tat', int(tonumber(tat) - tonumber(ARGV[i + 3])))
      end
    end
  end
end
local h = redis.call('HMGET', KEYS[1], 'tat', 'cd', 'cdc', 'op', 'ovr', 'rate', 'cap', 'capx', 'ah', 'as', 'w', 'bt')
local learned = tonumber(h[6]) or tonumber(ARGV[3])
local view_rate, view_ovr = real(learned), h[5] or ''
local rate = tonumber(h[5]) or learned
local cap = tonumber(h[7])
if cap and cap > 0 and (tonumber(h[8]) or 0) > now and cap < rate then rate = cap end
local mine = tonumber(ARGV[2])
if mine and mine > 0 and mine < rate then rate = mine end
if not rate or rate <= 0 then rate = tonumber(ARGV[3]) end
local interval = math.ceil(1000000 / rate)
local lease_us = tonumber(ARGV[6])
local who = ARGV[14] or ''
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
local AKEY = KEYS[5]
if AKEY and (held > 0 or held_slots > 0) then
  -- Allowances whose instance stopped calling: every token counts as spent.
  local first = redis.call('ZRANGE', AKEY, 0, 0, 'WITHSCORES')
  if first[2] and tonumber(first[2]) <= now then
    for _, inst in ipairs(redis.call('ZRANGEBYSCORE', AKEY, '-inf', int(now))) do
      local r = fields_of(redis.call('HGET', KEYS[1], 'a:' .. inst))
      held = held - (r[1] or 0)
      held_slots = held_slots - (r[2] or 0)
      charge(r[1] or 0)
      redis.call('HDEL', KEYS[1], 'a:' .. inst)
    end
    redis.call('ZREMRANGEBYSCORE', AKEY, '-inf', int(now))
  end
end
local ask = fields_of(ARGV[18])
local record = nil
local kept_slots = 0
if AKEY and who ~= '' and ask[1] then
  local r = fields_of(redis.call('HGET', KEYS[1], 'a:' .. who))
  if ask[1] > (r[4] or -1) then
    -- Spent tokens are charged now, the rest given back; the slots in use stay held.
    local spent = math.min(math.max(ask[2] - (r[3] or 0), 0), r[1] or 0)
    charge(spent)
    held = held - (r[1] or 0)
    kept_slots = ask[5] or 0
    held_slots = held_slots - (r[2] or 0) + kept_slots
    if (r[2] or 0) > kept_slots or (r[1] or 0) > spent then freed = freed + 1 end
    record = {0, kept_slots, ask[2], ask[1]}
  else
    ask = {}
  end
end
if held < 0 then held = 0 end
if held_slots < 0 then held_slots = 0 end
local function persist()
  if stored_tat ~= tat0 then redis.call('HSET', KEYS[1], 'tat', int(stored_tat)) end
  if held ~= held0 then redis.call('HSET', KEYS[1], 'ah', int(held)) end
  if held_slots ~= slots0 then redis.call('HSET', KEYS[1], 'as', int(held_slots)) end
  if record then
    redis.call('HSET', KEYS[1], 'a:' .. who, table.concat(record, '|'))
    redis.call('ZADD', AKEY, int(now + lease_us), who)
    keep_at_least(AKEY, math.ceil(lease_us / 1000) + 1000)
  end
end
if freed > 0 and redis.call('HDEL', KEYS[1], 'w') == 1 then
  free_hint(KEYS[3], ARGV[11], ARGV[12])
end
local deadline = tonumber(ARGV[16] or '')
if deadline and deadline > 0 and now > deadline then
  persist()
  return reply_of({'stale', '0', '', view_rate, view_ovr, '', '0', '0'})
end
-- A call that only settles this instance's allowance (it wants no turn).
if (tonumber(ARGV[13]) or 1) == 0 then
  persist()
  return reply_of({'settled', '0', '', view_rate, view_ovr, '', '0', '0'})
end
local function refused(fields)
  -- Others' allowances may be what holds this caller back: they give them back.
  if held > 0 or held_slots > kept_slots then
    redis.call('PUBLISH', ARGV[11], 'yield ' .. ARGV[12] .. ' ' .. who)
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
local fair = KEYS[4] ~= nil and who ~= ''
local arrival, older, refresh, listed = now, 0, 0, 0
if fair then
  arrival = now - (tonumber(ARGV[15]) or 0)
  refresh = math.floor(tonumber(ARGV[17]) / 4)
  -- Nobody listed (the usual case of a host nobody contends for): one command.
  if redis.call('ZCARD', KEYS[3]) > 0 then
    -- Places whose instance stopped asking: looked for only when the first has run out.
    local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
    if first[2] and tonumber(first[2]) <= now then
      local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', int(now))
      for _, m in ipairs(gone) do redis.call('ZREM', KEYS[3], m) end
      redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', int(now))
    end
    redis.call('ZREM', KEYS[3], who)
    redis.call('ZREM', KEYS[4], who)
    listed = redis.call('ZCARD', KEYS[3])
    older = redis.call('ZCOUNT', KEYS[3], '-inf', '(' .. int(arrival))
  end
end
local function wait_in_line(until_us)
  if fair then
    local ttl = tonumber(ARGV[17])
    redis.call('ZADD', KEYS[3], int(arrival), who)
    redis.call('ZADD', KEYS[4], int(now + ttl), who)
    -- Nothing else writes these keys: their TTL is simply the place's, and a second.
    redis.call('PEXPIRE', KEYS[3], math.ceil(ttl / 1000) + 1000)
    redis.call('PEXPIRE', KEYS[4], math.ceil(ttl / 1000) + 1000)
    if until_us > refresh then until_us = refresh end
  end
  return until_us
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', int(now))
local burst = tonumber(ARGV[4])
local free = tonumber(ARGV[5]) - redis.call('ZCARD', KEYS[2]) - held_slots
-- An allowance, when nobody waits and it leaves as much again to the others.
local want_tokens, want_slots = ask[3] or 0, math.max(ask[4] or 0, kept_slots)
if record and want_tokens > 0 and listed == 0 and h[11] ~= '1' and ARGV[9] ~= '1' then
  local owed = 0
  if stored_tat > now then owed = (stored_tat - now) / interval end
  local tokens = math.min(want_tokens, math.floor((burst - held - owed) / 2))
  if tokens >= AHEAD_MIN and free + kept_slots >= 2 * want_slots then
    held = held + tokens
    held_slots = held_slots - kept_slots + want_slots
    record = {tokens, want_slots, ask[2], ask[1]}
    keep_at_least(KEYS[1], math.ceil((lease_us + tonumber(ARGV[10])) / 1000))
    persist()
    return reply_of({'ahead', '0', '', view_rate, view_ovr, int(tokens), int(want_slots), int(now)})
  end
end
if free <= 0 then
  redis.call('HSET', KEYS[1], 'w', '1')
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
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
if ARGV[9] == '1' and tat < now + tau then tat = now + tau end
local slot = tat - tau
if slot < now then slot = now end
-- A byte debt holds the turn until it is paid (the byte budget's burst is its credit).
local bytes = fields_of(ARGV[19])
if bytes[1] and bytes[1] > 0 then
  local byte_slot = (tonumber(h[12]) or 0) - math.floor((bytes[2] or 0) * 1000000 / bytes[1])
  if byte_slot > slot then slot = byte_slot end
end
if older > 0 and (free <= older or slot > now) then
  redis.call('HSET', KEYS[1], 'w', '1')
  local retry = wait_in_line(math.max(slot - now, interval))
  return refused({'behind', int(retry), '', view_rate, view_ovr, '', '0', '0'})
end
local horizon = tonumber(ARGV[8])
if slot - now > horizon then
  local retry = wait_in_line(slot - now - horizon)
  return refused({'later', int(retry), '', view_rate, view_ovr, '', '0', '0'})
end
local new_tat = tat + interval
redis.call('ZADD', KEYS[2], int(slot + lease_us), ARGV[7])
local reply = {'go', int(slot - now), '', view_rate, view_ovr, int(new_tat), int(interval), int(slot)}
local more = {}
local last = slot
local want = tonumber(ARGV[13]) or 1
-- One at a time while waiting, or when the response's bytes decide the next turn.
if older > 0 or bytes[1] then want = 1 end
for k = 2, want do
  if redis.call('ZCARD', KEYS[2]) + held_slots >= tonumber(ARGV[5]) then break end
  local next_slot = new_tat - tau
  if next_slot < now then next_slot = now end
  if next_slot - now > horizon or next_slot - now > BATCH_AHEAD_US then break end
  new_tat = new_tat + interval
  redis.call('ZADD', KEYS[2], int(next_slot + lease_us), ARGV[7] .. '.' .. k)
  more[#more + 1] = int(new_tat)
  more[#more + 1] = int(next_slot)
  last = next_slot
end
stored_tat = new_tat
persist()
keep_at_least(KEYS[1], math.ceil((new_tat - now + tonumber(ARGV[10])) / 1000))
keep_at_least(KEYS[2], math.ceil((last - now + lease_us) / 1000) + 1000)
if #more > 0 then return reply_of(reply, '|' .. table.concat(more, '|')) end
return reply_of(reply)
"#;

/// Ends a turn. `KEYS`: budget, leases, waiting list (optional). `ARGV`: now (unused), lease member, refund (`1`: the
/// request never left), the `tat` its reservation wrote, its interval, hint channel, host key. A
/// refund undoes the reservation only if no later one was made on top of it. When a reservation
/// was answered `busy` since the last release (the `w` flag), the hint `free <host> <instance>`
/// wakes the instance that waited longest for a slot (`free <host>`, every instance, when the
/// waiting list is empty); otherwise nobody waits and nothing is sent.
pub(super) const RELEASE: &str = r#"
local removed = redis.call('ZREM', KEYS[2], ARGV[2])
if removed == 1 and ARGV[3] == '1' then
  local tat = redis.call('HGET', KEYS[1], 'tat')
  if tat == ARGV[4] then
    redis.call('HSET', KEYS[1], 'tat', int(tonumber(tat) - tonumber(ARGV[5])))
  end
end
if removed == 1 and redis.call('HDEL', KEYS[1], 'w') == 1 then
  free_hint(KEYS[3], ARGV[6], ARGV[7])
end
return removed
"#;

/// Applies what one answer taught. `KEYS`: budget. `ARGV`: now, cooldown µs (`0`: none), its
/// cause, the rate before and after the answer as this instance computed it, the turn's start (on
/// Redis' clock), min rate, ceiling, configured rate, burst, cap (`''`: none), cap µs, hint channel,
/// host key, idle TTL µs.
///
/// A cut applies once per wave: only an answer to a request that started after the last cut cuts
/// again, so N instances that see one storm of 429s cut once. A cut or a raise moves the shared
/// rate by the same factor or step as the instance's own. A cooldown only ever grows; when it
/// starts or grows, `tat` is moved so that one request (not a burst) may leave at its end, and
/// `cool <host> <ms> <cause>` tells the other instances at once. Returns `{learned rate,
/// cooldown µs left}`.
pub(super) const REPORT: &str = r#"
local now = now_us(ARGV[1])
local h = redis.call('HMGET', KEYS[1], 'rate', 'cut', 'cd', 'tat', 'ovr')
local rate = tonumber(h[1]) or tonumber(ARGV[9])
local before, after = tonumber(ARGV[4]), tonumber(ARGV[5])
if after < before then
  if tonumber(ARGV[6]) >= (tonumber(h[2]) or 0) then
    rate = math.max(rate * after / before, math.min(tonumber(ARGV[7]), rate))
    redis.call('HSET', KEYS[1], 'cut', int(now))
  end
elseif after > before then
  local ceiling = tonumber(ARGV[8])
  if rate < ceiling then rate = math.min(rate + (after - before), ceiling) end
end
redis.call('HSET', KEYS[1], 'rate', real(rate))
local ttl = tonumber(ARGV[15])
local left = 0
local cd = tonumber(h[3]) or 0
local cool = tonumber(ARGV[2])
if cool > 0 then
  local ends = now + cool
  if ends > cd then
    redis.call('HSET', KEYS[1], 'cd', int(ends), 'cdc', ARGV[3])
    local interval = math.ceil(1000000 / (tonumber(h[5]) or rate))
    local tau = (tonumber(ARGV[10]) - 1) * interval
    if (tonumber(h[4]) or 0) < ends + tau then
      redis.call('HSET', KEYS[1], 'tat', int(ends + tau))
    end
    redis.call('PUBLISH', ARGV[13], 'cool ' .. ARGV[14] .. ' ' .. int(math.ceil(cool / 1000)) .. ' ' .. ARGV[3])
    cd = ends
  end
end
if cd > now then left = cd - now end
if ARGV[11] ~= '' then
  redis.call('HSET', KEYS[1], 'cap', ARGV[11], 'capx', int(now + tonumber(ARGV[12])))
  keep_at_least(KEYS[1], math.ceil((tonumber(ARGV[12]) + ttl) / 1000))
end
keep_at_least(KEYS[1], math.ceil((left + ttl) / 1000))
return {real(rate), left}
"#;

/// Charges response bytes to a host's shared byte budget (`max_bytes_per_second`). `KEYS`:
/// budget. `ARGV`: now, bytes, bytes per second, idle TTL µs. `bt` (when the byte debt is paid)
/// moves on by the time those bytes take at that rate, from now if it had passed: the byte
/// budget's GCRA, whose credit (the byte burst) the reservation allows for. Returns `bt`.
pub(super) const BILL: &str = r#"
local now = now_us(ARGV[1])
local bt = tonumber(redis.call('HGET', KEYS[1], 'bt')) or 0
if bt < now then bt = now end
bt = bt + math.ceil(tonumber(ARGV[2]) * 1000000 / tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'bt', int(bt))
keep_at_least(KEYS[1], math.ceil((bt - now + tonumber(ARGV[4])) / 1000))
return int(bt)
"#;

/// An operator's action, for every instance. `KEYS`: budget. `ARGV`: now, action (`pause`,
/// `resume`, `rate`, `unrate`), value (the pause in µs, or the rate), hint channel, host key, idle
/// TTL µs. A resume ends the operator's pause and a block pause (`cdc` `soft_block` or
/// `hard_block`: the operator says it was no block; `tat` comes back to now if the pause had moved
/// it later), never a cooldown the server asked for.
pub(super) const OPERATOR: &str = r#"
local now = now_us(ARGV[1])
local action, value = ARGV[2], ARGV[3]
if action == 'pause' then
  local ends = now + tonumber(value)
  redis.call('HSET', KEYS[1], 'op', int(ends))
  keep_at_least(KEYS[1], math.ceil((ends - now + tonumber(ARGV[6])) / 1000))
  redis.call('PUBLISH', ARGV[4], 'pause ' .. ARGV[5] .. ' ' .. int(math.ceil(tonumber(value) / 1000)))
elseif action == 'resume' then
  redis.call('HDEL', KEYS[1], 'op')
  local cause = redis.call('HGET', KEYS[1], 'cdc')
  if cause == 'soft_block' or cause == 'hard_block' then
    redis.call('HDEL', KEYS[1], 'cd', 'cdc')
    if (tonumber(redis.call('HGET', KEYS[1], 'tat')) or 0) > now then
      redis.call('HSET', KEYS[1], 'tat', int(now))
    end
  end
  redis.call('PUBLISH', ARGV[4], 'resume ' .. ARGV[5])
elseif action == 'rate' then
  redis.call('HSET', KEYS[1], 'ovr', value)
  keep_at_least(KEYS[1], math.ceil(tonumber(ARGV[6]) / 1000))
  redis.call('PUBLISH', ARGV[4], 'rate ' .. ARGV[5] .. ' ' .. value)
elseif action == 'unrate' then
  redis.call('HDEL', KEYS[1], 'ovr')
  redis.call('PUBLISH', ARGV[4], 'rate ' .. ARGV[5] .. ' -')
end
return 1
"#;

/// Takes an instance out of a host's waiting list (its queue for the host emptied). `KEYS`:
/// waiting list, its expiries, budget. `ARGV`: instance id, hint channel, host key. Others
/// still listed are woken (`free`) if one was refused since, since the place they waited behind
/// is gone.
pub(super) const WITHDRAW: &str = r#"
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('ZCARD', KEYS[1]) > 0 and redis.call('HDEL', KEYS[3], 'w') == 1 then
  free_hint(KEYS[1], ARGV[2], ARGV[3])
end
return 1
"#;

/// Says this instance is alive and counts the live ones. `KEYS`: the instance set. `ARGV`: now,
/// instance id, how long an instance counts as live after its last beat (µs). Returns `{live
/// instances, the store's clock (µs)}`: the clock sets the deadlines of reservations.
pub(super) const HEARTBEAT: &str = r#"
local now = now_us(ARGV[1])
redis.call('ZADD', KEYS[1], int(now), ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', int(now - tonumber(ARGV[3])))
keep_at_least(KEYS[1], math.ceil(tonumber(ARGV[3]) / 1000) * 2)
return {redis.call('ZCARD', KEYS[1]), int(now)}
"#;

/// Keeps this instance's leases of one host alive. `KEYS`: leases. `ARGV`: now, lease µs, then the
/// members. A member already gone (released, or expired) is not brought back.
pub(super) const RENEW: &str = r#"
local now = now_us(ARGV[1])
local expiry = int(now + tonumber(ARGV[2]))
for i = 3, #ARGV do redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i]) end
keep_at_least(KEYS[1], math.ceil(tonumber(ARGV[2]) / 1000) + 1000)
return 1
"#;

/// A script with the prelude, ready to run.
pub(super) fn script(body: &str) -> redis::Script {
    redis::Script::new(&format!("{PRELUDE}{body}"))
}
