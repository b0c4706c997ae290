//! The keyed state table: sharded open addressing, lock-free for known keys.
//!
//! A key is known to the table only by two 64-bit hashes the caller computes: `route` picks the
//! shard and `fp` (its identity fingerprint) picks the home slot and names the key. The table
//! stores `{fp, state}` per key and knows nothing of time or GCRA: callers pass a closure that
//! maps the stored TAT to a new one, and a `now` below which stored TATs count as expired.
//!
//! See `slot.rs` for the per-slot protocol, `shard.rs` for inserts, reclamation and growth,
//! and `array.rs` for how a shard's slots grow (one array moved while small, then segments)
//! without freeing anything a reader may hold.

mod array;
mod changes;
mod full_policy;
mod gate;
mod keep;
mod shard;
mod slot;

use crossbeam_utils::CachePadded;

pub use full_policy::FullPolicy;
pub(crate) use shard::Full;
pub(crate) use slot::Step;

use array::SlotArray;
use shard::{MIN_LEN, Shard, len_for_cap, len_for_keys};
use slot::{Attempt, Slot, TOMBSTONE};

/// How a table is sized and what it does when full.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TableConfig {
    /// The most keys held at once (a hard cap; memory grows up to it).
    pub(crate) capacity: usize,
    /// Keys to size the arrays for up front (0: start small and grow).
    pub(crate) presize: usize,
    pub(crate) policy: FullPolicy,
    pub(crate) shards: usize,
    /// How much longer than a caller's `expired_by` a shard below its cap keeps an expired
    /// key (`Shard::forget_by`), in TAT units (nanoseconds); `None`: each shard learns it
    /// (`keep.rs`).
    pub(crate) keep_expired: Option<u64>,
}

/// What the table holds, summed over shards.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TableCounts {
    pub(crate) keys_held: usize,
    pub(crate) reclaimed: u64,
    pub(crate) evicted: u64,
    pub(crate) refused: u64,
    pub(crate) compactions: u64,
    pub(crate) bytes: usize,
}

#[derive(Debug)]
pub(crate) struct Table {
    shards: Box<[CachePadded<Shard>]>,
    /// `64 - log2(shards)` when the shard count is a power of two above 1 (the default 64),
    /// else 0: see [`shard_index`].
    shard_shift: u32,
    policy: FullPolicy,
    capacity: usize,
}

/// Where a key lives ([`Table::locate`]): its shard, the shard's slots as seen then, and the
/// key's home slot among them.
#[derive(Clone, Copy)]
pub(crate) struct Spot<'a> {
    shard: &'a Shard,
    array: SlotArray<'a>,
    home: usize,
    /// `array.slot(home)`, kept rather than derived again: the probe after the clock read
    /// would redo the segment lookup, 2 ns a check on a table that fits in the cache.
    home_slot: &'a Slot,
    /// The segment holding the home slot, for a probe that goes past it.
    segment: usize,
}

/// What a lock-free probe that missed its key saw, for the locked path to take over rather
/// than walk the key's run again (`Shard::update_locked`, `changes.rs`): the `EMPTY` slot that
/// ended the run, on a view of `len` slots, probed after reading the shard's change count
/// `changes`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Miss {
    pub(crate) empty: usize,
    pub(crate) len: usize,
    pub(crate) changes: u64,
}

/// Multiplier that mixes a route hash before its top bits pick the shard. Odd, and unrelated
/// to `SlotArray::home`'s multiplier (`array.rs`), so a key's shard and its home slot in that shard
/// depend on its hash in different ways.
const ROUTE_MIX: u64 = 0xFF51_AFD7_ED55_8CCD;

/// The shard of `route` among `shards`: the top bits of `route × ROUTE_MIX`.
///
/// Why mix: a fast hash of a small integer can be nearly linear in it. foldhash's is one
/// folded multiply by a per-process seed, and with the raw top bits about one process in 200
/// sent 6 of the keys 0..10 to one of 64 shards (uniform odds: 2e-7), and one in 1,000 loaded
/// a shard with 13x its share of 1,024 sequential keys, so a capped table evicted live keys
/// while other shards sat empty. An identity hasher as a router sent every small integer to
/// shard 0. After the multiply, which makes the top bits depend on every bit of the hash,
/// both spread as a uniform hash would (`tests` below; `tests/table.rs`). One multiply is on
/// the critical path of a check; the home slot needs none of its own (`SlotArray::home`
/// already multiplies).
///
/// `shift` is `64 - log2(shards)` for a power of two above 1, else 0. The top bits of the
/// mix are then the same index as the high word of `mixed × shards`, taken with a shift
/// instead of a second multiply: the index is on the chain of loads a check waits for before
/// its clock read (hash, shard, length, home slot), and the clock read's fence waits for that
/// chain to finish (BENCHMARKS.md, A and D).
#[inline]
fn shard_index(route: u64, shards: usize, shift: u32) -> usize {
    let mixed = route.wrapping_mul(ROUTE_MIX);
    if shift != 0 {
        (mixed >> shift) as usize
    } else {
        ((u128::from(mixed) * shards as u128) >> 64) as usize
    }
}

/// [`shard_index`]'s `shift` for `shards` shards.
fn shard_shift(shards: usize) -> u32 {
    if shards > 1 && shards.is_power_of_two() {
        64 - shards.trailing_zeros()
    } else {
        0
    }
}

/// Remaps a 64-bit identity hash away from the `EMPTY` and `TOMBSTONE` markers: both become
/// 2, the first identity (one compare and a conditional move on the check's path).
#[inline]
pub(crate) fn fingerprint(hash: u64) -> u64 {
    hash.max(TOMBSTONE + 1)
}

impl Table {
    pub(crate) fn new(config: TableConfig) -> Table {
        let shards = config.shards.max(1);
        let capacity = config.capacity.max(1);
        let shard_cap = capacity.div_ceil(shards);
        let initial_len = if config.presize == 0 {
            MIN_LEN
        } else {
            // Room for the shard's share plus four standard deviations of hashing noise.
            let share = config.presize.div_ceil(shards);
            let slack = 4 * (share as f64).sqrt() as usize + 1;
            if share + slack >= shard_cap {
                len_for_cap(shard_cap)
            } else {
                len_for_keys(share + slack)
            }
        };
        Table {
            shards: (0..shards)
                .map(|_| CachePadded::new(Shard::new(initial_len, shard_cap, config.keep_expired)))
                .collect(),
            shard_shift: shard_shift(shards),
            policy: config.policy,
            // Saturating: a cap of `usize::MAX` ("no cap") is that many, not a wrapped 0.
            capacity: shard_cap.saturating_mul(shards),
        }
    }

    /// The most keys the table holds.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    #[inline]
    fn shard(&self, route: u64) -> &Shard {
        let i = shard_index(route, self.shards.len(), self.shard_shift);
        debug_assert!(i < self.shards.len());
        // SAFETY: `shard_index` is the high word of `mixed · shards` with `mixed < 2^64`, or
        // the top `log2(shards)` bits of `mixed`: below `shards` either way, so in bounds.
        unsafe { self.shards.get_unchecked(i) }
    }

    /// Where key `fp` lives: its shard, that shard's slots (the length read once) and its
    /// home slot, whose cache lines it starts loading (`SlotArray::prefetch`). A check locates
    /// its key before it reads the clock and probes after, from this spot (`engine::check_now`).
    #[inline(always)]
    pub(crate) fn locate(&self, route: u64, fp: u64) -> Spot<'_> {
        let shard = self.shard(route);
        let array = shard.array();
        let home = array.home(fp);
        let (home_slot, segment) = array.slot_in_segment(home);
        SlotArray::prefetch(home_slot);
        Spot {
            shard,
            array,
            home,
            home_slot,
            segment,
        }
    }

    /// Runs `f` on key `fp`'s TAT and stores what it returns. Known keys: lock-free, one CAS.
    /// An absent key is inserted only if `f` writes; its TAT is taken to be the latest TAT its
    /// shard has forgotten as expired (0 at first), never less than it had before it was
    /// forgotten (see `Shard::update_locked`).
    ///
    /// `expired_by`: stored TATs at or before it count as expired, so the locked path may
    /// reclaim them: at once in a shard at its cap of keys, its keep time later in one below
    /// it (`Shard::forget_by`, `keep.rs`). It is not necessarily the caller's clock: the
    /// limiter passes its `now` less a grace (`limiter::RECLAIM_GRACE`). `f` gets the
    /// caller's own `now` by capture.
    #[inline]
    pub(crate) fn update<R>(
        &self,
        route: u64,
        fp: u64,
        expired_by: u64,
        f: impl FnMut(u64) -> Step<R>,
    ) -> Result<R, Full> {
        self.update_in(self.shard(route), fp, expired_by, f)
    }

    /// [`update`](Table::update) on the locked path alone, of a key the table holds (`None`
    /// if it does not: never inserted): for a write that may lower the key's TAT, an undo
    /// (`Shard::update_held` keeps the shard's bound on its earliest expiry).
    pub(crate) fn update_held<R>(
        &self,
        route: u64,
        fp: u64,
        mut f: impl FnMut(u64) -> Step<R>,
    ) -> Option<R> {
        self.shard(route).update_held(fp, &mut f)
    }

    /// [`update`](Table::update) for a caller whose lock-free attempt
    /// ([`try_update_recording`](Table::try_update_recording)) just failed, with `route`'s
    /// removal epoch read first (see `Shard::removals`): what a write that may be undone
    /// records (`engine.rs`).
    ///
    /// It goes straight to the locked path, without a second lock-free probe: the attempt
    /// failed because the key was missing (a new key: the lock is needed to insert it, or to
    /// refuse it), its slot was frozen (the lock holder is at work on it) or its slot changed
    /// hands under the probe (a rare race), and a second probe would find the same in all but
    /// the last; a second probe would be a third walk of a new key's run at a full shard
    /// (BENCHMARKS.md, scenario F). The locked path is correct for a held key too
    /// (it re-probes under the lock), only slower; `RefuseNewKeys` still refuses lock-free at
    /// a closed gate (`Shard::update_locked`). `miss`: what the attempt's probe saw, if it
    /// missed, which spares the locked path its own walk when nothing changed since.
    #[inline]
    pub(crate) fn update_recording<R>(
        &self,
        route: u64,
        fp: u64,
        expired_by: u64,
        f: impl FnMut(u64) -> Step<R>,
        miss: Option<Miss>,
    ) -> Result<(R, u64), Full> {
        let shard = self.shard(route);
        let epoch = shard.removals();
        let out = self.locked(shard, fp, expired_by, f, miss)?;
        Ok((out, epoch))
    }

    /// [`update_recording`](Table::update_recording)'s lock-free part alone: one probe and
    /// the CAS loop on the slot it finds, with nothing out of line. `Err` (and nothing
    /// written) if the probe misses, the slot is frozen, or it changed hands under the probe:
    /// the caller then starts over with `update_recording`, which takes the lock (and
    /// re-probes under it, unless the miss it is given still holds). `Err(None)`: nothing to
    /// take over (a frozen slot, a slot that changed hands, or a run with no `EMPTY` slot).
    /// Not re-probing here keeps the probe's registers free for the CAS.
    ///
    /// The epoch is read after the probe, still before the slot's state load and CAS, which
    /// is all its argument asks (`seq::Epoch`, writer side). The shard's change count is read
    /// before the loads that decide a miss, which is all its argument asks (`changes.rs`).
    ///
    /// It probes from `spot` ([`locate`](Table::locate)), which may be older than a growth of
    /// the shard: the slots of an older length still exist and a key's lock-free miss is only
    /// a hint, as for any probe that a growth overtakes (`array.rs`, publication); the locked
    /// path takes over a miss only on the length it was probed on.
    #[inline(always)]
    pub(crate) fn try_update_recording<R>(
        spot: Spot<'_>,
        fp: u64,
        mut f: impl FnMut(u64) -> Step<R>,
    ) -> Result<(R, u64), Option<Miss>> {
        let read_count = || spot.shard.changes();
        let slot =
            match (spot.array).find_or_end(fp, spot.home, spot.home_slot, spot.segment, read_count)
            {
                Ok(slot) => slot,
                Err(end) => {
                    return Err(end.map(|(empty, changes)| Miss {
                        empty,
                        len: spot.array.len(),
                        changes,
                    }));
                }
            };
        let epoch = spot.shard.removals();
        match slot.update(fp, &mut f) {
            Attempt::Done(out) => Ok((out, epoch)),
            Attempt::Moved | Attempt::Frozen => Err(None),
        }
    }

    /// The lock-free probe and CAS, inlined into the caller; anything else (a miss, a frozen
    /// slot) goes to `locked`, which is out of line and takes `f` by value. Passing `&mut f`
    /// from here instead would give `f` an address that escapes, and the compiler would then
    /// keep `f`'s captures in memory on the hot path too (stores before the CAS; scenario A).
    #[inline]
    fn update_in<R, F: FnMut(u64) -> Step<R>>(
        &self,
        shard: &Shard,
        fp: u64,
        expired_by: u64,
        mut f: F,
    ) -> Result<R, Full> {
        while let Some(slot) = shard.array().find(fp) {
            match slot.update(fp, &mut f) {
                Attempt::Done(out) => return Ok(out),
                Attempt::Moved => continue,
                Attempt::Frozen => break,
            }
        }
        self.locked(shard, fp, expired_by, f, None)
    }

    #[cold]
    #[inline(never)]
    fn locked<R, F: FnMut(u64) -> Step<R>>(
        &self,
        shard: &Shard,
        fp: u64,
        expired_by: u64,
        mut f: F,
        miss: Option<Miss>,
    ) -> Result<R, Full> {
        shard.update_locked(fp, expired_by, self.policy, &mut f, miss)
    }

    /// How many times keys sharing `route`'s shard were forgotten (see `Shard::removals`).
    #[inline]
    pub(crate) fn removals(&self, route: u64) -> u64 {
        self.shard(route).removals()
    }

    /// Forgets key `fp`. Returns whether it was held and live at `now`.
    pub(crate) fn remove(&self, route: u64, fp: u64, now: u64) -> bool {
        let shard = self.shard(route);
        // A lock-free probe first, so resetting an unknown key takes no lock.
        !shard.absent_for_sure(fp) && shard.remove(fp, now)
    }

    /// Keys whose stored TAT is later than `now`: an O(slots) lock-free scan.
    pub(crate) fn live_keys(&self, now: u64) -> usize {
        self.shards.iter().map(|shard| shard.live_keys(now)).sum()
    }

    pub(crate) fn counts(&self) -> TableCounts {
        let mut total = TableCounts {
            bytes: std::mem::size_of::<Table>()
                + self.shards.len() * std::mem::size_of::<CachePadded<Shard>>(),
            ..TableCounts::default()
        };
        for shard in self.shards.iter() {
            let c = shard.counts();
            total.keys_held += c.used;
            total.reclaimed += c.reclaimed;
            total.evicted += c.evicted;
            total.refused += c.refused;
            total.compactions += c.compactions;
            total.bytes += c.bytes;
        }
        total
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::sync::Ordering;
    use slot::EMPTY;

    fn table(capacity: usize, policy: FullPolicy) -> Table {
        Table::new(TableConfig {
            capacity,
            presize: 0,
            policy,
            shards: 1,
            keep_expired: Some(0),
        })
    }

    /// Stores `tat` for key `fp` (a plain write, no GCRA).
    fn put(t: &Table, fp: u64, tat: u64, now: u64) -> Result<(), Full> {
        t.update(fp, fingerprint(fp), now, |_| (Some(tat), ()))
    }

    fn get(t: &Table, fp: u64) -> u64 {
        t.update(fp, fingerprint(fp), 0, |tat| (None, tat)).unwrap()
    }

    #[test]
    fn a_power_of_two_shard_count_picks_the_shards_the_multiply_would() {
        let mut rng = 0x1234_5678_9ABC_DEF0_u64;
        for shards in [2, 4, 64, 1 << 20] {
            let shift = shard_shift(shards);
            assert_ne!(shift, 0);
            for _ in 0..10_000 {
                rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let by_multiply = shard_index(rng, shards, 0);
                assert_eq!(shard_index(rng, shards, shift), by_multiply);
                assert!(by_multiply < shards);
            }
        }
        for shards in [1, 3, 6, 100] {
            assert_eq!(shard_shift(shards), 0);
        }
    }

    fn most_in_one_shard(routes: impl Iterator<Item = u64>) -> usize {
        let mut counts = [0usize; 64];
        for route in routes {
            counts[shard_index(route, 64, shard_shift(64))] += 1;
        }
        counts.into_iter().max().unwrap_or(0)
    }

    /// foldhash's hash of an integer key `k` (one write): one folded multiply of `k ^ acc`
    /// by the process's seed. Reproduced here so that the test can pick an unlucky seed.
    fn folded(k: u64, acc: u64, seed: u64) -> u64 {
        let product = u128::from(k ^ acc) * u128::from(seed);
        (product as u64) ^ ((product >> 64) as u64)
    }

    #[test]
    fn sequential_keys_under_an_unlucky_seed_spread_over_shards() {
        // A seed just above 2^63: a step of one in the key moves the product's low word by
        // half a turn and its high word by almost nothing, so the folded hash's top six bits
        // take about two values.
        let (acc, seed) = (0x0123_4567_89AB_CDEF, (1 << 63) + 0x3_1415_9265);
        let raw_top_bits = {
            let mut counts = [0usize; 64];
            for k in 0..1_024 {
                counts[(folded(k, acc, seed) >> 58) as usize] += 1;
            }
            counts.into_iter().max().unwrap()
        };
        assert!(
            raw_top_bits >= 256,
            "unmixed, the keys crowd: {raw_top_bits}"
        );
        // Mixed, the 1,024 keys land as a uniform hash's would: 16 a shard on average, at
        // most about twice that in the fullest; ten keys never crowd a shard of eight slots.
        let most = most_in_one_shard((0..1_024).map(|k| folded(k, acc, seed)));
        assert!(most <= 32, "{most} keys in one shard");
        let ten = most_in_one_shard((0..10).map(|k| folded(k, acc, seed)));
        assert!(ten <= 3, "{ten} of ten keys in one shard");
        // An identity hash of small integers (a common router for integer keys).
        assert!(most_in_one_shard(0..1_024) <= 32);
    }

    #[test]
    fn grows_and_keeps_every_key() {
        let t = table(100_000, FullPolicy::RefuseNewKeys);
        for k in 2..50_000u64 {
            put(&t, k.wrapping_mul(0x2545_F491_4F6C_DD1D), 1_000 + k, 0).unwrap();
        }
        for k in 2..50_000u64 {
            assert_eq!(get(&t, k.wrapping_mul(0x2545_F491_4F6C_DD1D)), 1_000 + k);
        }
        let c = t.counts();
        assert_eq!(c.keys_held, 49_998);
        assert_eq!(t.live_keys(0), 49_998);
        // The slots and the small arrays outgrown on the way are all the memory: at most twice
        // what the keys need.
        assert!(c.bytes <= 2 * 16 * len_for_keys(49_998) + 1024, "{c:?}");
    }

    #[test]
    fn expired_keys_are_reclaimed_instead_of_growing() {
        let t = table(64, FullPolicy::RefuseNewKeys);
        // A flood of one-off keys, each expiring before the next arrives.
        for k in 2..100_000u64 {
            put(&t, k.wrapping_mul(0x9E37_79B9_7F4A_7C15), k + 1, k).unwrap();
        }
        let c = t.counts();
        assert!(c.keys_held <= 64, "{c:?}");
        assert!(c.reclaimed >= 100_000 - 2 - 64, "{c:?}");
        assert_eq!(c.evicted, 0);
    }

    #[test]
    fn full_table_refuses_or_evicts_the_closest_to_expiry() {
        let t = table(16, FullPolicy::RefuseNewKeys);
        for k in 2..18u64 {
            put(&t, k << 40, 1_000 + k, 0).unwrap();
        }
        assert_eq!(put(&t, 99 << 40, 5_000, 0), Err(Full));
        assert_eq!(t.counts().refused, 1);

        let t = table(16, FullPolicy::EvictClosestToExpiry);
        for k in 2..18u64 {
            put(&t, k << 40, 1_000 + k, 0).unwrap();
        }
        put(&t, 99 << 40, 5_000, 0).unwrap();
        assert_eq!(t.counts().evicted, 1);
        // The earliest-expiring key (2) went; the others stayed.
        assert_eq!(get(&t, 2 << 40), 0);
        for k in 3..18u64 {
            assert_eq!(get(&t, k << 40), 1_000 + k);
        }
    }

    #[test]
    fn a_large_shard_evicts_the_closest_to_expiry_on_the_new_keys_run_in_place() {
        // 100 keys in one shard at its largest, 134 slots (larger than `SMALL_SHARD`). Every
        // key's home is one of the first four slots, so they fill slots 0..100 as one probe
        // run; a new key whose home is slot 0 walks all of it.
        let t = table(100, FullPolicy::EvictClosestToExpiry);
        let len = 134;
        assert_eq!(len_for_cap(100), len as usize);
        let home =
            |fp: u64| ((u128::from(fp.wrapping_mul(0x9E37_79B9_7F4A_7C15)) * len) >> 64) as u64;
        let keys: Vec<u64> = (2..).filter(|&fp| home(fp) < 4).take(100).collect();
        // Expiry order unrelated to slot order.
        let tat = |i: usize| 1_000 + ((i * 37) % 100) as u64;
        for (i, &fp) in keys.iter().enumerate() {
            put(&t, fp, tat(i), 0).unwrap();
        }
        assert_eq!(t.shards[0].array().len(), len as usize);
        assert_eq!(t.counts().keys_held, 100);
        let news: Vec<u64> = (2..)
            .filter(|fp| home(*fp) == 0 && !keys.contains(fp))
            .take(5)
            .collect();
        for (n, &fp) in news.iter().enumerate() {
            put(&t, fp, 5_000 + n as u64, 0).unwrap();
            // The n + 1 keys closest to expiry (TATs 1 000 ..= 1 000 + n) are gone: an
            // absent key reads as the horizon, 0.
            for (i, &k) in keys.iter().enumerate() {
                let want = if tat(i) <= 1_000 + n as u64 {
                    0
                } else {
                    tat(i)
                };
                assert_eq!(get(&t, k), want, "after {} evictions", n + 1);
            }
        }
        for (n, &fp) in news.iter().enumerate() {
            assert_eq!(get(&t, fp), 5_000 + n as u64);
        }
        let c = t.counts();
        // Each new key took its victim's slot: no tombstone, no compaction.
        assert_eq!(
            (c.evicted, c.keys_held, c.compactions),
            (5, 100, 0),
            "{c:?}"
        );
        assert_eq!(t.shards[0].counts().tombstones, 0);

        // A new key whose home is free (slot 110: its run holds no key) evicts the key
        // closest to expiry among the first 16 keys from its home on: slots 0.. (wrapping).
        let array = t.shards[0].array();
        let in_first_16: Vec<u64> = (0..16)
            .map(|i| array.slot(i).fp.load(Ordering::Relaxed))
            .collect();
        let victim = *keys
            .iter()
            .chain(&news)
            .filter(|k| in_first_16.contains(k))
            .min_by_key(|&&k| get(&t, k))
            .unwrap();
        let far = (2..).find(|fp| (110..120).contains(&home(*fp))).unwrap();
        put(&t, far, 9_000, 0).unwrap();
        assert_eq!(get(&t, victim), 0, "the victim is forgotten");
        assert_eq!(get(&t, far), 9_000);
        let c = t.counts();
        assert_eq!((c.evicted, c.keys_held), (6, 100), "{c:?}");
        // Off the run, the victim's hole was closed by shifting keys back: no tombstone.
        assert_eq!((t.shards[0].counts().tombstones, c.compactions), (0, 0));
        let held = keys
            .iter()
            .chain(&news)
            .filter(|&&k| get(&t, k) != 0)
            .count();
        assert_eq!(held, 99);
    }

    #[test]
    fn evictions_off_the_run_keep_every_key_reachable_without_tombstones() {
        // Large shards (300 and 400 slots) and a small one (60 slots, whole-shard choice),
        // at their caps, evicting for a stream of new keys: about one eviction in six is off
        // the new key's run and shifts keys back. After each, every held key is found by the
        // lock-free probe in its own slot, no key is held twice, and nothing leaves a
        // tombstone or needs a compaction.
        for cap in [250, 333, 50] {
            let t = table(cap, FullPolicy::EvictClosestToExpiry);
            let key = |k: u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (k >> 7);
            for k in 0..3_000u64 {
                put(&t, key(k), 1_000 + (k * 7_919) % 10_007, 0).unwrap();
                let array = t.shards[0].array();
                let mut held = Vec::new();
                for i in 0..array.len() {
                    let slot = array.slot(i);
                    if slot::is_live(slot.word()) {
                        let fp = slot.fp.load(Ordering::Relaxed);
                        let found = array.find(fp).map(std::ptr::from_ref);
                        assert_eq!(found, Some(std::ptr::from_ref(slot)), "cap {cap} key {k}");
                        held.push(fp);
                    }
                }
                let n = held.len();
                held.sort_unstable();
                held.dedup();
                assert_eq!(held.len(), n, "a key held twice");
                assert_eq!(n, (k as usize + 1).min(cap));
            }
            let c = t.counts();
            assert_eq!(c.evicted, 3_000 - cap as u64, "{c:?}");
            assert_eq!(
                (t.shards[0].counts().tombstones, c.compactions),
                (0, 0),
                "{c:?}"
            );
        }
    }

    #[test]
    fn keys_sharing_a_home_slot_stay_separate() {
        // Six fingerprints with the same home in an 8-slot shard that cannot grow: they
        // form one probe run, and each keeps its own state through updates and reuse.
        let t = table(6, FullPolicy::RefuseNewKeys);
        let array_len = 8;
        let home = |fp: u64| {
            ((u128::from(fp.wrapping_mul(0x9E37_79B9_7F4A_7C15)) * array_len) >> 64) as u64
        };
        let fps: Vec<u64> = (2..).filter(|&fp| home(fp) == 3).take(6).collect();
        let tat = |i: usize| if i == 2 { 50 } else { 200 + i as u64 };
        for (i, &fp) in fps.iter().enumerate() {
            assert_eq!(t.update(0, fp, 0, |_| (Some(tat(i)), ())), Ok(()));
        }
        for (i, &fp) in fps.iter().enumerate() {
            assert_eq!(t.update(0, fp, 0, |stored| (None, stored)), Ok(tat(i)));
        }
        // The third key expires; a seventh key with the same home reclaims its slot, and the
        // others keep their states.
        let late = (2..).filter(|&fp| home(fp) == 3).nth(6).unwrap();
        assert_eq!(t.update(0, late, 100, |_| (Some(999), ())), Ok(()));
        assert_eq!(t.counts().reclaimed, 1);
        for (i, &fp) in fps.iter().enumerate().filter(|(i, _)| *i != 2) {
            assert_eq!(t.update(0, fp, 0, |stored| (None, stored)), Ok(tat(i)));
        }
        assert_eq!(t.update(0, late, 0, |tat| (None, tat)), Ok(999));
        // The reclaimed key reads back as the shard's horizon: its own last TAT.
        assert_eq!(t.update(0, fps[2], 0, |tat| (None, tat)), Ok(50));
    }

    #[test]
    fn forgotten_keys_read_back_no_earlier_than_their_last_tat() {
        // Growth, a sweep and slot reuse each forget expired keys; a caller whose `now` is
        // behind the forgetter's must not see those keys start from scratch.
        let t = table(100_000, FullPolicy::RefuseNewKeys);
        put(&t, 7, 100, 0).unwrap();
        put(&t, 8, 60, 0).unwrap();
        assert_eq!(get(&t, 9), 0, "nothing forgotten yet");
        // Growth at now = 1000 drops both keys.
        for k in 10..100u64 {
            put(&t, k.wrapping_mul(0x9E37_79B9_7F4A_7C15), 5_000, 1_000).unwrap();
        }
        assert!(t.counts().reclaimed >= 2);
        assert_eq!(get(&t, 7), 100);
        assert_eq!(
            get(&t, 8),
            100,
            "the horizon is per shard, the latest forgotten TAT"
        );

        // Reuse of an expired slot, in a shard that cannot grow.
        let t = table(8, FullPolicy::RefuseNewKeys);
        for k in 2..10u64 {
            put(&t, k << 40, 1_000 + k, 0).unwrap();
        }
        put(&t, 99 << 40, 5_000, 2_000).unwrap();
        assert_eq!(t.counts().reclaimed, 1);
        let horizon = get(&t, 12345 << 40);
        assert!((1_002..=1_009).contains(&horizon));
        let at_horizon = (2..10u64).filter(|k| get(&t, k << 40) == horizon).count();
        assert_eq!(
            at_horizon, 1,
            "the reclaimed key reads back as its own last TAT"
        );
    }

    #[test]
    fn compaction_keeps_every_key_and_its_state() {
        let t = table(1_000, FullPolicy::RefuseNewKeys);
        let shard = &t.shards[0];
        let key = |k: u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for k in 0..50 {
            put(&t, key(k), 1_000 + k, 0).unwrap();
        }
        // Reset four keys in five: tombstones, which nothing trims, outnumber the keys.
        for k in (0..50).filter(|k| k % 5 != 0) {
            assert!(t.remove(key(k), fingerprint(key(k)), 0));
        }
        let len = shard.array().len();
        let mut k = 1_000;
        while shard.counts().compactions == 0 {
            put(&t, key(k), 5_000 + k, 0).unwrap();
            k += 1;
            assert!(k < 1_100, "no compaction: {:?}", shard.counts());
        }
        assert_eq!(shard.array().len(), len, "compacted in place, not grown");
        assert_eq!(shard.counts().tombstones, 0);
        for k in 0..50 {
            let want = if k % 5 == 0 { 1_000 + k } else { 0 };
            assert_eq!(get(&t, key(k)), want, "key {k}");
        }
        for k in 1_000..k {
            assert_eq!(get(&t, key(k)), 5_000 + k, "key {k}");
        }
        assert_eq!(t.counts().keys_held, 10 + (k - 1_000) as usize);
    }

    #[test]
    fn a_full_shard_is_loaded_to_at_most_three_quarters() {
        // At its cap a shard cannot grow to relieve its load, and every new key's probes walk
        // to the end of its run: the key that fills it takes it to `len_for_cap` first, however
        // the growth steps fall, presized or not.
        for cap in [1, 2, 7, 8, 9, 100, 106, 107, 256, 1_000, 5_000] {
            for presize in [0, cap / 2, cap] {
                let t = Table::new(TableConfig {
                    capacity: cap,
                    presize,
                    policy: FullPolicy::RefuseNewKeys,
                    shards: 1,
                    keep_expired: Some(0),
                });
                let key = |k: u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 2;
                for k in 0..cap as u64 {
                    put(&t, key(k), 1_000, 0).unwrap();
                }
                assert_eq!(put(&t, key(cap as u64), 1_000, 0), Err(Full), "{cap}");
                let len = t.shards[0].array().len();
                assert_eq!(len, len_for_cap(cap), "cap {cap}, presize {presize}");
                assert!(cap * 4 <= len * 3, "cap {cap}: {len} slots");
            }
        }
    }

    #[test]
    fn a_shard_at_its_largest_compacts_its_tombstones() {
        // A full-size shard never grows; insert-and-reset churn must not leave it all
        // tombstones (every miss would then probe the whole array).
        let t = table(100, FullPolicy::RefuseNewKeys);
        let shard = &t.shards[0];
        let key = |k: u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for k in 0..100 {
            put(&t, key(k), 1_000, 0).unwrap();
        }
        let len = shard.array().len();
        assert_eq!(
            len,
            len_for_cap(100),
            "its 100th key takes the shard to its largest"
        );
        for k in 90..100 {
            assert!(t.remove(key(k), fingerprint(key(k)), 0));
        }
        for k in 90..10_000 {
            put(&t, key(k), 1_000, 0).unwrap();
            assert!(t.remove(key(k), fingerprint(key(k)), 0));
            assert!(shard.counts().tombstones <= len / 8, "{:?}", shard.counts());
        }
        assert_eq!(shard.array().len(), len, "{len}: already its largest");
        assert!(shard.counts().compactions > 0);
        for k in 0..90 {
            assert_eq!(get(&t, key(k)), 1_000);
        }
    }

    #[test]
    fn remove_forgets_the_key() {
        let t = table(10, FullPolicy::RefuseNewKeys);
        put(&t, 7, 500, 0).unwrap();
        assert!(t.remove(7, fingerprint(7), 0));
        assert!(!t.remove(7, fingerprint(7), 0));
        assert_eq!(get(&t, 7), 0);
    }

    /// The lock-free attempt's miss for new key `k` (nothing written: it misses).
    fn miss_of(t: &Table, k: u64) -> Option<Miss> {
        let spot = t.locate(k, fingerprint(k));
        Table::try_update_recording(spot, fingerprint(k), |_| (Some(1), ())).unwrap_err()
    }

    /// Inserts new key `k` with TAT `tat` through the locked path, handing it `miss`.
    fn insert_with(t: &Table, k: u64, tat: u64, miss: Option<Miss>) {
        let f = |_| (Some(tat), ());
        t.update_recording(k, fingerprint(k), 0, f, miss).unwrap();
    }

    fn fp_at(t: &Table, i: usize) -> u64 {
        t.shards[0].array().slot(i).fp.load(Ordering::Relaxed)
    }

    /// `from` and the first key after it that shares its home on the one shard's current
    /// slots, and that home.
    fn same_home(t: &Table, from: u64) -> (u64, u64, usize) {
        let array = t.shards[0].array();
        let home = |k: u64| array.home(fingerprint(k));
        let b = (from + 1..).find(|&b| home(b) == home(from)).unwrap();
        (from, b, home(from))
    }

    #[test]
    fn a_miss_is_taken_over_only_while_no_fingerprint_changed() {
        let t = table(100, FullPolicy::RefuseNewKeys);
        put(&t, 10, 1_000, 0).unwrap();
        let (a, b, home) = same_home(&t, 20);
        // Fresh: the locked path takes the miss over as it is. Shown by a miss that names
        // another `EMPTY` slot than the run's own: the key goes there (and is lost to its
        // probes; this table is dropped).
        let mut miss = miss_of(&t, a).expect("the run ends at an EMPTY slot");
        assert_eq!(miss.empty, home);
        let elsewhere = (0..t.shards[0].array().len())
            .find(|&i| i != home && fp_at(&t, i) == EMPTY)
            .unwrap();
        miss.empty = elsewhere;
        insert_with(&t, a, 2_000, Some(miss));
        assert_eq!(fp_at(&t, elsewhere), fingerprint(a));

        // Stale: A's miss ends at its home, then B (same home) takes that slot; A's locked
        // path must probe again rather than write over B.
        let t = table(100, FullPolicy::RefuseNewKeys);
        put(&t, 10, 1_000, 0).unwrap();
        let miss = miss_of(&t, a);
        assert_eq!(miss.map(|m| m.empty), Some(home));
        put(&t, b, 3_000, 0).unwrap();
        insert_with(&t, a, 2_000, miss);
        assert_eq!((get(&t, a), get(&t, b)), (2_000, 3_000));
        assert_eq!(t.counts().keys_held, 3);
    }

    #[test]
    fn a_miss_on_a_view_older_than_a_growth_is_not_taken_over() {
        // Located before a growth, probed after it: the count read before the probe is the
        // growth's own, so only the length tells that the miss is on the old layout (as in
        // a batch, which locates keys ahead of their checks).
        let t = table(1_000, FullPolicy::RefuseNewKeys);
        let spot = t.locate(7, fingerprint(7));
        let len = t.shards[0].array().len();
        let mut k = 100;
        while t.shards[0].array().len() == len {
            put(&t, k, 1_000, 0).unwrap();
            k += 1;
        }
        let miss = Table::try_update_recording(spot, fingerprint(7), |_| (Some(1), ()))
            .unwrap_err()
            .expect("the old view's run ends at an EMPTY slot");
        assert_eq!(
            t.shards[0].changes(),
            miss.changes,
            "the probe read the count after the growth"
        );
        insert_with(&t, 7, 2_000, Some(miss));
        assert_eq!(get(&t, 7), 2_000);
        for held in 100..k {
            assert_eq!(get(&t, held), 1_000, "key {held}");
        }
        assert_eq!(t.counts().keys_held, (k - 100) as usize + 1);
    }

    #[test]
    fn a_miss_is_not_taken_over_past_a_tombstone() {
        // A tombstone on the run is where the locked probe puts a new key, ahead of the
        // `EMPTY` slot the lock-free probe ends at.
        let t = table(100, FullPolicy::RefuseNewKeys);
        put(&t, 10, 1_000, 0).unwrap();
        let (a, b, home) = same_home(&t, 20);
        put(&t, a, 2_000, 0).unwrap();
        assert_eq!(fp_at(&t, home), fingerprint(a));
        assert!(t.remove(a, fingerprint(a), 0));
        let miss = miss_of(&t, b).expect("the run ends at an EMPTY slot");
        assert_ne!(miss.empty, home);
        insert_with(&t, b, 3_000, Some(miss));
        assert_eq!(fp_at(&t, home), fingerprint(b));
        assert_eq!(get(&t, b), 3_000);
    }
}
