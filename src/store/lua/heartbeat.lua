-- The store's HEARTBEAT script (scripts.rs says what it does, its keys, arguments and reply),
-- run with prelude.lua in front. The header below names each key and argument once.
local instances_key = KEYS[1]
local now = now_us(ARGV[1])
local instance = ARGV[2]
local live_for_us = tonumber(ARGV[3])
redis.call('ZADD', instances_key, int(now), instance)
redis.call('ZREMRANGEBYSCORE', instances_key, '-inf', int(now - live_for_us))
keep_at_least(instances_key, math.ceil(live_for_us / 1000) * 2)
return {redis.call('ZCARD', instances_key), int(now)}
