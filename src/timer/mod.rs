//! tollgate's own timer: wakes tasks at deadlines without any async runtime.
//!
//! # Design
//!
//! A timer (`TimerCore`, `driver.rs`) is an *inbox* (a lock-free push-only stack of new
//! registrations, `inbox.rs`), a binary *heap* of known entries that only the driver touches,
//! and `earliest`, the deadline the driver will wake up for by itself. An *entry*
//! (`entry.rs`) is one waiting future's deadline, waker and state word:
//!
//! ```text
//!   PENDING --driver: deadline <= now--> FIRED (waker woken, once)
//!   PENDING --waiter: deadline <= now--> FIRED (completes without a wake)
//!   PENDING --waiter dropped-----------> CANCELLED (waker dropped)
//! ```
//!
//! Each transition is one CAS out of `PENDING`, so a fire racing a drop is resolved by which
//! CAS wins: a task is woken at most once, never after its future was dropped, and never
//! before its deadline.
//!
//! * **Registration** (first pending poll of a [`Sleep`]): allocate the entry, register the
//!   waker in it, push it on the inbox, SeqCst fence, `earliest.fetch_min(deadline)`, and
//!   unpark the driver only if that lowered `earliest`. No lock, and no syscall unless the
//!   next wake-up moves earlier. A sleep handed a spare entry (a fired one that no timer
//!   holds any more, `Sleep::into_spare`) registers in that allocation instead: a waiting
//!   queue's heads sleep one after another in one entry (loom "recycle vs fire").
//! * **Driver turn**: drain the whole inbox with one swap, pop and fire every entry due,
//!   compact dead entries if they are over half the heap, store the next wake-up (the heap's
//!   minimum deadline plus that entry's slack) in `earliest`, wake the batch outside the lock (each waker in `catch_unwind`), SeqCst
//!   fence, and re-check the inbox before parking. The fence pair is the lost-wakeup
//!   argument, written out in `driver.rs`.
//! * **Drivers**: the global timer's is one lazily started thread that parks until the next
//!   deadline, or indefinitely when nothing is pending; both live in `thread.rs`, which
//!   hands the driver a function to unpark it, so `driver.rs` imports nothing of threads. A
//!   manual timer (what a [`ManualClock`](crate::ManualClock) is) runs the same turn on the
//!   caller of `advance_to`/`advance_by`, and holds the manual clock's only copy of its time.
//! * **Runtime driver** (opt-in, `runtime.rs`): while a [`drive`] future is polled on an
//!   async runtime, the global timer's turns run in that task and in the wake of the
//!   runtime's own sleep (where the runtime fires its timers), and registrants wake it
//!   instead of the thread; the thread stays as a backstop
//!   10 ms behind, so a stalled runtime or a forgotten driver delays sleeps, never hangs
//!   them. The two-driver argument is in `driver.rs` ("A second driver").
//! * **Coalescing**: an entry registered `w` before its deadline may fire up to
//!   `min(w / 256, 1 ms)` late. Dense, distinct deadlines (a FIFO of waiters on one key,
//!   each 50 µs after the last) then share a wake-up instead of costing the thread one
//!   park/unpark cycle each, while a 1 ms sleep stays within 4 µs. Never early.
//! * **Cancellation**: a dropped [`Sleep`] CASes its entry to `CANCELLED`; dead entries are
//!   dropped when drained or compacted away, so memory stays within about twice the live
//!   entries however many futures are dropped.
//!
//! The heap is O(log n) per registration and per fire; with 24-byte heap slots it stays
//! cache-friendly into the hundreds of thousands of entries, and only the driver touches it.
//!
//! The timer knows nothing of keys, rates or clocks; it imports only `crate::sync`,
//! `crate::time` (the real-time origin its nanoseconds count from) and std. Within it the
//! arrows point one way: `thread` -> `driver` -> `entry`, `inbox`; `sleep` -> `driver`,
//! `entry`; `runtime` -> `thread`.

mod driver;
mod entry;
mod inbox;
// The runtime driver drives the global timer, which loom builds leave out.
#[cfg(not(tollgate_loom))]
mod runtime;
mod sleep;
// The tests drive the real timer thread too, which loom builds leave out.
#[cfg(all(test, not(tollgate_loom)))]
mod tests;
#[cfg(not(tollgate_loom))]
mod thread;

pub(crate) use driver::TimerCore;
// For the core's tests only (see `runtime::is_driven`).
#[cfg(not(tollgate_loom))]
#[doc(hidden)]
pub use runtime::is_driven;
#[cfg(not(tollgate_loom))]
pub use runtime::{Drive, drive};
pub(crate) use sleep::Spare;
pub use sleep::{Sleep, sleep, sleep_until};

use crate::sync::Arc;

/// Which timer a waiting future registers with.
#[derive(Debug, Clone)]
pub(crate) enum TimerRef {
    /// The process-wide real timer (`thread::global`).
    Global,
    /// A manual timer: the one a [`ManualClock`](crate::ManualClock) is, shared by its clones.
    Manual(Arc<TimerCore>),
}

impl TimerRef {
    pub(crate) fn core(&self) -> &TimerCore {
        match self {
            #[cfg(not(tollgate_loom))]
            TimerRef::Global => thread::global(),
            #[cfg(tollgate_loom)]
            TimerRef::Global => panic!("the global timer is not modelled under loom"),
            TimerRef::Manual(core) => core,
        }
    }
}

/// What the loom models in `loom-tests/timer.rs` need of the timer's internals.
#[cfg(tollgate_loom)]
#[doc(hidden)]
pub mod __loom {
    use super::{Sleep, TimerCore, TimerRef, entry::Entry, inbox};
    use crate::sync::Arc;

    /// How late the backstop thread lets entries be while a task drives the timer.
    pub const BACKSTOP: u64 = super::driver::BACKSTOP;

    /// A manual timer.
    #[derive(Debug)]
    pub struct ManualTimer(Arc<TimerCore>);

    impl ManualTimer {
        /// A manual timer at time 0 with no driver thread.
        #[allow(clippy::new_without_default)]
        pub fn new() -> ManualTimer {
            ManualTimer(Arc::new(TimerCore::manual()))
        }

        /// Makes registrations unpark `driver` whenever they lower the earliest deadline, as
        /// they would the real timer thread. Call it before any registration.
        pub fn set_driver(&self, driver: loom::thread::Thread) {
            self.0.set_driver(Box::new(move || driver.unpark()));
        }

        /// As [`set_driver`](Self::set_driver), calling `unpark` instead: for a driver that
        /// waits on a condition variable, since loom 0.7 mishandles an `unpark` that reaches
        /// a thread blocked on a mutex (which the timer's lock is, once two drivers share it).
        pub fn set_unpark(&self, unpark: impl Fn() + Send + Sync + 'static) {
            self.0.set_driver(Box::new(unpark));
        }

        /// A sleep until `deadline` on this timer.
        pub fn sleep(&self, deadline: u64) -> Sleep {
            Sleep::new(TimerRef::Manual(Arc::clone(&self.0)), deadline)
        }

        /// Sets the time and fires what is due.
        pub fn advance_to(&self, now: u64) {
            self.0.advance_to(now);
        }

        /// One driver turn at `now`, as the timer thread runs it: `Some(next)` if the driver
        /// may park until `next`, `None` to go round again.
        pub fn turn(&self, now: u64) -> Option<u64> {
            self.0.turn(now)
        }

        /// Claims the timer for a task driver, as `timer::drive`'s first poll does: `false`
        /// if one is attached already.
        pub fn attach(&self) -> bool {
            self.0.attach()
        }

        /// One turn of the attached task at `now`, as `timer::drive` runs it: `Some(next)`
        /// if the task may sleep until `next`, `None` to go round again.
        pub fn task_turn(&self, now: u64) -> Option<u64> {
            self.0.task_turn(now)
        }

        /// Gives the task driver's claim up and unparks the driver thread, as dropping an
        /// attached `timer::drive` future does.
        pub fn detach(&self) {
            self.0.detach();
        }

        /// Entries still pending.
        pub fn pending(&self) -> usize {
            self.0.pending()
        }

        /// Entries held in the inbox and heap, live or dead.
        pub fn held(&self) -> usize {
            self.0.held()
        }
    }

    /// Hands `old`'s entry allocation to `next` if no timer holds it any more, as a queue's
    /// hand-over does from one head's sleep to the next: `next`, and whether it got one.
    pub fn recycle(old: Sleep, next: Sleep) -> (Sleep, bool) {
        let spare = old.into_spare();
        let got = spare.is_some();
        (next.with_spare(spare), got)
    }

    /// The registration stack alone, carrying deadlines as ids.
    #[derive(Debug)]
    pub struct Inbox(inbox::Inbox);

    impl Inbox {
        /// An empty stack.
        #[allow(clippy::new_without_default)]
        pub fn new() -> Inbox {
            Inbox(inbox::Inbox::new())
        }

        /// Pushes a new entry with deadline `id`.
        pub fn push(&self, id: u64) {
            self.0.push(Arc::new(Entry::new(id)));
        }

        /// Takes every entry, returning their ids oldest first.
        pub fn drain(&self) -> Vec<u64> {
            let mut out = Vec::new();
            self.0.drain_into(&mut out);
            out.iter().map(|entry| entry.deadline).collect()
        }
    }
}
