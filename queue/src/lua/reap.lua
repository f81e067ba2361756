-- Gives a dead worker's held messages back to the queued set, each at its place (the order
-- score kept for its execution, see `order.lua`), so it is taken before what was enqueued
-- after it, and frees the slots they held (queue and concurrency key).
-- KEYS: 1 queued zset, 2 workers zset, 3 the worker's processing list, 4 its heartbeat key,
--       5 order hash, 6 clock, 7 wake list
-- ARGV: 1 worker id, 2 cutoff ms (a worker last seen after it is not dead yet), 3 aging step
--       µs, 4 default priority
-- Returns the number of messages given back, or -1 when the worker is alive.
if redis.call('EXISTS', KEYS[4]) == 1 then
  return -1
end
local seen = redis.call('ZSCORE', KEYS[2], ARGV[1])
if seen and tonumber(seen) > tonumber(ARGV[2]) then
  return -1
end
local held = redis.call('LRANGE', KEYS[3], 0, -1)
if #held > 0 then
  local clock = ax_clock(KEYS[6])
  for _, m in ipairs(held) do
    ax_restore(KEYS[1], KEYS[5], clock, m, tonumber(ARGV[3]), tonumber(ARGV[4]))
  end
  -- Its slots go with it: the dead worker's heartbeat is gone.
  for _, m in ipairs(held) do
    local ok, msg = pcall(cjson.decode, m)
    if ok and type(msg) == 'table' and type(msg.execution_id) == 'string' then
      local key = type(msg.concurrency) == 'table' and msg.concurrency.key or ''
      ax_free(KEYS[1], KEYS[5], KEYS[7], msg.execution_id, tostring(key))
    end
  end
  ax_clock_close(clock)
  redis.call('DEL', KEYS[3])
  ax_wake(KEYS[7], #held)
end
redis.call('ZREM', KEYS[2], ARGV[1])
return #held
