-- Settles finished messages: removes them from the processing list and the monitor set.
-- KEYS: 1 processing list, 2 monitor zset
-- ARGV: pairs of (message JSON as taken, execution id)
-- Returns one flag per pair: 1 if it was still held, 0 if not (the reaper gave it back).
local out = {}
for i = 1, #ARGV, 2 do
  if redis.call('LREM', KEYS[1], -1, ARGV[i]) > 0 then
    redis.call('ZREM', KEYS[2], ARGV[i + 1])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
