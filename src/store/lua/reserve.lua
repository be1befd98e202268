-- The store's RESERVE script (scripts.rs says what it does, its keys, arguments and reply),
-- run with prelude.lua in front. The header below names each key and argument once.
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

-- The reply: the fields, the store's clock, then any more turns.
local function reply_of(fields, more)
  return table.concat(fields, '|') .. '|' .. int(now) .. (more or '')
end

-- Releases the turns that ended since this instance's last call, as RELEASE would; returns how
-- many leases were still there.
local function release_ended()
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
  return freed
end

-- The rate this call paces by: the operator's, else the learned one; within a cap still in
-- force and this instance's own rate.
local function pace_rate(h, learned)
  local rate = tonumber(h[5]) or learned
  local cap = tonumber(h[7])
  if cap and cap > 0 and (tonumber(h[8]) or 0) > now and cap < rate then rate = cap end
  if mine and mine > 0 and mine < rate then rate = mine end
  if not rate or rate <= 0 then rate = configured_rate end
  return rate
end

-- An allowance record (`tokens|slots|spent|seq`) as numbers.
local function fields_of(rec)
  local t = {}
  for x in string.gmatch(rec or '', '[^|]+') do t[#t + 1] = tonumber(x) end
  return t
end

local freed = release_ended()
local h = redis.call('HMGET', budget_key, 'tat', 'cd', 'cdc', 'op', 'ovr', 'rate', 'cap', 'capx', 'ah', 'as', 'w', 'bt')
local learned = tonumber(h[6]) or configured_rate
local view_rate, view_ovr = real(learned), h[5] or ''
local interval = math.ceil(1000000 / pace_rate(h, learned))
-- Allowances: what every instance holds, and this instance's record.
local stored_tat = tonumber(h[1]) or 0
local held, held_slots = tonumber(h[9]) or 0, tonumber(h[10]) or 0
local held0, slots0, tat0 = held, held_slots, stored_tat
local record = nil
local kept_slots = 0

-- Charges `n` spent tokens to `tat`, from now if it had passed.
local function charge(n)
  if n > 0 then
    if stored_tat < now then stored_tat = now end
    stored_tat = stored_tat + n * interval
  end
end

-- Allowances whose instance stopped calling: every token counts as spent.
local function expire_allowances()
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

-- Settles this instance's own allowance. A late copy (its seq not above the record's) changes
-- nothing and is granted nothing. Spent tokens are charged now, the rest given back; the slots
-- in use stay held.
local function settle_own()
  local r = fields_of(redis.call('HGET', budget_key, 'a:' .. who))
  if ask_seq > (r[4] or -1) then
    local spent = math.min(math.max(ask_spent - (r[3] or 0), 0), r[1] or 0)
    charge(spent)
    held = held - (r[1] or 0)
    kept_slots = ask_in_use or 0
    held_slots = held_slots - (r[2] or 0) + kept_slots
    if (r[2] or 0) > kept_slots or (r[1] or 0) > spent then freed = freed + 1 end
    record = {0, kept_slots, ask_spent, ask_seq}
  end
end

-- Writes back what the allowances changed.
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

-- A reply that reserves nothing (and persists the allowances).
local function nothing(kind, wait_us, cause)
  persist()
  return reply_of({kind, wait_us, cause, view_rate, view_ovr, '', '0', '0'})
end

-- A refusal: others' allowances may be what holds this caller back, so they give them back.
local function refused(kind, retry_us)
  if held > 0 or held_slots > kept_slots then
    redis.call('PUBLISH', channel, 'yield ' .. host .. ' ' .. who)
  end
  return nothing(kind, int(retry_us), '')
end

-- Until when the host is closed (a cooldown, or an operator's pause), and why.
local function closed_until()
  local block, cause = 0, ''
  local cd, op = tonumber(h[2]) or 0, tonumber(h[4]) or 0
  if cd > now then block = cd; cause = h[3] or 'restored' end
  if op > now and op > block then block = op; cause = 'operator' end
  return block, cause
end

if allowances_key and (held > 0 or held_slots > 0) then expire_allowances() end
if allowances_key and who ~= '' and ask_seq then settle_own() end
if held < 0 then held = 0 end
if held_slots < 0 then held_slots = 0 end
if freed > 0 and redis.call('HDEL', budget_key, 'w') == 1 then
  free_hint(waiting_key, channel, host)
end
if deadline_us and deadline_us > 0 and now > deadline_us then return nothing('stale', '0', '') end
-- A call that only settles this instance's allowance (it wants no turn).
if want == 0 then return nothing('settled', '0', '') end
local block, cause = closed_until()
if block > now then return nothing('cool', int(block - now), cause) end

local fair = waiting_expiry_key ~= nil and who ~= ''
local arrival, older, refresh, listed = now, 0, 0, 0

-- Takes this caller out of the waiting list, forgetting the places whose instance stopped
-- asking (looked for only when the first has run out); returns how many stay listed and how
-- many of them began to wait before this caller.
local function leave_line()
  local first = redis.call('ZRANGE', waiting_expiry_key, 0, 0, 'WITHSCORES')
  if first[2] and tonumber(first[2]) <= now then
    local gone = redis.call('ZRANGEBYSCORE', waiting_expiry_key, '-inf', int(now))
    for _, m in ipairs(gone) do redis.call('ZREM', waiting_key, m) end
    redis.call('ZREMRANGEBYSCORE', waiting_expiry_key, '-inf', int(now))
  end
  redis.call('ZREM', waiting_key, who)
  redis.call('ZREM', waiting_expiry_key, who)
  local count = redis.call('ZCARD', waiting_key)
  return count, redis.call('ZCOUNT', waiting_key, '-inf', '(' .. int(arrival))
end

-- Lists this caller (a refusal), and caps its retry at a place's renewal.
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

if fair then
  arrival = now - waited_us
  refresh = math.floor(waiting_place_us / 4)
  -- Nobody listed (the usual case of a host nobody contends for): one command.
  if redis.call('ZCARD', waiting_key) > 0 then listed, older = leave_line() end
end
redis.call('ZREMRANGEBYSCORE', leases_key, '-inf', int(now))
local free = concurrency - redis.call('ZCARD', leases_key) - held_slots

-- An allowance, when nobody waits and it leaves as much again to the others: its reply, or nil.
local function grant_ahead()
  local want_tokens, want_slots = ask_tokens or 0, math.max(ask_slots or 0, kept_slots)
  if not (record and want_tokens > 0 and listed == 0 and h[11] ~= '1' and not rejoin) then return nil end
  local owed = 0
  if stored_tat > now then owed = (stored_tat - now) / interval end
  local tokens = math.min(want_tokens, math.floor((burst - held - owed) / 2))
  if tokens < AHEAD_MIN or free + kept_slots < 2 * want_slots then return nil end
  held = held + tokens
  held_slots = held_slots - kept_slots + want_slots
  record = {tokens, want_slots, ask_spent, ask_seq}
  keep_at_least(budget_key, math.ceil((lease_us + idle_ttl_us) / 1000))
  persist()
  return reply_of({'ahead', '0', '', view_rate, view_ovr, '', '0', '0'}, '|' .. int(tokens) .. '|' .. int(want_slots))
end

-- Every slot taken: ask again when the first lease runs out (or at a place's renewal).
local function busy()
  redis.call('HSET', budget_key, 'w', '1')
  local first = redis.call('ZRANGE', leases_key, 0, 0, 'WITHSCORES')
  local retry = refresh
  if first[2] then retry = tonumber(first[2]) - now end
  if not fair and not first[2] then retry = interval end
  return refused('busy', wait_in_line(retry))
end

-- The bucket's depth for this caller (the burst less what allowances hold, as `tau`), the
-- `tat` its turn starts from, and the turn's start. A byte debt holds the turn until it is paid
-- (the byte budget's burst is its credit).
local function first_slot()
  local tau = (burst - held - 1) * interval
  local tat = stored_tat
  if tat < now then tat = now end
  if rejoin and tat < now + tau then tat = now + tau end
  local slot = tat - tau
  if slot < now then slot = now end
  if byte_rate and byte_rate > 0 then
    local byte_slot = (tonumber(h[12]) or 0) - math.floor((byte_burst or 0) * 1000000 / byte_rate)
    if byte_slot > slot then slot = byte_slot end
  end
  return tau, tat, slot
end

-- The turns after the first, each by the rule for one, while they start within 2 ms: their
-- `tat|start` fields, the last `tat` and the last start.
local function more_turns(tau, new_tat, last)
  local more = {}
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
  return more, new_tat, last
end

local ahead = grant_ahead()
if ahead then return ahead end
if free <= 0 then return busy() end
local tau, tat, slot = first_slot()
if older > 0 and (free <= older or slot > now) then
  redis.call('HSET', budget_key, 'w', '1')
  return refused('behind', wait_in_line(math.max(slot - now, interval)))
end
if slot - now > horizon_us then return refused('later', wait_in_line(slot - now - horizon_us)) end
redis.call('ZADD', leases_key, int(slot + lease_us), member)
local reply = {'go', int(slot - now), '', view_rate, view_ovr, int(tat + interval), int(interval), int(slot)}
local more, new_tat, last = more_turns(tau, tat + interval, slot)
stored_tat = new_tat
persist()
keep_at_least(budget_key, math.ceil((new_tat - now + idle_ttl_us) / 1000))
keep_at_least(leases_key, math.ceil((last - now + lease_us) / 1000) + 1000)
if #more > 0 then return reply_of(reply, '|' .. table.concat(more, '|')) end
return reply_of(reply)
