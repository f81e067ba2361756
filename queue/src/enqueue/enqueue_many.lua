-- Idempotent, fenced enqueue of messages of one queue in one call, with the overlap check: the
-- one enqueue path (a single message is a batch of one).
-- KEYS: 1 queued zset, 2 monitor zset, 3 fence (of the messages' scheduling shard: the
--       messages of one call share it), 4 order hash, 5 clock, 6 wake list,
--       7 workers zset, 8 orphaned list, then per message 2 keys: its dedupe key (the task's
--       fire mark for a scheduled fire, else the identity's marker), the task's active marker
-- ARGV: 1 dedupe TTL ms, 2 aging step µs, then per message 9 values: message JSON,
--       execution id, enqueued_at ms, fencing token, priority, overlap mode ('a', 'f', 'r'),
--       marker TTL ms, fire instant ms for a scheduled fire ('' for an identity), the worker
--       it is addressed to ('' for any)
-- Each message enqueued gets the next instant of the queue's clock and its place by
-- priority with aging (`order.lua`); an addressed one goes to its worker's list instead
-- (`ax_address`).
-- A scheduled fire is a duplicate when its instant is at or before the task's fire mark (the
-- newest instant enqueued; a task's fires come in time order), an identity when its marker
-- exists. Both expire after the dedupe TTL, refreshed by each enqueue.
-- Returns {code per message..., newest token}; codes: 1 enqueued, 0 duplicate, -1 refused
-- (token older than the newest), 2 held (mode 'f' and the task's previous execution is still
-- active: nothing recorded, so the fire can be enqueued later). Mode 'a' leaves the marker
-- alone; 'f' and 'r' point it at the new execution (for 'r' the running one sees it move).
local newest = tonumber(redis.call('GET', KEYS[3]) or '0')
local out = {}
local count = (#KEYS - 8) / 2
local tag = ax_tag(KEYS[1])
local step = tonumber(ARGV[2])
local clock = ax_clock(KEYS[5])
local pushed = 0
local queued, order, monitor = {}, {}, {}
for i = 1, count do
  local base = 2 + (i - 1) * 9
  local dedupe = KEYS[7 + 2 * i]
  local active = KEYS[8 + 2 * i]
  local target = ARGV[base + 9]
  local token = tonumber(ARGV[base + 4])
  local mode = ARGV[base + 6]
  local fire = ARGV[base + 8]
  if token < newest then
    out[i] = -1
  else
    if token > newest then
      redis.call('SET', KEYS[3], ARGV[base + 4])
      newest = token
    end
    local seen, marked
    if fire == '' then
      seen = redis.call('EXISTS', dedupe) == 1
    elseif mode == 'f' then
      -- The fire may be held: its mark is set only once it is enqueued.
      local mark = redis.call('GET', dedupe)
      seen = mark and tonumber(mark) >= tonumber(fire)
    else
      -- Check and set in one command; a duplicate puts the newer mark back.
      local mark = redis.call('SET', dedupe, fire, 'PX', ARGV[1], 'GET')
      seen = mark and tonumber(mark) >= tonumber(fire)
      if seen then
        redis.call('SET', dedupe, mark, 'PX', ARGV[1])
      end
      marked = true
    end
    if seen then
      out[i] = 0
    elseif mode == 'f' and redis.call('EXISTS', active) == 1 then
      out[i] = 2
    else
      if fire == '' then
        redis.call('SET', dedupe, ARGV[base + 2], 'PX', ARGV[1])
      elseif not marked then
        redis.call('SET', dedupe, fire, 'PX', ARGV[1])
      end
      if mode ~= 'a' then
        redis.call('SET', active, ARGV[base + 2], 'PX', ARGV[base + 7])
      end
      if target ~= '' then
        ax_address(tag, KEYS[7], KEYS[8], target, ARGV[base + 1])
      else
        local score = ax_score(ax_tick(clock), tonumber(ARGV[base + 5]), step)
        queued[#queued + 1] = score
        queued[#queued + 1] = ARGV[base + 1]
        order[#order + 1] = ARGV[base + 2]
        order[#order + 1] = score
        pushed = pushed + 1
      end
      monitor[#monitor + 1] = ARGV[base + 3]
      monitor[#monitor + 1] = ARGV[base + 2]
      out[i] = 1
    end
  end
end
-- The call's messages go into the queued set, the order hash and the monitor set with one
-- command each (what `ax_push` does per message), not three per message: nothing in the loop
-- reads them.
ax_all('ZADD', KEYS[1], queued)
ax_all('HSET', KEYS[4], order)
ax_all('ZADD', KEYS[2], monitor)
ax_clock_close(clock)
ax_wake(KEYS[6], pushed)
out[count + 1] = tostring(newest)
return out
