//! Concurrency through the public API: with time frozen on a manual clock, admissions are
//! exactly countable however the threads interleave.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::Duration;

use tollgate::{DirectLimiter, FullPolicy, Limiter, ManualClock, Quota, Timestamp};

const THREADS: usize = 8;

/// A burst of `burst` cells that does not refill while the test runs (time is frozen).
fn frozen(burst: u32) -> Quota {
    Quota::per_hour(burst)
}

fn keyed<K: std::hash::Hash + ?Sized>(quota: Quota) -> Limiter<K> {
    Limiter::builder(quota).clock(ManualClock::new()).build()
}

/// Starts `THREADS` threads together; each gets its own check from `per_thread` (say, on its
/// own clone of a limiter), makes `attempts` calls of it and counts the ones that passed.
/// Returns the total.
fn admitted_across_threads<A: Fn() -> bool + Send>(
    attempts: usize,
    per_thread: impl Fn() -> A,
) -> u32 {
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (admit, barrier) = (per_thread(), &barrier);
                s.spawn(move || {
                    barrier.wait();
                    (0..attempts).filter(|_| admit()).count() as u32
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

#[test]
fn many_threads_one_key_admit_exactly_the_burst() {
    let limiter = keyed::<str>(frozen(1_000));
    let admitted = admitted_across_threads(500, || || limiter.check("hot").is_ok());
    assert_eq!(admitted, 1_000);
    let s = limiter.stats();
    assert_eq!((s.admitted, s.denied), (1_000, 3_000));
    assert_eq!(limiter.check_n("hot", 0).unwrap().remaining(), 0);
}

#[test]
fn many_threads_one_key_multi_cell_requests() {
    // Cost 3 against a burst of 1000: exactly 333 requests (999 cells) fit.
    let limiter = keyed::<u64>(frozen(1_000));
    let admitted = admitted_across_threads(100, || || limiter.check_n(&1, 3).is_ok());
    assert_eq!(admitted, 333);
    // One single cell is left over.
    assert_eq!(limiter.check_n(&1, 0).unwrap().remaining(), 1);
}

#[test]
fn many_threads_many_keys_exact_per_key_counts() {
    const KEYS: usize = 200;
    const BURST: u32 = 20;
    let limiter = keyed::<u64>(frozen(BURST));
    let counts: Vec<AtomicU32> = (0..KEYS).map(|_| AtomicU32::new(0)).collect();
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (limiter, counts, barrier) = (&limiter, &counts, &barrier);
            s.spawn(move || {
                barrier.wait();
                // Each thread walks the keys from a different offset, 30 attempts per key.
                for round in 0..30 {
                    for i in 0..KEYS {
                        let k = (i + t * KEYS / THREADS + round) % KEYS;
                        if limiter.check(&(k as u64)).is_ok() {
                            counts[k].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    for (k, c) in counts.iter().enumerate() {
        assert_eq!(c.load(Ordering::Relaxed), BURST, "key {k}");
    }
    let s = limiter.stats();
    assert_eq!(s.admitted, u64::from(BURST) * KEYS as u64);
    assert_eq!(s.denied, (THREADS * 30 * KEYS) as u64 - s.admitted);
    assert_eq!((s.keys_held, limiter.count_live_keys()), (KEYS, KEYS));
}

/// Hot keys `0..HOT` of the tests below, each with a burst that time (frozen) never refills.
const HOT: u64 = 64;
const HOT_BURST: u32 = 1_000;

/// Runs `work` on one thread while three others check the hot keys over and over (more
/// attempts than the burst per key, and at least until `work` is done), then asserts that
/// every hot key admitted exactly its burst: no admission lost or doubled by whatever `work`
/// made the table do. Returns what `work` returned.
///
/// Each hot key takes its first cell here, before any thread starts, so the table holds every
/// hot key throughout `work` however the threads are scheduled.
fn while_checking_hot_keys<R: Send>(limiter: &Limiter<u64>, work: impl FnOnce() -> R + Send) -> R {
    for k in 0..HOT {
        assert!(limiter.check(&k).is_ok(), "hot key {k}");
    }
    let counts: Vec<AtomicU32> = (0..HOT).map(|_| AtomicU32::new(1)).collect();
    let working = AtomicBool::new(true);
    let barrier = Barrier::new(4);
    let out = thread::scope(|s| {
        let worker = s.spawn(|| {
            barrier.wait();
            let out = work();
            working.store(false, Ordering::Release);
            out
        });
        for t in 0..3u64 {
            let (counts, barrier, working) = (&counts, &barrier, &working);
            s.spawn(move || {
                barrier.wait();
                let mut rounds = 0;
                while rounds < 400 || working.load(Ordering::Acquire) {
                    for i in 0..HOT {
                        let k = (i + t * 20) % HOT;
                        if limiter.check(&k).is_ok() {
                            counts[k as usize].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    rounds += 1;
                }
            });
        }
        worker.join().unwrap()
    });
    for (k, c) in counts.iter().enumerate() {
        assert_eq!(c.load(Ordering::Relaxed), HOT_BURST, "hot key {k}");
    }
    out
}

#[test]
fn growth_while_checking_loses_no_admission() {
    const NEW: u64 = 50_000;
    // Few shards that start small: the inserter grows every shard many times while the
    // checkers keep hitting the hot keys (and meet frozen slots mid-copy).
    let limiter: Limiter<u64> = Limiter::builder(frozen(HOT_BURST))
        .shards(2)
        .clock(ManualClock::new())
        .build();
    let fresh = limiter.stats().bytes;
    while_checking_hot_keys(&limiter, || {
        for k in 0..NEW {
            assert!(limiter.check(&(1_000_000 + k)).is_ok(), "new key {k}");
        }
    });
    // Every inserted key kept its state through every growth: exactly one cell used.
    for k in 0..NEW {
        let ok = limiter.check_n(&(1_000_000 + k), HOT_BURST - 1);
        assert_eq!(ok.map(|ok| ok.remaining()), Ok(0), "new key {k}");
    }
    let s = limiter.stats();
    assert_eq!(
        (s.keys_held, s.live_keys),
        ((HOT + NEW) as usize, (HOT + NEW) as usize)
    );
    assert!(s.bytes > fresh, "the table never grew: {s:?}");
    assert_eq!((s.forced_evictions, s.expired_reclaimed), (0, 0));
}

#[test]
fn compaction_while_checking_loses_no_admission() {
    // One shard. A churner inserts and resets keys, leaving tombstones that the shard
    // compacts in place (it stops growing once it has room), while checkers hit the hot keys,
    // which every compaction freezes and places again.
    let limiter: Limiter<u64> = Limiter::builder(frozen(HOT_BURST))
        .shards(1)
        .clock(ManualClock::new())
        .build();
    let sizes = while_checking_hot_keys(&limiter, || {
        let mut sizes = Vec::new();
        for round in 0..200u64 {
            let keys = (0..100).map(|i| 1_000_000 + round * 100 + i);
            for k in keys.clone() {
                assert!(limiter.check(&k).is_ok(), "new key {k}");
            }
            for k in keys {
                assert!(limiter.reset(&k), "reset of held key {k}");
            }
            sizes.push(limiter.stats().bytes);
        }
        sizes
    });
    // 20,000 keys came and went through one shard. It grew in the first round, to 256 slots
    // for the 64 hot keys and 100 churn keys. From then on it held its size whatever the
    // thread timing: a key that finds no room while tombstones exist triggers a compaction,
    // which leaves room whenever the 164 keys plus an eighth of the slots fit in 5/6 of 256.
    assert!(
        sizes.iter().all(|&size| size == sizes[0]),
        "the shard kept growing: {sizes:?}"
    );
    let s = limiter.stats();
    assert_eq!((s.keys_held, s.live_keys), (HOT as usize, HOT as usize));
    assert!(s.compactions >= 10, "{s:?}");
}

#[test]
fn slot_reuse_while_checking_keeps_keys_apart() {
    // One small shard: churn keys expire and their slots are reclaimed for new churn keys
    // (under the shard lock) while other threads check the hot keys lock-free. Hot keys are
    // checked far in the future, so their states outlive every churn time.
    const HOT: u64 = 8;
    const BURST: u32 = 1_000;
    const CHURN: u64 = 20_000;
    let quota = frozen(BURST); // T = 3.6 s
    let limiter: Limiter<u64> = Limiter::builder(quota)
        .shards(1)
        .capacity(32)
        .full_policy(FullPolicy::RefuseNewKeys)
        .clock(ManualClock::new())
        .build();
    let hot_time = Timestamp::from_nanos(1_000_000 * 1_000_000_000); // 10^6 s
    let counts: Vec<AtomicU32> = (0..HOT).map(|_| AtomicU32::new(0)).collect();
    let churning = AtomicBool::new(true);
    let barrier = Barrier::new(3);
    thread::scope(|s| {
        s.spawn(|| {
            barrier.wait();
            for i in 0..CHURN {
                // 4 s apart: every earlier churn key (TAT + 3.6 s) has expired.
                let now = Timestamp::ZERO + Duration::from_secs(4 * i);
                assert!(limiter.check_at(&(1_000 + i), now).is_ok(), "churn key {i}");
            }
            churning.store(false, Ordering::Release);
        });
        for t in 0..2u64 {
            let (limiter, counts, barrier, churning) = (&limiter, &counts, &barrier, &churning);
            s.spawn(move || {
                barrier.wait();
                let mut rounds = 0;
                while rounds < 1_200 || churning.load(Ordering::Acquire) {
                    for i in 0..HOT {
                        let k = (i + t * 3) % HOT;
                        if limiter.check_at(&k, hot_time).is_ok() {
                            counts[k as usize].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    rounds += 1;
                }
            });
        }
    });
    for (k, c) in counts.iter().enumerate() {
        assert_eq!(c.load(Ordering::Relaxed), BURST, "hot key {k}");
        // Its state is exactly 1000 cells past hot_time: next cell at hot_time + T.
        let err = limiter.check_at(&(k as u64), hot_time).unwrap_err();
        assert_eq!(err.retry_after(), Some(quota.interval()), "hot key {k}");
    }
    let s = limiter.stats();
    assert_eq!((s.refused_keys, s.forced_evictions), (0, 0), "{s:?}");
    assert_eq!(
        s.expired_reclaimed + s.keys_held as u64,
        CHURN + HOT,
        "{s:?}"
    );
}

#[test]
fn clones_share_one_limit() {
    let limiter = keyed::<str>(frozen(50));
    let admitted = admitted_across_threads(100, || {
        let mine = limiter.clone();
        move || mine.check("shared").is_ok()
    });
    assert_eq!(admitted, 50);
    // A clone made afterwards sees the same state, and set_quota on one applies to all.
    let late = limiter.clone();
    assert!(late.check("shared").unwrap_err().is_rate_limited());
    late.set_quota(frozen(50).allow_burst(60));
    assert_eq!(limiter.quota(), frozen(50).allow_burst(60));
    assert_eq!(limiter.check("shared").unwrap().remaining(), 9);
}

#[test]
fn direct_limiter_threads_and_clones() {
    let limiter = DirectLimiter::with_clock(frozen(1_000), ManualClock::new());
    let admitted = admitted_across_threads(500, || {
        let mine = limiter.clone();
        move || mine.check().is_ok()
    });
    assert_eq!(admitted, 1_000);
    assert!(limiter.check().unwrap_err().is_rate_limited());
}

#[test]
fn limiters_are_send_sync_clone_unpin() {
    fn assert_traits<T: Send + Sync + Clone + Unpin + 'static>() {}
    assert_traits::<Limiter<u64>>();
    assert_traits::<Limiter<str>>();
    assert_traits::<Limiter<String>>();
    assert_traits::<Limiter<[u8]>>();
    // The key type need not be Send or Sync: keys are never stored.
    assert_traits::<Limiter<std::rc::Rc<u64>>>();
    assert_traits::<Limiter<u64, std::hash::BuildHasherDefault<std::hash::DefaultHasher>>>();
    assert_traits::<DirectLimiter>();
    assert_traits::<ManualClock>();
    assert_traits::<Quota>();
}
