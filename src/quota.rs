//! [`Quota`]: how many cells per period, and how many at once.

use std::fmt;
use std::time::Duration;

/// The longest emission window tollgate accepts: `burst × interval` must not exceed this
/// (about 18 years), so every timestamp it computes stays inside the 60-bit TAT of a state word.
pub(crate) const MAX_WINDOW_NANOS: u64 = 1 << 59;

/// A rate limit: one cell every `interval`, with up to `burst` cells available at once.
///
/// The guarantee, for any time window of length `W`: at most `burst + floor(W / interval)`
/// cells are admitted. A quota built with [`Quota::per_second`]`(n)` therefore admits `n` cells
/// at once after idle time, then one every `1/n` s: up to `2n - 1` cells in a one-second
/// window that starts with a full burst. Use [`Quota::allow_burst`] to choose the burst
/// explicitly (for example `per_second(10).allow_burst(1)` for strictly evenly spaced cells).
///
/// Intervals are whole nanoseconds; a period that does not divide evenly by `n` is rounded
/// *up*, so rounding never admits more than asked for.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
///
/// let q = Quota::per_second(100).allow_burst(10);
/// assert_eq!(q.interval(), Duration::from_millis(10));
/// assert_eq!(q.burst(), 10);
///
/// // Fractional rates: one cell every ten seconds is 0.1 per second.
/// let slow = Quota::with_period(Duration::from_secs(10));
/// assert_eq!(slow.burst(), 1);
///
/// // The fallible constructor reports bad input instead of panicking.
/// assert!(Quota::try_new(0, Duration::from_secs(1)).is_err());
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct Quota {
    interval_nanos: u64,
    burst: u32,
}

impl Quota {
    /// `cells` per `period`, with a burst of `cells`: the general, fallible constructor. The
    /// `try_` constructors return a [`QuotaError`]; the others panic on the same input.
    ///
    /// # Errors
    ///
    /// [`QuotaError`] if `cells` is zero, the period is zero, the resulting interval is
    /// shorter than a nanosecond, or the burst window exceeds about 18 years.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, QuotaError};
    ///
    /// let q = Quota::try_new(3, Duration::from_secs(1)).unwrap();
    /// assert_eq!(q.burst(), 3);
    /// assert_eq!(q.interval(), Duration::from_nanos(333_333_334)); // rounded up
    /// assert_eq!(Quota::try_new(0, Duration::from_secs(1)), Err(QuotaError::ZeroCells));
    /// ```
    pub fn try_new(cells: u32, period: Duration) -> Result<Quota, QuotaError> {
        if cells == 0 {
            return Err(QuotaError::ZeroCells);
        }
        let period_nanos = period.as_nanos();
        if period_nanos == 0 {
            return Err(QuotaError::ZeroPeriod);
        }
        let interval = period_nanos.div_ceil(u128::from(cells));
        if period_nanos < u128::from(cells) {
            return Err(QuotaError::IntervalBelowOneNanosecond { cells, period });
        }
        let interval = u64::try_from(interval).map_err(|_| QuotaError::WindowTooLong)?;
        Quota::from_parts(interval, cells)
    }

    /// `cells` per `period`, with a burst of `cells`, as [`try_new`](Quota::try_new).
    ///
    /// # Panics
    ///
    /// On the input [`try_new`](Quota::try_new) refuses, naming it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    ///
    /// let q = Quota::new(90, Duration::from_secs(60)); // 90 a minute, 90 at once
    /// assert_eq!((q.interval(), q.burst()), (Duration::from_nanos(666_666_667), 90));
    /// ```
    #[track_caller]
    pub fn new(cells: u32, period: Duration) -> Quota {
        match Quota::try_new(cells, period) {
            Ok(q) => q,
            Err(e) => panic!("Quota::new({cells}, {period:?}): {e}"),
        }
    }

    /// One cell every `period`, burst 1: the way to write fractional rates
    /// (`with_period(Duration::from_secs(10))` is 0.1 per second).
    ///
    /// # Errors
    ///
    /// [`QuotaError`] if the period is zero or longer than about 18 years.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, QuotaError};
    ///
    /// let q = Quota::try_with_period(Duration::from_secs(10)).unwrap();
    /// assert_eq!((q.interval(), q.burst()), (Duration::from_secs(10), 1));
    /// assert_eq!(Quota::try_with_period(Duration::ZERO), Err(QuotaError::ZeroPeriod));
    /// ```
    pub fn try_with_period(period: Duration) -> Result<Quota, QuotaError> {
        Quota::try_new(1, period)
    }

    /// `n` cells per second, burst `n` (the same meaning as governor's `per_second`).
    ///
    /// # Panics
    ///
    /// If `n` is zero or above 10⁹ (an interval below one nanosecond). Use
    /// [`Quota::try_new`] to get an error instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    ///
    /// let q = Quota::per_second(4);
    /// assert_eq!((q.interval(), q.burst()), (Duration::from_millis(250), 4));
    /// ```
    #[track_caller]
    pub fn per_second(n: u32) -> Quota {
        Quota::expect(Quota::try_new(n, Duration::from_secs(1)), n, "per_second")
    }

    /// `n` cells per minute, burst `n`: after idle time all `n` may come at once.
    ///
    /// # Panics
    ///
    /// If `n` is zero. Use [`Quota::try_new`] to get an error instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    ///
    /// let q = Quota::per_minute(30);
    /// assert_eq!((q.interval(), q.burst()), (Duration::from_secs(2), 30));
    /// ```
    #[track_caller]
    pub fn per_minute(n: u32) -> Quota {
        Quota::expect(Quota::try_new(n, Duration::from_secs(60)), n, "per_minute")
    }

    /// `n` cells per hour, burst `n`: after idle time all `n` may come at once.
    ///
    /// # Panics
    ///
    /// If `n` is zero. Use [`Quota::try_new`] to get an error instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    ///
    /// let q = Quota::per_hour(7_200);
    /// assert_eq!((q.interval(), q.burst()), (Duration::from_millis(500), 7_200));
    /// ```
    #[track_caller]
    pub fn per_hour(n: u32) -> Quota {
        Quota::expect(Quota::try_new(n, Duration::from_secs(3600)), n, "per_hour")
    }

    /// One cell every `period`, burst 1.
    ///
    /// # Panics
    ///
    /// If `period` is zero or longer than about 18 years. Use [`Quota::try_with_period`] to
    /// get an error instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    ///
    /// let q = Quota::with_period(Duration::from_millis(100));
    /// assert_eq!((q.interval(), q.burst()), (Duration::from_millis(100), 1));
    /// assert_eq!(q, Quota::per_second(10).allow_burst(1));
    /// ```
    #[track_caller]
    pub fn with_period(period: Duration) -> Quota {
        match Quota::try_with_period(period) {
            Ok(q) => q,
            Err(e) => panic!("Quota::with_period({period:?}): {e}"),
        }
    }

    /// The same interval with a burst of `burst` cells.
    ///
    /// # Panics
    ///
    /// If `burst` is zero or `burst × interval` exceeds about 18 years. Use
    /// [`Quota::try_allow_burst`] to get an error instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    ///
    /// let q = Quota::per_second(10).allow_burst(3);
    /// assert_eq!((q.interval(), q.burst()), (Duration::from_millis(100), 3));
    /// ```
    #[track_caller]
    #[must_use]
    pub fn allow_burst(self, burst: u32) -> Quota {
        match self.try_allow_burst(burst) {
            Ok(q) => q,
            Err(e) => panic!("Quota::allow_burst({burst}): {e}"),
        }
    }

    /// The same interval with a burst of `burst` cells.
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroBurst`] or [`QuotaError::WindowTooLong`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Quota, QuotaError};
    ///
    /// let q = Quota::per_second(10);
    /// assert_eq!(q.try_allow_burst(3).map(|q| q.burst()), Ok(3));
    /// assert_eq!(q.try_allow_burst(0), Err(QuotaError::ZeroBurst));
    /// assert_eq!(Quota::per_hour(1).try_allow_burst(u32::MAX), Err(QuotaError::WindowTooLong));
    /// ```
    pub fn try_allow_burst(self, burst: u32) -> Result<Quota, QuotaError> {
        Quota::from_parts(self.interval_nanos, burst)
    }

    /// The emission interval: one cell becomes available every `interval`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    ///
    /// assert_eq!(Quota::per_minute(120).interval(), Duration::from_millis(500));
    /// ```
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_nanos)
    }

    /// The burst: how many cells may be admitted at once after idle time.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Quota;
    ///
    /// assert_eq!(Quota::per_hour(50).burst(), 50);
    /// assert_eq!(Quota::per_hour(50).allow_burst(5).burst(), 5);
    /// ```
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// How long an emptied key takes to earn its whole burst back: `burst × interval`
    /// (governor's `burst_size_replenished_in`). Also the longest a key's state outlives
    /// its last admission: after this long idle it is forgotten, as good as new.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Quota};
    ///
    /// let quota = Quota::per_second(10).allow_burst(5);
    /// assert_eq!(quota.window(), Duration::from_millis(500));
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Limiter::builder(quota).clock(clock.clone()).build();
    /// for _ in 0..5 {
    ///     assert!(limiter.check("k").is_ok());
    /// }
    /// clock.advance(quota.window());
    /// assert_eq!(limiter.check("k").unwrap().remaining(), 4); // the whole burst, back
    /// ```
    pub fn window(&self) -> Duration {
        // At most 2^59 ns by construction (`from_parts`).
        Duration::from_nanos(self.interval_nanos * u64::from(self.burst))
    }

    pub(crate) fn interval_nanos(&self) -> u64 {
        self.interval_nanos
    }

    pub(crate) fn from_parts(interval_nanos: u64, burst: u32) -> Result<Quota, QuotaError> {
        if burst == 0 {
            return Err(QuotaError::ZeroBurst);
        }
        if interval_nanos == 0 {
            return Err(QuotaError::ZeroPeriod);
        }
        match interval_nanos.checked_mul(u64::from(burst)) {
            Some(window) if window <= MAX_WINDOW_NANOS => Ok(Quota {
                interval_nanos,
                burst,
            }),
            _ => Err(QuotaError::WindowTooLong),
        }
    }

    #[track_caller]
    fn expect(q: Result<Quota, QuotaError>, n: u32, name: &str) -> Quota {
        match q {
            Ok(q) => q,
            Err(e) => panic!("Quota::{name}({n}): {e}"),
        }
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("interval", &self.interval())
            .field("burst", &self.burst)
            .finish()
    }
}

/// Why a [`Quota`] could not be built.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Quota, QuotaError};
///
/// let err = Quota::try_new(2, Duration::from_nanos(1)).unwrap_err();
/// assert!(matches!(err, QuotaError::IntervalBelowOneNanosecond { cells: 2, .. }));
/// assert!(err.to_string().contains("nanosecond"));
/// assert_eq!(Quota::try_with_period(Duration::MAX), Err(QuotaError::WindowTooLong));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaError {
    /// Zero cells per period: a limiter that never admits anything is not a rate.
    ZeroCells,
    /// A zero period (or zero interval).
    ZeroPeriod,
    /// A burst of zero: no request could ever be admitted.
    ZeroBurst,
    /// More than one cell per nanosecond: tollgate's clock resolution.
    IntervalBelowOneNanosecond {
        /// The requested cells.
        cells: u32,
        /// The requested period.
        period: Duration,
    },
    /// `burst × interval` exceeds about 18 years (2^59 ns).
    WindowTooLong,
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaError::ZeroCells => f.write_str("a quota needs at least one cell per period"),
            QuotaError::ZeroPeriod => f.write_str("a quota's period must be longer than zero"),
            QuotaError::ZeroBurst => f.write_str("a quota's burst must be at least 1"),
            QuotaError::IntervalBelowOneNanosecond { cells, period } => write!(
                f,
                "{cells} cells per {period:?} is more than one per nanosecond, the clock's resolution"
            ),
            QuotaError::WindowTooLong => f.write_str(
                "burst × interval exceeds the longest supported window (2^59 ns, about 18 years)",
            ),
        }
    }
}

impl std::error::Error for QuotaError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_second_matches_governor_meaning() {
        let q = Quota::per_second(2);
        assert_eq!(q.interval(), Duration::from_millis(500));
        assert_eq!(q.burst(), 2);
        assert_eq!(Quota::per_minute(60).interval(), Duration::from_secs(1));
        assert_eq!(Quota::per_hour(1).interval(), Duration::from_secs(3600));
    }

    #[test]
    fn uneven_periods_round_the_interval_up() {
        let q = Quota::per_second(3);
        assert_eq!(q.interval_nanos(), 333_333_334);
    }

    #[test]
    fn bad_input_is_an_error() {
        assert_eq!(
            Quota::try_new(0, Duration::from_secs(1)),
            Err(QuotaError::ZeroCells)
        );
        assert_eq!(
            Quota::try_new(1, Duration::ZERO),
            Err(QuotaError::ZeroPeriod)
        );
        assert!(matches!(
            Quota::try_new(2, Duration::from_nanos(1)),
            Err(QuotaError::IntervalBelowOneNanosecond { .. })
        ));
        assert_eq!(
            Quota::try_with_period(Duration::MAX),
            Err(QuotaError::WindowTooLong)
        );
        assert_eq!(
            Quota::per_second(1).try_allow_burst(0),
            Err(QuotaError::ZeroBurst)
        );
        assert_eq!(
            Quota::per_hour(1).try_allow_burst(u32::MAX),
            Err(QuotaError::WindowTooLong)
        );
    }

    #[test]
    #[should_panic(expected = "Quota::new(0, 1s): ")]
    fn new_panics_where_try_new_errs() {
        let _ = Quota::new(0, Duration::from_secs(1));
    }

    #[test]
    #[should_panic(expected = "Quota::per_second(0)")]
    fn shorthand_panics_naming_the_value() {
        let _ = Quota::per_second(0);
    }
}
