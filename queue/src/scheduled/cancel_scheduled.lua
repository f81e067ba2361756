-- Takes a scheduled execution out before it is due: O(log n), no scan.
-- KEYS: 1 scheduled zset, 2 scheduled messages hash
-- ARGV: 1 execution id
-- Returns {its stored message, its due ms}, or false when it was not scheduled (unknown,
-- already promoted, or cancelled before).
local msg = redis.call('HGET', KEYS[2], ARGV[1])
if not msg then
  return false
end
local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return {msg, due}
