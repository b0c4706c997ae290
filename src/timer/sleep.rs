//! [`Sleep`]: a future that completes at or after a deadline on one of tollgate's timers.
//!
//! A `Sleep` registers with its timer lazily, on its first poll that finds the deadline still
//! ahead: it allocates one entry, registers its waker *in the entry* before publishing it
//! (nobody else can see it yet), and pushes it (`driver.rs`). Every later poll re-registers
//! the waker and then checks the entry's state, the `AtomicWaker` protocol that makes a
//! concurrent fire either wake the new waker or be seen by the check.
//!
//! After registering, a poll also re-reads its timer's time and completes by itself if the
//! deadline has passed (`PENDING -> FIRED` by the waiter). For a manual timer this closes the
//! race with an `advance_to` that drained the inbox just before the push; for the real timer
//! it saves a round trip through the timer thread when the thread runs late. The one
//! exception is a registration on the real timer at a time its caller has just read
//! (`Sleep::poll_at`, a queue's hand-over): it skips the re-read, and a deadline that passes
//! meanwhile is fired by the driver, whose registration protocol loses no entry.
//!
//! Dropping a registered `Sleep` cancels its entry (`PENDING -> CANCELLED`) and drops its
//! waker at once; the timer frees the entry at its next drain or compaction.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::TimerRef;
use super::driver::TimerCore;
use super::entry::{Entry, coalescing_slack};
use crate::sync::Arc;
use crate::time::{instant_at, nanos_since_origin, saturating_nanos};

/// A future that completes at or after its deadline, never before.
///
/// Made by [`sleep`] and [`sleep_until`] on tollgate's own timer: one thread for the whole
/// process, started on first use and parked whenever nothing is due. No async runtime is
/// needed or used, so a `Sleep` works under any executor, or none.
///
/// A `Sleep` does nothing until polled. Its first poll with the deadline still ahead
/// registers it with the timer; the task is then woken once, at or after the deadline.
///
/// # Precision
///
/// Never early. Late by the operating system's wake-up latency (tens of microseconds; see
/// BENCHMARKS.md), plus at most `min(wait / 256, 1 ms)` when the timer thread lets
/// deadlines registered far ahead share one wake-up: a 1 ms sleep may be up to 4 µs later
/// than it would otherwise be, a 10 s sleep up to 1 ms.
///
/// # Cancel safety
///
/// Dropping a `Sleep` before it completes unregisters it: the timer never wakes its task and
/// frees its entry soon after. [`mem::forget`](std::mem::forget) of a registered `Sleep`
/// blocks nothing; its entry stays with the timer until its deadline passes.
///
/// # Panics
///
/// The first poll that needs the timer thread starts it, and panics if the operating
/// system refuses to start a thread.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let start = Instant::now();
/// futures_executor::block_on(tollgate::timer::sleep(Duration::from_millis(5)));
/// assert!(start.elapsed() >= Duration::from_millis(5));
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct Sleep {
    timer: TimerRef,
    /// In the timer's nanoseconds.
    deadline: u64,
    /// Our registration, made by the first pending poll.
    entry: Option<Arc<Entry>>,
    /// How long the wait this sleep ends has lasted in all, when that is longer than the
    /// sleep itself (a queued waiter's): sets the coalescing slack (`with_wait`).
    wait: u64,
    /// An entry allocation the timer no longer holds, for the first registration to reuse
    /// (`with_spare`).
    spare: Option<Arc<Entry>>,
}

/// A timer entry's allocation that no timer holds any more: a fired (or cancelled) sleep's,
/// kept for the next sleep of the same owner to register with instead of allocating
/// ([`Sleep::into_spare`], [`Sleep::with_spare`]). A queue's heads sleep one after another,
/// so a queue registers all its heads' sleeps in one allocation.
#[derive(Debug)]
pub(crate) struct Spare(Arc<Entry>);

impl Sleep {
    /// A sleep until `deadline_nanos` on `timer`; it registers on its first pending poll.
    pub(crate) fn new(timer: TimerRef, deadline_nanos: u64) -> Sleep {
        Sleep {
            timer,
            deadline: deadline_nanos,
            entry: None,
            wait: 0,
            spare: None,
        }
    }

    /// This sleep's entry allocation, if no timer holds it any more; otherwise `None`, and
    /// the sleep is dropped as usual (a pending registration is cancelled).
    pub(crate) fn into_spare(mut self) -> Option<Spare> {
        let mut entry = self.entry.take().or_else(|| self.spare.take())?;
        // Unshared: no inbox or heap holds it, and a timer drops an entry only once it is
        // out of `PENDING` (fired, elapsed or cancelled) with its counts settled (driver.rs),
        // so nothing will read it again. A get_mut that succeeds is the `Arc`'s own
        // synchronisation with the timer's last drop of its reference.
        if Arc::get_mut(&mut entry).is_some() {
            return Some(Spare(entry));
        }
        self.entry = Some(entry); // Still held by the timer: unregister it on drop.
        None
    }

    /// Lets this sleep's registration reuse `spare`'s allocation.
    pub(crate) fn with_spare(mut self, spare: Option<Spare>) -> Sleep {
        if self.entry.is_none() {
            self.spare = spare.map(|Spare(entry)| entry);
        }
        self
    }

    /// Lets the timer fire this sleep as late as a sleep registered `wait` nanoseconds before
    /// its deadline may be (see `coalescing_slack`), if that is more than its own length: a
    /// waiter queued for half a second may be woken a millisecond late even if its sleep
    /// was registered only just before its instant. Never early.
    pub(crate) fn with_wait(mut self, wait: u64) -> Sleep {
        self.wait = wait;
        self
    }

    /// The instant this sleep completes at (or soon after).
    ///
    /// For a sleep on a [`ManualClock`](crate::ManualClock)'s timer this is a nominal
    /// instant: tollgate's real-time origin plus the deadline's nanoseconds on the manual clock.
    /// A deadline before that origin (tollgate's first use in the process) reads back as the
    /// origin: the sleep is elapsed either way.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let at = Instant::now() + Duration::from_secs(1);
    /// assert_eq!(tollgate::timer::sleep_until(at).deadline(), at);
    /// ```
    pub fn deadline(&self) -> Instant {
        instant_at(self.deadline)
    }

    /// Whether the deadline has passed (a poll would complete).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// assert!(tollgate::timer::sleep(Duration::ZERO).is_elapsed());
    /// assert!(!tollgate::timer::sleep(Duration::from_secs(60)).is_elapsed());
    /// let mut short = tollgate::timer::sleep(Duration::from_millis(1));
    /// futures_executor::block_on(&mut short);
    /// assert!(short.is_elapsed());
    /// ```
    pub fn is_elapsed(&self) -> bool {
        self.entry.as_ref().is_some_and(|entry| entry.is_fired())
            || self.deadline <= self.timer.core().now()
    }

    /// Whether the timer fired this sleep's registration (without reading the clock).
    pub(crate) fn has_fired(&self) -> bool {
        self.entry.as_ref().is_some_and(|entry| entry.is_fired())
    }

    /// Moves the deadline to `deadline`, whether or not this sleep has completed.
    ///
    /// A registration for the old deadline is cancelled; the next poll registers the new one,
    /// so poll the sleep again after a reset (as a `poll` method that resets does anyway).
    /// For a sleep on a manual clock's timer, `deadline` is read on the same nominal scale as
    /// [`deadline`](Self::deadline).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use futures_util::FutureExt;
    ///
    /// let mut sleep = tollgate::timer::sleep(Duration::from_secs(3600));
    /// assert!((&mut sleep).now_or_never().is_none()); // registered for an hour from now
    /// let soon = Instant::now() + Duration::from_millis(1);
    /// sleep.reset(soon);
    /// assert_eq!(sleep.deadline(), soon);
    /// futures_executor::block_on(sleep); // completes after 1 ms, not an hour
    /// assert!(Instant::now() >= soon);
    /// ```
    pub fn reset(&mut self, deadline: Instant) {
        self.reset_nanos(nanos_since_origin(deadline));
    }

    /// [`reset`](Self::reset) in the timer's nanoseconds.
    pub(crate) fn reset_nanos(&mut self, deadline_nanos: u64) {
        self.unregister();
        self.deadline = deadline_nanos;
    }

    fn unregister(&mut self) {
        if let Some(entry) = self.entry.take() {
            if !entry.is_fired() {
                self.timer.core().cancel(&entry);
            }
        }
    }
}

impl Sleep {
    /// [`poll`](Future::poll) for a caller that has just read this sleep's timer: `now` is
    /// that reading (never later than the timer's present), or `None` to read it here. With
    /// a reading, the registration reads no clock: the slack and the "already due" check use
    /// `now`, which can only make the sleep register when it could have completed (the timer
    /// then fires it; never early). For the real-time timer it also skips the re-read after
    /// registering: a deadline that passes meanwhile is fired by the driver, whose
    /// registration protocol loses no entry (`driver.rs`). A manual timer always re-reads,
    /// since only that read closes its race with `advance_to`. A queue's hand-over registers
    /// its head's sleep this way: two clock reads fewer per admission.
    pub(crate) fn poll_at(&mut self, cx: &mut Context<'_>, now: Option<u64>) -> Poll<()> {
        let timer: &TimerCore = self.timer.core();
        let entry = match &self.entry {
            Some(entry) => {
                if entry.is_fired() {
                    return Poll::Ready(());
                }
                // Register, then check: a fire that took the old waker is seen below, and one
                // that takes this waker wakes it.
                entry.waker.register(cx.waker());
                entry
            }
            None => {
                let now = now.unwrap_or_else(|| timer.now());
                if self.deadline <= now {
                    return Poll::Ready(());
                }
                let slack = coalescing_slack((self.deadline - now).max(self.wait));
                let fresh = Entry::with_slack(self.deadline, slack);
                let entry = match self.spare.take() {
                    // Unshared since `into_spare` checked (the spare is never cloned): reuse it.
                    Some(mut spare) => match Arc::get_mut(&mut spare) {
                        Some(slot) => {
                            *slot = fresh;
                            spare
                        }
                        None => Arc::new(fresh),
                    },
                    None => Arc::new(fresh),
                };
                // Not yet shared: this cannot race a fire.
                entry.waker.register(cx.waker());
                timer.register(Arc::clone(&entry));
                self.entry.insert(entry)
            }
        };
        if entry.is_fired() {
            return Poll::Ready(());
        }
        if now.is_some() && matches!(self.timer, TimerRef::Global) {
            return Poll::Pending; // The driver fires it (see above).
        }
        if self.deadline <= timer.now() {
            // The deadline passed while we registered: complete without the driver.
            timer.elapse(entry);
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().poll_at(cx, None)
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.unregister();
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("timer", &self.timer)
            .field("deadline", &Duration::from_nanos(self.deadline))
            .field("registered", &self.entry.is_some())
            .field("fired", &self.entry.as_ref().is_some_and(|e| e.is_fired()))
            .finish()
    }
}

/// A future that completes `duration` from now (or later, never earlier), on tollgate's own
/// timer thread. Needs no async runtime.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let start = Instant::now();
/// futures_executor::block_on(async {
///     tollgate::timer::sleep(Duration::from_millis(1)).await;
/// });
/// assert!(start.elapsed() >= Duration::from_millis(1)); // never early
/// ```
pub fn sleep(duration: Duration) -> Sleep {
    let now = nanos_since_origin(Instant::now());
    Sleep::new(
        TimerRef::Global,
        now.saturating_add(saturating_nanos(duration)),
    )
}

/// A future that completes at `deadline` (or later, never earlier), on tollgate's own timer
/// thread. A deadline in the past completes at the first poll. Needs no async runtime.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let deadline = Instant::now() + Duration::from_millis(2);
/// futures_executor::block_on(tollgate::timer::sleep_until(deadline));
/// assert!(Instant::now() >= deadline);
/// ```
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep::new(TimerRef::Global, nanos_since_origin(deadline))
}
