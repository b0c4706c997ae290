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

    /// An admission decided outside this crate's limiters — by another process, or a server
    /// such as Redis (`tollgate-redis`) — so that code written for [`Admitted`] (rate-limit
    /// headers, say) serves both. `remaining` is capped at `limit`; `reset_after` saturates
    /// at about 584 years; an admission with nothing remaining and a zero `reset_after` (a
    /// contradiction: a reset key has its whole burst) reports a `reset_after` of 1 ns.
    ///
    /// It gives nothing back: [`Limiter::undo`](crate::Limiter::undo) and its kin return
    /// `false` for it and touch no key, so an admission built here cannot forge a refund.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Admitted, Limiter, Quota};
    ///
    /// let ok = Admitted::from_parts(10, 3, Duration::from_millis(700));
    /// assert_eq!((ok.limit(), ok.remaining()), (10, 3));
    /// assert_eq!(ok.reset_after(), Duration::from_millis(700));
    ///
    /// let limiter = Limiter::keyed(Quota::per_second(10));
    /// limiter.check("k").unwrap();
    /// assert!(!limiter.undo("k", ok)); // not this limiter's: nothing is given back
    /// assert_eq!(Admitted::from_parts(10, 0, Duration::ZERO).reset_after(), Duration::from_nanos(1));
    /// ```
    // Not part of the stable API: tollgate-redis makes the `Admitted` of a fleet's answer
    // with it. Public for that crate only, so hidden from the docs.
    #[doc(hidden)]
    pub fn from_parts(limit: u32, remaining: u32, reset_after: Duration) -> Admitted {
        let remaining = remaining.min(limit);
        // Kept well below u64::MAX so that `tolerance` below cannot saturate.
        let reset = u64::try_from(reset_after.as_nanos())
            .unwrap_or(u64::MAX)
            .min(u64::MAX >> 1);
        let reset = if remaining == 0 { reset.max(1) } else { reset };
        // At now = 0 with TAT = reset: remaining = (tolerance - reset) / interval + 1 for a
        // tolerance of at least `reset`, else 0; interval 1 ns makes that exact.
        let tolerance = match remaining {
            0 => reset - 1,
            r => reset + u64::from(r - 1),
        };
        let gcra = Gcra {
            interval: 1,
            tolerance,
            burst: limit,
        };
        // prev == tat: "stored nothing", which undo refuses before looking at any key.
        let written = Written {
            prev: reset,
            tat: reset,
            epoch: 0,
        };
        Admitted::new(gcra, 0, written)
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
    #[inline]
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
    #[inline]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_parts_reports_what_it_was_given() {
        let resets = [1, 999, 1_000_000_007, u64::MAX >> 2];
        for limit in [0, 1, 2, 7, u32::MAX] {
            for remaining in [0, 1, 3, u32::MAX] {
                for reset in resets {
                    let ok = Admitted::from_parts(limit, remaining, Duration::from_nanos(reset));
                    assert_eq!(ok.limit(), limit);
                    assert_eq!(
                        ok.remaining(),
                        remaining.min(limit),
                        "{limit} {remaining} {reset}"
                    );
                    assert_eq!(ok.reset_after(), Duration::from_nanos(reset));
                    let w = ok.written();
                    assert_eq!(w.prev, w.tat, "undo must see 'stored nothing'");
                }
            }
        }
        let huge = Admitted::from_parts(5, 5, Duration::MAX);
        assert_eq!(huge.remaining(), 5);
        assert_eq!(huge.reset_after(), Duration::from_nanos(u64::MAX >> 1));
    }
}
