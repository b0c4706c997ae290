//! The local fast path: a bounded map from a key to a lower bound on its TAT on the server.
//!
//! # Why it never refuses what Redis would admit
//!
//! An entry is written only from a server answer, and holds the key's TAT as the server
//! stored it, on the server's clock (µs). The server's TAT for a key only moves later
//! (every write of a check, a penalty, a reservation or a lease is a `max`), except by
//! `reset` (which also clears this node's entry), a refunded reservation or a lease's
//! give-back (likewise), and expiry,
//! which happens only once the TAT is in the past and so carries no information. A
//! `reset` or a refund on *another* node moves the TAT earlier behind this node's back:
//! until the entry's TAT passes, this node may then refuse what Redis would admit (the
//! crate docs say so). A per-call quota changes nothing: the TAT is the same whatever the
//! quota, and the admission instant is computed under the call's own quota, as the script
//! computes it.
//!
//! A lookup at local `now` compares the GCRA admission instant (from the entry, under the
//! call's quota) with an *upper* bound on the server's clock at `now` (`offset.rs`). The
//! server's instant, from the real TAT, is at least as late, and the server, reading `TIME`
//! at `now`, reads at most that bound; so a request refused here at `now` would also be
//! refused by a server reading `TIME` at `now`. Because the bound is tight (within the
//! fastest request seen), a node's probe reaches the server at or after the key's instant,
//! and an abusive key costs one round trip per interval, not one plus the refusals of
//! probes that arrived a jitter too early.
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

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use crate::sharded::ShardedMap;

/// A held key: its TAT's lower bound, and the probe in flight, if any.
#[derive(Debug)]
struct Entry {
    /// The key's TAT on the server's clock, µs.
    tat_us: u64,
    probe: Option<Arc<Notify>>,
}

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
        if let Some(entry) = self.cache.map.lock(&self.key).get_mut(&self.key)
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
    /// A key's full Redis name to its entry.
    map: ShardedMap<Entry>,
}

impl LocalCache {
    pub(crate) fn new(capacity: usize) -> LocalCache {
        LocalCache {
            map: ShardedMap::new(capacity),
        }
    }

    /// What to do with a request of `n` cells under `(interval_us, burst)` when the server's
    /// clock reads at most `now` (ns).
    pub(crate) fn lookup(
        &self,
        key: &[u8],
        now: i128,
        n: u32,
        interval_us: u64,
        burst: u32,
    ) -> Lookup<'_> {
        let mut shard = self.map.lock(key);
        let Some(entry) = shard.get_mut(key) else {
            return Lookup::Miss;
        };
        if let Some(wait) = refusal(entry.tat_us, now, n, interval_us, burst) {
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

    /// How long the key's bound says a request must still wait (no probe: for waits, which
    /// reserve on the server whatever the cache says).
    pub(crate) fn wait(
        &self,
        key: &[u8],
        now: i128,
        n: u32,
        interval_us: u64,
        burst: u32,
    ) -> Option<Duration> {
        let shard = self.map.lock(key);
        refusal(shard.get(key)?.tat_us, now, n, interval_us, burst)
    }

    /// Raises the key's bound to `tat_us` (keeps a later one); `now` is the server's clock
    /// in ns, to find entries that have passed.
    pub(crate) fn raise(&self, key: &[u8], tat_us: u64, now: i128) {
        let mut shard = self.map.lock(key);
        if let Some(old) = shard.get_mut(key) {
            old.tat_us = old.tat_us.max(tat_us);
            return;
        }
        let entry = Entry {
            tat_us,
            probe: None,
        };
        // A full shard forgets the entries whose bound has passed, but keeps those with a
        // probe in flight: their probe will settle them. Dropping one costs a round trip.
        let keep = |e: &Entry| i128::from(e.tat_us) * 1_000 > now || e.probe.is_some();
        self.map
            .insert_bounded(&mut shard, key, entry, keep, |_| {});
    }

    pub(crate) fn remove(&self, key: &[u8]) {
        self.map.lock(key).remove(key);
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// How long a request of `n` cells under `(interval_us, burst)` must still wait when the
/// server's clock reads `now` (ns), given the TAT `tat_us`, if it would be refused.
fn refusal(tat_us: u64, now: i128, n: u32, interval_us: u64, burst: u32) -> Option<Duration> {
    // admit_at = max(tat, now) + (n-1)·T - tau; in ns from now, signed.
    let ahead = (i128::from(tat_us) * 1_000 - now).max(0);
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
        let now: i128 = 1_000_000_000;
        let ms = Duration::from_millis;
        c.raise(b"k", 1_300_000, now);
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
            c.lookup(b"k", now + 300_000_000, 1, 100_000, 1),
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
        let now: i128 = 1_000_000_000;
        c.raise(b"k", 1_000_000, now);
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
        let now: i128 = 1_000_000_000;
        for i in 0..10_000u32 {
            c.raise(&i.to_le_bytes(), 61_000_000, now);
        }
        assert!(c.len() <= 32, "{}", c.len());
    }
}
