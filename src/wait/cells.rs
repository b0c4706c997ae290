//! [`Cells`]: where a waiter reserves, one key of a keyed limiter or a direct limiter.

use std::hash::BuildHasher;
use std::ops::Deref;
use std::time::Duration;

use super::WaitError;
use crate::clock::Timestamp;
use crate::direct;
use crate::gcra::{Gcra, MAX_NOW};
use crate::limiter;
use crate::table::Full;
use crate::timer::Sleep;

/// How long a waiter accepts to wait, fixed when it reserves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    Unbounded,
    /// At most this many nanoseconds after the reservation.
    Within(u64),
    /// Admitted no later than this timestamp.
    Until(u64),
}

impl Bound {
    fn latest(self, now: u64) -> u64 {
        match self {
            Bound::Unbounded => u64::MAX,
            Bound::Within(d) => now.saturating_add(d),
            Bound::Until(t) => t,
        }
    }
}

/// A reservation: the cells are counted from `admit_at` on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reserved {
    pub(crate) now: u64,
    pub(crate) admit_at: u64,
    /// The state this reservation wrote; a refund applies only while it is still there.
    tat: u64,
    /// `n·T` at reservation time (the quota may change before a refund).
    amount: u64,
    /// The limiter's removal epoch when this reserved: a refund after the key was forgotten
    /// (and perhaps checked back up to the same TAT) must not apply.
    epoch: u64,
}

/// What a waiter needs from the limiter it waits on.
pub(crate) trait Cells {
    /// Reserves `n` cells unless that would be admitted later than `bound` allows.
    fn reserve(&self, n: u32, bound: Bound) -> Result<Reserved, WaitError>;
    /// Gives back a reservation's cells if nothing was reserved after it.
    fn refund(&self, r: &Reserved);
    /// A sleep that ends at `at` on the limiter's clock (never before).
    fn sleep_until(&self, at: u64) -> Sleep;
    /// Counts a completed wait in the limiter's statistics.
    fn count_admitted(&self);
}

/// The reservation step on one stored TAT: `(write, verdict)` for the state CAS.
fn reserve_step(
    gcra: Gcra,
    now: u64,
    n: u32,
    latest: u64,
    epoch: u64,
) -> impl Fn(u64) -> (Option<u64>, Result<Reserved, u64>) {
    move |tat| {
        let (admit_at, new_tat) = gcra.reserve(tat, now, n);
        if admit_at > latest {
            return (None, Err(admit_at));
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

fn check_n(gcra: Gcra, n: u32) -> Result<(), WaitError> {
    if n > gcra.burst {
        return Err(WaitError::InsufficientCapacity {
            requested: n,
            burst: gcra.burst,
        });
    }
    Ok(())
}

fn too_long(now: u64, admit_at: u64) -> WaitError {
    WaitError::TooLong {
        earliest: Timestamp::from_nanos(admit_at),
        wait: Duration::from_nanos(admit_at - now),
    }
}

/// One key of a keyed limiter, by reference (`'a` futures) or by `Arc` (owned adapters).
#[derive(Debug, Clone)]
pub(crate) struct KeyCells<P> {
    pub(crate) shared: P,
    pub(crate) route: u64,
    pub(crate) fp: u64,
}

impl<P, S> Cells for KeyCells<P>
where
    P: Deref<Target = limiter::Shared<S>>,
    S: BuildHasher,
{
    fn reserve(&self, n: u32, bound: Bound) -> Result<Reserved, WaitError> {
        let shared = &*self.shared;
        let gcra = shared.quota.gcra();
        check_n(gcra, n)?;
        let now = shared.clock.now().as_nanos().min(MAX_NOW);
        // Read before reserving: a removal between here and the CAS only makes the refund
        // more cautious.
        let epoch = shared.table.removals(self.route);
        let step = reserve_step(gcra, now, n, bound.latest(now), epoch);
        match shared.update_key(self.route, self.fp, now, step) {
            Ok(Ok(reserved)) => Ok(reserved),
            Ok(Err(admit_at)) => {
                shared.counters.denied();
                Err(too_long(now, admit_at))
            }
            Err(Full) => Err(WaitError::TableFull {
                capacity: shared.table.capacity(),
            }),
        }
    }

    fn refund(&self, r: &Reserved) {
        // An absent key was forgotten after the reservation, which moved the removal epoch,
        // so the step writes nothing and this never inserts.
        let shared = &*self.shared;
        let epoch = || shared.table.removals(self.route);
        let _ = shared.update_key(self.route, self.fp, r.now, refund_step(*r, epoch));
    }

    fn sleep_until(&self, at: u64) -> Sleep {
        self.shared.clock.sleep_until(at)
    }

    fn count_admitted(&self) {
        self.shared.counters.admitted();
    }
}

/// A direct limiter, by reference or by `Arc`.
#[derive(Debug, Clone)]
pub(crate) struct DirectCells<P>(pub(crate) P);

impl<P: Deref<Target = direct::Shared>> Cells for DirectCells<P> {
    fn reserve(&self, n: u32, bound: Bound) -> Result<Reserved, WaitError> {
        let shared = &*self.0;
        let gcra = shared.quota.gcra();
        check_n(gcra, n)?;
        let now = shared.clock.now().as_nanos().min(MAX_NOW);
        let epoch = shared.resets();
        shared
            .update(reserve_step(gcra, now, n, bound.latest(now), epoch))
            .map_err(|admit_at| too_long(now, admit_at))
    }

    fn refund(&self, r: &Reserved) {
        let shared = &*self.0;
        shared.update(refund_step(*r, || shared.resets()));
    }

    fn sleep_until(&self, at: u64) -> Sleep {
        self.0.clock.sleep_until(at)
    }

    fn count_admitted(&self) {}
}
