//! What an admitted check returns: [`Admitted`] (refusals are [`Error`](crate::Error)s).

use std::time::Duration;

use crate::gcra::Gcra;

/// A check was admitted. Carries what an HTTP layer needs for rate-limit headers, computed
/// only when asked for.
///
/// # Examples
///
/// ```
/// use tollgate::{Limiter, Quota};
///
/// let limiter = Limiter::keyed(Quota::per_second(10));
/// let ok = limiter.check("client").unwrap();
/// assert_eq!(ok.limit(), 10);
/// assert_eq!(ok.remaining(), 9);
/// assert!(ok.reset_after() <= std::time::Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Admitted {
    now: u64,
    gcra: Gcra,
    /// What the check stored, so that [`Limiter::undo`](crate::Limiter::undo) can give it back.
    written: Written,
}

impl Admitted {
    pub(crate) fn new(gcra: Gcra, now: u64, written: Written) -> Admitted {
        Admitted { now, gcra, written }
    }

    pub(crate) fn written(&self) -> Written {
        self.written
    }

    /// The burst: how many cells the key may use at once (the `limit` header).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_second(10).allow_burst(4));
    /// assert_eq!(limiter.check().unwrap().limit(), 4);
    /// ```
    pub fn limit(&self) -> u32 {
        self.gcra.burst
    }

    /// How many more single cells would be admitted right now (the `remaining` header).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, ManualClock, Quota};
    ///
    /// let limiter = DirectLimiter::with_clock(Quota::per_second(10), ManualClock::new());
    /// assert_eq!(limiter.check().unwrap().remaining(), 9);
    /// assert_eq!(limiter.check_n(9).unwrap().remaining(), 0);
    /// ```
    pub fn remaining(&self) -> u32 {
        self.gcra.remaining(self.written.tat, self.now)
    }

    /// How long until the key is back to a full burst (the `reset` header).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, ManualClock, Quota};
    ///
    /// let limiter = DirectLimiter::with_clock(Quota::per_second(10), ManualClock::new());
    /// let ok = limiter.check_n(3).unwrap();
    /// assert_eq!(ok.reset_after(), Duration::from_millis(300)); // 3 cells at 100 ms each
    /// ```
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.written.tat.saturating_sub(self.now))
    }
}

/// What one admission or reservation wrote, so that it can be undone (`engine::undo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Written {
    /// The state the write replaced.
    pub(crate) prev: u64,
    /// The state it stored (`prev` itself if it stored nothing: `n = 0`).
    pub(crate) tat: u64,
    /// The word's removal epoch, read before the write.
    pub(crate) epoch: u64,
}
