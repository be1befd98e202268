-- The store's WITHDRAW script (scripts.rs says what it does, its keys, arguments and reply),
-- run with prelude.lua in front. The header below names each key and argument once.
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
