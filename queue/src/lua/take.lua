-- Moves up to N messages from the ready list to a worker's processing list without blocking,
-- unless the queue is paused (an operator's `ax queue pause`): then it moves nothing.
-- KEYS: 1 ready list, 2 processing list, 3 the queue's pause flag
-- ARGV: 1 max count (0 only asks whether the queue is paused)
-- Returns {1 when paused else 0, {the moved messages, oldest first}}.
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {1, {}}
end
local out = {}
for i = 1, tonumber(ARGV[1]) do
  local m = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not m then break end
  out[#out + 1] = m
end
return {0, out}
