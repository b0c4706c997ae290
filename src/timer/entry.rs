//! One registration with the timer: a deadline, the waiting task's waker, and a state word.
//!
//! # States
//!
//! `state` is one of three values, and leaves `PENDING` exactly once, by a CAS:
//!
//! ```text
//!   PENDING --driver fires (deadline <= driver's now)--> FIRED      waker taken and woken
//!   PENDING --waiter saw now >= deadline itself-------> FIRED      waker taken and dropped
//!   PENDING --waiter dropped-------------------------> CANCELLED  waker taken and dropped
//! ```
//!
//! The CAS is the linearisation point of the entry's outcome: a fire racing a drop is
//! resolved by whichever CAS wins, so a waiter is woken at most once, and a cancelled entry is
//! never woken. `FIRED` and `CANCELLED` are terminal.
//!
//! # Who writes what
//!
//! * `deadline` is immutable.
//! * `next` is the inbox link, written only by the registering thread before the push that
//!   publishes the entry (see `inbox.rs`); an entry is pushed at most once.
//! * `waker` is registered by the waiter (the `Sleep` future) and taken by the thread that
//!   wins the CAS out of `PENDING` (the driver to wake it, or the waiter to drop it). The
//!   waiter registers before it checks `state` and the driver CASes before it takes, so
//!   `AtomicWaker`'s protocol guarantees that a pending poll is either woken or sees `FIRED`.
//!
//! # Counting
//!
//! The timer keeps two counters beside the entries (see `driver.rs`): `pending` (entries still
//! `PENDING`) and `dead` (entries no longer `PENDING` that the timer still holds in its inbox or
//! heap). [`Entry::retire`] moves one entry from the first count to the second; it bumps `dead`
//! *before* its CAS, so the driver, which decrements `dead` only after it has seen the entry's
//! terminal state (Acquire), can never take `dead` below zero.

use std::ptr;

use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, AtomicWaker, Ordering};

/// `state`: registered and not yet fired or cancelled.
const PENDING: u64 = 0;
/// `state`: fired (deadline reached); terminal.
const FIRED: u64 = 1;
/// `state`: the waiter dropped its future first; terminal.
const CANCELLED: u64 = 2;

/// How [`Entry::retire`] leaves `PENDING`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retire {
    /// The waiter saw its deadline pass itself.
    Elapsed,
    /// The waiter was dropped.
    Cancel,
}

#[derive(Debug)]
pub(crate) struct Entry {
    /// Fires at the first driver turn whose `now` is at least this (timer nanoseconds).
    pub(crate) deadline: u64,
    /// How late the timer thread may fire it, so that dense deadlines share one wake-up
    /// (see `coalescing_slack`). Never makes it early.
    pub(crate) slack: u64,
    /// `{ PENDING | FIRED | CANCELLED }`; see the module docs for the transitions.
    state: AtomicU64,
    /// The waiting task.
    pub(crate) waker: AtomicWaker,
    /// The next (earlier pushed) entry on the inbox stack; null at the bottom.
    pub(crate) next: AtomicPtr<Entry>,
}

impl Entry {
    /// An entry without slack (the stack's tests and loom models).
    #[cfg(any(test, tollgate_loom))]
    pub(crate) fn new(deadline: u64) -> Entry {
        Entry::with_slack(deadline, 0)
    }

    pub(crate) fn with_slack(deadline: u64, slack: u64) -> Entry {
        Entry {
            deadline,
            slack,
            state: AtomicU64::new(PENDING),
            waker: AtomicWaker::new(),
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Still waiting to be fired.
    pub(crate) fn is_pending(&self) -> bool {
        // ordering: Acquire pairs with the Release CAS of `retire`, so a driver that sees a
        // terminal state also sees the `dead` increment made before it (module docs).
        self.state.load(Ordering::Acquire) == PENDING
    }

    /// Fired: by the driver, or by the waiter itself. Either way the deadline has passed.
    pub(crate) fn is_fired(&self) -> bool {
        // ordering: the state is the only datum; `AtomicWaker` orders it against the wake.
        self.state.load(Ordering::Relaxed) == FIRED
    }

    /// The driver's fire: `PENDING -> FIRED`. Returns whether this call won; the winner
    /// then takes the waker and wakes it (outside the driver's lock). `false` means the entry
    /// was already dead.
    pub(crate) fn fire(&self) -> bool {
        // ordering: success needs no ordering of its own (the waiter learns of FIRED through
        // the waker, whose take/register pair is AcqRel); failure is Acquire so that the
        // caller's `dead` decrement comes after the retiring thread's increment.
        self.state
            .compare_exchange(PENDING, FIRED, Ordering::Relaxed, Ordering::Acquire)
            // PENDING -> FIRED: this call owns the wake. Err: FIRED (by the waiter) or
            // CANCELLED, dead already and counted in `dead`.
            .is_ok()
    }

    /// The waiter's own exit from `PENDING` (see [`Retire`]). Returns whether this call won the
    /// CAS; if it did, the caller must decrement `pending` (the entry stays held by the timer
    /// and is now counted in `dead`). The winner drops the waker at once, so the timer never
    /// drops a waiter's waker (user code) while it holds its lock.
    pub(crate) fn retire(&self, how: Retire, dead: &AtomicUsize) -> bool {
        let to = match how {
            Retire::Elapsed => FIRED,
            Retire::Cancel => CANCELLED,
        };
        // Count first, so `dead` never dips below the number of dead entries held: the driver
        // only decrements after it has seen the terminal state this CAS publishes.
        // ordering: a pure counter; the Release CAS below publishes it to the driver.
        dead.fetch_add(1, Ordering::Relaxed);
        // ordering: Release publishes the `dead` increment to the driver's Acquire load of
        // the terminal state; failure needs nothing (the entry is FIRED, by the driver).
        match self
            .state
            .compare_exchange(PENDING, to, Ordering::Release, Ordering::Relaxed)
        {
            // PENDING -> FIRED (elapsed) or CANCELLED (dropped): the driver will skip it.
            Ok(_) => {
                drop(self.waker.take());
                true
            }
            // Already FIRED by the driver, which also took the entry out of its heap: undo.
            Err(_) => {
                // ordering: a pure counter, as above.
                dead.fetch_sub(1, Ordering::Relaxed);
                false
            }
        }
    }
}

/// The most a registration may be fired late to share a wake-up with later ones.
pub(crate) const MAX_SLACK: u64 = 1_000_000;

/// The slack of a sleep registered `ahead` nanoseconds before its deadline: 1/256 of its
/// wait, at most `MAX_SLACK` (1 ms). Waiters queued far ahead (a FIFO of tasks on one key,
/// each due 50 µs after the previous) then share one wake-up of the timer thread per
/// millisecond instead of costing one each, while short sleeps stay precise (a 1 ms sleep
/// may be 4 µs late). Lateness only delays a waiter; its admission instant, and so the rate,
/// are fixed at reservation. (1/1024 capped at 0.5 ms cost F1 60 % more CPU per admission
/// and F2 80 % more, for half the lateness: BENCHMARKS.md.)
pub(crate) fn coalescing_slack(ahead: u64) -> u64 {
    (ahead >> 8).min(MAX_SLACK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_is_a_256th_of_the_wait_capped_at_a_millisecond() {
        assert_eq!(coalescing_slack(0), 0);
        assert_eq!(coalescing_slack(255), 0);
        assert_eq!(coalescing_slack(1_000_000), 3_906); // a 1 ms sleep: under 4 µs
        assert_eq!(coalescing_slack(200_000_000), 781_250); // F2's 0.2 s waits
        assert_eq!(coalescing_slack(500_000_000), MAX_SLACK); // F1's 0.5 s waits
        assert_eq!(coalescing_slack(10_000_000_000), MAX_SLACK);
        assert_eq!(coalescing_slack(u64::MAX), MAX_SLACK);
    }
}
