//! The local fast path: a bounded map from a key to a lower bound on its TAT on the server.
//!
//! # Why it never refuses what Redis would admit
//!
//! An entry is written only from a server answer: the server said its TAT for the key was
//! `tat_ahead` past its `now`. The entry is `sent + tat_ahead`, where `sent` is this node's
//! clock read *before* the request left, so `sent <= now` (the server read `TIME` after the
//! request arrived) and the entry is at or before the server's TAT, on this node's clock.
//! The server's TAT for a key only moves later (every write is a `max`), except by `reset`
//! (which also clears this node's entry; see the crate docs for a reset on another node)
//! and by expiry, which happens only once the TAT is in the past and so carries no
//! information. A local refusal computes the GCRA admission instant from the lower bound,
//! under the call's quota; the server's instant, from the real TAT, is at least as late. So
//! a request the cache refuses at `t` would also be refused by a server reading `TIME` at `t`.
//!
//! Dropping an entry costs one round trip, never a wrong answer, so the map is simply
//! bounded: a full shard first forgets the entries whose bound has passed, then any entry.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SHARDS: usize = 16;

/// One shard: a key's full Redis name to its TAT's lower bound.
type Shard = HashMap<Box<[u8]>, Instant>;

#[derive(Debug)]
pub(crate) struct LocalCache {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    hasher: RandomState,
}

impl LocalCache {
    pub(crate) fn new(capacity: usize) -> LocalCache {
        LocalCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, key: &[u8]) -> std::sync::MutexGuard<'_, Shard> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long a request of `n` cells under `(interval, tau)` (µs) must still wait, if the
    /// key's bound says it would be refused at `now`.
    pub(crate) fn refusal(
        &self,
        key: &[u8],
        now: Instant,
        n: u32,
        interval_us: u64,
        burst: u32,
    ) -> Option<Duration> {
        let tat = {
            let mut shard = self.shard(key);
            let tat = *shard.get(key)?;
            if tat <= now {
                shard.remove(key);
                return None;
            }
            tat
        };
        // admit_at = max(tat, now) + (n-1)·T - tau, with tat > now; in ns, signed.
        let ahead = (tat - now).as_nanos() as i128;
        let t = i128::from(interval_us) * 1_000;
        let wait = ahead + (i128::from(n) - 1) * t - (i128::from(burst) - 1) * t;
        (wait > 0).then(|| Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX)))
    }

    /// Raises the key's bound to `tat` (keeps a later one).
    pub(crate) fn raise(&self, key: &[u8], tat: Instant, now: Instant) {
        let mut shard = self.shard(key);
        if let Some(old) = shard.get_mut(key) {
            *old = (*old).max(tat);
            return;
        }
        if shard.len() >= self.per_shard {
            shard.retain(|_, t| *t > now);
            if shard.len() >= self.per_shard {
                let victim = shard.keys().next().cloned();
                if let Some(victim) = victim {
                    shard.remove(&victim);
                }
            }
        }
        shard.insert(key.into(), tat);
    }

    pub(crate) fn remove(&self, key: &[u8]) {
        self.shard(key).remove(key);
    }

    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_only_before_the_bound_under_the_calls_quota() {
        let c = LocalCache::new(4);
        let now = Instant::now();
        c.raise(b"k", now + Duration::from_millis(300), now);
        // Burst 1, 100 ms: refused for 300 ms.
        assert_eq!(
            c.refusal(b"k", now, 1, 100_000, 1),
            Some(Duration::from_millis(300))
        );
        // Burst 3 (tau = 200 ms): refused for 100 ms only.
        assert_eq!(
            c.refusal(b"k", now, 1, 100_000, 3),
            Some(Duration::from_millis(100))
        );
        // Burst 4 (tau = 300 ms): admissible, ask the server.
        assert_eq!(c.refusal(b"k", now, 1, 100_000, 4), None);
        // Two cells under burst 4: 100 ms.
        assert_eq!(
            c.refusal(b"k", now, 2, 100_000, 4),
            Some(Duration::from_millis(100))
        );
        // Past the bound the entry goes.
        assert_eq!(
            c.refusal(b"k", now + Duration::from_millis(300), 1, 100_000, 1),
            None
        );
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn stays_bounded() {
        let c = LocalCache::new(32);
        let now = Instant::now();
        for i in 0..10_000u32 {
            c.raise(&i.to_le_bytes(), now + Duration::from_secs(60), now);
        }
        assert!(c.len() <= 32, "{}", c.len());
    }
}
