//! [`Node`]: one queued waiter, shared by its future and its key's queue.
//!
//! # States
//!
//! `outcome` is one packed word, `{ payload:60 | tag:4 }`, and leaves `QUEUED` exactly once:
//!
//! ```text
//!   QUEUED --hand-over admits it----------------> ADMITTED
//!   QUEUED --hand-over finds it cannot be met---> FAILED { TOO_LONG(admit_at) | TABLE_FULL
//!                                                          | OVER_BURST(burst) }
//!   QUEUED --its future is dropped or expires---> CANCELLED
//! ```
//!
//! # Who writes what
//!
//! * `n`, `latest`, `since`, `quota` and `cost` are immutable.
//! * `outcome` is written **only under the lock of the waitlist shard** that holds the node's
//!   queue: by a hand-over (to `ADMITTED` or `FAILED`) or by the node's own future (to
//!   `CANCELLED`). The lock orders those writes; the atomic exists so that the future can read
//!   its outcome on every poll without taking the lock.
//! * `waker` is registered by the future and taken by the hand-over that settles the node.
//!   The future registers, then re-reads `outcome`; the hand-over stores `outcome`, then takes
//!   the waker. `AtomicWaker`'s protocol makes a poll either see the settled outcome or have
//!   its waker taken and woken (`Node::poll_outcome`, `Node::settle`).

use std::task::{Context, Waker};

pub(crate) use crate::engine::Failure;
use crate::gcra::Gcra;
use crate::sync::{AtomicU64, AtomicWaker, Ordering};

/// `outcome` tags (low 4 bits); the payload is the high 60 bits.
const QUEUED: u64 = 0;
const ADMITTED: u64 = 1;
const CANCELLED: u64 = 2;
const TOO_LONG: u64 = 3;
const TABLE_FULL: u64 = 4;
const OVER_BURST: u64 = 5;
const TAG_BITS: u32 = 4;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

/// What a node's outcome word says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Queued,
    Admitted,
    Cancelled,
    Failed(Failure),
}

impl Outcome {
    fn pack(self) -> u64 {
        match self {
            Outcome::Queued => QUEUED,
            Outcome::Admitted => ADMITTED,
            Outcome::Cancelled => CANCELLED,
            // admit_at <= MAX_TAT < 2^60: it fits the payload.
            Outcome::Failed(Failure::TooLong { admit_at }) => (admit_at << TAG_BITS) | TOO_LONG,
            Outcome::Failed(Failure::TableFull) => TABLE_FULL,
            Outcome::Failed(Failure::OverBurst { burst }) => {
                (u64::from(burst) << TAG_BITS) | OVER_BURST
            }
        }
    }

    fn unpack(word: u64) -> Outcome {
        let payload = word >> TAG_BITS;
        match word & TAG_MASK {
            QUEUED => Outcome::Queued,
            ADMITTED => Outcome::Admitted,
            CANCELLED => Outcome::Cancelled,
            TOO_LONG => Outcome::Failed(Failure::TooLong { admit_at: payload }),
            TABLE_FULL => Outcome::Failed(Failure::TableFull),
            OVER_BURST => Outcome::Failed(Failure::OverBurst {
                burst: payload as u32,
            }),
            tag => unreachable!("no outcome has tag {tag}"),
        }
    }
}

/// One waiter in a key's FIFO queue.
#[derive(Debug)]
pub(crate) struct Node {
    /// Cells asked for (`1 <= n`).
    pub(crate) n: u32,
    /// The latest admission instant its bound accepts (`u64::MAX`: unbounded).
    pub(crate) latest: u64,
    /// When it was queued: how long it has waited sets how late the timer may wake it.
    pub(crate) since: u64,
    /// The quota it asked under; `None`: the limiter's, whatever it is when it reserves.
    pub(crate) quota: Option<Gcra>,
    /// `n·T` under its quota when it was queued: its share of a later waiter's prediction.
    pub(crate) cost: u64,
    /// `{ payload:60 | tag:4 }`, see the module docs.
    outcome: AtomicU64,
    waker: AtomicWaker,
}

impl Node {
    pub(crate) fn new(n: u32, latest: u64, since: u64, quota: Option<Gcra>, cost: u64) -> Node {
        Node {
            n,
            latest,
            since,
            quota,
            cost,
            outcome: AtomicU64::new(QUEUED),
            waker: AtomicWaker::new(),
        }
    }

    /// The outcome as last settled.
    pub(crate) fn outcome(&self) -> Outcome {
        // ordering: Acquire pairs with `settle`'s Release store: a future that sees ADMITTED
        // also sees everything the hand-over did before (the reservation's CAS among it).
        Outcome::unpack(self.outcome.load(Ordering::Acquire))
    }

    /// Whether the node still waits in its queue (under the shard lock this is exact).
    pub(crate) fn is_queued(&self) -> bool {
        self.outcome() == Outcome::Queued
    }

    /// The future's poll: the outcome, with `cx`'s waker registered first if it is still
    /// `Queued`, so a settle that comes after this returns wakes it.
    pub(crate) fn poll_outcome(&self, cx: &Context<'_>) -> Outcome {
        match self.outcome() {
            Outcome::Queued => {}
            settled => return settled,
        }
        // Register, then re-check: a settle whose take came before this register is seen by
        // the load below (it stored the outcome before taking); a later one takes our waker.
        self.waker.register(cx.waker());
        self.outcome()
    }

    /// Settles a queued node (under its shard's lock) and returns its task's waker, for the
    /// caller to wake once it has released the lock.
    pub(crate) fn settle(&self, outcome: Outcome) -> Option<Waker> {
        debug_assert!(self.is_queued() && outcome != Outcome::Queued);
        // ordering: Release publishes the hand-over's work to the future's Acquire load;
        // the write itself is serialised with every other write of `outcome` by the shard
        // lock (module docs).
        self.outcome.store(outcome.pack(), Ordering::Release);
        if outcome == Outcome::Cancelled {
            return None; // The future cancels itself: nobody to wake.
        }
        self.waker.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcra::MAX_TAT;

    #[test]
    fn outcomes_round_trip_through_the_word() {
        for outcome in [
            Outcome::Queued,
            Outcome::Admitted,
            Outcome::Cancelled,
            Outcome::Failed(Failure::TooLong { admit_at: 0 }),
            Outcome::Failed(Failure::TooLong { admit_at: MAX_TAT }),
            Outcome::Failed(Failure::TableFull),
            Outcome::Failed(Failure::OverBurst { burst: u32::MAX }),
        ] {
            assert_eq!(Outcome::unpack(outcome.pack()), outcome);
        }
    }
}
