//! Waiting on a [`DirectLimiter`]: [`DirectUntilReady`], blocking, throttling and pacing.

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;

use super::pace::Paced;
use super::{DirectLimiter, DirectState, Shared};
use crate::engine::OwnedShared;
use crate::error::Error;
use crate::sync::Arc;
use crate::time::{Timestamp, saturating_nanos};
use crate::timer::Sleep;
use crate::wait::{Bound, Cells, Throttled, WaitShard, Waiter, block_on};

/// Completes when the direct limiter admits the requested cells: the future of
/// [`DirectLimiter::until_ready`] and its forms.
///
/// # Cancel safety
///
/// Dropping it before its turn comes costs nothing: the other waiters are admitted as if it
/// had never asked (see [`UntilReady`](crate::UntilReady), whose engine it shares). Dropping
/// it after its instant came, but before it was polled again, counts as an admission (its
/// cells were used).
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
    waiter: Waiter<DirectState<&'a Arc<Shared>>>,
}

impl DirectUntilReady<'_> {
    /// Waits no longer than `max`, as [`UntilReady::within`](crate::UntilReady::within).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_second(1));
    /// futures_executor::block_on(async {
    ///     limiter.until_ready().await.unwrap();
    ///     let err = limiter.until_ready().within(Duration::from_millis(10)).await.unwrap_err();
    ///     assert!(err.is_rate_limited());
    /// });
    /// ```
    pub fn within(self, max: Duration) -> Self {
        DirectUntilReady {
            waiter: self.waiter.bounded(Bound::Within(saturating_nanos(max))),
        }
    }

    /// Waits for cells admitted no later than `deadline`, as
    /// [`UntilReady::until`](crate::UntilReady::until).
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
    ///     limiter.until_n_ready(3).until(deadline).await.unwrap();
    ///     assert!(limiter.until_n_ready(2).until(deadline).await.unwrap_err().is_rate_limited());
    /// });
    /// ```
    pub fn until(self, deadline: Timestamp) -> Self {
        DirectUntilReady {
            waiter: self.waiter.bounded(Bound::Until(deadline.as_nanos())),
        }
    }

    /// Blocks the calling thread until the wait completes, as
    /// [`UntilReady::wait`](crate::UntilReady::wait).
    ///
    /// # Blocking
    ///
    /// Parks the thread: never call it from async code.
    ///
    /// # Errors
    ///
    /// As the awaited future.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_second(1_000).allow_burst(1));
    /// let start = Instant::now();
    /// limiter.until_ready().wait().unwrap(); // at once
    /// limiter.until_ready().wait().unwrap(); // parks ~1 ms
    /// assert!(start.elapsed() >= Duration::from_millis(1));
    /// ```
    pub fn wait(self) -> Result<(), Error> {
        block_on(self)
    }
}

impl Future for DirectUntilReady<'_> {
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().waiter.poll_wait(cx)
    }
}

impl DirectLimiter {
    fn waiter(&self, n: u32) -> DirectUntilReady<'_> {
        DirectUntilReady {
            waiter: Waiter::new(DirectState(self.shared()), n, None),
        }
    }

    /// Waits until one cell is admitted; waiters are admitted in FIFO order, each woken once.
    /// Bound it with [`within`](DirectUntilReady::within) or
    /// [`until`](DirectUntilReady::until), or block on it with
    /// [`wait`](DirectUntilReady::wait).
    ///
    /// # Errors
    ///
    /// None in practice for one cell (the burst is at least 1) unless bounded; the `Result`
    /// matches the other forms.
    ///
    /// # Cancel safety
    ///
    /// See [`DirectUntilReady`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_second(100).allow_burst(1));
    /// let start = Instant::now();
    /// futures_executor::block_on(async {
    ///     for _ in 0..3 {
    ///         limiter.until_ready().await.unwrap(); // 10 ms apart
    ///     }
    /// });
    /// assert!(start.elapsed() >= Duration::from_millis(20)); // the first at once
    /// ```
    pub fn until_ready(&self) -> DirectUntilReady<'_> {
        self.waiter(1)
    }

    /// Waits until `n` cells are admitted at once.
    ///
    /// # Errors
    ///
    /// [`Error::InsufficientCapacity`] at once if `n` exceeds the burst.
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
        self.waiter(n)
    }

    /// Runs `fut` once a cell is admitted.
    ///
    /// # Errors
    ///
    /// The wait's [`Error`] (only possible if the quota changes under it).
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
    /// # Cancel safety
    ///
    /// See [`Paced`](crate::Paced): a drop costs no cell.
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
        Paced::new(DirectState(OwnedShared(Arc::clone(self.shared()))), stream)
    }
}

/// A direct limiter's one queue has the name 0.
impl<P: Deref<Target = Arc<Shared>>> Cells for DirectState<P> {
    type Owned = DirectState<OwnedShared<Shared>>;

    fn owned(&self) -> Self::Owned {
        DirectState(OwnedShared(Arc::clone(&self.0)))
    }

    fn sleep_until(&self, at: u64) -> Sleep {
        self.0.clock.sleep_until(at)
    }

    fn clock_is_timer(&self) -> bool {
        self.0.clock.is_timer_time()
    }

    fn waitlist(&self) -> (&WaitShard, u64) {
        (self.0.waitlists.shard(0), 0)
    }
}
