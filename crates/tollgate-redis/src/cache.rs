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
//!
//! # Single flight for the keys it holds
//!
//! When a held key's bound passes, every task of the node checking it would go to Redis at
//! once, and all but one would be refused there. So the first becomes the key's *probe*
//! ([`Lookup::Probe`]) and the others wait for its answer ([`Lookup::Wait`]), then look again: refused here if the answer raised the bound, the
//! next probe if it did not; after the call's timeout in all, a waiter asks Redis anyway. Only keys in the map (refused or exhausted lately) are serialised;
//! an admission with cells to spare removes the key. A probe dropped before its answer
//! (cancelled) clears the flag and wakes the waiters.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

const SHARDS: usize = 16;

/// A held key: its TAT's lower bound, and the probe in flight, if any.
#[derive(Debug)]
struct Entry {
    tat: Instant,
    probe: Option<Arc<Notify>>,
}

/// One shard: a key's full Redis name to its entry.
type Shard = HashMap<Box<[u8]>, Entry>;

/// What the cache says of a request.
#[derive(Debug)]
pub(crate) enum Lookup<'a> {
    /// Not held: ask Redis.
    Miss,
    /// Refused: Redis would refuse it too, for at least this long.
    Refuse(Duration),
    /// Held, and its bound admits the request: ask Redis, as the key's one probe.
    Probe(ProbeGuard<'a>),
    /// Held, and another task's probe is in flight: wait for it, then look again.
    Wait(OwnedNotified),
}

/// The key's probe flag, cleared (and the waiters woken) on drop.
#[derive(Debug)]
pub(crate) struct ProbeGuard<'a> {
    cache: &'a LocalCache,
    key: Box<[u8]>,
    notify: Arc<Notify>,
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if let Some(entry) = self.cache.shard(&self.key).get_mut(&self.key)
            && entry
                .probe
                .as_ref()
                .is_some_and(|p| Arc::ptr_eq(p, &self.notify))
        {
            entry.probe = None;
        }
        self.notify.notify_waiters();
    }
}

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

    /// What to do with a request of `n` cells under `(interval_us, burst)` at `now`.
    pub(crate) fn lookup(
        &self,
        key: &[u8],
        now: Instant,
        n: u32,
        interval_us: u64,
        burst: u32,
    ) -> Lookup<'_> {
        let mut shard = self.shard(key);
        let Some(entry) = shard.get_mut(key) else {
            return Lookup::Miss;
        };
        if let Some(wait) = refusal(entry.tat, now, n, interval_us, burst) {
            return Lookup::Refuse(wait);
        }
        match &entry.probe {
            Some(probe) => Lookup::Wait(Arc::clone(probe).notified_owned()),
            None => {
                let notify = Arc::new(Notify::new());
                entry.probe = Some(Arc::clone(&notify));
                Lookup::Probe(ProbeGuard {
                    cache: self,
                    key: key.into(),
                    notify,
                })
            }
        }
    }

    /// Raises the key's bound to `tat` (keeps a later one).
    pub(crate) fn raise(&self, key: &[u8], tat: Instant, now: Instant) {
        let mut shard = self.shard(key);
        if let Some(old) = shard.get_mut(key) {
            old.tat = old.tat.max(tat);
            return;
        }
        if shard.len() >= self.per_shard {
            // Keep entries with a probe in flight: their probe will settle them.
            shard.retain(|_, e| e.tat > now || e.probe.is_some());
            if shard.len() >= self.per_shard {
                let victim = shard.keys().next().cloned();
                if let Some(victim) = victim {
                    shard.remove(&victim);
                }
            }
        }
        shard.insert(key.into(), Entry { tat, probe: None });
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

/// How long a request of `n` cells under `(interval_us, burst)` must still wait at `now`
/// given the bound `tat`, if it would be refused.
fn refusal(tat: Instant, now: Instant, n: u32, interval_us: u64, burst: u32) -> Option<Duration> {
    // admit_at = max(tat, now) + (n-1)·T - tau; in ns from now, signed.
    let ahead = tat.saturating_duration_since(now).as_nanos() as i128;
    let t = i128::from(interval_us) * 1_000;
    let wait = ahead + (i128::from(n) - 1) * t - (i128::from(burst) - 1) * t;
    (wait > 0).then(|| Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(l: Lookup<'_>) -> Option<Duration> {
        match l {
            Lookup::Refuse(d) => Some(d),
            _ => None,
        }
    }

    #[test]
    fn refuses_only_before_the_bound_under_the_calls_quota() {
        let c = LocalCache::new(4);
        let now = Instant::now();
        let ms = Duration::from_millis;
        c.raise(b"k", now + ms(300), now);
        // Burst 1, 100 ms: refused for 300 ms.
        assert_eq!(refused(c.lookup(b"k", now, 1, 100_000, 1)), Some(ms(300)));
        // Burst 3 (tau = 200 ms): refused for 100 ms only.
        assert_eq!(refused(c.lookup(b"k", now, 1, 100_000, 3)), Some(ms(100)));
        // Two cells under burst 4: 100 ms.
        assert_eq!(refused(c.lookup(b"k", now, 2, 100_000, 4)), Some(ms(100)));
        // Burst 4 (tau = 300 ms): admissible; this caller probes, the next one waits.
        let probe = c.lookup(b"k", now, 1, 100_000, 4);
        assert!(matches!(probe, Lookup::Probe(_)));
        assert!(matches!(
            c.lookup(b"k", now, 1, 100_000, 4),
            Lookup::Wait(_)
        ));
        // Refusals are still answered while a probe is in flight.
        assert!(refused(c.lookup(b"k", now, 1, 100_000, 1)).is_some());
        drop(probe);
        assert!(matches!(
            c.lookup(b"k", now, 1, 100_000, 4),
            Lookup::Probe(_)
        ));
        // Past the bound, a probe again; unknown keys are misses.
        assert!(matches!(
            c.lookup(b"k", now + ms(300), 1, 100_000, 1),
            Lookup::Probe(_)
        ));
        assert!(matches!(
            c.lookup(b"other", now, 1, 100_000, 1),
            Lookup::Miss
        ));
        c.remove(b"k");
        assert_eq!(c.len(), 0);
    }

    #[tokio::test]
    async fn a_dropped_probe_wakes_its_waiters() {
        let c = LocalCache::new(4);
        let now = Instant::now();
        c.raise(b"k", now, now);
        let probe = c.lookup(b"k", now, 1, 1_000, 1);
        let Lookup::Wait(waiting) = c.lookup(b"k", now, 1, 1_000, 1) else {
            panic!("no wait")
        };
        drop(probe);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken");
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
