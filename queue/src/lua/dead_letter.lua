-- Moves a held message to the dead-letter queue.
-- KEYS: 1 processing list, 2 monitor zset, 3 dlq zset, 4 dlq entries hash
-- ARGV: 1 message JSON as taken, 2 execution id (the entry id), 3 entry JSON, 4 now ms
-- Returns 1, or 0 when the message was no longer held.
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[4], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[2])
return 1
