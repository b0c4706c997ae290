//! Time as values: [`Timestamp`], the [`Clock`] trait, the [`MonotonicClock`] default, and
//! the one conversion between `Instant`s and nanoseconds since tollgate's real-time origin.
//!
//! tollgate measures time as [`Timestamp`]s: nanoseconds since a clock's fixed origin. Callers
//! that already read the time once per event-loop turn can pass it in (`check_at`) instead of
//! letting every check read the clock.
//!
//! This is the bottom of the time layer, above only the clock read itself
//! (`monotonic_now.rs`), so the timer (which counts its deadlines in these nanoseconds) and
//! the limiters can both build on it. What binds a clock to a timer (the
//! [`ManualClock`](crate::ManualClock), a limiter's `ClockSource`) lives above the timer,
//! in `manual_clock.rs` and `clock_source.rs`.

use std::fmt;
use std::ops::{Add, Sub};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::monotonic_now::{Origin, nanos_between};

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

/// A source of monotonic time for a limiter.
///
/// `now` must never decrease. Timestamps later than 2^59 ns (18.3 years) after the origin
/// saturate: the limiter keeps answering, but no longer sees time pass, so a key over its
/// burst stays refused, a wait for an instant after that point is refused at once if it has
/// a bound, and never ends if it has none. Origins should therefore be recent: a limiter
/// given a clock of your own that already reads more than 2^58 ns (9.1 years), as one
/// counting from the Unix epoch does, panics where it is configured. Timestamps passed to
/// `check_at` saturate the same way.
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

/// The default clock: the system's monotonic clock, the one `std::time::Instant` reads,
/// counted from tollgate's process-wide origin.
///
/// Every `MonotonicClock` shares one origin (the first time any of them, or tollgate's timer,
/// was used), so their timestamps agree with each other and with the deadlines of tollgate's
/// timer. The clock is monotonic on every tier-1 platform (unlike a raw TSC read, which is
/// not guaranteed to agree across cores). On 64-bit Linux it is read with
/// `clock_gettime(CLOCK_MONOTONIC)` directly, the call behind `Instant::now`, without std's
/// conversions around it, which are most of a hot key's check otherwise; its timestamps may
/// lead `Instant`-based ones by the tens of nanoseconds the origin took to read, never trail
/// them. Elsewhere it reads `Instant`.
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
    origin: Origin,
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
        MonotonicClock { origin: origins() }
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
        self.origin.instant + Duration::from_nanos(t.0)
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
        Timestamp(self.origin.elapsed())
    }
}

/// Nanoseconds in `d`, saturating at `u64::MAX` (584 years).
pub(crate) fn saturating_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The process-wide origin of real time: the global timer counts nanoseconds from it, and so
/// does every [`MonotonicClock`], so a limiter's timestamps are global timer nanoseconds.
pub(crate) fn origin() -> Instant {
    origins().instant
}

/// [`origin`] on both of `monotonic_now`'s scales.
pub(crate) fn origins() -> Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    *ORIGIN.get_or_init(Origin::new)
}

/// Nanoseconds from [`origin`] to `t` (0 if `t` is earlier; saturating after 584 years).
pub(crate) fn nanos_since_origin(t: Instant) -> u64 {
    nanos_between(origin(), t)
}

/// The instant `nanos` after [`origin`] (clamped to a century if that does not fit).
pub(crate) fn instant_at(nanos: u64) -> Instant {
    let origin = origin();
    origin
        .checked_add(Duration::from_nanos(nanos))
        .unwrap_or_else(|| origin + Duration::from_secs(100 * 365 * 24 * 60 * 60))
}
