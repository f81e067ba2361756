-- Enforces a queue's dead-letter retention: removes entries dead-lettered before a cutoff, and
-- the oldest entries beyond the cap, at most a given number per call (the maintenance loop
-- calls it every round, so a backlog goes in a few rounds without one long script).
-- KEYS: 1 dlq zset, 2 dlq entries hash
-- ARGV: 1 cutoff ms (entries scored below it go), 2 most entries kept, 3 most removed per call
-- Returns the number of entries removed.
local limit = tonumber(ARGV[3])
local removed = 0
local function drop(ids)
  for _, id in ipairs(ids) do
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    removed = removed + 1
  end
end
drop(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, limit))
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[2])
if over > 0 and removed < limit then
  drop(redis.call('ZRANGE', KEYS[1], 0, math.min(over, limit - removed) - 1))
end
return removed
