-- heartbeat: renew a replica's lease in the registry, forget the replicas
-- whose lease ended long ago, and list the others (memstore's Heartbeat).
--
-- KEYS[1]  the service's registry: a sorted set of replica ids scored by
--          lease expiry (µs)
-- KEYS[2]  the registry's other half, a hash (same hash tag):
--            j:<id>  when replica id first joined, µs
--            (a replica back after its lease ended joins again; its
--            earlier incarnation stays a member, id <id>\0<joined>, so
--            a window that began while it was live keeps counting it)
--            g:<id>  the lease end at which replica id left by leave.lua
--                    (Member.Left); it marks only the incarnation whose
--                    lease ends then, not one that joined again (as a
--                    replica of a version that does not move the mark
--                    does)
--            d:<id>  the shrink replica id declared (declare.lua,
--                    Declaration), "at n until"; dropped when it joins
--                    again
--            v:<id>  the version of replica id's share protocol, set by
--                    every heartbeat and kept by an earlier incarnation:
--                    "3" (this script) shrinks a sliding window's and a
--                    token bucket's shares by its declared shrink too;
--                    "2" counts the static shares of a sliding window
--                    and of a token bucket of any burst
--                    (bucket_epoch.go); "1" those of a sliding window and
--                    of a token bucket whose burst is its rate; an
--                    earlier version sets none. Member.Ahead is "2" or
--                    later, Member.DeclaresAhead "3" or later.
--            since   the latest lease end the registry forgot, µs
--                    (absent: 0)
-- ARGV     replica, lease(µs)
-- Reply    now, live replicas (at least 1), since, when replica joined,
--          then per member: joined, expires, flags (1: one of replica's
--          own incarnations; 2: it left by leave.lua; 4: its version is
--          "2" or later; 8: "3" or later), id, its declared shrink ("at n until"; "":
--          none)
--
-- The registry remembers a replica RETAIN after its lease ends, at most
-- MAXMEMBERS of them: it lists every replica whose lease ended after
-- since. Neither key expires: since must outlive the members it stands
-- for, and both stay small.

local RETAIN = 90000000000 -- 25 h, µs
local MAXMEMBERS = 1024

local reg, meta = KEYS[1], KEYS[2]
local replica = ARGV[1]
local now = clock()

-- A replica joins when the registry does not list it as live: new, or
-- back after its lease ended (an outage, a pause), when the others may
-- have stopped counting it.
local joined = 'j:' .. replica
local score = redis.call('ZSCORE', reg, replica)
if score and tonumber(score) > now then
  redis.call('HSETNX', meta, joined, fmt(now))
else
  local was = score and redis.call('HGET', meta, joined)
  if was then
    local past = replica .. '\0' .. was
    redis.call('ZADD', reg, score, past)
    redis.call('HSET', meta, 'j:' .. past, was)
    local v = redis.call('HGET', meta, 'v:' .. replica)
    if v then
      redis.call('HSET', meta, 'v:' .. past, v)
    end
    local left = redis.call('HGET', meta, 'g:' .. replica)
    if left then
      redis.call('HDEL', meta, 'g:' .. replica)
      redis.call('HSET', meta, 'g:' .. past, left)
    end
  end
  redis.call('HSET', meta, joined, fmt(now))
  redis.call('HDEL', meta, 'd:' .. replica) -- a shrink is of the incarnation that declared it
end
redis.call('HSET', meta, 'v:' .. replica, '3')
local mine = tonumber(redis.call('HGET', meta, joined))
redis.call('ZADD', reg, fmt(now + tonumber(ARGV[2])), replica)
redis.call('PERSIST', reg) -- earlier versions gave the registry an expiry

-- forget: the oldest lease ends go while they ended RETAIN ago or more,
-- or while the registry holds more than MAXMEMBERS; since moves to the
-- latest one dropped.
local since = tonumber(redis.call('HGET', meta, 'since') or '0')
local old = redis.call('ZCOUNT', reg, '-inf', fmt(now - RETAIN))
local drop = math.max(old, redis.call('ZCARD', reg) - MAXMEMBERS)
if drop > 0 then
  local gone = redis.call('ZRANGE', reg, 0, drop - 1, 'WITHSCORES')
  local fields = {}
  for i = 1, #gone, 2 do
    fields[#fields + 1] = 'j:' .. gone[i]
    fields[#fields + 1] = 'g:' .. gone[i]
    fields[#fields + 1] = 'd:' .. gone[i]
    fields[#fields + 1] = 'v:' .. gone[i]
  end
  since = math.max(since, tonumber(gone[#gone]))
  redis.call('ZREMRANGEBYRANK', reg, 0, drop - 1)
  redis.call('HDEL', meta, unpack(fields))
  redis.call('HSET', meta, 'since', fmt(since))
end

local live = redis.call('ZCOUNT', reg, '(' .. fmt(now), '+inf')
local out = {now, math.max(live, 1), since, mine}
local members = redis.call('ZRANGE', reg, 0, -1, 'WITHSCORES')
if #members > 0 then
  local fields = {}
  for i = 1, #members, 2 do
    fields[#fields + 1] = 'j:' .. members[i]
    fields[#fields + 1] = 'g:' .. members[i]
    fields[#fields + 1] = 'd:' .. members[i]
    fields[#fields + 1] = 'v:' .. members[i]
  end
  local meta_of = redis.call('HMGET', meta, unpack(fields))
  local own = replica .. '\0'
  for i = 1, #members / 2 do
    local id = members[2 * i - 1]
    local joins = meta_of[4 * i - 3]
    out[#out + 1] = (joins and tonumber(joins)) or 0
    out[#out + 1] = tonumber(members[2 * i])
    local flags = (id == replica or string.sub(id, 1, #own) == own) and 1 or 0
    local left = meta_of[4 * i - 2]
    if left and tonumber(left) == tonumber(members[2 * i]) then flags = flags + 2 end
    local v = tonumber(meta_of[4 * i] or '0') or 0
    if v >= 2 then flags = flags + 4 end
    if v >= 3 then flags = flags + 8 end
    out[#out + 1] = flags
    out[#out + 1] = id
    out[#out + 1] = meta_of[4 * i - 1] or ''
  end
end
return out
