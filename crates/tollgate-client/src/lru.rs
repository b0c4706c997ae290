//! [`Lru`]: a map bounded to a capacity, the least recently used key evicted. The store
//! under each shard of the adaptive rates (`adaptive/table.rs`) and under the layer's
//! per-host counters (`hosts.rs`).
//!
//! Not synchronised: each user holds it under a mutex, for a few steps (never across an
//! await). Recency is a tick per map, bumped by every [`with`](Lru::with); the keys are
//! also ordered by their last tick, so a new key in a full map evicts the oldest in
//! O(log len). A scan for the oldest instead cost a crawler of many hosts O(len) under the
//! mutex for every new host once the map was full (10,000 entries a request by default).

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

#[derive(Debug)]
pub(crate) struct Lru<K, V> {
    /// Each key's value and the tick of its last use.
    map: HashMap<K, (V, u64)>,
    /// Each key by the tick of its last use: the least recently used first.
    order: BTreeMap<u64, K>,
    tick: u64,
    capacity: usize,
}

impl<K: Hash + Eq, V> Lru<K, V> {
    /// An empty map that holds at most `capacity` keys.
    pub(crate) fn new(capacity: usize) -> Lru<K, V> {
        Lru {
            map: HashMap::new(),
            order: BTreeMap::new(),
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
        if let Some(entry) = self.map.get_mut(key) {
            // The key moves to the newest place, without a copy.
            let held = self
                .order
                .remove(&entry.1)
                .expect("every held key is ordered");
            self.order.insert(tick, held);
            entry.1 = tick;
            return f(&mut entry.0);
        }
        if self.map.len() >= self.capacity
            && let Some((_, oldest)) = self.order.pop_first()
        {
            self.map.remove::<K>(&oldest);
        }
        // `new` first: if it panics, the map and its order still agree.
        let value = new();
        let owned = key.to_owned();
        self.order.insert(tick, owned.clone());
        let entry = self.map.entry(owned).or_insert((value, tick));
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
        match self.map.remove(key) {
            Some((_, tick)) => {
                self.order.remove(&tick);
                true
            }
            None => false,
        }
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
        assert_eq!(m.order.len(), 1);
    }

    #[test]
    fn the_order_follows_every_use_and_removal() {
        let mut m = Lru::<String, u32>::new(3);
        for k in ["a", "b", "c"] {
            m.with(k, || 0, |_| ());
        }
        m.with("a", || 0, |_| ()); // b is now the oldest
        assert!(m.remove("c"));
        m.with("d", || 0, |_| ()); // room: nothing evicted
        m.with("e", || 0, |_| ()); // evicts b
        let mut held: Vec<&String> = m.iter().map(|(k, _)| k).collect();
        held.sort();
        assert_eq!(held, ["a", "d", "e"]);
        assert_eq!(m.order.values().collect::<Vec<_>>(), ["a", "d", "e"]);
        // Many keys through a small map: each insert evicts exactly the oldest.
        let mut m = Lru::<String, u32>::new(100);
        for i in 0..10_000 {
            m.with(&format!("k{i}"), || i, |_| ());
            m.with("hot", || 0, |_| ()); // used every time: never evicted
            assert!(m.len() <= 100);
        }
        assert!(m.get("hot").is_some());
        assert_eq!(m.get("k9998"), Some(&9998));
        assert_eq!(m.get("k9900"), None);
        assert_eq!(m.order.len(), m.len());
        // A panicking `new` leaves the two in step.
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            m.with("boom", || panic!("no value"), |_| ())
        }));
        assert!(panicked.is_err());
        assert_eq!((m.get("boom"), m.order.len()), (None, m.len()));
    }
}
