-- Removes a worker that stops cleanly, when it holds nothing. Messages still addressed to it
-- (a broadcast fire's pieces it will not take now) move to the orphaned list, where a live
-- worker ends them failed: no other worker may run them.
-- KEYS: 1 processing list, 2 workers zset, 3 heartbeat key, 4 the worker's addressed list,
--       5 orphaned list, 6 the worker's own wake list
-- ARGV: 1 worker id
-- Returns 1 when removed, 0 when it still holds messages (the reaper will give them back).
if redis.call('LLEN', KEYS[1]) > 0 then
  return 0
end
local waiting = redis.call('LRANGE', KEYS[4], 0, -1)
if #waiting > 0 then
  redis.call('RPUSH', KEYS[5], unpack(waiting))
end
redis.call('DEL', KEYS[4], KEYS[6])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
return 1
