//! Leases for hot keys: cells a node takes from Redis in one round trip and spends locally.
//!
//! # What a lease is
//!
//! The script's `lease` grants up to `k` cells of a key that are available *now* (never a
//! wait): it moves the key's TAT by `g·T` exactly as `g` checks at that instant would, and
//! answers `g`. From then on every node sees the cells as taken. The node keeps them here
//! and spends them without a round trip until `sent + max_hold`, where `sent` is when it sent
//! the lease request (so on any clock the spending ends at most `max_hold` after the
//! server's instant, which lies between sending and receiving).
//!
//! # The bound it buys
//!
//! Every cell spent was admitted by the server at its lease's instant `t` and is spent in
//! `[t, t + L]` (`L` = `max_hold`). The lease instants obey the quota (`b + floor(V/T)` over
//! any window `V`), so the cells *spent* in any window `W` were leased in a window of
//! `W + L`, and there are at most
//!
//! ```text
//!   b + floor((W + L) / T)      per key, fleet-wide, however many nodes lease
//! ```
//!
//! Counted the other way: the cells spent in `[x, x + W]` are those leased inside it (at
//! most `b + floor(W / T)`, the quota's own bound, as admissions) plus those leased before
//! `x` and still held at `x`; so also at most `b + floor(W / T) + H(x)`, where `H(x)` is the
//! leased cells the nodes hold unspent at `x`. A lease spends its first cells at once (the
//! check that took it), so a node holds at most `k - 1` cells of a key, unless several of its
//! tasks took leases of the key at the same moment (they merge, below). Both bounds hold;
//! the smaller applies. The first is what the hold alone permits and needs `W + L` worth of
//! cells held back, which takes many nodes holding cells across `L`; the second is the
//! common case (`N` nodes: at most `N·(k - 1)` beyond the quota's bound), and
//! `the_hold_term_is_real` (tests/lease.rs) shows the excess happen: 9 cells in under a
//! millisecond under a burst of 5.
//!
//! # Unspent cells: given back or lost
//!
//! Cells not spent by their expiry are given back on the server with the same compare and
//! restore as a cancelled wait's refund: only if the key still holds exactly the TAT the
//! lease stored (no one has written after it), the TAT moves back by the unspent cells' time.
//! The give-back rides on the key's next lease from this node (no extra round trip), or on
//! [`FleetLimiter::return_leases`](crate::FleetLimiter::return_leases). When the key has
//! moved on (another node or request wrote after the lease), or Redis is away, the cells
//! stay spent on the server: **under-admission**, at most `k` cells per lease, i.e. the key
//! lags by at most `k·T` until it goes idle (its TAT passes and the lag is forgotten). At any
//! instant, the fleet may refuse while up to `k` cells per node per key sit unspent in leases.
//! Counted in [`Stats`](crate::Stats): `leased`, `spent_locally`, `returned`,
//! `expired_unspent` (lost: not spent and not given back, including leases dropped by
//! `reset`, `penalize` or the store's memory bound).
//!
//! If two leases of one key land on a node at once (two tasks found it empty), they merge:
//! the cells add up, the earlier expiry holds, and only the later lease's cells can be given
//! back (only its TAT can still be the key's).
//!
//! The store is bounded like the fast path's cache: a full shard drops expired leases first
//! (their cells counted lost), then any lease.

use std::time::Instant;

use crate::sharded::ShardedMap;

/// A key's leased cells on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lease {
    /// Cells left to spend.
    pub(crate) cells: u32,
    /// No cell is spent at or after this instant.
    pub(crate) expires: Instant,
    /// The quota it was taken under: `(interval_us, burst)`.
    pub(crate) quota: (u64, u32),
    /// The TAT the latest lease stored, µs on the server's clock (for the give-back).
    pub(crate) written: u64,
    /// Cells of the latest lease: at most this many can be given back.
    pub(crate) returnable: u32,
    /// When the latest lease's answer came, and how far its TAT was ahead then (µs): for
    /// the reset time of a local admission.
    pub(crate) recv: Instant,
    pub(crate) tat_ahead_us: u64,
}

impl Lease {
    /// The cells that can be given back now.
    pub(crate) fn unspent(&self) -> u32 {
        self.cells.min(self.returnable)
    }
}

/// What spending found.
#[derive(Debug)]
pub(crate) enum Spend {
    /// Spent: the cells left, and the reset time's base.
    Spent { left: u32, lease: Lease },
    /// Nothing usable; `expired` is a lease to give back (taken out of the store).
    Empty { expired: Option<Lease> },
}

#[derive(Debug)]
pub(crate) struct LeaseStore {
    /// A key's full Redis name to its lease.
    map: ShardedMap<Lease>,
}

impl LeaseStore {
    pub(crate) fn new(capacity: usize) -> LeaseStore {
        LeaseStore {
            map: ShardedMap::new(capacity),
        }
    }

    /// Spends `n` leased cells of `key` taken under `quota`, if held and not expired at
    /// `now`. An expired lease is taken out and handed back for its give-back.
    pub(crate) fn spend(&self, key: &[u8], n: u32, quota: (u64, u32), now: Instant) -> Spend {
        let mut shard = self.map.lock(key);
        let Some(lease) = shard.get_mut(key) else {
            return Spend::Empty { expired: None };
        };
        if now >= lease.expires {
            let expired = shard.remove(key);
            return Spend::Empty { expired };
        }
        if lease.quota != quota || lease.cells < n {
            return Spend::Empty { expired: None };
        }
        lease.cells -= n;
        Spend::Spent {
            left: lease.cells,
            lease: *lease,
        }
    }

    /// `key`'s lease under `quota` if it holds a cell at `now` (spending nothing).
    pub(crate) fn held(&self, key: &[u8], quota: (u64, u32), now: Instant) -> Option<Lease> {
        let shard = self.map.lock(key);
        let l = shard.get(key)?;
        (l.quota == quota && now < l.expires && l.cells > 0).then_some(*l)
    }

    /// Keeps `lease` for `key`, merging with one already held. Returns the cells dropped
    /// (lost) to make room or because a held lease under another quota was replaced.
    pub(crate) fn put(&self, key: &[u8], lease: Lease, now: Instant) -> u64 {
        let mut shard = self.map.lock(key);
        let mut lost = 0u64;
        if let Some(old) = shard.get_mut(key) {
            if old.quota == lease.quota && now < old.expires {
                old.cells = old.cells.saturating_add(lease.cells);
                old.expires = old.expires.min(lease.expires);
                old.written = lease.written;
                old.returnable = lease.returnable;
                old.recv = lease.recv;
                old.tat_ahead_us = lease.tat_ahead_us;
                return 0;
            }
            lost += u64::from(old.cells);
            *old = lease;
            return lost;
        }
        // A full shard drops expired (or empty) leases first, then any; their cells are lost.
        let keep = |l: &Lease| now < l.expires && l.cells > 0;
        let dropped = |l: &Lease| lost += u64::from(l.cells);
        self.map
            .insert_bounded(&mut shard, key, lease, keep, dropped);
        lost
    }

    /// Takes `key`'s lease out (reset, penalty).
    pub(crate) fn take(&self, key: &[u8]) -> Option<Lease> {
        self.map.lock(key).remove(key)
    }

    /// Takes every lease out.
    pub(crate) fn drain(&self) -> Vec<(Box<[u8]>, Lease)> {
        self.map.drain()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn lease(cells: u32, expires: Instant, written: u64) -> Lease {
        Lease {
            cells,
            expires,
            quota: (1_000, 10),
            written,
            returnable: cells,
            recv: expires,
            tat_ahead_us: 0,
        }
    }

    #[test]
    fn spends_merges_and_expires() {
        let s = LeaseStore::new(64);
        let now = Instant::now();
        let later = now + Duration::from_secs(1);
        assert!(matches!(
            s.spend(b"k", 1, (1_000, 10), now),
            Spend::Empty { expired: None }
        ));
        assert_eq!(s.put(b"k", lease(3, later, 100), now), 0);
        assert!(matches!(
            s.spend(b"k", 2, (1_000, 10), now),
            Spend::Spent { left: 1, .. }
        ));
        // Another quota, or more than held: not from the lease.
        assert!(matches!(
            s.spend(b"k", 1, (2_000, 10), now),
            Spend::Empty { expired: None }
        ));
        assert!(matches!(
            s.spend(b"k", 2, (1_000, 10), now),
            Spend::Empty { expired: None }
        ));
        // A second lease merges: cells add, the earlier expiry holds, the later TAT.
        s.put(b"k", lease(4, later + Duration::from_secs(1), 200), now);
        let Spend::Spent { left, lease: l } = s.spend(b"k", 1, (1_000, 10), now) else {
            panic!("spent")
        };
        assert_eq!(
            (left, l.expires, l.written, l.unspent()),
            (4, later, 200, 4)
        );
        // Expired: taken out for its give-back.
        let Spend::Empty { expired: Some(e) } = s.spend(b"k", 1, (1_000, 10), later) else {
            panic!("expired")
        };
        assert_eq!(e.cells, 4);
        assert!(s.take(b"k").is_none());
    }

    #[test]
    fn stays_bounded() {
        let s = LeaseStore::new(32);
        let now = Instant::now();
        let mut lost = 0;
        for i in 0..1_000u32 {
            lost += s.put(
                &i.to_le_bytes(),
                lease(1, now + Duration::from_secs(1), 1),
                now,
            );
        }
        let held = s.drain().len() as u64;
        assert!(held <= 32, "{held}");
        assert_eq!(held + lost, 1_000);
    }
}
