//! What a check returns: [`Admitted`] on success, [`CheckError`] otherwise.

use std::fmt;
use std::time::Duration;

use crate::gcra::Gcra;
use crate::time::Timestamp;

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

/// Why a check was refused.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{CheckError, DirectLimiter, ManualClock, Quota, Timestamp};
///
/// let limiter = DirectLimiter::with_clock(Quota::per_second(1), ManualClock::new());
/// assert!(limiter.check().is_ok());
/// let earliest = Timestamp::from_nanos(1_000_000_000);
/// let wait = Duration::from_secs(1);
/// assert_eq!(limiter.check(), Err(CheckError::RateLimited { earliest, wait, limit: 1 }));
/// let never = CheckError::InsufficientCapacity { requested: 2, burst: 1 };
/// assert_eq!(limiter.check_n(2), Err(never));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckError {
    /// The key is over its rate. Nothing was recorded; retrying at `earliest` (after `wait`)
    /// succeeds unless other requests for the key come first.
    RateLimited {
        /// The earliest time at which the same request would be admitted.
        earliest: Timestamp,
        /// `earliest - now`: what to put in a `Retry-After` header.
        wait: Duration,
        /// The burst, for the `limit` header.
        limit: u32,
    },
    /// More cells were asked for than the burst allows: this request can never be admitted,
    /// however long the caller waits.
    InsufficientCapacity {
        /// The cells requested.
        requested: u32,
        /// The burst.
        burst: u32,
    },
    /// The key is new, the limiter holds as many keys as its capacity allows, none has
    /// expired, and the policy is [`FullPolicy::RefuseNewKeys`](crate::FullPolicy).
    TableFull {
        /// The limiter's capacity in keys.
        capacity: usize,
    },
}

impl CheckError {
    /// Whether the key is over its rate (as opposed to a request that can never pass).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, ManualClock, Quota};
    ///
    /// let limiter = DirectLimiter::with_clock(Quota::per_second(1), ManualClock::new());
    /// assert!(limiter.check().is_ok());
    /// assert!(limiter.check().unwrap_err().is_rate_limited());
    /// assert!(!limiter.check_n(2).unwrap_err().is_rate_limited());
    /// ```
    pub fn is_rate_limited(&self) -> bool {
        matches!(self, CheckError::RateLimited { .. })
    }

    /// Whether `n` exceeds the burst.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_second(5));
    /// assert!(limiter.check_n(6).unwrap_err().is_insufficient_capacity());
    /// assert!(limiter.check_n(5).is_ok());
    /// ```
    pub fn is_insufficient_capacity(&self) -> bool {
        matches!(self, CheckError::InsufficientCapacity { .. })
    }

    /// Whether the table was full and refused a new key.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{FullPolicy, Limiter, ManualClock, Quota};
    ///
    /// let limiter = Limiter::builder(Quota::per_second(1))
    ///     .shards(1)
    ///     .capacity(1)
    ///     .full_policy(FullPolicy::RefuseNewKeys)
    ///     .clock(ManualClock::new())
    ///     .build();
    /// assert!(limiter.check("a").is_ok());
    /// assert!(limiter.check("b").unwrap_err().is_table_full());
    /// assert!(!limiter.check("a").unwrap_err().is_table_full()); // known key: rate-limited
    /// ```
    pub fn is_table_full(&self) -> bool {
        matches!(self, CheckError::TableFull { .. })
    }

    /// How long to wait before retrying, if waiting can help.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, ManualClock, Quota};
    ///
    /// let limiter = DirectLimiter::with_clock(Quota::per_second(4), ManualClock::new());
    /// assert!(limiter.check_n(4).is_ok());
    /// assert_eq!(limiter.check().unwrap_err().retry_after(), Some(Duration::from_millis(250)));
    /// assert_eq!(limiter.check_n(5).unwrap_err().retry_after(), None); // waiting cannot help
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match *self {
            CheckError::RateLimited { wait, .. } => Some(wait),
            _ => None,
        }
    }
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::RateLimited { wait, .. } => write!(f, "rate limited; retry in {wait:?}"),
            CheckError::InsufficientCapacity { requested, burst } => write!(
                f,
                "{requested} cells requested but the burst is {burst}: never admissible"
            ),
            CheckError::TableFull { capacity } => write!(
                f,
                "the limiter holds its capacity of {capacity} keys and refuses new ones"
            ),
        }
    }
}

impl std::error::Error for CheckError {}

/// The key is new and the limiter is full (policy
/// [`FullPolicy::RefuseNewKeys`](crate::FullPolicy)): returned by operations that would
/// insert it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{FullPolicy, Limiter, ManualClock, Quota, TableFull};
///
/// let limiter = Limiter::builder(Quota::per_second(1))
///     .shards(1)
///     .capacity(1)
///     .full_policy(FullPolicy::RefuseNewKeys)
///     .clock(ManualClock::new())
///     .build();
/// assert!(limiter.check("a").is_ok());
/// assert_eq!(limiter.penalize("b", Duration::from_secs(1)), Err(TableFull { capacity: 1 }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull {
    /// The limiter's capacity in keys.
    pub capacity: usize,
}

impl fmt::Display for TableFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the limiter holds its capacity of {} keys and refuses new ones",
            self.capacity
        )
    }
}

impl std::error::Error for TableFull {}

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
