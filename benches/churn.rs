//! The `churn` benchmark: a keyed limiter under steady key churn, as a proxy limiting per
//! client IP sees it. New keys keep arriving, each is checked once and stays live for
//! `LIFE`, so the number of live keys is steady while expired ones pile up until reclaimed.
//!
//! ```text
//! cargo bench --bench churn                         # full run
//! TOLLGATE_BENCH_QUICK=1 cargo bench --bench churn  # smoke run
//! TOLLGATE_BENCH_ROUNDS=3 cargo bench --bench churn  # 3 rounds a rate (default 7)
//! TOLLGATE_BENCH_KEEP_MS=1000 cargo bench --bench churn  # with `.keep_expired(1 s)`
//! TOLLGATE_BENCH_KEEP_MS=0 cargo bench --bench churn     # nothing kept (default: learned)
//! ```
//!
//! Time is virtual (`check_at`, so the figures are the table's, not the clock's): every
//! `STEP` of virtual time, `rate * STEP` new keys are checked once. After a warm-up of
//! `3 * LIFE` the harness measures `10 * LIFE` and reports, as the median over rounds with
//! min–max: nanoseconds per new key (wall time / checks), the table's bytes per live key
//! (`Stats::bytes`), and keys held per live key
//! (held = live + expired but not yet reclaimed).
//!
//! Governor is not run here: its keyed state keeps every key until `retain_recent` is
//! called, so under churn its memory is whatever the caller's clean-up schedule makes it.

mod common;

use std::time::{Duration, Instant};

use common::fmt::{plain_summary, table_header};
use common::{Rng, Size, Summary};
use tollgate::{Limiter, ManualClock, Quota, Timestamp};

/// How long a key stays live after its check.
const LIFE: Duration = Duration::from_secs(1);
/// Virtual time between batches of new keys.
const STEP: Duration = Duration::from_millis(10);

struct Round {
    ns_per_key: f64,
    bytes_per_live: f64,
    held_per_live: f64,
}

/// One round: a fresh limiter keeping expired keys for `keep` (`None`: the default, which
/// learns it), `rate` new keys per virtual second.
fn round(rate: u64, keep: Option<Duration>, seed: u64) -> Round {
    // The clock is only read by `len()`, at the end, to count the live keys.
    let clock = ManualClock::new();
    let mut builder = Limiter::builder(Quota::with_period(LIFE)).clock(clock.clone());
    if let Some(keep) = keep {
        builder = builder.keep_expired(keep);
    }
    let limiter: Limiter<u64> = builder.build();
    let mut rng = Rng::new(seed);
    let per_step = rate * STEP.as_millis() as u64 / 1_000;
    let steps_per_life = (LIFE.as_nanos() / STEP.as_nanos()) as u64;
    let mut now = Timestamp::ZERO;
    let mut run = |steps: u64| {
        for _ in 0..steps {
            for _ in 0..per_step {
                assert!(limiter.check_at(&rng.next_u64(), now).is_ok());
            }
            now = now + STEP;
        }
    };
    run(3 * steps_per_life);
    let started = Instant::now();
    run(10 * steps_per_life);
    let ns_per_key = started.elapsed().as_nanos() as f64 / (10 * steps_per_life * per_step) as f64;
    clock.set(now);
    let stats = limiter.stats();
    let live = limiter.count_live_keys() as f64;
    Round {
        ns_per_key,
        bytes_per_live: stats.bytes as f64 / live,
        held_per_live: stats.keys_held as f64 / live,
    }
}

fn main() {
    let (rates, default_rounds): (&[u64], usize) = match Size::from_env() {
        Size::Test => (&[2_000], 1),
        Size::Quick => (&[100_000], 3),
        Size::Full => (&[10_000, 100_000, 1_000_000], 7),
    };
    let rounds = Size::rounds_or(default_rounds);
    // What the memory figures cost a limiter that keeps expired keys (design record §8).
    let keep = std::env::var("TOLLGATE_BENCH_KEEP_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis);
    match keep {
        Some(keep) => println!("`keep_expired`: {keep:?}"),
        None => println!("`keep_expired`: learned (the default)"),
    }
    println!();
    table_header(&[
        &format!("new keys/s (live {} s each)", LIFE.as_secs()),
        "ns per new key",
        "bytes per live key",
        "keys held per live key",
    ]);
    for &rate in rates {
        let results: Vec<Round> = (0..rounds)
            .map(|i| round(rate, keep, 7 + i as u64))
            .collect();
        let column = |f: fn(&Round) -> f64| {
            plain_summary(Summary::of(&results.iter().map(f).collect::<Vec<_>>()), "")
        };
        println!(
            "| {rate} | {} | {} | {} |",
            column(|r| r.ns_per_key),
            column(|r| r.bytes_per_live),
            column(|r| r.held_per_live),
        );
    }
}
