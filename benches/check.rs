//! The `check` benchmark: scenarios A–E of the design record (`src/design.rs`, §8), with tollgate beside governor 0.10
//! (keyed), a `Mutex<HashMap>` GCRA and the `ideal` array, all in one process run.
//!
//! ```text
//! cargo bench --bench check                                  # full run (~3 min on 2 cores)
//! TOLLGATE_BENCH_QUICK=1 cargo bench --bench check           # smoke run (< 30 s)
//! TOLLGATE_BENCH_ROUNDS=15 cargo bench --bench check         # 15 rounds (default 7; C: 5)
//! cargo bench --bench check --no-default-features            # SipHash instead of foldhash
//! TOLLGATE_BENCH_SCENARIOS=ABE cargo bench --bench check     # a subset (letters of PXABCDEF)
//! ```
//!
//! Every figure is nanoseconds per check (for two threads: wall time divided by the checks
//! of both threads, i.e. the inverse of throughput), the median over rounds with min–max.
//! Within a round the limiters take turns, starting with a different one each round, so slow
//! phases of a noisy machine spread over all of them; one untimed warm-up round comes first.
//! The markdown tables on stdout are meant for BENCHMARKS.md; progress goes to stderr.
//!
//! Built as a test (`cargo test --all-targets`, no `--bench` argument) it runs every
//! scenario once on tiny sizes, as a smoke test of the harness itself.

mod common;

use std::hash::BuildHasher;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use common::fmt::{sig, table_header, thousands};
use common::machine::{cpu_model, cpus, loadavg, loadavg_line, today};
use common::proc::{peak_rss_bytes, rss_bytes};
use common::subjects::{
    ALLOW, DENY, ExplicitTime, Governor, Ideal, IdealLong, IdealSparse, LIVE, Naive, Spec, Subject,
    Tollgate, TollgateForgetting, TollgatePresized, TollgateTsc, tollgate_quota,
};
use common::{Config, Rng, Summary, run_threads};

/// One round of a measurement: returns nanoseconds per operation.
type RoundFn<'a> = Box<dyn FnMut() -> f64 + 'a>;

/// Runs one warm-up round and `rounds` timed rounds of every entry, taking turns.
fn interleave(
    label: &str,
    rounds: usize,
    mut entries: Vec<(&'static str, RoundFn<'_>)>,
) -> Vec<(&'static str, Summary)> {
    let n = entries.len();
    let mut samples = vec![Vec::with_capacity(rounds); n];
    for round in 0..=rounds {
        for j in 0..n {
            let i = (round + j) % n;
            let ns = (entries[i].1)();
            if round > 0 {
                samples[i].push(ns);
            }
        }
    }
    entries
        .iter()
        .zip(&samples)
        .map(|((name, _), s)| {
            let sum = Summary::of(s);
            let raw: Vec<String> = s.iter().map(|x| sig(*x)).collect();
            eprintln!("  {label:<4} {name:<18} {sum}   rounds: {}", raw.join(" "));
            (*name, sum)
        })
        .collect()
}

fn find(results: &[(&'static str, Summary)], name: &str) -> Option<Summary> {
    results.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

// ---------------------------------------------------------------------------------------
// primitives

fn primitives(cfg: &Config) -> Vec<(&'static str, Summary)> {
    let iters = cfg.prim_iters;
    let per_op = move |start: Instant| start.elapsed().as_nanos() as f64 / iters as f64;

    let limiter = tollgate::Limiter::<u64>::keyed(live_quota());
    let quanta = governor::clock::QuantaClock::default();
    let tg_hash = tollgate::hash::RandomState::new();
    let sip_hash = std::hash::RandomState::new();
    let counter = crossbeam_utils::CachePadded::new(AtomicU64::new(0));
    let cas = crossbeam_utils::CachePadded::new(AtomicU64::new(0));
    thread_local! {
        static STRIPE: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
    }

    let entries: Vec<(&'static str, RoundFn<'_>)> = vec![
        (
            "Instant::now()",
            Box::new(|| {
                let t = Instant::now();
                for _ in 0..iters {
                    black_box(Instant::now());
                }
                per_op(t)
            }),
        ),
        (
            "origin.elapsed() as u64 ns (the ideal's clock)",
            Box::new(|| {
                let origin = Instant::now();
                let t = Instant::now();
                for _ in 0..iters {
                    black_box(origin.elapsed().as_nanos() as u64);
                }
                per_op(t)
            }),
        ),
        (
            "tollgate limiter.now()",
            Box::new(|| {
                let t = Instant::now();
                for _ in 0..iters {
                    black_box(limiter.now());
                }
                per_op(t)
            }),
        ),
        (
            "governor QuantaClock::now()",
            Box::new(|| {
                use governor::clock::Clock;
                let t = Instant::now();
                for _ in 0..iters {
                    black_box(quanta.now());
                }
                per_op(t)
            }),
        ),
        (
            "tollgate RandomState hash_one(u64), chained",
            Box::new(|| {
                let t = Instant::now();
                // Chained, so this is latency (as on a check's path to its load).
                let mut x = 0u64;
                for _ in 0..iters {
                    x = tg_hash.hash_one(x);
                }
                black_box(x);
                per_op(t)
            }),
        ),
        (
            "std RandomState (SipHash) hash_one(u64), chained",
            Box::new(|| {
                let t = Instant::now();
                // Chained, so this is latency (as on a check's path to its load).
                let mut x = 0u64;
                for _ in 0..iters {
                    x = sip_hash.hash_one(x);
                }
                black_box(x);
                per_op(t)
            }),
        ),
        (
            "thread-local stripe + fetch_add",
            Box::new(|| {
                // What tollgate's per-check statistics cost: a thread-local read and an
                // uncontended atomic add (see src/stats.rs).
                let t = Instant::now();
                for _ in 0..iters {
                    let i = STRIPE.with(|s| {
                        if s.get() == usize::MAX {
                            s.set(0);
                        }
                        s.get()
                    });
                    black_box(i);
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                per_op(t)
            }),
        ),
        (
            "uncontended CAS",
            Box::new(|| {
                let t = Instant::now();
                for _ in 0..iters {
                    let v = cas.load(Ordering::Relaxed);
                    black_box(cas.compare_exchange_weak(
                        v,
                        v + 1,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ))
                    .ok();
                }
                per_op(t)
            }),
        ),
    ];
    interleave("P", cfg.rounds, entries)
}

fn live_quota() -> tollgate::Quota {
    tollgate::Quota::with_period(LIVE.interval).allow_burst(LIVE.burst)
}

// ---------------------------------------------------------------------------------------
// A. 1 thread, one hot key, allow

/// The ideal's array size in A. Hot keys are consecutive integers, which its Fibonacci
/// hashing spreads over 2^16 slots without collisions (a shared slot would pool two keys'
/// bursts and deny).
const A_IDEAL_SLOTS: usize = 1 << 16;

/// The hot key changes every `a_block` checks (fewer than the live burst) so it is never
/// denied; the first check of each block inserts, amortised over the block.
fn scenario_a<S: Subject + 'static>(cfg: &Config) -> RoundFn<'static> {
    let s = S::build(LIVE, A_IDEAL_SLOTS);
    let mut key = 0u64;
    let (block, blocks) = (cfg.a_block, cfg.a_blocks);
    Box::new(move || {
        let start = Instant::now();
        let mut ok = 0u64;
        for _ in 0..blocks {
            key += 1;
            for _ in 0..block {
                ok += u64::from(s.check(black_box(key)));
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / (blocks * block) as f64;
        assert_eq!(ok, (blocks * block) as u64, "{}: A denied a check", S::NAME);
        ns
    })
}

/// A without the clock: one time read per block, then `check_at`.
fn scenario_a_at<S: ExplicitTime + 'static>(cfg: &Config) -> RoundFn<'static> {
    let s = S::build(LIVE, A_IDEAL_SLOTS);
    let mut key = 0u64;
    let (block, blocks) = (cfg.a_block, cfg.a_blocks);
    Box::new(move || {
        let start = Instant::now();
        let mut ok = 0u64;
        for _ in 0..blocks {
            key += 1;
            let now = s.now_ns();
            for _ in 0..block {
                ok += u64::from(s.check_at(black_box(key), now));
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / (blocks * block) as f64;
        assert_eq!(
            ok,
            (blocks * block) as u64,
            "{}: A/at denied a check",
            S::NAME
        );
        ns
    })
}

// ---------------------------------------------------------------------------------------
// B. 1 thread, many live keys, random order

/// Checks `order` once, untimed, before a timed round: the limiters take turns, and each
/// turn would otherwise start with the caches full of the previous limiter's table. A table
/// that fits in the cache (the ideal's 8 MB at 1M keys) then paid cold misses in every
/// round, one that does not fit hardly noticed, and the ideal's B figure was 128–132 ns
/// where a warm pass makes it 104–123 (the shared anchors harness, which also warms each row
/// before timing it, measured 81–84 that day). A limiter in a user's program sees its own
/// table warm.
fn warm_up(order: &[u64], check: impl Fn(u64) -> bool) {
    for &k in order {
        black_box(check(k));
    }
}

fn scenario_b<'a, S: Subject + 'a>(keys: &'a [u64], order: &'a [u64]) -> RoundFn<'a> {
    let s = S::build(LIVE, keys.len());
    for &k in keys {
        assert!(s.check(k), "{}: B pre-insert denied", S::NAME);
    }
    Box::new(move || {
        warm_up(order, |k| s.check(k));
        let start = Instant::now();
        let mut ok = 0u64;
        for &k in order {
            ok += u64::from(s.check(k));
        }
        let ns = start.elapsed().as_nanos() as f64 / order.len() as f64;
        assert_eq!(ok, order.len() as u64, "{}: B denied a check", S::NAME);
        ns
    })
}

/// Keys a batch in B's `check_batch_at` row: a proxy's turn of requests.
const BATCH: usize = 64;

/// B through `check_batch_at`: one time read per round, the keys in batches of [`BATCH`].
fn scenario_b_batch<'a>(keys: &'a [u64], order: &'a [u64]) -> RoundFn<'a> {
    let s = Tollgate::build(LIVE, keys.len());
    for &k in keys {
        assert!(s.check(k), "B batch pre-insert denied");
    }
    Box::new(move || {
        warm_up(order, |k| s.check(k));
        let start = Instant::now();
        let now = tollgate::Timestamp::from_nanos(s.now_ns());
        let mut ok = 0u64;
        for batch in order.chunks(BATCH) {
            s.limiter()
                .check_batch_at(batch, now, |_, verdict| ok += u64::from(verdict.is_ok()));
        }
        let ns = start.elapsed().as_nanos() as f64 / order.len() as f64;
        assert_eq!(ok, order.len() as u64, "B/batch denied a check");
        ns
    })
}

/// B without the clock: one time read per round.
fn scenario_b_at<'a, S: ExplicitTime + 'a>(keys: &'a [u64], order: &'a [u64]) -> RoundFn<'a> {
    let s = S::build(LIVE, keys.len());
    for &k in keys {
        assert!(s.check(k), "{}: B pre-insert denied", S::NAME);
    }
    Box::new(move || {
        warm_up(order, |k| s.check(k));
        let start = Instant::now();
        let now = s.now_ns();
        let mut ok = 0u64;
        for &k in order {
            ok += u64::from(s.check_at(k, now));
        }
        let ns = start.elapsed().as_nanos() as f64 / order.len() as f64;
        assert_eq!(ok, order.len() as u64, "{}: B/at denied a check", S::NAME);
        ns
    })
}

// ---------------------------------------------------------------------------------------
// F. a full table (tollgate only): what a new key costs once the cap is reached

/// The full table's cap (64 shards of 256).
const F_CAP: usize = 16_384;
const F_HIT: &str = "a held key (hit)";
const F_REFUSED: &str = "a new key, refused (`RefuseNewKeys`)";
const F_EVICTING: &str = "a new key, evicting (`EvictClosestToExpiry`)";
/// The breakdown of an eviction: a new key checked for 0 cells at the same full table, which
/// takes the same hot-path miss, lock and locked probe and writes nothing (no victim).
const F_PROBED: &str = "breakdown: a new key, `check_n(k, 0)` (miss, lock, locked probe; no write)";
/// And the uncontended lock alone, as the shard's `Mutex` is (std's), with a store inside.
const F_LOCK: &str = "breakdown: an uncontended `std::sync::Mutex` lock + store + unlock";

/// What scenario F checks.
#[derive(Debug, Clone, Copy, PartialEq)]
enum FCheck {
    /// A held key.
    Hit,
    /// A new key, for one cell: refused or evicting.
    New,
    /// A new key, for zero cells: nothing written.
    NewZero,
}
/// The design record's target for F: a refused or evicting new key costs at most this many
/// hits (`src/design.rs`, §8).
const F_TARGET: f64 = 2.0;

/// One round: `checks` checks on a full limiter, of held keys (`hit`) or of new keys, each
/// refused or evicting a held key. Checks read the clock, as in A and B. The limiter is built
/// once per entry and kept across rounds: a refusing table stays full (after its first
/// refusal per shard, new keys meet the shard's closed gate: `src/table/gate.rs`); an
/// evicting one keeps evicting, in place, the keys it inserted in earlier rounds.
fn scenario_f(
    policy: tollgate::FullPolicy,
    what: FCheck,
    checks: usize,
    seed: u64,
) -> RoundFn<'static> {
    let mut rng = Rng::new(seed);
    let limiter: tollgate::Limiter<u64> = tollgate::Limiter::builder(tollgate_quota(LIVE))
        .capacity(F_CAP)
        .full_policy(policy)
        .build();
    // Fill every shard: under RefuseNewKeys a key that does not fit is refused, under
    // eviction it evicts; either way the table ends at its cap.
    let mut held = Vec::with_capacity(F_CAP);
    while limiter.stats().keys_held < limiter.capacity() {
        // `stats` scans the table: look only once per batch of new keys.
        for _ in 0..1_024 {
            let k = rng.next_u64();
            if limiter.check(&k).is_ok() {
                held.push(k);
            }
        }
    }
    held.retain(|k| {
        limiter
            .check_n(k, 0)
            .is_ok_and(|ok| ok.remaining() < LIVE.burst)
    });
    Box::new(move || {
        let fresh: Vec<u64> = (0..checks).map(|_| rng.next_u64()).collect();
        let start = Instant::now();
        let mut ok = 0usize;
        match what {
            FCheck::Hit => {
                for i in 0..checks {
                    ok += usize::from(limiter.check(black_box(&held[i % held.len()])).is_ok());
                }
            }
            FCheck::New => {
                for k in &fresh {
                    ok += usize::from(limiter.check(black_box(k)).is_ok());
                }
            }
            FCheck::NewZero => {
                for k in &fresh {
                    ok += usize::from(limiter.check_n(black_box(k), 0).is_ok());
                }
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / checks as f64;
        let want = match (what, policy) {
            (FCheck::New, tollgate::FullPolicy::RefuseNewKeys) => 0,
            _ => checks,
        };
        assert_eq!(ok, want, "F: {what:?}, {policy:?}");
        ns
    })
}

/// One round: `checks` lock, store, unlock of an uncontended `std::sync::Mutex` (F's
/// breakdown).
fn lock_alone(checks: usize) -> RoundFn<'static> {
    let lock = std::sync::Mutex::new(0u64);
    Box::new(move || {
        let start = Instant::now();
        for i in 0..checks {
            *black_box(&lock).lock().unwrap() = i as u64;
        }
        start.elapsed().as_nanos() as f64 / checks as f64
    })
}

// ---------------------------------------------------------------------------------------
// C. insert many new live keys
//
// Every round of every subject runs in a fresh child process (this executable again), as a
// program that starts and meets a flood of new keys: its table's pages are faulted in as it
// grows, where a process that has run other rounds would reuse pages the allocator kept.
// The anchors harness times C the same way, so the two agree on the governor row.

#[derive(Debug, Clone, Copy)]
struct CRound {
    ns: f64,
    reported: Option<usize>,
    held: usize,
    remembered: Option<bool>,
    /// `None` where `/proc` cannot tell.
    mem: Option<Mem>,
}

/// Memory of one filled limiter, as its child process saw it.
#[derive(Debug, Clone, Copy)]
struct Mem {
    /// RSS after the inserts minus RSS just before building the limiter.
    rss_delta: usize,
    /// Peak RSS (`VmHWM`) after the inserts minus RSS before building: includes the old and
    /// new tables that coexist while a hash table grows.
    peak_delta: usize,
}

/// One round of C, in a child: `fill` inserts `keys` into a fresh `S` (returning how many
/// it admitted), timed; then what the limiter holds and the memory it added.
fn c_round<S: Subject>(keys: &[u64], verify: bool, fill: impl FnOnce(&S, &[u64]) -> u64) -> CRound {
    let before = rss_bytes();
    let s = S::build(LIVE, keys.len());
    let start = Instant::now();
    let ok = fill(&s, keys);
    let ns = start.elapsed().as_nanos() as f64 / keys.len() as f64;
    let (after, peak) = (rss_bytes(), peak_rss_bytes());
    assert_eq!(ok, keys.len() as u64, "{}: C denied a new key", S::NAME);
    CRound {
        ns,
        reported: s.reported_bytes(),
        held: s.keys_held(),
        remembered: if verify {
            s.verify_remembered(keys)
        } else {
            None
        },
        mem: match (before, after, peak) {
            (Some(before), Some(after), Some(peak)) => Some(Mem {
                rss_delta: after.saturating_sub(before),
                peak_delta: peak.saturating_sub(before),
            }),
            _ => None,
        },
    }
}

/// Inserts `keys` one `check` at a time; returns how many were admitted.
fn fill_one_by_one<S: Subject>(s: &S, keys: &[u64]) -> u64 {
    let mut ok = 0u64;
    for &k in keys {
        ok += u64::from(s.check(k));
    }
    ok
}

/// Inserts `keys` through `check_batch_at`, [`BATCH`] keys at a time, reading the time once
/// a batch; returns how many were admitted.
fn fill_in_batches(s: &Tollgate, keys: &[u64]) -> u64 {
    let mut ok = 0u64;
    for batch in keys.chunks(BATCH) {
        let now = tollgate::Timestamp::from_nanos(s.now_ns());
        s.limiter()
            .check_batch_at(batch, now, |_, verdict| ok += u64::from(verdict.is_ok()));
    }
    ok
}

fn scenario_c<S: Subject>(keys: &[u64], verify: bool) -> CRound {
    c_round::<S>(keys, verify, fill_one_by_one)
}

/// C through `check_batch_at`: what inserting new keys costs when their misses overlap.
fn scenario_c_batch(keys: &[u64], verify: bool) -> CRound {
    c_round::<Tollgate>(keys, verify, fill_in_batches)
}

const CHILD_ENV: &str = "TOLLGATE_BENCH_CHILD";
const CHILD_KEYS_ENV: &str = "TOLLGATE_BENCH_CHILD_KEYS";
const CHILD_VERIFY_ENV: &str = "TOLLGATE_BENCH_CHILD_VERIFY";
const CHILD_TAG: &str = "TOLLGATE_BENCH_CHILD_RESULT";

/// A limiter of scenario C and its round.
struct CSubject {
    name: &'static str,
    round: fn(&[u64], bool) -> CRound,
}

const fn c_subject<S: Subject>() -> CSubject {
    CSubject {
        name: S::NAME,
        round: scenario_c::<S>,
    }
}

/// C's subject that inserts through `check_batch_at`.
const C_BATCH: &str = "tollgate check_batch_at";

const C_SUBJECTS: [CSubject; 6] = [
    c_subject::<Tollgate>(),
    c_subject::<TollgatePresized>(),
    CSubject {
        name: C_BATCH,
        round: scenario_c_batch,
    },
    c_subject::<Governor>(),
    c_subject::<Naive>(),
    c_subject::<Ideal>(),
];

/// Runs this executable again as a child that plays one round of subject `index` of
/// [`C_SUBJECTS`] on `n` keys, and reads its result. A child that fails fails the bench:
/// a round left out would bias the median.
fn c_round_in_child(index: usize, n: usize, verify: bool) -> CRound {
    let name = C_SUBJECTS[index].name;
    let exe = std::env::current_exe().expect("this executable's path");
    let out = std::process::Command::new(exe)
        .env(CHILD_ENV, index.to_string())
        .env(CHILD_KEYS_ENV, n.to_string())
        .env(CHILD_VERIFY_ENV, u8::from(verify).to_string())
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("C: cannot start the child for {name}: {e}"));
    assert!(
        out.status.success(),
        "C: the child for {name} failed: {}",
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(CHILD_TAG))
        .unwrap_or_else(|| panic!("C: the child for {name} printed no result"));
    parse_round(line).unwrap_or_else(|| panic!("C: the child for {name} printed {line:?}"))
}

/// A child's result line (after [`CHILD_TAG`]): `ns rss peak held reported remembered`,
/// `rss` and `peak` `-` where `/proc` cannot tell, the last two where the limiter cannot.
fn parse_round(line: &str) -> Option<CRound> {
    let mut f = line.split_whitespace();
    let ns = f.next()?.parse().ok()?;
    let (rss, peak) = (f.next()?, f.next()?);
    let mem = match (rss, peak) {
        ("-", "-") => None,
        (rss, peak) => Some(Mem {
            rss_delta: rss.parse().ok()?,
            peak_delta: peak.parse().ok()?,
        }),
    };
    let held = f.next()?.parse().ok()?;
    let reported = match f.next()? {
        "-" => None,
        b => Some(b.parse().ok()?),
    };
    let remembered = match f.next()? {
        "-" => None,
        r => Some(r == "1"),
    };
    Some(CRound {
        ns,
        reported,
        held,
        remembered,
        mem,
    })
}

/// If this process is a scenario-C child, plays its round, prints the result and returns
/// `true`.
fn run_as_child() -> bool {
    let Ok(index) = std::env::var(CHILD_ENV) else {
        return false;
    };
    let var = |name: &str| -> usize {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("C child: {name} unset or not a number"))
    };
    let index: usize = index.parse().expect("C child: subject index");
    let keys = Rng::new(0xC).keys(var(CHILD_KEYS_ENV));
    let r = (C_SUBJECTS[index].round)(&keys, var(CHILD_VERIFY_ENV) == 1);
    let reported = r.reported.map_or_else(|| "-".to_owned(), |b| b.to_string());
    let remembered = r.remembered.map_or("-", |ok| if ok { "1" } else { "0" });
    let (rss, peak) = r.mem.map_or_else(
        || ("-".to_owned(), "-".to_owned()),
        |m| (m.rss_delta.to_string(), m.peak_delta.to_string()),
    );
    println!(
        "{CHILD_TAG} {} {rss} {peak} {} {reported} {remembered}",
        r.ns, r.held
    );
    true
}

struct CResult {
    name: &'static str,
    ns: Summary,
    rounds: Vec<CRound>,
}

impl CResult {
    /// The most memory any round's child saw the limiter add (the rounds insert the same
    /// keys, so they differ only by the allocator's luck); `None` where `/proc` could not tell.
    fn mem(&self) -> Option<Mem> {
        let mems = || self.rounds.iter().filter_map(|r| r.mem);
        Some(Mem {
            rss_delta: mems().map(|m| m.rss_delta).max()?,
            peak_delta: mems().map(|m| m.peak_delta).max()?,
        })
    }
}

fn run_c(cfg: &Config) -> Vec<CResult> {
    let mut rounds: Vec<Vec<CRound>> = vec![Vec::new(); C_SUBJECTS.len()];
    for round in 0..cfg.c_rounds {
        for j in 0..C_SUBJECTS.len() {
            let i = (round + j) % C_SUBJECTS.len();
            let r = c_round_in_child(i, cfg.c_keys, round == 0);
            let mem = r.mem.map_or_else(String::new, |m| {
                format!(
                    ", RSS +{} MiB, peak +{} MiB",
                    m.rss_delta >> 20,
                    m.peak_delta >> 20
                )
            });
            eprintln!(
                "  C    {:<18} round {round}: {} ns/key{mem}",
                C_SUBJECTS[i].name,
                sig(r.ns),
            );
            rounds[i].push(r);
        }
    }
    C_SUBJECTS
        .iter()
        .zip(rounds)
        .map(|(CSubject { name, .. }, rounds)| {
            let ns: Vec<f64> = rounds.iter().map(|r| r.ns).collect();
            CResult {
                name,
                ns: Summary::of(&ns),
                rounds,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// D. 2 threads, one key, deny

fn scenario_d<S: Subject + 'static>(cfg: &Config) -> RoundFn<'static> {
    let s = S::build(DENY, 1);
    let key = 0xD_u64;
    assert!(s.check(key), "{}: D's first check is admitted", S::NAME);
    let ops = cfg.d_ops;
    Box::new(move || {
        let (wall, admitted) = run_threads(2, |_| {
            let mut ok = 0u64;
            for _ in 0..ops {
                ok += u64::from(s.check(black_box(key)));
            }
            ok
        });
        assert_eq!(admitted, 0, "{}: D admitted a check", S::NAME);
        wall / (2 * ops) as f64
    })
}

// ---------------------------------------------------------------------------------------
// E. 2 threads, many shared live keys

fn scenario_e<'a, S: Subject + 'a>(
    spec: Spec,
    keys: &'a [u64],
    orders: &'a [Vec<u64>; 2],
) -> RoundFn<'a> {
    let s = S::build(spec, keys.len());
    for &k in keys {
        assert!(s.check(k), "{}: E pre-insert denied", S::NAME);
    }
    Box::new(move || {
        warm_up(&orders[0], |k| s.check(k));
        let (wall, ok) = run_threads(2, |t| {
            let mut ok = 0u64;
            for &k in &orders[t] {
                ok += u64::from(s.check(k));
            }
            ok
        });
        let total = orders[0].len() + orders[1].len();
        assert_eq!(ok, total as u64, "{}: E denied a check", S::NAME);
        wall / total as f64
    })
}

// ---------------------------------------------------------------------------------------
// the report

/// A scenario's full result set, extra variants included.
struct Breakdown {
    scenario: &'static str,
    note: String,
    results: Vec<(&'static str, Summary)>,
}

/// Variant names: checks with a time read ahead (the clock's cost removed).
const TOLLGATE_AT: &str = "tollgate check_at";
const IDEAL_AT: &str = "ideal check_at";
const IDEAL_SPARSE_AT: &str = "ideal, 4x the slots, check_at";
const TOLLGATE_BATCH_AT: &str = "tollgate check_batch_at, 64 keys a batch";
/// B's `check_at` target: at most this times the ideal's `check_at`, each given one time.
const B_AT_TARGET: f64 = 1.2;

/// Whether variant `name` is given its time (so compares with the ideal's `check_at`).
fn given_time(name: &str) -> bool {
    name.ends_with("check_at") || name == TOLLGATE_BATCH_AT
}

struct Row {
    scenario: String,
    results: Vec<(&'static str, Summary)>,
    /// Target on tollgate/ideal, if the target is a ratio to the ideal.
    ideal_target: Option<f64>,
    /// Target on tollgate/governor, for a row judged against governor alone.
    governor_target: Option<f64>,
}

const COLUMNS: [&str; 4] = [Tollgate::NAME, Governor::NAME, Naive::NAME, Ideal::NAME];

fn ratio(a: Option<Summary>, b: Option<Summary>) -> Option<f64> {
    Some(a?.median / b?.median)
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "–".to_owned(), |r| format!("{r:.2}"))
}

/// C's targets (design record §8): tollgate's insert time at most this times governor's, and bytes per
/// key at most these, growing from the default size and presized.
const C_NS_TARGET: f64 = 0.8;
const C_BYTES_GROWING: f64 = 24.0;
const C_BYTES_PRESIZED: f64 = 20.0;

fn print_main_table(rows: &[Row], c: Option<&[CResult]>, cfg: &Config) {
    table_header(&[
        "scenario",
        "tollgate",
        "governor 0.10 keyed",
        "Mutex<HashMap>",
        "ideal",
        "tollgate / ideal",
        "tollgate / governor",
        "target",
        "met",
    ]);
    for row in rows {
        let cells: Vec<String> = COLUMNS
            .iter()
            .map(|c| find(&row.results, c).map_or_else(|| "–".to_owned(), |s| s.to_string()))
            .collect();
        let t = find(&row.results, Tollgate::NAME);
        let vs_ideal = ratio(t, find(&row.results, Ideal::NAME));
        let vs_gov = ratio(t, find(&row.results, Governor::NAME));
        let judge =
            |r: Option<f64>, x: f64| r.map_or("–", |r| if r <= x { "yes" } else { "**no**" });
        let (target, met) = match (row.ideal_target, row.governor_target) {
            (Some(x), _) => (format!("<= {x} x ideal"), judge(vs_ideal, x)),
            (None, Some(x)) => (format!("<= {x} x governor"), judge(vs_gov, x)),
            (None, None) => ("–".to_owned(), "–"),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {target} | {met} |",
            row.scenario,
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            fmt_ratio(vs_ideal),
            fmt_ratio(vs_gov),
        );
    }
    let Some(c) = c else { return };
    let n = cfg.c_keys;
    let get = |name: &str| c.iter().find(|r| r.name == name);
    let cell = |name: &str| get(name).map_or_else(|| "–".to_owned(), |r| r.ns.to_string());
    let (t, tp, tb, g, i) = (
        get(Tollgate::NAME),
        get(TollgatePresized::NAME),
        get(C_BATCH),
        get(Governor::NAME),
        get(Ideal::NAME),
    );
    let r = |a: Option<&CResult>, b: Option<&CResult>| {
        fmt_ratio(a.zip(b).map(|(a, b)| a.ns.median / b.ns.median))
    };
    let met_ns = |a: Option<&CResult>| match (a, g) {
        (Some(a), Some(g)) if a.ns.median <= C_NS_TARGET * g.ns.median => "yes",
        (Some(_), Some(_)) => "**no**",
        _ => "–",
    };
    println!(
        "| C. insert {} new live keys, ns/key (tollgate growing) | {} | {} | {} | {} | {} | {} | <= {C_NS_TARGET} x governor | {} |",
        thousands(n),
        cell(Tollgate::NAME),
        cell(Governor::NAME),
        cell(Naive::NAME),
        cell(Ideal::NAME),
        r(t, i),
        r(t, g),
        met_ns(t),
    );
    println!(
        "| C. same, tollgate `.presize({})` | {} | | | | {} | {} | <= {C_NS_TARGET} x governor | {} |",
        thousands(n),
        cell(TollgatePresized::NAME),
        r(tp, i),
        r(tp, g),
        met_ns(tp),
    );
    println!(
        "| C. same, tollgate growing, `check_batch_at` ({BATCH} keys a batch) | {} | | | | {} | {} | <= {C_NS_TARGET} x governor | {} |",
        cell(C_BATCH),
        r(tb, i),
        r(tb, g),
        met_ns(tb),
    );
    let bytes = |name: &str| get(name).and_then(|r| bytes_per_key(r, n));
    let bcell = |name: &str| {
        bytes(name).map_or_else(|| "–".to_owned(), |(b, how)| format!("{b:.1} B ({how})"))
    };
    let met_b = |name: &str, limit: f64| match bytes(name) {
        Some((b, _)) if b <= limit => "yes",
        Some(_) => "**no**",
        None => "–",
    };
    println!(
        "| C. bytes/key (tollgate growing) | {} | {} | {} | {} | | | <= {C_BYTES_GROWING} B | {} |",
        bcell(Tollgate::NAME),
        bcell(Governor::NAME),
        bcell(Naive::NAME),
        bcell(Ideal::NAME),
        met_b(Tollgate::NAME, C_BYTES_GROWING),
    );
    println!(
        "| C. bytes/key, tollgate presized | {} | | | | | | <= {C_BYTES_PRESIZED} B | {} |",
        bcell(TollgatePresized::NAME),
        met_b(TollgatePresized::NAME, C_BYTES_PRESIZED),
    );
}

/// Bytes per key: the limiter's own figure where it has one, else the RSS delta.
fn bytes_per_key(r: &CResult, n: usize) -> Option<(f64, &'static str)> {
    let first = r.rounds.first()?;
    match first.reported {
        Some(b) => Some((
            b as f64 / n as f64,
            if r.name == Ideal::NAME {
                "exact"
            } else {
                "stats"
            },
        )),
        None => r.mem().map(|m| (m.rss_delta as f64 / n as f64, "RSS")),
    }
}

fn print_c_table(c: &[CResult], n: usize) {
    table_header(&[
        "limiter",
        "ns/key",
        "bytes/key, self-reported",
        "bytes/key, RSS delta (fresh process)",
        "peak RSS delta/key during the inserts",
        "keys held afterwards",
        "all keys remembered on re-check",
    ]);
    for r in c {
        let first = r.rounds[0];
        let rep = first.reported.map_or_else(
            || "–".to_owned(),
            |b| format!("{:.1} B", b as f64 / n as f64),
        );
        let per_key = |b: usize| format!("{:.1} B", b as f64 / n as f64);
        let (rss, peak) = r.mem().map_or_else(
            || ("–".to_owned(), "–".to_owned()),
            |m| (per_key(m.rss_delta), per_key(m.peak_delta)),
        );
        let held = if r.name == Ideal::NAME {
            "n/a (no collision handling)".to_owned()
        } else {
            let all = r.rounds.iter().all(|x| x.held == n);
            let (lo, hi) = r.rounds.iter().fold((usize::MAX, 0), |(lo, hi), x| {
                (lo.min(x.held), hi.max(x.held))
            });
            if all {
                format!("{} (every round)", thousands(n))
            } else {
                format!(
                    "**{}–{} of {}**",
                    thousands(lo),
                    thousands(hi),
                    thousands(n)
                )
            }
        };
        let remembered = match first.remembered {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "–",
        };
        println!(
            "| {} | {} | {rep} | {rss} | {peak} | {held} | {remembered} |",
            r.name, r.ns
        );
    }
}

fn main() {
    if run_as_child() {
        return;
    }
    let cfg = Config::from_env();
    let hasher = if cfg!(feature = "foldhash") {
        "foldhash (default features)"
    } else {
        "SipHash-1-3 (--no-default-features)"
    };
    let started = Instant::now();
    let threads = cpus();
    let load_before = loadavg();
    eprintln!(
        "tollgate check bench: mode {}, tollgate hasher {hasher}, load average {load_before}",
        cfg.mode
    );

    let mut rows: Vec<Row> = Vec::new();
    let mut prims = None;
    let mut breakdown: Vec<Breakdown> = Vec::new();

    if cfg.runs('P') {
        eprintln!("P: primitives");
        prims = Some(primitives(&cfg));
    }
    if cfg.runs('A') {
        eprintln!("A: 1 thread, one hot key, allow");
        let mut entries: Vec<(&'static str, RoundFn<'_>)> = vec![
            (Tollgate::NAME, scenario_a::<Tollgate>(&cfg)),
            (Governor::NAME, scenario_a::<Governor>(&cfg)),
            (Naive::NAME, scenario_a::<Naive>(&cfg)),
            (Ideal::NAME, scenario_a::<Ideal>(&cfg)),
        ];
        if cfg.runs('X') {
            entries.push((TOLLGATE_AT, scenario_a_at::<Tollgate>(&cfg)));
            entries.push((IDEAL_AT, scenario_a_at::<Ideal>(&cfg)));
            entries.push((TollgateTsc::NAME, scenario_a::<TollgateTsc>(&cfg)));
        }
        let results = interleave("A", cfg.rounds, entries);
        breakdown.push(Breakdown {
            scenario: "A",
            note: format!(
                "`check_at` reads the time once per {} checks",
                thousands(cfg.a_block)
            ),
            results: results.clone(),
        });
        rows.push(Row {
            scenario: "A. 1 thread, one hot key, allow".to_owned(),
            results,
            ideal_target: Some(1.2),
            governor_target: None,
        });
    }
    if cfg.runs('B') {
        eprintln!(
            "B: 1 thread, {} live keys, random order",
            thousands(cfg.b_keys)
        );
        let mut rng = Rng::new(0xB);
        let keys = rng.keys(cfg.b_keys);
        let order = rng.shuffled(&keys);
        let mut entries: Vec<(&'static str, RoundFn<'_>)> = vec![
            (Tollgate::NAME, scenario_b::<Tollgate>(&keys, &order)),
            (Governor::NAME, scenario_b::<Governor>(&keys, &order)),
            (Naive::NAME, scenario_b::<Naive>(&keys, &order)),
            (Ideal::NAME, scenario_b::<Ideal>(&keys, &order)),
        ];
        if cfg.runs('X') {
            entries.push((TOLLGATE_AT, scenario_b_at::<Tollgate>(&keys, &order)));
            entries.push((IDEAL_AT, scenario_b_at::<Ideal>(&keys, &order)));
            entries.push((TOLLGATE_BATCH_AT, scenario_b_batch(&keys, &order)));
            entries.push((
                TollgatePresized::NAME,
                scenario_b::<TollgatePresized>(&keys, &order),
            ));
            entries.push((IdealSparse::NAME, scenario_b::<IdealSparse>(&keys, &order)));
            // Why `check_at` trails the ideal's: its footprint, the length of a check, both.
            entries.push((IDEAL_SPARSE_AT, scenario_b_at::<IdealSparse>(&keys, &order)));
            entries.push((
                IdealLong::<1>::NAME,
                scenario_b_at::<IdealLong<1>>(&keys, &order),
            ));
            entries.push((
                IdealLong::<4>::NAME,
                scenario_b_at::<IdealLong<4>>(&keys, &order),
            ));
            entries.push((TollgateTsc::NAME, scenario_b::<TollgateTsc>(&keys, &order)));
        }
        let results = interleave("B", cfg.rounds, entries);
        breakdown.push(Breakdown {
            scenario: "B",
            note: "`check_at` reads the time once per round".to_owned(),
            results: results.clone(),
        });
        rows.push(Row {
            scenario: format!(
                "B. 1 thread, {} live keys, random order",
                thousands(cfg.b_keys)
            ),
            results,
            ideal_target: Some(1.3),
            governor_target: None,
        });
    }
    let c = if cfg.runs('C') {
        eprintln!("C: insert {} new live keys", thousands(cfg.c_keys));
        Some(run_c(&cfg))
    } else {
        None
    };
    if cfg.runs('D') {
        eprintln!("D: 2 threads, one key, deny");
        let results = interleave(
            "D",
            cfg.rounds,
            vec![
                (Tollgate::NAME, scenario_d::<Tollgate>(&cfg)),
                (Governor::NAME, scenario_d::<Governor>(&cfg)),
                (Naive::NAME, scenario_d::<Naive>(&cfg)),
                (Ideal::NAME, scenario_d::<Ideal>(&cfg)),
            ],
        );
        rows.push(Row {
            scenario: "D. 2 threads, one key, deny".to_owned(),
            results,
            ideal_target: Some(1.3),
            governor_target: None,
        });
    }
    if cfg.runs('E') {
        eprintln!("E: 2 threads, {} shared live keys", thousands(cfg.e_keys));
        let mut rng = Rng::new(0xE);
        let keys = rng.keys(cfg.e_keys);
        let orders = [rng.shuffled(&keys), rng.shuffled(&keys)];
        let mut entries: Vec<(&'static str, RoundFn<'_>)> = vec![
            (Tollgate::NAME, scenario_e::<Tollgate>(LIVE, &keys, &orders)),
            (Governor::NAME, scenario_e::<Governor>(LIVE, &keys, &orders)),
            (Naive::NAME, scenario_e::<Naive>(LIVE, &keys, &orders)),
            (Ideal::NAME, scenario_e::<Ideal>(LIVE, &keys, &orders)),
        ];
        if cfg.runs('X') {
            entries.push((
                TollgateTsc::NAME,
                scenario_e::<TollgateTsc>(LIVE, &keys, &orders),
            ));
        }
        let results = interleave("E", cfg.rounds, entries);
        if cfg.runs('X') {
            breakdown.push(Breakdown {
                scenario: "E",
                note: "the TSC clock's row reads `TscClock`".to_owned(),
                results: results.clone(),
            });
        }
        rows.push(Row {
            scenario: format!("E. 2 threads, {} shared live keys", thousands(cfg.e_keys)),
            results,
            ideal_target: Some(1.5),
            governor_target: None,
        });

        eprintln!("E: the same keys expiring between visits");
        let results = interleave(
            "E expiring",
            cfg.rounds,
            vec![
                (
                    Tollgate::NAME,
                    scenario_e::<Tollgate>(ALLOW, &keys, &orders),
                ),
                (
                    Governor::NAME,
                    scenario_e::<Governor>(ALLOW, &keys, &orders),
                ),
                (Ideal::NAME, scenario_e::<Ideal>(ALLOW, &keys, &orders)),
                (
                    TollgateForgetting::NAME,
                    scenario_e::<TollgateForgetting>(ALLOW, &keys, &orders),
                ),
            ],
        );
        breakdown.push(Breakdown {
            scenario: "E, keys expiring",
            note: "by default the keys stay held (learned); `keep_expired(0)` forgets them"
                .to_owned(),
            results: results.clone(),
        });
        rows.push(Row {
            scenario: "E, the same keys expiring between visits".to_owned(),
            results,
            ideal_target: None,
            governor_target: Some(0.7),
        });
    }

    let full = cfg.runs('F').then(|| {
        eprintln!("F: a full table");
        use tollgate::FullPolicy::{EvictClosestToExpiry, RefuseNewKeys};
        let n = cfg.d_ops / 10;
        interleave(
            "F",
            cfg.rounds,
            vec![
                (F_HIT, scenario_f(RefuseNewKeys, FCheck::Hit, n, 0xF1)),
                (F_REFUSED, scenario_f(RefuseNewKeys, FCheck::New, n, 0xF2)),
                (
                    F_EVICTING,
                    scenario_f(EvictClosestToExpiry, FCheck::New, n, 0xF3),
                ),
                (
                    F_PROBED,
                    scenario_f(EvictClosestToExpiry, FCheck::NewZero, n, 0xF4),
                ),
                (F_LOCK, lock_alone(n)),
            ],
        )
    });

    println!();
    println!(
        "### tollgate hasher: {hasher} — mode {}, {} rounds (C: {}), {} CPUs, {}, {}",
        cfg.mode,
        cfg.rounds,
        cfg.c_rounds,
        threads,
        cpu_model(),
        today()
    );
    println!();
    println!("{}", loadavg_line(&load_before));
    println!();
    println!(
        "Median ns per check (min–max over rounds); two-thread rows are wall time / checks of both threads. Live quota: 1 cell/hour, burst {}.",
        thousands(LIVE.burst as usize)
    );
    println!();
    print_main_table(&rows, c.as_deref(), &cfg);
    if let Some(c) = &c {
        println!();
        println!("Scenario C in detail ({} keys):", thousands(cfg.c_keys));
        println!();
        print_c_table(c, cfg.c_keys);
    }
    if let Some(f) = &full {
        println!();
        println!(
            "Full table (tollgate only; {} keys, 64 shards at their cap, live quota, checks read the clock):",
            thousands(F_CAP)
        );
        println!();
        table_header(&["check", "ns", "/ hit", "target"]);
        let hit = find(f, F_HIT);
        for (name, s) in f {
            let r = ratio(Some(*s), hit);
            let target = match r {
                Some(r) if *name == F_REFUSED || *name == F_EVICTING => {
                    format!(
                        "<= {F_TARGET}x hit: {}",
                        if r <= F_TARGET { "yes" } else { "**no**" }
                    )
                }
                _ => String::new(),
            };
            println!("| {name} | {s} | {} | {target} |", fmt_ratio(r));
        }
    }
    // Scenarios measured with a variant beyond the main table's columns.
    let breakdown: Vec<_> = breakdown
        .iter()
        .filter(|b| b.results.iter().any(|(name, _)| !COLUMNS.contains(name)))
        .collect();
    if !breakdown.is_empty() {
        println!();
        println!(
            "Variants, measured in the same rounds as the scenario (ratios to that scenario's ideal and governor):"
        );
        println!();
        table_header(&["scenario", "variant", "ns", "/ ideal", "/ governor"]);
        for b in breakdown {
            let ideal = find(&b.results, Ideal::NAME);
            let base_ideal = |name: &str| {
                if given_time(name) {
                    find(&b.results, IDEAL_AT)
                } else {
                    ideal
                }
            };
            for (name, s) in &b.results {
                let what = match *name {
                    TOLLGATE_AT | IDEAL_AT => format!("{name} ({})", b.note),
                    _ => (*name).to_owned(),
                };
                let vs = fmt_ratio(ratio(Some(*s), base_ideal(name)));
                let vs = if *name == TOLLGATE_AT && b.scenario == "B" {
                    // B's `check_at` has a target of its own (design record §8).
                    format!("{vs} (vs ideal check_at; target <= {B_AT_TARGET}x)")
                } else if given_time(name) && *name != IDEAL_AT {
                    format!("{vs} (vs ideal check_at)")
                } else {
                    vs
                };
                let vs_gov = fmt_ratio(ratio(Some(*s), find(&b.results, Governor::NAME)));
                println!("| {} | {what} | {s} | {vs} | {vs_gov} |", b.scenario);
            }
        }
    }
    if let Some(p) = &prims {
        println!();
        println!("Primitives (one thread):");
        println!();
        table_header(&["operation", "ns"]);
        for (name, s) in p {
            println!("| {name} | {s} |");
        }
    }
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
}
