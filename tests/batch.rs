//! `Limiter::check_batch_at`: the verdicts of the same `check_at` calls in the same order,
//! while the batch's own inserts grow the table under keys located before them, on a full
//! table, and with other threads at work.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tollgate::{Admitted, Error, FullPolicy, Limiter, ManualClock, Quota, Timestamp};

/// What a caller can tell of a verdict, for comparing two limiters (whose tables hash keys
/// with different seeds, so only what the API shows can be compared).
fn shown(verdict: Result<Admitted, Error>) -> String {
    match verdict {
        Ok(ok) => format!(
            "ok limit={} remaining={} reset_after={:?}",
            ok.limit(),
            ok.remaining(),
            ok.reset_after()
        ),
        Err(e) => format!("{e:?}"),
    }
}

/// Runs `keys` as one batch on `limiter` at `now`: each verdict shown, in the order `each`
/// got them, with the index it got.
fn batch(limiter: &Limiter<u64>, keys: &[u64], now: Timestamp) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    limiter.check_batch_at(keys, now, |i, verdict| out.push((i, shown(verdict))));
    out
}

/// The same keys through `check_at`, one after the other.
fn one_by_one(limiter: &Limiter<u64>, keys: &[u64], now: Timestamp) -> Vec<(usize, String)> {
    keys.iter()
        .enumerate()
        .map(|(i, key)| (i, shown(limiter.check_at(key, now))))
        .collect()
}

/// A small deterministic generator (SplitMix64), so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn on_clock(builder: impl FnOnce(ManualClock) -> Limiter<u64>) -> (Limiter<u64>, ManualClock) {
    let clock = ManualClock::new();
    (builder(clock.clone()), clock)
}

/// A limiter of one shard holding at most 16 keys, full under `policy`, on its own clock.
fn one_shard_of_16(policy: FullPolicy, quota: Quota) -> (Limiter<u64>, ManualClock) {
    on_clock(|clock| {
        Limiter::builder(quota)
            .shards(1)
            .capacity(16)
            .full_policy(policy)
            .clock(clock)
            .build()
    })
}

#[test]
fn a_batch_decides_as_check_at_does_one_key_after_another() {
    // Keys of 3 cells a second: half the checks on 50 hot keys, which deny and refill, half
    // on 5,000 others, which grow every shard several times (often in the middle of a
    // batch) and expire, to be reclaimed, between visits.
    let build = |clock: ManualClock| Limiter::builder(Quota::per_second(3)).clock(clock).build();
    let (batched, batched_clock) = on_clock(build);
    let (single, single_clock) = on_clock(build);
    let mut rng = Rng(7);
    for round in 0..300 {
        let step = Duration::from_millis(rng.below(60));
        batched_clock.advance(step);
        single_clock.advance(step);
        let len = rng.below(120) as usize;
        let keys: Vec<u64> = (0..len)
            .map(|_| {
                if rng.below(2) == 0 {
                    rng.below(50)
                } else {
                    50 + rng.below(5_000)
                }
            })
            .collect();
        let now = batched.now();
        assert_eq!(now, single.now());
        assert_eq!(
            batch(&batched, &keys, now),
            one_by_one(&single, &keys, now),
            "round {round}, keys {keys:?}"
        );
    }
    let (b, s) = (batched.stats(), single.stats());
    assert_eq!((b.admitted, b.denied), (s.admitted, s.denied));
    assert!(
        b.denied > 1_000 && b.admitted > 10_000 && b.expired_reclaimed > 1_000,
        "{b:?}"
    );
}

#[test]
fn keys_located_before_the_batch_inserted_them_are_found() {
    // One cell an hour: a key's second check in the batch must find what its first wrote,
    // though it was located (hashed, its slot loaded) before that first check inserted it
    // and, as 20,000 new keys grow the shards from 8 slots, before growths moved it.
    let limiter = Limiter::keyed(Quota::per_hour(1));
    let now = limiter.now();
    let mut keys = Vec::new();
    for key in 0..20_000u64 {
        keys.extend([key, key]); // the repeat is located while its first is still to check
    }
    keys.extend(0..20_000u64); // located long after
    let mut verdicts = Vec::new();
    limiter.check_batch_at(&keys, now, |i, verdict| {
        verdicts.push((i, verdict.is_ok()));
    });
    let expected: Vec<(usize, bool)> = (0..keys.len())
        .map(|i| (i, i < 40_000 && i % 2 == 0))
        .collect();
    assert_eq!(verdicts, expected);
    let stats = limiter.stats();
    assert_eq!((stats.keys_held, stats.admitted), (20_000, 20_000));
}

#[test]
fn a_full_table_refuses_in_a_batch_the_keys_it_refuses_one_by_one() {
    let (batched, _) = one_shard_of_16(FullPolicy::RefuseNewKeys, Quota::per_hour(5));
    let (single, _) = one_shard_of_16(FullPolicy::RefuseNewKeys, Quota::per_hour(5));
    let keys: Vec<u64> = (0..40).chain(0..20).collect();
    let now = Timestamp::ZERO;
    let verdicts = batch(&batched, &keys, now);
    assert_eq!(verdicts, one_by_one(&single, &keys, now));
    let refused = verdicts
        .iter()
        .filter(|(_, v)| v.contains("TableFull"))
        .count();
    assert_eq!(refused, 24 + 4, "keys 16..40, then 16..20 again");
}

#[test]
fn a_full_table_evicts_in_a_batch_the_keys_it_evicts_one_by_one() {
    // Sixteen keys with distinct expiries fill the one shard; the batch's new keys then
    // evict them oldest first, and the evicted keys come back as new.
    let evict = FullPolicy::EvictClosestToExpiry;
    let (batched, batched_clock) = one_shard_of_16(evict, Quota::per_second(1));
    let (single, single_clock) = one_shard_of_16(evict, Quota::per_second(1));
    for key in 0..16u64 {
        for (limiter, clock) in [(&batched, &batched_clock), (&single, &single_clock)] {
            assert!(limiter.check(&key).is_ok());
            clock.advance(Duration::from_millis(10));
        }
    }
    let keys: Vec<u64> = vec![100, 101, 102, 0, 1, 5, 100, 103];
    let now = batched.now();
    let verdicts = batch(&batched, &keys, now);
    assert_eq!(verdicts, one_by_one(&single, &keys, now));
    // 100..103 and the returning 0 and 1 are new (0 and 1 were evicted), key 5 was kept and
    // is denied, and 100's second check is denied.
    let admitted: Vec<bool> = verdicts.iter().map(|(_, v)| v.starts_with("ok")).collect();
    assert_eq!(admitted, [true, true, true, true, true, false, false, true]);
    assert_eq!(batched.stats().forced_evictions, 6);
}

#[test]
fn batches_on_two_threads_admit_each_key_exactly_its_burst() {
    // Three cells an hour, four checks of every key (two threads, two passes each, in
    // different orders), all at one time, on a table growing under both: exactly three
    // admitted a key, none lost to a stale spot, none admitted twice.
    const KEYS: usize = 20_000;
    let limiter = Limiter::builder(Quota::per_hour(1).allow_burst(3)).build();
    let admitted: Vec<AtomicU32> = (0..KEYS).map(|_| AtomicU32::new(0)).collect();
    let now = limiter.now();
    std::thread::scope(|s| {
        for seed in 0..2u64 {
            let (limiter, admitted) = (&limiter, &admitted);
            s.spawn(move || {
                let mut rng = Rng(seed);
                for _ in 0..2 {
                    let mut keys: Vec<u64> = (0..KEYS as u64).collect();
                    for i in (1..KEYS).rev() {
                        keys.swap(i, rng.below(i as u64 + 1) as usize);
                    }
                    for chunk in keys.chunks(64) {
                        limiter.check_batch_at(chunk, now, |i, verdict| {
                            if verdict.is_ok() {
                                admitted[chunk[i] as usize].fetch_add(1, Ordering::Relaxed);
                            }
                        });
                    }
                }
            });
        }
    });
    for (key, n) in admitted.iter().enumerate() {
        assert_eq!(n.load(Ordering::Relaxed), 3, "key {key}");
    }
    assert_eq!(limiter.stats().keys_held, KEYS);
}

#[test]
fn an_empty_batch_calls_nothing_and_a_panic_stops_the_batch_there() {
    let limiter = Limiter::keyed(Quota::per_hour(2));
    let now = limiter.now();
    limiter.check_batch_at(&[], now, |_, _| panic!("an empty batch has no verdict"));
    let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        limiter.check_batch_at(&[1, 2, 3, 4], now, |i, _| assert!(i < 1, "stop"));
    }));
    assert!(stopped.is_err());
    // Keys 1 and 2 were checked (the panic came with 2's verdict); 3 and 4 never were.
    assert_eq!(limiter.stats().admitted, 2);
    assert_eq!(limiter.check_at(&3, now).unwrap().remaining(), 1);
    assert_eq!(limiter.check_at(&2, now).unwrap().remaining(), 0);
}
