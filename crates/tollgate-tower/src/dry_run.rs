//! Dry-run mode: decide and count as usual, refuse nothing, and mark what would have been
//! refused.

use http::{HeaderMap, StatusCode};

/// Dry-run mode: set with [`Builder::dry_run`](crate::Builder::dry_run). Requests are
/// decided and counted, never refused; those that would have been are marked with a
/// [`DryRunRefusal`].
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use tollgate::{Limiter, Quota};
/// use tollgate_tower::{DryRun, Global, RateLimitLayer};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(1)), Global)
///     .dry_run()
///     .build();
/// let DryRun = layer.mode();
/// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new(()))
/// }));
/// futures_executor::block_on(async {
///     for _ in 0..2 {
///         let res = svc.clone().oneshot(http::Request::new(())).await.unwrap();
///         assert_eq!(res.status(), 200); // the second too, though over the limit
///     }
/// });
/// assert_eq!(layer.counts().dry_run_refused, 1); // but counted
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct DryRun;

/// The mark a dry-run layer puts in the extensions of a request it would have refused:
/// the status it would have answered with (`429`, `400`, `503` or `413`) and the fields it would
/// have sent (`Retry-After`, the rate-limit fields). The request is passed on; read the
/// mark in your service, or in a layer inside this one, to log or measure.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use tollgate::Quota;
/// use tollgate_tower::{DryRunRefusal, Global, RateLimitLayer};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// let layer = RateLimitLayer::builder(tollgate::Limiter::keyed(Quota::per_minute(1)), Global)
///     .dry_run()
///     .build();
/// let svc = layer.layer(service_fn(|req: http::Request<()>| async move {
///     let verdict = match req.extensions().get::<DryRunRefusal>() {
///         Some(refusal) => format!("would be {}", refusal.status().as_u16()),
///         None => String::from("admitted"),
///     };
///     Ok::<_, Infallible>(http::Response::new(verdict))
/// }));
/// futures_executor::block_on(async {
///     let first = svc.clone().oneshot(http::Request::new(())).await.unwrap();
///     assert_eq!(first.body(), "admitted");
///     let second = svc.clone().oneshot(http::Request::new(())).await.unwrap();
///     assert_eq!((second.status().as_u16(), second.body().as_str()), (200, "would be 429"));
/// });
/// assert_eq!(layer.counts().dry_run_refused, 1);
/// ```
#[derive(Debug, Clone)]
pub struct DryRunRefusal {
    status: StatusCode,
    headers: HeaderMap,
}

impl DryRunRefusal {
    pub(crate) fn new(status: StatusCode, headers: HeaderMap) -> DryRunRefusal {
        DryRunRefusal { status, headers }
    }

    /// The status the refusal would have had.
    ///
    /// # Examples
    ///
    /// See [`DryRunRefusal`].
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The fields the refusal would have carried: `Retry-After`, and the rate-limit
    /// fields that are on.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{DryRunRefusal, Global, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(1)), Global)
    ///     .dry_run()
    ///     .build();
    /// let svc = layer.layer(service_fn(|req: http::Request<()>| async move {
    ///     let retry = req
    ///         .extensions()
    ///         .get::<DryRunRefusal>()
    ///         .and_then(|r| r.headers().get("retry-after").cloned());
    ///     Ok::<_, Infallible>(http::Response::new(retry))
    /// }));
    /// futures_executor::block_on(async {
    ///     svc.clone().oneshot(http::Request::new(())).await.unwrap();
    ///     let second = svc.clone().oneshot(http::Request::new(())).await.unwrap();
    ///     assert_eq!(second.body().as_ref().unwrap(), "60");
    /// });
    /// ```
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }
}
