-- The store's OPERATOR script (scripts.rs says what it does, its keys, arguments and reply),
-- run with prelude.lua in front. The header below names each key and argument once.
local budget_key = KEYS[1]
local now = now_us(ARGV[1])
local action = ARGV[2]
local value = ARGV[3]
local channel = ARGV[4]
local host = ARGV[5]
local idle_ttl_us = tonumber(ARGV[6])

-- An operator's pause, `value` µs from now.
local function pause()
  local ends = now + tonumber(value)
  redis.call('HSET', budget_key, 'op', int(ends))
  keep_at_least(budget_key, math.ceil((ends - now + idle_ttl_us) / 1000))
  redis.call('PUBLISH', channel, 'pause ' .. host .. ' ' .. int(math.ceil(tonumber(value) / 1000)))
end

-- Ends the operator's pause and a block pause (the operator says it was no block: `tat` comes
-- back to now if the pause had moved it later), never a cooldown the server asked for.
local function resume()
  redis.call('HDEL', budget_key, 'op')
  local cause = redis.call('HGET', budget_key, 'cdc')
  if cause == 'soft_block' or cause == 'hard_block' then
    redis.call('HDEL', budget_key, 'cd', 'cdc')
    if (tonumber(redis.call('HGET', budget_key, 'tat')) or 0) > now then
      redis.call('HSET', budget_key, 'tat', int(now))
    end
  end
  redis.call('PUBLISH', channel, 'resume ' .. host)
end

-- An operator's rate, `value`.
local function set_rate()
  redis.call('HSET', budget_key, 'ovr', value)
  keep_at_least(budget_key, math.ceil(idle_ttl_us / 1000))
  redis.call('PUBLISH', channel, 'rate ' .. host .. ' ' .. value)
end

-- The operator's rate taken back.
local function unset_rate()
  redis.call('HDEL', budget_key, 'ovr')
  redis.call('PUBLISH', channel, 'rate ' .. host .. ' -')
end

local actions = { pause = pause, resume = resume, rate = set_rate, unrate = unset_rate }
local act = actions[action]
if act then act() end
return 1
