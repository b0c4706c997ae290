//! The engine: one limiter's state and the decision every public method and every wait
//! shares.
//!
//! Apart from the public [`FleetLimiter`](crate::FleetLimiter), which only delegates here,
//! so that a wait ([`UntilReady`](crate::UntilReady), `wait.rs`) can hold the engine and
//! decide with it without importing the public type that builds waits.
//!
//! A check goes: from a lease held here, without a round trip (`lease.rs`); else refused by
//! the fast path's bound, or made the key's one probe (`cache.rs`); else the script's
//! answer (`server.rs`), which raises the fast path's bound when it refuses or spends the
//! last cell; and when Redis fails or is late, the fault policy (`fault.rs`) answers.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::{Clock, Error, Limiter, MonotonicClock, Quota};

use crate::admitted::{Admitted, Source};
use crate::cache::{LocalCache, Lookup, ProbeGuard};
use crate::conn::Conn;
use crate::fault::{FaultPolicy, Unavailable, share};
use crate::lease::{Lease, LeaseStore, Spend};
use crate::presence::Presence;
use crate::script::{Reply, interval_micros, micros_ceil};
use crate::server::{Arg, Server};
use crate::stats::{Counters, Stats, add, bump};

/// One limiter's state: shared by its clones (through [`FleetLimiter`](crate::FleetLimiter))
/// and by its waits.
pub(crate) struct Engine {
    pub(crate) server: Server,
    pub(crate) quota: Quota,
    pub(crate) prefix: Vec<u8>,
    pub(crate) policy: FaultPolicy,
    pub(crate) cache: Option<LocalCache>,
    pub(crate) lease: Option<Leasing>,
    pub(crate) fallback: Option<Limiter<[u8]>>,
    pub(crate) clock: MonotonicClock,
    pub(crate) counters: Counters,
    /// This node's presence entry, under [`FaultPolicy::LocalShare`].
    pub(crate) presence: Option<Arc<Presence>>,
}

/// Leasing's settings and store.
pub(crate) struct Leasing {
    pub(crate) cells: u32,
    pub(crate) max_hold: Duration,
    pub(crate) store: LeaseStore,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetLimiter")
            .field("quota", &self.quota)
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .field("timeout", &self.server.timeout)
            .field("policy", &self.policy)
            .field("cache", &self.cache.is_some())
            .field("lease", &self.lease.as_ref().map(|l| (l.cells, l.max_hold)))
            .finish_non_exhaustive()
    }
}

/// What a decision does to the key: spend its cells, or only look.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Check,
    Peek,
}

/// The Redis key of the limiter's own `name` (the presence set: `prefix + "\0{fleet}"`),
/// which no client's key can name.
///
/// Every byte string is some client's key, and a client's key is stored at `prefix + key`,
/// so an internal key at `prefix + name` would be a client's key too: a client named
/// `{fleet}` (any header a proxy keys on can say so) would run the GCRA script on the
/// presence set (a type error on every check, each logged as an outage) and a reset of it
/// would delete the fleet's count. Internal keys start with one NUL byte after the prefix,
/// and a client's key that starts with a NUL byte gets a second one before it
/// ([`Engine::redis_key`]): the mapping stays one-to-one, and no client's key starts with a
/// single NUL byte followed by anything else.
pub(crate) fn internal_key(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    debug_assert!(name.first() != Some(&0));
    let mut k = Vec::with_capacity(prefix.len() + 1 + name.len());
    k.extend_from_slice(prefix);
    k.push(0);
    k.extend_from_slice(name);
    k
}

impl Engine {
    /// The Redis key that holds `key`'s state: the prefix, then `key`'s bytes, with a NUL
    /// byte put before a key that starts with one ([`internal_key`]).
    pub(crate) fn redis_key(&self, key: &[u8]) -> Vec<u8> {
        let escape = key.first() == Some(&0);
        let mut k = Vec::with_capacity(self.prefix.len() + usize::from(escape) + key.len());
        k.extend_from_slice(&self.prefix);
        if escape {
            k.push(0);
        }
        k.extend_from_slice(key);
        k
    }

    /// Decides `n` cells of `key` under `quota`: the path every check and peek takes (and a
    /// wait of no cells).
    pub(crate) async fn decide(
        &self,
        key: &[u8],
        n: u32,
        quota: Quota,
        op: Op,
    ) -> Result<Admitted, Error> {
        let burst = within_burst(n, quota)?;
        let key = self.redis_key(key);
        let interval_us = interval_micros(quota);
        let name = if op == Op::Check { "check" } else { "peek" };
        if let Some(leasing) = &self.lease
            && n > 0
            && quota == self.quota
        {
            let qt = (interval_us, burst);
            match op {
                Op::Check => return self.decide_leased(leasing, &key, n, quota).await,
                Op::Peek => {
                    if let Some(l) = leasing.store.held(&key, qt, Instant::now()) {
                        return Ok(lease_admission(&l, l.cells, burst));
                    }
                }
            }
        }
        let _probe = self.fast_path(&key, n, interval_us, burst).await?;
        match self.run_script(&key, name, quota, n, 0, 0).await {
            Ok(reply) => {
                let c = &self.counters;
                if reply.admitted {
                    if op == Op::Check {
                        bump(&c.admitted);
                        // The key's burst is spent: the next check would be refused, so it
                        // may as well be refused here (the TAT is a bound like a refusal's).
                        // With cells to spare, the key needs no fast path (nor a probe).
                        match (reply.remaining, &self.cache) {
                            (0, _) => self.remember(&key, &reply),
                            (_, Some(cache)) => cache.remove(&key),
                            (_, None) => {}
                        }
                    }
                    Ok(Admitted {
                        limit: burst,
                        remaining: reply.remaining,
                        reset_after: Duration::from_micros(reply.after_us),
                        source: Source::Redis,
                    })
                } else {
                    if op == Op::Check {
                        bump(&c.limited);
                    }
                    self.remember(&key, &reply);
                    Err(self.limited(Duration::from_micros(reply.after_us), burst))
                }
            }
            Err(_) => self.on_fault(&key, n, quota, op),
        }
    }

    /// The fast path: refuse here, or be the key's one probe, or wait for the probe in
    /// flight and look again (`cache.rs`); after waiting the call's timeout in all, ask
    /// Redis anyway.
    async fn fast_path(
        &self,
        key: &[u8],
        n: u32,
        interval_us: u64,
        burst: u32,
    ) -> Result<Option<ProbeGuard<'_>>, Error> {
        let mut probe = None;
        if let Some(cache) = &self.cache
            && n > 0
        {
            let give_up = Instant::now() + self.server.timeout;
            loop {
                let now = Instant::now();
                let Some(server_now) = self.server.clock.upper(now) else {
                    break; // no reply yet, so nothing cached
                };
                match cache.lookup(key, server_now, n, interval_us, burst) {
                    Lookup::Refuse(wait) => {
                        bump(&self.counters.local_refusals);
                        return Err(self.limited(wait, burst));
                    }
                    Lookup::Probe(guard) => {
                        probe = Some(guard);
                        break;
                    }
                    Lookup::Wait(probe) if now < give_up => {
                        let _ = crate::rt::timeout(give_up - now, probe).await;
                    }
                    Lookup::Wait(_) | Lookup::Miss => break,
                }
            }
        }
        Ok(probe)
    }

    /// A check under the default quota with leasing on: spend a leased cell here, or take a
    /// lease (giving back an expired one's cells in the same round trip).
    async fn decide_leased(
        &self,
        leasing: &Leasing,
        key: &[u8],
        n: u32,
        quota: Quota,
    ) -> Result<Admitted, Error> {
        let c = &self.counters;
        let (interval_us, burst) = (interval_micros(quota), quota.burst());
        let expired = match leasing
            .store
            .spend(key, n, (interval_us, burst), Instant::now())
        {
            Spend::Spent { left, lease } => {
                add(&c.spent_locally, u64::from(n));
                return Ok(lease_admission(&lease, left, burst));
            }
            Spend::Empty { expired } => expired,
        };
        // Cells of older merged leases cannot be given back: lost now.
        if let Some(e) = &expired {
            add(&c.expired_unspent, u64::from(e.cells - e.unspent()));
        }
        // The fast path's bound counts the expired lease's cells as spent: with cells to give
        // back, ask Redis (the give-back rides on this call) rather than refuse on them.
        let probe = if expired.is_some_and(|e| e.unspent() > 0) {
            None
        } else {
            self.fast_path(key, n, interval_us, burst).await?
        };
        let want = leasing.cells.max(n).min(burst);
        let give = expired.map_or((0, 0), |e| (e.written, e.unspent()));
        let sent = Instant::now();
        let reply = self
            .server
            .invoke(
                c,
                key,
                [
                    Arg::Op("lease"),
                    Arg::Num(interval_us),
                    Arg::Num(u64::from(burst)),
                    Arg::Num(u64::from(want)),
                    Arg::Num(u64::from(n)),
                    Arg::Num(give.0),
                    Arg::Num(u64::from(give.1)),
                ],
            )
            .await;
        drop(probe);
        let reply = match reply {
            Ok(r) => r,
            Err(_) => {
                self.keep_expired(leasing, key, expired);
                return self.on_fault(key, n, quota, Op::Check);
            }
        };
        let (granted, back) = reply.lease.unwrap_or((0, false));
        if give.1 > 0 {
            if back {
                add(&c.returned, u64::from(give.1));
                if let Some(cache) = &self.cache {
                    cache.remove(key); // the TAT moved earlier
                }
            } else {
                add(&c.expired_unspent, u64::from(give.1));
            }
        }
        if !reply.admitted {
            bump(&c.limited);
            self.remember(key, &reply);
            return Err(self.limited(Duration::from_micros(reply.after_us), burst));
        }
        bump(&c.admitted);
        add(&c.leased, u64::from(granted));
        let recv = Instant::now();
        let left = granted.saturating_sub(n);
        if left > 0 {
            let lease = Lease {
                cells: left,
                expires: sent + leasing.max_hold,
                quota: (interval_us, burst),
                written: reply.reserved.map_or(0, |(_, new)| new),
                returnable: left,
                recv,
                tat_ahead_us: reply.tat_ahead_us,
            };
            let lost = leasing.store.put(key, lease, recv);
            add(&c.expired_unspent, lost);
        }
        match (reply.remaining, &self.cache) {
            (0, _) => self.remember(key, &reply),
            (_, Some(cache)) => cache.remove(key),
            (_, None) => {}
        }
        Ok(Admitted {
            limit: burst,
            remaining: left.saturating_add(reply.remaining),
            reset_after: Duration::from_micros(reply.after_us),
            source: Source::Redis,
        })
    }

    /// An expired lease whose give-back did not happen goes back into the store, to be
    /// given back by a later call (counted lost if the store drops it).
    fn keep_expired(&self, leasing: &Leasing, key: &[u8], expired: Option<Lease>) {
        if let Some(mut e) = expired
            && e.unspent() > 0
        {
            e.cells = e.unspent();
            let lost = leasing.store.put(key, e, Instant::now());
            add(&self.counters.expired_unspent, lost);
        }
    }

    /// Forgets this node's lease of `key` (reset, penalty): its cells are lost.
    fn drop_lease(&self, key: &[u8]) {
        if let Some(leasing) = &self.lease
            && let Some(l) = leasing.store.take(key)
        {
            add(&self.counters.expired_unspent, u64::from(l.cells));
        }
    }

    /// The fault policy's answer when Redis failed or was late.
    pub(crate) fn on_fault(
        &self,
        key: &[u8],
        n: u32,
        quota: Quota,
        op: Op,
    ) -> Result<Admitted, Error> {
        let c = &self.counters;
        match self.policy {
            FaultPolicy::FailOpen => {
                bump(&c.failed_open);
                Ok(Admitted {
                    limit: quota.burst(),
                    remaining: quota.burst() - n,
                    reset_after: quota.interval().saturating_mul(n),
                    source: Source::FailOpen,
                })
            }
            FaultPolicy::FailClosed { retry_after } => {
                bump(&c.failed_closed);
                Err(self.limited(retry_after, quota.burst()))
            }
            FaultPolicy::Local { .. } | FaultPolicy::LocalShare => {
                let (fallback, share) = self.fallback_share(quota, n)?;
                let r = match op {
                    Op::Check => fallback.check_n_with(key, n, share),
                    Op::Peek => fallback.peek_with(key, share),
                };
                r.map(|ok| Admitted {
                    limit: ok.limit(),
                    remaining: ok.remaining(),
                    reset_after: ok.reset_after(),
                    source: Source::Local,
                })
            }
        }
    }

    /// The local fallback and this node's share of `quota`, under [`FaultPolicy::Local`] and
    /// [`FaultPolicy::LocalShare`], counted as fallen back; or the refusal when there is no
    /// share to take. A check and a wait of `n` cells take their share here.
    ///
    /// A call for more cells than the share's burst (but no more than the quota's: callers
    /// refuse those first) is refused as rate limited, for as long as the share takes to
    /// fill: the fleet admits it once Redis answers, so `InsufficientCapacity`, which says
    /// "never, however long you wait" (and which the tower layer answers without a
    /// `Retry-After`), would be wrong.
    pub(crate) fn fallback_share(
        &self,
        quota: Quota,
        n: u32,
    ) -> Result<(&Limiter<[u8]>, Quota), Error> {
        let c = &self.counters;
        let Some(nodes) = self.fallback_nodes() else {
            // No count of the fleet yet: refuse, rather than admit the whole limit.
            bump(&c.failed_closed);
            return Err(self.limited(quota.interval(), quota.burst()));
        };
        bump(&c.fell_back);
        let Some(share) = share(quota, nodes) else {
            // The share is not a valid quota (a window beyond 18 years): refuse.
            return Err(self.limited(quota.interval(), quota.burst()));
        };
        if n > share.burst() {
            let fill = share.interval().saturating_mul(share.burst());
            return Err(self.limited(fill, quota.burst()));
        }
        let fallback = self.fallback.as_ref().expect("built with the policy");
        Ok((fallback, share))
    }

    /// What the local fallback divides the limit by: the configured count, or the fleet's
    /// size as last counted (`None` before any count, and under other policies).
    fn fallback_nodes(&self) -> Option<u32> {
        match self.policy {
            FaultPolicy::Local { nodes } => Some(nodes),
            FaultPolicy::LocalShare => self.presence.as_ref().map(|p| p.seen()).filter(|&n| n > 0),
            _ => None,
        }
    }

    /// A refusal for `wait`, its `earliest` on the limiter's clock.
    pub(crate) fn limited(&self, wait: Duration, limit: u32) -> Error {
        self.counters.observer.refused(wait);
        Error::RateLimited {
            earliest: self.clock.now() + wait,
            wait,
            limit,
        }
    }

    /// Keeps the key's TAT from `reply` in the fast path.
    pub(crate) fn remember(&self, key: &[u8], reply: &Reply) {
        if let Some(cache) = &self.cache
            && reply.tat_ahead_us > 0
        {
            let now = i128::from(reply.now_us) * 1_000;
            cache.raise(key, reply.tat_us(), now);
        }
    }

    /// Runs the script's `op` with the ARGV most operations take: the quota, `n`, `arg_us`
    /// and `written`.
    pub(crate) async fn run_script(
        &self,
        key: &[u8],
        op: &'static str,
        quota: Quota,
        n: u32,
        arg_us: u64,
        written: u64,
    ) -> Result<Reply, Unavailable> {
        let args = [
            Arg::Op(op),
            Arg::Num(interval_micros(quota)),
            Arg::Num(u64::from(quota.burst())),
            Arg::Num(u64::from(n)),
            Arg::Num(arg_us),
            Arg::Num(written),
        ];
        self.server.invoke(&self.counters, key, args).await
    }

    /// Forgets `key` in Redis, in the fast path, this node's lease and the local fallback;
    /// whether Redis held state for it.
    pub(crate) async fn reset(&self, key: &[u8]) -> Result<bool, Unavailable> {
        let key = self.redis_key(key);
        if let Some(cache) = &self.cache {
            cache.remove(&key);
        }
        self.drop_lease(&key);
        if let Some(fallback) = &self.fallback {
            fallback.reset(&key);
        }
        let mut cmd = redis::cmd("DEL");
        cmd.arg(&key);
        let del = |mut conn: Conn| async move { cmd.query_async(&mut conn).await };
        let deleted: i64 = self.server.call(&self.counters, &key, "reset", del).await?;
        Ok(deleted > 0)
    }

    /// Pushes `key`'s next admission under `quota` at least `delay` from now.
    pub(crate) async fn penalize(
        &self,
        key: &[u8],
        delay: Duration,
        quota: Quota,
    ) -> Result<(), Unavailable> {
        let key = self.redis_key(key);
        self.drop_lease(&key);
        if let Some(fallback) = &self.fallback {
            let _ = fallback.penalize(&key, delay);
        }
        let reply = self
            .run_script(&key, "penalize", quota, 1, micros_ceil(delay), 0)
            .await?;
        self.remember(&key, &reply);
        Ok(())
    }

    /// Gives back every leased cell held here; how many were given back.
    pub(crate) async fn return_leases(&self) -> Result<u64, Unavailable> {
        let Some(leasing) = &self.lease else {
            return Ok(0);
        };
        let c = &self.counters;
        let mut leases = leasing.store.drain().into_iter();
        let mut given = 0;
        while let Some((key, l)) = leases.next() {
            add(&c.expired_unspent, u64::from(l.cells - l.unspent()));
            if l.unspent() == 0 {
                continue;
            }
            let (interval_us, burst) = l.quota;
            let args = [
                Arg::Op("giveback"),
                Arg::Num(interval_us),
                Arg::Num(u64::from(burst)),
                Arg::Num(0),
                Arg::Num(0),
                Arg::Num(l.written),
                Arg::Num(u64::from(l.unspent())),
            ];
            match self.server.invoke(c, &key, args).await {
                Ok(r) if r.admitted => {
                    add(&c.returned, u64::from(l.unspent()));
                    given += u64::from(l.unspent());
                    if let Some(cache) = &self.cache {
                        cache.remove(&key);
                    }
                }
                Ok(_) => {
                    add(&c.expired_unspent, u64::from(l.unspent()));
                }
                Err(e) => {
                    let rest: u64 = leases.map(|(_, l)| u64::from(l.cells)).sum();
                    add(&c.expired_unspent, u64::from(l.unspent()) + rest);
                    return Err(e);
                }
            }
        }
        Ok(given)
    }

    /// The counters, with the cache's size and the fleet's as last counted.
    pub(crate) fn stats(&self) -> Stats {
        self.counters.snapshot(
            self.cache.as_ref().map_or(0, |c| c.len() as u64),
            self.presence.as_ref().map_or(0, |p| u64::from(p.seen())),
        )
    }
}

/// `quota`'s burst, or the refusal of a request of `n` cells that exceeds it (never admitted,
/// so refused without a round trip).
pub(crate) fn within_burst(n: u32, quota: Quota) -> Result<u32, Error> {
    let burst = quota.burst();
    if n > burst {
        return Err(Error::InsufficientCapacity {
            requested: n,
            burst,
        });
    }
    Ok(burst)
}

/// An admission from a lease held here: `left` cells remain in it.
fn lease_admission(lease: &Lease, left: u32, burst: u32) -> Admitted {
    let reset_at = lease.recv + Duration::from_micros(lease.tat_ahead_us);
    Admitted {
        limit: burst,
        remaining: left,
        reset_after: reset_at.saturating_duration_since(Instant::now()),
        source: Source::Redis,
    }
}
