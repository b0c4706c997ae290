//! Waiting on one key of a [`Limiter`]: [`UntilReady`] and the blocking, bounded and
//! throttling forms.

use std::borrow::Borrow;
use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::WaitError;
use super::blocking::block_on;
use super::cells::{Bound, KeyCells};
use super::throttle::Throttled;
use super::waiter::Waiter;
use crate::hash::RandomState;
use crate::limiter::{Limiter, Shared};
use crate::sync::Arc;
use crate::time::{Timestamp, saturating_nanos};

/// Completes when the key's cells are admitted: the future of [`Limiter::until_ready`] and
/// its `_n`, `_within` and `_until` forms.
///
/// On its first poll it is admitted at once if a cell is free and nobody waits on the key;
/// otherwise it joins the key's FIFO queue and is woken once, at its admission instant, by
/// tollgate's own timer, so it works under any executor.
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
/// let limiter: Limiter<str> = Limiter::keyed(Quota::per_minute(1));
/// let wait: UntilReady<'_> = limiter.until_ready("alice");
/// assert_eq!(wait.now_or_never(), Some(Ok(()))); // the burst is free: ready at first poll
/// assert!(limiter.until_ready("alice").now_or_never().is_none()); // the next cell is a minute off
/// ```
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct UntilReady<'a, S: BuildHasher + Send + Sync + 'static = RandomState> {
    waiter: Waiter<KeyCells<&'a Arc<Shared<S>>>>,
}

impl<S: BuildHasher + Send + Sync + 'static> Future for UntilReady<'_, S> {
    type Output = Result<(), WaitError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().waiter.poll_wait(cx)
    }
}

impl<K: ?Sized, S: BuildHasher + Send + Sync + 'static> Limiter<K, S> {
    fn waiter<Q>(&self, key: &Q, n: u32, bound: Bound) -> UntilReady<'_, S>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let (route, fp) = self.hashes(key);
        let cells = KeyCells {
            shared: self.shared(),
            route,
            fp,
        };
        UntilReady {
            waiter: Waiter::new(cells, n, bound),
        }
    }

    /// Waits until one cell for `key` is admitted. Waiters on a key are admitted in the order
    /// they first polled (FIFO), each woken once, exactly at the rate. A `check` never takes
    /// a cell a waiter is queued for: the queue's head holds its cell in the key's state.
    ///
    /// # Errors
    ///
    /// [`WaitError::TableFull`] for a new key when the table refuses new keys.
    ///
    /// # Cancel safety
    ///
    /// See [`UntilReady`]: dropping the future costs nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter: Limiter<str> = Limiter::keyed(Quota::per_second(50));
    /// futures_executor::block_on(async {
    ///     for _ in 0..55 {
    ///         limiter.until_ready("example.com").await.unwrap(); // the last 5 wait ~20 ms each
    ///     }
    /// });
    /// ```
    pub fn until_ready<Q>(&self, key: &Q) -> UntilReady<'_, S>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.waiter(key, 1, Bound::Unbounded)
    }

    /// Waits until `n` cells for `key` are admitted at once.
    ///
    /// # Errors
    ///
    /// [`WaitError::InsufficientCapacity`] at once if `n` exceeds the burst (no wait could
    /// satisfy it); [`WaitError::TableFull`] as for [`until_ready`](Limiter::until_ready).
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
    /// let limiter: Limiter<str> = Limiter::keyed(Quota::per_minute(10));
    /// futures_executor::block_on(async {
    ///     limiter.until_n_ready("alice", 10).await.unwrap(); // the whole burst, at once
    ///     let err = limiter.until_n_ready("alice", 11).await.unwrap_err();
    ///     assert!(err.is_insufficient_capacity());
    /// });
    /// assert!(limiter.check("alice").is_err());
    /// ```
    pub fn until_n_ready<Q>(&self, key: &Q, n: u32) -> UntilReady<'_, S>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.waiter(key, n, Bound::Unbounded)
    }

    /// Waits for one cell, unless that would take longer than `max`: then it fails at once
    /// and holds nothing (a bounded queue, like nginx's `burst`). If the prediction is upset
    /// while it waits (a penalty, a slower quota), it fails with [`WaitError::TooLong`] by
    /// `max`, holding nothing, instead of waiting longer.
    ///
    /// # Errors
    ///
    /// [`WaitError::TooLong`] with the instant it would have taken, or
    /// [`WaitError::TableFull`].
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
    /// let limiter: Limiter<u32> = Limiter::keyed(Quota::per_second(1));
    /// futures_executor::block_on(async {
    ///     limiter.until_ready(&7).await.unwrap();
    ///     let err = limiter.until_ready_within(&7, Duration::from_millis(10)).await.unwrap_err();
    ///     assert!(err.is_too_long());
    /// });
    /// ```
    pub fn until_ready_within<Q>(&self, key: &Q, max: Duration) -> UntilReady<'_, S>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.waiter(key, 1, Bound::Within(saturating_nanos(max)))
    }

    /// [`until_n_ready`](Limiter::until_n_ready), bounded as
    /// [`until_ready_within`](Limiter::until_ready_within).
    ///
    /// # Errors
    ///
    /// As both.
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
    /// let limiter: Limiter<u32> = Limiter::keyed(Quota::per_minute(5));
    /// futures_executor::block_on(async {
    ///     limiter.until_n_ready_within(&7, 5, Duration::ZERO).await.unwrap(); // no wait needed
    ///     let res = limiter.until_n_ready_within(&7, 2, Duration::from_secs(1)).await;
    ///     assert!(res.unwrap_err().is_too_long()); // two more cells take 24 s
    /// });
    /// ```
    pub fn until_n_ready_within<Q>(&self, key: &Q, n: u32, max: Duration) -> UntilReady<'_, S>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.waiter(key, n, Bound::Within(saturating_nanos(max)))
    }

    /// Waits for one cell, unless it would be admitted after `deadline` (on this limiter's
    /// clock): then it fails at once and holds nothing. Like
    /// [`until_ready_within`](Limiter::until_ready_within), it fails by `deadline` if it is
    /// not admitted by then.
    ///
    /// # Errors
    ///
    /// [`WaitError::TooLong`] or [`WaitError::TableFull`].
    ///
    /// # Cancel safety
    ///
    /// See [`UntilReady`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Quota, Timestamp, WaitError};
    ///
    /// let limiter: Limiter<str> = Limiter::builder(Quota::per_second(1))
    ///     .clock(ManualClock::new())
    ///     .build();
    /// let deadline = limiter.now() + Duration::from_millis(500);
    /// futures_executor::block_on(async {
    ///     limiter.until_ready_until("alice", deadline).await.unwrap(); // admitted now
    ///     let err = limiter.until_ready_until("alice", deadline).await.unwrap_err();
    ///     let wait = Duration::from_secs(1); // the next cell is 1 s off
    ///     assert_eq!(err, WaitError::TooLong { earliest: Timestamp::ZERO + wait, wait });
    /// });
    /// ```
    pub fn until_ready_until<Q>(&self, key: &Q, deadline: Timestamp) -> UntilReady<'_, S>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.waiter(key, 1, Bound::Until(deadline.as_nanos()))
    }

    /// [`until_n_ready`](Limiter::until_n_ready) with a deadline.
    ///
    /// # Errors
    ///
    /// As [`until_n_ready`](Limiter::until_n_ready) and
    /// [`until_ready_until`](Limiter::until_ready_until).
    ///
    /// # Cancel safety
    ///
    /// See [`UntilReady`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Quota};
    ///
    /// let limiter: Limiter<str> = Limiter::builder(Quota::per_second(4))
    ///     .clock(ManualClock::new())
    ///     .build();
    /// let deadline = limiter.now() + Duration::from_millis(100);
    /// futures_executor::block_on(async {
    ///     limiter.until_n_ready_until("alice", 3, deadline).await.unwrap();
    ///     let err = limiter.until_n_ready_until("alice", 2, deadline).await.unwrap_err();
    ///     assert!(err.is_too_long()); // two more cells: not before 250 ms
    ///     let err = limiter.until_n_ready_until("alice", 5, deadline).await.unwrap_err();
    ///     assert!(err.is_insufficient_capacity());
    /// });
    /// ```
    pub fn until_n_ready_until<Q>(&self, key: &Q, n: u32, deadline: Timestamp) -> UntilReady<'_, S>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.waiter(key, n, Bound::Until(deadline.as_nanos()))
    }

    /// Blocks the calling thread until one cell for `key` is admitted, in the same FIFO queue
    /// as [`until_ready`](Limiter::until_ready).
    ///
    /// # Blocking
    ///
    /// Parks the thread. Never call it from async code: it would stall the executor's
    /// worker; use [`until_ready`](Limiter::until_ready) there.
    ///
    /// # Errors
    ///
    /// As [`until_ready`](Limiter::until_ready).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter: Limiter<str> = Limiter::keyed(Quota::per_second(1_000).allow_burst(1));
    /// let start = Instant::now();
    /// limiter.until_ready_blocking("alice").unwrap(); // at once
    /// limiter.until_ready_blocking("alice").unwrap(); // parks for the next cell, 1 ms on
    /// assert!(start.elapsed() >= Duration::from_millis(1));
    /// ```
    pub fn until_ready_blocking<Q>(&self, key: &Q) -> Result<(), WaitError>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        block_on(self.until_ready(key))
    }

    /// Blocks until `n` cells for `key` are admitted.
    ///
    /// # Blocking
    ///
    /// Parks the thread; see [`until_ready_blocking`](Limiter::until_ready_blocking).
    ///
    /// # Errors
    ///
    /// As [`until_n_ready`](Limiter::until_n_ready).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter: Limiter<str> = Limiter::keyed(Quota::per_minute(3));
    /// limiter.until_n_ready_blocking("alice", 3).unwrap(); // the burst is free: no parking
    /// assert!(limiter.check("alice").is_err());
    /// let err = limiter.until_n_ready_blocking("alice", 4).unwrap_err();
    /// assert!(err.is_insufficient_capacity()); // refused at once, never parks
    /// ```
    pub fn until_n_ready_blocking<Q>(&self, key: &Q, n: u32) -> Result<(), WaitError>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        block_on(self.until_n_ready(key, n))
    }

    /// Runs `fut` once a cell for `key` is admitted: `limiter.throttle(&host, fetch(url))`.
    ///
    /// # Errors
    ///
    /// The wait's [`WaitError`], in which case `fut` is dropped unpolled.
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
    /// let limiter: Limiter<str> = Limiter::keyed(Quota::per_minute(1));
    /// let body = futures_executor::block_on(limiter.throttle("example.com", async { "<html>" }));
    /// assert_eq!(body, Ok("<html>"));
    /// assert!(limiter.check("example.com").is_err()); // the throttle took the cell
    /// ```
    pub fn throttle<Q, F>(&self, key: &Q, fut: F) -> Throttled<UntilReady<'_, S>, F>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
        F: Future,
    {
        Throttled::new(self.until_ready(key), fut)
    }
}
