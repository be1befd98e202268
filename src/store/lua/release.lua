-- The store's RELEASE script (scripts.rs says what it does, its keys, arguments and reply),
-- run with prelude.lua in front. The header below names each key and argument once.
local budget_key = KEYS[1]
local leases_key = KEYS[2]
local waiting_key = KEYS[3]
local now = ARGV[1] -- luacheck: no unused (named for the protocol; RELEASE needs no clock)
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
