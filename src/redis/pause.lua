-- Pauses the slot for `ARGV[1]` µs from Redis's now.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local till = now + tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', KEYS[1], 'pause')) or 0
if till > cur then
  redis.call('HSET', KEYS[1], 'pause', string.format('%.0f', till))
end
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', tonumber(ARGV[1]) / 1000 + tonumber(ARGV[2])))
return 1
