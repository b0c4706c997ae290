//! The GCRA as one Lua script on the server, and the integer quota it takes.
//!
//! # Exactness
//!
//! Lua 5.1 (Redis, Valkey) has only doubles, which hold every integer below 2^53 exactly;
//! a sum, difference or product of such integers whose result is also below 2^53 is exact.
//! The script therefore works in integer **microseconds** (the resolution of the server's
//! `TIME`) and keeps every value below 2^53:
//!
//! * `now` is the Unix time in µs: about 1.8·10^15 in 2026, below 2^53 (9.0·10^15) until
//!   the year 2255, and below the script's own ceiling of `2^53 - 2^52` (so that a TAT may
//!   run `2^51` ahead) until the year 2112;
//! * a quota's window `burst × interval` is at most 2^59 ns (`tollgate::Quota` validates it),
//!   5.8·10^14 µs < 2^50 µs, so `tau` and `n·T` are below 2^50;
//! * a stored TAT is clamped to `now + 2^50` on every read and write (35 years ahead, like the
//!   core's saturating TAT), and a penalty to 2^49 µs; so `tat0 + (n-1)·T` is below
//!   `now + 2^51`, and every intermediate value is below 2^53;
//! * the one division (`floor(slack / T)` for `remaining`, and `ceil(tat / 1000)` for the
//!   expiry in ms) is done as `math.floor(a / b)` and then corrected by one step up or down
//!   against exact products, so it is the exact integer quotient;
//! * numbers go to Redis and back as decimal strings written with `%.0f` (exact for integers
//!   below 2^53), never through Lua's `tostring` (14 significant digits).
//!
//! A quota's interval is in whole nanoseconds; the script's is its ceiling in whole
//! microseconds ([`interval_micros`]), so rounding never admits more than asked for.

use std::time::Duration;

use tollgate::Quota;

/// The script. KEYS\[1\] is the key; ARGV is `op, interval_us, burst, n, arg_us, written`
/// (and for leases `unspent`) with `op` one of `check`, `peek`, `penalize` (`arg_us`: the
/// delay), `reserve` (`arg_us`: the longest wait), `refund` (`arg_us`: the TAT to restore,
/// `written`: the TAT the reservation stored), `lease` (up to `n` cells available now, at
/// least `arg_us`; first gives back `unspent` cells of the lease that stored `written`) and
/// `giveback` (that give-back alone). It answers `{admitted, remaining, after_us, tat_ahead_us, now_us}`:
/// `after_us` is the reset time if admitted and the wait if not (for `reserve`, the wait
/// until the reserved instant); `tat_ahead_us` is how far the key's stored TAT is ahead of
/// the server's `now` after the call (0 if not ahead); `now_us` is the server's `TIME`, from
/// which the node bounds its offset to the server (`offset.rs`). An admitted `reserve`
/// appends `prev, new`: the TAT it replaced and the TAT it stored. An eighth argument, a
/// `now` later than `TIME`, replaces `TIME`: only the tests pass it, to run schedules on a
/// simulated clock (a clock only moved forward, so keys' expiries stay in the future).
pub(crate) const GCRA_LUA: &str = r#"
-- tollgate-redis: GCRA in integer microseconds (see src/script.rs for why it is exact).
-- Replicated by effects (the default since Redis 5, the only mode since 7), so reading TIME
-- before writing is allowed and replicas store the same TAT.
local MAX_AHEAD = 1125899906842624 -- 2^50 us: how far ahead a TAT may be stored
local MAX_DELAY = 562949953421312  -- 2^49 us: the longest penalty or wait
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
-- Tests only: ARGV[8], a `now` in us at or after TIME, runs the arithmetic on a simulated
-- clock (tests/lease_bound.rs). The limiter never passes an eighth argument.
if ARGV[8] and tonumber(ARGV[8]) > now then now = tonumber(ARGV[8]) end
local op = ARGV[1]
local T = tonumber(ARGV[2])
local b = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local tau = (b - 1) * T

-- floor(a / c) for integers 0 <= a, 0 < c with a + c < 2^53: the double quotient is within
-- one of the truth, and the products that correct it are exact.
local function idiv(a, c)
  local q = math.floor(a / c)
  if q * c > a then
    q = q - 1
  elseif (q + 1) * c <= a then
    q = q + 1
  end
  return q
end

local tat = 0
local v = redis.call('GET', KEYS[1])
if v then tat = tonumber(v) or 0 end
if tat > now + MAX_AHEAD then tat = now + MAX_AHEAD end

local function store(x)
  if x > now + MAX_AHEAD then x = now + MAX_AHEAD end
  redis.call('SET', KEYS[1], string.format('%.0f', x),
    'PXAT', string.format('%.0f', idiv(x + 999, 1000)))
  return x
end

-- Single cells admissible at instant `at` once x is stored.
local function remaining(x, at)
  local slack = at + tau - x
  if slack < 0 then return 0 end
  if slack >= tau then return b end
  local k = idiv(slack, T) + 1
  if k > b then k = b end
  return k
end

local function ahead(x)
  if x > now then return x - now end
  return 0
end

if op == 'refund' then
  -- Compare and restore: only if the key still holds exactly what the reservation wrote.
  local prev = tonumber(ARGV[5])
  if v and tat == tonumber(ARGV[6]) then
    if prev > now then store(prev) else redis.call('DEL', KEYS[1]) end
    return {1, 0, 0, ahead(prev), now}
  end
  return {0, 0, 0, ahead(tat), now}
end

-- Gives back u = ARGV[7] cells of a lease that stored `w` = ARGV[6], compare and restore:
-- only if the key still holds exactly `w`, the TAT moves back by u*T (the key then holds
-- what a lease of the cells spent would have left). Answers 1 if given back.
local function giveback(w, u)
  if u <= 0 or w <= 0 or not v or tat ~= w then return 0 end
  local back = w - u * T
  if back > now then tat = store(back) else redis.call('DEL', KEYS[1]); tat = 0 end
  return 1
end

if op == 'giveback' then
  local back = giveback(tonumber(ARGV[6]), tonumber(ARGV[7]))
  return {back, 0, 0, ahead(tat), now}
end

if op == 'lease' then
  -- Up to n cells available now (never a wait), at least ARGV[5] (the caller's own need),
  -- after giving back an expired lease's cells. Answers the script's five values, then
  -- prev, new, granted, given back.
  local back = giveback(tonumber(ARGV[6]), tonumber(ARGV[7]))
  local need = tonumber(ARGV[5])
  local avail = remaining(tat, now)
  local g = n
  if avail < g then g = avail end
  local tat0 = tat
  if tat0 < now then tat0 = now end
  if g < need or g == 0 then
    local wait = tat0 + (need - 1) * T - tau - now
    if wait < 1 then wait = 1 end
    return {0, 0, wait, ahead(tat), now, 0, 0, 0, back}
  end
  local new = store(tat0 + g * T)
  return {1, remaining(new, now), new - now, new - now, now, tat, new, g, back}
end

if op == 'penalize' then
  local d = tonumber(ARGV[5])
  if d > MAX_DELAY then d = MAX_DELAY end
  local target = now + d + tau
  if target > tat then tat = store(target) end
  return {1, remaining(tat, now), ahead(tat), ahead(tat), now}
end

if n == 0 then
  return {1, remaining(tat, now), ahead(tat), ahead(tat), now}
end

local tat0 = tat
if tat0 < now then tat0 = now end
local admit_at = tat0 + (n - 1) * T - tau
if op == 'reserve' then
  local wait = admit_at - now
  if wait < 0 then wait = 0 end
  if wait > tonumber(ARGV[5]) then return {0, 0, wait, ahead(tat), now} end
  local new = store(tat0 + n * T)
  return {1, remaining(new, now + wait), wait, new - now, now, tat, new}
end
if admit_at <= now then
  local new = tat0 + n * T
  if new > now + MAX_AHEAD then new = now + MAX_AHEAD end
  if op == 'check' then
    store(new)
    return {1, remaining(new, now), new - now, new - now, now}
  end
  return {1, remaining(new, now), new - now, ahead(tat), now}
end
return {0, 0, admit_at - now, ahead(tat), now}
"#;

/// A quota's interval in whole microseconds, rounded up (at least 1 µs): the interval the
/// server's script enforces. Intervals that are whole microseconds are kept exactly; others
/// are rounded up, so rounding never admits more than the quota asks for.
///
/// # Examples
///
/// ```
/// use tollgate::Quota;
/// use tollgate_redis::interval_micros;
///
/// assert_eq!(interval_micros(Quota::per_second(100)), 10_000);
/// assert_eq!(interval_micros(Quota::per_second(3)), 333_334); // 333_333_334 ns, rounded up
/// assert_eq!(interval_micros(Quota::per_second(2_000_000)), 1); // 500 ns: at most 1/µs
/// ```
pub fn interval_micros(quota: Quota) -> u64 {
    let nanos = quota.interval().as_nanos();
    u64::try_from(nanos.div_ceil(1_000))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// `d` in whole microseconds, rounded up, capped where the script caps it anyway.
pub(crate) fn micros_ceil(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000))
        .unwrap_or(u64::MAX)
        .min(1 << 49)
}

/// The script's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) admitted: bool,
    pub(crate) remaining: u32,
    /// Reset time if admitted, wait if refused (for a reservation: the wait).
    pub(crate) after_us: u64,
    /// How far the stored TAT is ahead of the server's `now`.
    pub(crate) tat_ahead_us: u64,
    /// The server's `TIME`, in µs.
    pub(crate) now_us: u64,
    /// A reservation's `(prev, new)` TATs.
    pub(crate) reserved: Option<(u64, u64)>,
    /// A lease's `(granted, given back)`.
    pub(crate) lease: Option<(u32, bool)>,
}

impl Reply {
    pub(crate) fn from_values(v: &[i64]) -> Option<Reply> {
        let u = |x: i64| u64::try_from(x).ok();
        let (head, reserved) = match *v {
            [a, r, af, ah, now] => ([a, r, af, ah, now], None),
            [a, r, af, ah, now, prev, new] => ([a, r, af, ah, now], Some((u(prev)?, u(new)?))),
            [a, r, af, ah, now, prev, new, granted, back] => {
                let lease = Some((u32::try_from(granted).ok()?, back == 1));
                let head = [a, r, af, ah, now];
                let r = Reply::from_values(&head)?;
                return Some(Reply {
                    reserved: (a == 1).then_some((u(prev)?, u(new)?)),
                    lease,
                    ..r
                });
            }
            _ => return None,
        };
        let [admitted, remaining, after, ahead, now] = head;
        Some(Reply {
            admitted: admitted == 1,
            remaining: u32::try_from(remaining).ok()?,
            after_us: u(after)?,
            tat_ahead_us: u(ahead)?,
            now_us: u(now)?,
            reserved,
            lease: None,
        })
    }

    /// The key's TAT on the server's clock, in µs, after the call.
    pub(crate) fn tat_us(&self) -> u64 {
        self.now_us + self.tat_ahead_us
    }
}
