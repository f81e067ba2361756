-- Gives a held message back to the queued set at its place (shutdown, unfinished work): the
-- order score kept for its execution (see `order.lua`).
-- KEYS: 1 processing list, 2 queued zset, 3 order hash, 4 clock, 5 wake list
-- ARGV: 1 message JSON as taken, 2 aging step µs, 3 default priority, 4 execution id,
--       5 concurrency key or '' (its slots are freed)
-- Returns 1, or 0 when the message was no longer held.
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
local clock = ax_clock(KEYS[4])
ax_restore(KEYS[2], KEYS[3], clock, ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
ax_clock_close(clock)
ax_wake(KEYS[5], 1)
ax_free(KEYS[2], KEYS[3], KEYS[5], ARGV[4], ARGV[5])
return 1
