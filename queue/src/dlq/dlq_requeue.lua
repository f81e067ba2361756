-- Takes one entry out of the dead-letter queue and enqueues its new execution: a new
-- enqueue of the message's priority (the next instant of the queue's clock, `order.lua`).
-- KEYS: 1 dlq zset, 2 dlq entries hash, 3 queued zset, 4 monitor zset, 5 order hash, 6 clock,
--       7 wake list, 8 the entry's requeued-as string
-- ARGV: 1 entry id, 2 new message JSON, 3 new execution id, 4 now ms, 5 priority, 6 aging
--       step µs, 7 how long the requeued-as link lives, ms
-- Returns 1, or 0 when the entry is gone (requeued or purged meanwhile).
if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
local clock = ax_clock(KEYS[6])
local score = ax_score(ax_tick(clock), tonumber(ARGV[5]), tonumber(ARGV[6]))
ax_push(KEYS[3], KEYS[5], ARGV[2], ARGV[3], score)
ax_clock_close(clock)
ax_wake(KEYS[7], 1)
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[3])
redis.call('SET', KEYS[8], ARGV[3], 'PX', ARGV[7])
return 1
