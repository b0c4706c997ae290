//! The [`RateLimit`] service: `poll_ready` passes through, the decision is made in `call`,
//! one `Service` impl per mode.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tollgate::{Limiter, Stats};
use tower_service::Service;

use crate::config::Config;
use crate::counts::Counts;
use crate::decide::Decision;
use crate::delay::delayed;
use crate::extract::KeyExtractor;
use crate::future::ResponseFuture;
use crate::mode::{Delay, Immediate, Reject};
use crate::refusal::grpc_content_type;
use crate::respond::{EmptyBody, RefusalResponse};

/// The rate-limiting [`Service`] made by [`RateLimitLayer`](crate::RateLimitLayer): decides in `call`, passes
/// `poll_ready` through. Every clone shares one limiter.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use tollgate::Quota;
/// use tollgate_tower::{Global, RateLimit, RateLimitLayer};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// let hello = service_fn(|_: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new(String::new()))
/// });
/// let svc: RateLimit<_, Global> = RateLimitLayer::new(Quota::per_minute(1), Global).layer(hello);
/// futures_executor::block_on(async {
///     assert_eq!(svc.clone().oneshot(http::Request::new(())).await.unwrap().status(), 200);
///     assert_eq!(svc.clone().oneshot(http::Request::new(())).await.unwrap().status(), 429);
/// });
/// ```
///
/// A delay-mode service at work is shown on [`Delay`].
///
/// # Readiness
///
/// `poll_ready` readies the inner service, which may reserve capacity for the call to come
/// (a [`ConcurrencyLimit`](https://docs.rs/tower/latest/tower/limit/struct.ConcurrencyLimit.html)
/// permit, a `Buffer` slot). In reject and dry-run mode a request refused here never
/// reaches the inner service, so what it reserved stays with this service value until its
/// next call or its drop, as with tower's `Filter`: servers that call a clone per request
/// (hyper, axum, tonic) drop it with the clone, but a caller that keeps one readied service
/// between calls holds one reservation while it is idle, which other clones wait for. Put
/// such limits outside this layer (a refusal then takes none of their capacity), or drop
/// the service after a refusal. Delay mode gives the reservation back itself (it needs a
/// `Clone` inner service, and drops the readied one when a request waits or is refused).
///
/// It is a [`Service`] only if `R`, what answers a refused request, makes the inner
/// service's response body type ([`RefusalResponse`]): a refusal hook of another body type
/// is a compile error (see [`Builder::on_refusal`](crate::Builder::on_refusal)).
pub struct RateLimit<S, E: KeyExtractor, M = Reject, R = EmptyBody> {
    pub(crate) inner: S,
    pub(crate) config: Arc<Config<E>>,
    pub(crate) mode: M,
    pub(crate) respond: Arc<R>,
}

impl<S: Clone, E: KeyExtractor, M: Clone, R> Clone for RateLimit<S, E, M, R> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
            mode: self.mode.clone(),
            respond: Arc::clone(&self.respond),
        }
    }
}

impl<S: fmt::Debug, E: KeyExtractor + fmt::Debug, M: fmt::Debug, R> fmt::Debug
    for RateLimit<S, E, M, R>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl<S, E, M, R> RateLimit<S, E, M, R>
where
    E: KeyExtractor,
{
    /// The limiter behind the service, shared by every clone.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::Layer;
    ///
    /// let layer = RateLimitLayer::new(tollgate::Quota::per_second(5), Global);
    /// let svc = layer.layer(tower::service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(http::Response::new(()))
    /// }));
    /// assert_eq!(svc.limiter().quota(), layer.limiter().quota());
    /// ```
    pub fn limiter(&self) -> &Limiter<E::Key> {
        &self.config.limiter
    }

    /// The wrapped service.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::Layer;
    ///
    /// let layer = RateLimitLayer::new(tollgate::Quota::per_second(5), Global);
    /// let svc = layer.layer(7);
    /// assert_eq!(*svc.get_ref(), 7);
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::Layer;
    ///
    /// let layer = RateLimitLayer::new(tollgate::Quota::per_second(5), Global);
    /// let mut svc = layer.layer(7);
    /// *svc.get_mut() += 1;
    /// assert_eq!(*svc.get_ref(), 8);
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped (the limiter stays with the layer and the other
    /// clones).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::Layer;
    ///
    /// let layer = RateLimitLayer::new(tollgate::Quota::per_second(5), Global);
    /// assert_eq!(layer.layer(7).into_inner(), 7);
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// How many requests the layer decided each way (see [`RateLimitLayer::counts`](crate::RateLimitLayer::counts)),
    /// shared by every clone.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::Layer;
    ///
    /// let layer = RateLimitLayer::new(tollgate::Quota::per_second(5), Global);
    /// let svc = layer.layer(());
    /// assert_eq!(svc.counts(), layer.counts());
    /// ```
    pub fn counts(&self) -> Counts {
        self.config.counters.snapshot()
    }

    /// The [`Stats`] of every limiter behind the service (see [`RateLimitLayer::stats`](crate::RateLimitLayer::stats),
    /// which this is, gauges included).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::Layer;
    ///
    /// let svc = RateLimitLayer::new(tollgate::Quota::per_second(5), Global).layer(());
    /// assert_eq!(svc.stats()[0].0, "default");
    /// ```
    pub fn stats(&self) -> Vec<(String, Stats)> {
        self.config.stats()
    }
}

/// Reject and dry-run mode: decided at once, one impl for both (they differ only in what a
/// refusal becomes). `R: RefusalResponse<ResBody>` is the compile-time check of a refusal
/// hook's body type; `ResBody: Default` is the empty body of a gRPC refusal.
impl<S, E, M, R, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, E, M, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    E: KeyExtractor,
    M: Immediate,
    R: RefusalResponse<ResBody>,
    ResBody: Default,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let (parts, body) = req.into_parts();
        match self.config.decide(&parts, false) {
            // The common case here, the rest out of line: moving the request's parts into
            // `run` costs a copy of them (224 bytes) on every request.
            // Two arms, so that the fields-off one never touches the fields.
            Decision::Call(None, outcome) => {
                self.config.counters.count(outcome);
                ResponseFuture::forward(self.inner.call(Request::from_parts(parts, body)))
            }
            Decision::Call(Some(fields), outcome) => {
                self.config.counters.count(outcome);
                let fut = self.inner.call(Request::from_parts(parts, body));
                ResponseFuture::call(fut, Some(fields), self.config.format)
            }
            decision => self.config.run(
                &mut self.inner,
                parts,
                body,
                decision,
                M::DRY_RUN,
                &*self.respond,
            ),
        }
    }
}

impl<S, E, R, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, E, Delay, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    E: KeyExtractor,
    R: RefusalResponse<ResBody>,
    ResBody: Default + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let (parts, body) = req.into_parts();
        match self.config.decide(&parts, true) {
            Decision::Wait(key, quota, cost, extra_fields, undos) => {
                let grpc = grpc_content_type(&parts);
                // The capacity `poll_ready` reserved (a `ConcurrencyLimit` permit, a
                // `Buffer` slot) is given back at once, by dropping the readied service: a
                // request asleep holds none of it, and a service kept across calls pins
                // none for a request that goes through a clone. The request waits with an
                // unreadied clone, readied when the wait is over (the future's docs); this
                // one is readied again before its next call, as after any call.
                let unready = self.inner.clone();
                drop(std::mem::replace(&mut self.inner, unready.clone()));
                let wait = delayed(
                    Arc::clone(&self.config),
                    Arc::clone(&self.respond),
                    key,
                    (quota, cost),
                    self.mode.max,
                    (extra_fields, undos),
                    grpc,
                );
                ResponseFuture::wait(
                    wait,
                    unready,
                    Request::from_parts(parts, body),
                    self.config.format,
                )
            }
            decision => {
                if let Decision::Respond(_) = decision {
                    // Answered without the inner service: what `poll_ready` reserved is given
                    // back as for a wait, or a service kept across calls would pin it while
                    // requests waiting on clones need it.
                    let unready = self.inner.clone();
                    drop(std::mem::replace(&mut self.inner, unready));
                }
                self.config.run(
                    &mut self.inner,
                    parts,
                    body,
                    decision,
                    false,
                    &*self.respond,
                )
            }
        }
    }
}
