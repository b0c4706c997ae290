//! [`Waitlists`]: the side table of waiting queues, keyed like the limiter's state table but
//! touched only by waiters and hand-overs (`check` never looks at it).
//!
//! A limiter has a few shards, each a mutex over a map from a key's fingerprint to its queue
//! (a [`KeyQueue`], with its own lock). The map serves arrivals and waiters' drops and
//! bounds: the timer's wake goes straight to the queue (`key_queue.rs`, with the lock order
//! and the races on a queue's death). A
//! queue lives only while it has nodes: every operation kills the queue it leaves empty and
//! removes it from the map, so memory follows the keys that have waiters, and a shard's map
//! gives its memory back when it empties out. Every operation runs its queue logic under the
//! queue's lock, then wakes the tasks it settled after releasing it, so no task's code (a
//! waker) ever runs under a lock. No lock is held across an `.await`: the futures take them
//! only inside `poll` and `drop`.
//!
//! `busy` counts a shard's queues. It is only a hint that lets a wait on a key of an idle
//! shard try its cells lock-free (one CAS) before taking the lock; the hint being stale in
//! either direction is harmless (see `Waiter::poll_wait`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crossbeam_utils::CachePadded;

use super::cells::Cells;
use super::key_queue::{KeyQueue, QueueRef};
use super::node::{Node, Outcome};
use super::queue::Queue;
use super::woken::Woken;
use crate::sync::{Arc, AtomicUsize, Mutex, Ordering, lock};

/// Waitlist shards of a keyed limiter: enough that waiters on different keys rarely share a
/// lock, few enough that an idle limiter stays small.
pub(crate) const KEYED_SHARDS: usize = 16;

/// The queues of one limiter, sharded by the key's route hash.
#[derive(Debug)]
pub(crate) struct Waitlists {
    shards: Box<[CachePadded<WaitShard>]>,
}

impl Waitlists {
    pub(crate) fn new(shards: usize) -> Waitlists {
        Waitlists {
            shards: (0..shards.max(1))
                .map(|_| CachePadded::new(WaitShard::default()))
                .collect(),
        }
    }

    /// The shard of a key with this route hash.
    pub(crate) fn shard(&self, route: u64) -> &WaitShard {
        let i = ((u128::from(route) * self.shards.len() as u128) >> 64) as usize;
        &self.shards[i]
    }

    /// Bytes held, for the limiter's statistics (locks each shard briefly).
    pub(crate) fn bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| std::mem::size_of_val(shard) + shard.heap_bytes())
            .sum()
    }
}

/// One shard: a mutex over the map from a key's fingerprint to its queue.
#[derive(Debug, Default)]
pub(crate) struct WaitShard {
    queues: Mutex<HashMap<u64, QueueRef, FingerprintBuild>>,
    /// How many queues the map holds (a hint; module docs).
    busy: AtomicUsize,
}

impl WaitShard {
    /// No key of this shard has waiters (a hint: a queue may be made or emptied meanwhile).
    pub(crate) fn is_idle(&self) -> bool {
        // ordering: a hint that decides nothing by itself (module docs).
        self.busy.load(Ordering::Relaxed) == 0
    }

    /// Queues `node` on `key` at `now`, the time its caller read (see [`Queue::push`]), in
    /// the key's live queue, made if there is none.
    ///
    /// Takes the shard lock, then the queue's (the lock order, `key_queue.rs`).
    pub(crate) fn push<C: Cells>(
        &self,
        cells: &C,
        key: u64,
        node: &Arc<Node>,
        now: u64,
    ) -> Outcome {
        let mut woken = Woken::default();
        let out = {
            let mut queues = lock(&self.queues);
            let mut queue = std::sync::Arc::clone(queues.entry(key).or_insert_with(|| {
                // ordering: a hint (module docs).
                self.busy.fetch_add(1, Ordering::Relaxed);
                KeyQueue::make(cells, now)
            }));
            let mut locked = queue.lock();
            if locked.is_dead() {
                // Killed, its removal not done yet: this key's live queue is a new one. The
                // killer's removal will find this one under the key and leave it. (Checked
                // under the lock we push under: a live queue may die until we hold it.)
                drop(locked);
                queue = KeyQueue::make(cells, now);
                queues.insert(key, std::sync::Arc::clone(&queue));
                locked = queue.lock();
            }
            let outcome = locked.push(cells, node, now, &mut woken);
            if locked.kill_if_empty() {
                drop(locked);
                self.remove_locked(&mut queues, key);
            }
            outcome
        };
        woken.wake();
        out
    }

    /// `node`'s future is gone (see [`Queue::cancel`]).
    pub(crate) fn cancel(&self, cells: &impl Cells, key: u64, node: &Arc<Node>) {
        let _ = self.with_live(cells, key, |queue, now, woken| {
            queue.cancel(cells, node, now, woken)
        });
    }

    /// `node`'s bound has passed (see [`Queue::expire`]).
    pub(crate) fn expire(&self, cells: &impl Cells, key: u64, node: &Arc<Node>) -> Outcome {
        self.with_live(cells, key, |queue, now, woken| {
            queue.expire(cells, node, now, woken)
        })
        // No live queue: the node was settled and its queue emptied since the caller looked.
        .unwrap_or_else(|| node.outcome())
    }

    /// Runs `f` on `key`'s live queue, if there is one, under the shard lock and then the
    /// queue's (the lock order), at the clock read under them; removes the queue if `f`
    /// leaves it empty, and wakes the settled tasks once both locks are released. A waiter's
    /// drop and bound come this way: they are rare, and a waiter that held a reference to
    /// its queue instead would cost every wait two RMWs on the queue's first line, which the
    /// hand-over's thread writes.
    fn with_live<R>(
        &self,
        cells: &impl Cells,
        key: u64,
        f: impl FnOnce(&mut Queue, u64, &mut Woken) -> R,
    ) -> Option<R> {
        let mut woken = Woken::default();
        let out = {
            let mut queues = lock(&self.queues);
            let queue = std::sync::Arc::clone(queues.get(&key)?);
            let mut locked = queue.lock();
            if locked.is_dead() {
                return None; // Its killer will unmap it; its nodes were all settled.
            }
            let out = f(&mut locked, cells.now(), &mut woken);
            if locked.kill_if_empty() {
                drop(locked);
                self.remove_locked(&mut queues, key);
            }
            out
        };
        woken.wake();
        Some(out)
    }

    /// Removes `key`'s queue from the map if it is still the one at `queue` (its killer's
    /// removal, after the queue lock is released: `key_queue.rs`).
    pub(crate) fn remove(&self, key: u64, queue: *const ()) {
        let mut queues = lock(&self.queues);
        if queues
            .get(&key)
            .is_some_and(|live| std::sync::Arc::as_ptr(live).cast::<()>() == queue)
        {
            self.remove_locked(&mut queues, key);
        }
    }

    fn remove_locked(&self, queues: &mut HashMap<u64, QueueRef, FingerprintBuild>, key: u64) {
        queues.remove(&key);
        // ordering: a hint (module docs).
        self.busy.fetch_sub(1, Ordering::Relaxed);
        // Shrink to twice the queues once they fill under an eighth: amortised O(1) per
        // removal, and an emptied shard holds no map at all.
        let len = queues.len();
        if len * 8 < queues.capacity() {
            queues.shrink_to(len * 2);
        }
    }

    fn heap_bytes(&self) -> usize {
        let queues = lock(&self.queues);
        // Shard lock, then each queue's: the lock order.
        let held: usize = queues.values().map(|queue| queue.bytes()).sum();
        queues.capacity() * (std::mem::size_of::<(u64, QueueRef)>() + 1) + held
    }
}

type FingerprintBuild = BuildHasherDefault<FingerprintHasher>;

/// Keys of the waitlist maps are already random 64-bit fingerprints: use them as they are.
#[derive(Debug, Default)]
pub(crate) struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}
