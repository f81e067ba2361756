-- Moves delayed messages that are due to the ready list, up to a batch size.
-- KEYS: 1 delayed zset, 2 ready list, 3 monitor zset
-- ARGV: 1 now ms, 2 batch size
-- Returns how many moved.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(due) do
  redis.call('ZREM', KEYS[1], m)
  redis.call('LPUSH', KEYS[2], m)
  local ok, msg = pcall(cjson.decode, m)
  if ok and type(msg) == 'table' and msg.execution_id then
    redis.call('ZADD', KEYS[3], ARGV[1], msg.execution_id)
  end
end
return #due
