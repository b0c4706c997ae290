//! Clocks bound to timers: the [`ManualClock`], which *is* a manual timer, and
//! `ClockSource`, a limiter's clock together with the timer its waits sleep on.
//!
//! This sits above both `time.rs` (the pure time values and the [`Clock`] trait, which know
//! nothing of timers) and the timer (which knows nothing of clocks), and is the only place
//! that binds the two: the limiters take their clock from here, and the waiting engine asks
//! it for the sleep that ends at a timestamp of that clock.

use std::any::Any;
// `ClockSource` holds a foreign clock in std's `Arc` even under loom: the models pass time
// in explicitly or use a `ManualClock`, and loom's `Arc` cannot hold a `dyn Clock`.
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::time::{Clock, MonotonicClock, Timestamp, nanos_since_origin, saturating_nanos};
use crate::timer::{Sleep, TimerCore, TimerRef};

/// A clock that moves only when told to: for deterministic tests.
///
/// Clones share the same time, so a test keeps one handle and gives another to the limiter.
/// Each clock is also its own timer: futures that wait on a limiter with this clock are
/// woken by [`advance`](Self::advance) and [`set`](Self::set), on the calling thread, as soon
/// as their deadlines are reached, never by real time passing.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiter, ManualClock, Quota};
///
/// let clock = ManualClock::new();
/// let limiter = Limiter::builder(Quota::per_second(1)).clock(clock.clone()).build();
/// assert!(limiter.check("k").is_ok());
/// assert!(limiter.check("k").is_err());
/// clock.advance(Duration::from_secs(1));
/// assert!(limiter.check("k").is_ok());
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    /// The manual timer this clock *is*: its time is the clock's time, the only copy, so the
    /// clock and the timer cannot disagree. Every change of the time runs a timer turn
    /// afterwards on the changing thread (`advance_to`/`advance_by`).
    timer: crate::sync::Arc<TimerCore>,
}

impl Default for ManualClock {
    fn default() -> ManualClock {
        ManualClock {
            timer: crate::sync::Arc::new(TimerCore::manual()),
        }
    }
}

impl ManualClock {
    /// A clock standing at [`Timestamp::ZERO`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, Timestamp};
    ///
    /// let clock = ManualClock::new();
    /// assert_eq!(clock.now(), Timestamp::ZERO);
    /// ```
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    /// Moves the clock forward by `d` (saturating), then wakes every waiter whose deadline
    /// has been reached.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock, Timestamp};
    ///
    /// let clock = ManualClock::new();
    /// let handle = clock.clone();
    /// clock.advance(Duration::from_millis(1_500));
    /// assert_eq!(handle.now(), Timestamp::from_nanos(1_500_000_000)); // clones share the time
    /// clock.advance(Duration::MAX);
    /// assert_eq!(clock.now().as_nanos(), u64::MAX); // saturates
    /// ```
    pub fn advance(&self, d: Duration) {
        self.timer.advance_by(saturating_nanos(d));
    }

    /// Sets the clock to `t`, then wakes every waiter whose deadline has been reached.
    ///
    /// # Panics
    ///
    /// If `t` is earlier than the current time: clocks are monotonic.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, Timestamp};
    ///
    /// let clock = ManualClock::new();
    /// clock.set(Timestamp::from_nanos(1_000));
    /// assert_eq!(clock.now().as_nanos(), 1_000);
    /// clock.set(Timestamp::from_nanos(1_000)); // standing still is allowed
    /// ```
    ///
    /// Moving backwards panics:
    ///
    /// ```should_panic
    /// # use tollgate::{ManualClock, Timestamp};
    /// let clock = ManualClock::new();
    /// clock.set(Timestamp::from_nanos(10));
    /// clock.set(Timestamp::from_nanos(5));
    /// ```
    pub fn set(&self, t: Timestamp) {
        // An earlier `t` leaves the time as it is (the timer keeps the maximum), so the
        // panic comes after a turn that changed nothing.
        let old = self.timer.advance_to(t.as_nanos());
        assert!(
            old <= t.as_nanos(),
            "ManualClock::set({t:?}) would move time backwards"
        );
    }

    /// The timer this clock drives, for futures that wait on its time.
    pub(crate) fn timer(&self) -> TimerRef {
        TimerRef::Manual(crate::sync::Arc::clone(&self.timer))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.timer.now())
    }
}

/// The limiter's clock: the monotonic default without dynamic dispatch, or any [`Clock`].
#[derive(Debug, Clone)]
pub(crate) enum ClockSource {
    Monotonic(MonotonicClock),
    /// Waits sleep on the clock's own timer, fired by `advance`/`set`.
    Manual(ManualClock),
    /// Waits sleep on the real timer, for as long as this clock says is left.
    Custom(Arc<dyn Clock>),
}

impl ClockSource {
    /// Recognises tollgate's own clocks, so checks avoid dynamic dispatch and waits on a
    /// `ManualClock` use its timer.
    pub(crate) fn from_clock<C: Clock>(clock: C) -> ClockSource {
        let any: Box<dyn Any> = Box::new(clock);
        let any = match any.downcast::<MonotonicClock>() {
            Ok(c) => return ClockSource::Monotonic(*c),
            Err(any) => any,
        };
        let any = match any.downcast::<ManualClock>() {
            Ok(c) => return ClockSource::Manual(*c),
            Err(any) => any,
        };
        match any.downcast::<C>() {
            Ok(c) => ClockSource::Custom(Arc::new(*c)),
            Err(_) => unreachable!("the box holds a C"),
        }
    }

    #[inline]
    pub(crate) fn now(&self) -> Timestamp {
        match self {
            ClockSource::Monotonic(c) => c.now(),
            ClockSource::Manual(c) => c.now(),
            ClockSource::Custom(c) => c.now(),
        }
    }

    /// This clock's readings are the time of the timer its sleeps register with (tollgate's
    /// own clocks), so one reading serves as the other (`Sleep::poll_at`).
    pub(crate) fn is_timer_time(&self) -> bool {
        !matches!(self, ClockSource::Custom(_))
    }

    /// A sleep that ends when this clock reaches `at` (never before).
    pub(crate) fn sleep_until(&self, at: u64) -> Sleep {
        match self {
            // MonotonicClock counts from the timer's origin: its timestamps are timer time.
            ClockSource::Monotonic(_) => Sleep::new(TimerRef::Global, at),
            ClockSource::Manual(c) => Sleep::new(c.timer(), at),
            // A foreign clock: wait in real time for as long as it says is left. Exact for
            // clocks that run at real time's rate; documented on `Clock`.
            ClockSource::Custom(c) => {
                let left = at.saturating_sub(c.now().as_nanos());
                let real_now = nanos_since_origin(Instant::now());
                Sleep::new(TimerRef::Global, real_now.saturating_add(left))
            }
        }
    }
}
