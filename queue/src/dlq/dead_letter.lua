-- Moves a taken message to the dead-letter queue, clearing the task's active marker when it
-- still names this execution, and appends the attempt's end record (when given) to the
-- queue's end log in the same step.
-- KEYS: 1 processing list, 2 monitor zset, 3 dlq zset, 4 dlq entries hash, 5 active marker,
--       6 order hash, 7 queued zset, 8 wake list, 9 end log stream
-- ARGV: 1 message JSON as taken, 2 entry id, 3 entry JSON, 4 now ms, 5 execution id,
--       6 concurrency key or '' (its slot is freed), 7 end record JSON or ''
-- Returns '0' when the message was no longer taken, '1' when it was dead-lettered without an
-- end record, else the end log id of its record.
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return '0'
end
redis.call('ZREM', KEYS[2], ARGV[5])
redis.call('HDEL', KEYS[6], ARGV[5])
ax_free(KEYS[7], KEYS[6], KEYS[8], ARGV[5], ARGV[6])
redis.call('HSET', KEYS[4], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[2])
if redis.call('GET', KEYS[5]) == ARGV[5] then
  redis.call('DEL', KEYS[5])
end
if ARGV[7] ~= '' then
  return redis.call('XADD', KEYS[9], '*', 'r', ARGV[7])
end
return '1'
