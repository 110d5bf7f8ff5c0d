-- leave: end a replica's lease now; the registry remembers it until
-- heartbeat forgets it (memstore's Leave).
--
-- KEYS[1]  the service's registry (heartbeat.lua)
-- ARGV     replica
-- Reply    now

local now = clock()
local expires = redis.call('ZSCORE', KEYS[1], ARGV[1])
if expires and tonumber(expires) > now then
  redis.call('ZADD', KEYS[1], fmt(now), ARGV[1])
end
return now
