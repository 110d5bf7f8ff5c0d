-- slots: one replica's sync of one concurrency key, ConcRecord.Sync in
-- package limiter, applied at Redis TIME.
--
-- KEYS[1]  the key's hash: r:<id> → replica id's slots, "units expires(µs)"
-- ARGV     replica, max, held, want, lease(µs)
-- Reply    now, granted, others

local key = KEYS[1]
local mine = 'r:' .. ARGV[1]
local cap, held, want, lease = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = clock()

local flat = redis.call('HGETALL', key)
local others, last = 0, 0
for i = 1, #flat, 2 do
  local f = flat[i]
  local u, exp = parse_reservation(flat[i + 1])
  if exp <= now then
    redis.call('HDEL', key, f)
  elseif f ~= mine then
    others = satadd(others, u)
    last = math.max(last, exp)
  end
end

local granted = math.max(held, math.min(satadd(held, want), satsub(cap, others)))
if granted > 0 then
  redis.call('HSET', key, mine, fmt(granted) .. ' ' .. fmt(now + lease))
  last = math.max(last, now + lease)
else
  redis.call('HDEL', key, mine)
end
if last > 0 then redis.call('PEXPIREAT', key, ceilms(last)) end
return {now, granted, others}
