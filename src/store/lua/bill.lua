-- The store's BILL script (scripts.rs says what it does, its keys, arguments and reply),
-- run with prelude.lua in front. The header below names each key and argument once.
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
