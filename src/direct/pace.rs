//! [`Paced`]: a stream released at a direct limiter's rate.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;

use super::{DirectState, Shared};
use crate::engine::OwnedShared;
use crate::wait::Waiter;

/// A stream whose items are released at the rate of a [`DirectLimiter`](crate::DirectLimiter):
/// from [`DirectLimiter::pace`](crate::DirectLimiter::pace).
///
/// It takes an item from the inner stream first, then waits for its cell, so a slow stream
/// does not bank cells it is not using.
///
/// # Cancel safety
///
/// Dropping it while an item waits for its cell drops that item and costs no cell: the
/// item's wait is a waiter like [`DirectUntilReady`](crate::DirectUntilReady)'s, and the
/// other waiters are admitted as if it had never asked.
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
