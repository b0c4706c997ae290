//! [`RandomState`]: the randomly seeded hash that gives every key its identity.

use std::hash::{BuildHasher, Hasher};

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
/// [`LimiterBuilder::router`](crate::LimiterBuilder::router) only chooses the shard a key lives in.
///
/// # Examples
///
/// ```
/// use std::collections::HashMap;
/// use tollgate::hash::RandomState;
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
    /// use tollgate::hash::RandomState;
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
/// use tollgate::hash::{DefaultHasher, RandomState};
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
