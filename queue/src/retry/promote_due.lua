-- Moves delayed messages that are due to the queued set, up to a batch size. A retry waits
-- as a new enqueue of its priority: it gets the next instant of the queue's clock.
-- A retry of an addressed message (a broadcast fire's piece) goes back to its worker's own
-- list, or to the orphaned list when that worker is gone (`ax_address`).
-- KEYS: 1 delayed zset, 2 queued zset, 3 monitor zset, 4 order hash, 5 clock, 6 wake list,
--       7 workers zset, 8 orphaned list
-- ARGV: 1 now ms, 2 batch size, 3 aging step µs, 4 default priority
-- Returns how many moved.
local step, default = tonumber(ARGV[3]), tonumber(ARGV[4])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #due == 0 then
  return 0
end
local clock = ax_clock(KEYS[5])
local tag = ax_tag(KEYS[2])
local shared = 0
for _, m in ipairs(due) do
  redis.call('ZREM', KEYS[1], m)
  local ok, msg = pcall(cjson.decode, m)
  local decoded = ok and type(msg) == 'table' and type(msg.execution_id) == 'string'
  local priority = default
  local id = nil
  if decoded then
    priority = ax_priority(msg, default)
    id = msg.execution_id
    redis.call('ZADD', KEYS[3], ARGV[1], id)
  end
  local target = decoded and ax_target(msg)
  if target then
    ax_address(tag, KEYS[7], KEYS[8], target, m)
  else
    ax_push(KEYS[2], KEYS[4], m, id, ax_score(ax_tick(clock), priority, step))
    shared = shared + 1
  end
end
ax_clock_close(clock)
ax_wake(KEYS[6], shared)
return #due
