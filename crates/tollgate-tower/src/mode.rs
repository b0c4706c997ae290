//! The modes a layer runs in, as its `M` type parameter: [`Reject`] (the default) and
//! [`Delay`] here, [`DryRun`](crate::DryRun) beside its refusal mark in `dry_run.rs`. Reject
//! and dry-run mode decide at once and share one `Service` impl ([`Immediate`]); delay mode
//! has its own (`service.rs`), and its wait is in `delay.rs`.

use std::time::Duration;

/// The default mode: a request over its limit is refused at once with a `429`.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use tollgate_tower::{Global, RateLimitLayer, Reject};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// let layer: RateLimitLayer<Global, Reject> =
///     RateLimitLayer::new(tollgate::Quota::per_minute(1), Global);
/// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new(String::new()))
/// }));
/// futures_executor::block_on(async {
///     assert_eq!(svc.clone().oneshot(http::Request::new(())).await.unwrap().status(), 200);
///     let refused = svc.clone().oneshot(http::Request::new(())).await.unwrap();
///     assert_eq!(refused.status(), 429);
///     assert!(refused.headers().contains_key("retry-after"));
/// });
/// assert_eq!(layer.counts().rejected, 1);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Reject;

/// Delay mode: a request over its limit waits in its key's FIFO queue for as long as
/// [`max`](Delay::max) at most, then is served; if its turn would come later, it is refused
/// at once with a `429`. Set with [`Builder::delay`](crate::Builder::delay).
///
/// # Examples
///
/// A request over the limit waits for its turn (on tollgate's own timer: no runtime
/// needed) instead of being refused, since its turn comes within the bound. A
/// [`ManualClock`](tollgate::ManualClock) shows it step by step:
///
/// ```
/// use std::convert::Infallible;
/// use std::pin::pin;
/// use std::time::Duration;
/// use futures_lite::future::poll_once;
/// use tollgate::{Limiter, ManualClock, Quota};
/// use tollgate_tower::{Delay, Global, RateLimit, RateLimitLayer};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// let hello = service_fn(|_: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new(String::new()))
/// });
/// // One request a second, no burst; a wait of up to two seconds is allowed.
/// let clock = ManualClock::new();
/// let limiter = Limiter::builder(Quota::per_second(1).allow_burst(1)).clock(clock.clone()).build();
/// let layer: RateLimitLayer<Global, Delay> = RateLimitLayer::builder(limiter, Global)
///     .delay(Duration::from_secs(2))
///     .build();
/// let svc: RateLimit<_, Global, Delay> = layer.layer(hello);
/// futures_executor::block_on(async {
///     assert_eq!(svc.clone().oneshot(http::Request::new(())).await.unwrap().status(), 200);
///     // The cell is taken: the next request waits for the next cell, a second later...
///     let mut waiting = pin!(svc.clone().oneshot(http::Request::new(())));
///     assert!(poll_once(&mut waiting).await.is_none());
///     clock.advance(Duration::from_secs(1));
///     // ...and is served then.
///     assert_eq!(waiting.await.unwrap().status(), 200);
/// });
/// let counts = layer.counts();
/// assert_eq!((counts.admitted, counts.delayed, counts.rejected), (1, 1, 0));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Delay {
    pub(crate) max: Duration,
}

impl Delay {
    /// The longest a request may wait.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    ///
    /// let builder = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(10)), Global)
    ///     .delay(Duration::from_secs(1));
    /// assert_eq!(builder.build().mode().max(), Duration::from_secs(1));
    /// ```
    pub fn max(&self) -> Duration {
        self.max
    }
}

pub(crate) use sealed::Immediate;

mod sealed {
    /// The modes that decide at once, without waiting: [`Reject`](crate::Reject) and
    /// [`DryRun`](crate::DryRun). Not nameable outside the crate, so no other type can be a
    /// mode.
    pub trait Immediate: Clone {
        /// Whether a refusal is only marked, and the request served anyway.
        const DRY_RUN: bool;
    }

    impl Immediate for crate::Reject {
        const DRY_RUN: bool = false;
    }

    impl Immediate for crate::DryRun {
        const DRY_RUN: bool = true;
    }
}
