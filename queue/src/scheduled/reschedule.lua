-- Moves a scheduled execution to a new due instant, if it is still scheduled (its message
-- holds no instant: the set's score is its due time). A move that makes it the set's head
-- wakes a promoter, as an add does.
-- KEYS: 1 scheduled zset, 2 scheduled messages hash, 3 scheduled wake list
-- ARGV: 1 execution id, 2 new due ms
-- Returns 1 when moved, 0 when it was not scheduled.
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', ARGV[2], ARGV[1])
local head = redis.call('ZRANGE', KEYS[1], 0, 0)
if head[1] == ARGV[1] then
  redis.call('LPUSH', KEYS[3], '1')
  redis.call('LTRIM', KEYS[3], 0, 0)
end
return 1
