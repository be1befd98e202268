-- luacheck's settings for the store's scripts (scripts/test runs `luacheck src/store/lua`).
-- Redis runs them as Lua 5.1, with its own globals; every script but the prelude is run with
-- the prelude in front (scripts.rs), so the prelude's helpers are in scope there.
std = "lua51"
read_globals = { "redis", "KEYS", "ARGV", "cjson", "cmsgpack", "bit", "struct" }
max_line_length = 120
files["prelude.lua"] = { unused = false }
local prelude = { "now_us", "int", "real", "free_hint", "keep_at_least", "table_from" }
for _, script in ipairs({ "reserve", "release", "report", "bill", "operator", "withdraw", "heartbeat", "renew" }) do
  files[script .. ".lua"] = { read_globals = prelude }
end
