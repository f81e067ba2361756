-- Moves scheduled executions that are due into the queued set, up to a batch size, each
-- once: an execution leaves the scheduled set and its message the hash in the same step as
-- it is pushed. Each is pushed as a new enqueue of its priority (the next instant of the
-- queue's clock). Work per call is bounded by the batch, whatever the set's size.
-- A stored message leaves out what is known here (`FILLED_AT_PROMOTION` in
-- `scheduled.rs`): its id, due instant, enqueue instants and constants are written in front
-- of its other fields, as text (a decode and encode would change the payload's numbers).
-- KEYS: 1 scheduled zset, 2 scheduled messages hash, 3 queued zset, 4 monitor zset,
--       5 order hash, 6 clock, 7 wake list
-- ARGV: 1 now ms, 2 batch size, 3 aging step µs, 4 default priority, then the defaults a
--       stored form leaves out, each as `"key":value` text in the order retry, timeout_ms,
--       priority (`DEFAULTED` in `scheduled.rs`)
-- Returns {how many moved, the due ms of the set's new head or -1 when it is empty}.
local step, default = tonumber(ARGV[3]), tonumber(ARGV[4])
local defaulted = {'retry', 'timeout_ms', 'priority'}
local found = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0,
  tonumber(ARGV[2]))
local moved = 0
if #found > 0 then
  local due, at = {}, {}
  for i = 1, #found, 2 do
    due[#due + 1] = found[i]
    at[#at + 1] = found[i + 1]
  end
  local clock = ax_clock(KEYS[6])
  local msgs = redis.call('HMGET', KEYS[2], unpack(due))
  redis.call('ZREM', KEYS[1], unpack(due))
  redis.call('HDEL', KEYS[2], unpack(due))
  local now = ARGV[1]
  for i, id in ipairs(due) do
    local stored = msgs[i]
    -- Written with its id; a stored form is an object (`{...}`), else it is not ours.
    if stored and string.sub(stored, 1, 1) == '{' then
      local rest = string.sub(stored, 2)
      local sep = ','
      if rest == '}' then
        sep = ''
      end
      local m = '{"execution_id":"' .. id .. '","fire_at":' .. at[i] .. ',"attempt":0,' ..
        '"first_attempt_at":' .. now .. ',"enqueued_at":' .. now .. ',"fencing_token":0'
      local ok, msg = pcall(cjson.decode, stored)
      local priority = default
      if ok and type(msg) == 'table' then
        priority = ax_priority(msg, default)
        local absent = {}
        for j, key in ipairs(defaulted) do
          if msg[key] == nil then
            absent[#absent + 1] = ARGV[4 + j]
          end
        end
        if #absent > 0 then
          m = m .. ',' .. table.concat(absent, ',')
        end
      end
      m = m .. sep .. rest
      redis.call('ZADD', KEYS[4], now, id)
      ax_push(KEYS[3], KEYS[5], m, id, ax_score(ax_tick(clock), priority, step))
      moved = moved + 1
    elseif stored then
      -- Not a stored form (written by something else): as it is, so that a worker
      -- dead-letters it rather than it vanishing here.
      ax_push(KEYS[3], KEYS[5], stored, id, ax_score(ax_tick(clock), default, step))
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
