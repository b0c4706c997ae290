//! [`Cells`]: what the waiting engine needs of a limiter beyond its state word
//! ([`Word`](crate::engine::Word)): a sleep on the limiter's timer, the key's queue, and an
//! owned handle for the timer to hold. Implemented once for a key of a keyed limiter
//! (`limiter/wait.rs`) and once for a direct limiter (`direct/wait.rs`).

use std::task::Waker;

use super::queue::HandOver;
use super::waitlist::WaitShard;
use crate::engine::{self, Word};
use crate::gcra::MAX_NOW;
use crate::table::Full;
use crate::timer::Sleep;

/// How long a wait sleeps before it reads a foreign clock again that stood a hair short of
/// its instant ([`Cells::sleep_again`]): well under the timer's own lateness.
pub(crate) const RESLEEP: std::time::Duration = std::time::Duration::from_micros(100);

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
    /// The latest admission instant accepted by a waiter first polled at `now`. A deadline
    /// already past is a wait of zero (`now`): a free cell is admitted, as by a check. Were
    /// it kept in the past, the queued path would refuse what the lock-free first try admits,
    /// with a wait of 0 ns, depending only on whether another key's queue shares the shard.
    ///
    /// A bound is at most `MAX_NOW`, the limiter's last instant (its clock saturates there):
    /// a bound after it would never pass, and a wait whose instant lies after it, which could
    /// never come, is refused up front instead of waiting for ever. A bound of `u64::MAX`
    /// (`within(Duration::MAX)`, `until` the last timestamp) is no bound, as before.
    pub(crate) fn latest(self, now: u64) -> u64 {
        let latest = match self {
            Bound::Unbounded => return u64::MAX,
            Bound::Within(d) => now.saturating_add(d),
            Bound::Until(t) => t.max(now),
        };
        if latest == u64::MAX {
            latest
        } else {
            latest.min(MAX_NOW)
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
    /// Pushes the word's next admission at least `delay` nanoseconds past now (the engine's
    /// `penalize`), the queue's head's too: a head that reserved before the penalty reserves
    /// again after it (`Queue::penalized`).
    fn penalize(&self, delay: u64) -> Result<(), Full>
    where
        Self: Sized,
    {
        let now = self.now();
        if let Some(penalized) = engine::penalize(self, self.quota(), now, delay)? {
            let (shard, key) = self.waitlist();
            shard.penalized(self, key, penalized);
        }
        Ok(())
    }

    /// [`sleep_until`](Cells::sleep_until) for a wait whose earlier sleep ended with the
    /// limiter's clock still short of `at`, which only a foreign clock slower than real time
    /// does (its sleeps are in real time, for what it said was left). One that stands a hair
    /// short would make sleeps of the nanoseconds left, each ended at once, and the wait would
    /// spin re-reading it: such a sleep lasts [`RESLEEP`] of real time instead. (On
    /// tollgate's own clocks the timer's time is the clock's: a sleep that has ended means
    /// the clock has reached `at`, and it is kept as it is.)
    fn sleep_again(&self, at: u64) -> Sleep {
        let sleep = self.sleep_until(at);
        if !self.clock_is_timer() && sleep.is_elapsed() {
            crate::timer::sleep(RESLEEP)
        } else {
            sleep
        }
    }
    /// The limiter's clock is the time of the timer its sleeps register with (tollgate's own
    /// clocks), so a reading of one is a reading of the other ([`Sleep::poll_at`]).
    fn clock_is_timer(&self) -> bool;
    /// The waitlist shard that holds this key's queue, and the key's name in it.
    fn waitlist(&self) -> (&WaitShard, u64);
    /// The waker the key's queue sleeps with: it runs the hand-over (see `queue.rs`).
    fn hand_over_waker(&self) -> Waker {
        Waker::from(std::sync::Arc::new(HandOver(self.owned())))
    }
}
