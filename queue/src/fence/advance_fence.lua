-- Raises a queue's fence to a token (never lowers it), for the etcd cluster that issued it.
-- KEYS: 1 fence, 2 fence owner (the etcd cluster id the tokens come from)
-- ARGV: 1 token, 2 cluster id
-- Returns {newest token after the call, owner}. A fence owned by another cluster is left
-- as it is: its tokens are revisions of another etcd and mean nothing next to ours.
local owner = redis.call('GET', KEYS[2])
local newest = tonumber(redis.call('GET', KEYS[1]) or '0')
if owner and owner ~= ARGV[2] then
  return {tostring(newest), owner}
end
if not owner then
  redis.call('SET', KEYS[2], ARGV[2])
end
local token = tonumber(ARGV[1])
if token > newest then
  redis.call('SET', KEYS[1], ARGV[1])
  newest = token
end
return {tostring(newest), ARGV[2]}
