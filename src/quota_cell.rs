//! The limiter's current quota, changeable at run time, read on every check without a lock.
//!
//! A quota is two numbers (interval and burst), too wide for one atomic word, so the cell is a
//! sequence lock over atomics ([`SeqCount`], where its ordering argument is): a writer
//! brackets its two stores with `begin`/`end`, and a reader retries until `validate` accepts
//! its loads. A check therefore uses either the old quota or the new one, never half of each.
//! Writers are serialised by a mutex. Checked by the loom model "quota change vs check".

use crate::gcra::Gcra;
use crate::quota::Quota;
use crate::seq::SeqCount;
use crate::sync::{AtomicU64, Mutex, Ordering, lock, spin_hint};

pub(crate) struct QuotaCell {
    /// The seqlock over `interval` and `burst`.
    seq: SeqCount,
    interval: AtomicU64,
    burst: AtomicU64,
    writer: Mutex<()>,
}

/// The quota it holds, as a `Quota` shows it (not the seqlock around it).
impl std::fmt::Debug for QuotaCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.quota().fmt(f)
    }
}

impl QuotaCell {
    pub(crate) fn new(quota: Quota) -> QuotaCell {
        QuotaCell {
            seq: SeqCount::new(),
            interval: AtomicU64::new(quota.interval_nanos()),
            burst: AtomicU64::new(u64::from(quota.burst())),
            writer: Mutex::new(()),
        }
    }

    /// The current `(interval, burst)`.
    #[inline]
    fn load(&self) -> (u64, u32) {
        loop {
            let before = self.seq.read_begin();
            // ordering: Relaxed data loads under the seqlock (`SeqCount`).
            let interval = self.interval.load(Ordering::Relaxed);
            let burst = self.burst.load(Ordering::Relaxed);
            if self.seq.validate(before) {
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

    #[inline]
    pub(crate) fn quota(&self) -> Quota {
        let (interval, burst) = self.load();
        // Both values were validated by `Quota` before they were stored.
        Quota::from_parts(interval, burst).expect("the quota cell holds a validated quota")
    }

    pub(crate) fn store(&self, quota: Quota) {
        let _writer = lock(&self.writer);
        self.seq.begin();
        // ordering: Relaxed data stores under the seqlock (`SeqCount`).
        self.interval
            .store(quota.interval_nanos(), Ordering::Relaxed);
        self.burst
            .store(u64::from(quota.burst()), Ordering::Relaxed);
        self.seq.end();
    }
}
