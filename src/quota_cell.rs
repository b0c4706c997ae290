//! The limiter's current quota, changeable at run time, read on every check without a lock.
//!
//! A quota is two numbers (interval and burst), too wide for one atomic word, so the cell is a
//! sequence lock over atomics: a writer makes `seq` odd, stores both numbers, makes it even
//! again; a reader retries until it saw the same even `seq` before and after its loads. A
//! check therefore uses either the old quota or the new one, never half of each. Writers are
//! serialised by a mutex. Checked by the loom model "quota change vs check".

use crate::gcra::Gcra;
use crate::quota::Quota;
use crate::sync::{AtomicU64, Mutex, Ordering, fence, lock, spin_hint};

#[derive(Debug)]
pub(crate) struct QuotaCell {
    /// Even: stable. Odd: a writer is between its two stores.
    seq: AtomicU64,
    interval: AtomicU64,
    burst: AtomicU64,
    writer: Mutex<()>,
}

impl QuotaCell {
    pub(crate) fn new(quota: Quota) -> QuotaCell {
        QuotaCell {
            seq: AtomicU64::new(0),
            interval: AtomicU64::new(quota.interval_nanos()),
            burst: AtomicU64::new(u64::from(quota.burst())),
            writer: Mutex::new(()),
        }
    }

    /// The current `(interval, burst)`.
    #[inline]
    fn load(&self) -> (u64, u32) {
        loop {
            // ordering: Acquire pairs with the writer's final Release store: if we see its
            // even `seq`, we see its data.
            let before = self.seq.load(Ordering::Acquire);
            // ordering: Relaxed data loads, ordered before the re-check by the fence below.
            let interval = self.interval.load(Ordering::Relaxed);
            let burst = self.burst.load(Ordering::Relaxed);
            // ordering: keeps the data loads above before the `seq` re-load: if a writer's
            // data store was seen, its earlier odd `seq` store is seen by the re-load.
            fence(Ordering::Acquire);
            let after = self.seq.load(Ordering::Relaxed);
            if before == after && before & 1 == 0 {
                return (interval, burst as u32);
            }
            spin_hint();
        }
    }

    #[inline]
    pub(crate) fn gcra(&self) -> Gcra {
        let (interval, burst) = self.load();
        Gcra::from_parts(interval, burst)
    }

    pub(crate) fn quota(&self) -> Quota {
        let (interval, burst) = self.load();
        // Both values were validated by `Quota` before they were stored.
        Quota::from_parts(interval, burst).expect("the quota cell holds a validated quota")
    }

    pub(crate) fn store(&self, quota: Quota) {
        let _writer = lock(&self.writer);
        // ordering: only writers change `seq`, and we hold the writer lock.
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq + 1, Ordering::Relaxed);
        // ordering: the odd `seq` is ordered before the data stores that follow, so a reader
        // that sees new data and then re-loads `seq` sees it changed.
        fence(Ordering::Release);
        self.interval
            .store(quota.interval_nanos(), Ordering::Relaxed);
        self.burst
            .store(u64::from(quota.burst()), Ordering::Relaxed);
        // ordering: Release publishes the data to readers that Acquire this even `seq`.
        self.seq.store(seq + 2, Ordering::Release);
    }
}
