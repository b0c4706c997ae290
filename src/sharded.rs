//! A few independently locked shards, picked by a hash's top bits, and maps keyed by a hash
//! that is already random: what the waitlists (`wait/waitlist.rs`) and `InFlight`'s busy
//! keys (`inflight/table.rs`) are built from. The rate table (`table/`) is not: its
//! known keys are reached without a lock.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crossbeam_utils::CachePadded;

/// `n` shards of `T`, each on cache lines of its own so that two shards' locks never share
/// one.
#[derive(Debug)]
pub(crate) struct Sharded<T> {
    shards: Box<[CachePadded<T>]>,
}

impl<T: Default> Sharded<T> {
    /// `n` default shards (at least one).
    pub(crate) fn new(n: usize) -> Sharded<T> {
        Sharded {
            shards: (0..n.max(1))
                .map(|_| CachePadded::new(T::default()))
                .collect(),
        }
    }
}

impl<T> Sharded<T> {
    /// The shard for `hash`, by its top bits (a multiply-high by the shard count: no
    /// division, and any count). A map inside the shard that indexes by the low bits of the
    /// same hash then sees every low-bit pattern.
    pub(crate) fn get(&self, hash: u64) -> &T {
        let i = ((u128::from(hash) * self.shards.len() as u128) >> 64) as usize;
        &self.shards[i]
    }

    /// The bytes of the shards themselves (not what they point to).
    pub(crate) fn shallow_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.shards)
    }

    /// Every shard, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.shards.iter().map(|shard| &**shard)
    }
}

/// A map whose keys are random 64-bit hashes (fingerprints), used as their own hash.
pub(crate) type HashKeyed<V> = HashMap<u64, V, BuildHasherDefault<IdentityHasher>>;

/// Hashes a `u64` key to itself: the keys of [`HashKeyed`] are already random, and hashing
/// them again would cost every lookup a hash for nothing.
#[derive(Debug, Default)]
pub(crate) struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    // Only `u64` keys reach it; this keeps the hasher total for any other.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_bits_pick_the_shard() {
        let sharded: Sharded<u8> = Sharded::new(4);
        let index = |hash| {
            let shard: *const u8 = sharded.get(hash);
            sharded.iter().position(|s| std::ptr::eq(s, shard)).unwrap()
        };
        assert_eq!(index(0), 0);
        assert_eq!(index(u64::MAX / 4), 0);
        assert_eq!(index(u64::MAX / 4 + 1), 1);
        assert_eq!(index(u64::MAX), 3);
        assert_eq!(Sharded::<u8>::new(0).iter().count(), 1);
    }

    #[test]
    fn keys_hash_to_themselves() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<IdentityHasher>::default();
        assert_eq!(
            build.hash_one(0x1234_5678_9abc_def0_u64),
            0x1234_5678_9abc_def0
        );
    }
}
