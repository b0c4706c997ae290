//! [`Throttled`] (a future that waits for a cell first) and [`Paced`] (a stream that waits
//! for a cell per item).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;

use super::WaitError;
use super::waiter::Waiter;
use crate::direct::{DirectState, Shared};
use crate::engine::OwnedShared;

/// A future that first waits for a cell, then runs the wrapped future: from
/// [`Limiter::throttle`](crate::Limiter::throttle) and
/// [`DirectLimiter::throttle`](crate::DirectLimiter::throttle).
///
/// The wrapped future is boxed once, so it needs no pinning by the caller.
///
/// # Cancel safety
///
/// While waiting, as the wait future (a drop costs nothing); afterwards, as the wrapped
/// future.
///
/// # Examples
///
/// ```
/// use futures_util::FutureExt;
/// use tollgate::{DirectLimiter, Quota, Throttled};
///
/// let limiter = DirectLimiter::new(Quota::per_minute(1));
/// let first: Throttled<_, _> = limiter.throttle(async { "sent" });
/// assert_eq!(futures_executor::block_on(first), Ok("sent"));
/// // The cell is used: the next future is held back (a minute) before it runs.
/// assert!(limiter.throttle(async { "sent" }).now_or_never().is_none());
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct Throttled<W, F> {
    wait: Option<W>,
    fut: Pin<Box<F>>,
}

impl<W, F> Throttled<W, F> {
    pub(crate) fn new(wait: W, fut: F) -> Self {
        Throttled {
            wait: Some(wait),
            fut: Box::pin(fut),
        }
    }
}

impl<W, F> Future for Throttled<W, F>
where
    W: Future<Output = Result<(), WaitError>> + Unpin,
    F: Future,
{
    type Output = Result<F::Output, WaitError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(wait) = &mut this.wait {
            match Pin::new(wait).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => this.wait = None,
            }
        }
        this.fut.as_mut().poll(cx).map(Ok)
    }
}

impl<W: fmt::Debug, F> fmt::Debug for Throttled<W, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttled")
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

/// A stream whose items are released at the rate of a [`DirectLimiter`](crate::DirectLimiter):
/// from [`DirectLimiter::pace`](crate::DirectLimiter::pace).
///
/// It takes an item from the inner stream first, then waits for its cell, so a slow stream
/// does not bank cells it is not using.
///
/// # Examples
///
/// ```
/// use futures_util::{FutureExt, StreamExt};
/// use tollgate::{DirectLimiter, Paced, Quota};
///
/// let limiter = DirectLimiter::new(Quota::per_minute(2));
/// let mut paced: Paced<_> = limiter.pace(futures_util::stream::iter(["a", "b", "c"]));
/// assert_eq!(futures_executor::block_on(paced.next()), Some("a"));
/// assert_eq!(futures_executor::block_on(paced.next()), Some("b"));
/// assert!(paced.next().now_or_never().is_none()); // burst used: "c" waits 30 s for its cell
/// ```
#[must_use = "streams do nothing unless polled"]
pub struct Paced<St: Stream> {
    stream: Pin<Box<St>>,
    cells: OwnedCells,
    /// An item taken from the stream, held until its cell is admitted.
    pending: Option<(St::Item, Waiter<OwnedCells>)>,
}

type OwnedCells = DirectState<OwnedShared<Shared>>;

impl<St: Stream> Paced<St> {
    pub(crate) fn new(cells: OwnedCells, stream: St) -> Self {
        Paced {
            stream: Box::pin(stream),
            cells,
            pending: None,
        }
    }
}

// The stream is boxed and items are never pinned, so moving a `Paced` moves nothing pinned.
impl<St: Stream> Unpin for Paced<St> {}

impl<St: Stream> Stream for Paced<St> {
    type Item = St::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<St::Item>> {
        let this = self.get_mut();
        loop {
            if let Some((_, waiter)) = &mut this.pending {
                // One cell of a direct limiter: the burst is at least 1, there is no table to
                // fill, and the wait is unbounded, so the wait cannot fail.
                if waiter.poll_wait(cx).is_pending() {
                    return Poll::Pending;
                }
                let (item, _) = this.pending.take().expect("checked above");
                return Poll::Ready(Some(item));
            }
            match this.stream.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Ready(Some(item)) => {
                    let waiter = Waiter::new(this.cells.clone(), 1, None);
                    this.pending = Some((item, waiter));
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let extra = usize::from(self.pending.is_some());
        let (lo, hi) = self.stream.size_hint();
        (
            lo.saturating_add(extra),
            hi.and_then(|h| h.checked_add(extra)),
        )
    }
}

impl<St: Stream> fmt::Debug for Paced<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Paced")
            .field("waiting", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}
