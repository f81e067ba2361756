-- Idempotent, fenced enqueue of one execution message, with the overlap check.
-- KEYS: 1 ready list, 2 monitor zset, 3 fence, 4 dedupe key, 5 the task's active marker
-- ARGV: 1 message JSON, 2 execution id, 3 enqueued_at ms, 4 fencing token,
--       5 dedupe TTL ms, 6 '1' to push at the taking end (high priority),
--       7 overlap mode: 'a' allow (no marker), 'f' forbid, 'r' replace, 8 marker TTL ms
-- Returns {code, newest token}: 1 enqueued, 0 duplicate, -1 refused (token older than
-- newest), 2 held (forbid, and the task's previous execution is still active).
local token = tonumber(ARGV[4])
local newest = tonumber(redis.call('GET', KEYS[3]) or '0')
if token < newest then
  return {-1, tostring(newest)}
end
if token > newest then
  redis.call('SET', KEYS[3], ARGV[4])
  newest = token
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {0, tostring(newest)}
end
if ARGV[7] == 'f' and redis.call('EXISTS', KEYS[5]) == 1 then
  return {2, tostring(newest)}
end
redis.call('SET', KEYS[4], ARGV[2], 'PX', ARGV[5])
if ARGV[7] ~= 'a' then
  redis.call('SET', KEYS[5], ARGV[2], 'PX', ARGV[8])
end
if ARGV[6] == '1' then
  redis.call('RPUSH', KEYS[1], ARGV[1])
else
  redis.call('LPUSH', KEYS[1], ARGV[1])
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
return {1, tostring(newest)}
