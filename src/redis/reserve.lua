-- Reserves a dispatch: `{1, in_flight, gap_us, now_us, samples}` when granted
-- (`gap_us`: since the fleet's previous dispatch of the slot, -1 if unknown
-- or a pause lay between; `samples`: what the other workers' policies took
-- since this worker (`ARGV[6]`) last heard, oldest first, at most 64 and
-- none older than a lease, each `at_us:rest` with `at_us` on Redis's
-- clock), `{0, wait_us, -1, now_us, {}}` when the schedule or a pause holds
-- it back, `{0, -1, -1, now_us, {}}` when the limit is reached. Where this
-- worker last heard is its field `c:WORKER` (a stream id), dropped when
-- older than a lease.
-- The fleet's delay and limit are the most careful of the workers' fresh
-- words (the longest delay, the lowest limit); words older than a lease
-- (`ARGV[3]`) are dropped.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%.0f', now))
local h = redis.call('HGETALL', KEYS[1])
local next, pause, last, delay, limit, cursor = 0, 0, -1, nil, nil, nil
local fresh = now - tonumber(ARGV[3])
local fresh_ms = math.floor(fresh / 1000)
local mine = 'c:' .. ARGV[6]
for i = 1, #h, 2 do
  local k, v = h[i], h[i + 1]
  if k == 'next' then
    next = tonumber(v)
  elseif k == 'pause' then
    pause = tonumber(v)
  elseif k == 'last' then
    last = tonumber(v)
  elseif string.sub(k, 1, 2) == 'w:' then
    local d, l, at = string.match(v, '^([^:]+):([^:]+):([^:]+)$')
    if at and tonumber(at) >= fresh then
      d, l = tonumber(d), tonumber(l)
      if delay == nil or d > delay then delay = d end
      if limit == nil or l < limit then limit = l end
    else
      redis.call('HDEL', KEYS[1], k)
    end
  elseif string.sub(k, 1, 2) == 'c:' then
    local ms, seq = string.match(v, '^(%d+)-(%d+)$')
    if ms and tonumber(ms) >= fresh_ms then
      if k == mine then cursor = {ms, tonumber(seq)} end
    else
      redis.call('HDEL', KEYS[1], k)
    end
  end
end
delay = delay or tonumber(ARGV[1])
limit = limit or tonumber(ARGV[2])
local ready = math.max(next, pause)
local now_s = string.format('%.0f', now)
if ready > now then
  return {0, string.format('%.0f', math.ceil(ready - now)), '-1', now_s, {}}
end
if redis.call('ZCARD', KEYS[2]) >= limit then
  return {0, '-1', '-1', now_s, {}}
end
redis.call('ZADD', KEYS[2], string.format('%.0f', now + tonumber(ARGV[3])), ARGV[4])
local gap = -1
if last >= 0 and not (pause > last and pause <= now) then
  gap = now - last
end
redis.call('HSET', KEYS[1], 'next', string.format('%.0f', now + delay),
  'last', string.format('%.0f', now))
-- The newest samples after this worker's cursor (an exclusive start as an
-- inclusive one: XRANGE's `(` needs Redis 6.2).
local start = string.format('%.0f', fresh_ms) .. '-0'
if cursor then
  start = cursor[1] .. '-' .. string.format('%.0f', cursor[2] + 1)
end
local samples = {}
local entries = redis.call('XREVRANGE', KEYS[3], '+', start, 'COUNT', 64)
if #entries > 0 then
  redis.call('HSET', KEYS[1], mine, entries[1][1])
  for i = #entries, 1, -1 do
    local f = entries[i][2]
    if f[2] ~= ARGV[6] then
      samples[#samples + 1] = f[4]
    end
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return {1, tostring(redis.call('ZCARD', KEYS[2])), string.format('%.0f', gap), now_s, samples}
