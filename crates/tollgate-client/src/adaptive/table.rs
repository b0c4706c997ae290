//! The bounded per-key store of an adaptive rate: a few shards, each a mutex around an
//! [`Lru`] from the key's 64-bit hash to its [`KeyRate`].
//!
//! Design: a key's state is read and written only under its shard's lock, for a few
//! arithmetic steps (never across an await). Memory is bounded by the capacity: each shard
//! holds at most `ceil(capacity / shards)` keys, and a new key in a full shard evicts the
//! shard's least recently used key. An evicted key that comes back starts over at the
//! initial rate.

use std::sync::{Mutex, MutexGuard};

use super::config::AdaptiveConfig;
use super::state::KeyRate;
use crate::lru::{Lru, lock};

const SHARDS: usize = 16;

#[derive(Debug)]
pub(crate) struct Table {
    shards: Box<[Mutex<Lru<u64, KeyRate>>]>,
    per_shard: usize,
}

impl Table {
    pub(crate) fn new(capacity: usize) -> Table {
        let shards = SHARDS.min(capacity);
        let per_shard = capacity.div_ceil(shards);
        Table {
            shards: (0..shards)
                .map(|_| Mutex::new(Lru::new(per_shard)))
                .collect(),
            per_shard,
        }
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, Lru<u64, KeyRate>> {
        // The high bits: the map hashes the low ones again.
        lock(&self.shards[((hash >> 40) as usize) % self.shards.len()])
    }

    /// Runs `f` on the key's state, inserting a fresh one (and evicting the least recently
    /// used key of a full shard) if it has none.
    pub(crate) fn with<R>(
        &self,
        hash: u64,
        config: &AdaptiveConfig,
        f: impl FnOnce(&mut KeyRate) -> R,
    ) -> R {
        self.shard(hash).with(&hash, || KeyRate::new(config), f)
    }

    /// A copy of the key's state, if it has one (not counted as a use).
    pub(crate) fn get(&self, hash: u64) -> Option<KeyRate> {
        self.shard(hash).get(&hash).cloned()
    }

    pub(crate) fn remove(&self, hash: u64) -> bool {
        self.shard(hash).remove(&hash)
    }

    /// Keys held.
    pub(crate) fn keys(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.per_shard * self.shards.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_at_most_the_capacity_per_shard() {
        let config = AdaptiveConfig::new(1.0);
        let t = Table::new(1);
        t.with(1, &config, |k| k.snap.rate = 5.0);
        t.with(2, &config, |_| ());
        assert!(t.get(1).is_none());
        assert_eq!(t.keys(), 1);
        assert_eq!(t.capacity(), 1);
        let t = Table::new(20); // 16 shards of 2
        assert_eq!(t.capacity(), 32);
        for hash in 0..100u64 {
            t.with(hash << 40, &config, |_| ()); // shard `hash % 16`
        }
        assert_eq!(t.keys(), 32);
    }
}
