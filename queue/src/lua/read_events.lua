-- Reads worker events for the leader through the stream's consumer group: new entries, or
-- entries read before and never acknowledged (their leader died before writing what they
-- changed). The group is created on first use, with the stream, from the stream's start;
-- events left in the list that carried them before the stream are moved in (oldest first,
-- at the stream's end, the only place it grows) before reading, so an upgrade loses none.
-- KEYS: 1 event stream, 2 the former event list
-- ARGV: 1 group, 2 consumer, 3 count, 4 min idle ms of entries to claim ('' for new
--       entries), 5 claim cursor
-- Returns {next claim cursor ('0-0' when done, '' for new entries), then per entry its id
-- and its event JSON ('' when the entry is gone or has no event)}.
local created = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
if type(created) == 'table' and created.err and not string.find(created.err, 'BUSYGROUP') then
  return created
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  -- Pushed on the left: the oldest is last.
  local old = redis.call('LRANGE', KEYS[2], 0, -1)
  for i = #old, 1, -1 do
    redis.call('XADD', KEYS[1], '*', 'e', old[i])
  end
  redis.call('DEL', KEYS[2])
end
local out = {}
local entries
if ARGV[4] == '' then
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
    'STREAMS', KEYS[1], '>')
  out[1] = ''
  entries = r and r[1][2] or {}
else
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[4], ARGV[5],
    'COUNT', ARGV[3])
  out[1] = r[1]
  entries = r[2]
end
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
