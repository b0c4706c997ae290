//! Per-thread stripe ownership, for counters that every thread bumps without a shared write.
//!
//! A counter that every serving thread increments is a cache line every core writes: its
//! cost grows with the cores. Striping it (one copy per stripe, each on its own cache line,
//! summed when read) spreads the writes; **owning** a stripe removes the locked instruction
//! too. Each live thread owns at most one index in `0..OWNED`, process-wide, so it is the
//! only writer of stripe `i` in every striped counter that follows this protocol, and bumps
//! it with a plain `load` and `store` instead of an atomic read-modify-write.
//!
//! The limiter's [`Stats`](crate::Stats) counters use it, and so do tollgate-tower's
//! decision counts, so the protocol is written once. It is public for that crate only, and
//! hidden from the docs: not part of the stable API.
//!
//! # The protocol
//!
//! * [`owned_index`] returns `Some(i)`: this thread owns `i` until it exits. No other thread
//!   gets `i` meanwhile, so a plain `load` + `store` of stripe `i`'s counter (both
//!   `Relaxed`) loses no count.
//! * It returns `None` (more than [`OWNED`] threads live, this thread's locals are being torn
//!   down, or under loom, where model threads share one OS thread): use a shared stripe and
//!   an atomic `fetch_add`.
//!
//! When a thread exits, its index goes back to a free list through a mutex; the next thread
//! that takes it does so through the same mutex, so the old owner's last store happens before
//! the new owner's first load, and no count is lost across the hand-over.
//!
//! # Examples
//!
//! A striped counter of one value:
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use tollgate::stripe::{OWNED, owned_index};
//!
//! struct Hits([AtomicU64; OWNED + 1]); // the owned stripes, then a shared one
//!
//! impl Hits {
//!     fn bump(&self) {
//!         match owned_index() {
//!             // The only writer of this stripe: a plain load and store.
//!             Some(i) => {
//!                 let c = &self.0[i];
//!                 c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
//!             }
//!             None => {
//!                 self.0[OWNED].fetch_add(1, Ordering::Relaxed);
//!             }
//!         }
//!     }
//!
//!     fn total(&self) -> u64 {
//!         self.0.iter().map(|c| c.load(Ordering::Relaxed)).sum()
//!     }
//! }
//!
//! let hits = Hits(std::array::from_fn(|_| AtomicU64::new(0)));
//! std::thread::scope(|s| {
//!     for _ in 0..4 {
//!         s.spawn(|| (0..1000).for_each(|_| hits.bump()));
//!     }
//! });
//! assert_eq!(hits.total(), 4000);
//! ```
//! (Real counters put each stripe on its own cache line, e.g. in a `CachePadded`.)

#[cfg(not(tollgate_loom))]
use std::cell::Cell;

/// How many stripe indices threads can own at once: enough for the threads of a server on a
/// large machine. Threads beyond it get `None` from [`owned_index`] and share.
pub const OWNED: usize = 64;

/// The stripe index (`< OWNED`) this thread owns for the rest of its life, if it owns one
/// (module docs).
///
/// The hot path is one load of a constant-initialised thread-local with no destructor (no
/// lazy-init or liveness check); a thread's first call, and every call of a thread without
/// an index of its own, take the cold path.
#[cfg(not(tollgate_loom))]
#[inline]
pub fn owned_index() -> Option<usize> {
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

/// Loom runs all model threads on one OS thread, so std thread-locals cannot tell them
/// apart: every model thread shares.
#[cfg(tollgate_loom)]
#[inline]
pub fn owned_index() -> Option<usize> {
    None
}

/// `owned_index` for a thread that has not asked yet (`UNSET`), or owns no index.
#[cfg(not(tollgate_loom))]
#[cold]
#[inline(never)]
fn first_or_shared(i: usize) -> Option<usize> {
    if i != UNSET {
        return None;
    }
    // Taking an index initialises `OWNER`, whose destructor gives it back; `try_with` fails
    // only while this thread's locals are being torn down: then the thread shares.
    let owned = OWNER.try_with(|o| o.0).ok().flatten();
    // If `INDEX` is gone (emulated thread-locals, teardown), later calls read `SHARED`
    // anyway, and `owned`, if any, goes back with `OWNER`.
    match INDEX.try_with(|c| c.set(owned.unwrap_or(SHARED))) {
        Ok(()) => owned,
        Err(_) => None,
    }
}

/// `INDEX` of a thread that has not asked yet.
#[cfg(not(tollgate_loom))]
const UNSET: usize = usize::MAX;
/// `INDEX` of a thread that shares: beyond `OWNED` threads, or after its `OWNER` gave its
/// index back.
#[cfg(not(tollgate_loom))]
const SHARED: usize = usize::MAX - 1;

#[cfg(not(tollgate_loom))]
thread_local! {
    /// This thread's owned index (`< OWNED`), or `UNSET` or `SHARED`: a copy of `OWNER`'s,
    /// readable without touching `OWNER` (which has a destructor, so every access to it
    /// checks its state).
    static INDEX: Cell<usize> = const { Cell::new(UNSET) };
    /// The ownership itself, handed back when the thread exits.
    static OWNER: Owner = Owner::acquire();
}

/// Ownership of one index for the life of a thread (`None`: it shares).
#[cfg(not(tollgate_loom))]
struct Owner(Option<usize>);

/// Indices given back by threads that exited, for the next threads to take.
#[cfg(not(tollgate_loom))]
static FREE: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
/// The next index never handed out.
#[cfg(not(tollgate_loom))]
static NEXT: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

#[cfg(not(tollgate_loom))]
impl Owner {
    fn acquire() -> Owner {
        let mut free = FREE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = free.pop() {
            return Owner(Some(i));
        }
        drop(free);
        let mut next = NEXT.lock().unwrap_or_else(|p| p.into_inner());
        if *next < OWNED {
            *next += 1;
            Owner(Some(*next - 1))
        } else {
            Owner(None)
        }
    }
}

#[cfg(not(tollgate_loom))]
impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            // From here on this thread shares: the index stops being its own before another
            // thread can take it. (If `INDEX` is already gone, as it may be with emulated
            // thread-locals, later calls of this thread read `SHARED` anyway.)
            let _ = INDEX.try_with(|c| c.set(SHARED));
            // The mutex orders this thread's last store before the next owner's first load.
            FREE.lock().unwrap_or_else(|p| p.into_inner()).push(i);
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::{Barrier, Mutex};

    /// Threads alive at once never own the same index, and a thread keeps its index (waves
    /// of more threads than indices, so indices are taken again and some threads share).
    #[test]
    fn live_threads_own_distinct_indices_for_life() {
        for _ in 0..3 {
            let seen = Mutex::new(Vec::new());
            let all_asked = Barrier::new(OWNED + 4);
            std::thread::scope(|s| {
                for _ in 0..(OWNED + 4) {
                    s.spawn(|| {
                        let mine = owned_index();
                        all_asked.wait(); // every thread is alive while the others ask
                        assert_eq!(owned_index(), mine, "an index is kept for life");
                        seen.lock().unwrap().push(mine);
                    });
                }
            });
            let seen = seen.into_inner().unwrap();
            let owned: Vec<usize> = seen.iter().flatten().copied().collect();
            let distinct: HashSet<usize> = owned.iter().copied().collect();
            assert_eq!(
                distinct.len(),
                owned.len(),
                "two live threads shared an index"
            );
            assert!(owned.iter().all(|&i| i < OWNED));
            // (How many own one depends on the other tests' live threads, so it is not
            // asserted: giving indices back is a matter of speed, not of exact counts.)
        }
    }
}
