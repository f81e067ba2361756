-- Settles finished messages: removes them from the processing list and the monitor set.
-- KEYS: 1 processing list, 2 monitor zset
-- ARGV: pairs of (message JSON as taken, execution id)
-- Returns how many were still held (a message the reaper gave back is not counted).
local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('LREM', KEYS[1], -1, ARGV[i]) > 0 then
    redis.call('ZREM', KEYS[2], ARGV[i + 1])
    n = n + 1
  end
end
return n
