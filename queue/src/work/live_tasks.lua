-- Which of the given tasks have work in one queue: a message waiting (queued, on a
-- concurrency key, in the former ready list), a retry pending, a message held by a worker or
-- addressed to one, an execution waiting for its completion, or an end record not relayed
-- yet. Read-only; everything is read in chunks so a long backlog is never copied whole into
-- the script, and one pass answers for every task asked about.
-- KEYS: 1 queued zset, 2 delayed zset, 3 the former ready list, 4 end log stream,
--       5 awaiting zset, then the processing lists, the lists of messages addressed to each
--       worker and the orphaned list; the lists on concurrency keys and the awaiting records
--       are built from the queue's tag
-- ARGV: the tasks, each as 'namespace/id'
-- Returns the tasks of ARGV that have work.
local wanted = {}
local left = 0
for _, t in ipairs(ARGV) do
  if not wanted[t] then
    wanted[t] = false
    left = left + 1
  end
end
local out = {}
local function look(text)
  if left == 0 or not text then
    return
  end
  local ns = string.match(text, '"namespace":"([^"]*)"')
  local id = string.match(text, '"task_id":"([^"]*)"')
  if ns and id then
    local t = ns .. '/' .. id
    if wanted[t] == false then
      wanted[t] = true
      left = left - 1
      out[#out + 1] = t
    end
  end
end
local function each(items)
  for _, m in ipairs(items) do
    look(m)
  end
end
local chunk = 1000
local function zset(key)
  local n = redis.call('ZCARD', key)
  for from = 0, n - 1, chunk do
    if left == 0 then return end
    each(redis.call('ZRANGE', key, from, from + chunk - 1))
  end
end
local function list(key)
  local n = redis.call('LLEN', key)
  for from = 0, n - 1, chunk do
    if left == 0 then return end
    each(redis.call('LRANGE', key, from, from + chunk - 1))
  end
end
zset(KEYS[1])
zset(KEYS[2])
list(KEYS[3])
local from = '-'
while left > 0 do
  local entries = redis.call('XRANGE', KEYS[4], from, '+', 'COUNT', chunk)
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    for i = 1, #fields, 2 do
      look(fields[i + 1])
    end
    from = '(' .. entry[1]
  end
  if #entries < chunk then break end
end
local tag = string.sub(KEYS[1], 1, -8)
for _, key in ipairs(redis.call('SMEMBERS', tag .. ':heldkeys')) do
  list(tag .. ':held:' .. key)
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
  local rec = tag .. ':awaiting:' .. id
  if redis.call('HGET', rec, 'state') ~= 'ended' then
    look(redis.call('HGET', rec, 'msg'))
  end
end
for i = 6, #KEYS do
  list(KEYS[i])
end
return out
