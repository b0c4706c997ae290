//! Admission counters striped per thread, and the [`Stats`] snapshot.
//!
//! Every check bumps a counter. A single shared counter would be a write that every thread
//! contends on, so each thread writes its own cache-padded stripe (picked once per thread,
//! round-robin) and a snapshot sums the stripes.

use std::cell::Cell;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

/// A snapshot of a limiter's counters and memory.
///
/// Counters are summed from per-thread stripes without stopping the world, so a snapshot taken
/// while checks run may miss the checks in flight.
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
    /// Bytes the limiter holds, retired arrays included.
    pub bytes: usize,
    /// Of `bytes`, arrays outgrown by growth and kept until the limiter drops (readers may
    /// still be using them). At most the size of the current arrays.
    pub retired_bytes: usize,
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
    stripes: Box<[CachePadded<Stripe>]>,
}

static NEXT_STRIPE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    static THREAD_STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn thread_stripe() -> usize {
    THREAD_STRIPE.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            // ordering: only uniqueness matters, not order.
            i = NEXT_STRIPE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            s.set(i);
        }
        i
    })
}

impl Counters {
    pub(crate) fn new() -> Counters {
        let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
        let stripes = (2 * threads).next_power_of_two().clamp(2, 128);
        Counters {
            stripes: (0..stripes)
                .map(|_| CachePadded::new(Stripe::default()))
                .collect(),
        }
    }

    #[inline]
    fn stripe(&self) -> &Stripe {
        &self.stripes[thread_stripe() & (self.stripes.len() - 1)]
    }

    #[inline]
    pub(crate) fn admitted(&self) {
        // ordering: a statistic; no other memory depends on it.
        self.stripe().admitted.fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn denied(&self) {
        // ordering: a statistic; no other memory depends on it.
        self.stripe().denied.fetch_add(1, Ordering::Relaxed);
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
