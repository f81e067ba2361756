-- Settles finished messages: removes them from the processing list and the monitor set, and
-- clears each task's active marker when it still names this execution (the overlap check of
-- the next fire then lets it through).
-- KEYS: 1 processing list, 2 monitor zset, 3 order hash, then one active-marker key per
--       message
-- ARGV: pairs of (message JSON as taken, execution id)
-- Returns one flag per pair: 1 if it was still held, 0 if not (the reaper gave it back).
local out = {}
for i = 1, #ARGV, 2 do
  local n = (i + 1) / 2
  if redis.call('LREM', KEYS[1], -1, ARGV[i]) > 0 then
    redis.call('ZREM', KEYS[2], ARGV[i + 1])
    redis.call('HDEL', KEYS[3], ARGV[i + 1])
    local active = KEYS[3 + n]
    if redis.call('GET', active) == ARGV[i + 1] then
      redis.call('DEL', active)
    end
    out[n] = 1
  else
    out[n] = 0
  end
end
return out
