-- Renews a place still in use: its expiry moves to Redis's now plus the
-- lease (`ARGV[2]` µs). 1 if renewed, 0 if the place is gone (given back,
-- or expired already).
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZADD', KEYS[2], 'XX', string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
