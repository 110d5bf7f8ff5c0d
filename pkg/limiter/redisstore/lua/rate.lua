-- rate: one replica's sync of one or more rate keys, KeyRecord.Sync in
-- package limiter (the store's reference maths), all applied at one Redis
-- TIME, as the reference store applies a round.
--
-- KEYS[k]  the k-th key's hash:
--            x      the record's expiry, µs (memstore's keyEntry.expires)
--            w      window states, "epoch cur prev tat" per window,
--                   separated by ","
--            p      KeyRecord.Pressed, µs (a sliding window's, or a fixed
--                   window's with shares)
--            g      the record's generation (KeyRecord.Gen), µs
--            b      KeyRecord.Base, in the form of w (absent: zero)
--            q      a token bucket's KeyRecord.Settled, Synced and
--                   SyncedPrevN, "settled synced n" (absent: zero)
--            r:<id> replica id's reservation, "units expires(µs)"
--            s:<id> replica id's static share record (ShareRecord),
--                   "epoch cur prev tat released": the share hits it
--                   pushed as a window state of the rule's first window,
--                   and the last epoch of which it released its share
--                   (0: never)
--            l:<id> the loan in replica id's share record (ShareRecord.Lent,
--                   LentEpoch, LentPrev), "lent epoch" or "lent epoch
--                   prev_lent": a field apart, which a script that knows
--                   no loans passes by (one that reads no prev_lent
--                   counts the epoch before's loan as a share, more)
--            k:<id> the shrink in replica id's share record
--                   (ShareRecord.ShrinkN, ShrinkEpoch, ShrinkPrevN),
--                   "n epoch" or "n epoch prev_n": apart too (a script
--                   that reads no prev_n counts the record unshrunk,
--                   holding more)
-- ARGV     replica, then per key in turn: its rule, then its own fields.
--          The rule is an index, 1 or more, of a rule an earlier key of
--          the call gave, or 0 and the rule: algorithm (0 fixed, 1
--          sliding, 2 token bucket), n windows, then per window:
--          period(µs) limit capacity; share, replicas, lease(µs), share
--          epoch (0: no shares), sharers, sharers of the next epoch,
--          sharers of the epoch before (each −m for a founding epoch of
--          m founders, ShareSize), n gone, then per gone sharer of the epoch its name, n shrunk,
--          then per sharer that declared a shrink (SyncItem.Shrunk) its
--          name and count, n shrunk of the epoch before, then per sharer
--          of it that declared one (SyncItem.ShrunkPrev) its name and
--          count. The
--          key's fields: unused, want, waiting, denied, n hits, then per
--          hit: at(µs) units (negative: a refund); release(µs, 0: none),
--          n share hits, then per share hit: at(µs) units; n floors (0 or
--          n windows), the floors' generation (µs, 0: not known), then
--          per window the replica's floor, "epoch cur prev tat"; the share
--          floor in the same form ("": none); the loan held (SyncItem.Lent,
--          0: none), borrow (1 or 0), shrink (SyncItem.Shrink, 0: none),
--          the probe (SyncItem.Probe, 0: none), the release ahead
--          (SyncItem.ReleaseAhead, 1 or 0), the release of the epoch
--          before (SyncItem.ReleasePrev, 1 or 0), the hold
--          (SyncItem.Hold, 0: none) and its end (µs).
-- Reply    per key: now, credit, others' reservations, others' shares
--          held (Others is their sum, saturated in Go), pressed (1 or 0),
--          expires(µs), contended (1, 2 to shrink, or 0; plus 4 when
--          the item filled a fixed window, SyncResult.Filled), the record's
--          generation (µs), the share lent (0: none), the probe's units
--          charged (SyncResult.Probed), then per window: epoch cur prev
--          tat.
--
-- record.lua, prepended, reads and writes the record; this part applies
-- the protocol.

-- charge charges the nh hits whose arguments start at args[h] to every
-- window, each to the window it was admitted in (step 2 of
-- KeyRecord.Sync): those admitted from instant from and before to
-- (false: no bound), but not, settled > 0, the hits of an epoch up to
-- settled (a token bucket's share hits, KeyRecord.charge); count: a
-- token bucket with shares, whose window counts them by epoch too
-- (countBucket).
local function charge(st, ws, h, nh, settled, from, to, count)
  for k = 0, nh - 1 do
    local at, units = tonum(args[h + 2 * k]), num(h + 2 * k + 1)
    local t = min(at, now)
    if not (settled > 0 and idiv(t, ws[1].p) <= settled or from and t < from or to and t >= to) then
      for i = 1, #ws do
        charge_at(st[i], ws[i], at, units)
        if count then charge_at(st[i], ws[i], at, units, true) end
      end
    end
  end
end

-- share_size is ShareSize; share is clamped to (0, 1]. A founding
-- epoch's n is −m: its m founders' shares hold half of it.
local function share_size(w, share, n)
  if n < 0 then
    return idiv(floor(share / 2 * w.limit), -n)
  end
  return idiv(floor(share * w.limit), max(n, 1))
end

-- own_share is this replica's share record, made if it has none.
local function own_share(rec)
  if rec.shares == NOSHARES then rec.shares = {} end
  local r = rec.shares[myshare]
  if r == nil then
    r = {s = {epoch = 0, cur = 0, prev = 0, tat = 0}, rel = 0, lent = 0, le = 0, lp = 0, kn = 0, ke = 0, kp = 0, from = 0, dirty = true}
    rec.shares[myshare] = r
    rec.nshares = rec.nshares + 1
  end
  return r
end

-- released_in is ShareRecord.releasedIn: r's share of epoch e given up.
local function released_in(r, e)
  return r.from <= e and e <= r.rel
end

-- ShareRecord.lentOf: the size of r's loan of epoch e; 0: none.
local function lent_of(r, e)
  if r.le == e then return r.lent elseif r.le == e + 1 then return r.lp end
  return 0
end

-- ShareRecord.lend: r's loan of epoch e, the epoch before's kept.
local function lend_rec(r, size, e)
  if r.le ~= e then r.lp = lent_of(r, e - 1) end
  r.lent, r.le, r.dirty = size, e, true
end

-- ShareRecord.shrunkN: the count r's share of epoch e was shrunk to; 0:
-- not shrunk.
local function shrunk_n(r, e)
  if r.ke == e then return r.kn elseif r.ke == e + 1 then return r.kp end
  return 0
end

-- ShareRecord.releasePast: the end of past epoch x, said by its replica
-- (SyncItem.ReleasePrev); a run that begins after x+1 is left alone.
local function release_past(r, x)
  if released_in(r, x) then return end
  if r.rel < x then
    if r.rel < x - 1 then r.from = x end
    r.rel = x
  elseif r.from == x + 1 then
    r.from = x
  end
end

-- KeyRecord.lend: a share of epoch se on loan to this replica, which
-- asked to borrow one, out of left: ShareSize at the n sharers and at
-- the nrep live, or less if less is left; the loan it holds of se told again; none
-- after a release of se, of an epoch the store is not in, or of one
-- without sharers. It returns the loan's size and what of left it took.
local function lend(rec, ws, se, n, share, sshare, nrep, gone, left, whole)
  if n == 0 or ws[1].e ~= se then return 0, 0 end
  local r = rec.shares ~= NOSHARES and rec.shares[myshare]
  if r and released_in(r, se) then return 0, 0 end
  if r and r.lent > 0 and r.le == se then return r.lent, 0 end
  -- its part of left (1/nrep) if a live replica released its share of
  -- se (KeyRecord.releasedIn), else all of left
  local part = 1
  for f, x in pairs(rec.shares) do
    if f ~= myshare and released_in(x, se) and not gone[f] then
      part = nrep
      break
    end
  end
  local size = min(share_size(ws[1], sshare, n), share_size(ws[1], sshare, nrep))
  local g = min(size, idiv(floor(share * left), part))
  if g <= 0 or whole and g < size then return 0, 0 end
  r = own_share(rec)
  lend_rec(r, g, se)
  return g, g
end

-- share_fraction is ShareFraction: a sliding window's shares of an epoch
-- hold half of share between them, and a token bucket's.
local function share_fraction(share)
  if alg ~= FIXED then return share / 2 end
  return share
end

-- UNKNOWN stands for the sharers of an epoch an item does not say
-- (unknownSharers).
local UNKNOWN = -1 / 0

-- declared_prev: declaredPrev, the declared shrinks of the epoch before
-- now's (epoch), of an item of share epoch se; false if none.
local function declared_prev(gone, se, epoch)
  if epoch == se then return gone.declaredp elseif epoch == se + 1 then return gone.declared end
  return false
end

-- shrunkLimit: what record r (share field f), one of n sharers of epoch
-- x, may hold of share size lim: a share at the count it shrank its
-- share of x to, or declared it shrank it to (declared: field → N), if
-- less; a declared one is marked in counted.
local function shrunk_limit(w, share, r, x, n, lim, f, declared, counted)
  local kn = shrunk_n(r, x)
  if kn > 0 and n > 0 then lim = min(lim, share_size(w, share, kn)) end
  local k = declared and declared[f]
  if k then
    lim = min(lim, share_size(w, share, k))
    counted[f] = true
  end
  return lim
end

-- unreportedShares: what unrep unreported sharers hold, size each, or
-- those of them that declared a shrink (not counted with a record) a
-- share at their count, if no more of them declared than are unreported.
local function unreported_shares(w, share, unrep, size, declared, counted)
  local held = 0
  if declared then
    local dn, dsum = 0, 0
    for f, k in pairs(declared) do
      if not counted[f] then dn, dsum = dn + 1, satadd(dsum, share_size(w, share, k)) end
    end
    if dn > 0 and dn <= unrep then held, unrep = dsum, unrep - dn end
  end
  return satadd(held, min(unrep * size, MAXEXACT))
end

-- KeyRecord.slidingShares: what a sliding window's shares of the epoch
-- before hold (np sharers; declared: their declared shrinks) and those of
-- the next epoch (nn, less those released; UNKNOWN: share of the limit),
-- share the share fraction.
local function sliding_shares(shares, w, epoch, np, nn, share, declared)
  local size = share_size(w, share, np)
  local prev, active, released, counted = 0, 0, 0, {}
  for f, r in pairs(shares) do
    if released_in(r, epoch + 1) then released = released + 1 end
    local sprev = rolled_prev(r.s, epoch)
    local lp = lent_of(r, epoch - 1)
    local loan = lp > 0
    if loan or sprev > 0 or released_in(r, epoch - 1) or shrunk_n(r, epoch - 1) > 0 then
      local lim = size
      if loan then
        lim = lp
      else
        active = active + 1
        lim = shrunk_limit(w, share, r, epoch - 1, np, lim, f, declared, counted)
      end
      if not released_in(r, epoch - 1) then prev = satadd(prev, satsub(lim, sprev)) end
    end
  end
  prev = satadd(prev, unreported_shares(w, share, max(math.abs(np) - active, 0), size, declared, counted))
  if nn == UNKNOWN then return prev, idiv(floor(share * w.limit), 1) end
  return prev, min(max(math.abs(nn) - released, 0) * share_size(w, share, nn), MAXEXACT)
end

-- KeyRecord.bucketLeft: what the shares of past epoch x (n sharers;
-- UNKNOWN: share of the limit; declared: their declared shrinks) hold
-- that no share record reports, share the share fraction.
local function bucket_left(shares, w, x, n, share, declared)
  if n == UNKNOWN then return idiv(floor(share * w.limit), 1) end
  local size = share_size(w, share, n)
  local left, active, counted = 0, 0, {}
  for f, r in pairs(shares) do
    local count = count_in(r.s, x)
    local lx = lent_of(r, x)
    local loan = lx > 0
    if loan or count > 0 or released_in(r, x) or shrunk_n(r, x) > 0 then
      local lim = size
      if loan then
        lim = lx
      else
        active = active + 1
        lim = shrunk_limit(w, share, r, x, n, lim, f, declared, counted)
      end
      if not released_in(r, x) then left = satadd(left, satsub(lim, count)) end
    end
  end
  return satadd(left, unreported_shares(w, share, max(math.abs(n) - active, 0), size, declared, counted))
end

-- KeyRecord.settle: at the first sync of epoch e, the shares of e−2 a
-- sync held through e−1 (KeyRecord.pend) are charged as spent as e−1
-- began, what no record reports of them; none held: nothing to charge.
-- syncedn is stored as MAXEXACT for UNKNOWN.
local function settle(rec, w, share)
  local e = w.e
  if rec.synced >= e or rec.settled >= e - 2 then return end
  if rec.synced == e - 1 then
    local shares, n = rec.shares, rec.syncedn
    if shares == NOSHARES then shares = {} end
    if n == MAXEXACT then n = UNKNOWN end
    local left = bucket_left(shares, w, e - 2, n, share, false)
    if left > 0 then charge_at(rec.st[1], w, (e - 1) * w.p, left) end
  end
  rec.settled = e - 2
end

-- KeyRecord.pend: what the shares of the epoch before hold that no record
-- reports, held through this one; the sync noted for settle.
local function pend(rec, w, se, ns, share, gone)
  local e = w.e
  local n = UNKNOWN
  if se == e then n = ns[3] elseif se == e - 1 then n = ns[1] end
  local shares = rec.shares
  if shares == NOSHARES then shares = {} end
  rec.synced, rec.syncedn = e, n
  if n == UNKNOWN then rec.syncedn = MAXEXACT end
  return bucket_left(shares, w, e - 1, n, share, declared_prev(gone, se, e))
end

-- WindowState.Remaining of a token bucket at instant t (t ≥ now).
local function bucket_remaining(s, w, t)
  local iv = interval(w)
  local room = t + w.cap * iv - max(s.tat, t)
  if room <= 0 then return 0 end
  return idiv(room, iv)
end

-- bucketMargin: what a period's refill falls short of the capacity by.
local function bucket_margin(w)
  return satsub(w.cap, idiv(w.p, interval(w)))
end

-- KeyRecord.chargeShares: records this replica's nsh share hits (their
-- arguments start at args[h]) and its release in its share record, drops
-- the records that no longer count, and returns what
-- the shares hold of the window (heldShares) for an item of share epoch
-- se and sharers n, nn, with gone the share fields of the sharers of se
-- that left by leave.lua (a set; gone.n its size), whose shares count as
-- nothing without an active record (SyncItem.Gone): all unreported shares, this replica's own, the
-- part released through the current epoch, when the first of those
-- releases ends, and whether a reservation may outlive the epoch
-- (carry); then whether the rule has static shares (sharesOf; if not,
-- the rest are zero), and whether sharers may shrink their shares to a
-- share at the nrep live (heldShares.shrinkable), shrink being this
-- replica's (SyncItem.Shrink).
local function charge_shares(rec, ws, se, n, nn, np, gone, share, h, nsh, release, ahead, sfloor, lent, nrep, shrink, rprev)
  local has = se > 0 and #ws == 1 and (alg ~= BUCKET or ws[1].cap == ws[1].limit)
  if not has and nsh == 0 and release == 0 then return 0, 0, 0, 0, false, false, false, 0, 0 end
  share = share_fraction(share)
  local w = ws[1]
  local epoch = w.e
  local sf = has and sfloor
  -- a loan of the epoch the replica holds and the record does not (the
  -- store lost it) is made again, at most a share
  local relend = 0
  if lent > 0 and has and se == epoch and n ~= 0 then relend = min(lent, share_size(w, share, n)) end
  -- a shrink of the epoch the replica names, by a sharer of it
  local shrinks = has and se == epoch and n > 0 and shrink > n
  local past = rprev == 1 and alg ~= FIXED
  if nsh > 0 or release ~= 0 or sf or relend > 0 or shrinks or past then
    local r = own_share(rec)
    if relend > 0 and r.le ~= epoch then
      lend_rec(r, relend, epoch)
    end
    if shrinks and not (r.lent > 0 and r.le == epoch) then
      local k = shrink
      if r.ke == epoch then k = max(k, r.kn) end
      if k ~= r.kn or r.ke ~= epoch then
        if r.ke ~= epoch then r.kp = shrunk_n(r, epoch - 1) end
        r.kn, r.ke, r.dirty = k, epoch, true
      end
    end
    if sf and raise(r.s, sf) then r.dirty = true end
    for k = 0, nsh - 1 do
      local units = num(h + 2 * k + 1)
      if units > 0 then
        charge_at(r.s, w, tonum(args[h + 2 * k]), units, true)
      end
    end
    if release ~= 0 then -- ShareRecord.release: the current epoch or the next; ahead: the next alone
      local last = min(idiv(release, w.p), epoch + 1)
      local first = min(epoch, last)
      if ahead == 1 and last > epoch then first = last end
      if r.rel < first - 1 then r.from = first end
      r.rel = max(r.rel, last)
    end
    if past then -- SyncItem.prevEpoch; said with every sync, written when it changes the record
      local rel, from = r.rel, r.from
      if se > 0 then release_past(r, min(se, epoch) - 1) else release_past(r, epoch - 1) end
      if r.rel ~= rel or r.from ~= from then r.dirty = true end
    end
    if nsh > 0 or release ~= 0 then r.dirty = true end
  end
  local shares = rec.shares
  local kept = record_epochs()
  local last, lapse = epoch - kept, (1 + kept) * w.p -- dropShares; fresh_at of a share record, less its epoch's start
  for f, r in pairs(shares) do
    if r.s.epoch * w.p + lapse <= now and r.rel < last and r.le < last and r.ke < last then
      shares[f] = nil
      rec.nshares = rec.nshares - 1
      if r.stored then del(rec, f) end
      if r.lstored then del(rec, 'l:' .. sub(f, 3)) end
      if r.kstored then del(rec, 'k:' .. sub(f, 3)) end
      if r.fstored then del(rec, 'f:' .. sub(f, 3)) end
    end
  end
  if not has then return 0, 0, 0, 0, false, false, false, 0, 0 end
  local ng = gone.n -- gone sharers without an active record
  if epoch == se + 1 then
    n, ng, np, nn = nn, 0, n, UNKNOWN
  elseif epoch ~= se then -- an epoch the item does not know the sharers of
    return MAXEXACT, 0, 0, MAXEXACT, false, true, false, MAXEXACT, MAXEXACT
  end
  local hprev, hnext = 0, 0
  if alg ~= FIXED then hprev, hnext = sliding_shares(shares, w, epoch, np, nn, share, declared_prev(gone, se, epoch)) end
  local size = share_size(w, share, n)
  local all, own, released, returns, active, settled = 0, 0, 0, MAXEXACT, 0, 0
  local declared = epoch == se and gone.declared -- share field → N (SyncItem.Shrunk)
  local withrec = declared and {} -- the declared sharers counted with their records
  for f, r in pairs(shares) do
    local scur = rolled_cur(r.s, epoch)
    -- A record with nothing reported or released this epoch counts as
    -- none: with the unreported shares. One that holds a loan of it
    -- counts as the loan, not as one of the sharers.
    local loan = r.lent > 0 and r.le == epoch
    local kn = shrunk_n(r, epoch)
    local shrunk = kn > 0
    local rel = released_in(r, epoch)
    if loan or scur > 0 or rel or shrunk then
      local lim = size
      if loan then
        lim = r.lent
      else
        active = active + 1
        if ng > 0 and gone[f] then ng = ng - 1 end
        local k = declared and declared[f]
        if r.ke ~= 0 or declared then lim = shrunk_limit(w, share, r, epoch, n, lim, f, declared, withrec) end
        if rel or shrunk and kn >= nrep or k and k >= nrep or epoch == se and gone[f] then
          settled = settled + 1
        end
      end
      local left = satsub(lim, scur) -- remaining of a fixed window of lim
      if rel then
        released = satadd(released, left)
        returns = min(returns, (r.rel + 1) * w.p)
        left = 0
      end
      all = satadd(all, left)
      if f == myshare then own = left end
    end
  end
  -- The unreported shares: S each of the sharers without an active record,
  -- a share at its count of one that declared a shrink (not gone); all at
  -- S if more declared than are unreported.
  local unrep = max(math.abs(n) - active - ng, 0)
  if declared then
    local dn, dsum, dset = 0, 0, 0
    for f, k in pairs(declared) do
      if not withrec[f] and not gone[f] then
        dn, dsum = dn + 1, satadd(dsum, share_size(w, share, k))
        if k >= nrep then dset = dset + 1 end
      end
    end
    if dn <= unrep then
      all, unrep, settled = satadd(all, dsum), unrep - dn, settled + dset
    end
  end
  all = satadd(all, min(unrep * size, MAXEXACT))
  local shrinkable = n > 0 and epoch == se and nrep > n and settled < n - ng and share_size(w, share, nrep) < size
  return all, own, released, returns, epoch == se and nn == n and alg == FIXED, true, shrinkable, hprev, hnext
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

-- lift is KeyRecord.lift: a record that lost its windows begins a new
-- generation, raised to the floors (nf of them at args[floors]), its base
-- the floors; floors of an earlier generation (fgen) add what they hold
-- beyond the base (WindowState.Lift) and raise it.
local function lift(rec, ws, floors, nf, fgen)
  local st, nw = rec.st, #ws
  if lost(st) then
    rec.gen, rec.base = now, false
    if nf == nw then
      local b = {}
      for i = 1, nw do
        local f = window_state(args[floors + i - 1]) or {epoch = 0, cur = 0, prev = 0, tat = 0}
        raise(st[i], f)
        b[i] = f
      end
      rec.base = b
    end
    rec.bdirty = true
    return
  end
  if rec.gen == 0 then rec.gen = now end
  if fgen == 0 or fgen >= rec.gen or nf ~= nw then return end
  local b = rec.base or parse_states(rec.b, nw)
  for i = 1, nw do
    local s, w = st[i], ws[i]
    local f = window_state(args[floors + i - 1]) or {epoch = 0, cur = 0, prev = 0, tat = 0}
    local nb = {epoch = b[i].epoch, cur = b[i].cur, prev = b[i].prev, tat = b[i].tat}
    raise(nb, f)
    if alg == BUCKET then
      s.tat = max(s.tat, f.tat)
    else
      roll(s, w)
      s.cur = satadd(s.cur, satsub(count_in(nb, s.epoch), count_in(b[i], s.epoch)))
      s.prev = satadd(s.prev, satsub(count_in(nb, s.epoch - 1), count_in(b[i], s.epoch - 1)))
    end
    b[i] = nb
  end
  rec.base, rec.bdirty = b, true
end

-- rules are the rules the call's keys gave so far, in order, each a list
-- of rule_at's fields (the windows with their current epoch at the call's
-- TIME); false for a call of one key. Nothing writes to a rule once read.
local rules

-- declared_at reads a list of declared shrinks at args[a] (n, then name
-- and count each) into share field → N, the largest if named twice, of
-- counts above n sharers; false if none. It returns where the list ends.
local function declared_at(a, n)
  local nd, declared = num(a), false
  for i = 0, nd - 1 do
    local k = tonum(args[a + 2 + 2 * i])
    if n > 0 and k > n then
      local f = 's:' .. args[a + 1 + 2 * i]
      declared = declared or {}
      declared[f] = max(declared[f] or 0, k)
    end
  end
  return declared, a + 1 + 2 * nd
end

-- rule_at reads the rule whose arguments start at args[a] and returns
-- its fields and where the key's own arguments start.
local function rule_at(a)
  local ra, nw = num(a), num(a + 1)
  local ws = {}
  a = a + 2
  for i = 1, nw do
    local p = tonum(args[a])
    local e = idiv(now, p)
    ws[i] = {p = p, limit = tonum(args[a + 1]), cap = ra == BUCKET and tonum(args[a + 2]) or 0, e = e, s = e * p}
    a = a + 3
  end
  local share, nrep, lease, se = num4(a)
  if share <= 0 or share > 1 then share = 1 end
  if nrep < 1 then nrep = 1 end
  local sharers, nnext, nprev, ng = num(a + 4), num(a + 5), num(a + 6), num(a + 7)
  local gone = {n = 0}
  for i = 1, ng do
    local f = 's:' .. args[a + 7 + i]
    if not gone[f] then
      gone[f] = true
      gone.n = gone.n + 1
    end
  end
  -- the declared shrinks (SyncItem.Shrunk) and those of the epoch before
  -- (SyncItem.ShrunkPrev). They ride in gone (gone.declared,
  -- gone.declaredp), which the call's later keys of the rule share:
  -- nothing writes to either.
  gone.declared, a = declared_at(a + 8 + ng, sharers)
  gone.declaredp, a = declared_at(a, nprev)
  return ra, ws, share, nrep, lease, se, {sharers, nnext, nprev}, gone, a
end

-- fixed_count is the hits st counts in the epoch of now of a rule of one
-- fixed window; 0 for any other rule (KeyRecord.fixedCount).
local function fixed_count(st, ws)
  if alg ~= FIXED or #ws ~= 1 or ws[1].p <= 0 or st[1].epoch ~= ws[1].e then return 0 end
  return st[1].cur
end

-- sync applies the item whose arguments start at args[a] to key and
-- returns its reply and where the next item's arguments start.
local function sync(key, a)
  local ref = num(a)
  local ws, share, nrep, lease, se, ns, gone
  if ref == 0 then
    alg, ws, share, nrep, lease, se, ns, gone, a = rule_at(a + 1)
    if rules then rules[#rules + 1] = {alg, ws, share, nrep, lease, se, ns, gone} end
  else
    alg, ws, share, nrep, lease, se, ns, gone = unpack(rules[ref])
    a = a + 1
  end
  local sharers = ns[1]
  local nw = #ws
  local unused, want, waiting, denied = num4(a)
  local nh = num(a + 4)
  local hits = a + 5
  a = hits + 2 * nh
  local release, nsh = num(a), num(a + 1)
  local shits = a + 2
  a = shits + 2 * nsh
  local nf, fgen = num(a), num(a + 1)
  local floors = a + 2
  local sfloor = window_state(args[floors + nf])
  local lent, borrow, shrink = num(floors + nf + 1), num(floors + nf + 2), num(floors + nf + 3)
  local probe, ahead, rprev = num(floors + nf + 4), num(floors + nf + 5), num(floors + nf + 6)
  local hold, huntil = num(floors + nf + 7), num(floors + nf + 8)
  a = floors + nf + 9

  local rec = load(key, nw)
  local st = rec.st

  -- 2. lift the windows to the replica's floor (KeyRecord.lift), then
  -- charge the hits and the share hits, each to the window it was
  -- admitted in; the share hits to this replica's share record too,
  -- raised to its share floor first.
  local before = fixed_count(st, ws)
  lift(rec, ws, floors, nf, fgen)
  -- a token bucket with shares is charged in the order its units were
  -- spent in (KeyRecord.chargeBucket): the hits of the epochs before the
  -- last, the shares of the epoch two before settled as the last began,
  -- the later hits; then its share records, and the shares of the epoch
  -- before held
  local bucket = alg == BUCKET and se > 0 and nw == 1 and ws[1].cap == ws[1].limit
  local edge = bucket and (ws[1].e - 1) * ws[1].p
  charge(st, ws, hits, nh, 0, false, edge, bucket)
  charge(st, ws, shits, nsh, alg == BUCKET and rec.settled or 0, false, edge, bucket)
  if bucket then
    settle(rec, ws[1], share_fraction(share))
    charge(st, ws, hits, nh, 0, edge, false, true)
    charge(st, ws, shits, nsh, rec.settled, edge, false, true)
  end
  local held, ownheld, released, returns, carry, has, shrinkable, hprev, hnext =
    charge_shares(rec, ws, se, sharers, ns[2], ns[3], gone, share, shits, nsh, release, ahead, sfloor, lent, nrep, shrink, rprev)
  if bucket then hprev = pend(rec, ws[1], se, ns, share_fraction(share), gone) end

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
  if has and alg == SLIDING then -- slidingRoom: now, and at the next epoch's start
    local s = st[1]
    local r = satsub(remaining({epoch = s.epoch, cur = s.cur, prev = satadd(s.prev, hprev), tat = s.tat}, ws[1]), reserved)
    avail = min(avail, r, satsub(ws[1].limit, satadd(s.cur, satadd(reserved, hnext))))
  elseif has and alg == BUCKET then -- bucketRoom: the epoch before's shares charged as this one began
    local w, s = ws[1], st[1]
    local c = {epoch = s.epoch, cur = s.cur, prev = s.prev, tat = s.tat}
    if hprev > 0 then charge_at(c, w, w.e * w.p, hprev) end
    avail = min(avail, satsub(remaining(c, w), reserved),
      satsub(bucket_remaining(c, w, (w.e + 1) * w.p), satadd(reserved, satadd(hnext, bucket_margin(w)))))
  end

  -- 4-6. keep, probe, lend, split, last mile.
  local kept = min(unused, rec.own, avail)
  local probed = min(probe, avail - kept)
  if probed > 0 then
    for i = 1, nw do
      charge_at(st[i], ws[i], now, probed)
      if bucket then charge_at(st[i], ws[i], now, probed, true) end
    end
    avail = avail - probed
  end
  local free = avail - kept
  local loan, took = 0, 0
  if borrow == 1 and has then loan, took = lend(rec, ws, se, sharers, share, share_fraction(share), nrep, gone, free, shrinkable and alg ~= FIXED) end
  free = free - took
  local grant = 0
  if not (alg == FIXED and has and rec.pressed > now) then -- waitersFirst: a pressed fixed window's go to waiters
    grant = min(want, idiv(floor(share * free), nrep))
    if grant == 0 and kept == 0 and want > 0 and dry_gets_one(st, ws, share, nrep, rec.pressed)
        and floor(share * free) > 0 then
      grant = 1
    end
  end
  if waiting > satadd(grant, loan) then grant = max(grant, min(waiting, free)) end

  -- 7. the reservation (written by save, with the windows) lapses at now
  -- + lease; of a rule with shares, at the epoch's end unless it may
  -- carry over, and when the first released share returns if it reaches
  -- into released shares (shareExpiry).
  local credit = kept + grant
  local expires = now + lease
  if has and alg == SLIDING then -- slidingCarry
    local most = idiv(floor(share_fraction(share) * ws[1].limit), 1)
    carry = satadd(satadd(rec.others, credit), satadd(hnext, most)) <= ws[1].limit
  elseif has and alg == BUCKET then -- bucketCarry
    local w = ws[1]
    local most = idiv(floor(share_fraction(share) * w.limit), 1)
    local fixed = satadd(hnext, satadd(most, bucket_margin(w)))
    carry = fixed <= w.cap and satadd(satadd(rec.others, credit), fixed) <= satadd(w.cap, idiv(idiv(w.p, 2), interval(w)))
  end
  if has then
    if not carry then
      local p = ws[1].p
      expires = min(expires, (ws[1].e + 1) * p)
    elseif alg == BUCKET then -- spent by the next epoch's middle (bucketCarry)
      expires = min(expires, (ws[1].e + 2) * ws[1].p - idiv(ws[1].p, 2))
    elseif alg ~= FIXED then -- spent in the next epoch at most (slidingCarry)
      expires = min(expires, (ws[1].e + 2) * ws[1].p)
    end
    if credit > satsub(avail, released) then
      expires = min(expires, returns)
    end
  end
  -- a replica that holds more on its own (SyncItem.Hold) reserves that
  local res, rexp = credit, expires
  if hold > credit and huntil > now then
    res, rexp = hold, huntil
    if credit > 0 then rexp = max(rexp, expires) end
  end
  if res == 0 and rec.owned then
    del(rec, mine)
  end
  local oheld = held - ownheld
  local contended = waiting > satadd(grant, loan) and (satadd(oheld, hnext or 0) > 0 or (has and rec.others > 0))
  if has and ws[1].e ~= se then contended = false end
  if borrow == 1 and loan == 0 and shrinkable and alg ~= FIXED then contended = true end -- the sharers shrink now
  if contended and alg == FIXED then rec.pressed = max(rec.pressed, (ws[1].e + 1) * ws[1].p) end
  local c = 0
  if contended then c = shrinkable and 2 or 1 end
  if before < ws[1].limit and fixed_count(st, ws) >= ws[1].limit then c = c + 4 end -- filled
  return save(key, rec, ws, credit, expires, oheld, c, loan, probed, res, rexp), a
end

-- main syncs the keys of one call, replica argv[1], at one Redis TIME.
local function main(keys, argv)
  now, args = clock(), argv
  mine, myshare = 'r:' .. argv[1], 's:' .. argv[1]
  if #keys > 1 then
    seen, seen_units, seen_exp, seen_w, seen_s, rules = {}, {}, {}, {}, {}, {}
  else
    seen, rules = false, false
  end
  local replies, a = {}, 2
  for k = 1, #keys do
    replies[k], a = sync(keys[k], a)
  end
  return replies
end

return main(KEYS, ARGV)
