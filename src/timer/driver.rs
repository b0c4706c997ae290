//! One timer: the inbox of new registrations, the heap of known entries, and the driver turn
//! that fires them.
//!
//! # Fields and who writes them
//!
//! * `inbox` (`inbox.rs`): pushed by registrants, lock-free; drained whole by a driver.
//! * `queue`: a binary min-heap of `(deadline, seq)` and the entries behind it, behind a mutex
//!   that only *drivers* take (the timer thread, or `advance_to` callers and cancellers of a
//!   manual timer, which only ever `try_lock`). No future holds it, so a forgotten future
//!   blocks nothing.
//! * `earliest`: the time the driver will wake up at by itself. Drivers store it; every
//!   registrant lowers it with `fetch_min`. `u64::MAX` means "parked until unparked".
//! * `pending`: entries still `PENDING`. `dead`: entries no longer `PENDING` that the timer
//!   still holds (see `entry.rs` for why it is bumped before the CAS).
//! * `compact`: set by the canceller that finds more than half of the held entries dead;
//!   cleared by the driver that compacts.
//!
//! # Registration and the lost-wakeup argument
//!
//! A registrant pushes its entry, issues a SeqCst fence, then `earliest.fetch_min(deadline)`,
//! and unparks the driver only if its deadline is below the value it replaced. A driver turn
//! drains the inbox, fires what is due, stores its next wake-up into `earliest` (the heap's
//! minimum deadline plus that entry's coalescing slack, see `entry.rs`), issues a
//! SeqCst fence, and goes round again instead of parking if the inbox is not empty.
//!
//! The two fences are totally ordered. If the registrant's comes first, the driver's
//! re-check sees the push and does not park. If the driver's comes first, the registrant's
//! `fetch_min` reads the driver's store or a later `fetch_min`; `earliest` only decreases
//! until the next driver store, so either the registrant's deadline is at or after the time
//! the driver will wake by itself, or it is below the value it read and the registrant
//! unparks (an unpark before the park is kept as a token), or an earlier registrant with a
//! smaller deadline already unparked it and the driver's next turn repeats the argument. A
//! registration is therefore never left in the inbox past its deadline while the driver
//! sleeps. Registrations that do not lower `earliest` cost no syscall: only the first
//! registration after the timer goes idle, or one that moves the next wake-up earlier, does.
//!
//! Manual time has the same shape: `advance_to` stores the new time and the next turn fences
//! before draining, while `Sleep::poll` re-reads the time after its registration's fence. One
//! of them sees the other: the turn fires the entry, or the poll completes by itself.
//!
//! loom checks both (`loom-tests/timer.rs`): the manual race fails without either fence, and
//! the driver's park protocol deadlocks without the re-check or the unpark. Loom cannot show
//! the store-buffering reordering that the registrant's fence rules out for `earliest` (its
//! RMWs always read the latest value), so that one step rests on the argument above.
//!
//! # A second driver
//!
//! The global timer may also be driven by a task on an async runtime (`runtime.rs`). While
//! one is *attached* (`task.attached`, claimed by a CAS in `attach`), each driver has its own
//! wake-up: the task's in `task.next` (the heap's next deadline plus its slack, as above),
//! the thread's in `earliest` (that plus a [`BACKSTOP`]), and the thread's turns fire only
//! what is a backstop overdue. A registrant that reads `attached` (after its fence) lowers
//! both with `fetch_min` (the latest instant its entry may fire at, and that plus the
//! backstop), and notifies each driver whose wake-up it lowered: the task through
//! `task.waker`, the thread by `unpark`. A turn stores its own driver's wake-up and lowers
//! the other's with `fetch_min` to what the other would store for the same heap, notifying
//! the other if it lowered it, all under the queue lock. (These stores are swaps: C11 orders
//! a plain store after an RMW it follows under the lock just as well, but loom orders plain
//! stores only partially against other threads' RMWs, and its model of the third case below
//! then deadlocks on an execution C11 forbids.) So:
//!
//! * **At the end of every turn, both wake-ups cover the whole heap.** Every store and every
//!   driver's `fetch_min` happens under the lock, computed from the heap as it is then;
//!   registrants only lower. Whichever driver moved an entry into the heap, each driver
//!   either holds a wake-up at or before the entry's, or was notified.
//! * **The fence pair holds per driver, with one new case.** A driver's re-check of the inbox
//!   may find it empty because *the other* driver drained the registration between this
//!   driver's turn and its re-check. The other driver's turn then put the entry in the heap
//!   and, by the point above, lowered this driver's wake-up (notifying it) if it had to.
//!   (loom: "backstop_task_drains_before_the_thread_rechecks"; it deadlocks if the task's
//!   turn does not lower the thread's wake-up.)
//! * **A stalled driver costs at most the backstop.** If the task stops being polled (its
//!   runtime blocks, its future is forgotten), the thread still wakes by every entry's latest
//!   instant plus the backstop, since registrants and turns keep `earliest` covering
//!   everything; it parks for good only when nothing is pending, and the next registration
//!   lowers `earliest` from `u64::MAX` and unparks it. (loom:
//!   "backstop_registrant_vs_stalled_task"; it deadlocks if a registrant that sees a task
//!   attached only wakes the task.)
//! * **Detach.** Dropping the task's future takes its waker, stores `attached = false`,
//!   issues a SeqCst fence and unparks the thread, whose next turn starts with a SeqCst fence
//!   and so runs after the detach's fence. A registrant either read `attached = false` (its
//!   fence came after the detach's: it follows the one-driver protocol against the thread) or
//!   read `true`, in which case its fence came before the detach's, so before the thread's
//!   next turn, which therefore finds its entry (in the inbox or the heap), reads
//!   `attached = false`, and fires it and stores `earliest` without the backstop's delay. A
//!   thread turn that read `true` just before the detach is followed by the detach's unpark,
//!   so the thread goes round again instead of sleeping a backstop.
//!   (loom: "backstop_registrant_vs_detach"; it deadlocks without the unpark.)
//! * **Extra task turns.** The attached task's runtime sleep runs a task-role turn in its own
//!   wake, wherever the runtime fires it (`runtime.rs`, `TurnOnWake`), possibly while the
//!   task's poll runs another on a second thread. While the task is attached, every point
//!   above holds for any number of turns in either role: they serialise on the queue lock,
//!   and each fires only what is due and leaves both wake-ups covering the heap. But the
//!   runtime may fire that wake after the `Drive` is dropped, so a task turn can also run
//!   with no task attached, and it drains the inbox like any turn: a registration whose
//!   `fetch_min` read an older, smaller `earliest` (unparking nobody) and that such a stray
//!   turn moves into the heap before the thread's re-check is covered only by the stray
//!   turn's backstop `fetch_min`, a backstop late, though the thread drives alone. So a task
//!   turn ends, after its fence, by reading `attached`, and unparks the thread if it reads
//!   `false`. If its fence follows the detach's, it reads `false` and the thread goes round
//!   and finds the entry in the heap; if it precedes it, the turn (under the lock, before
//!   the fence) came before the detach's unpark, after which the thread's next turn finds
//!   the entry in the heap too. A stray turn's `task.next` is overwritten by the next attached
//!   task's first turn. (loom: "stray_task_turn_vs_registrant"; it deadlocks without the
//!   unpark.)
//! * **Attach.** The claim's CAS comes before the task's first turn, which opens with a SeqCst
//!   fence: a registrant whose fence comes later reads `attached = true`, and one whose fence
//!   came earlier is seen by that turn's drain (or is in the heap already).
//!
//! While a task drives, registrants compare the latest instant their entry may fire at (its
//! deadline plus its slack), not its deadline, with both wake-ups, so that the registration
//! of a FIFO's next head (later, but within the slack of the stored wake-up) notifies
//! neither driver: in F1 and F2 (BENCHMARKS.md) the backstop thread then runs about once per
//! 10 ms. (Alone, the thread compares the deadline, as above: the hand-overs it runs
//! register on the thread itself, where an unpark costs no syscall.)
//!
//! # Firing
//!
//! Under the lock a turn pops every entry with `deadline <= now` (never early), CASes each
//! `PENDING -> FIRED` and collects those it won; it releases the lock and only then takes and
//! wakes their wakers, each inside `catch_unwind`, so a panicking waker neither kills the
//! timer thread nor skips the rest of the batch, and a waker may re-enter the timer. No waker
//! is woken or dropped under the lock. The turn drops its reference to each entry before
//! waking it, so a wake that registers the same owner's next sleep (a queue's hand-over)
//! finds the entry unshared and reuses it (`Sleep::into_spare`).
//!
//! # Bounded memory under cancellation
//!
//! A dropped future's entry stays in the heap (a heap cannot remove from the middle cheaply)
//! and is counted in `dead`. When dead entries exceed half of those held (and at least
//! `COMPACT_MIN`), the driver drops all of them in one O(n) pass, so each cancellation costs
//! O(1) amortised and the timer holds at most about twice the live entries. The canceller
//! that first sees the threshold crossed unparks the timer thread (which may be parked until
//! a far deadline); a manual timer compacts on the canceller's thread if its lock is free.

use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::TryLockError;

use super::entry::{Entry, Retire};
use super::inbox::Inbox;
use crate::sync::{
    Arc, AtomicBool, AtomicU64, AtomicUsize, AtomicWaker, Mutex, Ordering, fence, lock,
};
#[cfg(not(tollgate_loom))]
use crate::time::nanos_since_origin;

/// Compaction waits for at least this many dead entries: small heaps are not worth a pass.
pub(super) const COMPACT_MIN: usize = 32;

/// While a task drives the timer (`runtime.rs`), the thread fires only what the task is this
/// late for, and sleeps until then: a stalled runtime or a forgotten driver costs entries at
/// most this much lateness, and a live one costs the thread about one wake-up per backstop.
pub(crate) const BACKSTOP: u64 = 10_000_000;

/// The second driver: a task on an async runtime (`runtime.rs`), while one is attached.
struct TaskDriver {
    /// A task holds the claim: it runs the turns, the thread is the backstop. Written by
    /// `attach` (CAS) and `detach`; read by registrants and the thread's turns.
    attached: AtomicBool,
    /// The time the task wakes up by itself (its `earliest`); meaningful while attached.
    next: AtomicU64,
    /// The attached task: registrants that lower `next` wake it.
    waker: AtomicWaker,
}

/// Which driver runs a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The timer thread, or the caller of a manual timer's advance.
    Thread,
    /// The attached task.
    Task,
}

/// What drives a timer's turns.
enum Kind {
    /// Real time, driven by a thread that `unpark` wakes (and starts on first use). The
    /// driver only calls it, so the thread and the one timer it drives live together in
    /// `thread.rs`, which imports this file and not the other way round.
    #[cfg(not(tollgate_loom))]
    Real { unpark: fn() },
    /// Driven by hand: time moves only in `advance_to`/`advance_by`, which run the turn on
    /// their caller. A [`ManualClock`](crate::ManualClock) is such a timer, and reads its
    /// time here: there is no other copy.
    Manual {
        /// The current time, in nanoseconds; only increases.
        now: AtomicU64,
        /// How a loom model wakes its driver thread, called where the real timer thread
        /// would be unparked. (Set once, before the model's registrants start; std's cell
        /// suffices.)
        #[cfg(tollgate_loom)]
        driver: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    },
}

/// One timer: inbox stack, heap, `earliest` and the kind of driver (module docs).
pub(crate) struct TimerCore {
    inbox: Inbox,
    /// The time the driver wakes up by itself; `u64::MAX` = not until unparked.
    earliest: AtomicU64,
    /// Entries still `PENDING`.
    pending: AtomicUsize,
    /// Entries no longer `PENDING` still held in the inbox or heap (may briefly over-count).
    dead: AtomicUsize,
    /// A canceller asked for compaction; cleared by the driver that compacts.
    compact: AtomicBool,
    queue: Mutex<Queue>,
    task: TaskDriver,
    kind: Kind,
}

/// The driver's private state.
#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Item>,
    /// Tie-breaker: equal deadlines fire in registration (drain) order.
    seq: u64,
    /// Reused buffer for drained entries.
    scratch: Vec<Arc<Entry>>,
}

impl Queue {
    /// Gives memory back after a burst: capacity stays within 4x what is held (amortised,
    /// since it only shrinks to twice the length).
    fn shrink(&mut self) {
        const FLOOR: usize = 1024;
        let len = self.heap.len();
        if self.heap.capacity() > FLOOR.max(4 * len) {
            self.heap.shrink_to(FLOOR.max(2 * len));
        }
        if self.scratch.capacity() > FLOOR {
            self.scratch = Vec::new();
        }
    }
}

/// A heap slot; ordered so that `BinaryHeap`'s maximum is the earliest `(deadline, seq)`.
struct Item {
    deadline: u64,
    seq: u64,
    entry: Arc<Entry>,
}

impl PartialEq for Item {
    fn eq(&self, other: &Item) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}

impl Eq for Item {}

impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Item) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Item {
    fn cmp(&self, other: &Item) -> std::cmp::Ordering {
        (other.deadline, other.seq).cmp(&(self.deadline, self.seq))
    }
}

impl TimerCore {
    fn with_kind(kind: Kind) -> TimerCore {
        TimerCore {
            inbox: Inbox::new(),
            earliest: AtomicU64::new(u64::MAX),
            pending: AtomicUsize::new(0),
            dead: AtomicUsize::new(0),
            compact: AtomicBool::new(false),
            queue: Mutex::new(Queue::default()),
            task: TaskDriver {
                attached: AtomicBool::new(false),
                next: AtomicU64::new(u64::MAX),
                waker: AtomicWaker::new(),
            },
            kind,
        }
    }

    /// A real-time timer whose driver thread `unpark` wakes, starting it if need be (the
    /// global timer, `thread.rs`).
    #[cfg(not(tollgate_loom))]
    pub(super) fn real(unpark: fn()) -> TimerCore {
        TimerCore::with_kind(Kind::Real { unpark })
    }

    /// A timer driven by hand, standing at 0: no thread; [`advance_to`](Self::advance_to) and
    /// [`advance_by`](Self::advance_by) fire due entries.
    pub(crate) fn manual() -> TimerCore {
        TimerCore::with_kind(Kind::Manual {
            now: AtomicU64::new(0),
            #[cfg(tollgate_loom)]
            driver: std::sync::OnceLock::new(),
        })
    }

    /// Makes registrations (and compaction requests, and a detach) call `unpark` where they
    /// would unpark the timer thread. Only the first call has an effect.
    #[cfg(tollgate_loom)]
    pub(crate) fn set_driver(&self, unpark: Box<dyn Fn() + Send + Sync>) {
        let Kind::Manual { driver: slot, .. } = &self.kind;
        let _ = slot.set(unpark);
    }

    /// Now, in this timer's nanoseconds: since tollgate's real-time origin
    /// (`time::origin`) for a real-time timer, the time the last advance set for a manual
    /// one.
    pub(crate) fn now(&self) -> u64 {
        match &self.kind {
            #[cfg(not(tollgate_loom))]
            Kind::Real { .. } => nanos_since_origin(std::time::Instant::now()),
            // ordering: a lone value; registrations order it with their fence (module docs).
            Kind::Manual { now, .. } => now.load(Ordering::Relaxed),
        }
    }

    /// Manual timers: sets now to `now` if that is later (time is monotonic) and fires every
    /// entry with `deadline <= now`, on the calling thread. Returns the time it replaced.
    ///
    /// # Panics
    ///
    /// On a real-time timer.
    pub(crate) fn advance_to(&self, now: u64) -> u64 {
        // ordering: the turn's leading SeqCst fence publishes the new time against
        // registrations before it drains (module docs).
        let previous = self.manual_time().fetch_max(now, Ordering::Relaxed);
        self.catch_up();
        previous
    }

    /// Manual timers: moves now forward by `by` nanoseconds (saturating) and fires every
    /// entry due, on the calling thread.
    ///
    /// # Panics
    ///
    /// On a real-time timer.
    pub(crate) fn advance_by(&self, by: u64) {
        // ordering: as in `advance_to`.
        let _ = self
            .manual_time()
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                Some(now.saturating_add(by))
            });
        self.catch_up();
    }

    fn manual_time(&self) -> &AtomicU64 {
        match &self.kind {
            Kind::Manual { now, .. } => now,
            #[cfg(not(tollgate_loom))]
            Kind::Real { .. } => panic!("only a manual timer can be advanced"),
        }
    }

    /// The turn after a manual time change, at a time no earlier than the one this thread
    /// stored: when the change returns, every entry registered before it and due has fired.
    fn catch_up(&self) {
        // ordering: at least our own store (coherence); a concurrent advance may have moved
        // it further, which only fires more.
        let now = self.manual_time().load(Ordering::Relaxed);
        // One turn fires everything registered before it; a registration racing it sees the
        // new time in its poll and completes by itself.
        let _ = self.turn(now);
    }

    /// Pending (registered, not fired, not cancelled) entries.
    pub(crate) fn pending(&self) -> usize {
        // ordering: a statistic.
        self.pending.load(Ordering::Relaxed)
    }

    /// Entries the timer holds, live or dead (draining the inbox first): for tests.
    #[cfg(any(test, tollgate_loom))]
    pub(crate) fn held(&self) -> usize {
        let mut queue = lock(&self.queue);
        self.take_inbox(&mut queue);
        queue.heap.len()
    }

    /// Hands `entry` (already holding its waiter's waker) to the timer. Lock-free.
    pub(crate) fn register(&self, entry: Arc<Entry>) {
        let (deadline, entry_slack) = (entry.deadline, entry.slack);
        // ordering: a counter; the push's Release orders it before the driver's decrement.
        self.pending.fetch_add(1, Ordering::Relaxed);
        self.inbox.push(entry);
        // ordering: the registrant's half of the fence pair with `turn` (module docs): the
        // push is ordered before the `fetch_min` here and before the caller's next read of
        // a manual timer's time.
        fence(Ordering::SeqCst);
        // ordering: ordered by the fence above against a detach's store and fence (module
        // docs, "A second driver").
        if self.task.attached.load(Ordering::Relaxed) {
            // The task must wake by the latest instant the entry may fire at, and the thread
            // a backstop later. Comparing that latest instant, not the deadline, keeps the
            // registrations of a FIFO's next heads (later, but within the slack of the
            // stored wake-up) from waking either driver.
            let latest = deadline.saturating_add(entry_slack);
            let backstop = latest.saturating_add(BACKSTOP);
            // ordering: ordered by the fence above, as below.
            if backstop < self.earliest.fetch_min(backstop, Ordering::Relaxed) {
                self.unpark_driver();
            }
            // ordering: ordered by the fence above; `next` carries no other data.
            if latest < self.task.next.fetch_min(latest, Ordering::Relaxed) {
                self.task.waker.wake();
            }
            return;
        }
        // ordering: ordered by the fence above; `earliest` carries no other data.
        let previous = self.earliest.fetch_min(deadline, Ordering::Relaxed);
        if deadline < previous {
            self.unpark_driver();
        }
    }

    /// The waiter of `entry` saw its deadline pass without being fired: `PENDING -> FIRED`.
    /// Whether this call or the driver fired it, the deadline has passed.
    pub(crate) fn elapse(&self, entry: &Entry) {
        if entry.retire(Retire::Elapsed, &self.dead) {
            // ordering: a counter.
            self.pending.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The waiter of `entry` is gone: `PENDING -> CANCELLED` unless it already fired. The
    /// entry is dropped at the driver's next drain or compaction.
    pub(crate) fn cancel(&self, entry: &Entry) {
        if !entry.retire(Retire::Cancel, &self.dead) {
            return;
        }
        // ordering: a counter.
        self.pending.fetch_sub(1, Ordering::Relaxed);
        // ordering: statistics that only decide whether to ask for a compaction.
        let dead = self.dead.load(Ordering::Relaxed);
        if dead >= COMPACT_MIN && dead > self.pending.load(Ordering::Relaxed) {
            self.request_compaction();
        }
    }

    /// One turn of the thread's (or a manual timer's advance) at `now`: drain the inbox,
    /// fire every entry due at `now`, compact if needed, publish the next deadline in
    /// `earliest`, and wake the fired entries' tasks. Returns `Some(next)` if the thread may
    /// sleep until `next` (`u64::MAX`: until unparked), or `None` if registrations arrived
    /// meanwhile and it must go round again. While a task is attached, the thread's turn
    /// fires only what is a [`BACKSTOP`] overdue and returns its wake-up a backstop later.
    pub(crate) fn turn(&self, now: u64) -> Option<u64> {
        self.turn_as(Role::Thread, now)
    }

    /// One turn of the attached task (`runtime.rs`): as [`turn`](Self::turn), publishing
    /// the task's wake-up in its own `next` and keeping the thread's backstop covered.
    pub(crate) fn task_turn(&self, now: u64) -> Option<u64> {
        self.turn_as(Role::Task, now)
    }

    fn turn_as(&self, role: Role, now: u64) -> Option<u64> {
        // ordering: a manual driver's half of the fence pair with registration: the time
        // its caller stored is ordered before the drain below (module docs). It also orders
        // the load of `attached` after a detach's fence, or the detach's unpark comes after.
        fence(Ordering::SeqCst);
        // ordering: ordered by the fence above (module docs, "A second driver").
        let backstop = role == Role::Thread && self.task.attached.load(Ordering::Relaxed);
        // While a task drives, the thread fires only what the task is a backstop late for.
        let horizon = if backstop {
            now.saturating_sub(BACKSTOP)
        } else {
            now
        };
        let mut fired = Vec::new();
        let (mine, notify) = {
            let mut queue = lock(&self.queue);
            self.take_inbox(&mut queue);
            self.fire_due(&mut queue, horizon, &mut fired);
            self.maybe_compact(&mut queue);
            queue.shrink();
            // Wake for the earliest deadline, as late as its slack allows: entries due by
            // then fire in the same turn. Every entry is late by at most the slack of the
            // entry that set the wake-up, so at most `MAX_SLACK`; never early. The task wakes
            // at the same time (plus its runtime timer's rounding, tokio's 1 ms): waking it at
            // the deadline itself cost F1 1.28-1.35x the ideal's CPU against 1.00-1.04x,
            // for no better lateness on this machine (BENCHMARKS.md).
            let due = queue.heap.peek().map_or(u64::MAX, |item| {
                item.deadline.saturating_add(item.entry.slack)
            });
            // Each driver stores its own wake-up and lowers the other's to cover the heap
            // (module docs, "A second driver"). Under the lock, so every wake-up stored or
            // lowered at the end of a turn covers every entry the heap then holds.
            match role {
                Role::Thread if backstop => {
                    let mine = due.saturating_add(BACKSTOP);
                    // ordering: ordered against registrations' pushes by the fence below. A
                    // swap, not a store, wherever two drivers share the timer (see "A second
                    // driver": loom orders a plain store only partially against other
                    // threads' RMWs, and then lets the other driver's `fetch_min` read past it).
                    let _ = self.earliest.swap(mine, Ordering::Relaxed);
                    // ordering: as above; `next` carries no other data.
                    let theirs = self.task.next.fetch_min(due, Ordering::Relaxed);
                    (mine, due < theirs)
                }
                Role::Thread => {
                    // ordering: ordered against registrations' pushes by the fence below.
                    self.earliest.store(due, Ordering::Relaxed);
                    (due, false)
                }
                Role::Task => {
                    // ordering: ordered against registrations' pushes by the fence below; a
                    // swap, as above.
                    let _ = self.task.next.swap(due, Ordering::Relaxed);
                    let backstop = due.saturating_add(BACKSTOP);
                    // ordering: as above.
                    let theirs = self.earliest.fetch_min(backstop, Ordering::Relaxed);
                    (due, backstop < theirs)
                }
            }
        };
        wake_all(fired);
        if notify {
            match role {
                Role::Thread => self.task.waker.wake(),
                Role::Task => self.unpark_driver(),
            }
        }
        // ordering: the driver's half of the fence pair with registration: either this
        // re-check sees a concurrent push, or that registration's `fetch_min` sees the store
        // above (module docs).
        fence(Ordering::SeqCst);
        // ordering: ordered by the fence above against a detach's fence (module docs, "Extra
        // task turns").
        if role == Role::Task && !self.task.attached.load(Ordering::Relaxed) {
            // A task turn with no task attached (a runtime sleep's wake after its `Drive` was
            // dropped) may have drained a registration the thread, driving alone, must see at
            // its deadline, not a backstop later: send it round.
            self.unpark_driver();
        }
        self.inbox.is_empty().then_some(mine)
    }

    /// Claims the second driver's place for a task: `false` if another task holds it.
    pub(crate) fn attach(&self) -> bool {
        // ordering: Acquire pairs with the Release store of the last `detach`, so its take of
        // the old waker comes before our task registers its own. Registrants learn of the
        // claim through the SeqCst fence that opens the task's first turn (module docs).
        self.task
            .attached
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            // false -> true: ours until `detach`.
            .is_ok()
    }

    /// Whether a task holds the claim (a snapshot, for `timer::is_driven`).
    #[cfg(not(tollgate_loom))]
    pub(crate) fn is_attached(&self) -> bool {
        // ordering: a snapshot; it orders nothing.
        self.task.attached.load(Ordering::Relaxed)
    }

    /// Registers the attached task's waker, before each of its turns.
    #[cfg(not(tollgate_loom))]
    pub(crate) fn register_task(&self, waker: &std::task::Waker) {
        self.task.waker.register(waker);
    }

    /// Wakes the attached task (for the runtime sleep's waker, `runtime.rs`).
    #[cfg(not(tollgate_loom))]
    pub(crate) fn wake_task(&self) {
        self.task.waker.wake();
    }

    /// Gives the claim up: the thread drives alone again, starting with a turn of its own
    /// after this call's unpark (module docs, "A second driver").
    pub(crate) fn detach(&self) {
        // Take the waker before releasing the claim: the next task cannot have registered.
        drop(self.task.waker.take());
        // ordering: Release pairs with the next `attach`'s Acquire (the take above comes
        // first); the fence below orders the store against registrants' fences.
        self.task.attached.store(false, Ordering::Release);
        // ordering: the detach's half of the fence pair with registration (module docs).
        fence(Ordering::SeqCst);
        self.unpark_driver();
    }

    /// Moves new registrations into the heap, dropping those already dead.
    fn take_inbox(&self, queue: &mut Queue) {
        let Queue { heap, seq, scratch } = queue;
        self.inbox.drain_into(scratch);
        for entry in scratch.drain(..) {
            if entry.is_pending() {
                heap.push(Item {
                    deadline: entry.deadline,
                    seq: *seq,
                    entry,
                });
                *seq += 1;
            } else {
                // ordering: after `is_pending`'s Acquire saw the terminal state, so after the
                // retiring thread's increment (entry.rs).
                self.dead.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Pops every entry due at `now` and collects those this turn fired, to be woken (and
    /// dropped) after the lock is released.
    fn fire_due(&self, queue: &mut Queue, now: u64, fired: &mut Vec<Arc<Entry>>) {
        while let Some(top) = queue.heap.peek_mut() {
            if top.deadline > now {
                break;
            }
            let item = PeekMut::pop(top);
            if item.entry.fire() {
                // ordering: a counter.
                self.pending.fetch_sub(1, Ordering::Relaxed);
                fired.push(item.entry);
            } else {
                // ordering: after `fire`'s Acquire failure saw the terminal state.
                self.dead.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Drops every dead entry from the heap if they are more than half of it, or if a
    /// canceller asked.
    fn maybe_compact(&self, queue: &mut Queue) {
        // ordering: heuristics; the pass itself re-reads each entry's state (Acquire).
        let dead = self.dead.load(Ordering::Relaxed);
        let asked = self.compact.load(Ordering::Relaxed);
        if !asked && (dead < COMPACT_MIN || dead <= queue.heap.len() / 2) {
            return;
        }
        // ordering: the flag carries no data. Cleared before the pass, so a request made
        // during it is not lost, only served by a later turn.
        self.compact.store(false, Ordering::Relaxed);
        let before = queue.heap.len();
        queue.heap.retain(|item| item.entry.is_pending());
        // ordering: after `is_pending`'s Acquire saw each removed entry's terminal state.
        self.dead
            .fetch_sub(before - queue.heap.len(), Ordering::Relaxed);
    }

    /// A canceller found most held entries dead: make sure a driver compacts soon.
    fn request_compaction(&self) {
        // ordering: the flag carries no data; the driver re-counts under its lock.
        if self.compact.swap(true, Ordering::Relaxed) {
            return; // Already asked; the driver has not compacted since.
        }
        match &self.kind {
            #[cfg(not(tollgate_loom))]
            Kind::Real { unpark } => unpark(),
            Kind::Manual { .. } => {
                // Nobody drives a manual timer between advances: compact here, unless a
                // driver holds the lock (it will see the flag in this turn or the next).
                let queue = match self.queue.try_lock() {
                    Ok(queue) => Some(queue),
                    Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                    Err(TryLockError::WouldBlock) => None,
                };
                if let Some(mut queue) = queue {
                    self.take_inbox(&mut queue);
                    self.maybe_compact(&mut queue);
                }
            }
        }
    }

    /// Wakes the driver so it re-reads `earliest` and the inbox.
    fn unpark_driver(&self) {
        match &self.kind {
            #[cfg(not(tollgate_loom))]
            Kind::Real { unpark } => unpark(),
            #[cfg(not(tollgate_loom))]
            Kind::Manual { .. } => {}
            #[cfg(tollgate_loom)]
            Kind::Manual { driver, .. } => {
                if let Some(unpark) = driver.get() {
                    unpark();
                }
            }
        }
    }
}

/// Wakes the task of each fired entry and drops the timer's reference to it; a panicking
/// waker neither escapes nor skips the rest.
fn wake_all(fired: Vec<Arc<Entry>>) {
    for entry in fired {
        let _ = catch_unwind(AssertUnwindSafe(move || {
            // After the CAS to FIRED: `AtomicWaker` hands over the waker the waiter registered
            // last, or makes a concurrent registration see FIRED (entry.rs).
            let waker = entry.waker.take();
            // The timer's last use of the entry: let it go before the wake, so that a wake
            // that registers the next sleep of the same owner (a queue's hand-over) finds
            // the entry unshared and reuses its allocation (`Sleep::into_spare`).
            drop(entry);
            if let Some(waker) = waker {
                waker.wake();
            }
        }));
    }
}

impl fmt::Debug for TimerCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            #[cfg(not(tollgate_loom))]
            Kind::Real { .. } => "real",
            Kind::Manual { .. } => "manual",
        };
        // ordering: statistics for display.
        f.debug_struct("TimerCore")
            .field("kind", &kind)
            .field("now", &self.now())
            .field("pending", &self.pending())
            .field("earliest", &self.earliest.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
