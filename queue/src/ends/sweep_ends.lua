-- Takes (or renews) the sweep of a queue's end log for one sweeper and returns the records
-- older than a given age by this server's clock, oldest first. Another sweeper's live claim
-- returns nothing, so one worker of the queue relays old records at a time.
-- KEYS: 1 end log stream, 2 sweeper key
-- ARGV: 1 sweeper id, 2 claim ttl ms, 3 age ms, 4 most records
-- Returns a flat list of (record id, record JSON).
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] then
  return {}
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cutoff = now_ms - tonumber(ARGV[3])
if cutoff <= 0 then
  return {}
end
local out = {}
for _, entry in ipairs(redis.call('XRANGE', KEYS[1], '-', tostring(cutoff), 'COUNT', ARGV[4])) do
  local fields = entry[2]
  local json = ''
  for i = 1, #fields, 2 do
    if fields[i] == 'r' then
      json = fields[i + 1]
    end
  end
  out[#out + 1] = entry[1]
  out[#out + 1] = json
end
return out
