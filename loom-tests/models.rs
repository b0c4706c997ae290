//! Loom models of tollgate's concurrent protocols (the design record, `src/design.rs`, §6).
//!
//! Run them in release mode with a preemption bound:
//!
//! ```text
//! RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test --release -p tollgate-loom --test loom --target-dir target/loom
//! ```
//!
//! Add `-- --nocapture` to see each model's interleaving count and time. Without
//! `LOOM_MAX_PREEMPTIONS` the models use a bound of 2; the suite takes well under a second at
//! 2 and a few seconds effectively unbounded (`LOOM_MAX_PREEMPTIONS=100`). A failing model
//! panics with both threads' outcomes and the table's final state in the message;
//! `LOOM_LOCATION=1` adds source locations to loom's own reports. (`LOOM_LOG` and
//! `LOOM_CHECKPOINT_FILE` need a `tracing` subscriber and loom's `checkpoint` feature, which
//! this crate does not enable.)
//!
//! Under `--cfg tollgate_loom` every atomic, lock and `Arc` in the crate is loom's, key
//! hashing is a fixed SipHash (so every run takes the same branches) and a new shard has two
//! slots. The models use only the public API and pass time in explicitly; the limiters get a
//! [`ManualClock`] that never moves, so the few methods that read the clock internally
//! (`stats`) read a constant.
//!
//! Each model runs two threads (the main one and one spawned) on one shard of two to six
//! slots, and checks the outcome against every linearisation the model allows. Loom 0.7
//! misses some interleavings of such code unless helped (see `race`): every model runs
//! twice, once with each role assignment, and each thread opens with an access to a shared
//! gate. The
//! table's stored state is read afterwards with a 0-cell check at time 0: it is
//! always admitted, writes nothing, inserts nothing, and its `reset_after` is the stored TAT
//! (see `tat`).
//!
//! The `cfg` below empties this file in every other build; it comes after this comment so
//! that the empty test crate still has its docs (`missing_docs` is on for every target).
#![cfg(tollgate_loom)]

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tollgate::{
    Admitted, DirectLimiter, Error, FullPolicy, Limiter, ManualClock, Quota, Stats, Timestamp,
};

#[path = "race.rs"]
mod race;
use race::{Roles, race};

/// The emission interval of every model's quota, in nanoseconds.
const T: u64 = 1_000;

/// A limiter reclaims a key only this long (1 ms) after its TAT (`RECLAIM_GRACE`).
const GRACE: u64 = 1_000_000;

/// Loom's limit on scheduling points per execution (default 1 000, which is meant to catch
/// spin loops). Growing to a 9-slot array takes more than that; nothing here spins unboundedly.
const MAX_BRANCHES: usize = 10_000;

/// Runs a model under loom twice, once per [`Roles`] (preemption bound 2 unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise), and reports the interleavings and time.
fn model(name: &str, f: impl Fn(Roles) + Copy + Sync + Send + 'static) {
    let start = Instant::now();
    let mut total = 0;
    for roles in [Roles::FirstOnMain, Roles::FirstSpawned] {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(2);
        }
        builder.max_branches = builder.max_branches.max(MAX_BRANCHES);
        let count = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = count.clone();
        builder.check(move || {
            counter.fetch_add(1, Ordering::Relaxed);
            f(roles);
        });
        total += count.load(Ordering::Relaxed);
    }
    eprintln!(
        "loom model {name}: {total} interleavings in {:.2?}",
        start.elapsed()
    );
}

fn quota(burst: u32) -> Quota {
    Quota::with_period(Duration::from_nanos(T)).allow_burst(burst)
}

fn at(nanos: u64) -> Timestamp {
    Timestamp::from_nanos(nanos)
}

/// A one-shard limiter holding at most `capacity` keys (its array grows from 2 slots to at
/// most `ceil(capacity * 6 / 5)`).
fn limiter(burst: u32, capacity: usize, policy: FullPolicy) -> Limiter<u64> {
    Limiter::builder(quota(burst))
        .shards(1)
        .capacity(capacity)
        .full_policy(policy)
        .clock(ManualClock::new())
        .build()
}

/// The TAT stored for `key`, read without writing. A key the table does not hold reads as its
/// shard's horizon: the latest TAT it forgot as expired, 0 at first.
fn tat(limiter: &Limiter<u64>, key: u64) -> u64 {
    let probe = limiter.check_n_at(&key, 0, Timestamp::ZERO);
    nanos(
        probe
            .expect("a 0-cell check is always admitted")
            .reset_after(),
    )
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap()
}

/// A check's outcome in model terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    /// Admitted; the key's TAT became this.
    Admitted(u64),
    /// Rate limited; admissible at this time.
    Limited(u64),
    /// A new key refused by a full table.
    Full,
}

fn seen(result: Result<Admitted, Error>, now: u64) -> Seen {
    match result {
        Ok(ok) => Seen::Admitted(now + nanos(ok.reset_after())),
        Err(Error::RateLimited { earliest, .. }) => Seen::Limited(earliest.as_nanos()),
        Err(Error::TableFull { .. }) => Seen::Full,
        Err(e) => panic!("unexpected {e:?}"),
    }
}

/// The slot a key's fingerprint calls home in an array of `len` slots, mirroring the loom
/// build's fixed SipHash, the fingerprint remap (`table::fingerprint`) and `SlotArray::home`.
/// Only used to pick keys that collide; if `src/` changes these, the models still check
/// correctness but may stop forcing slot reuse, so keep them in step.
fn home(key: u64, len: u64) -> u64 {
    let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(key);
    let fp = if hash <= 1 { hash + 2 } else { hash };
    ((u128::from(fp.wrapping_mul(0x9E37_79B9_7F4A_7C15)) * u128::from(len)) >> 64) as u64
}

/// Keys `(1, b)`, where `b` is the smallest key that shares (`same`) or does not share key 1's
/// home slot in a two-slot array: `(1, 2)` and `(1, 5)` with the loom build's hash.
fn key_pair(same: bool) -> (u64, u64) {
    let a = 1;
    let b = (2..).find(|&b| (home(b, 2) == home(a, 2)) == same).unwrap();
    (a, b)
}

// ---------------------------------------------------------------------------------------
// 1. Two updates on one key.

/// Two lock-free checks race on a key the table already holds. `left` cells remain at `NOW`:
/// exactly `min(left, 2)` checks pass, each from a distinct state (no lost update), and the
/// stored TAT records every admission.
fn two_updates_on_one_key(roles: Roles, left: u32) {
    const NOW: u64 = 10_000;
    let l = limiter(left + 1, 4, FullPolicy::RefuseNewKeys);
    // One cell used: the key is held and live, so both threads take the lock-free path.
    assert!(l.check_at(&7, at(NOW)).is_ok());
    let (l1, l2) = (l.clone(), l.clone());
    let (mine, other) = race(
        roles,
        move || seen(l1.check_at(&7, at(NOW)), NOW),
        move || seen(l2.check_at(&7, at(NOW)), NOW),
    );

    let admitted: Vec<u64> = [mine, other]
        .into_iter()
        .filter_map(|s| match s {
            Seen::Admitted(tat) => Some(tat),
            Seen::Limited(_) => None,
            Seen::Full => panic!("a held key cannot be refused"),
        })
        .collect();
    let expected = left.min(2) as usize;
    assert_eq!(admitted.len(), expected, "{mine:?} {other:?}");
    // Each admission advanced the TAT by one interval from the one before it.
    let mut tats = admitted.clone();
    tats.sort_unstable();
    let want: Vec<u64> = (0..expected as u64).map(|i| NOW + (i + 2) * T).collect();
    assert_eq!(tats, want, "{mine:?} {other:?}");
    // The final state holds all of them, and the burst is used up.
    assert_eq!(tat(&l, 7), NOW + (1 + expected as u64) * T);
    if left <= 2 {
        assert!(l.check_at(&7, at(NOW)).unwrap_err().is_rate_limited());
    }
    assert_eq!(l.stats().keys_held, 1);
}

#[test]
fn two_updates_on_one_key_both_pass() {
    model("two_updates_on_one_key_both_pass", |roles| {
        two_updates_on_one_key(roles, 2)
    });
}

#[test]
fn two_updates_on_one_key_one_passes() {
    model("two_updates_on_one_key_one_passes", |roles| {
        two_updates_on_one_key(roles, 1)
    });
}

// ---------------------------------------------------------------------------------------
// 2. Two inserts of one new key.

/// Two threads check a key the table does not hold. The capacity leaves room for a second
/// slot, so a locked path that failed to re-probe would show up as two held keys.
fn two_inserts_of_one_new_key(roles: Roles, burst: u32) {
    const NOW: u64 = 10_000;
    let l = limiter(burst, 4, FullPolicy::RefuseNewKeys);
    let (l1, l2) = (l.clone(), l.clone());
    let (mine, other) = race(
        roles,
        move || seen(l1.check_at(&7, at(NOW)), NOW),
        move || seen(l2.check_at(&7, at(NOW)), NOW),
    );

    let mut admitted: Vec<u64> = [mine, other]
        .into_iter()
        .filter_map(|s| match s {
            Seen::Admitted(tat) => Some(tat),
            Seen::Limited(_) => None,
            Seen::Full => panic!("the table has room"),
        })
        .collect();
    admitted.sort_unstable();
    let expected = burst.min(2) as u64;
    let want: Vec<u64> = (1..=expected).map(|i| NOW + i * T).collect();
    assert_eq!(admitted, want, "{mine:?} {other:?}");
    let stats = l.stats();
    assert_eq!(stats.keys_held, 1, "one key, one slot: {stats:?}");
    assert_eq!(stats.admitted, expected);
    assert_eq!(tat(&l, 7), NOW + expected * T);
    if burst <= 2 {
        assert!(l.check_at(&7, at(NOW)).unwrap_err().is_rate_limited());
    }
}

#[test]
fn two_inserts_of_one_new_key_burst_2() {
    model("two_inserts_of_one_new_key_burst_2", |roles| {
        two_inserts_of_one_new_key(roles, 2)
    });
}

#[test]
fn two_inserts_of_one_new_key_burst_1() {
    model("two_inserts_of_one_new_key_burst_1", |roles| {
        two_inserts_of_one_new_key(roles, 1)
    });
}

/// Two threads check new key B in a full table (capacity 1, evict when full) whose only key,
/// A, shares B's home, is live and has used its whole burst (TAT 2 000 at time 0). The first
/// check to take the lock evicts A and hands its slot to B; the other may find B's
/// fingerprint lock-free while the slot still shows A's word in memory. It must never decide
/// B's check on A's state: B is fresh, so both checks pass (TATs 1 000 and 2 000).
fn two_inserts_of_one_new_key_evicting(roles: Roles) {
    let (a, b) = key_pair(true);
    let l = limiter(2, 1, FullPolicy::EvictClosestToExpiry);
    assert!(l.check_n_at(&a, 2, at(0)).is_ok());
    let (l1, l2) = (l.clone(), l.clone());
    let (mine, other) = race(
        roles,
        move || seen(l1.check_at(&b, at(0)), 0),
        move || seen(l2.check_at(&b, at(0)), 0),
    );

    let mut admitted = [mine, other];
    admitted.sort_unstable();
    assert_eq!(admitted, [Seen::Admitted(1_000), Seen::Admitted(2_000)]);
    let stats = l.stats();
    assert_eq!(
        (stats.keys_held, stats.forced_evictions),
        (1, 1),
        "{stats:?}"
    );
    assert_eq!((tat(&l, a), tat(&l, b)), (0, 2_000));
}

#[test]
fn two_inserts_of_one_new_key_evicting_a_live_key() {
    model(
        "two_inserts_of_one_new_key_evicting_a_live_key",
        two_inserts_of_one_new_key_evicting,
    );
}

/// Two new keys (sharing a home) arrive at a table with room for one. Refusing: exactly one
/// is admitted and held, the other refused. Evicting: both are admitted, the later one
/// evicts the earlier, and the survivor holds its own state.
/// What racing checks of new keys A (one cell) and B (two) at time 0 left: the outcomes, the
/// stored TATs (distinct, so they say whose state a slot holds), the stats, and all of it as
/// a message for the asserts.
fn race_two_new_keys(
    roles: Roles,
    l: &Limiter<u64>,
    a: u64,
    b: u64,
) -> (Seen, Seen, u64, u64, Stats, String) {
    let (l1, l2) = (l.clone(), l.clone());
    let (ra, rb) = race(
        roles,
        move || seen(l1.check_at(&a, at(0)), 0),
        move || seen(l2.check_n_at(&b, 2, at(0)), 0),
    );
    let stats = l.stats();
    let (ta, tb) = (tat(l, a), tat(l, b));
    let ctx = format!("A: {ra:?} B: {rb:?} stored A {ta} B {tb} {stats:?}");
    (ra, rb, ta, tb, stats, ctx)
}

fn two_new_keys_for_one_place(roles: Roles, policy: FullPolicy) {
    let (a, b) = key_pair(true);
    let l = limiter(2, 1, policy);
    let (ra, rb, ta, tb, stats, ctx) = race_two_new_keys(roles, &l, a, b);
    assert_eq!(stats.keys_held, 1, "{ctx}");
    match policy {
        FullPolicy::RefuseNewKeys => {
            assert!(
                (ra, rb, ta, tb) == (Seen::Admitted(1_000), Seen::Full, 1_000, 0)
                    || (ra, rb, ta, tb) == (Seen::Full, Seen::Admitted(2_000), 0, 2_000),
                "{ctx}"
            );
            assert_eq!(stats.refused_keys, 1, "{ctx}");
        }
        FullPolicy::EvictClosestToExpiry => {
            assert_eq!(
                (ra, rb),
                (Seen::Admitted(1_000), Seen::Admitted(2_000)),
                "{ctx}"
            );
            assert!((ta, tb) == (1_000, 0) || (ta, tb) == (0, 2_000), "{ctx}");
            assert_eq!(stats.forced_evictions, 1, "{ctx}");
        }
    }
}

#[test]
fn two_new_keys_for_one_place_refuse() {
    model("two_new_keys_for_one_place_refuse", |roles| {
        two_new_keys_for_one_place(roles, FullPolicy::RefuseNewKeys)
    });
}

#[test]
fn two_new_keys_for_one_place_evict() {
    model("two_new_keys_for_one_place_evict", |roles| {
        two_new_keys_for_one_place(roles, FullPolicy::EvictClosestToExpiry)
    });
}

/// Two new keys that share a home slot arrive at a table with room for both, in a shard sized
/// up front so that neither insert grows it (`presize(2)` at capacity 4 gives the shard its
/// largest array, six slots). Both lock-free probes can miss at the same `EMPTY` slot; the
/// first insert takes it, and the second's locked path must not take its own probe's miss
/// over (`table/changes.rs`): the count of locked changes moved. If it did, the second key
/// would be written over the first. Both are admitted and both held, each with its own TAT
/// (A one cell, B two).
fn two_new_keys_on_one_run(roles: Roles) {
    let a = 1;
    let b = (2..).find(|&b| home(b, 6) == home(a, 6)).unwrap();
    let l = Limiter::builder(quota(2))
        .shards(1)
        .capacity(4)
        .presize(2)
        .clock(ManualClock::new())
        .build();
    let bytes = l.stats().bytes;
    let (ra, rb, ta, tb, stats, ctx) = race_two_new_keys(roles, &l, a, b);
    assert_eq!(
        bytes, stats.bytes,
        "the shard grew, so the model misses its race: {ctx}"
    );
    assert_eq!(
        (ra, rb),
        (Seen::Admitted(1_000), Seen::Admitted(2_000)),
        "{ctx}"
    );
    assert_eq!((ta, tb), (1_000, 2_000), "{ctx}");
    assert_eq!(stats.keys_held, 2, "{ctx}");
}

#[test]
fn two_new_keys_on_one_run_model() {
    model("two_new_keys_on_one_run", two_new_keys_on_one_run);
}

// ---------------------------------------------------------------------------------------
// 3. Update vs reuse of an expired slot: no cross-key contamination.

/// Key A is held but expired (its TAT is 1 000, more than the reclaim grace ago). One thread
/// checks A (at `NOW_A`, one cell: A's TAT becomes `NOW_A + T`) while the other checks new
/// key B (at `NOW_B`, two cells: `NOW_B + 2T`) in a table of capacity 1. With `same_home` B's probe meets A's slot and reclaims it in place (freeze,
/// new fp, new word): the updater of A may have loaded A's word just before. Otherwise a
/// sweep frees A's slot and B goes to its own home.
///
/// The distinct TATs name whose check wrote a state: a CAS of A's check landing in B's slot
/// would leave B at `NOW_A + T`. A key the table no longer holds reads as the shard's horizon:
/// A's forgotten TAT (1 000) once A was reclaimed as expired, 0 before.
fn update_vs_reuse_of_expired_slot(roles: Roles, policy: FullPolicy, same_home: bool) {
    const NOW_A: u64 = GRACE + 5_500;
    const NOW_B: u64 = GRACE + 5_000;
    const A_TAT: u64 = NOW_A + T;
    const B_TAT: u64 = NOW_B + 2 * T;
    let (a, b) = key_pair(same_home);
    let l = limiter(2, 1, policy);
    // A's TAT is 1 000, expired at both threads' `now`.
    assert!(l.check_at(&a, at(0)).is_ok());
    let (l1, l2) = (l.clone(), l.clone());
    let (ra, rb) = race(
        roles,
        move || seen(l1.check_at(&a, at(NOW_A)), NOW_A),
        move || seen(l2.check_n_at(&b, 2, at(NOW_B)), NOW_B),
    );

    let stats = l.stats();
    let (ta, tb) = (tat(&l, a), tat(&l, b));
    let ctx = format!("A: {ra:?} B: {rb:?} stored A {ta} B {tb} {stats:?}");
    // Whatever else happened, an admission is of the check's own key.
    assert!(matches!(ra, Seen::Admitted(A_TAT) | Seen::Full), "{ctx}");
    assert!(matches!(rb, Seen::Admitted(B_TAT) | Seen::Full), "{ctx}");
    assert_eq!(stats.keys_held, 1, "{ctx}");
    let absent = if stats.expired_reclaimed > 0 {
        1_000
    } else {
        0
    };
    match policy {
        FullPolicy::RefuseNewKeys => match (ra, rb) {
            // A revived its own slot first; B found A live and was refused.
            (Seen::Admitted(_), Seen::Full) => {
                assert_eq!((ta, tb), (A_TAT, 0), "{ctx}");
                assert_eq!(stats.refused_keys, 1, "{ctx}");
            }
            // B reclaimed A's slot first; A, now a new key, found B live and was refused.
            (Seen::Full, Seen::Admitted(_)) => {
                assert_eq!((ta, tb), (1_000, B_TAT), "{ctx}");
                assert_eq!(
                    (stats.expired_reclaimed, stats.refused_keys),
                    (1, 1),
                    "{ctx}"
                );
            }
            _ => panic!("exactly one key fits: {ctx}"),
        },
        FullPolicy::EvictClosestToExpiry => {
            assert_eq!(
                (ra, rb),
                (Seen::Admitted(A_TAT), Seen::Admitted(B_TAT)),
                "{ctx}"
            );
            assert_eq!(stats.forced_evictions, 1, "{ctx}");
            // The later insert evicted the earlier key; the survivor holds its own TAT.
            assert!(
                (ta, tb) == (A_TAT, absent) || (ta, tb) == (absent, B_TAT),
                "{ctx}"
            );
        }
    }
}

#[test]
fn update_vs_reuse_of_expired_slot_refuse() {
    model("update_vs_reuse_of_expired_slot_refuse", |roles| {
        update_vs_reuse_of_expired_slot(roles, FullPolicy::RefuseNewKeys, true)
    });
}

#[test]
fn update_vs_reuse_of_expired_slot_evict() {
    model("update_vs_reuse_of_expired_slot_evict", |roles| {
        update_vs_reuse_of_expired_slot(roles, FullPolicy::EvictClosestToExpiry, true)
    });
}

#[test]
fn update_vs_sweep_of_expired_slot_refuse() {
    model("update_vs_sweep_of_expired_slot_refuse", |roles| {
        update_vs_reuse_of_expired_slot(roles, FullPolicy::RefuseNewKeys, false)
    });
}

#[test]
fn update_vs_sweep_of_expired_slot_evict() {
    model("update_vs_sweep_of_expired_slot_evict", |roles| {
        update_vs_reuse_of_expired_slot(roles, FullPolicy::EvictClosestToExpiry, false)
    });
}

/// A caller whose clock is behind the reclaimer's. Key A (burst 1) was admitted at 0, so its
/// TAT is 1 000. One thread, whose clock reads 500, checks A again; the other, more than the
/// reclaim grace later, checks new key B in a table of capacity 1, which reclaims A (in place with `same_home`, by
/// a sweep otherwise). In A's own time no second cell is due before 1 000, so A must be
/// refused with that earliest time whether it meets its own slot or a table that forgot it.
fn lagging_caller_vs_reclaim(roles: Roles, same_home: bool) {
    let (a, b) = key_pair(same_home);
    let l = limiter(1, 1, FullPolicy::RefuseNewKeys);
    assert!(l.check_at(&a, at(0)).is_ok());
    let (l1, l2) = (l.clone(), l.clone());
    let (ra, rb) = race(
        roles,
        move || seen(l1.check_at(&a, at(500)), 500),
        move || seen(l2.check_at(&b, at(GRACE + 5_000)), GRACE + 5_000),
    );
    let ctx = format!("A: {ra:?} B: {rb:?} {:?}", l.stats());
    assert_eq!(ra, Seen::Limited(1_000), "{ctx}");
    assert_eq!(rb, Seen::Admitted(GRACE + 6_000), "{ctx}");
}

#[test]
fn lagging_caller_vs_reuse() {
    model("lagging_caller_vs_reuse", |roles| {
        lagging_caller_vs_reclaim(roles, true)
    });
}

#[test]
fn lagging_caller_vs_sweep() {
    model("lagging_caller_vs_sweep", |roles| {
        lagging_caller_vs_reclaim(roles, false)
    });
}

// ---------------------------------------------------------------------------------------
// 4. Update vs growth.

/// The limiter's bytes after `inserts` sequential inserts next to key `hot` in a table of
/// `capacity`: the growth the concurrent models below must match. Measured in a one-thread
/// loom run (loom types exist only inside one), outside the model so that it costs no
/// branches there.
fn bytes_after(capacity: usize, hot: u64, inserts: u64) -> usize {
    let out = std::sync::Arc::new(AtomicUsize::new(0));
    let result = out.clone();
    let mut builder = loom::model::Builder::new();
    builder.max_branches = builder.max_branches.max(MAX_BRANCHES);
    builder.check(move || {
        let l = limiter(1, capacity, FullPolicy::RefuseNewKeys);
        assert!(l.check_at(&hot, at(0)).is_ok());
        for k in new_keys(hot, inserts) {
            assert!(l.check_at(&k, at(0)).is_ok());
        }
        result.store(l.stats().bytes, Ordering::Relaxed);
    });
    out.load(Ordering::Relaxed)
}

/// The first `n` keys from 1 on other than `hot`.
fn new_keys(hot: u64, n: u64) -> Vec<u64> {
    (1..).filter(|&k| k != hot).take(n as usize).collect()
}

/// Key `hot` is held in a two-slot array with `before` other keys inserted after it; then one
/// thread checks it `checks` times while the other inserts `inserts` more new keys into a
/// table of `capacity`. A new key that does not fit grows the shard (freezing every key,
/// placing every key again in the grown slots, then publishing them): below 4 slots (the
/// loom build's `CONTIGUOUS_LEN`) into a new array twice as large, past it by adding a
/// segment. Capacity 3 grows it once, moving 2 -> 4 slots; capacity 7 with 3 inserts moves
/// it, 2 -> 4, then adds a segment, 4 -> 8 (the third insert). Every admission of the hot key
/// must land exactly once, whichever slots its probe read, and every key must be held
/// exactly once, with exactly the growth that the same inserts cause sequentially (`bytes`).
fn update_vs_growth(
    roles: Roles,
    hot: u64,
    checks: u64,
    (before, inserts): (u64, u64),
    capacity: usize,
    bytes: usize,
) {
    const NOW: u64 = 10_000;
    let burst = u32::try_from(checks).unwrap() + 1;
    let l = limiter(burst, capacity, FullPolicy::RefuseNewKeys);
    assert!(l.check_at(&hot, at(NOW)).is_ok());
    let keys = new_keys(hot, before + inserts);
    for k in &keys[..before as usize] {
        assert!(l.check_at(k, at(NOW)).is_ok());
    }
    let racing = keys[before as usize..].to_vec();
    let (l1, l2) = (l.clone(), l.clone());
    let (re, rn) = race(
        roles,
        move || -> Vec<Seen> {
            (0..checks)
                .map(|_| seen(l1.check_at(&hot, at(NOW)), NOW))
                .collect()
        },
        move || -> Vec<Seen> {
            racing
                .into_iter()
                .map(|k| seen(l2.check_at(&k, at(NOW)), NOW))
                .collect()
        },
    );

    let want_e: Vec<Seen> = (2..2 + checks)
        .map(|i| Seen::Admitted(NOW + i * T))
        .collect();
    assert_eq!(re, want_e);
    assert!(rn.iter().all(|&s| s == Seen::Admitted(NOW + T)), "{rn:?}");
    let stats = l.stats();
    assert_eq!(stats.bytes, bytes, "{stats:?}");
    assert_eq!(
        stats.keys_held,
        1 + keys.len(),
        "no key lost or duplicated: {stats:?}"
    );
    assert_eq!(tat(&l, hot), NOW + (1 + checks) * T);
    for k in keys {
        assert_eq!(tat(&l, k), NOW + T);
    }
    // The hot key's burst is used up: nothing of it was lost in the move.
    assert!(l.check_at(&hot, at(NOW)).unwrap_err().is_rate_limited());
}

#[test]
fn update_vs_growth_model() {
    let bytes = bytes_after(3, 1, 1);
    assert!(
        bytes > bytes_after(3, 1, 0),
        "one insert must grow the shard"
    );
    model("update_vs_growth", move |roles| {
        update_vs_growth(roles, 1, 1, (0, 1), 3, bytes)
    });
}

#[test]
fn updates_vs_two_growths() {
    let bytes = bytes_after(7, 1, 3);
    assert!(
        bytes > bytes_after(7, 1, 2) && bytes_after(7, 1, 2) > bytes_after(7, 1, 0),
        "the first and the third insert must grow the shard: update the model's sizes"
    );
    model("updates_vs_two_growths", move |roles| {
        update_vs_growth(roles, 1, 2, (0, 3), 7, bytes)
    });
}

/// Reader vs a growth that moves the array: the hot key's home in the grown (4-slot) shard
/// is past the end of the old (2-slot) array, so a check that read the new length must also
/// read the new array, which is stored (Release, `Segments::move_front`) before the length
/// is published and loaded (Acquire, `SlotArray::entry`) after the length. Fails with "a
/// length of 4 read with an array of 2 slots" when the array is stored after the length;
/// with "a length of 2 read with an array of 0 slots" when it is stored Relaxed (a reader
/// that loads it is not ordered after its making, nor after its record in `fronts`); with
/// loom's "Causality violation" when it is loaded Relaxed.
#[test]
fn reader_past_the_old_array_vs_move() {
    let hot = (1..).find(|&k| home(k, 4) >= 2).unwrap();
    let bytes = bytes_after(3, hot, 1);
    assert!(
        bytes > bytes_after(3, hot, 0),
        "one insert must grow the shard"
    );
    model("reader_past_the_old_array_vs_move", move |roles| {
        update_vs_growth(roles, hot, 1, (0, 1), 3, bytes)
    });
}

/// Reader vs a growth that adds a segment: the shard already holds 4 slots (moved there by
/// the second of three keys), and the hot key's home in the grown (8-slot) shard is in the
/// segment the growth adds (slots 4 to 7), so a check that read the new length indexes that
/// segment's directory entry and slots. They are written before the new length is
/// published (Release) and read after it (Acquire). Fails, with "segment 1 read before it
/// was published", when `Segments::publish` stores the length Relaxed, or
/// `Segments::current` loads it Relaxed: the reader then sees the new length but not the
/// segment behind it.
#[test]
fn reader_in_a_new_segment_vs_growth() {
    let hot = (1..).find(|&k| home(k, 8) >= 4).unwrap();
    let bytes = bytes_after(7, hot, 3);
    assert!(
        bytes > bytes_after(7, hot, 2) && bytes_after(7, hot, 2) == bytes_after(7, hot, 1),
        "the third insert, and only it, must add a segment: update the model's sizes"
    );
    model("reader_in_a_new_segment_vs_growth", move |roles| {
        update_vs_growth(roles, hot, 1, (2, 1), 7, bytes)
    });
}

/// Two new keys vs the move their inserts cause: `a` is held in a two-slot array, and
/// whichever of `b` and `c` comes first moves it to a 4-slot one, while the other's
/// lock-free probe may read either array, or the new one with the old length. Both are
/// admitted and held once. The keys have distinct homes in 4 slots, and each new key's home
/// in 2 slots is a slot of the new array that no key takes, so a probe of the new array on
/// the old length misses at a slot the grower made and never wrote. Fails when the locked
/// path takes over a miss without checking its length (`Shard::update_locked`): that miss's
/// `EMPTY` slot is then taken on the old length's terms in the new array. Fails too on the
/// faults of `reader_past_the_old_array_vs_move`.
#[test]
fn new_key_vs_move() {
    let a = 1;
    let (b, c) = (2..)
        .flat_map(|b| (b + 1..b + 50).map(move |c| (b, c)))
        .find(|&(b, c)| {
            let taken = |x: u64, y: u64| [home(a, 4), home(x, 4), home(y, 4)];
            let distinct = |t: [u64; 3]| t[0] != t[1] && t[0] != t[2] && t[1] != t[2];
            distinct(taken(b, c))
                && !taken(b, b).contains(&home(c, 2))
                && !taken(c, c).contains(&home(b, 2))
        })
        .unwrap();
    // Growth depends on how many keys arrive, not which: three, as `a` then two others.
    let bytes = bytes_after(3, a, 2);
    model("new_key_vs_move", move |roles| {
        let l = limiter(1, 3, FullPolicy::RefuseNewKeys);
        assert!(l.check_at(&a, at(0)).is_ok());
        let before = l.stats().bytes;
        let (l1, l2) = (l.clone(), l.clone());
        let (rb, rc) = race(
            roles,
            move || seen(l1.check_at(&b, at(0)), 0),
            move || seen(l2.check_at(&c, at(0)), 0),
        );
        let stats = l.stats();
        let ctx = format!("B: {rb:?} C: {rc:?} {stats:?}");
        assert_eq!((rb, rc), (Seen::Admitted(T), Seen::Admitted(T)), "{ctx}");
        assert_eq!(stats.keys_held, 3, "{ctx}");
        assert!(
            stats.bytes > before && stats.bytes == bytes,
            "one move: {ctx}"
        );
        for k in [a, b, c] {
            assert_eq!(tat(&l, k), T, "{ctx}");
        }
    });
}

// ---------------------------------------------------------------------------------------
// 4b. Update and reset vs compaction.

/// Keys `(a, x, y, c)` for the compaction models: inserted in that order into a 4-slot
/// array, `a`, `x` and `y` take three slots (linear probing), and `c`'s home is the fourth.
/// Once `x` and `y` are reset, `c`'s probe meets that `EMPTY` slot before any tombstone, the
/// shard is over its load limit, and tombstones outnumber keys: inserting `c` compacts.
fn compaction_keys() -> (u64, u64, u64, u64) {
    let a = 1;
    for x in 2..100 {
        for y in x + 1..100 {
            let mut taken = [false; 4];
            for key in [a, x, y] {
                let mut i = home(key, 4) as usize;
                while taken[i] {
                    i = (i + 1) % 4;
                }
                taken[i] = true;
            }
            let free = taken.iter().position(|t| !t).unwrap() as u64;
            if let Some(c) = (y + 1..200).find(|&c| home(c, 4) == free) {
                return (a, x, y, c);
            }
        }
    }
    unreachable!("no keys for the compaction models")
}

/// A one-shard limiter holding `a` (TAT `T`) and tombstones where `x` and `y` were, in a
/// 4-slot array: the next insert of `c` compacts it in place (see `compaction_keys`).
fn before_compaction() -> (Limiter<u64>, u64, u64) {
    let (a, x, y, c) = compaction_keys();
    let l = limiter(4, 64, FullPolicy::RefuseNewKeys);
    for key in [a, x, y] {
        assert!(l.check_at(&key, at(0)).is_ok());
    }
    assert!(l.reset(&x) && l.reset(&y));
    (l, a, c)
}

/// A lock-free check of `a` races the compaction that `c`'s insert triggers, which freezes
/// `a`, empties its slot and places it again. The check lands exactly once, on `a`'s state.
fn update_vs_compaction(roles: Roles) {
    let (l, a, c) = before_compaction();
    let (l1, l2) = (l.clone(), l.clone());
    let (ra, rc) = race(
        roles,
        move || seen(l1.check_at(&a, at(0)), 0),
        move || seen(l2.check_at(&c, at(0)), 0),
    );
    let ctx = format!("A: {ra:?} C: {rc:?} {:?}", l.stats());
    assert_eq!(
        (ra, rc),
        (Seen::Admitted(2 * T), Seen::Admitted(T)),
        "{ctx}"
    );
    assert_eq!((tat(&l, a), tat(&l, c)), (2 * T, T), "{ctx}");
    assert_eq!(l.stats().keys_held, 2, "{ctx}");
}

#[test]
fn update_vs_compaction_model() {
    model("update_vs_compaction", update_vs_compaction);
}

/// `reset(a)` races the same compaction. Its lock-free probe may run while `a` is between
/// slots and miss it; the reset must still find and forget `a`.
fn reset_vs_compaction(roles: Roles) {
    let (l, a, c) = before_compaction();
    let (l1, l2) = (l.clone(), l.clone());
    let (removed, rc) = race(
        roles,
        move || l1.reset(&a),
        move || seen(l2.check_at(&c, at(0)), 0),
    );
    let ctx = format!("reset: {removed} C: {rc:?} {:?}", l.stats());
    assert!(removed, "{ctx}");
    assert_eq!(rc, Seen::Admitted(T), "{ctx}");
    assert_eq!((tat(&l, a), tat(&l, c)), (0, T), "{ctx}");
    assert_eq!(l.stats().keys_held, 1, "{ctx}");
}

#[test]
fn reset_vs_compaction_model() {
    model("reset_vs_compaction", reset_vs_compaction);
}

// ---------------------------------------------------------------------------------------
// 5. Quota change vs check.

/// One thread replaces the quota (interval 1 000, burst 2) with (interval 3 000, burst 5)
/// while the other admits 2 cells. The admission shows both halves of the quota it used:
/// its `limit` is the burst and its TAT advanced by 2 intervals, so a torn read
/// (1 000, 5) or (3 000, 2) would be visible.
fn quota_change_vs_check(roles: Roles) {
    const NOW: u64 = 10_000;
    let old = quota(2);
    let new = Quota::with_period(Duration::from_nanos(3 * T)).allow_burst(5);
    let l = limiter(2, 4, FullPolicy::RefuseNewKeys);
    // Key held (and expired at NOW), so the check is one lock-free CAS.
    assert!(l.check_at(&7, at(0)).is_ok());
    let (l1, l2) = (l.clone(), l.clone());
    let (ok, ()) = race(
        roles,
        move || l1.check_n_at(&7, 2, at(NOW)),
        move || l2.set_quota(new),
    );
    let ok = ok.expect("2 cells fit either quota");

    let used = (ok.limit(), nanos(ok.reset_after()));
    assert!(
        used == (2, 2 * T) || used == (5, 2 * 3 * T),
        "torn quota: {used:?}"
    );
    // Old: tau = 1 000, nothing left. New: tau = 12 000, 3 cells left.
    let remaining = if used.0 == 2 { 0 } else { 3 };
    assert_eq!(ok.remaining(), remaining, "{used:?}");
    assert_eq!(tat(&l, 7), NOW + used.1);
    assert_eq!(l.quota(), new);
    assert_ne!(old, new);
}

#[test]
fn quota_change_vs_check_model() {
    model("quota_change_vs_check", quota_change_vs_check);
}

// ---------------------------------------------------------------------------------------
// 6. Reset vs check; eviction vs update.

/// Key K (burst 2) has one cell used. One thread resets K while the other checks it. The
/// check is admitted either way: before the reset from K's state (TAT 2 000, then the reset
/// forgets K), after it from scratch (TAT 1 000, and K stays held).
fn reset_vs_check(roles: Roles) {
    let l = limiter(2, 4, FullPolicy::RefuseNewKeys);
    assert!(l.check_at(&7, at(0)).is_ok());
    let (l1, l2) = (l.clone(), l.clone());
    let (r, was_held) = race(
        roles,
        move || seen(l1.check_at(&7, at(0)), 0),
        move || l2.reset(&7),
    );

    assert!(was_held, "nothing else removes the key");
    let held = l.stats().keys_held;
    match r {
        // Before the reset: the reset forgot the admission with the rest.
        Seen::Admitted(2_000) => assert_eq!((tat(&l, 7), held), (0, 0)),
        // After the reset: a fresh state that the table kept.
        Seen::Admitted(1_000) => assert_eq!((tat(&l, 7), held), (1_000, 1)),
        _ => panic!("{r:?}"),
    }
}

#[test]
fn reset_vs_check_model() {
    model("reset_vs_check", reset_vs_check);
}

/// Capacity 1, evict when full. Live key A (TAT 1 000) is checked at 0 (TAT -> 2 000) while
/// new key B, sharing A's home, is checked at 0 and evicts A to take its slot with TAT
/// 1 000. A's word before and B's word after are then `{1, g, 1000}` and `{1, g+1, 1000}`:
/// only the generation keeps a stale CAS of A's check from landing on B.
fn evict_vs_update(roles: Roles) {
    let (a, b) = key_pair(true);
    let l = limiter(2, 1, FullPolicy::EvictClosestToExpiry);
    assert!(l.check_at(&a, at(0)).is_ok());
    let (l1, l2) = (l.clone(), l.clone());
    let (ra, rb) = race(
        roles,
        move || seen(l1.check_at(&a, at(0)), 0),
        move || seen(l2.check_at(&b, at(0)), 0),
    );

    let stats = l.stats();
    let (ta, tb) = (tat(&l, a), tat(&l, b));
    let ctx = format!("A: {ra:?} B: {rb:?} stored A {ta} B {tb} {stats:?}");
    assert_eq!(rb, Seen::Admitted(1_000), "{ctx}");
    assert_eq!(stats.keys_held, 1, "{ctx}");
    match ra {
        // A's check came first (from A's state); B then evicted A.
        Seen::Admitted(2_000) => {
            assert_eq!((ta, tb, stats.forced_evictions), (0, 1_000, 1), "{ctx}");
        }
        // B evicted A first; A came back as a new key and evicted B.
        Seen::Admitted(1_000) => {
            assert_eq!((ta, tb, stats.forced_evictions), (1_000, 0, 2), "{ctx}");
        }
        _ => panic!("{ctx}"),
    }
}

#[test]
fn evict_vs_update_model() {
    model("evict_vs_update", evict_vs_update);
}

/// Capacity 1, evict when full. Live key A has used its whole burst (TAT 2 000). One thread
/// checks new key B, sharing A's home, which evicts A and takes its slot in place (TAT
/// 1 000); the other reads A's state (a 0-cell check). The reader meets A's word, a frozen
/// word (the locked path, which waits), or B's fingerprint; it must read A's own TAT or, once
/// A is gone, the horizon (0), never B's state.
fn evict_in_place_vs_reader_of_the_victim(roles: Roles) {
    let (a, b) = key_pair(true);
    let l = limiter(2, 1, FullPolicy::EvictClosestToExpiry);
    assert!(l.check_n_at(&a, 2, at(0)).is_ok());
    let (l1, l2) = (l.clone(), l.clone());
    let (rb, read_a) = race(
        roles,
        move || seen(l1.check_at(&b, at(0)), 0),
        move || tat(&l2, a),
    );

    let stats = l.stats();
    let ctx = format!("B: {rb:?} A read {read_a} {stats:?}");
    assert_eq!(rb, Seen::Admitted(1_000), "{ctx}");
    assert!(read_a == 2_000 || read_a == 0, "{ctx}");
    assert_eq!((tat(&l, a), tat(&l, b)), (0, 1_000), "{ctx}");
    assert_eq!((stats.keys_held, stats.forced_evictions), (1, 1), "{ctx}");
}

#[test]
fn evict_in_place_vs_reader_of_the_victim_model() {
    model(
        "evict_in_place_vs_reader_of_the_victim",
        evict_in_place_vs_reader_of_the_victim,
    );
}

/// Keys for an eviction off the new key's run in a four-slot shard (capacity 3): `v` and `k`
/// share home 0, `x`'s home is 2 and new key `b`'s home is 3. Held `v`, `k`, `x` fill slots
/// 0, 1, 2 (`k` one past its home) and leave slot 3 `EMPTY`, so `b`'s run holds no key and
/// the small shard's victim is its least-TAT key, `v`, off that run. Closing `v`'s hole moves
/// `k` back into slot 0 and empties slot 1 (`Shard::close_hole`).
fn shift_keys() -> (u64, u64, u64, u64) {
    let nth_home = |h: u64, n: usize| (1..).filter(|&key| home(key, 4) == h).nth(n).unwrap();
    let (v, k) = (nth_home(0, 0), nth_home(0, 1));
    (v, k, nth_home(2, 0), nth_home(3, 0))
}

/// A four-slot shard set up as in [`shift_keys`]: `v` at TAT 1 000, `k` and `x` at 2 000.
fn shift_limiter() -> (Limiter<u64>, (u64, u64, u64, u64)) {
    let (v, k, x, b) = shift_keys();
    let l = limiter(3, 3, FullPolicy::EvictClosestToExpiry);
    assert!(l.check_at(&v, at(0)).is_ok());
    assert!(l.check_n_at(&k, 2, at(0)).is_ok());
    assert!(l.check_n_at(&x, 2, at(0)).is_ok());
    (l, (v, k, x, b))
}

/// New key `b` evicts `v` off its run, and `k` shifts back into `v`'s slot, while the other
/// thread resets `k`. The reset's lock-free miss must not be trusted if it looked at slot 0
/// before the shift and at slot 1 after it (`Shard::moves`): `k` is held throughout, so the
/// reset forgets it, whichever came first.
fn evict_shift_vs_reset(roles: Roles) {
    let (l, (v, k, x, b)) = shift_limiter();
    let (l1, l2) = (l.clone(), l.clone());
    let (rb, was_held) = race(
        roles,
        move || seen(l1.check_at(&b, at(0)), 0),
        move || l2.reset(&k),
    );

    let stats = l.stats();
    let ctx = format!("B: {rb:?} reset {was_held} {stats:?}");
    assert!(was_held, "{ctx}");
    assert_eq!(rb, Seen::Admitted(1_000), "{ctx}");
    assert_eq!(
        (tat(&l, k), tat(&l, x), tat(&l, b)),
        (0, 2_000, 1_000),
        "{ctx}"
    );
    match stats.forced_evictions {
        // B came first: it evicted V.
        1 => assert_eq!((tat(&l, v), stats.keys_held), (0, 2), "{ctx}"),
        // The reset came first and made room.
        0 => assert_eq!((tat(&l, v), stats.keys_held), (1_000, 3), "{ctx}"),
        _ => panic!("{ctx}"),
    }
}

#[test]
fn evict_shift_vs_reset_model() {
    model("evict_shift_vs_reset", evict_shift_vs_reset);
}

/// As [`evict_shift_vs_reset`], but the other thread checks `k` (one cell, TAT 2 000 ->
/// 3 000) while it shifts back: the check lands exactly once, on `k`'s own state, in either
/// slot, and `k` is held once.
fn evict_shift_vs_update(roles: Roles) {
    let (l, (v, k, x, b)) = shift_limiter();
    let (l1, l2) = (l.clone(), l.clone());
    let (rb, rk) = race(
        roles,
        move || seen(l1.check_at(&b, at(0)), 0),
        move || seen(l2.check_at(&k, at(0)), 0),
    );

    let stats = l.stats();
    let ctx = format!("B: {rb:?} K: {rk:?} {stats:?}");
    assert_eq!(
        (rb, rk),
        (Seen::Admitted(1_000), Seen::Admitted(3_000)),
        "{ctx}"
    );
    assert_eq!(
        (tat(&l, v), tat(&l, k), tat(&l, x), tat(&l, b)),
        (0, 3_000, 2_000, 1_000),
        "{ctx}"
    );
    assert_eq!((stats.keys_held, stats.forced_evictions), (3, 1), "{ctx}");
}

#[test]
fn evict_shift_vs_update_model() {
    model("evict_shift_vs_update", evict_shift_vs_update);
}

// ---------------------------------------------------------------------------------------
// 6b. The full gate: new keys refused without the lock (`src/table/gate.rs`).

/// Capacity 1, refuse when full. Live key A (TAT 1 000) fills the table and new key B,
/// sharing A's home, has been refused under the lock, which closed the gate (full until
/// 1 000). One thread resets A; the other reads A's state (a 0-cell check, itself decided
/// at the gate while A is absent) and then checks B. If it saw A gone, the reset's removal
/// came before its check of B, which must then find room: admitted, never refused at a gate
/// the reset should have opened first. Either way the table ends consistent.
fn refusal_vs_reset(roles: Roles) {
    let (a, b) = key_pair(true);
    let l = limiter(1, 1, FullPolicy::RefuseNewKeys);
    assert!(l.check_at(&a, at(0)).is_ok());
    assert!(l.check_at(&b, at(0)).unwrap_err().is_table_full());
    let (l1, l2) = (l.clone(), l.clone());
    let (was_held, (read_a, rb)) = race(
        roles,
        move || l1.reset(&a),
        move || {
            let read_a = tat(&l2, a);
            (read_a, seen(l2.check_at(&b, at(0)), 0))
        },
    );

    let stats = l.stats();
    let ctx = format!("A read {read_a}, B: {rb:?} {stats:?}");
    assert!(was_held, "{ctx}");
    assert!(read_a == 1_000 || read_a == 0, "{ctx}");
    if read_a == 0 {
        assert_eq!(rb, Seen::Admitted(1_000), "A was gone: {ctx}");
    }
    match rb {
        Seen::Admitted(1_000) => {
            assert_eq!((stats.keys_held, stats.refused_keys), (1, 1), "{ctx}");
            assert_eq!(tat(&l, b), 1_000, "{ctx}");
        }
        Seen::Full => {
            assert_eq!((stats.keys_held, stats.refused_keys), (0, 2), "{ctx}");
            // The reset opened the gate: B is admitted now.
            assert!(l.check_at(&b, at(0)).is_ok(), "{ctx}");
        }
        _ => panic!("{ctx}"),
    }
}

#[test]
fn refusal_vs_reset_model() {
    model("refusal_vs_reset", refusal_vs_reset);
}

// ---------------------------------------------------------------------------------------
// 7. The direct limiter.

/// Two checks on one `DirectLimiter` at the same time: `min(burst, 2)` pass, from distinct
/// states, and the state records them all.
fn direct_two_checks(roles: Roles, burst: u32) {
    const NOW: u64 = 10_000;
    let l = DirectLimiter::with_clock(quota(burst), ManualClock::new());
    let (l1, l2) = (l.clone(), l.clone());
    let (mine, other) = race(
        roles,
        move || seen(l1.check_at(at(NOW)), NOW),
        move || seen(l2.check_at(at(NOW)), NOW),
    );

    let mut admitted: Vec<u64> = [mine, other]
        .into_iter()
        .filter_map(|s| match s {
            Seen::Admitted(tat) => Some(tat),
            _ => None,
        })
        .collect();
    admitted.sort_unstable();
    let expected = u64::from(burst.min(2));
    let want: Vec<u64> = (1..=expected).map(|i| NOW + i * T).collect();
    assert_eq!(admitted, want, "{mine:?} {other:?}");
    // The next cell comes one interval after the last admitted one, less the tolerance.
    let tolerance = u64::from(burst - 1) * T;
    match seen(l.check_at(at(NOW)), NOW) {
        Seen::Limited(earliest) => assert_eq!(earliest, NOW + expected * T - tolerance),
        s => assert!(burst > 2, "{s:?}"),
    }
}

#[test]
fn direct_two_checks_both_pass() {
    model("direct_two_checks_both_pass", |roles| {
        direct_two_checks(roles, 2)
    });
}

#[test]
fn direct_two_checks_one_passes() {
    model("direct_two_checks_one_passes", |roles| {
        direct_two_checks(roles, 1)
    });
}

// ---------------------------------------------------------------------------------------
// Undo vs reclaim.

/// An undo racing the reclaim of another key of its shard as expired, which moves no
/// removal epoch. Key A (burst 2, one cell used: live) is checked again and that admission
/// undone, while new key B takes the slot of expired key C (B's home is C's) in a table of
/// capacity 2. A was never removed, so its undo is exact in every order: A is back at the
/// TAT of its one cell, and B's state is B's own. (With every reclaim moving the epoch, as
/// it once did, the undo was refused when the reclaim came between the check and the undo.)
fn undo_vs_reclaim_of_another_key(roles: Roles) {
    const NOW: u64 = GRACE + 5_000;
    let (c, b) = key_pair(true);
    let a = key_pair(false).1;
    let l = limiter(2, 2, FullPolicy::RefuseNewKeys);
    // A first: C's insert at 0 then forgets nothing (a later one, at NOW, would drop C).
    assert!(l.check_at(&a, at(NOW)).is_ok()); // live
    assert!(l.check_at(&c, at(0)).is_ok()); // expired long before NOW
    assert_eq!(l.stats().expired_reclaimed, 0);
    let (l1, l2) = (l.clone(), l.clone());
    let (undone, rb) = race(
        roles,
        move || l1.check_at(&a, at(NOW)).is_ok_and(|ok| l1.undo(&a, ok)),
        move || seen(l2.check_n_at(&b, 2, at(NOW)), NOW),
    );
    let stats = l.stats();
    let ctx = format!("A's undo {undone}, B: {rb:?} {stats:?}");
    assert!(undone, "{ctx}");
    assert_eq!(tat(&l, a), NOW + T, "{ctx}");
    assert_eq!(rb, Seen::Admitted(NOW + 2 * T), "{ctx}");
    assert_eq!(tat(&l, b), NOW + 2 * T, "{ctx}");
    assert_eq!(stats.expired_reclaimed, 1, "{ctx}");
}

#[test]
fn undo_vs_reclaim_of_another_key_keyed() {
    model(
        "undo_vs_reclaim_of_another_key",
        undo_vs_reclaim_of_another_key,
    );
}

// ---------------------------------------------------------------------------------------
// Undo vs reset.

/// One thread checks a held key while the other resets it; then the key is checked back up to
/// the same TAT and the first admission is undone. If the second check was admitted, the
/// reset came after the first check's write, and undoing it would hand back the second
/// check's cell: the undo must write nothing. (It failed with one bump of the removal epoch,
/// before the freeze: a check that read the bumped epoch and wrote just before the freeze
/// recorded the epoch of the next incarnation.)
fn undo_vs_reset(roles: Roles) {
    let l = limiter(2, 4, FullPolicy::RefuseNewKeys);
    // One of two cells used: the key is held, so the racing check takes the lock-free path.
    assert!(l.check_at(&7, at(0)).is_ok());
    let (l1, l2) = (l.clone(), l.clone());
    let (first, _) = race(roles, move || l1.check_at(&7, at(0)), move || l2.reset(&7));
    // After the reset, two cells bring the key back to the TAT the first check stored.
    let second = l.check_n_at(&7, 2, at(0));
    let undone = first.is_ok_and(|ok| l.undo(&7, ok));
    assert!(
        !(second.is_ok() && undone),
        "undid a write of an earlier incarnation: {first:?} {second:?}"
    );
    if second.is_ok() {
        assert!(l.check_at(&7, at(0)).is_err(), "{first:?} {second:?}");
    }
}

#[test]
fn undo_vs_reset_keyed() {
    model("undo_vs_reset_keyed", undo_vs_reset);
}

/// [`undo_vs_reset`] on a direct limiter (its epoch is bumped around `reset`'s store).
fn direct_undo_vs_reset(roles: Roles) {
    let l = DirectLimiter::with_clock(quota(1), ManualClock::new());
    let (l1, l2) = (l.clone(), l.clone());
    let (first, _) = race(roles, move || l1.check_at(at(0)), move || l2.reset());
    let second = l.check_at(at(0));
    let undone = first.is_ok_and(|ok| l.undo(ok));
    assert!(
        !(second.is_ok() && undone),
        "undid a write of an earlier incarnation: {first:?} {second:?}"
    );
}

#[test]
fn undo_vs_reset_direct() {
    model("undo_vs_reset_direct", direct_undo_vs_reset);
}

/// An undo racing a reset and the re-admission after it, on a direct limiter (burst 1). One
/// thread checks and then undoes its admission; the other resets and checks again. If the
/// second check was admitted and its cell is not held afterwards, the undo handed it back:
/// it took the new incarnation's TAT for its own write's. That is what the epoch's first
/// bump prevents: the reset's store of 0 is the new incarnation, and an undo that loads any
/// TAT after it must see the epoch moved, so a single bump *after* the store is not enough
/// (the undo can run between the store and that bump). [`undo_vs_reset_direct`] undoes only
/// after both threads finish, so it cannot see this.
fn direct_undo_during_reset(roles: Roles) {
    let l = DirectLimiter::with_clock(quota(1), ManualClock::new());
    let (l1, l2) = (l.clone(), l.clone());
    let ((first, undone), second) = race(
        roles,
        move || {
            let first = l1.check_at(at(0));
            let undone = first.is_ok_and(|ok| l1.undo(ok));
            (first, undone)
        },
        move || {
            l2.reset();
            l2.check_at(at(0))
        },
    );
    if second.is_ok() {
        assert!(
            l.check_at(at(0)).is_err(),
            "the second check's cell was handed back: {first:?} undone {undone} {second:?}"
        );
    }
}

#[test]
fn undo_during_reset_direct() {
    model("undo_during_reset_direct", direct_undo_during_reset);
}
