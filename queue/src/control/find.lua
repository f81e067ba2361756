-- Finds the messages of one queue whose JSON contains a needle (an execution id or a task id
-- as serialized), for a kill: waiting, pending retries and taken by workers. Read-only. The
-- queued set is read in chunks so a long backlog is never copied whole into the script.
-- KEYS: 1 queued zset, 2 delayed zset, 3 the former ready list, then the processing lists,
--       the lists of messages addressed to each worker and the orphaned list (all read as
--       'processing': a kill tells waiting from running by the message's place, not this);
--       the lists of executions gated on a concurrency key are named by the set of keys
--       with gated executions and built from the queue's tag (`order.lua`)
-- ARGV: 1 needle (a plain substring), 2 most matches returned
-- Returns pairs of (where: 'ready', 'delayed' or 'processing', message JSON).
local out = {}
local limit = tonumber(ARGV[2])
local function look(where, items)
  for _, m in ipairs(items) do
    if #out >= 2 * limit then
      return
    end
    if string.find(m, ARGV[1], 1, true) then
      out[#out + 1] = where
      out[#out + 1] = m
    end
  end
end
local chunk = 1000
local waiting = redis.call('ZCARD', KEYS[1])
for from = 0, waiting - 1, chunk do
  look('ready', redis.call('ZRANGE', KEYS[1], from, from + chunk - 1))
end
local len = redis.call('LLEN', KEYS[3])
for from = 0, len - 1, chunk do
  look('ready', redis.call('LRANGE', KEYS[3], from, from + chunk - 1))
end
local tag = string.sub(KEYS[1], 1, -8)
for _, key in ipairs(redis.call('SMEMBERS', tag .. ':heldkeys')) do
  local gated = tag .. ':held:' .. key
  local count = redis.call('LLEN', gated)
  for from = 0, count - 1, chunk do
    look('ready', redis.call('LRANGE', gated, from, from + chunk - 1))
  end
end
local n = redis.call('ZCARD', KEYS[2])
for from = 0, n - 1, chunk do
  look('delayed', redis.call('ZRANGE', KEYS[2], from, from + chunk - 1))
end
for i = 4, #KEYS do
  look('processing', redis.call('LRANGE', KEYS[i], 0, -1))
end
return out
