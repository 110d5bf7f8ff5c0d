-- leave: end a replica's lease now and mark it as gone; the registry
-- remembers it until heartbeat forgets it (memstore's Leave). A replica
-- whose lease has ended is left as it is.
--
-- KEYS[1]  the service's registry (heartbeat.lua)
-- KEYS[2]  the registry's other half (heartbeat.lua); g:<id> marks a
--          replica that left by leave, with the lease end it left at
-- ARGV     replica
-- Reply    now

local now = clock()
local expires = redis.call('ZSCORE', KEYS[1], ARGV[1])
if expires and tonumber(expires) > now then
  redis.call('ZADD', KEYS[1], fmt(now), ARGV[1])
  redis.call('HSET', KEYS[2], 'g:' .. ARGV[1], fmt(now))
end
return now
