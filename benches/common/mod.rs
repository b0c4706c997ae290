//! The benches' shared harness: run sizes, a PRNG, summaries over rounds, threads released
//! together; formatting in [`fmt`], memory and CPU readings in [`proc`], the machine in
//! [`machine`]; the `check` bench's limiters in [`subjects`].

// Each bench uses a part of the harness.
#![allow(dead_code)]

pub(crate) mod fmt;
pub(crate) mod machine;
pub(crate) mod proc;
pub(crate) mod subjects;

use std::sync::Barrier;
use std::time::Instant;

/// How big a run is, for every bench: full under `cargo bench`, a smoke run with
/// `TOLLGATE_BENCH_QUICK=1`, and tiny when built as a test (`cargo test --all-targets` runs
/// bench targets without `--bench`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Size {
    Test,
    Quick,
    Full,
}

impl Size {
    pub(crate) fn from_env() -> Size {
        let bench = std::env::args().any(|a| a == "--bench");
        let quick = std::env::var("TOLLGATE_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        match (bench, quick) {
            (false, _) => Size::Test,
            (true, true) => Size::Quick,
            (true, false) => Size::Full,
        }
    }

    /// `TOLLGATE_BENCH_ROUNDS` where it is set to a positive number, else `default`: the
    /// benches take it for their rounds (each one's docs say which parts it sizes). Set to
    /// anything else, the bench stops and says so, rather than run a size nobody asked for.
    pub(crate) fn rounds_or(default: usize) -> usize {
        match std::env::var("TOLLGATE_BENCH_ROUNDS") {
            Err(_) => default,
            Ok(r) => match r.parse() {
                Ok(r) if r > 0 => r,
                _ => panic!("TOLLGATE_BENCH_ROUNDS={r:?}: expected a positive number of rounds"),
            },
        }
    }

    /// `"test"`, `"quick"` or `"full"`, as the reports name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Size::Test => "test",
            Size::Quick => "quick",
            Size::Full => "full",
        }
    }
}

/// How big a run of the `check` bench is.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// `"full"`, `"quick"` or `"test"`.
    pub(crate) mode: &'static str,
    /// Rounds of each per-check measurement (A, B, D, E and the primitives).
    pub(crate) rounds: usize,
    /// Rounds of scenario C (each builds and fills a fresh limiter).
    pub(crate) c_rounds: usize,
    /// Checks on one hot key before A moves to a fresh key (below the live burst).
    pub(crate) a_block: usize,
    /// Blocks per round of A.
    pub(crate) a_blocks: usize,
    pub(crate) b_keys: usize,
    pub(crate) c_keys: usize,
    /// Checks per thread per round of D.
    pub(crate) d_ops: usize,
    pub(crate) e_keys: usize,
    /// Iterations per round of the clock/hash/counter primitives.
    pub(crate) prim_iters: usize,
    /// Which scenarios to run: letters of `PABCDEF` (P: primitives, X: clock-free breakdown).
    pub(crate) scenarios: String,
}

impl Config {
    /// Sized by [`Size::from_env`]; `TOLLGATE_BENCH_SCENARIOS=ABE` picks scenarios.
    pub(crate) fn from_env() -> Config {
        let size = Size::from_env();
        let scenarios = std::env::var("TOLLGATE_BENCH_SCENARIOS")
            .unwrap_or_else(|_| "PXABCDEF".to_owned())
            .to_uppercase();
        let base = match size {
            Size::Test => Config {
                mode: size.name(),
                rounds: 1,
                c_rounds: 1,
                a_block: 1_000,
                a_blocks: 2,
                b_keys: 2_000,
                c_keys: 5_000,
                d_ops: 2_000,
                e_keys: 2_000,
                prim_iters: 10_000,
                scenarios: String::new(),
            },
            Size::Quick => Config {
                mode: size.name(),
                rounds: 3,
                c_rounds: 2,
                a_block: 50_000,
                a_blocks: 6,
                b_keys: 100_000,
                c_keys: 500_000,
                d_ops: 300_000,
                e_keys: 100_000,
                prim_iters: 1_000_000,
                scenarios: String::new(),
            },
            Size::Full => Config {
                mode: size.name(),
                rounds: 7,
                c_rounds: 5,
                a_block: 50_000,
                a_blocks: 40,
                b_keys: 1_000_000,
                c_keys: 5_000_000,
                d_ops: 2_000_000,
                e_keys: 1_000_000,
                prim_iters: 10_000_000,
                scenarios: String::new(),
            },
        };
        Config {
            scenarios,
            rounds: Size::rounds_or(base.rounds),
            c_rounds: Size::rounds_or(base.c_rounds),
            ..base
        }
    }

    pub(crate) fn runs(&self, scenario: char) -> bool {
        self.scenarios.contains(scenario)
    }
}

/// splitmix64: distinct-looking keys and shuffles without a dependency.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is irrelevant here).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// `n` random keys (distinct with overwhelming probability).
    pub(crate) fn keys(&mut self, n: usize) -> Vec<u64> {
        (0..n).map(|_| self.next_u64()).collect()
    }

    /// A shuffled copy of `keys` (Fisher–Yates).
    pub(crate) fn shuffled(&mut self, keys: &[u64]) -> Vec<u64> {
        let mut v = keys.to_vec();
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
        v
    }
}

/// Median, min and max of per-round figures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Summary {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Summary {
    pub(crate) fn of(samples: &[f64]) -> Summary {
        assert!(!samples.is_empty());
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Summary {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }
}

/// `48.1 ns (47.0–52.3)`.
impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ns ({}–{})",
            fmt::sig(self.median),
            fmt::sig(self.min),
            fmt::sig(self.max)
        )
    }
}

/// Nearest-rank percentile of sorted values.
pub(crate) fn percentile(sorted: &[i64], p: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Runs `work(thread_index)` on `threads` threads released together; returns the wall time
/// from the first start to the last finish, in nanoseconds, and the sum of what `work`
/// returned.
pub(crate) fn run_threads(threads: usize, work: impl Fn(usize) -> u64 + Sync) -> (f64, u64) {
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let out = work(i);
                    (start, Instant::now(), out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let start = spans.iter().map(|s| s.0).min().unwrap();
    let end = spans.iter().map(|s| s.1).max().unwrap();
    let total = spans.iter().map(|s| s.2).sum();
    ((end - start).as_nanos() as f64, total)
}
