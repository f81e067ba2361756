-- Ends an attempt that waits for its completion, exactly once: by the completion (its token
-- hash must be the attempt's), by the deadline (only when it has passed: a progress report
-- that moved it first wins) or by a kill. The loser learns what the winner did. A completion
-- that comes while the attempt is still pending (its 202 not yet seen by the worker) is
-- recorded for the worker to settle.
-- KEYS: 1 the execution's awaiting record, 2 awaiting zset, 3 delayed zset, 4 dlq zset,
--       5 dlq entries hash, 6 the task's active marker, 7 end log stream
-- ARGV: 1 how ('complete', 'early' (a completion of an attempt read as pending, without its
--       message: it may only be kept for the worker), 'deadline' or 'kill'), 2 attempt, 3 token hash (complete only),
--       4 now ms, 5 end label, 6 settle ('ack', 'retry' or 'dlq'), 7 next attempt JSON
--       (retry) or dlq entry JSON (dlq), 8 retry due ms, 9 execution id, 10 outcome JSON,
--       11 record TTL ms after the end, 12 the attempt's end record JSON ('' for none),
--       appended to the end log when this call ends the attempt, as a worker's settle does
-- Returns {'ended', end log id or ''}, {'early'} (recorded for the worker), {'stale', current attempt, this
-- attempt's end or ''}, {'done', this attempt's end}, {'forbidden'}, {'alive'} (the
-- deadline moved), {'moved'} (an 'early' call found it awaiting meanwhile: read it again) or
-- {'gone'} (no record).
local how, attempt = ARGV[1], ARGV[2]
-- The end record goes to the end log with the end, so a caller that dies before relaying it
-- leaves it to the sweeper.
local function ended()
  if ARGV[12] ~= '' then
    return {'ended', redis.call('XADD', KEYS[7], '*', 'r', ARGV[12])}
  end
  return {'ended', ''}
end
local rec = KEYS[1]
local current = redis.call('HGET', rec, 'attempt')
if not current then
  return {'gone'}
end
if (how == 'complete' or how == 'early') and redis.call('HGET', rec, 't:' .. attempt) ~= ARGV[3] then
  return {'forbidden'}
end
if current ~= attempt then
  return {'stale', current, redis.call('HGET', rec, 'end:' .. attempt) or ''}
end
local state = redis.call('HGET', rec, 'state')
if how == 'early' and state == 'waiting' then
  return {'moved'}
end
if state == 'pending' then
  if how ~= 'complete' and how ~= 'early' then
    return {'gone'}
  end
  if redis.call('HEXISTS', rec, 'early') == 1 then
    return {'done', redis.call('HGET', rec, 'end:' .. attempt) or ''}
  end
  redis.call('HSET', rec, 'early', ARGV[10], 'end:' .. attempt, ARGV[5])
  return {'early'}
end
if state ~= 'waiting' then
  return {'done', redis.call('HGET', rec, 'end:' .. attempt) or state}
end
if how == 'deadline' then
  local deadline = tonumber(redis.call('HGET', rec, 'deadline') or '0')
  if deadline > tonumber(ARGV[4]) then
    return {'alive'}
  end
end
redis.call('ZREM', KEYS[2], ARGV[9])
redis.call('HSET', rec, 'state', 'ended', 'end:' .. attempt, ARGV[5], 'outcome', ARGV[10])
redis.call('PEXPIRE', rec, ARGV[11])
local settle = ARGV[6]
if settle == 'retry' then
  redis.call('ZADD', KEYS[3], ARGV[8], ARGV[7])
  return ended()
end
if settle == 'dlq' then
  redis.call('HSET', KEYS[5], ARGV[9], ARGV[7])
  redis.call('ZADD', KEYS[4], ARGV[4], ARGV[9])
end
if redis.call('GET', KEYS[6]) == ARGV[9] then
  redis.call('DEL', KEYS[6])
end
return ended()
