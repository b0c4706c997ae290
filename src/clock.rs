//! Time sources: the [`Clock`] trait, the monotonic default, and a manual clock for tests.
//!
//! tollgate measures time as [`Timestamp`]s: nanoseconds since a clock's fixed origin. Callers
//! that already read the time once per event-loop turn can pass it in (`check_at`) instead of
//! letting every check read the clock.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::{Duration, Instant};

// Clocks use std's types even under loom: the models pass time in explicitly and never read a
// clock, and loom's `Arc` cannot hold a `dyn Clock`.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::timer::{Sleep, TimerCore, TimerRef};

/// A point in time on a limiter's clock: nanoseconds since the clock's origin.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Timestamp;
///
/// let t = Timestamp::from_nanos(1_500);
/// assert_eq!((t + Duration::from_nanos(500)).as_nanos(), 2_000);
/// assert_eq!(t.saturating_duration_since(Timestamp::ZERO), Duration::from_nanos(1_500));
/// ```
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The clock's origin.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, Timestamp};
    ///
    /// assert_eq!(Timestamp::ZERO.as_nanos(), 0);
    /// assert_eq!(Timestamp::ZERO, Timestamp::default());
    /// assert_eq!(ManualClock::new().now(), Timestamp::ZERO);
    /// ```
    pub const ZERO: Timestamp = Timestamp(0);

    /// A timestamp `nanos` after the origin.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Timestamp;
    ///
    /// const TWO_SECONDS: Timestamp = Timestamp::from_nanos(2_000_000_000);
    /// assert_eq!(TWO_SECONDS.saturating_duration_since(Timestamp::ZERO), Duration::from_secs(2));
    /// ```
    pub const fn from_nanos(nanos: u64) -> Timestamp {
        Timestamp(nanos)
    }

    /// Nanoseconds since the origin.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Timestamp;
    ///
    /// assert_eq!(Timestamp::from_nanos(42).as_nanos(), 42);
    /// assert_eq!((Timestamp::ZERO + Duration::from_micros(3)).as_nanos(), 3_000);
    /// ```
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// How long after `earlier` this is, or zero if it is not later.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Timestamp;
    ///
    /// let (a, b) = (Timestamp::from_nanos(100), Timestamp::from_nanos(250));
    /// assert_eq!(b.saturating_duration_since(a), Duration::from_nanos(150));
    /// assert_eq!(a.saturating_duration_since(b), Duration::ZERO);
    /// ```
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    /// Saturates at `u64::MAX` nanoseconds instead of overflowing.
    fn add(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(saturating_nanos(d)))
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;
    /// Saturates at the origin instead of underflowing.
    fn sub(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(saturating_nanos(d)))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({:?})", Duration::from_nanos(self.0))
    }
}

pub(crate) fn saturating_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of monotonic time for a limiter.
///
/// `now` must never decrease. Timestamps later than about 18 years after the origin saturate
/// (the limiter keeps working but no longer sees time pass), so origins should be recent.
///
/// Waits (`until_ready`) on a limiter with a custom clock sleep on tollgate's real-time timer
/// for as long as the clock says is left at reservation time: exact for clocks that advance
/// at the rate of real time, approximate for any other.
///
/// # Examples
///
/// ```
/// use tollgate::{Clock, DirectLimiter, Quota, Timestamp};
///
/// // A clock stopped one second after its origin.
/// #[derive(Debug)]
/// struct Stopped;
/// impl Clock for Stopped {
///     fn now(&self) -> Timestamp { Timestamp::from_nanos(1_000_000_000) }
/// }
///
/// let limiter = DirectLimiter::with_clock(Quota::per_second(1), Stopped);
/// assert_eq!(limiter.now(), Timestamp::from_nanos(1_000_000_000));
/// assert!(limiter.check().is_ok());
/// assert!(limiter.check().is_err()); // time never passes, so no cell comes back
/// ```
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The default clock: `std::time::Instant`, counted from tollgate's process-wide origin.
///
/// Every `MonotonicClock` shares one origin (the first time any of them, or tollgate's timer,
/// was used), so their timestamps agree with each other and with the deadlines of tollgate's
/// timer. `Instant` is monotonic on every tier-1 platform (unlike a raw TSC read, which is
/// not guaranteed to agree across cores).
///
/// # Examples
///
/// ```
/// use tollgate::{Clock, MonotonicClock};
///
/// let clock = MonotonicClock::new();
/// let (a, b) = (clock.now(), clock.now());
/// assert!(b >= a);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock on tollgate's process-wide origin (see the type's docs).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{MonotonicClock, Timestamp};
    ///
    /// let (a, b) = (MonotonicClock::new(), MonotonicClock::new());
    /// let t = Timestamp::from_nanos(1_000);
    /// assert_eq!(a.instant(t), b.instant(t)); // one origin for every clock
    /// ```
    pub fn new() -> MonotonicClock {
        MonotonicClock {
            origin: crate::timer::origin(),
        }
    }

    /// The `Instant` a timestamp of this clock stands for.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tollgate::{Clock, MonotonicClock, Timestamp};
    ///
    /// let clock = MonotonicClock::new();
    /// let t = clock.now();
    /// let deadline = clock.instant(t + Duration::from_millis(250));
    /// assert_eq!(deadline - clock.instant(t), Duration::from_millis(250));
    /// assert!(clock.instant(Timestamp::ZERO) <= Instant::now());
    /// ```
    pub fn instant(&self, t: Timestamp) -> Instant {
        self.origin + Duration::from_nanos(t.0)
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Timestamp {
        let d = Instant::now().saturating_duration_since(self.origin);
        // u64 arithmetic instead of `as_nanos()`'s u128: this runs on every check. Saturates
        // after 584 years, long after the limiter's own 18-year horizon.
        Timestamp(
            d.as_secs()
                .saturating_mul(1_000_000_000)
                .saturating_add(u64::from(d.subsec_nanos())),
        )
    }
}

/// A clock that moves only when told to: for deterministic tests.
///
/// Clones share the same time, so a test keeps one handle and gives another to the limiter.
/// Each clock also drives its own timer: futures that wait on a limiter with this clock are
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
    nanos: Arc<AtomicU64>,
    /// Follows `nanos`: every change of the time is followed by an `advance_to` of at least
    /// the new value, so the timer never runs ahead of the clock and catches up with it when
    /// the last concurrent change returns. (A separate value, not the timer's own, keeps
    /// reading this clock free of the timer's loom-modelled atomics.)
    timer: crate::sync::Arc<TimerCore>,
}

impl Default for ManualClock {
    fn default() -> ManualClock {
        ManualClock {
            nanos: Arc::default(),
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
        // ordering: the time is a single value with no data hanging off it.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(saturating_nanos(d)))
            });
        self.sync_timer();
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
        let old = self.nanos.fetch_max(t.0, Ordering::Relaxed);
        assert!(
            old <= t.0,
            "ManualClock::set({t:?}) would move time backwards"
        );
        self.sync_timer();
    }

    /// The timer this clock drives, for futures that wait on its time.
    pub(crate) fn timer(&self) -> TimerRef {
        TimerRef::Manual(crate::sync::Arc::clone(&self.timer))
    }

    fn sync_timer(&self) {
        // ordering: our own write above or later (coherence); the timer orders the time it
        // is given against registrations itself.
        self.timer.advance_to(self.nanos.load(Ordering::Relaxed));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.nanos.load(Ordering::Relaxed))
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
        let any: Box<dyn std::any::Any> = Box::new(clock);
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
                let real_now = crate::timer::nanos_since_origin(Instant::now());
                Sleep::new(TimerRef::Global, real_now.saturating_add(left))
            }
        }
    }
}
