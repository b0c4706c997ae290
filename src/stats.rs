//! Admission counters striped per thread, and the [`Stats`] snapshot.
//!
//! Every check bumps a counter, so the counters must not add a shared write, or even a locked
//! instruction, to the hot path. Each limiter has `OWNED` stripes, and each live thread owns
//! at most one stripe index, process-wide (indices are handed back when a thread exits). The
//! owner is a stripe's only writer, so it bumps with a plain load and store, not an atomic
//! RMW. Threads beyond `OWNED`, and checks made while a thread's locals are being torn down,
//! share one extra stripe and bump it with `fetch_add`. A snapshot sums the stripes.
//!
//! Handing an index from an exited thread to a new one goes through a mutex, so the new
//! owner's first load sees the old owner's last store.

#[cfg(not(tollgate_loom))]
use std::cell::Cell;

use crossbeam_utils::CachePadded;

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
    /// Of `bytes`, memory outgrown by the table and kept until the limiter drops. Always 0:
    /// a shard grows in place, adding to its slots, so it never retires an array (earlier
    /// versions kept outgrown arrays for lock-free readers still in them).
    pub retired_bytes: usize,
    /// The most keys the limiter holds at once.
    pub capacity: usize,
}

/// Stripes with a single owning thread each.
const OWNED: usize = 64;

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

/// The stripe index this thread owns, if it owns one.
///
/// The hot path is one load of a constant-initialised thread-local with no destructor (no
/// lazy-init or liveness check); the first count on a thread, and every count of a thread
/// without an owned stripe, take the cold path.
#[cfg(not(tollgate_loom))]
#[inline]
fn owned_index() -> Option<usize> {
    // `try_with`: on targets with native thread-locals a const, destructor-free one is
    // always there, and this compiles to the plain load; where thread-locals are emulated
    // with OS keys it may be gone during teardown, and the thread then shares.
    let i = INDEX.try_with(Cell::get).unwrap_or(SHARED);
    if i < OWNED {
        Some(i)
    } else {
        first_or_shared(i)
    }
}

/// `owned_index` for a thread that has not counted yet (`UNSET`), or owns no stripe.
#[cfg(not(tollgate_loom))]
#[cold]
#[inline(never)]
fn first_or_shared(i: usize) -> Option<usize> {
    if i != UNSET {
        return None;
    }
    // Taking an index initialises `OWNER`, whose destructor gives it back; `try_with` fails
    // only while this thread's locals are being torn down: then the shared stripe.
    let owned = OWNER.try_with(|o| o.0).ok().flatten();
    // If `INDEX` is gone (emulated thread-locals, teardown), later counts read `SHARED`
    // anyway, and `owned`, if any, goes back with `OWNER`.
    match INDEX.try_with(|c| c.set(owned.unwrap_or(SHARED))) {
        Ok(()) => owned,
        Err(_) => None,
    }
}

/// Loom runs all model threads on one OS thread, so std thread-locals cannot tell them
/// apart: every model thread shares the atomic stripe.
#[cfg(tollgate_loom)]
#[inline]
fn owned_index() -> Option<usize> {
    None
}

/// `INDEX` of a thread that has not counted yet.
#[cfg(not(tollgate_loom))]
const UNSET: usize = usize::MAX;
/// `INDEX` of a thread that uses the shared stripe: beyond `OWNED` threads, or after its
/// `OWNER` gave its index back.
#[cfg(not(tollgate_loom))]
const SHARED: usize = usize::MAX - 1;

#[cfg(not(tollgate_loom))]
thread_local! {
    /// This thread's owned stripe index (`< OWNED`), or `UNSET` or `SHARED`: a copy of
    /// `OWNER`'s, readable without touching `OWNER` (which has a destructor, so every access
    /// to it checks its state).
    static INDEX: Cell<usize> = const { Cell::new(UNSET) };
    /// The ownership itself, handed back when the thread exits.
    static OWNER: StripeOwner = StripeOwner::acquire();
}

/// Ownership of one stripe index for the life of a thread.
#[cfg(not(tollgate_loom))]
struct StripeOwner(Option<usize>);

#[cfg(not(tollgate_loom))]
static FREE_INDICES: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
#[cfg(not(tollgate_loom))]
static NEXT_INDEX: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

#[cfg(not(tollgate_loom))]
impl StripeOwner {
    fn acquire() -> StripeOwner {
        let mut free = FREE_INDICES.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = free.pop() {
            return StripeOwner(Some(i));
        }
        drop(free);
        let mut next = NEXT_INDEX.lock().unwrap_or_else(|p| p.into_inner());
        if *next < OWNED {
            *next += 1;
            StripeOwner(Some(*next - 1))
        } else {
            StripeOwner(None)
        }
    }
}

#[cfg(not(tollgate_loom))]
impl Drop for StripeOwner {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            // From here on this thread counts in the shared stripe: the index stops being its
            // own before another thread can take it.
            // (If `INDEX` is already gone, as it may be with emulated thread-locals, later
            // counts of this thread read `SHARED` anyway: see `owned_index`.)
            let _ = INDEX.try_with(|c| c.set(SHARED));
            // The mutex orders this thread's last bump before the next owner's first.
            FREE_INDICES
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(i);
        }
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
