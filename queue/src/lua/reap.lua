-- Gives a dead worker's held messages back to the taking end of the ready list, in order.
-- KEYS: 1 ready list, 2 workers zset, 3 the worker's processing list, 4 its heartbeat key
-- ARGV: 1 worker id, 2 cutoff ms (a worker last seen after it is not dead yet)
-- Returns the number of messages given back, or -1 when the worker is alive.
if redis.call('EXISTS', KEYS[4]) == 1 then
  return -1
end
local seen = redis.call('ZSCORE', KEYS[2], ARGV[1])
if seen and tonumber(seen) > tonumber(ARGV[2]) then
  return -1
end
local n = 0
while redis.call('LMOVE', KEYS[3], KEYS[1], 'LEFT', 'RIGHT') do
  n = n + 1
end
redis.call('ZREM', KEYS[2], ARGV[1])
return n
