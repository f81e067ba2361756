-- Moves scheduled executions that are due into the queued set, up to a batch size, each
-- once: an execution leaves the scheduled set and its message the hash in the same step as
-- it is pushed. Each is pushed as a new enqueue of its priority (the next instant of the
-- queue's clock). Work per call is bounded by the batch, whatever the set's size.
-- KEYS: 1 scheduled zset, 2 scheduled messages hash, 3 queued zset, 4 monitor zset,
--       5 order hash, 6 clock, 7 wake list
-- ARGV: 1 now ms, 2 batch size, 3 aging step µs, 4 default priority
-- Returns {how many moved, the due ms of the set's new head or -1 when it is empty}.
local step, default = tonumber(ARGV[3]), tonumber(ARGV[4])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local moved = 0
if #due > 0 then
  local clock = ax_clock(KEYS[6])
  local msgs = redis.call('HMGET', KEYS[2], unpack(due))
  redis.call('ZREM', KEYS[1], unpack(due))
  redis.call('HDEL', KEYS[2], unpack(due))
  for i, id in ipairs(due) do
    local m = msgs[i]
    -- A message is always written with its id; one missing was cancelled in between.
    if m then
      local ok, msg = pcall(cjson.decode, m)
      local priority = default
      if ok and type(msg) == 'table' then
        priority = ax_priority(msg, default)
      end
      redis.call('ZADD', KEYS[4], ARGV[1], id)
      ax_push(KEYS[3], KEYS[5], m, id, ax_score(ax_tick(clock), priority, step))
      moved = moved + 1
    end
  end
  ax_clock_close(clock)
  ax_wake(KEYS[7], moved)
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] then
  return {moved, tonumber(head[2])}
end
return {moved, -1}
