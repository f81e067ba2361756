-- Takes one entry out of the dead-letter queue and enqueues its new execution.
-- KEYS: 1 dlq zset, 2 dlq entries hash, 3 ready list, 4 monitor zset
-- ARGV: 1 entry id, 2 new message JSON, 3 new execution id, 4 now ms
-- Returns 1, or 0 when the entry is gone (requeued or purged meanwhile).
if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('LPUSH', KEYS[3], ARGV[2])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[3])
return 1
