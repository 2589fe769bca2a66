-- Gives a place back, with what the slot learned (if anything), under the
-- worker's own field, and announces it on the fleet's channel (`ARGV[6]`),
-- so that a worker waiting for a place asks again at once.
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[6], KEYS[1])
end
if ARGV[2] ~= '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  redis.call('HSET', KEYS[1], 'w:' .. ARGV[5],
    ARGV[2] .. ':' .. ARGV[3] .. ':' .. string.format('%.0f', now))
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return 1
