//! [`Queue`]: one key's FIFO of waiters, where only the head holds a reservation.
//!
//! # Design: lazy reservation
//!
//! A waiter that cannot be admitted at once joins its key's queue as a [`Node`] and writes
//! nothing to the key's state. Only the queue's **head** (its front node) holds a
//! reservation: one GCRA CAS on the key's state that fixes the head's admission instant
//! `admit_at`. The queue sleeps on the limiter's timer until then with a waker of its own
//! ([`HandOver`]); when the timer fires it, the *hand-over* ([`Queue::advance`]) admits the
//! head, makes the next node the head (reserving its cells), and so on for every node already
//! due, then sleeps until the new head's instant. The hand-over runs on whichever thread
//! wakes the queue (the timer thread, or `ManualClock::advance`'s caller), under the lock of
//! the waitlist shard that holds the queue (`waitlist.rs`); no future needs to be polled for
//! the queue to move, so a slow, forgotten or dropped future stalls no one.
//!
//! # The chain instant
//!
//! A hand-over that runs late (timer coalescing lets it run up to 1 ms late, see
//! `timer/entry.rs`, and a busy machine adds scheduling delay) must not cost the key the
//! cells that passed meanwhile. So the next head reserves not at the hand-over's `now` but
//! at `chain`: the instant the previous head was admitted at. While a queue stays non-empty
//! its admission instants are then exactly those of waiters that had all reserved on
//! arrival (FIFO, back to back at the rate), however late the hand-over runs, and every
//! node whose instant has passed is admitted in the same hand-over. Reserving at an earlier
//! `now` than the real one is what a caller that read its clock earlier does: the key's
//! state only moves forward and the window guarantee holds for the admission instants
//! (`tests/wait.rs`' properties check it). The price is the same as for any timer that
//! catches up on missed ticks: if the whole process stalls (suspended, starved of CPU), the
//! waiters whose instants passed meanwhile are released together when it resumes.
//!
//! # What a hand-over costs
//!
//! With many keys every hand-over is mostly cache misses: the timer entry, the hand-over
//! waker, the queue in its shard's map, the front node, the next node, the key's slot in the
//! table, the admitted task. So it touches nothing else: the head's sleep registers in the
//! previous head's timer entry (`timer::Spare`), at the time read under the lock (no clock
//! read of its own, `Sleep::poll_at`), the settled wakers are collected without allocating
//! (`woken.rs`), and an arrival behind a head whose sleep the timer holds only appends
//! itself (`head_sleeps`): it need not read the head's node or entry, which the timer's
//! thread wrote last. Measured in BENCHMARKS.md, scenario F2.
//!
//! # Cancellation costs nothing
//!
//! * A queued node that is not the head holds nothing: its future's drop marks it
//!   `CANCELLED` and takes `n` off the queue's count; the node is unlinked when it reaches the
//!   front, or by a compaction when cancelled nodes are more than half the queue.
//! * The head's drop refunds its reservation (one CAS from the state it wrote back to the one
//!   before it) and the next node reserves at the same chain instant the head did: the next
//!   node gets exactly the instant the dropped head had (if it asks for as many cells), as if
//!   the head had never asked. The refund applies while the key's state is still the one the
//!   head wrote (and its removal epoch has not moved, see `cells.rs`). A check cannot stack
//!   on the head's reservation before the head's instant (its own admission would come
//!   after the head's), so the refund fails only if the head's instant has passed, or the key
//!   was penalized or reset: then the head's cells count as used, never as an extra cell.
//!
//! # Checks and waiters on one key
//!
//! `check` never looks at the queue (it stays one CAS). It cannot take the cell the head has
//! reserved, and a new waiter joins the queue behind the others whenever the queue is
//! non-empty. A check can take a cell between the head's instant and the hand-over that
//! admits it only if that hand-over runs later than one emission interval: checks and
//! waiters share the key's rate, and a check only gets cells the queue leaves unclaimed.
//!
//! # A key forgotten while its waiters queue
//!
//! A reset or an eviction removes the key's state, not its queue: the head keeps the instant
//! it reserved, and the next head reserves in the key's new history (which has its burst),
//! storing the key again. If the table has no room for it then (`RefuseNewKeys`), that node
//! fails with `TableFull`, and so does each node after it in the same hand-over: none waits
//! for room that may never come (`tests/wait.rs`, "a full table under waiters").
//!
//! # Bounded waits
//!
//! A bounded waiter (`.within(d)`, `.until(t)`) is refused up front, writing nothing, if its
//! predicted instant (the head's reservation plus the cells queued ahead of it) is past its
//! bound. If the prediction is upset later (a penalty, a slower quota, checks taking cells),
//! the hand-over refuses it when its turn comes and its instant would be past its bound, and
//! its own deadline sleep (in `waiter.rs`) cancels it if it is still queued at its bound.
//! Either way it fails holding nothing.

use std::collections::VecDeque;
use std::task::{Context, Wake, Waker};

use super::cells::Cells;
use super::node::{Node, Outcome};
use super::woken::Woken;
use crate::engine::{self, Failure, Reserved};
use crate::gcra::MAX_NOW;
use crate::sync::Arc;
use crate::timer::{Sleep, Spare};

/// Compaction of cancelled nodes waits for at least this many.
const COMPACT_MIN: usize = 16;

/// The head's reservation and the sleep that ends at its instant.
#[derive(Debug)]
struct Head {
    reserved: Reserved,
    sleep: Sleep,
    /// The sleep is registered with the timer under the hand-over waker and has not fired:
    /// the timer will run the hand-over, and other operations need not poll it again.
    registered: bool,
}

/// One key's waiters, in FIFO order. Lives in a waitlist shard's map while it has nodes and
/// is only touched under that shard's lock.
#[derive(Debug)]
pub(crate) struct Queue {
    /// Queued nodes in arrival order, with cancelled ones not yet unlinked. The front is
    /// never cancelled between operations: it is the head.
    nodes: VecDeque<Arc<Node>>,
    /// The front node's reservation; `None` only while the queue is empty.
    head: Option<Head>,
    /// The instant the next head reserves at (module docs).
    chain: u64,
    /// What the queued nodes behind the head cost in time, `n·T` each (cancelled ones
    /// excluded): with the head's reservation, the prediction for a new waiter.
    waiting_cost: u64,
    /// Cancelled nodes still linked.
    cancelled: usize,
    /// The waker the head's sleep registers: runs the hand-over. Made on first need.
    hand_over: Option<Waker>,
    /// The last head's timer entry, fired and released by the timer: the next head's sleep
    /// registers in it instead of allocating one.
    spare: Option<Spare>,
}

impl Queue {
    /// An empty queue whose first head will reserve at `now`.
    pub(crate) fn new(now: u64) -> Queue {
        Queue {
            nodes: VecDeque::new(),
            head: None,
            chain: now,
            waiting_cost: 0,
            cancelled: 0,
            hand_over: None,
            spare: None,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Heap bytes held by the queue and its nodes.
    pub(crate) fn bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Arc<Node>>()
            + self.nodes.len() * std::mem::size_of::<Node>()
    }

    /// Queues `node` at the back and runs the hand-over (the node may be admitted or refused
    /// at once). A node left queued behind the head is refused up front, unlinked and
    /// writing nothing, if its predicted instant is past its bound.
    pub(crate) fn push(
        &mut self,
        cells: &impl Cells,
        node: &Arc<Node>,
        now: u64,
        woken: &mut Woken,
    ) -> Outcome {
        self.nodes.push_back(Arc::clone(node));
        self.waiting_cost += node.cost;
        if !self.head_sleeps(now) {
            self.advance(cells, now, woken);
            if !node.is_queued() || self.is_head(node) {
                return node.outcome();
            }
        }
        if node.latest == u64::MAX {
            return Outcome::Queued; // Unbounded: no prediction to check.
        }
        let predicted = self.predicted(cells, now, self.waiting_cost - node.cost, node);
        if predicted <= node.latest {
            return Outcome::Queued;
        }
        // It is the back node and holds nothing: unlink it.
        self.nodes.pop_back();
        self.waiting_cost -= node.cost;
        cells.count(false);
        Outcome::Failed(Failure::TooLong {
            admit_at: predicted,
        })
    }

    /// `node`'s future is gone: unlink it, handing its reservation on if it is the head.
    pub(crate) fn cancel(
        &mut self,
        cells: &impl Cells,
        node: &Arc<Node>,
        now: u64,
        woken: &mut Woken,
    ) {
        if !node.is_queued() {
            return; // Settled by a hand-over before the future's drop took the lock.
        }
        let _ = node.settle(Outcome::Cancelled);
        if !self.is_head(node) {
            self.waiting_cost -= node.cost;
            self.cancelled += 1;
            self.compact();
            return;
        }
        self.nodes.pop_front();
        if let Some(head) = self.head.take() {
            self.spare = head.sleep.into_spare();
            engine::undo(cells, head.reserved.written);
            // The next head reserves where this one did: it gets the instant this one had.
            self.chain = head.reserved.now;
        }
        self.advance(cells, now, woken);
    }

    /// A penalty stored state `penalized` in the key's word: a head that reserved before it
    /// reserves again, on the state as it is now, so that it too is admitted no sooner than
    /// the penalty allows (or fails, if that is past its bound). Its first reservation is not
    /// given back: the penalty's later state covers it.
    ///
    /// A head that reserved after the penalty (one that arrived, or was handed over, between
    /// the penalty's write and this call, or that a later penalty made reserve again) read a
    /// state at least `penalized` (the two writes are CASes on one word, and a penalty writes
    /// only a state later than the one it read): it keeps its reservation, which already
    /// starts where the penalty ends.
    pub(crate) fn penalized(
        &mut self,
        cells: &impl Cells,
        penalized: u64,
        now: u64,
        woken: &mut Woken,
    ) {
        if self
            .head
            .as_ref()
            .is_none_or(|head| head.reserved.written.prev >= penalized)
        {
            return;
        }
        let head = self.head.take().expect("checked above");
        self.spare = head.sleep.into_spare();
        // `advance` makes the front the head again, and takes its cost off the waiting.
        self.waiting_cost += self.nodes.front().map_or(0, |front| front.cost);
        self.chain = head.reserved.now;
        self.advance(cells, now, woken);
    }

    /// `node`'s bound has passed (its own deadline sleep fired): admit everything due, then
    /// cancel `node` if it is still queued, returning what it would have been told.
    pub(crate) fn expire(
        &mut self,
        cells: &impl Cells,
        node: &Arc<Node>,
        now: u64,
        woken: &mut Woken,
    ) -> Outcome {
        self.advance(cells, now, woken);
        if !node.is_queued() {
            return node.outcome();
        }
        let admit_at = match &self.head {
            Some(head) if self.is_head(node) => head.reserved.admit_at,
            _ => {
                let ahead: u64 = self
                    .nodes
                    .iter()
                    .skip(1)
                    .take_while(|other| !Arc::ptr_eq(other, node))
                    .filter(|other| other.is_queued())
                    .map(|other| other.cost)
                    .sum();
                self.predicted(cells, now, ahead, node)
            }
        };
        self.cancel(cells, node, now, woken);
        cells.count(false);
        Outcome::Failed(Failure::TooLong { admit_at })
    }

    /// The hand-over: admits the head if its instant has come, then each following node whose
    /// instant has come, reserving for each in turn; leaves the queue empty or with a head
    /// that sleeps until its instant. Wakers of settled nodes go to `woken`, to be woken once
    /// the caller has released the shard lock.
    pub(crate) fn advance(&mut self, cells: &impl Cells, now: u64, woken: &mut Woken) {
        loop {
            // Unlink cancelled nodes that reached the front.
            while self.nodes.front().is_some_and(|front| !front.is_queued()) {
                self.nodes.pop_front();
                self.cancelled -= 1;
            }
            let Some(front) = self.nodes.front() else {
                self.head = None;
                return;
            };
            if self.head.is_none() {
                // The front becomes the head: reserve its cells at the chain instant. (Its
                // fields are copied out rather than its `Arc` cloned: two RMWs fewer on a
                // line the waiting task also touches.)
                let (n, latest, since, quota) = (front.n, front.latest, front.since, front.quota);
                self.waiting_cost -= front.cost;
                let at = self.chain.min(now);
                let gcra = quota.unwrap_or_else(|| cells.quota());
                match engine::reserve(cells, n, gcra, at, latest) {
                    Err(failure) => {
                        if let Failure::TooLong { .. } = failure {
                            cells.count(false);
                        }
                        self.settle_front(Outcome::Failed(failure), woken);
                        continue;
                    }
                    Ok(reserved) if reserved.admit_at <= now => {
                        self.chain = reserved.instant();
                        cells.count(true);
                        self.settle_front(Outcome::Admitted, woken);
                        continue;
                    }
                    Ok(reserved) => {
                        // The timer may wake the queue late by a share of how long this
                        // node has waited in all (not just since it became the head).
                        let sleep = cells
                            .sleep_until(reserved.admit_at)
                            .with_wait(reserved.admit_at.saturating_sub(since))
                            .with_spare(self.spare.take());
                        self.head = Some(Head {
                            reserved,
                            sleep,
                            registered: false,
                        });
                    }
                }
            }
            if !self.head_is_due(cells, now) {
                return;
            }
            let head = self.head.take().expect("the front holds the reservation");
            self.spare = head.sleep.into_spare();
            self.chain = head.reserved.instant();
            cells.count(true);
            self.settle_front(Outcome::Admitted, woken);
        }
    }

    /// The queue has a head whose instant is after `now` and whose sleep the timer holds
    /// under the hand-over waker: a hand-over at `now` would change nothing, and the timer
    /// runs the next one. (If the sleep has fired meanwhile, that hand-over is already on its
    /// way to this queue's lock.) Lets an arrival skip the hand-over, and with it a read of
    /// the head's node and timer entry, which the timer's thread wrote last. (The price: if a
    /// hand-over panicked (a user clock's `now`, under the lock), the fired head stays
    /// registered and arrivals no longer retry it; a cancellation or a bound's expiry still
    /// runs the hand-over.)
    fn head_sleeps(&self, now: u64) -> bool {
        self.head
            .as_ref()
            .is_some_and(|head| head.registered && head.reserved.admit_at > now)
    }

    /// Whether the head's instant has come on the limiter's clock; if not, its sleep is
    /// registered with the timer under the hand-over waker.
    fn head_is_due(&mut self, cells: &impl Cells, now: u64) -> bool {
        let head = self.head.as_mut().expect("called with a head");
        if head.reserved.admit_at <= now {
            return true;
        }
        if head.registered && !head.sleep.has_fired() {
            return false; // The timer will wake the queue at the instant.
        }
        if head.reserved.admit_at > MAX_NOW {
            // The limiter's clock stops at `MAX_NOW` (it saturates), so this instant never
            // comes: the head (an unbounded wait; a bounded one is refused up front) waits
            // with no sleep, as on a clock that stands still. A sleep would fire at once on
            // the timer's own time, which does not stop there, and the loop below would spin.
            head.registered = true;
            return false;
        }
        let waker = self
            .hand_over
            .get_or_insert_with(|| cells.hand_over_waker());
        let mut cx = Context::from_waker(waker);
        // `now` was read from the limiter's clock just before (under the shard lock, or by
        // the arriving waiter): if that is the timer's time, the sleep need not read it again.
        let timer_now = cells.clock_is_timer().then_some(now);
        while head.sleep.poll_at(&mut cx, timer_now).is_ready() {
            // The timer's deadline passed. The limiter's clock agrees for tollgate's own
            // clocks; a custom clock may be behind real time: sleep for what it says is left.
            if head.reserved.admit_at <= cells.now() {
                return true;
            }
            head.sleep = cells.sleep_again(head.reserved.admit_at);
        }
        head.registered = true;
        false
    }

    /// Settles and unlinks the front node.
    fn settle_front(&mut self, outcome: Outcome, woken: &mut Woken) {
        let front = self.nodes.pop_front().expect("a front node");
        woken.extend(front.settle(outcome));
    }

    fn is_head(&self, node: &Arc<Node>) -> bool {
        self.nodes
            .front()
            .is_some_and(|front| Arc::ptr_eq(front, node))
    }

    /// The instant `node` would be admitted at with nodes costing `ahead` (`n·T` each)
    /// queued between it and the head, if nothing else takes cells of the key.
    fn predicted(&self, cells: &impl Cells, now: u64, ahead: u64, node: &Node) -> u64 {
        let gcra = node.quota.unwrap_or_else(|| cells.quota());
        let Some(head) = &self.head else { return now };
        if node.n > gcra.burst {
            return u64::MAX; // The quota changed under it: no wait can satisfy it.
        }
        let tat = head.reserved.written.tat.saturating_add(ahead);
        gcra.reserve(tat, now, node.n).0
    }

    /// Unlinks cancelled nodes once they are more than half the queue: O(1) amortised per
    /// cancellation, and a queue never holds more than about twice its live waiters.
    fn compact(&mut self) {
        if self.cancelled >= COMPACT_MIN && 2 * self.cancelled > self.nodes.len() {
            // The front is the head, never cancelled: the retain keeps it in place.
            self.nodes.retain(|node| node.is_queued());
            self.cancelled = 0;
        }
    }
}

/// The waker a queue's head sleeps with: its wake runs the hand-over on the waking thread.
/// It owns the limiter's shared state (`C` is an owned [`Cells`]), since the timer may fire
/// it after every future that borrowed the limiter is gone.
#[derive(Debug)]
pub(crate) struct HandOver<C>(pub(crate) C);

impl<C: Cells + Send + Sync + 'static> Wake for HandOver<C> {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        let (shard, key) = self.0.waitlist();
        shard.hand_over(&self.0, key);
    }
}
