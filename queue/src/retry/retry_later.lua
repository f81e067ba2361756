-- Moves a failed message to the delayed set as its next attempt, due at a given time, unless
-- an operator killed the execution meanwhile: then it ends here (no retry), its task's active
-- marker cleared as a final settle does.
-- KEYS: 1 processing list, 2 monitor zset, 3 delayed zset, 4 the execution's kill order,
--       5 the task's active marker, 6 order hash (the next attempt gets its place when due),
--       7 queued zset, 8 wake list
-- ARGV: 1 message JSON as taken, 2 execution id, 3 next attempt's JSON, 4 due ms,
--       5 concurrency key or '' (its slot is freed: the next attempt takes one when taken)
-- Returns 1 (scheduled), 2 (killed: not scheduled), or 0 when the message was no longer taken
-- (the reaper gave it back).
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[6], ARGV[2])
ax_free(KEYS[7], KEYS[6], KEYS[8], ARGV[2], ARGV[5])
if redis.call('EXISTS', KEYS[4]) == 1 then
  if redis.call('GET', KEYS[5]) == ARGV[2] then
    redis.call('DEL', KEYS[5])
  end
  return 2
end
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[3])
return 1
