-- Settles finished messages: removes them from the processing list and the monitor set, and
-- clears each task's active marker when it still names this execution (the overlap check of
-- the next fire then lets it through).
-- Each settled execution frees its slots (queue and concurrency key, `order.lua`).
-- KEYS: 1 processing list, 2 monitor zset, 3 order hash, 4 queued zset, 5 wake list, then
--       one active-marker key per message
-- ARGV: triples of (message JSON as taken, execution id, concurrency key or '')
-- Returns one flag per pair: 1 if it was still taken, 0 if not (the reaper gave it back).
local out = {}
for i = 1, #ARGV, 3 do
  local n = (i + 2) / 3
  if redis.call('LREM', KEYS[1], -1, ARGV[i]) > 0 then
    redis.call('ZREM', KEYS[2], ARGV[i + 1])
    redis.call('HDEL', KEYS[3], ARGV[i + 1])
    ax_free(KEYS[4], KEYS[3], KEYS[5], ARGV[i + 1], ARGV[i + 2])
    local active = KEYS[5 + n]
    if redis.call('GET', active) == ARGV[i + 1] then
      redis.call('DEL', active)
    end
    out[n] = 1
  else
    out[n] = 0
  end
end
return out
