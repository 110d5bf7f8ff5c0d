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
--            s:<id> replica id's static share record (ShareRecord),
--                   "epoch cur prev tat released": the share hits it
--                   pushed as a window state of the rule's first window,
--                   and the last epoch of which it released its share
--                   (0: never)
-- ARGV     replica, then per key in turn: algorithm (0 fixed, 1 sliding,
--          2 token bucket), n windows, then per window: period(µs) limit
--          capacity; unused, want, waiting, denied, share, replicas,
--          lease(µs), n hits, then per hit: at(µs) units (negative: a
--          refund); share epoch (0: no shares), sharers, sharers of the
--          next epoch, release(µs, 0: none), n share hits, then per share
--          hit: at(µs) units.
-- Reply    per key: now, credit, others' reservations, others' shares
--          held (Others is their sum, saturated in Go), pressed (1 or 0),
--          expires(µs), contended (1 or 0), then per window: epoch cur
--          prev tat.

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
local myshare = 's:' .. replica
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

-- parse_share splits a share record, "epoch cur prev tat released".
local function parse_share(v)
  local e, c, p, t, r = string.match(v, '^(%-?%d+) (%d+) (%d+) (%-?%d+) (%-?%d+)$')
  return {s = {epoch = tonumber(e), cur = tonumber(c), prev = tonumber(p), tat = tonumber(t)},
    rel = tonumber(r), stored = true}
end

-- load reads key's record for a rule of nw windows: its window states st
-- (fresh ones if it expired or had other windows), this replica's
-- reservation (own units, and owned: whether it has one), the sum of the
-- others' live ones (others) and the latest expiry among them (last),
-- when it stops counting as pressed (pressed, 0: never was), and the
-- share records (shares: field → {s = state, rel = released}, nshares
-- of them). Expired reservations are dropped (step 1 of KeyRecord.Sync):
-- their fields are listed in dels, which save deletes.
local function load(key, nw)
  local flat = redis.call('HGETALL', key)
  local w, x, pressed
  local resv = {} -- indexes in flat of the reservations' fields
  local shares, nshares = {}, 0
  for i = 1, #flat, 2 do
    local f = flat[i]
    if f == 'w' then
      w = flat[i + 1]
    elseif f == 'x' then
      x = flat[i + 1]
    elseif f == 'p' then
      pressed = tonumber(flat[i + 1])
    else
      local kind = string.sub(f, 1, 2)
      if kind == 'r:' then
        resv[#resv + 1] = i
      elseif kind == 's:' then
        shares[f] = parse_share(flat[i + 1])
        nshares = nshares + 1
      end
    end
  end
  if x and tonumber(x) <= now then
    redis.call('DEL', key)
    w, resv, pressed, shares, nshares = nil, {}, nil, {}, 0
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

  local rec = {st = st, own = 0, owned = false, others = 0, last = 0, pressed = pressed or 0,
    shares = shares, nshares = nshares, dels = {}}
  for _, i in ipairs(resv) do
    local f = flat[i]
    local u, exp = parse_reservation(flat[i + 1])
    if exp <= now then
      rec.dels[#rec.dels + 1] = f
    elseif f == mine then
      rec.own, rec.owned = u, true
    else
      rec.others = satadd(rec.others, u)
      rec.last = math.max(rec.last, exp)
    end
  end
  return rec
end

-- save writes the record: the windows st, this replica's reservation of
-- credit until expires, when the key stops counting as pressed, the share
-- records charged, and the record's expiry (KeyRecord.ExpiresAt, at least
-- now + 1 as in memstore), all in one HSET after one HDEL of the fields
-- dropped. It returns the reply: now, credit, others' reservations and
-- shares held, pressed, expires, contended and the window states.
local function save(key, rec, ws, credit, expires, oheld, contended)
  local out = {now, credit, rec.others, oheld, rec.pressed > now and 1 or 0, expires, contended and 1 or 0}
  local fields = {'w', '', 'x', ''}
  local enc = {}
  local x = rec.last
  if credit > 0 then
    x = math.max(x, expires)
    fields[#fields + 1], fields[#fields + 2] = mine, string.format('%d %d', credit, expires)
  end
  for i = 1, #ws do
    local s = rec.st[i]
    enc[i] = string.format('%d %d %d %d', s.epoch, s.cur, s.prev, s.tat)
    x = math.max(x, fresh_at(s, ws[i]))
    out[#out + 1] = s.epoch
    out[#out + 1] = s.cur
    out[#out + 1] = s.prev
    out[#out + 1] = s.tat
  end
  for f, r in pairs(rec.shares) do
    if #ws == 1 then
      x = math.max(x, fresh_at(r.s, ws[1]), (r.rel + 1) * ws[1].p)
    end
    if r.dirty then
      local s = r.s
      fields[#fields + 1], fields[#fields + 2] = f, string.format('%d %d %d %d %d', s.epoch, s.cur, s.prev, s.tat, r.rel)
    end
  end
  if rec.pressed > now then -- a lapsed value left in place reads the same
    fields[#fields + 1], fields[#fields + 2] = 'p', fmt(rec.pressed)
  end
  -- Past 2^53 the state is not one the maths produce; never let it wrap
  -- into a past expiry.
  x = math.min(math.max(x, now + 1), MAXEXACT)
  fields[2], fields[4] = table.concat(enc, ','), fmt(x)
  if #rec.dels > 0 then
    redis.call('HDEL', key, unpack(rec.dels))
  end
  redis.call('HSET', key, unpack(fields))
  redis.call('PEXPIREAT', key, ceilms(x + GRACE))
  return out
end

-- charge charges the nh hits whose arguments start at ARGV[h] to every
-- window, each to the window it was admitted in (step 2 of
-- KeyRecord.Sync).
local function charge(st, ws, h, nh)
  for k = 0, nh - 1 do
    local at, units = tonumber(ARGV[h + 2 * k]), tonumber(ARGV[h + 2 * k + 1])
    for i = 1, #ws do
      if units >= 0 then
        charge_at(st[i], ws[i], at, units)
      else
        refund(st[i], ws[i], -units)
      end
    end
  end
end

-- KeyRecord.chargeShares: records this replica's nsh share hits (their
-- arguments start at ARGV[h]) and its release in its share record, drops the records that no longer count, and returns what
-- the shares hold of the window (heldShares) for an item of share epoch
-- se and sharers n, nn: all unreported shares, this replica's own, the
-- part released through the current epoch, when the first of those
-- releases ends, and whether a reservation may outlive the epoch
-- (carry); then whether the rule has static shares (sharesOf; if not,
-- the rest are zero).
local function charge_shares(rec, ws, se, n, nn, share, h, nsh, release)
  local has = se > 0 and #ws == 1 and alg == FIXED
  if not has and nsh == 0 and release == 0 then return 0, 0, 0, 0, false, false end
  local w = ws[1]
  local epoch = idiv(now, w.p)
  local shares = rec.shares
  if nsh > 0 or release ~= 0 then
    local r = shares[myshare]
    if r == nil then
      r = {s = {epoch = 0, cur = 0, prev = 0, tat = 0}, rel = 0}
      shares[myshare] = r
      rec.nshares = rec.nshares + 1
    end
    for k = 0, nsh - 1 do
      local units = tonumber(ARGV[h + 2 * k + 1])
      if units > 0 then
        charge_at(r.s, w, tonumber(ARGV[h + 2 * k]), units)
      end
    end
    if release ~= 0 then -- the current epoch or the next
      r.rel = math.max(r.rel, math.min(idiv(release, w.p), epoch + 1))
    end
    r.dirty = true
  end
  for f, r in pairs(shares) do
    if fresh_at(r.s, w) <= now and r.rel < epoch then
      shares[f] = nil
      rec.nshares = rec.nshares - 1
      if r.stored then rec.dels[#rec.dels + 1] = f end
    end
  end
  if not has then return 0, 0, 0, 0, false, false end
  if epoch == se + 1 then
    n = nn
  elseif epoch ~= se then -- an epoch the item does not know the sharers of
    return MAXEXACT, 0, 0, MAXEXACT, false, true
  end
  -- ShareSize; share is clamped to (0, 1].
  local size = idiv(math.floor(share * w.limit), math.max(n, 1))
  local all, own, released, returns = 0, 0, 0, MAXEXACT
  for f, r in pairs(shares) do
    local s = {epoch = r.s.epoch, cur = r.s.cur, prev = r.s.prev, tat = r.s.tat}
    roll(s, w.p)
    local left = satsub(size, s.cur) -- remaining of a fixed window of size
    if r.rel >= epoch then
      released = satadd(released, left)
      returns = math.min(returns, (r.rel + 1) * w.p)
      left = 0
    end
    all = satadd(all, left)
    if f == myshare then own = left end
  end
  -- The unreported shares: S each of the sharers without a record.
  all = satadd(all, math.min(math.max(n - rec.nshares, 0) * size, MAXEXACT))
  return all, own, released, returns, epoch == se and nn == n, true
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
  local se, sharers, nnext = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local release, nsh = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local shits = a + 5
  a = shits + 2 * nsh
  if share <= 0 or share > 1 then share = 1 end
  if nrep < 1 then nrep = 1 end

  local rec = load(key, nw)
  local st = rec.st

  -- 2. charge the hits and the share hits, each to the window it was
  -- admitted in; the share hits to this replica's share record too.
  charge(st, ws, hits, nh)
  charge(st, ws, shits, nsh)
  local held, ownheld, released, returns, carry, has =
    charge_shares(rec, ws, se, sharers, nnext, share, shits, nsh, release)

  -- A sliding window is pressed for its shortest period from a report of
  -- requests waiting or denied.
  if alg == SLIDING and (denied > 0 or waiting > 0) then
    local p = ws[1].p
    for i = 2, nw do p = math.min(p, ws[i].p) end
    rec.pressed = now + p
  end

  -- 3. avail = min over windows (remaining - others - shares held).
  local reserved = satadd(rec.others, held)
  local avail
  for i = 1, nw do
    roll(st[i], ws[i].p)
    local r = satsub(remaining(st[i], ws[i]), reserved)
    if avail == nil or r < avail then avail = r end
  end

  -- 4-6. keep, split, last mile.
  local kept = math.min(unused, rec.own, avail)
  local free = avail - kept
  local grant = math.min(want, idiv(math.floor(share * free), nrep))
  if grant == 0 and kept == 0 and want > 0 and dry_gets_one(st, ws, share, nrep, rec.pressed)
      and math.floor(share * free) > 0 then
    grant = 1
  end
  if waiting > grant then grant = math.max(grant, math.min(waiting, free)) end

  -- 7. the reservation (written by save, with the windows) lapses at now
  -- + lease; of a rule with shares, at the epoch's end unless it may
  -- carry over, and when the first released share returns if it reaches
  -- into released shares (shareExpiry).
  local credit = kept + grant
  local expires = now + lease
  if has then
    if not carry then
      local p = ws[1].p
      expires = math.min(expires, (idiv(now, p) + 1) * p)
    end
    if credit > satsub(avail, released) then
      expires = math.min(expires, returns)
    end
  end
  if credit == 0 and rec.owned then
    rec.dels[#rec.dels + 1] = mine
  end
  local oheld = held - ownheld
  local contended = waiting > grant and (oheld > 0 or (has and rec.others > 0))
  if has and idiv(now, ws[1].p) ~= se then contended = false end
  return save(key, rec, ws, credit, expires, oheld, contended), a
end

local replies = {}
local a = 2
for k = 1, #KEYS do
  replies[k], a = sync(KEYS[k], a)
end
return replies
