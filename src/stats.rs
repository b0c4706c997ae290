//! Admission counters striped per thread, and the [`Stats`] snapshot.
//!
//! Every check bumps a counter, so the counters must not add a shared write, or even a locked
//! instruction, to the hot path. Each limiter has `OWNED` stripes and one shared stripe, and
//! follows the protocol of `stripe.rs`: a thread that owns a stripe index is that stripe's
//! only writer and bumps it with a plain load and store; the others share the extra stripe
//! and bump it with `fetch_add`. A snapshot sums the stripes.

use crossbeam_utils::CachePadded;

use crate::stripe::{OWNED, owned_index};
use crate::sync::{AtomicU64, Ordering};

/// A snapshot of a limiter's counters and memory.
///
/// Counters are summed from per-thread stripes without stopping the world, so a snapshot taken
/// while checks run may miss the checks in flight.
///
/// # Examples
///
/// ```
/// use tollgate::{Limiter, ManualClock, Quota};
///
/// let limiter = Limiter::builder(Quota::per_second(1)).clock(ManualClock::new()).build();
/// assert!(limiter.check("a").is_ok());
/// assert!(limiter.check("a").is_err());
/// assert!(limiter.check("b").is_ok());
/// let stats = limiter.stats();
/// assert_eq!((stats.admitted, stats.denied, stats.live_keys), (2, 1, 2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Stats {
    /// Checks admitted (a check of `n` cells counts once).
    pub admitted: u64,
    /// Checks refused because the key was rate-limited.
    pub denied: u64,
    /// Keys whose state still carries information (not yet expired).
    pub live_keys: usize,
    /// Keys the table holds, including expired ones not yet reclaimed.
    pub keys_held: usize,
    /// Expired keys whose slots were reclaimed for other keys.
    pub expired_reclaimed: u64,
    /// Live keys evicted because the table was full (the evicted key's next request counts as
    /// its first).
    pub forced_evictions: u64,
    /// New keys refused because the table was full under
    /// [`FullPolicy::RefuseNewKeys`](crate::FullPolicy::RefuseNewKeys).
    pub refused_keys: u64,
    /// Times a shard rebuilt its array in place to clear the tombstones that reclaimed and
    /// reset keys leave, instead of growing. Each briefly sends that shard's checks to its
    /// lock; a high rate means heavy key churn.
    pub compactions: u64,
    /// Bytes the limiter holds.
    pub bytes: usize,
    /// The most keys the limiter holds at once.
    pub capacity: usize,
}

#[derive(Debug, Default)]
struct Stripe {
    admitted: AtomicU64,
    denied: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct Counters {
    /// `OWNED` owned stripes, then the shared one. A fixed-size array: the hot path's bounds
    /// check is against a constant, not a length loaded from the heap.
    stripes: Box<[CachePadded<Stripe>; OWNED + 1]>,
}

impl Counters {
    pub(crate) fn new() -> Counters {
        Counters {
            stripes: Box::new(std::array::from_fn(|_| CachePadded::new(Stripe::default()))),
        }
    }

    #[inline]
    pub(crate) fn admitted(&self) {
        self.bump(|s| &s.admitted);
    }

    #[inline]
    pub(crate) fn denied(&self) {
        self.bump(|s| &s.denied);
    }

    #[inline]
    fn bump(&self, counter: impl Fn(&Stripe) -> &AtomicU64) {
        match owned_index() {
            Some(i) => {
                let c = counter(&self.stripes[i]);
                // ordering: this thread is the stripe's only writer (see the module docs), so
                // a plain load and store lose nothing; readers only sum the values.
                c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
            None => {
                // ordering: a statistic; no other memory depends on it.
                counter(&self.stripes[OWNED]).fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// `(admitted, denied)` summed over the stripes.
    pub(crate) fn totals(&self) -> (u64, u64) {
        self.stripes.iter().fold((0, 0), |(a, d), s| {
            // ordering: a statistic.
            (
                a + s.admitted.load(Ordering::Relaxed),
                d + s.denied.load(Ordering::Relaxed),
            )
        })
    }

    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.stripes)
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn counts_are_exact_across_many_short_lived_threads() {
        let counters = Counters::new();
        // More threads than owned stripes, in waves, so indices are recycled and the shared
        // stripe is used too.
        for _ in 0..4 {
            std::thread::scope(|s| {
                for _ in 0..(OWNED + 8) {
                    s.spawn(|| {
                        for _ in 0..1_000 {
                            counters.admitted();
                        }
                        counters.denied();
                    });
                }
            });
        }
        assert_eq!(
            counters.totals(),
            (4 * (OWNED as u64 + 8) * 1_000, 4 * (OWNED as u64 + 8))
        );
    }
}
