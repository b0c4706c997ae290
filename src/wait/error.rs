//! [`WaitError`]: why a wait ended without admission.

use std::fmt;
use std::time::Duration;

use crate::time::Timestamp;

/// Why an `until_ready` future (or blocking wait) ended without admission. It holds nothing
/// in any case: no cell of the key is spent on it.
///
/// # Examples
///
/// ```
/// use tollgate::{DirectLimiter, Quota, WaitError};
///
/// let limiter = DirectLimiter::new(Quota::per_second(2));
/// match futures_executor::block_on(limiter.until_n_ready(3)) {
///     Err(WaitError::InsufficientCapacity { requested, burst }) => {
///         assert_eq!((requested, burst), (3, 2));
///     }
///     other => panic!("unexpected {other:?}"),
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitError {
    /// More cells were asked for than the burst allows: no wait could ever satisfy them.
    InsufficientCapacity {
        /// The cells requested.
        requested: u32,
        /// The burst.
        burst: u32,
    },
    /// The wait would end after the bound given with `.within(d)` or `.until(t)`: refused up
    /// front, or at the bound if the prediction was upset while it waited.
    TooLong {
        /// When the cells would have been admitted.
        earliest: Timestamp,
        /// How long that is from now.
        wait: Duration,
    },
    /// The key is new and the table is full under
    /// [`FullPolicy::RefuseNewKeys`](crate::FullPolicy::RefuseNewKeys).
    TableFull {
        /// The limiter's capacity in keys.
        capacity: usize,
    },
}

impl WaitError {
    /// Whether the wait was refused for exceeding its bound.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_minute(1));
    /// limiter.check().unwrap();
    /// let wait = limiter.until_ready().within(Duration::from_secs(1));
    /// let err = futures_executor::block_on(wait).unwrap_err();
    /// assert!(err.is_too_long()); // the next cell is a minute off
    /// assert!(!err.is_insufficient_capacity());
    /// ```
    pub fn is_too_long(&self) -> bool {
        matches!(self, WaitError::TooLong { .. })
    }

    /// Whether `n` exceeds the burst.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_second(5));
    /// let err = futures_executor::block_on(limiter.until_n_ready(6)).unwrap_err();
    /// assert!(err.is_insufficient_capacity()); // 6 cells can never fit a burst of 5
    /// assert!(!err.is_too_long());
    /// ```
    pub fn is_insufficient_capacity(&self) -> bool {
        matches!(self, WaitError::InsufficientCapacity { .. })
    }
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::InsufficientCapacity { requested, burst } => write!(
                f,
                "{requested} cells requested but the burst is {burst}: never admissible"
            ),
            WaitError::TooLong { wait, .. } => {
                write!(f, "admission would take {wait:?}, longer than allowed")
            }
            WaitError::TableFull { capacity } => write!(
                f,
                "the limiter holds its capacity of {capacity} keys and refuses new ones"
            ),
        }
    }
}

impl std::error::Error for WaitError {}
