//! The per-key concurrency table: a key's count of permits out and its FIFO of waiters.
//!
//! # Design
//!
//! A few shards, each a **mutex** over a map from a key's identity hash to its [`KeyState`]:
//! `{ out, queue, cancelled }`. Unlike the rate table this is not lock-free, on purpose: a
//! permit is taken and given back around a request (a connection, an HTTP round trip), not on
//! a per-packet hot path, and every operation must update the count and the queue together.
//! One short critical section per acquire and per release (a hash-map probe, an increment, a
//! few pointer moves) is cheaper than any lock-free queue would be, and simple to reason
//! about. No lock is held across an `.await` and no task's code runs under a lock: wakers of
//! granted waiters are collected under the lock and woken after it is released.
//!
//! A key has an entry only while it has permits out or waiters: every operation removes the
//! entry it leaves idle (`out == 0`, no queue), so memory follows the busy keys, and a shard
//! whose map has emptied out gives most of its capacity back.
//!
//! # States of a waiter ([`Node`])
//!
//! ```text
//!   QUEUED --a release (or a cancel ahead of it) finds room--> GRANTED
//!   QUEUED --its future is dropped----------------------------> CANCELLED
//! ```
//!
//! `state` is written **only under the shard lock** (by a grant, or by the node's own future
//! on drop), so under the lock it is exact. The future reads it lock-free on each poll.
//! The future registers its waker, then re-reads `state`; a grant stores `state`, then
//! takes the waker: so a poll either sees `GRANTED` or has its waker taken and woken
//! (`Node::poll`, `Node::grant`). This is the race the loom model "poll vs release" checks;
//! a first poll runs the same protocol right after it queues (it registers only once the
//! lock is released), so every poll races grants the same way.
//!
//! # Invariants, between operations (under the lock)
//!
//! * `out` is the number of permits of the key that exist (granted to a future or held as
//!   [`Permit`](super::Permit)s), `out <= ` the largest limit any of them was granted under.
//! * `waiters` is `Some` exactly while the queue is not empty (a key with permits out and
//!   nobody waiting, the common busy key, is 16 bytes and allocates nothing).
//! * The front of `queue`, if any, is `QUEUED`, and `out >= front.max`: a waiter is never
//!   left queued while there is room for it (the grant loop runs after every operation that
//!   frees room or unlinks the front). So a new arrival or a `try_acquire` may take a permit
//!   only when the queue is empty: no barging.
//! * `cancelled` counts `CANCELLED` nodes still linked; they are unlinked when they reach the
//!   front, or all at once when they are more than half the queue (amortised O(1) each).
//! * `out == 0` implies the queue is empty (its front would have been granted), so "idle" is
//!   `out == 0`.

use std::collections::VecDeque;
use std::task::{Context, Waker};

use crate::sharded::{HashKeyed, Sharded};
use crate::sync::{Arc, AtomicUsize, AtomicWaker, Mutex, Ordering, lock};

/// Node states.
const QUEUED: usize = 0;
const GRANTED: usize = 1;
const CANCELLED: usize = 2;

/// Cancelled nodes are compacted away once there are at least this many (and they are more
/// than half the queue).
const COMPACT_MIN: usize = 16;

/// A shard's map keeps at least this much capacity when it empties, so that one hot key
/// does not allocate and free the map on every acquire/release pair.
const KEEP_CAPACITY: usize = 32;

/// Shards of the table: enough that two cores rarely meet on a lock for different keys.
/// Loom models use one, so that every key races on the same lock.
#[cfg(not(tollgate_loom))]
const SHARDS: usize = 64;
#[cfg(tollgate_loom)]
const SHARDS: usize = 1;

/// One queued acquire, shared by its future and its key's queue.
#[derive(Debug)]
pub(crate) struct Node {
    /// The limit it asked under: it is granted when fewer than `max` permits are out.
    max: usize,
    /// `QUEUED`, `GRANTED` or `CANCELLED` (module docs).
    state: AtomicUsize,
    waker: AtomicWaker,
}

impl Node {
    fn new(max: usize) -> Node {
        Node {
            max,
            state: AtomicUsize::new(QUEUED),
            waker: AtomicWaker::new(),
        }
    }

    fn state(&self) -> usize {
        // ordering: Acquire pairs with `grant`'s Release store; what a grant wrote before it
        // (nothing the future reads today, but the permit's count under the lock) is visible.
        self.state.load(Ordering::Acquire)
    }

    /// The future's poll: whether it was granted, with `cx`'s waker registered first if not,
    /// so a grant that comes after this returns wakes it.
    pub(crate) fn poll(&self, cx: &Context<'_>) -> bool {
        if self.state() == GRANTED {
            return true;
        }
        // Register, then re-check: a grant whose take came before this register stored
        // GRANTED before it, and the load below sees it; a later grant takes our waker.
        self.waker.register(cx.waker());
        self.state() == GRANTED
    }

    /// Grants a queued node (under the shard lock) and returns its waker, for the caller to
    /// wake once the lock is released.
    fn grant(&self) -> Option<Waker> {
        debug_assert_eq!(self.state(), QUEUED);
        // ordering: Release publishes the grant to the future's Acquire load; the write is
        // serialised with the future's own CANCELLED store by the shard lock.
        self.state.store(GRANTED, Ordering::Release);
        self.waker.take()
    }
}

/// One key's permits and waiters. Only touched under its shard's lock.
///
/// 16 bytes: most busy keys have permits out and nobody waiting, so the queue is boxed and
/// made only when someone waits (and dropped when the queue empties).
#[derive(Debug, Default)]
struct KeyState {
    /// Permits out.
    out: usize,
    /// `Some` exactly while someone waits: then its queue is not empty.
    waiters: Option<Box<Waiters>>,
}

/// A key's FIFO of waiters.
#[derive(Debug, Default)]
struct Waiters {
    /// Waiters in arrival order, cancelled ones not yet unlinked (the front never is).
    queue: VecDeque<Arc<Node>>,
    /// Cancelled nodes still linked.
    cancelled: usize,
}

impl KeyState {
    /// The grant loop: unlinks cancelled nodes at the front and grants each front node in
    /// turn while there is room for it; drops the queue once it empties. Restores the
    /// module's invariants.
    fn grant(&mut self, woken: &mut Vec<Waker>) {
        let Some(waiters) = &mut self.waiters else {
            return;
        };
        while let Some(front) = waiters.queue.front() {
            match front.state() {
                CANCELLED => {
                    waiters.queue.pop_front();
                    waiters.cancelled -= 1;
                }
                _ if self.out < front.max => {
                    self.out += 1;
                    let front = waiters.queue.pop_front().expect("a front node");
                    woken.extend(front.grant());
                }
                _ => return,
            }
        }
        self.waiters = None;
    }

    fn waiting(&self) -> usize {
        self.waiters
            .as_ref()
            .map_or(0, |w| w.queue.len() - w.cancelled)
    }
}

impl Waiters {
    /// Unlinks cancelled nodes once they are more than half the queue (module docs).
    fn compact(&mut self) {
        if self.cancelled >= COMPACT_MIN && 2 * self.cancelled > self.queue.len() {
            self.queue.retain(|node| node.state() != CANCELLED);
            self.cancelled = 0;
        }
    }
}

/// What a first poll found.
pub(crate) enum Arrival {
    /// A permit, taken at once.
    Permit,
    /// Queued behind others, or at the limit, with no waker yet: the caller registers it
    /// with [`Node::poll`] once the lock is released (a grant may already have come).
    Queued(Arc<Node>),
}

/// The sharded table of busy keys.
#[derive(Debug)]
pub(crate) struct Table {
    shards: Sharded<Shard>,
}

#[derive(Debug, Default)]
struct Shard {
    keys: Mutex<HashKeyed<KeyState>>,
}

impl Table {
    pub(crate) fn new() -> Table {
        Table {
            shards: Sharded::new(SHARDS),
        }
    }

    fn shard(&self, key: u64) -> &Shard {
        // The map inside a shard indexes by the hash's low bits: route by a multiply's top
        // bits, so the two choices are unrelated.
        self.shards.get(key.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// Runs `f` on `key`'s state under the lock (making it if `make`), removes the state if
    /// `f` left the key idle, and wakes the granted tasks after unlocking.
    fn with_key<R>(
        &self,
        key: u64,
        make: bool,
        f: impl FnOnce(&mut KeyState, &mut Vec<Waker>) -> R,
    ) -> Option<R> {
        let mut woken = Vec::new();
        let out = {
            let mut keys = lock(&self.shard(key).keys);
            let state = if make {
                keys.entry(key).or_default()
            } else {
                keys.get_mut(&key)?
            };
            let out = f(state, &mut woken);
            if state.out == 0 {
                debug_assert!(state.waiters.is_none());
                keys.remove(&key);
                let (len, cap) = (keys.len(), keys.capacity());
                if cap > KEEP_CAPACITY && len * 8 < cap {
                    keys.shrink_to((len * 2).max(KEEP_CAPACITY));
                }
            }
            out
        };
        for waker in woken {
            waker.wake();
        }
        Some(out)
    }

    /// A first poll: a permit if nobody waits and fewer than `max` are out, else a queued
    /// node. The node's waker is registered after unlocking: cloning a waker runs the
    /// executor's code, which never runs under the lock.
    pub(crate) fn arrive(&self, key: u64, max: usize) -> Arrival {
        self.with_key(key, true, |state, _| {
            if state.waiters.is_none() && state.out < max {
                state.out += 1;
                Arrival::Permit
            } else {
                let node = Arc::new(Node::new(max));
                let waiters = state.waiters.get_or_insert_with(Box::default);
                waiters.queue.push_back(Arc::clone(&node));
                Arrival::Queued(node)
            }
        })
        .expect("made on demand")
    }

    /// A permit if nobody waits and fewer than `max` are out; never queues.
    pub(crate) fn try_take(&self, key: u64, max: usize) -> bool {
        self.with_key(key, true, |state, _| {
            let ok = state.waiters.is_none() && state.out < max;
            state.out += usize::from(ok);
            ok
        })
        .expect("made on demand")
    }

    /// A permit of `key` is given back.
    pub(crate) fn release(&self, key: u64) {
        self.with_key(key, false, |state, woken| {
            state.out -= 1;
            state.grant(woken);
        })
        .expect("a permit out keeps its key's state");
    }

    /// `node`'s future is dropped: unlink it if it is still queued, or give back the permit
    /// it was granted and never took.
    pub(crate) fn cancel(&self, key: u64, node: &Arc<Node>) {
        self.with_key(key, false, |state, woken| {
            if node.state() == GRANTED {
                state.out -= 1;
            } else {
                // ordering: under the lock, like every write of `state` (module docs); no
                // grant reads it without the lock.
                node.state.store(CANCELLED, Ordering::Relaxed);
                let waiters = state
                    .waiters
                    .as_mut()
                    .expect("a queued node is in the queue");
                waiters.cancelled += 1;
                waiters.compact();
            }
            // A freed permit goes to the next waiter; a cancelled front may have held back
            // a waiter behind it that asked under a higher limit.
            state.grant(woken);
        })
        .expect("a queued or granted node keeps its key's state");
    }

    /// `(permits out, waiters)` of `key`.
    pub(crate) fn key_counts(&self, key: u64) -> (usize, usize) {
        self.with_key(key, false, |state, _| (state.out, state.waiting()))
            .unwrap_or((0, 0))
    }

    /// Keys with permits out or waiters (locks each shard in turn).
    pub(crate) fn keys(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| lock(&shard.keys).len())
            .sum()
    }
}
