//! [`KeyQueue`]: one key's [`Queue`] in one allocation, under a lock of its own, and the
//! waker its head's sleep registers with the timer.
//!
//! # Design
//!
//! A `KeyQueue` holds a key's queue behind its own mutex and the limiter handle its hand-over
//! needs (an owned [`Cells`]), and it is itself the waker that the head's sleep hands the
//! timer. So the timer's wake goes straight to the queue: no waitlist map lookup and no shard
//! lock on the hand-over's path, and one allocation for what used to be three cold objects
//! (the hand-over waker, the map bucket holding the queue, and the map's control bytes). The
//! waitlist shard's map (`waitlist.rs`) finds a key's queue for arrivals, and for a waiter's
//! drop or bound (rare: a waiter that held a reference to its queue instead would cost every
//! wait two RMWs on the queue's first line, which the hand-over's thread writes).
//!
//! # States
//!
//! ```text
//!   live --an operation leaves the queue empty (under the queue lock)--> dead
//! ```
//!
//! A dead queue is never used again: every operation on it is refused (`run` returns
//! `None`), so a stale timer wake, or a waiter's drop or bound after its node was settled,
//! does nothing. Who may write what:
//!
//! * The `Queue` (with its `dead` flag) is read and written only under `queue`'s lock.
//! * A shard's map is written only under the shard's lock. It holds a key's live queue, or a
//!   dead one not yet removed, or nothing.
//!
//! # Lock order
//!
//! **Shard lock, then queue lock**; never the other way round. An arrival, a waiter's drop
//! and a waiter's bound take both (`WaitShard::push`, `WaitShard::with_live`): they find the
//! queue under the shard lock, then lock it, and remove it from the map at once if they kill
//! it. The timer's wake takes the queue lock alone (`KeyQueue::run`), and if it kills the
//! queue it releases that lock before it takes the shard lock to remove the map entry
//! (`WaitShard::remove`).
//!
//! # Races handled on purpose
//!
//! * *An arrival finds a dead queue in the map* (killed by the timer's wake, its removal not
//!   yet done): it puts a new queue in its place, under the shard lock. (A waiter's drop or
//!   bound that finds it does nothing: its node was settled before the queue emptied.) The killer's removal then finds another
//!   queue under the key and leaves it: it removes the entry only if it is still the queue it
//!   killed, compared by address. The killer holds a reference to its queue until the removal
//!   is done, so no new queue can have been allocated at that address meanwhile.
//! * *The timer fires a dead queue's sleep* (the queue emptied after the head registered, and
//!   the timer had taken the waker already): the wake finds it dead and returns.
//! * *The timer's wake vs an arrival or a drop on a live queue*: serialised by the queue
//!   lock; the arrival's `dead` check is made under the lock it pushes under, since a live
//!   queue may die until then.
//! * *A waiter's drop or bound vs the hand-over that settles it*: both run under the queue
//!   lock; the loser sees the node settled (`Queue::cancel`, `Queue::expire`).
//!
//! The queue holds its own waker (`Queue::set_hand_over`), a reference cycle that keeps the
//! queue alive while it is live; killing the queue drops that waker, so a dead queue is freed
//! once the map and the timer have let it go.
//!
//! The waker is a `std::sync::Arc` (`Wake` needs one), also under loom; the limiter handle
//! inside it holds the crate's `Arc`, so loom's leak check still sees a queue that is never
//! freed.

use std::fmt;
use std::task::{Wake, Waker};

use super::cells::Cells;
use super::queue::Queue;
use super::woken::Woken;
use crate::sync::{Mutex, MutexGuard, lock};

/// A key's queue, as the waitlist map holds it.
pub(crate) type QueueRef = std::sync::Arc<KeyQueue<dyn Send + Sync>>;

/// One key's queue, its lock, and the limiter handle its hand-over runs with (module docs).
/// `C` is the owned [`Cells`] of the key; the map sees it as `dyn Send + Sync`, since the
/// operations that come through the map bring their own `Cells`.
pub(crate) struct KeyQueue<C: ?Sized> {
    queue: Mutex<Queue>,
    cells: C,
}

impl KeyQueue<()> {
    /// A new live queue of `cells`' key, whose first head will reserve at `now`, with its
    /// hand-over waker in place.
    pub(crate) fn make<C: Cells>(cells: &C, now: u64) -> QueueRef {
        let queue = std::sync::Arc::new(KeyQueue {
            queue: Mutex::new(Queue::new(now)),
            cells: cells.owned(),
        });
        let waker = Waker::from(std::sync::Arc::clone(&queue));
        // Not shared yet: the lock is uncontended.
        lock(&queue.queue).set_hand_over(waker);
        queue
    }
}

impl<C: ?Sized> KeyQueue<C> {
    /// The queue, locked. Callers that hold a shard lock may take it (lock order above).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Queue> {
        lock(&self.queue)
    }

    /// The address that names this queue in its shard's map (module docs).
    pub(crate) fn addr(&self) -> *const () {
        (self as *const Self).cast()
    }

    /// The timer's path: runs `f` on the live queue under its lock alone, at the clock read
    /// under the lock (so that hand-overs see time move forward); kills the queue if `f`
    /// leaves it empty and removes it from `cells`' shard once the lock is released; then
    /// wakes the tasks `f` settled. `None`: the queue is dead and `f` did not run.
    fn run<R>(
        &self,
        cells: &impl Cells,
        f: impl FnOnce(&mut Queue, u64, &mut Woken) -> R,
    ) -> Option<R> {
        let mut woken = Woken::default();
        let (out, killed) = {
            let mut queue = self.lock();
            if queue.is_dead() {
                return None;
            }
            let now = cells.now();
            let out = f(&mut queue, now, &mut woken);
            (out, queue.kill_if_empty())
        };
        if killed {
            // Queue lock released: the shard lock may be taken (lock order).
            let (shard, key) = cells.waitlist();
            shard.remove(key, self.addr());
        }
        woken.wake();
        Some(out)
    }

    /// Heap bytes held by the queue and its nodes, with this allocation.
    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of_val(self) + self.lock().bytes()
    }
}

impl<C: ?Sized> fmt::Debug for KeyQueue<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyQueue").finish_non_exhaustive()
    }
}

/// The timer fired the head's sleep: run the hand-over on the waking thread.
impl<C: Cells + Send + Sync + 'static> Wake for KeyQueue<C> {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        let cells = &self.cells;
        // A dead queue: a stale wake, harmless (module docs).
        let _ = self.run(cells, |queue, now, woken| queue.advance(cells, now, woken));
    }
}
