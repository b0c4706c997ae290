//! Per-check simulated cache/branch counters (valgrind callgrind) for tollgate, governor 0.10
//! and the ideal array. The setup (keys, inserts, drains) runs outside the measured region;
//! callgrind collects only inside `timed` / `timed_empty` (`--toggle-collect='*timed*'`).
//!
//! ```text
//! counters-bench <ideal|tollgate|tollgate-at|presized|governor|empty> <live|deny|hot|hotdeny|insert>
//! counters-bench <evicting|empty> full
//! ```
//!
//! * live (B-live, and E with one thread): 1M keys checked once each (quota 1/h, burst
//!   100,000), then N = 200,000 timed checks of distinct keys in random order; all admitted.
//! * deny (B-deny): quota 1/h burst 10, every key drained by 10 checks, then N timed checks,
//!   all denied.
//! * hot, hotdeny (A, and D with one thread): N timed checks of one key, quota 10^9/s burst
//!   10^9 (all admitted), or 1/h burst 10 drained first (all denied).
//! * insert (C): N = 1,000,000 never-seen keys inserted into an empty limiter (the ideal's
//!   array preallocated for them), in key-generation order (keys are random u64s).
//! * full (F, evicting): subject `evicting`, tollgate capped at 16,384 keys (64 shards of
//!   256) under `EvictClosestToExpiry`, filled untimed until every shard holds its share
//!   (keys from a stream of their own); then N timed checks of never-seen keys, each
//!   evicting a held one.
//!
//! `COUNTERS_KEYS=n` takes `n` keys instead of 1M; where `n` is below N, live and deny check
//! N keys drawn at random from them, each about N / n times (the curve's smaller tables).
//! `presized` is tollgate built with `.presize(keys)`; `tollgate-at` calls `check_at` at one
//! time read when the limiter is built (no clock read in the timed loop).
//!
//! `empty` runs the same loop over the same index/key vectors without a limiter: subtract it.
//! Outside valgrind the binary also reports footprints (tollgate `stats().bytes`, governor
//! RSS delta, ideal array size).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const N_CHECKS: usize = 200_000;

struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
}

#[derive(Clone, Copy)]
struct Spec {
    interval: Duration,
    burst: u32,
}
const LIVE: Spec = Spec {
    interval: Duration::from_secs(3600),
    burst: 100_000,
};
const HOT: Spec = Spec {
    interval: Duration::from_nanos(1),
    burst: 1_000_000_000,
};
const DENY: Spec = Spec {
    interval: Duration::from_secs(3600),
    burst: 10,
};

trait Subject {
    fn build(spec: Spec, keys: usize) -> Self;
    fn check(&self, key: u64) -> bool;
    fn bytes(&self) -> Option<usize>;
    /// Keys held, where the limiter tells (scenario `full`).
    fn held(&self) -> Option<usize> {
        None
    }
}

struct Tollgate(tollgate::Limiter<u64>);
impl Subject for Tollgate {
    fn build(spec: Spec, _keys: usize) -> Self {
        Tollgate(tollgate::Limiter::keyed(
            tollgate::Quota::with_period(spec.interval).allow_burst(spec.burst),
        ))
    }
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.check(&key).is_ok()
    }
    fn bytes(&self) -> Option<usize> {
        Some(self.0.stats().bytes)
    }
}

struct Presized(tollgate::Limiter<u64>);
impl Subject for Presized {
    fn build(spec: Spec, keys: usize) -> Self {
        let quota = tollgate::Quota::with_period(spec.interval).allow_burst(spec.burst);
        Presized(tollgate::Limiter::builder(quota).presize(keys).build())
    }
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.check(&key).is_ok()
    }
    fn bytes(&self) -> Option<usize> {
        Some(self.0.stats().bytes)
    }
}

/// `check_at` at one time read when built: the length of a check without its clock read
/// (the curve's `check_at` column).
struct TollgateAt(tollgate::Limiter<u64>, tollgate::Timestamp);
impl Subject for TollgateAt {
    fn build(spec: Spec, _keys: usize) -> Self {
        let limiter = tollgate::Limiter::keyed(
            tollgate::Quota::with_period(spec.interval).allow_burst(spec.burst),
        );
        let now = limiter.now();
        TollgateAt(limiter, now)
    }
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.check_at(&key, self.1).is_ok()
    }
    fn bytes(&self) -> Option<usize> {
        Some(self.0.stats().bytes)
    }
}

/// A full table that evicts (scenario F): capped at [`FULL_CAP`] keys.
struct Evicting(tollgate::Limiter<u64>);
impl Subject for Evicting {
    fn build(spec: Spec, _keys: usize) -> Self {
        let quota = tollgate::Quota::with_period(spec.interval).allow_burst(spec.burst);
        Evicting(
            tollgate::Limiter::builder(quota)
                .capacity(FULL_CAP)
                .full_policy(tollgate::FullPolicy::EvictClosestToExpiry)
                .build(),
        )
    }
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.check(&key).is_ok()
    }
    fn bytes(&self) -> Option<usize> {
        Some(self.0.stats().bytes)
    }
    fn held(&self) -> Option<usize> {
        Some(self.0.stats().keys_held)
    }
}

/// Scenario F's cap: 64 shards of 256 keys.
const FULL_CAP: usize = 16_384;

struct Governor(governor::DefaultKeyedRateLimiter<u64>);
impl Subject for Governor {
    fn build(spec: Spec, _keys: usize) -> Self {
        let q = governor::Quota::with_period(spec.interval)
            .unwrap()
            .allow_burst(NonZeroU32::new(spec.burst).unwrap());
        Governor(governor::RateLimiter::keyed(q))
    }
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.check_key(&key).is_ok()
    }
    fn bytes(&self) -> Option<usize> {
        None
    }
}

/// The ideal: next_pow2(keys) AtomicU64 GCRA TATs indexed by a multiply-shift hash; one
/// load and one relaxed CAS; `Instant` read per check.
struct Ideal {
    origin: Instant,
    interval: u64,
    tolerance: u64,
    shift: u32,
    slots: Box<[AtomicU64]>,
}
impl Subject for Ideal {
    fn build(spec: Spec, keys: usize) -> Self {
        let len = keys.next_power_of_two().max(64);
        let interval = spec.interval.as_nanos() as u64;
        Ideal {
            origin: Instant::now(),
            interval,
            tolerance: interval * u64::from(spec.burst - 1),
            shift: 64 - len.trailing_zeros(),
            slots: (0..len).map(|_| AtomicU64::new(0)).collect(),
        }
    }
    #[inline]
    fn check(&self, key: u64) -> bool {
        let now = self.origin.elapsed().as_nanos() as u64;
        let slot = &self.slots[(key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize];
        let mut tat = slot.load(Ordering::Relaxed);
        loop {
            let tat0 = tat.max(now);
            if tat0.saturating_sub(self.tolerance) > now {
                return false;
            }
            match slot.compare_exchange_weak(
                tat,
                tat0 + self.interval,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(cur) => tat = cur,
            }
        }
    }
    fn bytes(&self) -> Option<usize> {
        Some(std::mem::size_of_val(&*self.slots))
    }
}

/// The measured region: exactly `idx.len()` checks. Returns the number admitted.
#[inline(never)]
fn timed<S: Subject>(s: &S, keys: &[u64], idx: &[u32]) -> u64 {
    let mut admitted = 0u64;
    for &i in idx {
        admitted += s.check(keys[i as usize]) as u64;
    }
    admitted
}

/// The baseline: the same loop over the same vectors, no limiter.
#[inline(never)]
fn timed_empty(keys: &[u64], idx: &[u32]) -> u64 {
    let mut acc = 0u64;
    for &i in idx {
        acc += black_box(keys[i as usize]) & 1;
    }
    acc
}

fn rss_bytes() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace()
        .nth(1)
        .and_then(|x| x.parse::<usize>().ok())
        .unwrap_or(0)
        * 4096
}

fn run<S: Subject>(scenario: &str, keys: &[u64], idx: &[u32]) {
    let rss0 = rss_bytes();
    let n_keys = keys.len();
    let (s, expect) = match scenario {
        "live" => {
            let s = S::build(LIVE, n_keys);
            for &k in keys {
                assert!(s.check(k));
            }
            (s, idx.len() as u64)
        }
        "deny" => {
            let s = S::build(DENY, n_keys);
            // Not asserted: the ideal has no collision handling, so a key sharing a slot
            // with an earlier key finds it drained already.
            let mut drained = 0u64;
            for &k in keys {
                for _ in 0..DENY.burst {
                    drained += s.check(k) as u64;
                }
            }
            eprintln!(
                "drain admitted {drained} of {}",
                keys.len() as u64 * u64::from(DENY.burst)
            );
            (s, 0)
        }
        "insert" => (S::build(LIVE, n_keys), idx.len() as u64),
        "full" => {
            // Filled untimed until every shard holds its share of the cap (keys spread over
            // the shards unevenly, so FULL_CAP keys alone would leave some below theirs):
            // each timed check of a new key then evicts a held one (subject `evicting`).
            let s = S::build(LIVE, n_keys);
            let mut fill = Rng(0xF111);
            while s.held().expect("the subject `evicting` tells its keys") < FULL_CAP {
                for _ in 0..1_024 {
                    assert!(s.check(fill.next_u64()));
                }
            }
            (s, idx.len() as u64)
        }
        "hot" => (S::build(HOT, 1), idx.len() as u64),
        "hotdeny" => {
            let s = S::build(DENY, 1);
            for _ in 0..DENY.burst {
                assert!(s.check(keys[0]));
            }
            (s, 0)
        }
        _ => panic!("scenario: live | deny | hot | hotdeny | insert | full"),
    };
    let admitted = timed(&s, keys, black_box(idx));
    let rss1 = rss_bytes();
    println!(
        "checks {} admitted {} (expected {}) bytes {:?} rss_delta {}",
        idx.len(),
        admitted,
        expect,
        s.bytes(),
        rss1.saturating_sub(rss0)
    );
    assert_eq!(admitted, expect);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (subject, scenario) = (args[1].as_str(), args[2].as_str());
    assert!(
        subject == "empty" || (subject == "evicting") == (scenario == "full"),
        "the subject `evicting` goes with the scenario `full`, and only it (and `empty`)"
    );
    let mut rng = Rng(0x5EED);
    let n_keys: usize = std::env::var("COUNTERS_KEYS")
        .map(|v| v.parse().expect("COUNTERS_KEYS: a number of keys"))
        .unwrap_or(1_000_000);
    let keys: Vec<u64> = (0..n_keys).map(|_| rng.next_u64()).collect();
    let idx: Vec<u32> = if scenario == "insert" {
        (0..n_keys as u32).collect()
    } else if scenario.starts_with("hot") {
        vec![0; N_CHECKS]
    } else if scenario == "full" {
        // New keys, each once (the fill draws from another stream).
        (0..n_keys.min(N_CHECKS) as u32).collect()
    } else if n_keys < N_CHECKS {
        (0..N_CHECKS).map(|_| rng.below(n_keys) as u32).collect()
    } else {
        // A random permutation's first N: N distinct keys in random order.
        let mut p: Vec<u32> = (0..n_keys as u32).collect();
        for i in (1..p.len()).rev() {
            p.swap(i, rng.below(i + 1));
        }
        p.truncate(N_CHECKS);
        p
    };
    match subject {
        "ideal" => run::<Ideal>(scenario, &keys, &idx),
        "tollgate" => run::<Tollgate>(scenario, &keys, &idx),
        "presized" => run::<Presized>(scenario, &keys, &idx),
        "tollgate-at" => run::<TollgateAt>(scenario, &keys, &idx),
        "evicting" => run::<Evicting>(scenario, &keys, &idx),
        "governor" => run::<Governor>(scenario, &keys, &idx),
        "empty" => println!(
            "checks {} acc {}",
            idx.len(),
            timed_empty(&keys, black_box(&idx))
        ),
        _ => panic!("subject: ideal | tollgate | tollgate-at | presized | governor | evicting | empty"),
    }
}
