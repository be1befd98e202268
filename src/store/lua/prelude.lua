-- Helpers every script of the store is run with (scripts.rs: PRELUDE).
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
