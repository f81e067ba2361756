-- Gives a held message back to the taking end of the ready list (shutdown, unfinished work).
-- KEYS: 1 processing list, 2 ready list
-- ARGV: 1 message JSON as taken
-- Returns 1, or 0 when the message was no longer held.
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
redis.call('RPUSH', KEYS[2], ARGV[1])
return 1
