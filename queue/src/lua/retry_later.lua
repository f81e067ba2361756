-- Moves a failed message to the delayed set as its next attempt, due at a given time.
-- KEYS: 1 processing list, 2 monitor zset, 3 delayed zset
-- ARGV: 1 message JSON as taken, 2 execution id, 3 next attempt's JSON, 4 due ms
-- Returns 1, or 0 when the message was no longer held (the reaper gave it back).
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[3])
return 1
