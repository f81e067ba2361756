-- An operator's kill of one execution, wherever it is in this queue. A waiting message (queued
-- set, waiting on its concurrency key, or the ready list of an earlier version) or a pending retry (delayed set) is removed here and its task's active marker cleared;
-- a running one (taken, so still in the monitor set) gets a kill order that its worker polls
-- for. The order is left in every case, so a message that comes back later (the reaper gives
-- back a dead worker's messages, a retry settled just after this call) is stopped when taken.
-- A message addressed to a worker (a broadcast fire's piece) waits in that worker's list or,
-- its worker gone, in the orphaned list: removed from there as from the queued set.
-- A removed message's end record, when given, is appended to the queue's end log in the same
-- step, as a worker's settle does: a caller that dies before relaying it leaves it to the
-- sweeper, never lost.
-- KEYS: 1 queued zset, 2 delayed zset, 3 monitor zset, 4 the execution's kill order, 5 the
--       task's active marker, 6 the former ready list, 7 order hash, 8 orphaned list,
--       9 end log stream
-- ARGV: 1 the message JSON as found ('' when it was not found waiting), 2 execution id,
--       3 kill order TTL ms, 4 the end record JSON ('' for none)
-- Returns {state, end log id or ''}: state 'waiting' or 'retry_pending' (removed), 'running'
-- (ordered), 'already' (an order exists and nothing was removed), 'gone' (not in this queue:
-- finished, or never here).
-- Removes the message from its concurrency key's list of gated messages, if it waits there.
local function ungate(m)
  if not string.find(m, '"concurrency":', 1, true) then
    return false
  end
  local ok, msg = pcall(cjson.decode, m)
  if not (ok and type(msg) == 'table' and type(msg.concurrency) == 'table') then
    return false
  end
  local key = tostring(msg.concurrency.key)
  local tag = ax_tag(KEYS[1])
  if redis.call('LREM', tag .. ':held:' .. key, 0, m) == 0 then
    return false
  end
  if redis.call('EXISTS', tag .. ':held:' .. key) == 0 then
    redis.call('SREM', tag .. ':heldkeys', key)
  end
  redis.call('HDEL', tag .. ':limited', ARGV[2])
  return true
end
-- Removes an addressed message from where it waits, if it waits there.
local function unaddress(m)
  local ok, msg = pcall(cjson.decode, m)
  local target = ok and ax_target(msg)
  if not target then
    return false
  end
  return redis.call('LREM', ax_addressed(ax_tag(KEYS[1]), target), 0, m) > 0
    or redis.call('LREM', KEYS[8], 0, m) > 0
end
local state
if ARGV[1] ~= '' then
  if redis.call('ZREM', KEYS[1], ARGV[1]) > 0 or redis.call('LREM', KEYS[6], 0, ARGV[1]) > 0 then
    state = 'waiting'
  elseif ungate(ARGV[1]) or unaddress(ARGV[1]) then
    state = 'waiting'
  elseif redis.call('ZREM', KEYS[2], ARGV[1]) > 0 then
    state = 'retry_pending'
  end
end
if state then
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('HDEL', KEYS[7], ARGV[2])
  if redis.call('GET', KEYS[5]) == ARGV[2] then
    redis.call('DEL', KEYS[5])
  end
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[3])
  local logged = ''
  if ARGV[4] ~= '' then
    logged = redis.call('XADD', KEYS[9], '*', 'r', ARGV[4])
  end
  return {state, logged}
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {'already', ''}
end
if redis.call('ZSCORE', KEYS[3], ARGV[2]) then
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[3])
  return {'running', ''}
end
return {'gone', ''}
