-- Settles finished messages: removes them from the processing list and the monitor set, and
-- clears each task's active marker when it still names this execution (the overlap check of
-- the next fire then lets it through). A message settled with an end record has it appended
-- to the queue's end log in the same step, so its end cannot be lost once it is settled.
-- Each settled execution frees its slots (queue and concurrency key, `order.lua`).
-- KEYS: 1 processing list, 2 monitor zset, 3 order hash, 4 queued zset, 5 wake list,
--       6 end log stream, then one active-marker key per message
-- ARGV: quadruples of (message JSON as taken, execution id, concurrency key or '',
--       end record JSON or '')
-- Returns one string per message: '0' if it was no longer taken (the reaper gave it back),
-- '1' if it was settled without an end record, else the end log id of its record.
-- Whether a message's execution may hold its task's active marker: only `forbid` and
-- `replace` set one. The text is searched, not decoded (one pass over each `"overlap":"`
-- found): a message without the field (an earlier version's) or with either mode anywhere
-- in it is checked, so a payload that happens to hold such text costs a `GET` and never
-- skips one that is needed.
local function ax_may_hold_marker(m)
  local from, seen = 1, false
  while true do
    local _, last = string.find(m, '"overlap":"', from, true)
    if not last then
      return not seen
    end
    local mode = string.sub(m, last + 1, last + 1)
    if mode == 'f' or mode == 'r' then
      return true
    end
    seen, from = true, last + 1
  end
end
local out = {}
-- The settled ids leave the monitor set and the order hash in one command each, after the
-- loop: nothing in it reads them (a freed slot reads the order of a gated execution, never
-- of a settled one).
local settled = {}
for i = 1, #ARGV, 4 do
  local n = (i + 3) / 4
  if redis.call('LREM', KEYS[1], -1, ARGV[i]) > 0 then
    settled[#settled + 1] = ARGV[i + 1]
    ax_free(KEYS[4], KEYS[3], KEYS[5], ARGV[i + 1], ARGV[i + 2])
    local active = KEYS[6 + n]
    if ax_may_hold_marker(ARGV[i]) and redis.call('GET', active) == ARGV[i + 1] then
      redis.call('DEL', active)
    end
    if ARGV[i + 3] ~= '' then
      out[n] = redis.call('XADD', KEYS[6], '*', 'r', ARGV[i + 3])
    else
      out[n] = '1'
    end
  else
    out[n] = '0'
  end
end
ax_all('ZREM', KEYS[2], settled)
ax_all('HDEL', KEYS[3], settled)
return out
