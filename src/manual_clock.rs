//! [`ManualClock`]: a clock that is also its own timer, for deterministic tests.
//!
//! It sits above both `time.rs` (time values and the [`Clock`] trait, which know nothing of
//! timers) and the timer (which knows nothing of clocks); `clock_source.rs` binds a
//! limiter's clock, this one or another, to the timer its waits sleep on.

use std::time::Duration;

use crate::time::{Clock, Timestamp, saturating_nanos};
use crate::timer::{TimerCore, TimerRef};

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
