-- Moves up to N messages from the ready list to a worker's processing list without blocking.
-- KEYS: 1 ready list, 2 processing list
-- ARGV: 1 max count
-- Returns the moved messages, oldest first.
local out = {}
for i = 1, tonumber(ARGV[1]) do
  local m = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not m then break end
  out[#out + 1] = m
end
return out
