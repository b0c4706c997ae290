//! [`Lru`]: a map bounded to a capacity, the least recently used key evicted. The store
//! under each shard of the adaptive rates (`adaptive/table.rs`) and under the layer's
//! per-host counters (`hosts.rs`).
//!
//! Not synchronised: each user holds it under a mutex, for a few arithmetic steps (never
//! across an await). Recency is a tick per map, bumped by every [`with`](Lru::with); a new
//! key in a full map evicts the key with the oldest tick, found by a scan: O(len), paid
//! only on an insert into a full map (these maps track hosts, not packets).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

#[derive(Debug)]
pub(crate) struct Lru<K, V> {
    /// Each key's value and the tick of its last use.
    map: HashMap<K, (V, u64)>,
    tick: u64,
    capacity: usize,
}

impl<K: Hash + Eq, V> Lru<K, V> {
    /// An empty map that holds at most `capacity` keys.
    pub(crate) fn new(capacity: usize) -> Lru<K, V> {
        Lru {
            map: HashMap::new(),
            tick: 0,
            capacity,
        }
    }

    /// Runs `f` on `key`'s value, a use of the key. A key not held gets `new()`, evicting the
    /// least recently used key first if the map is full; the key is copied only then.
    pub(crate) fn with<Q, R>(
        &mut self,
        key: &Q,
        new: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> R
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.tick += 1;
        let tick = self.tick;
        if !self.map.contains_key(key) && self.map.len() >= self.capacity {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.map.remove::<K>(&oldest);
            }
        }
        let entry = match self.map.get_mut(key) {
            Some(e) => e,
            None => self
                .map
                .entry(key.to_owned())
                .or_insert_with(|| (new(), tick)),
        };
        entry.1 = tick;
        f(&mut entry.0)
    }

    /// `key`'s value, if held (not a use).
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(key).map(|(v, _)| v)
    }

    /// Drops `key`'s value; whether it had one.
    pub(crate) fn remove<Q>(&mut self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.remove(key).is_some()
    }

    /// Keys held.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Every key and its value, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter().map(|(k, (v, _))| (k, v))
    }
}

/// Locks a map's mutex, poisoned or not: the users' critical sections only copy and add
/// plain numbers, so a panic in one leaves no value half-written that matters.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_least_recently_used_out() {
        let mut m = Lru::<String, u32>::new(2);
        m.with("a", || 0, |n| *n += 1);
        m.with("b", || 0, |n| *n += 1);
        m.with("a", || 0, |n| *n += 1);
        assert_eq!(m.get("b"), Some(&1)); // a look is not a use
        m.with("c", || 0, |n| *n += 1); // evicts b
        assert_eq!(m.get("b"), None);
        assert_eq!(m.get("a"), Some(&2));
        assert_eq!(m.len(), 2);
        assert!(m.remove("a"));
        assert!(!m.remove("a"));
        assert_eq!(m.iter().count(), 1);
    }
}
