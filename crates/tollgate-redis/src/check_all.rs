//! Several limits in one call: [`FleetLimiter::check_all`], its [`Gate`]s and its
//! [`Refused`].
//!
//! A request often answers to several limits at once (per client IP, per API token under
//! its tier, a global budget). Checked one after another, a refusal by a later limit has
//! already spent cells of the earlier ones; `check_all` admits all of them or none, as the
//! core's [`tollgate::check_all`] does on one process.
//!
//! # How
//!
//! One Lua script ([`CHECK_ALL_LUA`]) takes several keys, each with its own quota and cell
//! count, and decides them in order on one `TIME`: at the first key that would refuse it
//! writes nothing and answers which; when every key admits, it writes each key's new TAT.
//! A script runs atomically, so this is all-or-nothing with no window at all, when it can
//! run: on one server always (every key is there), on a cluster when the keys share a hash
//! slot (the keys carry the same hash tag, `{tenant7}:ip:10.0.0.1` and
//! `{tenant7}:token:abc`).
//!
//! Keys in different slots of a cluster cannot be in one script. The limiter groups the
//! gates by slot itself (in the order of each group's first gate), runs one script per group
//! (all-or-nothing within it), and when a later group refuses, gives back what the earlier
//! groups took, latest first, by compare and restore: a key is restored to its TAT before
//! the call only if it still holds exactly the TAT the call wrote.
//!
//! # The bound across slots
//!
//! Never more than any single limit allows: every cell is admitted by its key's own
//! script, under its key's GCRA, so each key keeps `b + floor(W / T)` over any window `W`.
//! What may be lost is the all-or-nothing, and only in the under-admitting direction, for
//! a call refused by a later group:
//!
//! * between the earlier groups' reservation and their give-back (one round trip per
//!   group), their cells are spent: a concurrent check of those keys may be refused on them;
//! * if another call wrote one of those keys in that window, the give-back of that key is
//!   declined (the other call's TAT stands on top of this one's) and its `n` cells stay
//!   spent ([`Stats::refunds_declined`](crate::Stats) counts them);
//! * if the give-back cannot be sent (its master is away), its cells stay spent.
//!
//! So a refused call costs each earlier limit at most its own `n` cells, and nothing when
//! no one else touched the key within a round trip. Put the limit most likely to refuse
//! first, or give the keys one hash tag, and there is no window.
//!
//! # Faults
//!
//! When a group's call fails or is late, the whole call is decided by the fault policy
//! (after giving back what earlier groups took): [`FaultPolicy::FailOpen`] admits every
//! gate, [`FaultPolicy::FailClosed`] refuses at the first gate of that group, and the local
//! fallback ([`FaultPolicy::Local`], [`FaultPolicy::LocalShare`]) decides all the gates
//! together with the core's [`tollgate::check_all`], each at its share of its quota.
//!
//! # Fast path
//!
//! A gate whose key the fast path holds as refused is refused without a round trip (the
//! bound is one Redis would enforce); the keys a script refuses, or whose last cell it
//! admits, are remembered as a check's would be, with the TAT the server holds: a key given
//! twice and refused on the cells its first gate took in the same call is remembered as
//! stored, not as that gate moved it (the script wrote nothing). Leases are not used (as by per-call quotas
//! and waits): the script reads and writes the server's TAT, which counts leased cells.

use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use tollgate::{Quota, Refused};

use crate::admitted::{Admitted, Source};
use crate::conn::Conn;
use crate::engine::{Engine, within_burst};
use crate::fault::FaultPolicy;
use crate::limiter::FleetLimiter;
use crate::script::interval_micros;
use crate::stats::{add, bump};

/// The script. KEYS are the gates' keys (a key may repeat: later gates see earlier gates'
/// writes). ARGV\[1\] is `check` or `refund`; for `check`, three per gate follow:
/// `interval_us, burst, n`; for `refund`, two per gate: `prev, new` (the TAT before and
/// after the gate's admission). `check` answers `{i, now, wait, ahead}` when gate `i`
/// (1-based) refuses, having written nothing (`wait` counts the cells earlier gates of the
/// call took of the same key; `ahead` is the key's TAT as the server holds it, the only
/// bound the fast path may learn), else `{0, now}` followed by five per gate:
/// `remaining, reset_after, ahead, prev, new`. `refund` restores each gate's `prev`, latest
/// first, where its key still holds its `new`, and answers `{now, declined}`. The
/// arithmetic is `script.rs`'s (integer µs below 2^53; see its docs), for several keys.
pub(crate) const CHECK_ALL_LUA: &str = r#"
-- tollgate-redis: several GCRA limits all-or-nothing (see src/check_all.rs).
local MAX_AHEAD = 1125899906842624 -- 2^50 us, as in the single-key script
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function idiv(a, c)
  local q = math.floor(a / c)
  if q * c > a then
    q = q - 1
  elseif (q + 1) * c <= a then
    q = q + 1
  end
  return q
end

local function store(key, x)
  if x > now then
    redis.call('SET', key, string.format('%.0f', x),
      'PXAT', string.format('%.0f', idiv(x + 999, 1000)))
  else
    redis.call('DEL', key)
  end
end

local function ahead(x)
  if x > now then return x - now end
  return 0
end

if ARGV[1] == 'refund' then
  local declined = 0
  for i = #KEYS, 1, -1 do
    local prev = tonumber(ARGV[2 * i])
    local new = tonumber(ARGV[2 * i + 1])
    if new ~= prev then
      local v = redis.call('GET', KEYS[i])
      if v and tonumber(v) == new then store(KEYS[i], prev) else declined = declined + 1 end
    end
  end
  return {now, declined}
end

local tats = {}  -- each key's TAT as the gates so far left it
local read = {} -- each key's TAT as read, so that a key only looked at is not written
local out = {0, now}
for i = 1, #KEYS do
  local key = KEYS[i]
  local T = tonumber(ARGV[3 * i - 1])
  local b = tonumber(ARGV[3 * i])
  local n = tonumber(ARGV[3 * i + 1])
  local tau = (b - 1) * T
  local tat = tats[key]
  if tat == nil then
    local v = redis.call('GET', key)
    tat = 0
    if v then tat = tonumber(v) or 0 end
    if tat > now + MAX_AHEAD then tat = now + MAX_AHEAD end
    read[key] = tat
  end
  local new = tat
  if n > 0 then
    local tat0 = tat
    if tat0 < now then tat0 = now end
    local admit_at = tat0 + (n - 1) * T - tau
    -- The TAT as read, not as earlier gates of this call moved it: nothing is written on
    -- a refusal, and the caller's fast path may only learn what the server holds.
    if admit_at > now then return {i, now, admit_at - now, ahead(read[key])} end
    new = tat0 + n * T
    if new > now + MAX_AHEAD then new = now + MAX_AHEAD end
  end
  tats[key] = new
  local slack = now + tau - new
  local rem = 0
  if slack >= tau then rem = b elseif slack >= 0 then
    rem = idiv(slack, T) + 1
    if rem > b then rem = b end
  end
  local after = ahead(new)
  local p = #out
  out[p + 1] = rem
  out[p + 2] = after
  out[p + 3] = after
  out[p + 4] = tat
  out[p + 5] = new
end
for key, x in pairs(tats) do
  if x ~= read[key] then store(key, x) end
end
return out
"#;

/// [`CHECK_ALL_LUA`], with its SHA-1 computed once.
static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(CHECK_ALL_LUA));

/// One limit of a [`FleetLimiter::check_all`]: a key, the cells asked for (1 unless
/// [`n`](Gate::n) says otherwise) and the quota (the limiter's unless
/// [`quota`](Gate::quota) says otherwise). The gates of one call are checked by one
/// limiter, on its connection and with its prefix: a limiter is one connection and a
/// family of keys, and the quota is per gate.
///
/// # Examples
///
/// ```
/// use tollgate::Quota;
/// use tollgate_redis::Gate;
///
/// let gate = Gate::new("token:abc").n(2).quota(Quota::per_second(100));
/// assert_eq!(gate.key(), b"token:abc");
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
#[must_use = "a gate does nothing until it is checked with FleetLimiter::check_all"]
pub struct Gate<'a> {
    key: &'a [u8],
    n: u32,
    quota: Option<Quota>,
}

impl<'a> Gate<'a> {
    /// One cell of `key` under the limiter's quota.
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = tollgate_redis::Gate::new("ip:10.0.0.1");
    /// assert_eq!(gate.key(), b"ip:10.0.0.1");
    /// ```
    pub fn new<K: AsRef<[u8]> + ?Sized>(key: &'a K) -> Gate<'a> {
        Gate {
            key: key.as_ref(),
            n: 1,
            quota: None,
        }
    }

    /// Asks for `n` cells instead of one (0: admitted without spending, as a peek).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// use tollgate::Quota;
    /// use tollgate_redis::{FaultPolicy, FleetLimiter, Gate};
    ///
    /// // No Redis on port 1: the call fails open, and says what it would have spent.
    /// let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// let limiter = FleetLimiter::builder(Quota::per_second(10))
    ///     .fault_policy(FaultPolicy::FailOpen)
    ///     .connect(client)
    ///     .await?;
    /// let [ok] = limiter.check_all([Gate::new("upload:alice").n(8)]).await.unwrap();
    /// assert_eq!((ok.limit(), ok.remaining()), (10, 2));
    /// # Ok(()) }
    /// ```
    pub fn n(mut self, n: u32) -> Self {
        self.n = n;
        self
    }

    /// Checks under `quota` instead of the limiter's (a token's tier, the global budget).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// use tollgate::Quota;
    /// use tollgate_redis::{FaultPolicy, FleetLimiter, Gate};
    ///
    /// // No Redis on port 1: the call fails open, under each gate's own quota.
    /// let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// let limiter = FleetLimiter::builder(Quota::per_second(10))
    ///     .fault_policy(FaultPolicy::FailOpen)
    ///     .connect(client)
    ///     .await?;
    /// let global = Quota::per_second(10_000);
    /// let [ip, all] = limiter
    ///     .check_all([Gate::new("ip:10.0.0.1"), Gate::new("global").quota(global)])
    ///     .await
    ///     .unwrap();
    /// assert_eq!((ip.limit(), all.limit()), (10, 10_000));
    /// # Ok(()) }
    /// ```
    pub fn quota(mut self, quota: Quota) -> Self {
        self.quota = Some(quota);
        self
    }

    /// The key, as given (without the limiter's prefix).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate_redis::Gate::new("k").key(), b"k");
    /// ```
    pub fn key(&self) -> &'a [u8] {
        self.key
    }
}

impl fmt::Debug for Gate<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("key", &String::from_utf8_lossy(self.key))
            .field("n", &self.n)
            .field("quota", &self.quota)
            .finish()
    }
}

/// A gate resolved: its Redis key and quota.
struct Planned {
    key: Vec<u8>,
    n: u32,
    quota: Quota,
    interval_us: u64,
    burst: u32,
}

/// A group the call has admitted: its gates' indices, and each gate's `(prev, new)` TATs,
/// to give back if a later group refuses.
type Taken<'g> = (&'g [usize], Vec<(u64, u64)>);

/// What a group's script did.
enum GroupReply {
    /// Every gate admitted: per gate, the admission and its `(prev, new)` TATs.
    Admitted(Vec<(Admitted, (u64, u64))>),
    /// Gate `index` (within the group) refused: the wait, and its key's TAT ahead of now as
    /// the server holds it (not as earlier gates of the call moved it: nothing was written).
    Refused {
        index: usize,
        wait_us: u64,
        ahead_us: u64,
        now_us: u64,
    },
}

impl FleetLimiter {
    /// Checks every gate and admits all of them, or none: one script when the keys can be
    /// in one (always on one server; on a cluster when they share a hash slot), else one
    /// script per slot with the earlier slots' cells given back on a refusal (the bound is
    /// in the module docs, `src/check_all.rs`: never more than any single limit allows; a
    /// refused call costs an earlier limit at most its `n` cells, and only when another
    /// call wrote that key within the round trip). On a cluster, give the keys one hash tag
    /// (`{t7}:ip:…`, `{t7}:token:…`) for the single script; a global key cannot share every
    /// client's slot, and costs the slot-by-slot path.
    ///
    /// Counted once per call in [`Stats`](crate::Stats) (`admitted` or `limited`, and
    /// `local_refusals` when the fast path refused a gate).
    ///
    /// # Errors
    ///
    /// [`Refused`]: the refusing gate's index and its [`Error`](tollgate::Error):
    /// [`Error::InsufficientCapacity`](tollgate::Error::InsufficientCapacity) for a gate asking more than its burst (nothing sent),
    /// else [`Error::RateLimited`](tollgate::Error::RateLimited). When Redis fails or is late, the fault policy decides the
    /// whole call (module docs).
    ///
    /// # Cancel safety
    ///
    /// Dropped while a group's call is in flight, the cells that call and the earlier groups
    /// took stay spent (as a timed-out check's may).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// use tollgate::Quota;
    /// use tollgate_redis::Gate;
    ///
    /// let (ip, token, tier) = ("ip:10.0.0.1", "token:abc", Quota::per_second(100));
    /// let global = Quota::per_second(1_000);
    /// match limiter
    ///     .check_all([
    ///         Gate::new(ip),                       // the limiter's quota
    ///         Gate::new(token).quota(tier),        // the token's tier
    ///         Gate::new("global").quota(global),   // one budget for everyone
    ///     ])
    ///     .await
    /// {
    ///     Ok([per_ip, per_token, _]) => assert!(per_ip.remaining() < per_ip.limit()),
    ///     Err(refused) => assert!(refused.error.retry_after().is_some()), // 429
    /// }
    /// # }
    /// ```
    ///
    /// A gate that asks more than its burst is refused before any call, the others
    /// untouched ([`Refused`] is the core's):
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// use tollgate::Quota;
    /// use tollgate_redis::{FleetLimiter, Gate};
    ///
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?; // never asked
    /// let limiter = FleetLimiter::builder(Quota::per_second(10)).connect(client).await?;
    /// let refused = limiter
    ///     .check_all([Gate::new("ip:10.0.0.1"), Gate::new("upload").n(11)])
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!(refused.index, 1);
    /// assert!(refused.error.is_insufficient_capacity());
    /// assert_eq!(limiter.stats().round_trips, 0);
    /// # Ok(()) }
    /// ```
    pub async fn check_all<const N: usize>(
        &self,
        gates: [Gate<'_>; N],
    ) -> Result<[Admitted; N], Refused> {
        self.inner.check_all(gates).await
    }
}

impl Engine {
    async fn check_all<const N: usize>(
        &self,
        gates: [Gate<'_>; N],
    ) -> Result<[Admitted; N], Refused> {
        let c = &self.counters;
        let mut plans = Vec::with_capacity(N);
        for (index, g) in gates.iter().enumerate() {
            let quota = g.quota.unwrap_or(self.quota);
            let burst = within_burst(g.n, quota).map_err(|error| Refused::new(index, error))?;
            plans.push(Planned {
                key: self.redis_key(g.key),
                n: g.n,
                quota,
                interval_us: interval_micros(quota),
                burst,
            });
        }
        if N == 0 {
            return Ok(std::array::from_fn(|_| unreachable!("no gates")));
        }
        // The fast path: a key held as refused is refused here.
        if let Some(cache) = &self.cache
            && let Some(server_now) = self.server.clock.upper(Instant::now())
        {
            for (index, p) in plans.iter().enumerate() {
                if p.n > 0
                    && let Some(wait) = cache.wait(&p.key, server_now, p.n, p.interval_us, p.burst)
                {
                    bump(&c.local_refusals);
                    let error = self.limited(wait, p.burst);
                    return Err(Refused::new(index, error));
                }
            }
        }
        let groups = self.groups(&plans);
        let mut out: Vec<Option<Admitted>> = vec![None; N];
        // The groups admitted so far, with each gate's (prev, new), to give back.
        let mut taken: Vec<Taken<'_>> = Vec::new();
        for group in &groups {
            match self.run_group(&plans, group).await {
                Ok(GroupReply::Admitted(admitted)) => {
                    let mut tats = Vec::with_capacity(group.len());
                    for (&i, (ok, prev_new)) in group.iter().zip(admitted) {
                        if ok.remaining == 0 && plans[i].n > 0 {
                            self.remember_tat(&plans[i].key, prev_new.1, ok.reset_after);
                        }
                        out[i] = Some(ok);
                        tats.push(prev_new);
                    }
                    taken.push((group, tats));
                }
                Ok(GroupReply::Refused {
                    index,
                    wait_us,
                    ahead_us,
                    now_us,
                }) => {
                    let i = group[index];
                    bump(&c.limited);
                    if let Some(cache) = &self.cache
                        && ahead_us > 0
                    {
                        cache.raise(&plans[i].key, now_us + ahead_us, i128::from(now_us) * 1_000);
                    }
                    self.give_back(&plans, &taken).await;
                    let error = self.limited(Duration::from_micros(wait_us), plans[i].burst);
                    return Err(Refused::new(i, error));
                }
                Err(()) => {
                    self.give_back(&plans, &taken).await;
                    return self.all_on_fault(&gates, &plans, group[0]);
                }
            }
        }
        bump(&c.admitted);
        Ok(std::array::from_fn(|i| {
            out[i].take().expect("every gate admitted")
        }))
    }

    /// The gates' indices grouped by what one script may take: all of them on one server,
    /// by hash slot on a cluster, in the order of each group's first gate.
    fn groups(&self, plans: &[Planned]) -> Vec<Vec<usize>> {
        if !self.server.link.is_cluster() {
            return vec![(0..plans.len()).collect()];
        }
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut by_slot: HashMap<u16, usize> = HashMap::new();
        for (i, p) in plans.iter().enumerate() {
            let g = *by_slot.entry(crate::conn::slot(&p.key)).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(i);
        }
        groups
    }

    /// Runs the script on one group; `Err` when Redis failed or was late (counted).
    async fn run_group(&self, plans: &[Planned], group: &[usize]) -> Result<GroupReply, ()> {
        let call = |conn: Conn| {
            conn.eval(
                &SCRIPT,
                CHECK_ALL_LUA,
                |cmd| {
                    script_keys(cmd, plans, group);
                    cmd.arg("check");
                    for &i in group {
                        let p = &plans[i];
                        cmd.arg(p.interval_us).arg(p.burst).arg(p.n);
                    }
                },
                || self.counters.observer.script_reload(&self.counters),
            )
        };
        let sent = Instant::now();
        let values: Vec<i64> = self
            .server
            .call(&self.counters, &plans[group[0]].key, "check_all", call)
            .await
            .map_err(|_| ())?;
        let bad = || {
            bump(&self.counters.faults);
        };
        match values.as_slice() {
            [0, now, rest @ ..] if rest.len() == 5 * group.len() => {
                let now = u64::try_from(*now).map_err(|_| bad())?;
                self.server.clock.observe(sent, Instant::now(), now);
                let mut admitted = Vec::with_capacity(group.len());
                for (&i, v) in group.iter().zip(rest.chunks_exact(5)) {
                    let u = |x: i64| u64::try_from(x).map_err(|_| bad());
                    admitted.push((
                        Admitted {
                            limit: plans[i].burst,
                            remaining: u32::try_from(v[0]).map_err(|_| bad())?,
                            reset_after: Duration::from_micros(u(v[1])?),
                            source: Source::Redis,
                        },
                        (u(v[3])?, u(v[4])?),
                    ));
                }
                Ok(GroupReply::Admitted(admitted))
            }
            &[i, now, wait, ahead] if i >= 1 && (i as usize) <= group.len() => {
                let now_us = u64::try_from(now).map_err(|_| bad())?;
                self.server.clock.observe(sent, Instant::now(), now_us);
                Ok(GroupReply::Refused {
                    index: i as usize - 1,
                    wait_us: u64::try_from(wait).map_err(|_| bad())?,
                    ahead_us: u64::try_from(ahead).map_err(|_| bad())?,
                    now_us,
                })
            }
            _ => {
                bad();
                Err(())
            }
        }
    }

    /// Gives back what the admitted groups took, latest first (compare and restore, one
    /// call per group); a declined or failed give-back leaves the cells spent (counted in
    /// `refunds_declined`).
    async fn give_back(&self, plans: &[Planned], taken: &[Taken<'_>]) {
        for (group, tats) in taken.iter().rev() {
            if let Some(cache) = &self.cache {
                for &i in group.iter() {
                    cache.remove(&plans[i].key);
                }
            }
            let call = |conn: Conn| {
                conn.eval(
                    &SCRIPT,
                    CHECK_ALL_LUA,
                    |cmd| {
                        script_keys(cmd, plans, group);
                        cmd.arg("refund");
                        for &(prev, new) in tats {
                            cmd.arg(prev).arg(new);
                        }
                    },
                    || self.counters.observer.script_reload(&self.counters),
                )
            };
            let reply: Result<(u64, u64), _> = self
                .server
                .call(
                    &self.counters,
                    &plans[group[0]].key,
                    "check_all_refund",
                    call,
                )
                .await;
            let declined = match reply {
                Ok((_, declined)) => declined,
                Err(_) => tats.iter().filter(|(p, n)| p != n).count() as u64,
            };
            add(&self.counters.refunds_declined, declined);
        }
    }

    /// Keeps a key's TAT (`reset_after` ahead of the server's clock when it answered) in the
    /// fast path, after its last cell was admitted.
    fn remember_tat(&self, key: &[u8], tat_us: u64, reset_after: Duration) {
        if let Some(cache) = &self.cache {
            let now_us = tat_us.saturating_sub(reset_after.as_micros() as u64);
            cache.raise(key, tat_us, i128::from(now_us) * 1_000);
        }
    }

    /// The fault policy's answer for the whole call; `first` is the first gate whose call
    /// failed.
    fn all_on_fault<const N: usize>(
        &self,
        gates: &[Gate<'_>; N],
        plans: &[Planned],
        first: usize,
    ) -> Result<[Admitted; N], Refused> {
        let c = &self.counters;
        match self.policy {
            FaultPolicy::FailOpen => {
                bump(&c.failed_open);
                Ok(std::array::from_fn(|i| {
                    let p = &plans[i];
                    Admitted {
                        limit: p.burst,
                        remaining: p.burst - p.n,
                        reset_after: p.quota.interval().saturating_mul(p.n),
                        source: Source::FailOpen,
                    }
                }))
            }
            FaultPolicy::FailClosed { retry_after } => {
                bump(&c.failed_closed);
                let error = self.limited(retry_after, plans[first].burst);
                Err(Refused::new(first, error))
            }
            FaultPolicy::Local { .. } | FaultPolicy::LocalShare => {
                let mut fallback = None;
                let mut shares = Vec::with_capacity(N);
                for (index, p) in plans.iter().enumerate() {
                    let (limiter, share) = self
                        .fallback_share(p.quota, p.n)
                        .map_err(|error| Refused::new(index, error))?;
                    fallback = Some(limiter);
                    shares.push(share);
                }
                let fallback = fallback.expect("at least one gate");
                let local: [tollgate::Gate<'_>; N] = std::array::from_fn(|i| {
                    fallback
                        .gate(&plans[i].key[..])
                        .n(gates[i].n)
                        .quota(shares[i])
                });
                tollgate::check_all(local).map(|oks| {
                    oks.map(|ok| Admitted {
                        limit: ok.limit(),
                        remaining: ok.remaining(),
                        reset_after: ok.reset_after(),
                        source: Source::Local,
                    })
                })
            }
        }
    }
}

/// The script's keys for `group`: their count, then each gate's key (`CHECK_ALL_LUA`).
fn script_keys(cmd: &mut redis::Cmd, plans: &[Planned], group: &[usize]) {
    cmd.arg(group.len());
    for &i in group {
        cmd.arg(&plans[i].key);
    }
}
