-- Raises a queue's fence to a token (never lowers it).
-- KEYS: 1 fence
-- ARGV: 1 token
-- Returns the newest token after the call.
local token = tonumber(ARGV[1])
local newest = tonumber(redis.call('GET', KEYS[1]) or '0')
if token > newest then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return tostring(newest)
