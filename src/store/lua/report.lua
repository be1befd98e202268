-- The store's REPORT script (scripts.rs says what it does, its keys, arguments and reply),
-- run with prelude.lua in front. The header below names each key and argument once.
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

-- The shared rate after this answer: a cut once per wave (only an answer to a request that
-- started after the last cut cuts again), a raise by the instance's own step, within the ceiling.
local function learned_rate(h)
  local rate = tonumber(h[1]) or configured_rate
  if rate_after < rate_before then
    if started_us >= (tonumber(h[2]) or 0) then
      rate = math.max(rate * rate_after / rate_before, math.min(min_rate, rate))
      redis.call('HSET', budget_key, 'cut', int(now))
    end
  elseif rate_after > rate_before then
    if rate < ceiling then rate = math.min(rate + (rate_after - rate_before), ceiling) end
  end
  return rate
end

-- Grows the cooldown to this answer's, if longer: `tat` moves so that one request (not a burst)
-- may leave at its end, and the other instances are told. Returns the cooldown's end.
local function cool_down(h, rate)
  local cd = tonumber(h[3]) or 0
  if cooldown_us <= 0 then return cd end
  local ends = now + cooldown_us
  if ends <= cd then return cd end
  redis.call('HSET', budget_key, 'cd', int(ends), 'cdc', cause)
  local interval = math.ceil(1000000 / (tonumber(h[5]) or rate))
  local tau = (burst - 1) * interval
  if (tonumber(h[4]) or 0) < ends + tau then
    redis.call('HSET', budget_key, 'tat', int(ends + tau))
  end
  redis.call('PUBLISH', channel, 'cool ' .. host .. ' ' .. int(math.ceil(cooldown_us / 1000)) .. ' ' .. cause)
  return ends
end

local h = redis.call('HMGET', budget_key, 'rate', 'cut', 'cd', 'tat', 'ovr')
local rate = learned_rate(h)
redis.call('HSET', budget_key, 'rate', real(rate))
local ttl = idle_ttl_us
local left = 0
local cd = cool_down(h, rate)
if cd > now then left = cd - now end
if cap ~= '' then
  redis.call('HSET', budget_key, 'cap', cap, 'capx', int(now + cap_us))
  keep_at_least(budget_key, math.ceil((cap_us + ttl) / 1000))
end
keep_at_least(budget_key, math.ceil((left + ttl) / 1000))
return {real(rate), left}
