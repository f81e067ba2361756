-- Moves up to N messages, lowest order score first (priority with aging, see `order.lua`),
-- from the queued set to a worker's processing list without blocking, unless the queue is
-- paused (an operator's `ax queue pause`): then it moves nothing. Messages an earlier
-- version left in the ready list are moved into the queued set first, 1000 per call, each
-- scored by its own enqueue time and priority.
-- KEYS: 1 queued zset, 2 processing list, 3 the queue's pause flag, 4 the former ready list,
--       5 order hash, 6 clock, 7 wake list, 8 the moved mark (last instant given to a moved
--       message while the former list still holds some)
-- ARGV: 1 max count (0 only asks whether the queue is paused), 2 aging step µs,
--       3 default priority
-- Returns {1 when paused else 0, {the moved messages, in order}}. When the set is left empty
-- the wake tokens go too: nothing is left to wake anyone for.
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {1, {}}
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  local step, default = tonumber(ARGV[2]), tonumber(ARGV[3])
  local clock = ax_clock(KEYS[6])
  -- The taking end is the right: the next message is last. Each keeps its enqueue time,
  -- made strictly increasing in list order (across calls too, through the moved mark), so
  -- messages enqueued in the same millisecond stay FIFO.
  local old = redis.call('LRANGE', KEYS[4], -1000, -1)
  local prev = tonumber(redis.call('GET', KEYS[8]) or '0')
  for i = #old, 1, -1 do
    local ok, msg = pcall(cjson.decode, old[i])
    if ok and type(msg) == 'table' and type(msg.execution_id) == 'string' then
      local at = math.max((tonumber(msg.enqueued_at) or 0) * 1000, prev + 1)
      prev = at
      ax_push(KEYS[1], KEYS[5], old[i], msg.execution_id,
        ax_score(at, ax_priority(msg, default), step))
    else
      ax_restore(KEYS[1], KEYS[5], clock, old[i], step, default)
    end
  end
  redis.call('LTRIM', KEYS[4], 0, -#old - 1)
  if redis.call('EXISTS', KEYS[4]) == 1 then
    redis.call('SET', KEYS[8], string.format('%.0f', prev))
  else
    redis.call('DEL', KEYS[8])
  end
  ax_clock_close(clock)
end
local out = {}
local max = tonumber(ARGV[1])
if max > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[1], max)
  for i = 1, #popped, 2 do
    out[#out + 1] = popped[i]
  end
  if #out > 0 then
    redis.call('LPUSH', KEYS[2], unpack(out))
  end
end
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[7])
end
return {0, out}
