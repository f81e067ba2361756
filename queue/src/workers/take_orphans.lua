-- Moves up to N addressed messages whose worker is gone (see `reap.lua`) from the queue's
-- orphaned list into this worker's processing list, so that it ends each failed as an
-- attempt of that worker (dead letter, history, event for the leader) and a crash midway
-- loses none: the reaper moves what this worker had taken to the orphaned list.
-- KEYS: 1 orphaned list, 2 processing list
-- ARGV: 1 max count
-- Returns the moved messages.
local moved = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not moved then
  return {}
end
redis.call('LPUSH', KEYS[2], unpack(moved))
return moved
