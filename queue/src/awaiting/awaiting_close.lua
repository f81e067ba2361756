-- Closes an attempt that was opened for a completion and ended at the worker instead (the
-- receiver answered something other than 202, the request failed, the attempt was killed
-- or timed out): a completion that comes later is refused with the end recorded here.
-- KEYS: 1 the execution's awaiting record
-- ARGV: 1 attempt, 2 end label, 3 record TTL ms
-- Returns 1 when closed, 0 when the record is not this attempt's pending one.
if redis.call('HGET', KEYS[1], 'attempt') ~= ARGV[1]
  or redis.call('HGET', KEYS[1], 'state') ~= 'pending' then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'ended', 'end:' .. ARGV[1], ARGV[2])
redis.call('HDEL', KEYS[1], 'early')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
