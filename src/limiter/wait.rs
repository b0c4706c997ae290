//! Waiting on one key of a [`Limiter`]: [`UntilReady`] and its bounded, blocking and
//! throttling forms, over the waiting engine (`src/wait/`).

use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::ops::Deref;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::{KeyState, Limiter, Shared};
use crate::engine::OwnedShared;
use crate::error::Error;
use crate::gcra::Gcra;
use crate::hash::RandomState;
use crate::quota::Quota;
use crate::sync::Arc;
use crate::time::{Timestamp, saturating_nanos};
use crate::timer::Sleep;
use crate::wait::{Bound, Cells, Throttled, WaitShard, Waiter, block_on};

/// Completes when the key's cells are admitted: the future of [`Limiter::until_ready`] and
/// its `_n` and `_with` forms.
///
/// On its first poll it is admitted at once if a cell is free and nobody waits on the key;
/// otherwise it joins the key's FIFO queue and is woken once, at its admission instant, by
/// tollgate's own timer, so it works under any executor.
///
/// Before it is polled, [`within`](UntilReady::within) and [`until`](UntilReady::until)
/// bound how long it may wait, and [`wait`](UntilReady::wait) blocks the thread on it
/// instead of awaiting it.
///
/// # Cancel safety
///
/// Dropping it before it completes costs nothing: a queued waiter holds no cell, and the
/// queue's head gives its reservation back for the next waiter to take at the same instant.
/// The other waiters are admitted as if this one had never asked. Dropping it after its
/// instant came, but before it was polled again, counts as an admission (its cells were
/// used). [`mem::forget`](std::mem::forget) blocks nobody: the waiter is admitted in its
/// turn and its cells used.
///
/// # Examples
///
/// ```
/// use futures_util::FutureExt;
/// use tollgate::{Limiter, Quota, UntilReady};
///
/// let limiter = Limiter::keyed(Quota::per_minute(1));
/// let wait: UntilReady<'_> = limiter.until_ready("alice");
/// assert_eq!(wait.now_or_never(), Some(Ok(()))); // the burst is free: ready at first poll
/// assert!(limiter.until_ready("alice").now_or_never().is_none()); // the next cell is a minute off
/// ```
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct UntilReady<'a, S: BuildHasher + Send + Sync + 'static = RandomState> {
    waiter: Waiter<KeyState<&'a Arc<Shared<S>>>>,
}

impl<S: BuildHasher + Send + Sync + 'static> UntilReady<'_, S> {
    /// Waits no longer than `max`: if the cells would come later, it fails at once with
    /// [`Error::RateLimited`] and holds nothing (a bounded queue, like nginx's `burst`). If
    /// the prediction is upset while it waits (a penalty, a slower quota, checks taking
    /// cells), it fails by `max`, holding nothing, instead of waiting longer.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_second(1));
    /// futures_executor::block_on(async {
    ///     limiter.until_ready(&7).await.unwrap();
    ///     let err = limiter.until_ready(&7).within(Duration::from_millis(10)).await.unwrap_err();
    ///     assert!(err.is_rate_limited()); // the next cell is 1 s off
    ///     let ok = limiter.until_n_ready(&8, 1).within(Duration::ZERO).await;
    ///     assert!(ok.is_ok()); // no wait needed
    /// });
    /// ```
    pub fn within(self, max: Duration) -> Self {
        UntilReady {
            waiter: self.waiter.bounded(Bound::Within(saturating_nanos(max))),
        }
    }

    /// Waits for cells admitted no later than `deadline` on the limiter's clock; fails as
    /// [`within`](UntilReady::within) does. A deadline already past is a wait of zero:
    /// admitted if a cell is free now.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Error, Limiter, ManualClock, Quota, Timestamp};
    ///
    /// let limiter = Limiter::builder(Quota::per_second(1)).clock(ManualClock::new()).build();
    /// let deadline = limiter.now() + Duration::from_millis(500);
    /// futures_executor::block_on(async {
    ///     limiter.until_ready("alice").until(deadline).await.unwrap(); // admitted now
    ///     let err = limiter.until_ready("alice").until(deadline).await.unwrap_err();
    ///     let wait = Duration::from_secs(1); // the next cell is 1 s off
    ///     assert_eq!(err, Error::RateLimited { earliest: Timestamp::ZERO + wait, wait, limit: 1 });
    /// });
    /// ```
    pub fn until(self, deadline: Timestamp) -> Self {
        UntilReady {
            waiter: self.waiter.bounded(Bound::Until(deadline.as_nanos())),
        }
    }

    /// Blocks the calling thread until the wait completes, in the same FIFO queue as the
    /// awaited form.
    ///
    /// # Blocking
    ///
    /// Parks the thread. Never call it from async code: it would stall the executor's
    /// worker; `.await` the future there.
    ///
    /// # Errors
    ///
    /// As the awaited future.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_second(1_000).allow_burst(1));
    /// let start = Instant::now();
    /// limiter.until_ready("alice").wait().unwrap(); // at once
    /// limiter.until_ready("alice").wait().unwrap(); // parks for the next cell, 1 ms on
    /// assert!(start.elapsed() >= Duration::from_millis(1));
    /// let err = limiter.until_n_ready("alice", 2).wait().unwrap_err();
    /// assert!(err.is_insufficient_capacity()); // refused at once, never parks
    /// ```
    pub fn wait(self) -> Result<(), Error> {
        block_on(self)
    }
}

impl<S: BuildHasher + Send + Sync + 'static> Future for UntilReady<'_, S> {
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().waiter.poll_wait(cx)
    }
}

impl<K: Hash + ?Sized, S: BuildHasher + Send + Sync + 'static> Limiter<K, S> {
    fn waiter(&self, key: &K, n: u32, quota: Option<Gcra>) -> UntilReady<'_, S> {
        UntilReady {
            waiter: Waiter::new(self.state(key), n, quota),
        }
    }

    /// Waits until one cell for `key` is admitted. Waiters on a key are admitted in the order
    /// they first polled (FIFO), each woken once, exactly at the rate. A `check` never takes
    /// a cell a waiter is queued for: the queue's head holds its cell in the key's state.
    /// Bound it with [`within`](UntilReady::within) or [`until`](UntilReady::until), or
    /// block on it with [`wait`](UntilReady::wait).
    ///
    /// # Errors
    ///
    /// [`Error::TableFull`] for a new key when the table refuses new keys. Also for a queued
    /// waiter whose key was forgotten ([`reset`](Limiter::reset)) while it waited and whose
    /// turn finds no room to store the key again: it fails then, holding nothing, rather than
    /// wait for room that may never come. (Under [`FullPolicy::EvictClosestToExpiry`] a key
    /// evicted while waiters queue is forgotten as by a reset: the head keeps its instant,
    /// the next waiter starts the key's new history with its burst.)
    ///
    /// [`FullPolicy::EvictClosestToExpiry`]: crate::FullPolicy::EvictClosestToExpiry
    ///
    /// # Cancel safety
    ///
    /// See [`UntilReady`]: dropping the future costs nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_second(50));
    /// let start = Instant::now();
    /// futures_executor::block_on(async {
    ///     for _ in 0..55 {
    ///         limiter.until_ready("example.com").await.unwrap(); // the last 5 wait ~20 ms each
    ///     }
    /// });
    /// assert!(start.elapsed() >= Duration::from_millis(100)); // the burst of 50 at once
    /// ```
    pub fn until_ready(&self, key: &K) -> UntilReady<'_, S> {
        self.waiter(key, 1, None)
    }

    /// Waits until `n` cells for `key` are admitted at once.
    ///
    /// # Errors
    ///
    /// [`Error::InsufficientCapacity`] at once if `n` exceeds the burst (no wait could
    /// satisfy it); [`Error::TableFull`] as for [`until_ready`](Limiter::until_ready).
    ///
    /// # Cancel safety
    ///
    /// See [`UntilReady`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_minute(10));
    /// futures_executor::block_on(async {
    ///     limiter.until_n_ready("alice", 10).await.unwrap(); // the whole burst, at once
    ///     let err = limiter.until_n_ready("alice", 11).await.unwrap_err();
    ///     assert!(err.is_insufficient_capacity());
    /// });
    /// assert!(limiter.check("alice").is_err());
    /// ```
    pub fn until_n_ready(&self, key: &K, n: u32) -> UntilReady<'_, S> {
        self.waiter(key, n, None)
    }

    /// [`until_ready`](Limiter::until_ready) under `quota` instead of the limiter's own, as
    /// [`check_with`](Limiter::check_with): a crawler waiting on each host at that host's
    /// own rate, in one limiter. Waiters with different quotas share the key's FIFO queue,
    /// each admitted under its own quota.
    ///
    /// # Errors
    ///
    /// As [`until_ready`](Limiter::until_ready).
    ///
    /// # Cancel safety
    ///
    /// See [`UntilReady`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_second(10));
    /// let slow_host = Quota::per_minute(1); // its robots.txt says Crawl-delay: 60
    /// futures_executor::block_on(async {
    ///     limiter.until_ready_with("slow.example", slow_host).await.unwrap();
    ///     let next = limiter.until_ready_with("slow.example", slow_host);
    ///     assert!(next.within(Duration::from_secs(1)).await.unwrap_err().is_rate_limited());
    ///     limiter.until_ready("fast.example").await.unwrap(); // the default quota
    /// });
    /// ```
    pub fn until_ready_with(&self, key: &K, quota: Quota) -> UntilReady<'_, S> {
        self.waiter(key, 1, Some(Gcra::new(quota)))
    }

    /// [`until_n_ready`](Limiter::until_n_ready) under `quota`, as
    /// [`until_ready_with`](Limiter::until_ready_with).
    ///
    /// # Errors
    ///
    /// As [`until_n_ready`](Limiter::until_n_ready), with the burst of `quota`.
    ///
    /// # Cancel safety
    ///
    /// See [`UntilReady`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_second(1));
    /// let bulk = Quota::per_second(100);
    /// futures_executor::block_on(async {
    ///     limiter.until_n_ready_with(&7, 100, bulk).await.unwrap();
    ///     let err = limiter.until_n_ready_with(&7, 101, bulk).await.unwrap_err();
    ///     assert!(err.is_insufficient_capacity());
    /// });
    /// ```
    pub fn until_n_ready_with(&self, key: &K, n: u32, quota: Quota) -> UntilReady<'_, S> {
        self.waiter(key, n, Some(Gcra::new(quota)))
    }

    /// Runs `fut` once a cell for `key` is admitted: `limiter.throttle(&host, fetch(url))`.
    ///
    /// # Errors
    ///
    /// The wait's [`Error`], in which case `fut` is dropped unpolled.
    ///
    /// # Cancel safety
    ///
    /// As [`UntilReady`] while waiting; afterwards as `fut`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_minute(1));
    /// let body = futures_executor::block_on(limiter.throttle("example.com", async { "<html>" }));
    /// assert_eq!(body, Ok("<html>"));
    /// assert!(limiter.check("example.com").is_err()); // the throttle took the cell
    /// ```
    pub fn throttle<F: Future>(&self, key: &K, fut: F) -> Throttled<UntilReady<'_, S>, F> {
        Throttled::new(self.until_ready(key), fut)
    }
}

impl<P, S> Cells for KeyState<P>
where
    P: Deref<Target = Arc<Shared<S>>>,
    S: BuildHasher + Send + Sync + 'static,
{
    type Owned = KeyState<OwnedShared<Shared<S>>>;

    fn owned(&self) -> Self::Owned {
        KeyState {
            shared: OwnedShared(Arc::clone(&self.shared)),
            route: self.route,
            fp: self.fp,
        }
    }

    fn sleep_until(&self, at: u64) -> Sleep {
        self.shared.clock.sleep_until(at)
    }

    fn clock_is_timer(&self) -> bool {
        self.shared.clock.is_timer_time()
    }

    fn waitlist(&self) -> (&WaitShard, u64) {
        (self.shared.waitlists.shard(self.route), self.fp)
    }
}
