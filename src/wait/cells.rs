//! [`Cells`]: what the waiting engine needs of a limiter, written once for a key of a keyed
//! limiter ([`KeyCells`]) and for a direct limiter ([`DirectCells`]).
//!
//! The engine (`queue.rs`) decides *who* is admitted and *when*; this trait is the state word
//! it decides on: reserve cells with one CAS, give a reservation back, read the clock, sleep
//! on the limiter's timer, and find the key's queue.

use std::hash::BuildHasher;
use std::ops::Deref;
use std::task::Waker;

use super::node::Failure;
use super::queue::HandOver;
use super::waitlist::WaitShard;
use crate::direct;
use crate::gcra::{Gcra, MAX_NOW};
use crate::limiter;
use crate::sync::Arc;
use crate::table::Full;
use crate::timer::Sleep;

/// How long a waiter accepts to wait, fixed when it first polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    Unbounded,
    /// At most this many nanoseconds after the first poll.
    Within(u64),
    /// Admitted no later than this timestamp.
    Until(u64),
}

impl Bound {
    /// The latest admission instant accepted by a waiter first polled at `now`.
    pub(crate) fn latest(self, now: u64) -> u64 {
        match self {
            Bound::Unbounded => u64::MAX,
            Bound::Within(d) => now.saturating_add(d),
            Bound::Until(t) => t,
        }
    }
}

/// A reservation: `n` cells counted from `admit_at` on, written into the key's state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reserved {
    /// The `now` the reservation was computed at (the hand-over's chain instant).
    pub(crate) now: u64,
    /// When the cells are admitted (possibly before `now`: at once).
    pub(crate) admit_at: u64,
    /// The state this reservation wrote; a refund applies only while it is still there.
    pub(crate) tat: u64,
    /// `n·T` as written (the quota may change before a refund).
    amount: u64,
    /// The limiter's removal epoch when this reserved: a refund after the key was forgotten
    /// (and perhaps checked back up to the same TAT) must not apply.
    epoch: u64,
}

impl Reserved {
    /// The instant the cells count as admitted at: `admit_at`, or `now` if that is later.
    pub(crate) fn instant(&self) -> u64 {
        self.admit_at.max(self.now)
    }
}

/// What the waiting engine needs from the limiter it waits on.
pub(crate) trait Cells {
    /// A handle that owns the limiter's shared state, for the hand-over waker that the timer
    /// holds while the key's queue sleeps.
    type Owned: Cells + Send + Sync + 'static;

    fn owned(&self) -> Self::Owned;
    /// The quota now.
    fn gcra(&self) -> Gcra;
    /// The limiter's clock, clamped to what the GCRA math accepts.
    fn now(&self) -> u64;
    /// Reserves `n` cells as GCRA would at `now`, unless they would be admitted after
    /// `latest`: then writes nothing and fails with the instant they would have had.
    fn reserve(&self, n: u32, now: u64, latest: u64) -> Result<Reserved, Failure>;
    /// Gives back a reservation's cells if the key's state is still exactly what it wrote.
    fn refund(&self, r: &Reserved);
    /// A sleep that ends when the limiter's clock reaches `at` (never before).
    fn sleep_until(&self, at: u64) -> Sleep;
    /// Counts a wait's result in the limiter's statistics.
    fn count(&self, admitted: bool);
    /// The waitlist shard that holds this key's queue, and the key's name in it.
    fn waitlist(&self) -> (&WaitShard, u64);
    /// The limiter's capacity in keys (for [`WaitError::TableFull`](super::WaitError)).
    fn capacity(&self) -> usize;
    /// The waker the key's queue sleeps with: it runs the hand-over (see `queue.rs`).
    fn hand_over_waker(&self) -> Waker {
        Waker::from(std::sync::Arc::new(HandOver(self.owned())))
    }
}

/// The reservation step on one stored TAT: `(write, verdict)` for the state CAS.
fn reserve_step(
    gcra: Gcra,
    now: u64,
    n: u32,
    latest: u64,
    epoch: u64,
) -> impl Fn(u64) -> (Option<u64>, Result<Reserved, Failure>) {
    move |tat| {
        let (admit_at, new_tat) = gcra.reserve(tat, now, n);
        if admit_at > latest {
            return (None, Err(Failure::TooLong { admit_at }));
        }
        let reserved = Reserved {
            now,
            admit_at,
            tat: new_tat,
            amount: new_tat - tat.max(now),
            epoch,
        };
        (Some(new_tat), Ok(reserved))
    }
}

/// The refund step: only if the state is still this reservation's, in the same incarnation of
/// the key. `epoch` reads the removal epoch; it runs after the state load that gave `tat`,
/// which is what makes a newer epoch visible (see `Shard::removals`, `direct::Shared`).
fn refund_step(r: Reserved, epoch: impl Fn() -> u64) -> impl Fn(u64) -> (Option<u64>, ()) {
    move |tat| {
        (
            (tat == r.tat && epoch() == r.epoch).then(|| r.tat - r.amount),
            (),
        )
    }
}

/// `n` must fit the burst (the quota may have changed since the waiter checked).
fn fits(gcra: Gcra, n: u32) -> Result<(), Failure> {
    if n > gcra.burst {
        return Err(Failure::OverBurst { burst: gcra.burst });
    }
    Ok(())
}

/// One key of a keyed limiter: `P` is `&Arc<Shared>` for the futures that borrow their
/// limiter, `Arc<Shared>` for the owned hand-over waker.
#[derive(Debug, Clone)]
pub(crate) struct KeyCells<P> {
    pub(crate) shared: P,
    pub(crate) route: u64,
    pub(crate) fp: u64,
}

impl<P, S> Cells for KeyCells<P>
where
    P: Deref<Target = Arc<limiter::Shared<S>>>,
    S: BuildHasher + Send + Sync + 'static,
{
    type Owned = KeyCells<OwnedShared<limiter::Shared<S>>>;

    fn owned(&self) -> Self::Owned {
        KeyCells {
            shared: OwnedShared(Arc::clone(&self.shared)),
            route: self.route,
            fp: self.fp,
        }
    }

    fn gcra(&self) -> Gcra {
        self.shared.quota.gcra()
    }

    fn now(&self) -> u64 {
        self.shared.clock.now().as_nanos().min(MAX_NOW)
    }

    fn reserve(&self, n: u32, now: u64, latest: u64) -> Result<Reserved, Failure> {
        let shared = &**self.shared;
        let gcra = shared.quota.gcra();
        fits(gcra, n)?;
        // Read before reserving: a removal between here and the CAS only makes the refund
        // more cautious.
        let epoch = shared.table.removals(self.route);
        let step = reserve_step(gcra, now, n, latest, epoch);
        match shared.update_key(self.route, self.fp, now, step) {
            Ok(verdict) => verdict,
            Err(Full) => Err(Failure::TableFull),
        }
    }

    fn refund(&self, r: &Reserved) {
        // An absent key was forgotten after the reservation, which moved the removal epoch,
        // so the step writes nothing and this never inserts.
        let shared = &**self.shared;
        let epoch = || shared.table.removals(self.route);
        let _ = shared.update_key(self.route, self.fp, r.now, refund_step(*r, epoch));
    }

    fn sleep_until(&self, at: u64) -> Sleep {
        self.shared.clock.sleep_until(at)
    }

    fn count(&self, admitted: bool) {
        if admitted {
            self.shared.counters.admitted();
        } else {
            self.shared.counters.denied();
        }
    }

    fn waitlist(&self) -> (&WaitShard, u64) {
        (self.shared.waitlists.shard(self.route), self.fp)
    }

    fn capacity(&self) -> usize {
        self.shared.table.capacity()
    }
}

/// A direct limiter, by reference or by `Arc`. Its one queue has the name 0.
#[derive(Debug, Clone)]
pub(crate) struct DirectCells<P>(pub(crate) P);

impl<P: Deref<Target = Arc<direct::Shared>>> Cells for DirectCells<P> {
    type Owned = DirectCells<OwnedShared<direct::Shared>>;

    fn owned(&self) -> Self::Owned {
        DirectCells(OwnedShared(Arc::clone(&self.0)))
    }

    fn gcra(&self) -> Gcra {
        self.0.quota.gcra()
    }

    fn now(&self) -> u64 {
        self.0.clock.now().as_nanos().min(MAX_NOW)
    }

    fn reserve(&self, n: u32, now: u64, latest: u64) -> Result<Reserved, Failure> {
        let shared = &**self.0;
        let gcra = shared.quota.gcra();
        fits(gcra, n)?;
        let epoch = shared.resets();
        shared.update(reserve_step(gcra, now, n, latest, epoch))
    }

    fn refund(&self, r: &Reserved) {
        let shared = &**self.0;
        shared.update(refund_step(*r, || shared.resets()));
    }

    fn sleep_until(&self, at: u64) -> Sleep {
        self.0.clock.sleep_until(at)
    }

    fn count(&self, _admitted: bool) {}

    fn waitlist(&self) -> (&WaitShard, u64) {
        (self.0.waitlists.shard(0), 0)
    }

    fn capacity(&self) -> usize {
        1
    }
}

/// An owned `Arc` that derefs to itself, so `KeyCells<OwnedShared<_>>` and
/// `KeyCells<&Arc<_>>` share one `Cells` impl (`P: Deref<Target = Arc<_>>`).
#[derive(Debug)]
pub(crate) struct OwnedShared<T>(pub(crate) Arc<T>);

impl<T> Clone for OwnedShared<T> {
    fn clone(&self) -> Self {
        OwnedShared(Arc::clone(&self.0))
    }
}

impl<T> Deref for OwnedShared<T> {
    type Target = Arc<T>;

    fn deref(&self) -> &Arc<T> {
        &self.0
    }
}
