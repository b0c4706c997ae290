//! [`Waitlists`]: the side table of waiting queues, keyed like the limiter's state table but
//! touched only by waiters and hand-overs (`check` never looks at it).
//!
//! A limiter has a few shards, each a mutex over a map from a key's fingerprint to its
//! [`Queue`]. A queue exists only while it has nodes: every operation removes the queue it
//! leaves empty, so memory follows the keys that have waiters, and a shard's map gives its
//! memory back when it empties out. Every operation runs its queue logic under the shard
//! lock, then wakes the tasks it settled after releasing it, so no task's code (a waker)
//! ever runs under the lock. No lock is held across an `.await`: the futures take it only
//! inside `poll` and `drop`.
//!
//! `busy` counts a shard's queues. It is only a hint that lets a wait on a key of an idle
//! shard try its cells lock-free (one CAS) before taking the lock; the hint being stale in
//! either direction is harmless (see `Waiter::poll_wait`).

use super::cells::Cells;
use super::node::{Node, Outcome};
use super::queue::Queue;
use super::woken::Woken;
use crate::sharded::{HashKeyed, Sharded};
use crate::sync::{Arc, AtomicUsize, Mutex, Ordering, lock};

/// Waitlist shards of a keyed limiter: enough that waiters on different keys rarely share a
/// lock, few enough that an idle limiter stays small.
pub(crate) const KEYED_SHARDS: usize = 16;

/// The queues of one limiter, sharded by the key's route hash.
#[derive(Debug)]
pub(crate) struct Waitlists {
    shards: Sharded<WaitShard>,
}

impl Waitlists {
    pub(crate) fn new(shards: usize) -> Waitlists {
        Waitlists {
            shards: Sharded::new(shards),
        }
    }

    /// The shard of a key with this route hash.
    pub(crate) fn shard(&self, route: u64) -> &WaitShard {
        self.shards.get(route)
    }

    /// Bytes held, for the limiter's statistics (locks each shard briefly).
    pub(crate) fn bytes(&self) -> usize {
        self.shards.shallow_bytes() + self.shards.iter().map(WaitShard::heap_bytes).sum::<usize>()
    }
}

/// One shard: a mutex over its queues.
#[derive(Debug, Default)]
pub(crate) struct WaitShard {
    queues: Mutex<HashKeyed<Queue>>,
    /// How many queues the map holds (a hint; module docs).
    busy: AtomicUsize,
}

impl WaitShard {
    /// No key of this shard has waiters (a hint: a queue may be made or emptied meanwhile).
    pub(crate) fn is_idle(&self) -> bool {
        // ordering: a hint that decides nothing by itself (module docs).
        self.busy.load(Ordering::Relaxed) == 0
    }

    /// Queues `node` on `key` at `now`, the time its caller read (see [`Queue::push`]).
    pub(crate) fn push(&self, cells: &impl Cells, key: u64, node: &Arc<Node>, now: u64) -> Outcome {
        self.with_queue(cells, key, Some(now), |queue, now, woken| {
            queue.push(cells, node, now, woken)
        })
        .expect("made on demand")
    }

    /// `node`'s future is gone (see [`Queue::cancel`]).
    pub(crate) fn cancel(&self, cells: &impl Cells, key: u64, node: &Arc<Node>) {
        let _ = self.with_queue(cells, key, None, |queue, now, woken| {
            queue.cancel(cells, node, now, woken)
        });
    }

    /// `node`'s bound has passed (see [`Queue::expire`]).
    pub(crate) fn expire(&self, cells: &impl Cells, key: u64, node: &Arc<Node>) -> Outcome {
        self.with_queue(cells, key, None, |queue, now, woken| {
            queue.expire(cells, node, now, woken)
        })
        // No queue: the node was settled and its queue emptied since the caller looked.
        .unwrap_or_else(|| node.outcome())
    }

    /// A penalty stored state `penalized` for `key` (see [`Queue::penalized`]).
    pub(crate) fn penalized(&self, cells: &impl Cells, key: u64, penalized: u64) {
        let _ = self.with_queue(cells, key, None, |queue, now, woken| {
            queue.penalized(cells, penalized, now, woken)
        });
    }

    /// The timer fired `key`'s queue (see [`Queue::advance`]). A queue that emptied since it
    /// registered its sleep is gone, and a newer queue of the same key just re-checks its
    /// head: a stale wake is harmless.
    pub(crate) fn hand_over(&self, cells: &impl Cells, key: u64) {
        let _ = self.with_queue(cells, key, None, |queue, now, woken| {
            queue.advance(cells, now, woken)
        });
    }

    /// Runs `f` on `key`'s queue under the lock, removes the queue if `f` left it empty, and
    /// wakes the settled tasks after unlocking. `make_at`: make the queue if there is none,
    /// and run at that time (a waiter's first poll, which has just read the clock); without
    /// it, `f` runs at the clock read under the lock, so that hand-overs see time move
    /// forward.
    fn with_queue<R>(
        &self,
        cells: &impl Cells,
        key: u64,
        make_at: Option<u64>,
        f: impl FnOnce(&mut Queue, u64, &mut Woken) -> R,
    ) -> Option<R> {
        let mut woken = Woken::default();
        let out = {
            let mut queues = lock(&self.queues);
            let now = make_at.unwrap_or_else(|| cells.now());
            let queue = if make_at.is_some() {
                queues.entry(key).or_insert_with(|| {
                    // ordering: a hint (module docs).
                    self.busy.fetch_add(1, Ordering::Relaxed);
                    Queue::new(now)
                })
            } else {
                queues.get_mut(&key)?
            };
            let out = f(queue, now, &mut woken);
            if queue.is_empty() {
                queues.remove(&key);
                // ordering: a hint (module docs).
                self.busy.fetch_sub(1, Ordering::Relaxed);
                // Shrink to twice the queues once they fill under an eighth: amortised O(1)
                // per removal, and an emptied shard holds no map at all.
                let len = queues.len();
                if len * 8 < queues.capacity() {
                    queues.shrink_to(len * 2);
                }
            }
            out
        };
        woken.wake();
        Some(out)
    }

    fn heap_bytes(&self) -> usize {
        let queues = lock(&self.queues);
        let nodes: usize = queues.values().map(Queue::bytes).sum();
        queues.capacity() * (std::mem::size_of::<(u64, Queue)>() + 1) + nodes
    }
}
