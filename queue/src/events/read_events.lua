-- Reads worker events for the leader through the stream's consumer group: new entries, or
-- entries read before and never acknowledged (their leader died before writing what they
-- changed). The group is created when a read finds it missing (first use, or a Redis that
-- lost its data), with the stream, from the stream's start; events left in the list that
-- carried them before the stream are moved in then (oldest first, at the stream's end, the
-- only place it grows), so an upgrade loses none. A normal read is the read alone.
-- KEYS: 1 event stream, 2 the former event list
-- ARGV: 1 group, 2 consumer, 3 count, 4 min idle ms of entries to claim ('' for new
--       entries), 5 claim cursor
-- Returns {next claim cursor ('0-0' when done, '' for new entries), then per entry its id
-- and its event JSON ('' when the entry is gone or has no event)}.
local function read()
  if ARGV[4] == '' then
    local r = redis.pcall('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
      'STREAMS', KEYS[1], '>')
    if type(r) == 'table' and r.err then
      return r
    end
    return {'', r and r[1][2] or {}}
  end
  return redis.pcall('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[4], ARGV[5],
    'COUNT', ARGV[3])
end
local r = read()
if type(r) == 'table' and r.err and string.find(r.err, 'NOGROUP') then
  -- First use (or a Redis that lost its data): the group, and what the list still holds.
  redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
  if redis.call('EXISTS', KEYS[2]) == 1 then
    -- Pushed on the left: the oldest is last.
    local old = redis.call('LRANGE', KEYS[2], 0, -1)
    for i = #old, 1, -1 do
      redis.call('XADD', KEYS[1], '*', 'e', old[i])
    end
    redis.call('DEL', KEYS[2])
  end
  r = read()
end
if type(r) == 'table' and r.err then
  return r
end
local out = {r[1]}
local entries = r[2]
for _, e in ipairs(entries) do
  local json = ''
  local fields = e[2]
  if fields then
    for i = 1, #fields, 2 do
      if fields[i] == 'e' then
        json = fields[i + 1]
      end
    end
  end
  out[#out + 1] = e[1]
  out[#out + 1] = json
end
return out
