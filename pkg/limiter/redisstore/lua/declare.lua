-- declare: record the shrink of a live replica's static shares in the
-- registry (memstore's Declare), or withdraw it; a replica whose lease
-- has ended declares nothing (it joins again first, and a join drops
-- the shrinks of its earlier incarnation).
--
-- KEYS[1]  the service's registry (heartbeat.lua)
-- KEYS[2]  the registry's other half (heartbeat.lua); d:<id> holds
--          replica id's shrink, "at n until"
-- ARGV     replica, the shrink ("": withdraw it)
-- Reply    1 if recorded or withdrawn, 0 if the replica is not live

local now = clock()
local expires = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expires or tonumber(expires) <= now then
  return 0
end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[2], 'd:' .. ARGV[1])
else
  redis.call('HSET', KEYS[2], 'd:' .. ARGV[1], ARGV[2])
end
return 1
