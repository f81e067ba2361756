-- Adds executions to a queue's scheduled set, each to run once at its due instant, with
-- the idempotency check: the one path by which scheduled executions enter (a single one is a
-- batch of one).
-- KEYS: 1 scheduled zset (execution id -> due ms), 2 scheduled messages hash (execution id ->
--       message JSON), 3 scheduled wake list, then per execution 1 key: its dedupe marker
--       (any key of the queue's slot when it has no idempotency key: it is not read then)
-- ARGV: 1 dedupe TTL ms, then per execution 4 values: execution id, due ms, message JSON,
--       '1' when it has an idempotency key else ''
-- An execution whose idempotency key was used within the dedupe window is not added: its
-- answer is the id of the execution that used it. An id already scheduled is not added
-- twice (its answer is its own id, as for a duplicate).
-- When the batch moves the set's head earlier, one token goes to the wake list, so a
-- promoter waiting for the old head wakes and waits for the new one instead (one token is
-- enough: the list is cut to it).
-- Returns per execution: '' when added, else the id it duplicates.
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local earliest = head[2] and tonumber(head[2]) or nil
local out = {}
local count = (#ARGV - 1) / 4
local moved = false
for i = 1, count do
  local base = 1 + (i - 1) * 4
  local id, due, msg, keyed = ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4]
  local dup = nil
  if keyed == '1' then
    local prior = redis.call('SET', KEYS[3 + i], id, 'NX', 'PX', ARGV[1], 'GET')
    if prior then
      dup = prior
    end
  end
  if not dup and redis.call('HSETNX', KEYS[2], id, msg) == 0 then
    dup = id
  end
  if dup then
    out[i] = dup
  else
    redis.call('ZADD', KEYS[1], due, id)
    local at = tonumber(due)
    if not earliest or at < earliest then
      earliest = at
      moved = true
    end
    out[i] = ''
  end
end
if moved then
  redis.call('LPUSH', KEYS[3], '1')
  redis.call('LTRIM', KEYS[3], 0, 0)
end
return out
