-- Gives a dead worker's taken messages back to the queued set, each at its place (the order
-- score kept for its execution, see `order.lua`), so it is taken before what was enqueued
-- after it, and frees the slots they took (queue and concurrency key).
-- Messages addressed to the worker (a broadcast fire's pieces: taken, or waiting in its own
-- list) never go to another worker, which runs its own copy: they move to the orphaned
-- list, where a live worker ends them failed. When a worker restarts under the same id
-- (recover), what it had taken addressed to itself goes back to the front of its own list
-- instead, and it stays registered.
-- KEYS: 1 queued zset, 2 workers zset, 3 the worker's processing list, 4 its heartbeat key,
--       5 order hash, 6 clock, 7 wake list, 8 the worker's addressed list, 9 orphaned list,
--       10 the worker's own wake list
-- ARGV: 1 worker id, 2 cutoff ms (a worker last seen after it is not dead yet), 3 aging step
--       µs, 4 default priority, 5 '1' for a restart under the same id, else '0'
-- What goes back to run again is marked `"redelivered":true` (spliced into the text, which
-- keeps every other byte as it was: a re-encode would renumber large integers): the next
-- handler learns the attempt may already have had its effect. Orphans stay as they were.
-- Returns the number of messages given back or orphaned, or -1 when the worker is alive.
if redis.call('EXISTS', KEYS[4]) == 1 then
  return -1
end
local seen = redis.call('ZSCORE', KEYS[2], ARGV[1])
if seen and tonumber(seen) > tonumber(ARGV[2]) then
  return -1
end
local recover = ARGV[5] == '1'
local taken = redis.call('LRANGE', KEYS[3], 0, -1)
local moved = #taken
if #taken > 0 then
  local clock = ax_clock(KEYS[6])
  local shared = 0
  local function redelivered(ok, msg, m)
    if ok and type(msg) == 'table' and msg.redelivered ~= true and string.sub(m, 1, 1) == '{' and m ~= '{}' then
      return '{"redelivered":true,' .. string.sub(m, 2)
    end
    return m
  end
  for _, m in ipairs(taken) do
    local ok, msg = pcall(cjson.decode, m)
    local target = ok and ax_target(msg)
    if not target then
      ax_restore(KEYS[1], KEYS[5], clock, redelivered(ok, msg, m), tonumber(ARGV[3]), tonumber(ARGV[4]))
      shared = shared + 1
    elseif recover and target == ARGV[1] then
      redis.call('LPUSH', KEYS[8], redelivered(ok, msg, m))
      ax_wake(KEYS[10], 1)
    else
      redis.call('RPUSH', KEYS[9], m)
    end
  end
  -- Its slots go with it: the dead worker's heartbeat is gone.
  for _, m in ipairs(taken) do
    local ok, msg = pcall(cjson.decode, m)
    if ok and type(msg) == 'table' and type(msg.execution_id) == 'string' then
      local key = type(msg.concurrency) == 'table' and msg.concurrency.key or ''
      ax_free(KEYS[1], KEYS[5], KEYS[7], msg.execution_id, tostring(key))
    end
  end
  ax_clock_close(clock)
  redis.call('DEL', KEYS[3])
  ax_wake(KEYS[7], shared)
end
if recover then
  return moved
end
local waiting = redis.call('LRANGE', KEYS[8], 0, -1)
if #waiting > 0 then
  redis.call('RPUSH', KEYS[9], unpack(waiting))
  moved = moved + #waiting
end
redis.call('DEL', KEYS[8], KEYS[10])
redis.call('ZREM', KEYS[2], ARGV[1])
return moved
