-- Shared helpers, prepended to every script. They port the integer maths
-- of package limiter to Lua, whose numbers are doubles: every value stays
-- an integer below 2^53, where doubles are exact, and no product that may
-- pass 2^53 is ever formed.

-- Scripts read TIME and then write: replicate their effects (a no-op
-- from Redis 5, where it is the default).
if redis.replicate_commands then redis.replicate_commands() end

-- The library functions the scripts call per key, as locals: a global is
-- a lookup in the globals table, and a library function one more in its
-- module's.
local floor, min, max = math.floor, math.min, math.max
local format, match, find, sub = string.format, string.match, string.find, string.sub
local tonumber, pairs, unpack, concat = tonumber, pairs, unpack, table.concat
local call = redis.call

-- now is the store clock: Redis TIME in Unix microseconds.
local function clock()
  local t = call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- idiv is Go's a / b for integers: the quotient truncated toward zero.
-- b > 0. The double quotient is off by at most one; the remainder, exact,
-- corrects it.
local function idiv(a, b)
  local neg = a < 0
  if neg then a = -a end
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  if neg then return -q end
  return q
end

-- muldiv is ⌊a·b/c⌋ and a·b mod c without forming a·b (bits.Mul64 then
-- bits.Div64 in Go): binary long multiplication over b's bits from the
-- top, keeping the remainder below c. a, b, c and the quotient < 2^53.
local function muldiv(a, b, c)
  local aq = idiv(a, c)
  local ar = a - aq * c
  local q, r = 0, 0
  local bit = 4503599627370496 -- 2^52
  while bit >= 1 do
    q = q * 2
    if r >= c - r then
      r, q = r - (c - r), q + 1
    else
      r = r + r
    end
    if b >= bit then
      b = b - bit
      q = q + aq
      if r >= c - ar then
        r, q = r - (c - ar), q + 1
      else
        r = r + ar
      end
    end
    bit = bit / 2
  end
  return q, r
end

-- MAXEXACT is 2^53 - 1 (limiter.MaxExact): counts and instants saturate
-- there instead of losing precision, as the Go reference's records do.
local MAXEXACT = 9007199254740991

local function satadd(a, b)
  local s = a + b
  if s > MAXEXACT then return MAXEXACT end
  return s
end

local function satsub(a, b)
  if b >= a then return 0 end
  return a - b
end

local function fmt(n)
  return format('%d', n)
end

-- ceilms is the first millisecond at which Redis may expire a key that
-- must live until the microsecond us: Redis expires a key once its
-- millisecond clock is past the deadline.
local function ceilms(us)
  return fmt(idiv(us + 999, 1000))
end

-- parse_reservation splits "units expires".
local function parse_reservation(v)
  local i = find(v, ' ', 1, true)
  return tonumber(sub(v, 1, i - 1)), tonumber(sub(v, i + 1))
end
