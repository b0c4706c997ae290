//! Waiting on a [`DirectLimiter`]: [`DirectUntilReady`], blocking, throttling and pacing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;

use super::WaitError;
use super::blocking::block_on;
use super::cells::{Bound, DirectCells, OwnedShared};
use super::throttle::{Paced, Throttled};
use super::waiter::Waiter;
use crate::direct::{DirectLimiter, Shared};
use crate::sync::Arc;
use crate::time::{Timestamp, saturating_nanos};

/// Completes when the direct limiter admits the requested cells: the future of
/// [`DirectLimiter::until_ready`] and its forms.
///
/// # Cancel safety
///
/// Dropping it before it completes costs nothing: the other waiters are admitted as if it had
/// never asked (see [`UntilReady`](crate::UntilReady), whose engine it shares).
///
/// # Examples
///
/// ```
/// use futures_util::FutureExt;
/// use tollgate::{DirectLimiter, DirectUntilReady, Quota};
///
/// let limiter = DirectLimiter::new(Quota::per_minute(1));
/// let wait: DirectUntilReady<'_> = limiter.until_ready();
/// assert_eq!(wait.now_or_never(), Some(Ok(()))); // the burst is free: ready at first poll
/// assert!(limiter.until_ready().now_or_never().is_none()); // the next cell is a minute off
/// ```
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct DirectUntilReady<'a> {
    waiter: Waiter<DirectCells<&'a Arc<Shared>>>,
}

impl Future for DirectUntilReady<'_> {
    type Output = Result<(), WaitError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().waiter.poll_wait(cx)
    }
}

impl DirectLimiter {
    fn waiter(&self, n: u32, bound: Bound) -> DirectUntilReady<'_> {
        DirectUntilReady {
            waiter: Waiter::new(DirectCells(self.shared()), n, bound),
        }
    }

    /// Waits until one cell is admitted; waiters are admitted in FIFO order, each woken once.
    ///
    /// # Errors
    ///
    /// None in practice for one cell (the burst is at least 1); the `Result` matches the
    /// other forms.
    ///
    /// # Cancel safety
    ///
    /// See [`DirectUntilReady`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_second(100).allow_burst(1));
    /// futures_executor::block_on(async {
    ///     for _ in 0..3 {
    ///         limiter.until_ready().await.unwrap(); // 10 ms apart
    ///     }
    /// });
    /// ```
    pub fn until_ready(&self) -> DirectUntilReady<'_> {
        self.waiter(1, Bound::Unbounded)
    }

    /// Waits until `n` cells are admitted at once.
    ///
    /// # Errors
    ///
    /// [`WaitError::InsufficientCapacity`] at once if `n` exceeds the burst.
    ///
    /// # Cancel safety
    ///
    /// See [`DirectUntilReady`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_minute(10));
    /// futures_executor::block_on(async {
    ///     limiter.until_n_ready(10).await.unwrap(); // the whole burst, at once
    ///     assert!(limiter.until_n_ready(11).await.unwrap_err().is_insufficient_capacity());
    /// });
    /// assert!(limiter.check().is_err());
    /// ```
    pub fn until_n_ready(&self, n: u32) -> DirectUntilReady<'_> {
        self.waiter(n, Bound::Unbounded)
    }

    /// Waits for one cell unless that would take longer than `max`: then fails at once,
    /// holding nothing; and fails by `max`, holding nothing, if its prediction is upset.
    ///
    /// # Errors
    ///
    /// [`WaitError::TooLong`].
    ///
    /// # Cancel safety
    ///
    /// See [`DirectUntilReady`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_minute(1));
    /// futures_executor::block_on(async {
    ///     limiter.until_ready_within(Duration::ZERO).await.unwrap(); // no wait needed
    ///     let err = limiter.until_ready_within(Duration::from_secs(1)).await.unwrap_err();
    ///     assert!(err.is_too_long()); // the next cell is a minute off
    /// });
    /// ```
    pub fn until_ready_within(&self, max: Duration) -> DirectUntilReady<'_> {
        self.waiter(1, Bound::Within(saturating_nanos(max)))
    }

    /// `n` cells, bounded by `max`.
    ///
    /// # Errors
    ///
    /// [`WaitError::InsufficientCapacity`] or [`WaitError::TooLong`].
    ///
    /// # Cancel safety
    ///
    /// See [`DirectUntilReady`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_minute(5));
    /// futures_executor::block_on(async {
    ///     limiter.until_n_ready_within(5, Duration::ZERO).await.unwrap(); // no wait needed
    ///     let err = limiter.until_n_ready_within(2, Duration::from_secs(1)).await.unwrap_err();
    ///     assert!(err.is_too_long()); // two more cells take 24 s
    /// });
    /// ```
    pub fn until_n_ready_within(&self, n: u32, max: Duration) -> DirectUntilReady<'_> {
        self.waiter(n, Bound::Within(saturating_nanos(max)))
    }

    /// Waits for one cell unless it would be admitted after `deadline` (this limiter's clock).
    ///
    /// # Errors
    ///
    /// [`WaitError::TooLong`].
    ///
    /// # Cancel safety
    ///
    /// See [`DirectUntilReady`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, ManualClock, Quota, Timestamp, WaitError};
    ///
    /// let limiter = DirectLimiter::with_clock(Quota::per_second(1), ManualClock::new());
    /// let deadline = limiter.now() + Duration::from_millis(500);
    /// futures_executor::block_on(async {
    ///     limiter.until_ready_until(deadline).await.unwrap(); // admitted now
    ///     let err = limiter.until_ready_until(deadline).await.unwrap_err();
    ///     let wait = Duration::from_secs(1); // the next cell is 1 s off
    ///     assert_eq!(err, WaitError::TooLong { earliest: Timestamp::ZERO + wait, wait });
    /// });
    /// ```
    pub fn until_ready_until(&self, deadline: Timestamp) -> DirectUntilReady<'_> {
        self.waiter(1, Bound::Until(deadline.as_nanos()))
    }

    /// `n` cells, admitted no later than `deadline`.
    ///
    /// # Errors
    ///
    /// [`WaitError::InsufficientCapacity`] or [`WaitError::TooLong`].
    ///
    /// # Cancel safety
    ///
    /// See [`DirectUntilReady`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, ManualClock, Quota};
    ///
    /// let limiter = DirectLimiter::with_clock(Quota::per_second(4), ManualClock::new());
    /// let deadline = limiter.now() + Duration::from_millis(100);
    /// futures_executor::block_on(async {
    ///     limiter.until_n_ready_until(3, deadline).await.unwrap();
    ///     let err = limiter.until_n_ready_until(2, deadline).await.unwrap_err();
    ///     assert!(err.is_too_long()); // two more cells: not before 250 ms
    ///     let err = limiter.until_n_ready_until(5, deadline).await.unwrap_err();
    ///     assert!(err.is_insufficient_capacity());
    /// });
    /// ```
    pub fn until_n_ready_until(&self, n: u32, deadline: Timestamp) -> DirectUntilReady<'_> {
        self.waiter(n, Bound::Until(deadline.as_nanos()))
    }

    /// Blocks the calling thread until one cell is admitted (FIFO with async waiters).
    ///
    /// # Blocking
    ///
    /// Parks the thread. Never call it from async code; use
    /// [`until_ready`](DirectLimiter::until_ready) there.
    ///
    /// # Errors
    ///
    /// As [`until_ready`](DirectLimiter::until_ready).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_second(1_000).allow_burst(1));
    /// let start = Instant::now();
    /// limiter.until_ready_blocking().unwrap(); // at once
    /// limiter.until_ready_blocking().unwrap(); // parks for the next cell, 1 ms on
    /// assert!(start.elapsed() >= Duration::from_millis(1));
    /// ```
    pub fn until_ready_blocking(&self) -> Result<(), WaitError> {
        block_on(self.until_ready())
    }

    /// Blocks until `n` cells are admitted.
    ///
    /// # Blocking
    ///
    /// Parks the thread; see [`until_ready_blocking`](DirectLimiter::until_ready_blocking).
    ///
    /// # Errors
    ///
    /// As [`until_n_ready`](DirectLimiter::until_n_ready).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_minute(3));
    /// limiter.until_n_ready_blocking(3).unwrap(); // the burst is free: no parking
    /// assert!(limiter.check().is_err());
    /// let err = limiter.until_n_ready_blocking(4).unwrap_err();
    /// assert!(err.is_insufficient_capacity()); // refused at once, never parks
    /// ```
    pub fn until_n_ready_blocking(&self, n: u32) -> Result<(), WaitError> {
        block_on(self.until_n_ready(n))
    }

    /// Runs `fut` once a cell is admitted.
    ///
    /// # Errors
    ///
    /// The wait's [`WaitError`] (only possible if the quota changes under it).
    ///
    /// # Cancel safety
    ///
    /// As [`DirectUntilReady`] while waiting; afterwards as `fut`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_minute(1));
    /// let sent = futures_executor::block_on(limiter.throttle(async { "sent" }));
    /// assert_eq!(sent, Ok("sent"));
    /// assert!(limiter.check().is_err()); // the throttle took the cell
    /// ```
    pub fn throttle<F: Future>(&self, fut: F) -> Throttled<DirectUntilReady<'_>, F> {
        Throttled::new(self.until_ready(), fut)
    }

    /// Paces a stream: each item is released only when a cell is admitted for it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::pin::pin;
    /// use futures_core::Stream;
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_second(1_000).allow_burst(1));
    /// let items = futures_util::stream::iter(0..5);
    /// let paced = limiter.pace(items);
    /// let got: Vec<i32> = futures_executor::block_on(futures_util::StreamExt::collect(paced));
    /// assert_eq!(got, vec![0, 1, 2, 3, 4]);
    /// ```
    pub fn pace<St: Stream>(&self, stream: St) -> Paced<St> {
        Paced::new(DirectCells(OwnedShared(Arc::clone(self.shared()))), stream)
    }
}
