-- The queue order, prepended to every script that puts messages in the queued set (one
-- definition; see `scripts.rs`).
--
-- A waiting message's score is its enqueue instant (µs) less its priority times the aging
-- step: a priority-9 message enqueued now sorts with a priority-0 message enqueued 9 steps
-- ago. The set is taken lowest score first, so within a priority it is FIFO, and a message
-- of priority p is never overtaken by one of priority q enqueued more than (q - p) steps
-- after it. Instants come from the queue's own clock: Redis's TIME, made strictly
-- increasing per queue, so every enqueue has its own instant whichever client sends it.
-- The score is kept per execution id in the order hash, so a message given back (reaper,
-- shutdown) returns to its place.

-- Opens the queue's clock; `ax_tick` hands out instants, `ax_clock_close` records the last.
local function ax_clock(key)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('GET', key) or '0')
  if now <= last then
    now = last + 1
  end
  return { key = key, next = now }
end

local function ax_tick(clock)
  local at = clock.next
  clock.next = at + 1
  clock.used = at
  return at
end

local function ax_clock_close(clock)
  if clock.used then
    redis.call('SET', clock.key, string.format('%.0f', clock.used))
  end
end

local function ax_score(at, priority, step)
  return string.format('%.0f', at - priority * step)
end

-- Puts a message in the queued set at `score`, remembering the score of its execution.
local function ax_push(queued, order, member, id, score)
  redis.call('ZADD', queued, score, member)
  if id then
    redis.call('HSET', order, id, score)
  end
end

-- One variadic command over `items` (key first), in chunks of at most 1000 arguments (an
-- even number: pairs stay whole), below what `unpack` can pass: one command for a
-- script call's many messages instead of one per message.
local function ax_all(cmd, key, items)
  for i = 1, #items, 1000 do
    redis.call(cmd, key, unpack(items, i, math.min(i + 999, #items)))
  end
end

-- The priority of a decoded message (the default when it carries none).
local function ax_priority(msg, default)
  local p = tonumber(msg.priority)
  if not p then
    return default
  end
  return p
end

-- Gives a message back to the queued set at its place: the score kept for its execution,
-- else (a message enqueued by an earlier version) one made of its own enqueue time and
-- priority, else (undecodable) a new instant, so a worker takes it and dead-letters it.
local function ax_restore(queued, order, clock, member, step, default)
  local ok, msg = pcall(cjson.decode, member)
  if not ok or type(msg) ~= 'table' or type(msg.execution_id) ~= 'string' then
    redis.call('ZADD', queued, ax_score(ax_tick(clock), default, step), member)
    return
  end
  local score = redis.call('HGET', order, msg.execution_id)
  if not score then
    local at = (tonumber(msg.enqueued_at) or 0) * 1000
    score = ax_score(at, ax_priority(msg, default), step)
  end
  ax_push(queued, order, member, msg.execution_id, score)
end

-- Adds wake tokens for `n` new messages (at most 64 per call, at most 256 kept: enough to
-- wake every blocked consumer; a consumer that wakes takes a whole batch anyway).
local function ax_wake(wake, n)
  if n <= 0 then
    return
  end
  local tokens = {}
  for i = 1, math.min(n, 64) do
    tokens[i] = '1'
  end
  redis.call('LPUSH', wake, unpack(tokens))
  redis.call('LTRIM', wake, 0, 255)
end

-- The hash tag part of the queue's keys (`{PREFIX:q:QUEUE}`), from its queued set's name.
-- Keys named by a message (a concurrency key's slots and list of gated messages) are built from it
-- inside the script, so they are in the script's slot although no caller could declare
-- them before the message was popped.
local function ax_tag(queued)
  return string.sub(queued, 1, -8)
end

-- Frees the slots a taken execution took: the queue's (`max_running`) and its concurrency
-- key's. A freed key slot moves the first execution gated on that key back to the queued
-- set, at its place; a freed queue slot wakes a consumer when messages wait.
-- Whether the queue's running set exists is asked once per script call (`ax_running`): only
-- a take adds to it, and no script that frees takes, so the answer holds for the call, and
-- a queue without `max_running` (no set) pays one command per call, not one per execution.
local ax_running = {}
local function ax_free(queued, order, wake, id, key)
  local tag = ax_tag(queued)
  local running = tag .. ':running'
  if ax_running[running] == nil then
    ax_running[running] = redis.call('EXISTS', running) == 1
  end
  if ax_running[running] and redis.call('ZREM', running, id) == 1
    and redis.call('ZCARD', queued) > 0 then
    ax_wake(wake, 1)
  end
  if key and key ~= '' and redis.call('ZREM', tag .. ':slots:' .. key, id) == 1 then
    local m = redis.call('LPOP', tag .. ':held:' .. key)
    if redis.call('EXISTS', tag .. ':held:' .. key) == 0 then
      redis.call('SREM', tag .. ':heldkeys', key)
    end
    if m then
      local pid = string.match(m, '"execution_id":"([^"]+)"')
      local score = pid and redis.call('HGET', order, pid)
      redis.call('ZADD', queued, score or '0', m)
      ax_wake(wake, 1)
    end
  end
end


-- Messages addressed to one worker (a broadcast fire's pieces, see `take.lua`): the worker's
-- list and its wake list, named as `keys.rs` names them (`Keys::addressed`,
-- `Keys::worker_wake`). Built here only where the worker is known from a message the script
-- decoded (a due retry); callers declare them otherwise.
local function ax_addressed(tag, worker)
  return tag .. ':addressed:' .. worker
end

local function ax_worker_wake(tag, worker)
  return tag .. ':wake:' .. worker
end

-- The worker a decoded message is addressed to, or nil.
local function ax_target(msg)
  if type(msg) == 'table' and type(msg.target_worker) == 'string' and msg.target_worker ~= '' then
    return msg.target_worker
  end
  return nil
end

-- Puts an addressed message where it waits: at the end of its worker's list (taken before
-- the shared queue, first in first out) with a wake token for that worker alone, while the
-- worker is registered (`workers` zset); else in the queue's orphaned list, where a live
-- worker ends it failed (its worker is gone: no other worker may run it, each runs its own
-- copy). Returns true when it went to the worker.
local function ax_address(tag, workers, orphaned, worker, member)
  if redis.call('ZSCORE', workers, worker) then
    redis.call('RPUSH', ax_addressed(tag, worker), member)
    ax_wake(ax_worker_wake(tag, worker), 1)
    return true
  end
  redis.call('RPUSH', orphaned, member)
  return false
end
