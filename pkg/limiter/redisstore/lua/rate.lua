-- rate: one replica's sync of one or more rate keys, KeyRecord.Sync in
-- package limiter (the store's reference maths), all applied at one Redis
-- TIME, as the reference store applies a round.
--
-- KEYS[k]  the k-th key's hash:
--            x      the record's expiry, µs (memstore's keyEntry.expires)
--            w      window states, "epoch cur prev tat" per window,
--                   separated by ","
--            p      a sliding window's KeyRecord.Pressed, µs
--            r:<id> replica id's reservation, "units expires(µs)"
-- ARGV     replica, then per key in turn: algorithm (0 fixed, 1 sliding,
--          2 token bucket), n windows, then per window: period(µs) limit
--          capacity; unused, want, waiting, denied, share, replicas,
--          lease(µs), n hits, then per hit: at(µs) units (negative: a
--          refund).
-- Reply    per key: now, credit, others, pressed (1 or 0), then per
--          window: epoch cur prev tat.

local FIXED, SLIDING, BUCKET = 0, 1, 2

-- GRACE (µs): Redis drops a record this long after the instant the
-- reference store forgets it (its x), which the script checks itself. The
-- script reads each key against the TIME it took at its start, a batch of
-- keys (or the same key's earlier item) later; were Redis to drop the key
-- at x exactly, a record the script still counts as live could be gone by
-- the time it is read.
local GRACE = 1000000

local now = clock()
local replica = ARGV[1]
local mine = 'r:' .. replica
local alg -- the algorithm of the key being synced

-- WindowState.Roll
local function roll(s, p)
  local e = idiv(now, p)
  if e <= s.epoch then return end
  if e == s.epoch + 1 then
    s.prev = s.cur
  else
    s.prev = 0
  end
  s.cur = 0
  s.epoch = e
end

-- interval: the token bucket's emission interval, rounded up.
local function interval(w)
  return idiv(w.p + w.limit - 1, w.limit)
end

-- WindowState.weightedPrev: prev·left/p rounded up; s rolled to now.
local function weighted_prev(s, p)
  if s.prev == 0 then return 0 end
  local left = p - (now - s.epoch * p)
  local q, r = muldiv(s.prev, left, p)
  if r ~= 0 then q = q + 1 end
  return q
end

-- WindowState.Remaining; s rolled to now.
local function remaining(s, w)
  if alg == BUCKET then
    local t = interval(w)
    local room = now + w.cap * t - math.max(s.tat, now)
    if room <= 0 then return 0 end
    return idiv(room, t)
  elseif alg == SLIDING then
    return satsub(w.limit, s.cur + weighted_prev(s, w.p))
  end
  return satsub(w.limit, s.cur)
end

-- WindowState.ChargeAt
local function charge_at(s, w, at, n)
  if at > now then at = now end
  if alg == BUCKET then
    s.tat = math.min(math.max(s.tat, at) + n * interval(w), MAXEXACT)
    return
  end
  roll(s, w.p)
  local e = idiv(at, w.p)
  if e == s.epoch then
    s.cur = satadd(s.cur, n)
  elseif e == s.epoch - 1 then
    s.prev = satadd(s.prev, n)
  end
end

-- WindowState.Refund
local function refund(s, w, n)
  if alg == BUCKET then
    s.tat = math.max(s.tat - n * interval(w), now)
    return
  end
  roll(s, w.p)
  s.cur = satsub(s.cur, n)
end

-- WindowState.FreshAt
local function fresh_at(s, w)
  if alg == BUCKET then
    return s.tat
  elseif alg == SLIDING then
    return (s.epoch + 2) * w.p
  end
  return (s.epoch + 1) * w.p
end

-- load reads key's record for a rule of nw windows: its window states
-- (fresh ones if it expired or had other windows), this replica's
-- reservation (units and whether it has one), the sum of the others'
-- live ones, the latest expiry among them and when it stops counting
-- as pressed (0: never was). Expired reservations are dropped (step 1 of
-- KeyRecord.Sync).
local function load(key, nw)
  local flat = redis.call('HGETALL', key)
  local w, x, pressed
  local resv = {} -- indexes in flat of the reservations' fields
  for i = 1, #flat, 2 do
    local f = flat[i]
    if f == 'w' then
      w = flat[i + 1]
    elseif f == 'x' then
      x = flat[i + 1]
    elseif f == 'p' then
      pressed = tonumber(flat[i + 1])
    elseif string.sub(f, 1, 2) == 'r:' then
      resv[#resv + 1] = i
    end
  end
  if x and tonumber(x) <= now then
    redis.call('DEL', key)
    w, resv, pressed = nil, {}, nil
  end
  local st = {}
  local n = 0
  if w then
    for e, c, p, t in string.gmatch(w, '(%-?%d+) (%d+) (%d+) (%-?%d+)') do
      n = n + 1
      st[n] = {epoch = tonumber(e), cur = tonumber(c), prev = tonumber(p), tat = tonumber(t)}
    end
  end
  if n ~= nw then
    st = {}
    for i = 1, nw do st[i] = {epoch = 0, cur = 0, prev = 0, tat = 0} end
  end

  local own, others, last = 0, 0, 0
  local owned = false
  for _, i in ipairs(resv) do
    local f = flat[i]
    local u, exp = parse_reservation(flat[i + 1])
    if exp <= now then
      redis.call('HDEL', key, f)
    elseif f == mine then
      own, owned = u, true
    else
      others = satadd(others, u)
      last = math.max(last, exp)
    end
  end

  return st, own, owned, others, last, pressed or 0
end

-- save writes the windows st, this replica's credit until now + lease,
-- when the key stops counting as pressed and the record's expiry
-- (KeyRecord.ExpiresAt, at least now + 1 as in memstore; last is the
-- latest other reservation's or this one's), and returns the reply: now,
-- credit, others, pressed and the window states.
local function save(key, st, ws, credit, others, lease, last, pressed)
  local out = {now, credit, others, pressed > now and 1 or 0}
  local enc = {}
  local expires = last
  for i = 1, #ws do
    local s = st[i]
    enc[i] = string.format('%d %d %d %d', s.epoch, s.cur, s.prev, s.tat)
    expires = math.max(expires, fresh_at(s, ws[i]))
    out[#out + 1] = s.epoch
    out[#out + 1] = s.cur
    out[#out + 1] = s.prev
    out[#out + 1] = s.tat
  end
  -- Past 2^53 the state is not one the maths produce; never let it wrap
  -- into a past expiry.
  expires = math.min(math.max(expires, now + 1), MAXEXACT)
  local fields = {'w', table.concat(enc, ','), 'x', fmt(expires)}
  if credit > 0 then
    fields[5], fields[6] = mine, string.format('%d %d', credit, now + lease)
  end
  if pressed > now then -- a lapsed value left in place reads the same
    fields[#fields + 1], fields[#fields + 2] = 'p', fmt(pressed)
  end
  redis.call('HSET', key, unpack(fields))
  redis.call('PEXPIREAT', key, ceilms(expires + GRACE))
  return out
end

-- KeyRecord.dryGetsOne: a fixed window's last units go a unit at a time
-- to the replicas that run dry; a sliding window's too while it is not
-- pressed and the slack each window's previous count left holds a unit
-- for each replica (slackEach); st rolled to now.
local function dry_gets_one(st, ws, share, nrep, pressed)
  if alg == FIXED then return true end
  if alg ~= SLIDING or pressed > now then return false end
  for i = 1, #ws do
    if idiv(math.floor(share * satsub(ws[i].limit, st[i].prev)), nrep) == 0 then
      return false
    end
  end
  return true
end

-- sync applies the item whose arguments start at ARGV[a] to key and
-- returns its reply and where the next item's arguments start.
local function sync(key, a)
  alg = tonumber(ARGV[a])
  local nw = tonumber(ARGV[a + 1])
  local ws = {}
  a = a + 2
  for i = 1, nw do
    ws[i] = {p = tonumber(ARGV[a]), limit = tonumber(ARGV[a + 1]), cap = tonumber(ARGV[a + 2])}
    a = a + 3
  end
  local unused, want, waiting = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local denied, share, nrep = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local lease, nh = tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  local hits = a + 8
  a = hits + 2 * nh

  local st, own, owned, others, last, pressed = load(key, nw)

  -- 2. charge the hits, each to the window it was admitted in.
  for h = 0, nh - 1 do
    local at, units = tonumber(ARGV[hits + 2 * h]), tonumber(ARGV[hits + 2 * h + 1])
    for i = 1, nw do
      if units >= 0 then
        charge_at(st[i], ws[i], at, units)
      else
        refund(st[i], ws[i], -units)
      end
    end
  end

  -- A sliding window is pressed for its shortest period from a report of
  -- requests waiting or denied.
  if alg == SLIDING and (denied > 0 or waiting > 0) then
    local p = ws[1].p
    for i = 2, nw do p = math.min(p, ws[i].p) end
    pressed = now + p
  end

  -- 3. avail = min over windows (remaining - others).
  local avail
  for i = 1, nw do
    roll(st[i], ws[i].p)
    local r = satsub(remaining(st[i], ws[i]), others)
    if avail == nil or r < avail then avail = r end
  end

  -- 4-6. keep, split, last mile.
  local kept = math.min(unused, own, avail)
  local free = avail - kept
  if share <= 0 or share > 1 then share = 1 end
  if nrep < 1 then nrep = 1 end
  local grant = math.min(want, idiv(math.floor(share * free), nrep))
  if grant == 0 and kept == 0 and want > 0 and dry_gets_one(st, ws, share, nrep, pressed)
      and math.floor(share * free) > 0 then
    grant = 1
  end
  if waiting > grant then grant = math.max(grant, math.min(waiting, free)) end

  -- 7. record the reservation (written by save, with the windows).
  local credit = kept + grant
  if credit > 0 then
    last = math.max(last, now + lease)
  elseif owned then
    redis.call('HDEL', key, mine)
  end

  return save(key, st, ws, credit, others, lease, last, pressed), a
end

local replies = {}
local a = 2
for k = 1, #KEYS do
  replies[k], a = sync(KEYS[k], a)
end
return replies
