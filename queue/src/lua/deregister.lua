-- Removes a worker that stops cleanly, when it holds nothing.
-- KEYS: 1 processing list, 2 workers zset, 3 heartbeat key
-- ARGV: 1 worker id
-- Returns 1 when removed, 0 when it still holds messages (the reaper will give them back).
if redis.call('LLEN', KEYS[1]) > 0 then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
return 1
