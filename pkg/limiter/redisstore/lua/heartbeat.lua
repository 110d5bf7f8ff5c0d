-- heartbeat: renew a replica's lease in the registry and count the live
-- replicas.
--
-- KEYS[1]  the service's registry: a sorted set of replica ids scored by
--          lease expiry (µs)
-- ARGV     replica, lease(µs)
-- Reply    now, live replicas (at least 1)

local key = KEYS[1]
local now = clock()
redis.call('ZADD', key, fmt(now + tonumber(ARGV[2])), ARGV[1])
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
local n = redis.call('ZCARD', key)
if n > 0 then
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', key, ceilms(tonumber(last[2])))
end
return {now, math.max(n, 1)}
