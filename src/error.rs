//! [`Error`]: why a check, a wait or a penalty did not go through. One type for every
//! operation on a limiter, so a caller matches one set of variants and asks one
//! [`retry_after`](Error::retry_after).

use std::fmt;
use std::time::Duration;

use crate::time::Timestamp;

/// Why a check, a wait or a penalty did not go through. Nothing was recorded or held in any
/// case: no cell of the key is spent on a refusal.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{DirectLimiter, Error, ManualClock, Quota, Timestamp};
///
/// let limiter = DirectLimiter::with_clock(Quota::per_second(1), ManualClock::new());
/// assert!(limiter.check().is_ok());
/// let earliest = Timestamp::from_nanos(1_000_000_000);
/// let wait = Duration::from_secs(1);
/// assert_eq!(limiter.check(), Err(Error::RateLimited { earliest, wait, limit: 1 }));
/// let never = Error::InsufficientCapacity { requested: 2, burst: 1 };
/// assert_eq!(limiter.check_n(2), Err(never));
/// // A bounded wait that would take too long says the same as a refused check.
/// let bounded = limiter.until_ready().within(Duration::from_millis(10));
/// let err = futures_executor::block_on(bounded).unwrap_err();
/// assert_eq!(err, Error::RateLimited { earliest, wait, limit: 1 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The key is over its rate: a check was refused, or a bounded wait
    /// ([`within`](crate::UntilReady::within), [`until`](crate::UntilReady::until)) would
    /// end after its bound (refused up front, or at the bound if the prediction was upset
    /// while it waited). Retrying at `earliest` succeeds unless other requests for the key
    /// come first.
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

impl Error {
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
        matches!(self, Error::RateLimited { .. })
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
    /// let err = futures_executor::block_on(limiter.until_n_ready(6)).unwrap_err();
    /// assert!(err.is_insufficient_capacity()); // no wait could ever satisfy it
    /// ```
    pub fn is_insufficient_capacity(&self) -> bool {
        matches!(self, Error::InsufficientCapacity { .. })
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
        matches!(self, Error::TableFull { .. })
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
            Error::RateLimited { wait, .. } => Some(wait),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::RateLimited { wait, .. } => write!(f, "rate limited; retry in {wait:?}"),
            Error::InsufficientCapacity { requested, burst } => write!(
                f,
                "{requested} cells requested but the burst is {burst}: never admissible"
            ),
            Error::TableFull { capacity } => write!(
                f,
                "the limiter holds its capacity of {capacity} keys and refuses new ones"
            ),
        }
    }
}

impl std::error::Error for Error {}
