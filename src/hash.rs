//! [`RandomState`]: the randomly seeded hash that gives every key its identity.

use std::hash::{BuildHasher, Hasher};

/// Spreads a 64-bit hash so that its top bits (which pick the shard) and its product with a
/// constant (which picks the home slot) depend on every input bit. A bijection: distinct
/// hashes stay distinct, so fingerprint collisions stay at 2^-64 per pair.
///
/// Why: a fast hash of a small integer can be nearly linear in it. foldhash's is one folded
/// multiply by a per-process seed, and for about one process in 200 that seed sends 6 of the
/// keys 0..10 to one of 64 shards (uniform odds: 2e-7); in one process in 1,000, 1,024
/// sequential keys load a shard with 13x its share, so a capped table evicts live keys while
/// other shards sit empty. Sequential keys are common (user ids, the addresses of a subnet),
/// and so are identity hashers for integer routers. One xor-shift-multiply-xor-shift costs
/// about a nanosecond and leaves every shard within the spread of a uniform hash.
#[inline]
pub(crate) fn spread(hash: u64) -> u64 {
    let h = (hash ^ (hash >> 32)).wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^ (h >> 32)
}

#[cfg(all(feature = "foldhash", not(tollgate_loom)))]
type InnerState = foldhash::fast::RandomState;
#[cfg(all(feature = "foldhash", not(tollgate_loom)))]
type InnerHasher = foldhash::fast::FoldHasher<'static>;
#[cfg(all(not(feature = "foldhash"), not(tollgate_loom)))]
type InnerState = std::hash::RandomState;
#[cfg(all(not(feature = "foldhash"), not(tollgate_loom)))]
type InnerHasher = std::hash::DefaultHasher;
// Loom replays each model many times and needs every run to take the same branches, so the
// models hash with a fixed (unseeded) SipHash.
#[cfg(tollgate_loom)]
type InnerState = std::hash::BuildHasherDefault<std::hash::DefaultHasher>;
#[cfg(tollgate_loom)]
type InnerHasher = std::hash::DefaultHasher;

/// tollgate's default hasher: randomly seeded per instance, so nobody outside the process can
/// forge two keys that collide.
///
/// With the default `foldhash` feature it is a seeded [foldhash](https://docs.rs/foldhash)
/// (a few nanoseconds per short key); without it, std's SipHash-1-3 `RandomState`.
///
/// Every limiter derives each key's *identity* (its 64-bit fingerprint) from its own
/// `RandomState`. Two keys share a limit only if their fingerprints collide, which has
/// probability 2^-64 per pair and cannot be provoked from outside. A hasher given to
/// [`Builder::hasher`](crate::Builder::hasher) only chooses the shard a key lives in.
///
/// # Examples
///
/// ```
/// use std::collections::HashMap;
/// use tollgate::RandomState;
///
/// let mut map: HashMap<&str, u32, RandomState> = HashMap::with_hasher(RandomState::new());
/// map.insert("a", 1);
/// assert_eq!(map.get("a"), Some(&1));
/// ```
#[derive(Clone, Debug, Default)]
pub struct RandomState(InnerState);

impl RandomState {
    /// A new, randomly seeded state.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::hash::BuildHasher;
    /// use tollgate::RandomState;
    ///
    /// let s = RandomState::new();
    /// assert_eq!(s.hash_one("key"), s.hash_one("key"));
    /// assert_eq!(s.clone().hash_one("key"), s.hash_one("key")); // clones keep the seed
    /// assert_ne!(RandomState::new().hash_one("key"), s.hash_one("key")); // new seed
    /// ```
    pub fn new() -> RandomState {
        RandomState::default()
    }
}

impl BuildHasher for RandomState {
    type Hasher = DefaultHasher;

    #[inline]
    fn build_hasher(&self) -> DefaultHasher {
        DefaultHasher(self.0.build_hasher())
    }
}

/// The [`Hasher`] of [`RandomState`].
///
/// # Examples
///
/// ```
/// use std::hash::{BuildHasher, Hasher};
/// use tollgate::{DefaultHasher, RandomState};
///
/// let state = RandomState::new();
/// let mut hasher: DefaultHasher = state.build_hasher();
/// hasher.write_u64(7);
/// assert_eq!(hasher.finish(), state.hash_one(7u64));
/// ```
#[derive(Clone)]
pub struct DefaultHasher(InnerHasher);

impl std::fmt::Debug for DefaultHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefaultHasher").finish_non_exhaustive()
    }
}

impl Hasher for DefaultHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0.finish()
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes)
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.0.write_u8(i)
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.0.write_u16(i)
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.0.write_u32(i)
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0.write_u64(i)
    }
    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.0.write_u128(i)
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.0.write_usize(i)
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::spread;

    /// The top six bits of `hash`: its shard of 64.
    fn shard(hash: u64) -> u64 {
        hash >> 58
    }

    fn most_in_one_shard(hashes: impl Iterator<Item = u64>) -> usize {
        let mut counts = [0usize; 64];
        for h in hashes {
            counts[shard(h) as usize] += 1;
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
    fn sequential_keys_under_an_unlucky_seed_still_spread_over_shards() {
        // A seed just above 2^63: a step of one in the key moves the product's low word by
        // half a turn and its high word by almost nothing, so the folded hash's top six bits
        // take about two values and the keys pile into two shards.
        let (acc, seed) = (0x0123_4567_89AB_CDEF, (1 << 63) + 0x3_1415_9265);
        let raw = most_in_one_shard((0..1_024).map(|k| folded(k, acc, seed)));
        assert!(
            raw >= 64,
            "the unlucky seed clusters: {raw} keys in one shard"
        );
        // Spread, the 1,024 keys land as a uniform hash's would: 16 a shard on average, and
        // at most about twice that in the fullest.
        let spread_max = most_in_one_shard((0..1_024).map(|k| spread(folded(k, acc, seed))));
        assert!(spread_max <= 32, "{spread_max} keys in one shard");
        // Ten keys never crowd a shard of eight slots.
        let ten = most_in_one_shard((0..10).map(|k| spread(folded(k, acc, seed))));
        assert!(ten <= 3, "{ten} of ten keys in one shard");
    }

    #[test]
    fn spread_is_a_bijection_on_samples() {
        // xor-shift and multiplication by an odd constant are both invertible; check that a
        // run of inputs gives distinct outputs.
        let mut out: Vec<u64> = (0..100_000u64).map(spread).collect();
        out.sort_unstable();
        out.dedup();
        assert_eq!(out.len(), 100_000);
    }
}
