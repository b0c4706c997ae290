//! [`Cells`]: what the waiting engine needs of a limiter beyond its state word
//! ([`Word`](crate::engine::Word)): a sleep on the limiter's timer, the key's queue, and an
//! owned handle for the timer to hold. Implemented once for a key of a keyed limiter
//! (`KeyState`) and once for a direct limiter (`DirectState`).

use std::hash::BuildHasher;
use std::ops::Deref;
use std::task::Waker;

use super::queue::HandOver;
use super::waitlist::WaitShard;
use crate::direct::{self, DirectState};
use crate::engine::{OwnedShared, Word};
use crate::limiter::{self, KeyState};
use crate::sync::Arc;
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

/// What the waiting engine needs from the limiter it waits on, besides its state word.
pub(crate) trait Cells: Word {
    /// A handle that owns the limiter's shared state, for the hand-over waker that the timer
    /// holds while the key's queue sleeps.
    type Owned: Cells + Send + Sync + 'static;

    fn owned(&self) -> Self::Owned;
    /// A sleep that ends when the limiter's clock reaches `at` (never before).
    fn sleep_until(&self, at: u64) -> Sleep;
    /// The waitlist shard that holds this key's queue, and the key's name in it.
    fn waitlist(&self) -> (&WaitShard, u64);
    /// The waker the key's queue sleeps with: it runs the hand-over (see `queue.rs`).
    fn hand_over_waker(&self) -> Waker {
        Waker::from(std::sync::Arc::new(HandOver(self.owned())))
    }
}

impl<P, S> Cells for KeyState<P>
where
    P: Deref<Target = Arc<limiter::Shared<S>>>,
    S: BuildHasher + Send + Sync + 'static,
{
    type Owned = KeyState<OwnedShared<limiter::Shared<S>>>;

    fn owned(&self) -> Self::Owned {
        KeyState {
            shared: OwnedShared(Arc::clone(&self.shared)),
            route: self.route,
            fp: self.fp,
        }
    }

    fn sleep_until(&self, at: u64) -> Sleep {
        self.shared.clock.sleep_until(at)
    }

    fn waitlist(&self) -> (&WaitShard, u64) {
        (self.shared.waitlists.shard(self.route), self.fp)
    }
}

/// A direct limiter's one queue has the name 0.
impl<P: Deref<Target = Arc<direct::Shared>>> Cells for DirectState<P> {
    type Owned = DirectState<OwnedShared<direct::Shared>>;

    fn owned(&self) -> Self::Owned {
        DirectState(OwnedShared(Arc::clone(&self.0)))
    }

    fn sleep_until(&self, at: u64) -> Sleep {
        self.0.clock.sleep_until(at)
    }

    fn waitlist(&self) -> (&WaitShard, u64) {
        (self.0.waitlists.shard(0), 0)
    }
}
