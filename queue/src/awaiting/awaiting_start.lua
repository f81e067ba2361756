-- Moves an attempt whose receiver answered 202 to awaiting: the message leaves the worker's processing
-- list (the worker's slot is free) for the awaiting set, scored by the deadline a completion
-- or a progress report must come by. Refused when the attempt ended meanwhile (a completion
-- that overtook the 202, or a kill).
-- Awaiting lets go of the execution's slots, as an ack does (`order.lua`): `max_running` and a
-- concurrency key limit what workers run, and an awaiting attempt runs on its receiver.
-- KEYS: 1 processing list, 2 the execution's awaiting record, 3 awaiting zset, 4 the
--       execution's kill order, 5 monitor zset, 6 order hash, 7 queued zset, 8 wake list
-- ARGV: 1 message JSON as taken, 2 execution id, 3 attempt, 4 deadline ms, 5 record TTL ms,
--       6 concurrency key or ''
-- Returns {'awaiting'}, {'early', outcome JSON}, {'killed'}, {'gone'} (the record is not this
-- attempt's pending one) or {'not_taken'} (the reaper gave the message back).
local attempt = ARGV[3]
if redis.call('HGET', KEYS[2], 'attempt') ~= attempt then
  return {'gone'}
end
local early = redis.call('HGET', KEYS[2], 'early')
if early then
  return {'early', early}
end
if redis.call('HGET', KEYS[2], 'state') ~= 'pending' then
  return {'gone'}
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('HSET', KEYS[2], 'state', 'ended', 'end:' .. attempt, 'killed')
  return {'killed'}
end
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return {'not_taken'}
end
redis.call('ZREM', KEYS[5], ARGV[2])
redis.call('HDEL', KEYS[6], ARGV[2])
ax_free(KEYS[7], KEYS[6], KEYS[8], ARGV[2], ARGV[6])
redis.call('HSET', KEYS[2], 'state', 'waiting', 'msg', ARGV[1], 'deadline', ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return {'awaiting'}
