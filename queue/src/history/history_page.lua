-- One page of the execution history stream, filtered inside Redis so a page costs one round
-- trip and only matching entries cross the network. The scan is bounded: a rare filter stops
-- after `budget` entries and answers with the cursor to go on from, so no request reads the
-- whole stream in one go (the script blocks Redis while it runs).
-- KEYS: 1 execution history stream
-- ARGV: 1 direction: `rev` (newest first, XREVRANGE) or `fwd` (oldest first, XRANGE)
--       2 the bound to start from (an id, `(id` exclusive, `+` or `-`)
--       3 the bound to stop at
--       4 most entries returned, 5 most entries scanned
--       6 namespace or '', 7 task id or '', 8 outcomes as `,a,b,` or ''
--       9 execution id or '': only its entries; with `fwd` the scan stops at its final
--         attempt and jumps ahead to each retry's due time (the next attempt cannot end
--         before it), less a second for clocks
-- Returns {cursor, id, namespace, task, entry JSON, ...}; cursor is the id of the last entry
-- scanned ('' when the range is exhausted or, with an execution id, its story is complete).
local key, dir = KEYS[1], ARGV[1]
local from, to = ARGV[2], ARGV[3]
local limit, budget = tonumber(ARGV[4]), tonumber(ARGV[5])
local ns, task, outs, exec = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local CHUNK = 200
local found = {}
local matched = 0
local last = ''
local exhausted = false
local complete = false
while budget > 0 and matched < limit and not exhausted and not complete do
  local n = math.min(budget, CHUNK)
  local page
  if dir == 'rev' then
    page = redis.call('XREVRANGE', key, from, to, 'COUNT', n)
  else
    page = redis.call('XRANGE', key, from, to, 'COUNT', n)
  end
  local jump = nil
  local consumed = 0
  for _, item in ipairs(page) do
    consumed = consumed + 1
    budget = budget - 1
    last = item[1]
    local f = {}
    local kv = item[2]
    for j = 1, #kv, 2 do
      f[kv[j]] = kv[j + 1]
    end
    local e = f['e'] or ''
    local ok = (ns == '' or f['ns'] == ns)
      and (task == '' or f['task'] == task)
      and (outs == '' or string.find(outs, ',' .. (f['out'] or '') .. ',', 1, true) ~= nil)
      and (exec == '' or string.find(e, exec, 1, true) ~= nil)
    if ok then
      found[#found + 1] = item[1]
      found[#found + 1] = f['ns'] or ''
      found[#found + 1] = f['task'] or ''
      found[#found + 1] = e
      matched = matched + 1
      if exec ~= '' and dir == 'fwd' then
        if f['out'] ~= 'retrying' and f['out'] ~= 'released' then
          complete = true
        else
          local due = tonumber(cjson.decode(e)['retry_at'] or 0) - 1000
          if due > tonumber(string.match(last, '^(%d+)')) then
            jump = tostring(due) .. '-0'
          end
        end
      end
    end
    if matched >= limit or complete or jump then
      break
    end
  end
  if not jump and consumed == #page and #page < n then
    exhausted = true
  end
  if jump then
    from = jump
  else
    from = '(' .. last
  end
end
if exhausted or complete then
  last = ''
end
local reply = { last }
for _, v in ipairs(found) do
  reply[#reply + 1] = v
end
return reply
