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

-- The call's state, set by main: the store clock, the arguments, this
-- replica's reservation and share fields; then the algorithm of the key
-- being synced.
local now, args, mine, myshare
local alg

-- num reads an argument, the common "0" and "1" without a conversion;
-- num4 four in a row, in one call.
local function num(i)
  local v = args[i]
  if v == '0' then return 0 elseif v == '1' then return 1 end
  return tonumber(v)
end

-- The keys of one call share many strings: the arguments of a rule, and
-- the reservations and window states one replica wrote in one call (one
-- expiry, often one credit and one count). A call of several keys
-- converts each distinct one once: seen maps a string to its number,
-- seen_units and seen_exp a reservation to its parts, seen_w one
-- window's state to {epoch, cur, prev, tat}; false for a call of one key.
local seen, seen_units, seen_exp, seen_w

-- tonum is tonumber, once per distinct string in a call.
local function tonum(v)
  if not seen then return tonumber(v) end
  local n = seen[v]
  if n == nil then
    n = tonumber(v)
    seen[v] = n
  end
  return n
end

local function num4(i)
  local a, b, c, d = args[i], args[i + 1], args[i + 2], args[i + 3]
  return a == '0' and 0 or a == '1' and 1 or tonum(a), b == '0' and 0 or b == '1' and 1 or tonum(b),
    c == '0' and 0 or c == '1' and 1 or tonum(c), d == '0' and 0 or d == '1' and 1 or tonum(d)
end

-- reservation is parse_reservation, once per distinct string in a call.
local function reservation(v)
  if not seen then return parse_reservation(v) end
  local e = seen_exp[v]
  if e == nil then
    local u
    u, e = parse_reservation(v)
    seen_units[v], seen_exp[v] = u, e
    return u, e
  end
  return seen_units[v], e
end

-- window_state reads one window's state, "epoch cur prev tat" (nil if
-- it is not one), parsed once per distinct string in a call.
local function window_state(w)
  local m = seen and seen_w[w]
  if not m then
    local e, c, p, t = match(w, '^(%-?%d+) (%d+) (%d+) (%-?%d+)$')
    if not e then return nil end
    -- cur and prev of a token bucket, tat of the others: "0".
    e, c, p, t = tonumber(e), c == '0' and 0 or tonumber(c), p == '0' and 0 or tonumber(p), t == '0' and 0 or tonumber(t)
    if not seen then return {epoch = e, cur = c, prev = p, tat = t} end
    m = {e, c, p, t}
    seen_w[w] = m
  end
  return {epoch = m[1], cur = m[2], prev = m[3], tat = m[4]}
end

-- del lists field among those save deletes.
local function del(rec, f)
  local d = rec.dels
  if not d then
    rec.dels = {f}
  else
    d[#d + 1] = f
  end
end

-- NOSHARES is the share records of a key that has none, until one is
-- added (charge_shares replaces it).
local NOSHARES = {}

-- WindowState.Roll; w.e is the window's epoch at now.
local function roll(s, w)
  local e = w.e
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
    local room = now + w.cap * t - max(s.tat, now)
    if room <= 0 then return 0 end
    return idiv(room, t)
  elseif alg == SLIDING then
    return satsub(w.limit, s.cur + weighted_prev(s, w.p))
  end
  return satsub(w.limit, s.cur)
end

-- WindowState.ChargeAt
local function charge_at(s, w, at, n)
  if alg == BUCKET then
    if at > now then at = now end
    s.tat = min(max(s.tat, at) + n * interval(w), MAXEXACT)
    return
  end
  roll(s, w)
  local e = w.e
  if at < now then e = idiv(at, w.p) end
  if e == s.epoch then
    s.cur = satadd(s.cur, n)
  elseif e == s.epoch - 1 then
    s.prev = satadd(s.prev, n)
  end
end

-- WindowState.Refund
local function refund(s, w, n)
  if alg == BUCKET then
    s.tat = max(s.tat - n * interval(w), now)
    return
  end
  roll(s, w)
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
  local e, c, p, t, r = match(v, '^(%-?%d+) (%d+) (%d+) (%-?%d+) (%-?%d+)$')
  return {s = {epoch = tonumber(e), cur = tonumber(c), prev = tonumber(p), tat = tonumber(t)},
    rel = tonumber(r), stored = true}
end

-- load reads key's record for a rule of nw windows: its window states st
-- (fresh ones if it expired or had other windows), this replica's
-- reservation (own units, and owned: whether it has one), the sum of the
-- others' live ones (others) and the latest expiry among them (last),
-- when it stops counting as pressed (pressed, 0: never was), the share
-- records (shares: field → {s = state, rel = released}, nshares of them)
-- and the stored w and x (as a number; false: none), which save leaves
-- in place if unchanged. Expired reservations are dropped (step 1 of
-- KeyRecord.Sync): their fields are listed in dels (false: none), which
-- save deletes.
-- new_rec is an empty record, its table sized for every field load and
-- sync set.
local function new_rec()
  return {own = 0, owned = false, others = 0, last = 0, pressed = 0, shares = NOSHARES, nshares = 0,
    w = false, x = false, st = false, dels = false}
end

local function load(key, nw)
  local flat = call('HGETALL', key)
  local rec = new_rec()
  local w, x
  for i = 1, #flat, 2 do
    local f = flat[i]
    if f == 'w' then
      w = flat[i + 1]
    elseif f == 'x' then
      x = flat[i + 1]
    elseif f == 'p' then
      rec.pressed = tonumber(flat[i + 1]) or 0
    else
      local kind = sub(f, 1, 2)
      if kind == 'r:' then
        local u, exp = reservation(flat[i + 1])
        if exp <= now then
          del(rec, f)
        elseif f == mine then
          rec.own, rec.owned = u, true
        else
          rec.others = satadd(rec.others, u)
          rec.last = max(rec.last, exp)
        end
      elseif kind == 's:' then
        if rec.shares == NOSHARES then rec.shares = {} end
        rec.shares[f] = parse_share(flat[i + 1])
        rec.nshares = rec.nshares + 1
      end
    end
  end
  x = x and tonum(x)
  if x and x <= now then
    call('DEL', key)
    rec = new_rec()
    w, x = nil, nil
  end
  rec.w, rec.x = w or false, x or false
  local st, n = {}, 0
  if w and nw == 1 then
    local s = window_state(w)
    if s then st, n = {s}, 1 end
  elseif w then
    for e, c, p, t in string.gmatch(w, '(%-?%d+) (%d+) (%d+) (%-?%d+)') do
      n = n + 1
      st[n] = {epoch = tonumber(e), cur = tonumber(c), prev = tonumber(p), tat = tonumber(t)}
    end
  end
  if n ~= nw then
    st = {}
    for i = 1, nw do st[i] = {epoch = 0, cur = 0, prev = 0, tat = 0} end
  end
  rec.st = st
  return rec
end

-- save writes the record: the windows st, this replica's reservation of
-- credit until expires, when the key stops counting as pressed, the share
-- records charged, and the record's expiry (KeyRecord.ExpiresAt, at least
-- now + 1 as in memstore), all in one HSET after one HDEL of the fields
-- dropped. The windows and the expiry are left out when they read as
-- stored, and the key's TTL, set from the expiry, then stays too. It
-- returns the reply: now, credit, others' reservations and shares held,
-- pressed, expires, contended and the window states.
local function save(key, rec, ws, credit, expires, oheld, contended)
  local st, nw = rec.st, #ws
  local s = st[1]
  local out = {now, credit, rec.others, oheld, rec.pressed > now and 1 or 0, expires, contended and 1 or 0,
    s.epoch, s.cur, s.prev, s.tat}
  local x = rec.last
  if credit > 0 then x = max(x, expires) end
  x = max(x, fresh_at(s, ws[1]))
  for i = 2, nw do
    s = st[i]
    x = max(x, fresh_at(s, ws[i]))
    out[4 * i + 4], out[4 * i + 5], out[4 * i + 6], out[4 * i + 7] = s.epoch, s.cur, s.prev, s.tat
  end
  if nw == 1 then
    for _, r in pairs(rec.shares) do
      x = max(x, fresh_at(r.s, ws[1]), (r.rel + 1) * ws[1].p)
    end
  end
  -- Past 2^53 the state is not one the maths produce; never let it wrap
  -- into a past expiry.
  x = min(max(x, now + 1), MAXEXACT)

  local fields, n = {false, false, false, false, false, false}, 0
  local enc
  if nw == 1 then
    s = st[1]
    enc = format('%d %d %d %d', s.epoch, s.cur, s.prev, s.tat)
  else
    local parts = {}
    for i = 1, nw do
      local s = st[i]
      parts[i] = format('%d %d %d %d', s.epoch, s.cur, s.prev, s.tat)
    end
    enc = concat(parts, ',')
  end
  if enc ~= rec.w then
    fields[1], fields[2], n = 'w', enc, 2
  end
  if x ~= rec.x then
    fields[n + 1], fields[n + 2], n = 'x', fmt(x), n + 2
  end
  if credit > 0 then
    fields[n + 1], fields[n + 2], n = mine, format('%d %d', credit, expires), n + 2
  end
  for f, r in pairs(rec.shares) do
    if r.dirty then
      local s = r.s
      fields[n + 1], fields[n + 2], n = f, format('%d %d %d %d %d', s.epoch, s.cur, s.prev, s.tat, r.rel), n + 2
    end
  end
  if rec.pressed > now then -- a lapsed value left in place reads the same
    fields[n + 1], fields[n + 2], n = 'p', fmt(rec.pressed), n + 2
  end
  if rec.dels then
    call('HDEL', key, unpack(rec.dels))
  end
  if n > 0 then
    call('HSET', key, unpack(fields, 1, n))
  end
  if x ~= rec.x then
    call('PEXPIREAT', key, ceilms(x + GRACE))
  end
  return out
end

-- charge charges the nh hits whose arguments start at args[h] to every
-- window, each to the window it was admitted in (step 2 of
-- KeyRecord.Sync).
local function charge(st, ws, h, nh)
  for k = 0, nh - 1 do
    local at, units = tonumber(args[h + 2 * k]), num(h + 2 * k + 1)
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
-- arguments start at args[h]) and its release in its share record, drops
-- the records that no longer count, and returns what
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
  local epoch = w.e
  if nsh > 0 or release ~= 0 then
    if rec.shares == NOSHARES then rec.shares = {} end
    local r = rec.shares[myshare]
    if r == nil then
      r = {s = {epoch = 0, cur = 0, prev = 0, tat = 0}, rel = 0}
      rec.shares[myshare] = r
      rec.nshares = rec.nshares + 1
    end
    for k = 0, nsh - 1 do
      local units = num(h + 2 * k + 1)
      if units > 0 then
        charge_at(r.s, w, tonumber(args[h + 2 * k]), units)
      end
    end
    if release ~= 0 then -- the current epoch or the next
      r.rel = max(r.rel, min(idiv(release, w.p), epoch + 1))
    end
    r.dirty = true
  end
  local shares = rec.shares
  for f, r in pairs(shares) do
    if fresh_at(r.s, w) <= now and r.rel < epoch then
      shares[f] = nil
      rec.nshares = rec.nshares - 1
      if r.stored then del(rec, f) end
    end
  end
  if not has then return 0, 0, 0, 0, false, false end
  if epoch == se + 1 then
    n = nn
  elseif epoch ~= se then -- an epoch the item does not know the sharers of
    return MAXEXACT, 0, 0, MAXEXACT, false, true
  end
  -- ShareSize; share is clamped to (0, 1].
  local size = idiv(floor(share * w.limit), max(n, 1))
  local all, own, released, returns = 0, 0, 0, MAXEXACT
  for f, r in pairs(shares) do
    local s = {epoch = r.s.epoch, cur = r.s.cur, prev = r.s.prev, tat = r.s.tat}
    roll(s, w)
    local left = satsub(size, s.cur) -- remaining of a fixed window of size
    if r.rel >= epoch then
      released = satadd(released, left)
      returns = min(returns, (r.rel + 1) * w.p)
      left = 0
    end
    all = satadd(all, left)
    if f == myshare then own = left end
  end
  -- The unreported shares: S each of the sharers without a record.
  all = satadd(all, min(max(n - rec.nshares, 0) * size, MAXEXACT))
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
    if idiv(floor(share * satsub(ws[i].limit, st[i].prev)), nrep) == 0 then
      return false
    end
  end
  return true
end

-- sync applies the item whose arguments start at args[a] to key and
-- returns its reply and where the next item's arguments start.
local function sync(key, a)
  alg = num(a)
  local nw = num(a + 1)
  local ws = {}
  a = a + 2
  for i = 1, nw do
    local p = tonum(args[a])
    ws[i] = {p = p, limit = tonum(args[a + 1]), cap = alg == BUCKET and tonum(args[a + 2]) or 0, e = idiv(now, p)}
    a = a + 3
  end
  local unused, want, waiting, denied = num4(a)
  local share, nrep, lease, nh = num4(a + 4)
  local hits = a + 8
  a = hits + 2 * nh
  local se, sharers, nnext, release = num4(a)
  local nsh = num(a + 4)
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
    for i = 2, nw do p = min(p, ws[i].p) end
    rec.pressed = now + p
  end

  -- 3. avail = min over windows (remaining - others - shares held).
  local reserved = satadd(rec.others, held)
  local avail
  for i = 1, nw do
    roll(st[i], ws[i])
    local r = satsub(remaining(st[i], ws[i]), reserved)
    if avail == nil or r < avail then avail = r end
  end

  -- 4-6. keep, split, last mile.
  local kept = min(unused, rec.own, avail)
  local free = avail - kept
  local grant = min(want, idiv(floor(share * free), nrep))
  if grant == 0 and kept == 0 and want > 0 and dry_gets_one(st, ws, share, nrep, rec.pressed)
      and floor(share * free) > 0 then
    grant = 1
  end
  if waiting > grant then grant = max(grant, min(waiting, free)) end

  -- 7. the reservation (written by save, with the windows) lapses at now
  -- + lease; of a rule with shares, at the epoch's end unless it may
  -- carry over, and when the first released share returns if it reaches
  -- into released shares (shareExpiry).
  local credit = kept + grant
  local expires = now + lease
  if has then
    if not carry then
      local p = ws[1].p
      expires = min(expires, (ws[1].e + 1) * p)
    end
    if credit > satsub(avail, released) then
      expires = min(expires, returns)
    end
  end
  if credit == 0 and rec.owned then
    del(rec, mine)
  end
  local oheld = held - ownheld
  local contended = waiting > grant and (oheld > 0 or (has and rec.others > 0))
  if has and ws[1].e ~= se then contended = false end
  return save(key, rec, ws, credit, expires, oheld, contended), a
end

-- main syncs the keys of one call, replica argv[1], at one Redis TIME.
local function main(keys, argv)
  now, args = clock(), argv
  mine, myshare = 'r:' .. argv[1], 's:' .. argv[1]
  if #keys > 1 then
    seen, seen_units, seen_exp, seen_w = {}, {}, {}, {}
  else
    seen = false
  end
  local replies, a = {}, 2
  for k = 1, #keys do
    replies[k], a = sync(keys[k], a)
  end
  return replies
end

return main(KEYS, ARGV)
