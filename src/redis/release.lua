-- Gives a place back, with what the slot learned (if anything), under the
-- worker's own field, and announces it on the fleet's channel (`ARGV[6]`),
-- so that a worker waiting for a place asks again at once. The sample the
-- worker's policy took (`ARGV[7]`, taken `ARGV[8]` µs ago) joins the slot's
-- stream of samples (`KEYS[3]`, the last 64), stamped with Redis's clock,
-- once: a retried release whose place is already gone adds nothing.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[6], KEYS[1])
  if ARGV[7] ~= '' then
    local at = now - tonumber(ARGV[8])
    redis.call('XADD', KEYS[3], 'MAXLEN', '64', '*',
      'w', ARGV[5], 's', string.format('%.0f', at) .. ':' .. ARGV[7])
    redis.call('PEXPIRE', KEYS[3], ARGV[4])
  end
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'w:' .. ARGV[5],
    ARGV[2] .. ':' .. ARGV[3] .. ':' .. string.format('%.0f', now))
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return 1
