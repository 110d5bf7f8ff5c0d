-- record: the rate script's first part (rate.lua follows it): the
-- call's state and the conversions of its arguments, the window maths of
-- package limiter's WindowState, and the reading (load) and writing
-- (save) of a key's record, whose layout rate.lua describes.

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
-- window's state to {epoch, cur, prev, tat}, seen_s a share record to
-- {epoch, cur, prev, tat, released} (the records of one epoch, many
-- keys' alike); false for a call of one key.
local seen, seen_units, seen_exp, seen_w, seen_s

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

-- rolled_cur and rolled_prev are s.cur and s.prev once s is rolled to
-- epoch e, s left as it is.
local function rolled_cur(s, e)
  if e <= s.epoch then return s.cur end
  return 0
end

local function rolled_prev(s, e)
  local x = s.epoch
  if e <= x then return s.prev elseif e == x + 1 then return s.cur end
  return 0
end

-- KeyRecord.lost: every window state zero, as a record the store lost.
local function lost(st)
  for i = 1, #st do
    local s = st[i]
    if s.epoch ~= 0 or s.cur ~= 0 or s.prev ~= 0 or s.tat ~= 0 then return false end
  end
  return true
end

-- WindowState.Raise: s lifted to at least f, a state of the same window
-- seen earlier (a replica's floor); it reports whether s changed.
local function raise(s, f)
  local e, c, p, t = s.epoch, s.cur, s.prev, s.tat
  if f.epoch > e then
    local prev = f.prev
    if f.epoch == e + 1 then prev = max(prev, c) end
    s.epoch, s.cur, s.prev = f.epoch, f.cur, prev
  elseif f.epoch == e then
    s.cur, s.prev = max(c, f.cur), max(p, f.prev)
  elseif f.epoch == e - 1 then
    s.prev = max(p, f.cur)
  end
  s.tat = max(t, f.tat)
  return s.epoch ~= e or s.cur ~= c or s.prev ~= p or s.tat ~= t
end

-- interval: the token bucket's emission interval, rounded up.
local function interval(w)
  return idiv(w.p + w.limit - 1, w.limit)
end

-- WindowState.weightedPrev: prev·left/p rounded up; s rolled to now; a
-- window that begins after now has all of prev inside.
local function weighted_prev(s, p)
  if s.prev == 0 then return 0 end
  local left = p
  local e = now - s.epoch * p
  if e > 0 then left = p - e end
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

-- WindowState.ChargeAt, and for n < 0 WindowState.RefundAt of -n: each
-- to the window at falls in; share: of a share record, in its arithmetic
-- (shareAlgorithm: a token bucket's counts as a fixed window's).
local function charge_at(s, w, at, n, share)
  if alg == BUCKET and not share then
    if n < 0 then
      s.tat = max(s.tat + n * interval(w), now)
      return
    end
    if at > now then at = now end
    s.tat = min(max(s.tat, at) + n * interval(w), MAXEXACT)
    return
  end
  roll(s, w)
  local e = w.e
  if at < w.s then e = idiv(at, w.p) end -- at < now: its epoch, w.e from w.s (its start) on
  if e == s.epoch then
    s.cur = n < 0 and satsub(s.cur, -n) or satadd(s.cur, n)
  elseif e == s.epoch - 1 then
    s.prev = n < 0 and satsub(s.prev, -n) or satadd(s.prev, n)
  end
end

-- recordEpochs: how many epochs after its own a share record counts.
local function record_epochs()
  if alg == SLIDING then return 1 elseif alg == BUCKET then return 2 end
  return 0
end

-- WindowState.FreshAt; share: of a share record (recordFreshAt).
local function fresh_at(s, w, share)
  if share then
    return (s.epoch + 1 + record_epochs()) * w.p
  elseif alg == BUCKET then
    return s.tat
  elseif alg == SLIDING then
    return (s.epoch + 2) * w.p
  end
  return (s.epoch + 1) * w.p
end

-- parse_share splits a share record, "epoch cur prev tat released",
-- parsed once per distinct string in a call.
local function parse_share(v)
  local m = seen and seen_s[v]
  if not m then
    local e, c, p, t, r = match(v, '^(%-?%d+) (%d+) (%d+) (%-?%d+) (%-?%d+)$')
    m = {tonumber(e), c == '0' and 0 or tonumber(c), p == '0' and 0 or tonumber(p), t == '0' and 0 or tonumber(t),
      r == '0' and 0 or tonumber(r)}
    if seen then seen_s[v] = m end
  end
  return {s = {epoch = m[1], cur = m[2], prev = m[3], tat = m[4]},
    rel = m[5], lent = 0, le = 0, lp = 0, kn = 0, ke = 0, kp = 0, from = 0, stored = true}
end

-- add_apart puts the loans, shrinks and release runs read (l:<id>
-- fields, "lent epoch", k:<id> fields, "n epoch", and f:<id> fields, the
-- run's first epoch, ShareRecord.From; apart maps each one's share field
-- to {kind, value}) in the share records, making a record for one that
-- has none.
local function add_apart(rec, apart)
  if rec.shares == NOSHARES then rec.shares = {} end
  for _, x in ipairs(apart) do
    local f, v = x[1], x[3]
    local r = rec.shares[f]
    if r == nil then
      r = {s = {epoch = 0, cur = 0, prev = 0, tat = 0}, rel = 0, lent = 0, le = 0, lp = 0, kn = 0, ke = 0, kp = 0, from = 0}
      rec.shares[f] = r
      rec.nshares = rec.nshares + 1
    end
    local l, e, p = match(v, '^(%d+) (%-?%d+) ?(%d*)$')
    if x[2] == 'f:' then
      r.from, r.fstored = tonumber(v) or 0, true
    elseif x[2] == 'l:' then
      r.lent, r.le, r.lp, r.lstored = tonumber(l) or 0, tonumber(e) or 0, tonumber(p) or 0, true
    else
      r.kn, r.ke, r.kp, r.kstored = tonumber(l) or 0, tonumber(e) or 0, tonumber(p) or 0, true
    end
  end
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
    w = false, w0 = false, x = false, st = false, dels = false, gen = 0, g = false, b = false, base = false, bdirty = false,
    settled = 0, synced = 0, syncedn = 0, q = false}
end

-- parse_states reads nw window states in the form of the w field; zero
-- states if it holds another number of them (or is false).
local function parse_states(v, nw)
  local st, n = {}, 0
  if v then
    for e, c, p, t in string.gmatch(v, '(%-?%d+) (%d+) (%d+) (%-?%d+)') do
      n = n + 1
      st[n] = {epoch = tonumber(e), cur = tonumber(c), prev = tonumber(p), tat = tonumber(t)}
    end
  end
  if n ~= nw then
    st = {}
    for i = 1, nw do st[i] = {epoch = 0, cur = 0, prev = 0, tat = 0} end
  end
  return st
end

-- encode_states writes window states in the form of the w field.
local function encode_states(st)
  if #st == 1 then
    local s = st[1]
    return format('%d %d %d %d', s.epoch, s.cur, s.prev, s.tat)
  end
  local parts = {}
  for i = 1, #st do
    local s = st[i]
    parts[i] = format('%d %d %d %d', s.epoch, s.cur, s.prev, s.tat)
  end
  return concat(parts, ',')
end

-- count_in is WindowState.countIn: what s counts in epoch e.
local function count_in(s, e)
  if e == s.epoch then return s.cur elseif e == s.epoch - 1 then return s.prev end
  return 0
end

local function load(key, nw)
  local flat = call('HGETALL', key)
  local rec = new_rec()
  local w, x, apart
  for i = 1, #flat, 2 do
    local f = flat[i]
    if f == 'w' then
      w = flat[i + 1]
    elseif f == 'x' then
      x = flat[i + 1]
    elseif f == 'p' then
      rec.pressed = tonumber(flat[i + 1]) or 0
    elseif f == 'g' then
      rec.g = tonumber(flat[i + 1])
      rec.gen = rec.g or 0
    elseif f == 'b' then
      rec.b = flat[i + 1]
    elseif f == 'q' then
      rec.q = flat[i + 1]
      local st, sy, sn = match(rec.q, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
      rec.settled, rec.synced, rec.syncedn = tonumber(st) or 0, tonumber(sy) or 0, tonumber(sn) or 0
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
        local r, old = parse_share(flat[i + 1]), rec.shares[f]
        if old then
          r.lent, r.le, r.lp, r.lstored = old.lent, old.le, old.lp, old.lstored
          r.kn, r.ke, r.kp, r.kstored = old.kn, old.ke, old.kp, old.kstored
          r.from, r.fstored = old.from, old.fstored
        else
          rec.nshares = rec.nshares + 1
        end
        rec.shares[f] = r
      elseif kind == 'l:' or kind == 'k:' or kind == 'f:' then
        apart = apart or {}
        apart[#apart + 1] = {'s:' .. sub(f, 3), kind, flat[i + 1]}
      end
    end
  end
  if apart then add_apart(rec, apart) end
  x = x and tonum(x)
  if x and x <= now then
    call('DEL', key)
    rec = new_rec()
    w, x = nil, nil
  end
  rec.w, rec.x = w or false, x or false
  local s = w and nw == 1 and window_state(w)
  if s then rec.w0 = {s.epoch, s.cur, s.prev, s.tat} end -- as stored: save compares
  rec.st = s and {s} or parse_states(w, nw)
  return rec
end

-- save writes the record: the windows st, this replica's reservation of
-- res units until rexp (the credit granted, or a hold), when the key
-- stops counting as pressed, the share records charged, and the record's
-- expiry (KeyRecord.ExpiresAt, at least
-- now + 1 as in memstore), all in one HSET after one HDEL of the fields
-- dropped. The windows and the expiry are left out when they read as
-- stored, and the key's TTL, set from the expiry, then stays too. It
-- returns the reply: now, credit, others' reservations and shares held,
-- pressed, expires, contended, the generation, the share lent and the
-- window states.
-- The generation and the base are written when they changed.
local function save(key, rec, ws, credit, expires, oheld, contended, lent, probed, res, rexp)
  local st, nw = rec.st, #ws
  local s = st[1]
  local out = {now, credit, rec.others, oheld, rec.pressed > now and 1 or 0, expires, contended, rec.gen,
    lent, probed, s.epoch, s.cur, s.prev, s.tat}
  local x = rec.last
  if res > 0 then x = max(x, rexp) end
  x = max(x, fresh_at(s, ws[1]))
  for i = 2, nw do
    s = st[i]
    x = max(x, fresh_at(s, ws[i]))
    out[4 * i + 7], out[4 * i + 8], out[4 * i + 9], out[4 * i + 10] = s.epoch, s.cur, s.prev, s.tat
  end
  if nw == 1 then
    -- a sliding window's records of an epoch count in the next, a token
    -- bucket's in the two after; its next epoch's first sync settles
    local after = 1 + record_epochs()
    local p = ws[1].p
    for _, r in pairs(rec.shares) do -- fresh_at of a share record, or later
      x = max(x, (max(r.s.epoch, r.rel, r.le, r.ke) + after) * p)
    end
    if alg == BUCKET and rec.synced > 0 then x = max(x, (rec.synced + 2) * ws[1].p) end
  end
  -- Past 2^53 the state is not one the maths produce; never let it wrap
  -- into a past expiry.
  x = min(max(x, now + 1), MAXEXACT)

  local fields, n = {false, false, false, false, false, false}, 0
  s = st[1]
  local w0 = rec.w0
  if not (nw == 1 and w0 and s.epoch == w0[1] and s.cur == w0[2] and s.prev == w0[3] and s.tat == w0[4]) then
    local enc = encode_states(st)
    if enc ~= rec.w then
      fields[1], fields[2], n = 'w', enc, 2
    end
  end
  if x ~= rec.x then
    fields[n + 1], fields[n + 2], n = 'x', fmt(x), n + 2
  end
  if res > 0 then
    fields[n + 1], fields[n + 2], n = mine, format('%d %d', res, rexp), n + 2
  end
  for f, r in pairs(rec.shares) do
    if r.dirty then
      local s = r.s
      fields[n + 1], fields[n + 2], n = f, format('%d %d %d %d %d', s.epoch, s.cur, s.prev, s.tat, r.rel), n + 2
      if r.lent > 0 then -- apart, so a record reads as before to a script that knows no loans
        local v = format('%d %d', r.lent, r.le)
        if r.lp > 0 then v = v .. format(' %d', r.lp) end -- the epoch before's loan too
        fields[n + 1], fields[n + 2], n = 'l:' .. sub(f, 3), v, n + 2
      end
      if r.kn > 0 then -- and shrinks
        local v = format('%d %d', r.kn, r.ke)
        if r.kp > 0 then v = v .. format(' %d', r.kp) end -- the epoch before's, shrunk too
        fields[n + 1], fields[n + 2], n = 'k:' .. sub(f, 3), v, n + 2
      end
      if r.from > 0 then -- and the first epoch of a run of releases
        fields[n + 1], fields[n + 2], n = 'f:' .. sub(f, 3), format('%d', r.from), n + 2
      end
    end
  end
  if rec.pressed > now then -- a lapsed value left in place reads the same
    fields[n + 1], fields[n + 2], n = 'p', fmt(rec.pressed), n + 2
  end
  if rec.settled > 0 or rec.synced > 0 then
    local q = format('%d %d %d', rec.settled, rec.synced, rec.syncedn)
    if q ~= rec.q then
      fields[n + 1], fields[n + 2], n = 'q', q, n + 2
    end
  end
  if rec.gen ~= rec.g then
    fields[n + 1], fields[n + 2], n = 'g', fmt(rec.gen), n + 2
  end
  if rec.bdirty then
    if rec.base then
      fields[n + 1], fields[n + 2], n = 'b', encode_states(rec.base), n + 2
    elseif rec.b then
      del(rec, 'b')
    end
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
