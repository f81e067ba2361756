-- Gives a taken message back to the queued set at its place (shutdown, unfinished work): the
-- order score kept for its execution (see `order.lua`). A message addressed to this worker
-- (a broadcast fire's piece) goes back to the front of its own list instead (it runs here
-- after a restart under the same id, or ends failed once the worker deregisters); one
-- addressed to another worker, to the orphaned list.
-- KEYS: 1 processing list, 2 queued zset, 3 order hash, 4 clock, 5 wake list, 6 the worker's
--       addressed list, 7 orphaned list, 8 the worker's own wake list
-- ARGV: 1 message JSON as taken, 2 aging step µs, 3 default priority, 4 execution id,
--       5 concurrency key or '' (its slots are freed), 6 worker id
-- Returns 1, or 0 when the message was no longer taken.
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
local ok, msg = pcall(cjson.decode, ARGV[1])
local target = ok and ax_target(msg)
if target == ARGV[6] then
  redis.call('LPUSH', KEYS[6], ARGV[1])
  ax_wake(KEYS[8], 1)
elseif target then
  redis.call('RPUSH', KEYS[7], ARGV[1])
else
  local clock = ax_clock(KEYS[4])
  ax_restore(KEYS[2], KEYS[3], clock, ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
  ax_clock_close(clock)
  ax_wake(KEYS[5], 1)
end
ax_free(KEYS[2], KEYS[3], KEYS[5], ARGV[4], ARGV[5])
return 1
