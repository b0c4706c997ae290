//! A bounded map from a key's full Redis name to a value, split into shards, each behind a
//! mutex of its own: the fast path's cache (`cache.rs`) and the lease store (`lease.rs`) are
//! both one, and differ only in what they keep and what dropping an entry costs.
//!
//! Tasks checking different keys mostly take different locks. A shard's lock is held for a
//! few map operations and never across an `.await`, so a plain `std` mutex serves; a
//! poisoned lock is taken over, not passed on as a panic.
//!
//! Each shard holds at most `ceil(capacity / SHARDS)` entries. A new key in a full shard first
//! drops the entries its owner no longer needs, then, if the shard is still full, any one
//! entry; the owner is told of each value dropped (the lease store counts its cells lost).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, MutexGuard};

const SHARDS: usize = 16;

/// One shard: a key's full Redis name to its value.
pub(crate) type Shard<V> = HashMap<Box<[u8]>, V>;

#[derive(Debug)]
pub(crate) struct ShardedMap<V> {
    shards: Box<[Mutex<Shard<V>>]>,
    per_shard: usize,
    hasher: RandomState,
}

impl<V> ShardedMap<V> {
    /// A map of about `capacity` entries at most (at least one per shard).
    pub(crate) fn new(capacity: usize) -> ShardedMap<V> {
        ShardedMap {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            hasher: RandomState::new(),
        }
    }

    /// `key`'s shard, locked.
    pub(crate) fn lock(&self, key: &[u8]) -> MutexGuard<'_, Shard<V>> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Inserts `key`, which `shard` (its locked shard) does not hold. A full shard first
    /// drops the entries `keep` refuses, then any one; `dropped` sees each value dropped.
    pub(crate) fn insert_bounded(
        &self,
        shard: &mut Shard<V>,
        key: &[u8],
        value: V,
        mut keep: impl FnMut(&V) -> bool,
        mut dropped: impl FnMut(&V),
    ) {
        if shard.len() >= self.per_shard {
            shard.retain(|_, v| {
                let kept = keep(v);
                if !kept {
                    dropped(v);
                }
                kept
            });
            if shard.len() >= self.per_shard
                && let Some(victim) = shard.keys().next().cloned()
                && let Some(v) = shard.remove(&victim)
            {
                dropped(&v);
            }
        }
        shard.insert(key.into(), value);
    }

    /// Entries held now, over all shards.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    /// Takes every entry out.
    pub(crate) fn drain(&self) -> Vec<(Box<[u8]>, V)> {
        let mut all = Vec::new();
        for s in self.shards.iter() {
            all.extend(s.lock().unwrap_or_else(|e| e.into_inner()).drain());
        }
        all
    }
}
