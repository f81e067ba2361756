-- Opens an attempt of an async (`http.async`) execution before its request is sent: the
-- record holds the hash of the attempt's completion token, so a completion that overtakes
-- the receiver's 202 already finds it. A completion that came before, for this attempt, is
-- returned instead (a worker that took the message back after a crash must not send the
-- request a second time).
-- KEYS: 1 the execution's awaiting record (hash)
-- ARGV: 1 attempt, 2 token hash, 3 worker id, 4 started ms, 5 record TTL ms
-- Returns {'opened'} or {'early', outcome JSON}.
local attempt = ARGV[1]
if redis.call('HGET', KEYS[1], 'attempt') == attempt then
  local early = redis.call('HGET', KEYS[1], 'early')
  if early then
    return {'early', early}
  end
end
redis.call('HDEL', KEYS[1], 'early', 'progress', 'msg', 'deadline', 'outcome')
redis.call('HSET', KEYS[1], 'attempt', attempt, 'state', 'pending', 't:' .. attempt, ARGV[2],
  'worker', ARGV[3], 'started', ARGV[4])
redis.call('HDEL', KEYS[1], 'end:' .. attempt)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {'opened'}
