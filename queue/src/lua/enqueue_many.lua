-- Idempotent, fenced enqueue of many messages of one queue in one call (bulk enqueue).
-- KEYS: 1 ready list, 2 monitor zset, 3 fence, 4.. one dedupe key per message
-- ARGV: 1 dedupe TTL ms, then per message 5 values: message JSON, execution id,
--       enqueued_at ms, fencing token, '1' to push at the taking end
-- Returns {code per message..., newest token}; codes as in enqueue.lua.
local newest = tonumber(redis.call('GET', KEYS[3]) or '0')
local out = {}
local count = #KEYS - 3
for i = 1, count do
  local base = 1 + (i - 1) * 5
  local token = tonumber(ARGV[base + 4])
  if token < newest then
    out[i] = -1
  else
    if token > newest then
      redis.call('SET', KEYS[3], ARGV[base + 4])
      newest = token
    end
    if not redis.call('SET', KEYS[3 + i], ARGV[base + 2], 'NX', 'PX', ARGV[1]) then
      out[i] = 0
    else
      if ARGV[base + 5] == '1' then
        redis.call('RPUSH', KEYS[1], ARGV[base + 1])
      else
        redis.call('LPUSH', KEYS[1], ARGV[base + 1])
      end
      redis.call('ZADD', KEYS[2], ARGV[base + 3], ARGV[base + 2])
      out[i] = 1
    end
  end
end
out[count + 1] = tostring(newest)
return out
