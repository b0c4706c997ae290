//! The bounded per-key store of an adaptive rate: a few shards, each a mutex around a map
//! from the key's 64-bit hash to its [`KeyRate`] and the tick of its last use.
//!
//! Design: a key's state is read and written only under its shard's lock, for a few
//! arithmetic steps (never across an await). Memory is bounded by the capacity: each shard
//! holds at most `ceil(capacity / shards)` keys, and a new key in a full shard evicts the
//! shard's least recently used key, found by a scan of the shard (O(shard size), paid only
//! on an insert into a full shard: an adaptive rate tracks hosts, not packets). An evicted
//! key that comes back starts over at the initial rate.

use std::collections::HashMap;

use super::config::AdaptiveConfig;
use super::state::KeyRate;
use crate::sync::{Mutex, lock};

const SHARDS: usize = 16;

#[derive(Debug)]
struct Shard {
    keys: HashMap<u64, (KeyRate, u64)>,
    tick: u64,
    evicted: u64,
}

#[derive(Debug)]
pub(crate) struct Table {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
}

impl Table {
    pub(crate) fn new(capacity: usize) -> Table {
        let shards = SHARDS.min(capacity);
        Table {
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        keys: HashMap::new(),
                        tick: 0,
                        evicted: 0,
                    })
                })
                .collect(),
            per_shard: capacity.div_ceil(shards),
        }
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        // The high bits: the map hashes the low ones again.
        &self.shards[((hash >> 40) as usize) % self.shards.len()]
    }

    /// Runs `f` on the key's state, inserting a fresh one (and evicting the least recently
    /// used key of a full shard) if it has none.
    pub(crate) fn with<R>(
        &self,
        hash: u64,
        config: &AdaptiveConfig,
        f: impl FnOnce(&mut KeyRate) -> R,
    ) -> R {
        let mut shard = lock(self.shard(hash));
        shard.tick += 1;
        let tick = shard.tick;
        if !shard.keys.contains_key(&hash) && shard.keys.len() >= self.per_shard {
            let oldest = shard
                .keys
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                shard.keys.remove(&oldest);
                shard.evicted += 1;
            }
        }
        let entry = shard
            .keys
            .entry(hash)
            .or_insert_with(|| (KeyRate::new(config), tick));
        entry.1 = tick;
        f(&mut entry.0)
    }

    /// A copy of the key's state, if it has one (not counted as a use).
    pub(crate) fn get(&self, hash: u64) -> Option<KeyRate> {
        lock(self.shard(hash))
            .keys
            .get(&hash)
            .map(|(k, _)| k.clone())
    }

    pub(crate) fn remove(&self, hash: u64) -> bool {
        lock(self.shard(hash)).keys.remove(&hash).is_some()
    }

    /// Keys held and keys evicted so far.
    pub(crate) fn counts(&self) -> (usize, u64) {
        self.shards.iter().fold((0, 0), |(n, e), s| {
            let s = lock(s);
            (n + s.keys.len(), e + s.evicted)
        })
    }

    pub(crate) fn capacity(&self) -> usize {
        self.per_shard * self.shards.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used() {
        let config = AdaptiveConfig::new(1.0);
        let t = Table::new(1);
        t.with(1, &config, |k| k.snap.rate = 5.0);
        t.with(2, &config, |_| ());
        assert!(t.get(1).is_none());
        assert_eq!(t.counts(), (1, 1));
        assert_eq!(t.capacity(), 1);
    }
}
