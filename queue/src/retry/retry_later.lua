-- Moves a failed message to the delayed set as its next attempt, due at a given time, unless
-- an operator killed the execution meanwhile: then it ends here (no retry), its task's active
-- marker cleared as a final settle does. The attempt's end record for the case that applies
-- is appended to the queue's end log in the same step.
-- KEYS: 1 processing list, 2 monitor zset, 3 delayed zset, 4 the execution's kill order,
--       5 the task's active marker, 6 order hash (the next attempt gets its place when due),
--       7 queued zset, 8 wake list, 9 end log stream
-- ARGV: 1 message JSON as taken, 2 execution id, 3 next attempt's JSON, 4 due ms,
--       5 concurrency key or '' (its slot is freed: the next attempt takes one when taken),
--       6 end record JSON if scheduled or '', 7 end record JSON if killed or ''
-- Returns {1 (scheduled) or 2 (killed: not scheduled), end log id or ''}, or {0, ''} when the
-- message was no longer taken (the reaper gave it back).
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return {0, ''}
end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[6], ARGV[2])
ax_free(KEYS[7], KEYS[6], KEYS[8], ARGV[2], ARGV[5])
local code = 1
local record = ARGV[6]
if redis.call('EXISTS', KEYS[4]) == 1 then
  if redis.call('GET', KEYS[5]) == ARGV[2] then
    redis.call('DEL', KEYS[5])
  end
  code = 2
  record = ARGV[7]
else
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[3])
end
local id = ''
if record ~= '' then
  id = redis.call('XADD', KEYS[9], '*', 'r', record)
end
return {code, id}
