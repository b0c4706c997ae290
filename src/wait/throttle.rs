//! [`Throttled`]: a future that waits for a cell first, then runs the future it wraps. (The
//! stream form, [`Paced`](crate::Paced), is the direct limiter's, in `direct/pace.rs`.)

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::Error;

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
    W: Future<Output = Result<(), Error>> + Unpin,
    F: Future,
{
    type Output = Result<F::Output, Error>;

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
