-- Moves up to N messages, lowest order score first (priority with aging, see `order.lua`),
-- from the queued set to a worker's processing list without blocking, unless the queue is
-- paused (an operator's `ax queue pause`): then it moves nothing. Messages an earlier
-- version left in the ready list are moved into the queued set first, 1000 per call, each
-- scored by its own enqueue time and priority.
-- KEYS: 1 queued zset, 2 processing list, 3 the queue's pause flag, 4 the former ready list,
--       5 order hash, 6 clock, 7 wake list, 8 the moved mark (last instant given to a moved
--       message while the former list still holds some), 9 the worker's addressed list,
--       10 its own wake list (9 and 10 may be left out by a worker that takes no addressed
--       messages, but then the broadcast fires addressed to it wait until it is reaped)
-- ARGV: 1 max count (0 only asks whether the queue is paused), 2 aging step µs,
--       3 default priority, 4 the queue's max_running (0: none), 5 its rate per second
--       (0: none)
-- The queue's limits hold across all workers: `max_running` counts the executions taken and
-- not settled (the running set, kept while the limit is set), `rate` is a token bucket
-- (burst: one second's worth, at least 1) on Redis's clock. A message whose concurrency key
-- has `max` executions running is gated: it waits on the key's list (`:held:KEY`), in order, and moved back to the
-- queued set at its place when a slot of the key frees (`ax_free`, in every settle and the
-- reaper); up to 1000 are gated per call.
-- Messages addressed to this worker (a broadcast fire's pieces) are taken first, oldest
-- first, up to N, and only here: they count against no queue limit (max_running, rate) and
-- no concurrency key, since a broadcast runs one per worker by construction. A pause holds
-- them as it holds the rest.
-- Returns {1 when paused else 0, {the moved messages, in order}, hold, {per message: ms it
-- waited gated, or -1}}; hold is 0, -1 (the queue is at max_running: wait for a wake) or
-- the ms until the rate allows a take. When the set is left empty, or nothing can be taken
-- until a slot frees, the wake tokens go: a freed slot or a push adds new ones.
-- The pause flag, the former ready list and the worker's addressed list and wake list are
-- rarely there: one `EXISTS` over all of them, and each is asked about only when some is.
local probe = {KEYS[3], KEYS[4]}
for i = 9, 10 do
  if KEYS[i] then
    probe[#probe + 1] = KEYS[i]
  end
end
local rare = redis.call('EXISTS', unpack(probe)) > 0
if rare and redis.call('EXISTS', KEYS[3]) == 1 then
  return {1, {}, 0, {}}
end
if rare and redis.call('EXISTS', KEYS[4]) == 1 then
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
local max = tonumber(ARGV[1])
local mine = {}
if rare and KEYS[9] and max > 0 then
  mine = redis.call('LPOP', KEYS[9], max) or {}
  -- Fewer than asked for: the list is empty now (and gone); no need to ask.
  if #mine < max or redis.call('EXISTS', KEYS[9]) == 0 then
    redis.call('DEL', KEYS[10])
  end
  max = max - #mine
end
local max_running, rate = tonumber(ARGV[4]), tonumber(ARGV[5])
local tag = ax_tag(KEYS[1])
local now_ms
local function now()
  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_ms
end
-- Queue limits first: they bound how many this call may take.
local hold = 0
if max > 0 and max_running > 0 then
  local free = max_running - redis.call('ZCARD', tag .. ':running')
  if free <= 0 then
    max, hold = 0, -1
  elseif free < max then
    max = free
  end
end
local tokens
if max > 0 and rate > 0 then
  local b = redis.call('HMGET', tag .. ':rate', 'tokens', 'at')
  local burst = math.max(1, rate)
  tokens = math.min(burst, (tonumber(b[1]) or burst) + (now() - (tonumber(b[2]) or now())) * rate / 1000)
  if tokens < 1 then
    max, hold = 0, math.ceil((1 - tokens) * 1000 / rate)
  elseif math.floor(tokens) < max then
    max = math.floor(tokens)
  end
end
local out, waits = {}, {}
local gated = 0
-- A pop that returns fewer than it asked for left the set empty: no further pop, and no
-- count of it below (a worker that keeps up drains the set at nearly every take).
local emptied = false
while #out < max and gated < 1000 do
  local want = max - #out
  local popped = redis.call('ZPOPMIN', KEYS[1], want)
  emptied = #popped < 2 * want
  if #popped == 0 then
    break
  end
  for i = 1, #popped, 2 do
    local m = popped[i]
    local take, wait = true, -1
    -- Only a message with a concurrency key is decoded (a plain find first: cheap).
    if string.find(m, '"concurrency":', 1, true) then
      local ok, msg = pcall(cjson.decode, m)
      local c = ok and type(msg) == 'table' and type(msg.concurrency) == 'table' and msg.concurrency
      if c and type(c.key) == 'string' and type(msg.execution_id) == 'string' then
        local slots = tag .. ':slots:' .. c.key
        if redis.call('ZCARD', slots) >= (tonumber(c.max) or 1) then
          -- Over its key's limit: gated, in order, until a slot of the key frees.
          take = false
          gated = gated + 1
          redis.call('RPUSH', tag .. ':held:' .. c.key, m)
          redis.call('SADD', tag .. ':heldkeys', c.key)
          redis.call('HSETNX', tag .. ':limited', msg.execution_id, now())
        else
          redis.call('ZADD', slots, now(), msg.execution_id)
          local since = redis.call('HGET', tag .. ':limited', msg.execution_id)
          if since then
            wait = now() - tonumber(since)
            redis.call('HDEL', tag .. ':limited', msg.execution_id)
          end
        end
      end
    end
    if take then
      out[#out + 1] = m
      waits[#out] = wait
      if max_running > 0 then
        local id = string.match(m, '"execution_id":"([^"]+)"')
        if id then
          redis.call('ZADD', tag .. ':running', now(), id)
        end
      end
    end
  end
  if emptied then
    break
  end
end
if tokens then
  redis.call('HSET', tag .. ':rate', 'tokens', tostring(tokens - #out), 'at', now())
end
for i = #mine, 1, -1 do
  table.insert(out, 1, mine[i])
  table.insert(waits, 1, -1)
end
if #out > 0 then
  redis.call('LPUSH', KEYS[2], unpack(out))
end
if hold == -1 or emptied or redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[7])
end
return {0, out, hold, waits}
