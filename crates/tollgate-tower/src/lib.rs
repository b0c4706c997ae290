//! Per-client rate limiting for [tower](https://docs.rs/tower) HTTP services (hyper, axum),
//! on [`tollgate`]'s lock-free keyed GCRA limiter.
//!
//! [`RateLimitLayer`] wraps a service in a [`RateLimit`]: each request is keyed by a
//! [`KeyExtractor`] (the peer address, the client address behind trusted proxies, a
//! header, one global key, or your closure) and checked in `call` against one shared
//! [`tollgate::Limiter`]. Every clone of the layer and of the service (one per connection
//! under hyper and axum) enforces the same limit. `poll_ready` passes through, the bodies
//! are generic (refusals carry `ResBody::default()`), and nothing here needs a runtime.
//!
//! * **Refused**: `429 Too Many Requests` with `Retry-After` in whole seconds rounded *up*
//!   (at least 1), so a client that obeys it is admitted.
//! * **The IETF fields** (draft-ietf-httpapi-ratelimit-headers-10) on every limited
//!   response, admitted or refused, unless switched off ([`Builder::headers`]):
//!   `RateLimit-Policy: "default";q=10;w=1` (the burst, and the seconds it takes to refill)
//!   and `RateLimit: "default";r=3;t=1` (cells left, and seconds until the burst is back in
//!   full).
//! * **No key** (no peer address, no API key header): `400 Bad Request` by default, or let
//!   through ([`MissingKey`]); never a 500.
//! * **Tiers**: [`Builder::quota_for`] picks a quota per request (per route, method, API
//!   tier), checked with [`tollgate::Limiter::check_with`] in the one limiter.
//! * **Delay mode**: [`Builder::delay`] queues a request up to a bound (nginx's `burst` with
//!   `delay`), then refuses it.
//! * **Stacked limits**: [`Builder::stack`] adds limits with their own keys (per API key,
//!   global); a refusal by one gives back what the others admitted.
//! * **Allowlist**: [`Builder::allow_keys`], [`Builder::allow_cidrs`], [`Builder::allow_if`]
//!   let keys bypass every limit.
//! * **Dry-run mode**: [`Builder::dry_run`] refuses nothing; a request it would have refused
//!   carries a [`DryRunRefusal`] in its extensions.
//! * **Forwarding headers**: [`ClientIp`] walks `X-Forwarded-For`, RFC 7239 `Forwarded` or
//!   `X-Real-IP` ([`ForwardedHeader`]).
//! * **Other fields and bodies**: the legacy `X-RateLimit-*` fields
//!   ([`Builder::legacy_headers`]), RFC 9457 problem+json refusals
//!   ([`Builder::problem_json`]). A gRPC request (`content-type: application/grpc*`) is
//!   refused as gRPC: HTTP 200, trailers-only, `grpc-status: 8` (RESOURCE_EXHAUSTED; 3 for
//!   a missing key, 14 for a full table) and a `grpc-message`.
//! * **Observability**: [`RateLimitLayer::counts`] (requests per decision, over every
//!   clone) and [`RateLimitLayer::stats`] (the [`Stats`] of every limiter behind it).
//! * A full table under `FullPolicy::RefuseNewKeys` answers `503 Service Unavailable` with
//!   `Retry-After: 1`.
//!
//! # Examples
//!
//! ```
//! use std::convert::Infallible;
//! use std::net::SocketAddr;
//! use tollgate::Quota;
//! use tollgate_tower::{PeerIp, RateLimitLayer};
//! use tower::{Layer, Service, ServiceExt, service_fn};
//!
//! let hello = service_fn(|_: http::Request<()>| async {
//!     Ok::<_, Infallible>(http::Response::new(String::from("hello")))
//! });
//! let layer = RateLimitLayer::new(Quota::per_minute(2), PeerIp::new());
//! let svc = layer.layer(hello);
//!
//! let request = || {
//!     let mut req = http::Request::new(());
//!     req.extensions_mut().insert("192.0.2.7:50000".parse::<SocketAddr>().unwrap());
//!     req
//! };
//! futures_executor::block_on(async {
//!     let ok = svc.clone().oneshot(request()).await.unwrap();
//!     assert_eq!(ok.status(), 200);
//!     assert_eq!(ok.headers()["ratelimit-policy"], "\"default\";q=2;w=60");
//!     assert_eq!(ok.headers()["ratelimit"], "\"default\";r=1;t=30");
//!     svc.clone().oneshot(request()).await.unwrap();
//!     let refused = svc.clone().oneshot(request()).await.unwrap(); // another clone, one limit
//!     assert_eq!(refused.status(), 429);
//!     assert_eq!(refused.headers()["retry-after"], "30");
//! });
//! ```
//!
//! Behind a load balancer, in a `ServiceBuilder` stack:
//!
//! ```
//! use std::convert::Infallible;
//! use tollgate::Quota;
//! use tollgate_tower::{ClientIp, RateLimitLayer};
//!
//! # fn main() -> Result<(), tollgate_tower::CidrError> {
//! let app = tower::service_fn(|_: http::Request<()>| async {
//!     Ok::<_, Infallible>(http::Response::new(String::from("hello")))
//! });
//! // 5 requests per second per client, bursts of 10, behind a load balancer in 10.0.0.0/8.
//! let layer = RateLimitLayer::new(
//!     Quota::per_second(5).allow_burst(10),
//!     ClientIp::trusting(["10.0.0.0/8"])?,
//! );
//! let svc = tower::ServiceBuilder::new().layer(layer).service(app);
//! # let _ = svc;
//! # Ok(())
//! # }
//! ```
//!
//! With hyper, insert the peer address into each request's extensions when you accept the
//! connection (see the `server` example). With axum, turn on the `axum` feature and serve
//! with `into_make_service_with_connect_info::<SocketAddr>()`: [`PeerIp`] and [`ClientIp`]
//! read axum's `ConnectInfo<SocketAddr>` (see the `axum` example: per-IP and per-API-key
//! tiers, stacked).
//!
//! # Features
//!
//! * `foldhash` (default): tollgate's `foldhash` feature, its faster identity hash.
//! * `axum`: the peer address from axum's `ConnectInfo<SocketAddr>` (axum without its
//!   default features but with `tokio`, the feature under which axum defines
//!   `ConnectInfo`).

#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod counts;
mod dry_run;
mod fields;
mod forwarded;
mod future;
mod key;
mod refusal;
mod stack;

pub use counts::Counts;
pub use dry_run::{DryRun, DryRunRefusal};
pub use forwarded::ForwardedHeader;
pub use future::ResponseFuture;
pub use key::{
    Cidr, CidrError, ClientIp, Global, HeaderKey, KeyExtractor, PeerIp, ip_key, peer_addr,
};

use std::any::Any;
use std::collections::HashSet;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::RETRY_AFTER;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Request, Response};
use tollgate::{Admitted, Error, Limiter, Quota, Stats};
use tower_layer::Layer;
use tower_service::Service;

use crate::counts::{Counters, Outcome};
use crate::fields::{Fields, Format, sf_string};
use crate::future::BoxWait;
use crate::refusal::{Kind, MakeBody, Rejection, is_grpc, problem_json};
use crate::stack::{Checked, Extra, StackedLimit, Undo};

/// What to do with a request whose key cannot be found (no peer address, no API key).
///
/// # Examples
///
/// ```
/// use tollgate::{Limiter, Quota};
/// use tollgate_tower::{HeaderKey, MissingKey, RateLimitLayer};
///
/// // Requests without an API key are not limited by this layer (another one may be).
/// let layer = RateLimitLayer::builder(
///     Limiter::keyed(Quota::per_second(10)),
///     HeaderKey::new(http::HeaderName::from_static("x-api-key")),
/// )
/// .on_missing_key(MissingKey::Allow)
/// .build();
/// # let _ = layer;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// Answer `400 Bad Request` without calling the service (the default).
    #[default]
    Reject,
    /// Call the service, not limited by the layer's own limit (nor described in the
    /// fields); limits stacked with [`Builder::stack`] still apply.
    Allow,
}

/// The default mode: a request over its limit is refused at once with a `429`.
///
/// # Examples
///
/// ```
/// use tollgate_tower::{Global, RateLimitLayer, Reject};
///
/// let layer: RateLimitLayer<Global, Reject> =
///     RateLimitLayer::new(tollgate::Quota::per_second(1), Global);
/// # let _ = layer;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Reject;

/// Delay mode: a request over its limit waits in its key's FIFO queue for as long as
/// [`max`](Delay::max) at most, then is served; if its turn would come later, it is refused
/// at once with a `429`. Set with [`Builder::delay`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiter, Quota};
/// use tollgate_tower::{Delay, Global, RateLimitLayer};
///
/// let layer: RateLimitLayer<Global, Delay> =
///     RateLimitLayer::builder(Limiter::keyed(Quota::per_second(10)), Global)
///         .delay(Duration::from_millis(500))
///         .build();
/// # let _ = layer;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Delay {
    max: Duration,
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

type QuotaFn = dyn Fn(&Parts) -> Quota + Send + Sync;
type AllowFn<K> = dyn Fn(&K) -> bool + Send + Sync;

/// What every clone of a layer and its services shares.
struct Config<E: KeyExtractor> {
    limiter: Limiter<E::Key>,
    extractor: E,
    quota_for: Option<Arc<QuotaFn>>,
    format: Format,
    /// The policy's name as a structured-field String, quotes included.
    policy_name: String,
    /// The policy's name as given.
    policy_raw: String,
    missing_key: MissingKey,
    /// Stacked limits, checked after this one, in order.
    extras: Vec<Box<dyn StackedLimit>>,
    /// Keys that bypass every limit.
    allow: Option<Box<AllowFn<E::Key>>>,
    counters: Counters,
    /// Problem+json bodies: a `MakeBody<B>` for the service's response body `B`.
    problem: Option<Arc<dyn Any + Send + Sync>>,
}

/// How a request goes on, once keyed.
enum Decision<K> {
    /// Answer without calling the service.
    Respond(Rejection),
    /// Call the service, adding these fields; count it so.
    Call(Option<Fields>, Outcome),
    /// Delay mode: wait for `key` under `quota`; the stacked limits admitted the request
    /// with these fields, and are given back with these undos if the wait fails.
    Wait(K, Option<Quota>, Option<Fields>, Vec<Undo>),
}

impl<E: KeyExtractor> Config<E> {
    fn quota(&self, parts: &Parts) -> Option<Quota> {
        self.quota_for.as_ref().map(|f| f(parts))
    }

    fn check(&self, key: &E::Key, quota: Option<Quota>) -> Result<Admitted, Error> {
        match quota {
            Some(q) => self.limiter.check_with(key, q),
            None => self.limiter.check(key),
        }
    }

    fn admitted_fields(&self, quota: Option<Quota>, admitted: &Admitted) -> Option<Fields> {
        self.format.any().then(|| {
            let quota = quota.unwrap_or_else(|| self.limiter.quota());
            Fields::admitted(
                &self.policy_name,
                quota,
                admitted.remaining(),
                admitted.reset_after(),
            )
        })
    }

    fn refusal(&self, quota: Option<Quota>, error: Error) -> Rejection {
        let quota = quota.unwrap_or_else(|| self.limiter.quota());
        self.refusal_by(&self.policy_name, quota, error)
    }

    /// A refusal by the policy `name` (a structured-field String) under `quota`.
    fn refusal_by(&self, name: &str, quota: Quota, error: Error) -> Rejection {
        let mut headers = HeaderMap::new();
        match error {
            Error::RateLimited { wait, .. } => {
                let fields = Fields::refused(name, quota, wait);
                let retry = fields.retry_after();
                fields.insert_into(&mut headers, self.format);
                self.rejection(Kind::RateLimited, headers, Some(name), retry)
            }
            // A full table that refuses new keys (or a request that can never pass): the
            // server is out of room, not the client over its rate.
            _ => {
                headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
                self.rejection(Kind::Unavailable, headers, None, Some(1))
            }
        }
    }

    /// A rejection, with its problem+json body if those are on.
    fn rejection(
        &self,
        kind: Kind,
        headers: HeaderMap,
        policy: Option<&str>,
        retry_after: Option<u64>,
    ) -> Rejection {
        let problem = self
            .problem
            .as_ref()
            .map(|make| Box::new((problem_json(kind, policy, retry_after), Arc::clone(make))));
        Rejection {
            kind,
            headers,
            grpc: false,
            problem,
        }
    }

    fn decide(&self, parts: &Parts, delay: bool) -> Decision<E::Key> {
        let Some(key) = self.extractor.extract(parts) else {
            return match self.missing_key {
                // Not limited by this limit; the stacked ones still apply.
                MissingKey::Allow => match self.check_extras(parts) {
                    Ok((fields, _)) => Decision::Call(fields, Outcome::MissingKeyAllowed),
                    Err(rejection) => Decision::Respond(rejection),
                },
                MissingKey::Reject => Decision::Respond(self.rejection(
                    Kind::MissingKey,
                    HeaderMap::new(),
                    None,
                    None,
                )),
            };
        };
        if self.allow.as_ref().is_some_and(|allow| allow(&key)) {
            return Decision::Call(None, Outcome::Allowlisted);
        }
        let quota = self.quota(parts);
        if delay {
            // The wait cannot be given back (it returns no `Admitted`), so the stacked
            // limits go first, and are given back if the wait fails.
            return match self.check_extras(parts) {
                Ok((fields, undos)) => Decision::Wait(key, quota, fields, undos),
                Err(rejection) => Decision::Respond(rejection),
            };
        }
        let admitted = match self.check(&key, quota) {
            Ok(admitted) => admitted,
            Err(error) => return Decision::Respond(self.refusal(quota, error)),
        };
        let mut fields = self.admitted_fields(quota, &admitted);
        if self.extras.is_empty() {
            return Decision::Call(fields, Outcome::Admitted);
        }
        match self.check_extras(parts) {
            Ok((extra_fields, _)) => {
                if let (Some(fields), Some(extra)) = (&mut fields, extra_fields) {
                    fields.append(extra);
                }
                Decision::Call(fields, Outcome::Admitted)
            }
            Err(rejection) => {
                self.limiter.undo(&key, admitted);
                Decision::Respond(rejection)
            }
        }
    }

    /// Checks the stacked limits in order. All admit (or do not apply): their fields and
    /// undos. One refuses: those before it are given back, and its refusal is the answer.
    fn check_extras(&self, parts: &Parts) -> Result<(Option<Fields>, Vec<Undo>), Rejection> {
        let mut fields: Option<Fields> = None;
        let mut undos = Vec::new();
        for extra in &self.extras {
            match extra.check(parts) {
                Checked::NoKey => {}
                Checked::Admitted(f, undo) => {
                    undos.push(undo);
                    if self.format.any() {
                        match &mut fields {
                            Some(fields) => fields.append(f),
                            None => fields = Some(f),
                        }
                    }
                }
                Checked::Refused(error) => {
                    for undo in undos.into_iter().rev() {
                        undo();
                    }
                    return Err(self.refusal_by(extra.name(), extra.quota(), error));
                }
            }
        }
        Ok((fields, undos))
    }
}

impl<E: KeyExtractor> Config<E> {
    fn stats(&self) -> Vec<(String, Stats)> {
        let mut all = vec![(self.policy_raw.clone(), self.limiter.stats())];
        all.extend(
            self.extras
                .iter()
                .map(|e| (e.raw_name().to_owned(), e.stats())),
        );
        all
    }

    /// Acts on a decision that needs no wait: answers, or calls `inner`. In dry-run mode a
    /// refusal becomes a marked call.
    fn run<S, ReqBody, ResBody>(
        &self,
        inner: &mut S,
        mut parts: Parts,
        body: ReqBody,
        decision: Decision<E::Key>,
        dry_run: bool,
    ) -> ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    {
        match decision {
            Decision::Respond(rejection) if dry_run => {
                self.counters.count(Outcome::DryRunRefused);
                parts.extensions.insert(DryRunRefusal::new(
                    rejection.kind.status(),
                    rejection.headers,
                ));
                let fut = inner.call(Request::from_parts(parts, body));
                ResponseFuture::call(fut, None, self.format)
            }
            Decision::Respond(mut rejection) => {
                self.counters.count(refused_outcome(rejection.kind));
                rejection.grpc = is_grpc(&parts);
                ResponseFuture::respond(rejection)
            }
            Decision::Call(fields, outcome) => {
                self.counters.count(outcome);
                let fut = inner.call(Request::from_parts(parts, body));
                ResponseFuture::call(fut, fields, self.format)
            }
            Decision::Wait(..) => unreachable!("only delay mode waits"),
        }
    }
}

/// How a refusal is counted.
fn refused_outcome(kind: Kind) -> Outcome {
    match kind {
        Kind::RateLimited => Outcome::Rejected,
        Kind::MissingKey => Outcome::MissingKeyRejected,
        Kind::Unavailable => Outcome::Unavailable,
    }
}

impl<E: KeyExtractor> fmt::Debug for Config<E>
where
    E: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("limiter", &self.limiter)
            .field("extractor", &self.extractor)
            .field("format", &self.format)
            .field("policy_name", &self.policy_name)
            .field("missing_key", &self.missing_key)
            .finish_non_exhaustive()
    }
}

/// A [`Layer`] that rate-limits a service per client: see the [crate docs](crate).
///
/// Cloning is cheap, and every clone, and every service it makes, shares one limiter.
///
/// # Examples
///
/// ```
/// use tollgate::Quota;
/// use tollgate_tower::{ClientIp, RateLimitLayer};
///
/// // Behind a load balancer in 10.0.0.0/8: 10 requests per second per client, bursts of 20.
/// let layer = RateLimitLayer::new(
///     Quota::per_second(10).allow_burst(20),
///     ClientIp::trusting(["10.0.0.0/8"]).unwrap(),
/// );
/// let limiter = layer.limiter().clone(); // for stats()
/// # let _ = limiter;
/// ```
pub struct RateLimitLayer<E: KeyExtractor, M = Reject> {
    config: Arc<Config<E>>,
    mode: M,
}

impl<E: KeyExtractor> RateLimitLayer<E> {
    /// Limits each key to `quota`, in reject mode with the IETF fields on and a `400` for
    /// requests without a key.
    ///
    /// # Examples
    ///
    /// ```
    /// let layer = tollgate_tower::RateLimitLayer::new(
    ///     tollgate::Quota::per_second(5),
    ///     tollgate_tower::PeerIp::new(),
    /// );
    /// assert_eq!(layer.limiter().quota(), tollgate::Quota::per_second(5));
    /// ```
    pub fn new(quota: Quota, key: E) -> RateLimitLayer<E> {
        RateLimitLayer::builder(Limiter::keyed(quota), key).build()
    }

    /// Configures a layer over `limiter` (your capacity, clock, full-table policy; keep a
    /// clone to read its [`stats`](tollgate::Limiter::stats) or change its quota).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, ManualClock, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    ///
    /// let limiter = Limiter::builder(Quota::per_second(1)).clock(ManualClock::new()).build();
    /// let layer = RateLimitLayer::builder(limiter, Global).headers(false).build();
    /// # let _ = layer;
    /// ```
    pub fn builder(limiter: Limiter<E::Key>, key: E) -> Builder<E> {
        Builder {
            config: Config {
                limiter,
                extractor: key,
                quota_for: None,
                format: Format {
                    ietf: true,
                    legacy: false,
                },
                policy_name: sf_string("default"),
                policy_raw: String::from("default"),
                missing_key: MissingKey::Reject,
                extras: Vec::new(),
                allow: None,
                counters: Counters::default(),
                problem: None,
            },
            mode: Reject,
        }
    }
}

impl<E: KeyExtractor, M> RateLimitLayer<E, M> {
    /// The limiter behind the layer, shared by every clone.
    ///
    /// # Examples
    ///
    /// ```
    /// let layer = tollgate_tower::RateLimitLayer::new(
    ///     tollgate::Quota::per_second(5),
    ///     tollgate_tower::Global,
    /// );
    /// assert_eq!(layer.limiter().stats().admitted, 0);
    /// ```
    pub fn limiter(&self) -> &Limiter<E::Key> {
        &self.config.limiter
    }

    /// How many requests the layer decided each way, over every clone of it and of its
    /// services.
    ///
    /// # Examples
    ///
    /// ```
    /// let layer = tollgate_tower::RateLimitLayer::new(
    ///     tollgate::Quota::per_second(5),
    ///     tollgate_tower::Global,
    /// );
    /// assert_eq!(layer.counts(), tollgate_tower::Counts::default());
    /// ```
    pub fn counts(&self) -> Counts {
        self.config.counters.snapshot()
    }

    /// The [`Stats`] of every limiter behind the layer, with its policy's name: the
    /// layer's own first, then the stacked ones in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, PeerIp, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(5)), PeerIp::new())
    ///     .policy_name("per-ip")
    ///     .stack("global", Limiter::keyed(Quota::per_second(500)), Global)
    ///     .build();
    /// let names: Vec<String> = layer.stats().into_iter().map(|(name, _)| name).collect();
    /// assert_eq!(names, ["per-ip", "global"]);
    /// ```
    pub fn stats(&self) -> Vec<(String, Stats)> {
        self.config.stats()
    }

    /// The mode: [`Reject`], [`Delay`] or [`DryRun`].
    ///
    /// # Examples
    ///
    /// ```
    /// let layer = tollgate_tower::RateLimitLayer::new(
    ///     tollgate::Quota::per_second(5),
    ///     tollgate_tower::Global,
    /// );
    /// let tollgate_tower::Reject = layer.mode();
    /// ```
    pub fn mode(&self) -> &M {
        &self.mode
    }
}

impl<E: KeyExtractor, M: Clone> Clone for RateLimitLayer<E, M> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            config: Arc::clone(&self.config),
            mode: self.mode.clone(),
        }
    }
}

impl<E: KeyExtractor + fmt::Debug, M: fmt::Debug> fmt::Debug for RateLimitLayer<E, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("config", &self.config)
            .field("mode", &self.mode)
            .finish()
    }
}

impl<S, E: KeyExtractor, M: Clone> Layer<S> for RateLimitLayer<E, M> {
    type Service = RateLimit<S, E, M>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            config: Arc::clone(&self.config),
            mode: self.mode.clone(),
        }
    }
}

/// Configures a [`RateLimitLayer`]: from [`RateLimitLayer::builder`].
///
/// # Examples
///
/// ```
/// use tollgate::{Limiter, Quota};
/// use tollgate_tower::{MissingKey, PeerIp, RateLimitLayer};
///
/// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(10)), PeerIp::new())
///     .policy_name("per-ip")
///     .headers(true)
///     .on_missing_key(MissingKey::Reject)
///     .build();
/// # let _ = layer;
/// ```
pub struct Builder<E: KeyExtractor, M = Reject> {
    config: Config<E>,
    mode: M,
}

impl<E: KeyExtractor, M> Builder<E, M> {
    /// Whether to send the `RateLimit-Policy` and `RateLimit` fields (on by default).
    /// `Retry-After` is always sent on a `429`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    ///
    /// let quiet = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(1)), Global)
    ///     .headers(false)
    ///     .build();
    /// # let _ = quiet;
    /// ```
    pub fn headers(mut self, on: bool) -> Self {
        self.config.format.ietf = on;
        self
    }

    /// Whether to send the legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` fields (off by default), beside or instead of the IETF ones.
    /// They describe one policy, the one with the fewest cells left (on a `429`, the one
    /// that refused): its burst, the cells left, and the seconds (rounded up) until its
    /// burst is back in full. `X-RateLimit-Reset` is a delay in seconds, as the IETF `t`,
    /// not a Unix time.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(2)), Global)
    ///     .headers(false)
    ///     .legacy_headers(true)
    ///     .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// let ok = futures_executor::block_on(svc.oneshot(http::Request::new(()))).unwrap();
    /// assert_eq!(ok.headers()["x-ratelimit-limit"], "2");
    /// assert_eq!(ok.headers()["x-ratelimit-remaining"], "1");
    /// assert_eq!(ok.headers()["x-ratelimit-reset"], "30");
    /// assert!(ok.headers().get("ratelimit").is_none());
    /// ```
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.config.format.legacy = on;
        self
    }

    /// Gives refusals (`429`, and the `400` and `503` the layer answers by itself) an
    /// RFC 9457 `application/problem+json` body, made by `make` from the JSON text:
    /// `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"...",
    /// "retry_after":20}` (`retry_after` when `Retry-After` is sent).
    ///
    /// `B` must be the response body type of the service the layer wraps (refusals are
    /// made as that type): with another type, refusals keep an empty default body and no
    /// `content-type`. gRPC requests are answered as gRPC, without a body.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(1)), Global)
    ///     .problem_json(|json: String| json) // the service's bodies are `String`s
    ///     .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::from("hello")))
    /// }));
    /// futures_executor::block_on(async {
    ///     svc.clone().oneshot(http::Request::new(())).await.unwrap();
    ///     let refused = svc.clone().oneshot(http::Request::new(())).await.unwrap();
    ///     assert_eq!(refused.status(), 429);
    ///     assert_eq!(refused.headers()["content-type"], "application/problem+json");
    ///     assert!(refused.body().contains(r#""status":429"#));
    /// });
    /// ```
    pub fn problem_json<B, F>(mut self, make: F) -> Self
    where
        B: 'static,
        F: Fn(String) -> B + Send + Sync + 'static,
    {
        let make: MakeBody<B> = Box::new(make);
        self.config.problem = Some(Arc::new(make));
        self
    }

    /// Lets requests whose key `allow` accepts bypass every limit of the layer (its own
    /// and the stacked ones), without fields; they are counted as
    /// [`Counts::allowlisted`]. Called once per keyed request, before any limit. Calling it
    /// again adds to the allowlist.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{HeaderKey, RateLimitLayer};
    ///
    /// // Internal tokens are not limited.
    /// let layer = RateLimitLayer::builder(
    ///     Limiter::keyed(Quota::per_second(10)),
    ///     HeaderKey::new(http::HeaderName::from_static("x-api-key")),
    /// )
    /// .allow_if(|key: &http::HeaderValue| key.as_bytes().starts_with(b"internal-"))
    /// .build();
    /// # let _ = layer;
    /// ```
    pub fn allow_if<F>(mut self, allow: F) -> Self
    where
        F: Fn(&E::Key) -> bool + Send + Sync + 'static,
    {
        self.config.allow = Some(match self.config.allow.take() {
            None => Box::new(allow),
            Some(before) => Box::new(move |key| before(key) || allow(key)),
        });
        self
    }

    /// Lets the requests with one of `keys` bypass every limit (see
    /// [`allow_if`](Builder::allow_if)).
    ///
    /// # Examples
    ///
    /// ```
    /// use http::HeaderValue;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{HeaderKey, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder(
    ///     Limiter::keyed(Quota::per_second(10)),
    ///     HeaderKey::new(http::HeaderName::from_static("x-api-key")),
    /// )
    /// .allow_keys([HeaderValue::from_static("monitoring")])
    /// .build();
    /// # let _ = layer;
    /// ```
    pub fn allow_keys<I>(self, keys: I) -> Self
    where
        I: IntoIterator<Item = E::Key>,
        E::Key: Eq,
    {
        let keys: HashSet<E::Key> = keys.into_iter().collect();
        self.allow_if(move |key| keys.contains(key))
    }

    /// Lets clients in `cidrs` bypass every limit (see [`allow_if`](Builder::allow_if)),
    /// for key sources keyed by address ([`PeerIp`], [`ClientIp`]). The range is matched
    /// against the *key*, which is masked (IPv6 to its /64 by default): list IPv6 ranges
    /// of /64 or wider, or key by full addresses (`ipv6_prefix(128)`).
    ///
    /// # Errors
    ///
    /// [`CidrError`] for the first range that does not parse.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{ClientIp, RateLimitLayer};
    ///
    /// # fn main() -> Result<(), tollgate_tower::CidrError> {
    /// let layer = RateLimitLayer::builder(
    ///     Limiter::keyed(Quota::per_second(10)),
    ///     ClientIp::trusting(["10.0.0.0/8"])?,
    /// )
    /// .allow_cidrs(["192.0.2.0/24", "2001:db8:aa::/48"])?
    /// .build();
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn allow_cidrs<I>(self, cidrs: I) -> Result<Self, CidrError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
        E: KeyExtractor<Key = std::net::IpAddr>,
    {
        let cidrs = cidrs
            .into_iter()
            .map(|c| c.as_ref().parse())
            .collect::<Result<Vec<Cidr>, _>>()?;
        Ok(self.allow_if(move |ip| cidrs.iter().any(|c| c.contains(*ip))))
    }

    /// Dry-run mode: every request is decided and counted as usual, but none is refused.
    /// A request that would have been refused (`429`, or the `400` / `503` the layer
    /// answers by itself) is passed to the service with a [`DryRunRefusal`] in its
    /// extensions, and counted in [`Counts::dry_run_refused`]; it consumes nothing, as a
    /// refusal would not. Its response gets no rate-limit fields and no `Retry-After`
    /// (clients see no sign of the trial); admitted requests get their fields as usual.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{DryRun, PeerIp, RateLimitLayer};
    ///
    /// let trial: RateLimitLayer<PeerIp, DryRun> =
    ///     RateLimitLayer::builder(Limiter::keyed(Quota::per_second(10)), PeerIp::new())
    ///         .dry_run()
    ///         .build();
    /// # let _ = trial;
    /// ```
    pub fn dry_run(self) -> Builder<E, DryRun> {
        Builder {
            config: self.config,
            mode: DryRun,
        }
    }

    /// The policy's name in the IETF fields (`"default"` by default).
    ///
    /// # Panics
    ///
    /// If `name` is not printable ASCII (a structured-field String cannot carry it).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(1)), Global)
    ///     .policy_name("global")
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn policy_name(mut self, name: &str) -> Self {
        self.config.policy_name = sf_string(name);
        self.config.policy_raw = name.to_owned();
        self
    }

    /// What to do with requests that have no key ([`MissingKey::Reject`] by default).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{MissingKey, PeerIp, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(1)), PeerIp::new())
    ///     .on_missing_key(MissingKey::Allow)
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn on_missing_key(mut self, policy: MissingKey) -> Self {
        self.config.missing_key = policy;
        self
    }

    /// Chooses each request's quota (tiers, per-route or per-method limits): the request is
    /// checked with [`Limiter::check_with`], so keys with different quotas share one table,
    /// and the IETF fields describe the quota used. Without it, the limiter's own quota
    /// applies.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{HeaderKey, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder(
    ///     Limiter::keyed(Quota::per_second(1)),
    ///     HeaderKey::new(http::HeaderName::from_static("x-api-key")),
    /// )
    /// .quota_for(|parts| match parts.headers.get("x-tier") {
    ///     Some(tier) if tier == "paid" => Quota::per_second(100),
    ///     _ => Quota::per_second(1),
    /// })
    /// .build();
    /// # let _ = layer;
    /// ```
    pub fn quota_for<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> Quota + Send + Sync + 'static,
    {
        self.config.quota_for = Some(Arc::new(f));
        self
    }

    /// Stacks another limit, with its own key source, after the layer's own (and after those
    /// stacked before it): per IP, then per API key, then a global budget. A request is
    /// served only if every limit admits it; a refusal by any of them gives back what the
    /// others admitted ([`Limiter::undo`], as [`tollgate::check_all`] does), so a client
    /// refused by the global budget keeps its own allowance. A request without a key for a
    /// stacked limit is not limited by it. The IETF fields list every policy that admitted
    /// the request; a `429` carries the refusing policy's fields.
    ///
    /// In delay mode, only the layer's own limit waits; the stacked limits are checked
    /// first and given back if the wait fails.
    ///
    /// `name` is the policy's name in the IETF fields; names should be distinct.
    ///
    /// # Panics
    ///
    /// If `name` is not printable ASCII.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, HeaderKey, PeerIp, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(5)), PeerIp::new())
    ///     .policy_name("per-ip")
    ///     .stack(
    ///         "per-key",
    ///         Limiter::keyed(Quota::per_second(50)),
    ///         HeaderKey::new(http::HeaderName::from_static("x-api-key")),
    ///     )
    ///     .stack("global", Limiter::keyed(Quota::per_second(1000)), Global)
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn stack<E2: KeyExtractor>(
        mut self,
        name: &str,
        limiter: Limiter<E2::Key>,
        key: E2,
    ) -> Self {
        self.config.extras.push(Box::new(Extra {
            name: sf_string(name),
            raw_name: name.to_owned(),
            limiter,
            extractor: key,
        }));
        self
    }

    /// Delay mode: a request over its limit waits up to `max` in its key's FIFO queue
    /// (with [`UntilReady::within`](tollgate::UntilReady::within)), and is refused at once
    /// if its turn would come later. The inner service must be `Clone`: the ready service
    /// is called when the wait ends.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{PeerIp, RateLimitLayer};
    ///
    /// // Smooth bursts out at 10/s, queueing up to half a second of them.
    /// let layer = RateLimitLayer::builder(
    ///     Limiter::keyed(Quota::per_second(10).allow_burst(1)),
    ///     PeerIp::new(),
    /// )
    /// .delay(Duration::from_millis(500))
    /// .build();
    /// # let _ = layer;
    /// ```
    pub fn delay(self, max: Duration) -> Builder<E, Delay> {
        Builder {
            config: self.config,
            mode: Delay { max },
        }
    }

    /// The layer.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(1)), Global).build();
    /// # let _ = layer;
    /// ```
    pub fn build(self) -> RateLimitLayer<E, M> {
        RateLimitLayer {
            config: Arc::new(self.config),
            mode: self.mode,
        }
    }
}

impl<E: KeyExtractor + fmt::Debug, M: fmt::Debug> fmt::Debug for Builder<E, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field("mode", &self.mode)
            .finish()
    }
}

/// The rate-limiting [`Service`] made by [`RateLimitLayer`]: decides in `call`, passes
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
pub struct RateLimit<S, E: KeyExtractor, M = Reject> {
    inner: S,
    config: Arc<Config<E>>,
    mode: M,
}

impl<S: Clone, E: KeyExtractor, M: Clone> Clone for RateLimit<S, E, M> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
            mode: self.mode.clone(),
        }
    }
}

impl<S: fmt::Debug, E: KeyExtractor + fmt::Debug, M: fmt::Debug> fmt::Debug for RateLimit<S, E, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .field("mode", &self.mode)
            .finish()
    }
}

impl<S, E, M> RateLimit<S, E, M>
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

    /// How many requests the layer decided each way (see [`RateLimitLayer::counts`]),
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

    /// The [`Stats`] of every limiter behind the service (see [`RateLimitLayer::stats`]).
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

impl<S, E, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, E, Reject>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    E: KeyExtractor,
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
        let decision = self.config.decide(&parts, false);
        self.config
            .run(&mut self.inner, parts, body, decision, false)
    }
}

impl<S, E, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, E, DryRun>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    E: KeyExtractor,
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
        let decision = self.config.decide(&parts, false);
        self.config
            .run(&mut self.inner, parts, body, decision, true)
    }
}

impl<S, E, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, E, Delay>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    E: KeyExtractor,
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
            Decision::Wait(key, quota, extra_fields, undos) => {
                let grpc = is_grpc(&parts);
                // The service `poll_ready` readied goes with the request; this one gets a
                // fresh clone, to be readied before its next call.
                let clone = self.inner.clone();
                let ready = std::mem::replace(&mut self.inner, clone);
                let config = Arc::clone(&self.config);
                let wait = delayed(config, key, quota, self.mode.max, extra_fields, undos, grpc);
                ResponseFuture::wait(
                    wait,
                    ready,
                    Request::from_parts(parts, body),
                    self.config.format,
                )
            }
            decision => self
                .config
                .run(&mut self.inner, parts, body, decision, false),
        }
    }
}

/// Waits for `key`'s turn, no longer than `max`; the fields describe the key after it.
fn delayed<E: KeyExtractor>(
    config: Arc<Config<E>>,
    key: E::Key,
    quota: Option<Quota>,
    max: Duration,
    extra_fields: Option<Fields>,
    undos: Vec<Undo>,
    grpc: bool,
) -> BoxWait {
    // If the wait fails, or its future is dropped (the client hung up), the stacked limits
    // get their cells back.
    let undos = UndoOnDrop(undos);
    Box::pin(async move {
        let limiter = &config.limiter;
        // Whether the request had to wait: its wait was pending at least once.
        let mut pended = false;
        let waited = match quota {
            Some(q) => {
                let mut wait = pin!(limiter.until_ready_with(&key, q).within(max));
                poll_fn(|cx| note_pending(wait.as_mut().poll(cx), &mut pended)).await
            }
            None => {
                let mut wait = pin!(limiter.until_ready(&key).within(max));
                poll_fn(|cx| note_pending(wait.as_mut().poll(cx), &mut pended)).await
            }
        };
        if let Err(error) = waited {
            drop(undos);
            let mut rejection = config.refusal(quota, error);
            config.counters.count(refused_outcome(rejection.kind));
            rejection.grpc = grpc;
            return Err(rejection);
        }
        undos.disarm();
        config.counters.count(if pended {
            Outcome::Delayed
        } else {
            Outcome::Admitted
        });
        if !config.format.any() {
            return Ok(None);
        }
        // The wait returns no `Admitted`: read the key's state back with a peek, which
        // answers as a check would, i.e. one cell further on than the state is.
        let after = match quota {
            Some(q) => limiter.peek_with(&key, q),
            None => limiter.peek(&key),
        };
        let quota = quota.unwrap_or_else(|| limiter.quota());
        let mut fields = match after {
            Ok(admitted) => Fields::admitted(
                &config.policy_name,
                quota,
                admitted.remaining().saturating_add(1).min(quota.burst()),
                admitted.reset_after().saturating_sub(quota.interval()),
            ),
            Err(Error::RateLimited { wait, .. }) => {
                let tolerance = quota.interval() * quota.burst().saturating_sub(1);
                let reset = wait.saturating_add(tolerance);
                Fields::admitted(&config.policy_name, quota, 0, reset)
            }
            Err(_) => return Ok(extra_fields),
        };
        if let Some(extra) = extra_fields {
            fields.append(extra);
        }
        Ok(Some(fields))
    })
}

fn note_pending<T>(poll: Poll<T>, pended: &mut bool) -> Poll<T> {
    *pended |= poll.is_pending();
    poll
}

/// Runs its undos (latest first) when dropped, unless disarmed.
struct UndoOnDrop(Vec<Undo>);

impl UndoOnDrop {
    fn disarm(mut self) {
        self.0.clear();
    }
}

impl Drop for UndoOnDrop {
    fn drop(&mut self) {
        while let Some(undo) = self.0.pop() {
            undo();
        }
    }
}
