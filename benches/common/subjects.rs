//! The limiters under test, behind one trait so every scenario runs the same loop on each.
//!
//! * [`Tollgate`]: `Limiter::<u64>::keyed(quota)`, the default configuration (past the
//!   default capacity of 2^23 keys, a capacity with room for every key: `tollgate_builder`).
//! * [`TollgatePresized`], [`TollgateTsc`], [`TollgateForgetting`]: the same built with
//!   `.presize(keys)` (scenario C, and a variant of B), with `TscClock`, and forgetting
//!   expired keys at once, not learning to keep them ([`Tuned`] with a [`Configure`]).
//! * [`Governor`]: `governor::RateLimiter::keyed(quota)` (DashMap, SipHash, quanta clock).
//! * [`Naive`]: GCRA in a `Mutex<HashMap<u64, u64>>` with std's SipHash.
//! * [`Ideal`]: a preallocated `[AtomicU64]` indexed by a multiply-shift of the key, no
//!   collision handling, reading `Instant` like tollgate's default clock: an approximation
//!   of the physical lower bound.
//! * [`IdealSparse`]: the ideal over 4 times as many slots, a footprint close to tollgate's
//!   (a variant of B, to tell memory footprint apart from code).
//! * [`IdealLong`]: the ideal, on its own slots or on 4 times as many, with a check as long
//!   as tollgate's `check_at` (no-ops after its load), to tell the length of a check apart
//!   from what its instructions do.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A quota in plain numbers, turned into each limiter's own type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spec {
    pub(crate) interval: Duration,
    pub(crate) burst: u32,
}

/// The "live" quota of the design record (`src/design.rs`, §8): one cell per hour with a burst of 100,000, so a key
/// checked once stays live for an hour and is never denied within the run.
pub(crate) const LIVE: Spec = Spec {
    interval: Duration::from_secs(3600),
    burst: 100_000,
};

/// Keys that expire between visits (E, keys expiring; the benchmark of record's *allow*):
/// 10⁹ cells a second with a burst of 10⁹, so a check is never denied and leaves its key's TAT
/// 1 ns ahead: the key has expired by its next visit.
pub(crate) const ALLOW: Spec = Spec {
    interval: Duration::from_nanos(1),
    burst: 1_000_000_000,
};

/// Scenario D: one cell per hour, burst 1. After the first check every check is denied.
pub(crate) const DENY: Spec = Spec {
    interval: Duration::from_secs(3600),
    burst: 1,
};

/// What every scenario needs of a limiter.
pub(crate) trait Subject: Sync + Sized {
    /// The column name in the report.
    const NAME: &'static str;

    /// A limiter for `spec`; `keys` is how many keys the scenario will use (only the ideal
    /// array and the presized tollgate look at it).
    fn build(spec: Spec, keys: usize) -> Self;

    /// One check with the limiter's own clock; `true` if admitted.
    fn check(&self, key: u64) -> bool;

    /// Keys the limiter holds (for the "every key still held" verification).
    fn keys_held(&self) -> usize;

    /// Bytes as the limiter itself accounts them, if it does.
    fn reported_bytes(&self) -> Option<usize> {
        None
    }

    /// Re-checks `keys` and says whether every one of them was still remembered (not treated
    /// as new), when the limiter can tell.
    fn verify_remembered(&self, _keys: &[u64]) -> Option<bool> {
        None
    }
}

/// Limiters whose check can take a time read earlier: to split the clock's cost off.
pub(crate) trait ExplicitTime: Subject {
    /// The current time on the limiter's clock, in nanoseconds.
    fn now_ns(&self) -> u64;
    /// One check at `now` (from [`ExplicitTime::now_ns`]); `true` if admitted.
    fn check_at(&self, key: u64, now: u64) -> bool;
}

// ---------------------------------------------------------------------------------------
// tollgate

pub(crate) fn tollgate_quota(spec: Spec) -> tollgate::Quota {
    tollgate::Quota::with_period(spec.interval).allow_burst(spec.burst)
}

/// A limiter builder for `spec` with room for `keys` keys: the default capacity (2^23)
/// unless a scenario has more keys, as a program with more clients than that would set its
/// own. At the default cap ten million keys would not all be held: checks of the keys
/// evicted would insert them again, evicting others, and no check would say so (eviction
/// admits). A sixteenth more than the keys, as each shard holds an equal share of the
/// capacity and random keys fill shards unevenly.
fn tollgate_builder(spec: Spec, keys: usize) -> tollgate::LimiterBuilder<u64> {
    let room = keys.saturating_add(keys / 16);
    let capacity = room.max(tollgate::LimiterBuilder::<u64>::DEFAULT_CAPACITY);
    tollgate::Limiter::builder(tollgate_quota(spec)).capacity(capacity)
}

/// tollgate, default configuration.
#[derive(Debug)]
pub(crate) struct Tollgate {
    limiter: tollgate::Limiter<u64>,
    burst: u32,
}

impl Tollgate {
    /// The limiter itself, for a bench of an API beyond [`Subject`]'s.
    pub(crate) fn limiter(&self) -> &tollgate::Limiter<u64> {
        &self.limiter
    }

    fn stats_bytes(&self) -> usize {
        let s = self.limiter.stats();
        s.bytes
    }

    fn verify(&self, keys: &[u64]) -> bool {
        // Each key was checked once; a second check of a remembered key leaves `burst - 2`
        // cells (the interval is an hour), while a forgotten key would start over at
        // `burst - 1`.
        keys.iter().all(|k| match self.limiter.check(k) {
            Ok(ok) => ok.remaining() == self.burst - 2,
            Err(_) => false,
        })
    }
}

impl Subject for Tollgate {
    const NAME: &'static str = "tollgate";

    fn build(spec: Spec, keys: usize) -> Self {
        Tollgate {
            limiter: tollgate_builder(spec, keys).build(),
            burst: spec.burst,
        }
    }

    #[inline]
    fn check(&self, key: u64) -> bool {
        self.limiter.check(&key).is_ok()
    }

    fn keys_held(&self) -> usize {
        self.limiter.stats().keys_held
    }

    fn reported_bytes(&self) -> Option<usize> {
        Some(self.stats_bytes())
    }

    fn verify_remembered(&self, keys: &[u64]) -> Option<bool> {
        Some(self.verify(keys))
    }
}

impl ExplicitTime for Tollgate {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.limiter.now().as_nanos()
    }

    #[inline]
    fn check_at(&self, key: u64, now: u64) -> bool {
        self.limiter
            .check_at(&key, tollgate::Timestamp::from_nanos(now))
            .is_ok()
    }
}

/// A tollgate configuration beside the default: its column name and what it sets on the
/// builder (`keys`: how many keys the scenario will use).
pub(crate) trait Configure: Sync {
    const NAME: &'static str;
    fn configure(
        builder: tollgate::LimiterBuilder<u64>,
        keys: usize,
    ) -> tollgate::LimiterBuilder<u64>;
}

/// tollgate built with configuration `C`, measured as the default one is.
#[derive(Debug)]
pub(crate) struct Tuned<C>(Tollgate, PhantomData<C>);

impl<C: Configure> Subject for Tuned<C> {
    const NAME: &'static str = C::NAME;

    fn build(spec: Spec, keys: usize) -> Self {
        let limiter = C::configure(tollgate_builder(spec, keys), keys).build();
        Tuned(
            Tollgate {
                limiter,
                burst: spec.burst,
            },
            PhantomData,
        )
    }

    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.check(key)
    }

    fn keys_held(&self) -> usize {
        self.0.keys_held()
    }

    fn reported_bytes(&self) -> Option<usize> {
        Some(self.0.stats_bytes())
    }

    fn verify_remembered(&self, keys: &[u64]) -> Option<bool> {
        Some(self.0.verify(keys))
    }
}

/// `.presize(keys)` (scenario C, and a variant of B).
#[derive(Debug)]
pub(crate) struct Presized;

impl Configure for Presized {
    const NAME: &'static str = "tollgate presized";
    fn configure(
        builder: tollgate::LimiterBuilder<u64>,
        keys: usize,
    ) -> tollgate::LimiterBuilder<u64> {
        builder.presize(keys)
    }
}

/// Expired keys forgotten at once (`.keep_expired(0)`), where the default learns to keep the
/// keys that come back: what learning buys on E with keys expiring.
#[derive(Debug)]
pub(crate) struct Forgetting;

impl Configure for Forgetting {
    const NAME: &'static str = "tollgate, keep_expired(0)";
    fn configure(
        builder: tollgate::LimiterBuilder<u64>,
        _keys: usize,
    ) -> tollgate::LimiterBuilder<u64> {
        builder.keep_expired(Duration::ZERO)
    }
}

/// The time-stamp counter clock (`TscClock`).
#[derive(Debug)]
pub(crate) struct Tsc;

impl Configure for Tsc {
    const NAME: &'static str = "tollgate, TSC clock";
    fn configure(
        builder: tollgate::LimiterBuilder<u64>,
        _keys: usize,
    ) -> tollgate::LimiterBuilder<u64> {
        builder.clock(tollgate::TscClock::new())
    }
}

pub(crate) type TollgatePresized = Tuned<Presized>;
pub(crate) type TollgateForgetting = Tuned<Forgetting>;
pub(crate) type TollgateTsc = Tuned<Tsc>;

// ---------------------------------------------------------------------------------------
// governor

/// governor 0.10, `RateLimiter::keyed`: DashMap with std's SipHash, quanta (TSC) clock.
#[derive(Debug)]
pub(crate) struct Governor(governor::DefaultKeyedRateLimiter<u64>);

impl Subject for Governor {
    const NAME: &'static str = "governor";

    fn build(spec: Spec, _keys: usize) -> Self {
        let quota = governor::Quota::with_period(spec.interval)
            .expect("a non-zero period")
            .allow_burst(NonZeroU32::new(spec.burst).expect("a non-zero burst"));
        Governor(governor::RateLimiter::keyed(quota))
    }

    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.check_key(&key).is_ok()
    }

    fn keys_held(&self) -> usize {
        self.0.len()
    }
}

// ---------------------------------------------------------------------------------------
// GCRA shared by the two hand-written limiters

#[derive(Clone, Copy, Debug)]
struct Gcra {
    interval: u64,
    tolerance: u64,
}

impl Gcra {
    fn new(spec: Spec) -> Gcra {
        let interval = spec.interval.as_nanos() as u64;
        Gcra {
            interval,
            tolerance: interval * u64::from(spec.burst - 1),
        }
    }

    /// The new TAT if a cell is admitted at `now`, else `None`.
    #[inline]
    fn admit(self, tat: u64, now: u64) -> Option<u64> {
        let tat0 = tat.max(now);
        (tat0.saturating_sub(self.tolerance) <= now).then_some(tat0 + self.interval)
    }
}

#[inline]
fn nanos_since(origin: Instant) -> u64 {
    origin.elapsed().as_nanos() as u64
}

// ---------------------------------------------------------------------------------------
// Mutex<HashMap>

/// The naive limiter: one lock around a `HashMap<key, TAT>` with std's SipHash.
#[derive(Debug)]
pub(crate) struct Naive {
    origin: Instant,
    gcra: Gcra,
    map: Mutex<HashMap<u64, u64>>,
}

impl Subject for Naive {
    const NAME: &'static str = "Mutex<HashMap>";

    fn build(spec: Spec, _keys: usize) -> Self {
        Naive {
            origin: Instant::now(),
            gcra: Gcra::new(spec),
            map: Mutex::new(HashMap::new()),
        }
    }

    #[inline]
    fn check(&self, key: u64) -> bool {
        let now = nanos_since(self.origin);
        let mut map = self.map.lock().unwrap();
        let tat = map.entry(key).or_insert(0);
        match self.gcra.admit(*tat, now) {
            Some(new) => {
                *tat = new;
                true
            }
            None => false,
        }
    }

    fn keys_held(&self) -> usize {
        self.map.lock().unwrap().len()
    }
}

// ---------------------------------------------------------------------------------------
// ideal

/// The lower bound: one preallocated `AtomicU64` per hash bucket, no collision handling.
#[derive(Debug)]
pub(crate) struct Ideal {
    origin: Instant,
    gcra: Gcra,
    shift: u32,
    slots: Box<[AtomicU64]>,
}

impl Ideal {
    #[inline]
    fn slot(&self, key: u64) -> &AtomicU64 {
        let i = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift;
        &self.slots[i as usize]
    }

    /// The GCRA step on `slot`, whose state was loaded as `tat`.
    #[inline]
    fn admit_from(&self, slot: &AtomicU64, mut tat: u64, now: u64) -> bool {
        loop {
            let Some(new) = self.gcra.admit(tat, now) else {
                return false;
            };
            match slot.compare_exchange_weak(tat, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(current) => tat = current,
            }
        }
    }
}

impl Subject for Ideal {
    const NAME: &'static str = "ideal";

    fn build(spec: Spec, keys: usize) -> Self {
        let len = keys.next_power_of_two().max(64);
        Ideal {
            origin: Instant::now(),
            gcra: Gcra::new(spec),
            shift: 64 - len.trailing_zeros(),
            // Written (not calloc'd) so every page is touched before the clock starts.
            slots: (0..len).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    #[inline]
    fn check(&self, key: u64) -> bool {
        self.check_at(key, nanos_since(self.origin))
    }

    fn keys_held(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) != 0)
            .count()
    }

    fn reported_bytes(&self) -> Option<usize> {
        Some(std::mem::size_of_val(&*self.slots))
    }
}

impl ExplicitTime for Ideal {
    #[inline]
    fn now_ns(&self) -> u64 {
        nanos_since(self.origin)
    }

    #[inline]
    fn check_at(&self, key: u64, now: u64) -> bool {
        let slot = self.slot(key);
        self.admit_from(slot, slot.load(Ordering::Relaxed), now)
    }
}

/// The ideal spread over 4x the slots (8 bytes x 4 per key, about tollgate's footprint at
/// a million keys): tells how much of the ideal's advantage is its small footprint.
#[derive(Debug)]
pub(crate) struct IdealSparse(Ideal);

impl Subject for IdealSparse {
    const NAME: &'static str = "ideal, 4x the slots";

    fn build(spec: Spec, keys: usize) -> Self {
        IdealSparse(Ideal::build(spec, keys * 4))
    }

    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.check(key)
    }

    fn keys_held(&self) -> usize {
        self.0.keys_held()
    }
}

impl ExplicitTime for IdealSparse {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }

    #[inline]
    fn check_at(&self, key: u64, now: u64) -> bool {
        self.0.check_at(key, now)
    }
}

/// The ideal over `SPREAD` times the slots whose `check_at` runs [`NOPS`] no-ops after
/// loading its slot: about the instructions of tollgate's `check_at` (150–160 a check of
/// 1,000 or 1M keys under callgrind), doing nothing. On many keys without a clock read, a
/// check's misses overlap the next checks' only as far as the core's reorder window reaches,
/// and a long check leaves fewer checks in it (B, `check_at`: BENCHMARKS.md, "Missed
/// targets"). With `SPREAD` 1 and 4 and [`IdealSparse`], the length of a check and the
/// footprint are told apart.
#[derive(Debug)]
pub(crate) struct IdealLong<const SPREAD: usize>(Ideal);

/// Matches tollgate's `check_at`'s instructions, less the ideal's own (about 15).
pub(crate) const NOPS: usize = 140;

impl<const SPREAD: usize> Subject for IdealLong<SPREAD> {
    const NAME: &'static str = match SPREAD {
        1 => "ideal, 140 no-ops a check, check_at",
        4 => "ideal, 4x the slots, 140 no-ops a check, check_at",
        _ => panic!("name the spread"),
    };

    fn build(spec: Spec, keys: usize) -> Self {
        IdealLong(Ideal::build(spec, keys * SPREAD))
    }

    #[inline]
    fn check(&self, key: u64) -> bool {
        self.check_at(key, self.now_ns())
    }

    fn keys_held(&self) -> usize {
        self.0.keys_held()
    }
}

impl<const SPREAD: usize> ExplicitTime for IdealLong<SPREAD> {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }

    #[inline]
    fn check_at(&self, key: u64, now: u64) -> bool {
        let slot = self.0.slot(key);
        let tat = slot.load(Ordering::Relaxed);
        // SAFETY: no-ops: no memory, stack or flags touched. Placed after the load so that
        // the load issues as early as the plain ideal's does.
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        unsafe {
            std::arch::asm!(
                ".rept {n}",
                "nop",
                ".endr",
                n = const NOPS,
                options(nomem, nostack, preserves_flags),
            );
        }
        self.0.admit_from(slot, tat, now)
    }
}
