-- The store's RENEW script (scripts.rs says what it does, its keys, arguments and reply),
-- run with prelude.lua in front. The header below names each key and argument once.
local leases_key = KEYS[1]
local now = now_us(ARGV[1])
local lease_us = tonumber(ARGV[2])
local members = table_from(ARGV, 3)
local expiry = int(now + lease_us)
for _, member in ipairs(members) do redis.call('ZADD', leases_key, 'XX', expiry, member) end
keep_at_least(leases_key, math.ceil(lease_us / 1000) + 1000)
return 1
