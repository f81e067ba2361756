-- A progress report of an attempt waiting for its completion: keeps what it says and moves
-- the deadline to a full timeout from now. One that comes before the worker moved the
-- attempt to awaiting is kept too (that move sets the deadline).
-- KEYS: 1 the execution's awaiting record, 2 awaiting zset
-- ARGV: 1 attempt, 2 token hash, 3 new deadline ms, 4 progress JSON, 5 execution id,
--       6 record TTL ms
-- Returns {'ok'}, {'stale', current attempt, this attempt's end or ''}, {'done', end},
-- {'forbidden'} or {'gone'}.
local rec, attempt = KEYS[1], ARGV[1]
local current = redis.call('HGET', rec, 'attempt')
if not current then
  return {'gone'}
end
if redis.call('HGET', rec, 't:' .. attempt) ~= ARGV[2] then
  return {'forbidden'}
end
if current ~= attempt then
  return {'stale', current, redis.call('HGET', rec, 'end:' .. attempt) or ''}
end
local state = redis.call('HGET', rec, 'state')
if state == 'pending' and redis.call('HEXISTS', rec, 'early') == 0 then
  redis.call('HSET', rec, 'progress', ARGV[4])
  return {'ok'}
end
if state ~= 'waiting' then
  return {'done', redis.call('HGET', rec, 'end:' .. attempt) or state}
end
redis.call('HSET', rec, 'progress', ARGV[4], 'deadline', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[5])
redis.call('PEXPIRE', rec, ARGV[6])
return {'ok'}
