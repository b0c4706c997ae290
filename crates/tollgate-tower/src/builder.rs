//! The [`Builder`] of a [`RateLimitLayer`] and its options: fields and bodies, the
//! allowlist, the missing-key policy ([`MissingKey`]), quota tiers, stacked limits, and the
//! mode (reject, delay, dry-run).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::Response;
use http::request::Parts;
use tollgate::{Limiter, Quota};

use crate::config::MissingKey;
use crate::config::{Config, QuotaFor};
use crate::counts::Counters;
use crate::dry_run::DryRun;
use crate::extract::KeyExtractor;
use crate::fields::{Format, Policy, PolicyNameError};
use crate::key::{Cidr, CidrError};
use crate::layer::RateLimitLayer;
use crate::mode::{Delay, Reject};
use crate::near::{NearLimit, NearLimitError};
use crate::refusal::Refusal;
use crate::respond::{EmptyBody, OnRefusal, ProblemJson};
use crate::sampled::RefusalLog;
use crate::stack::Extra;

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
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Limiter::builder(Quota::per_second(1)).clock(clock.clone()).build();
    /// let layer = RateLimitLayer::builder(limiter.clone(), Global).headers(false).build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// let status = || async {
    ///     svc.clone().oneshot(http::Request::new(())).await.unwrap().status()
    /// };
    /// futures_executor::block_on(async {
    ///     assert_eq!(status().await, 200);
    ///     assert_eq!(status().await, 429);
    ///     clock.advance(Duration::from_secs(1)); // the limiter's clock
    ///     assert_eq!(status().await, 200);
    /// });
    /// // The clone kept is the layer's limiter.
    /// assert_eq!((limiter.stats().admitted, limiter.stats().denied), (2, 1));
    /// limiter.set_quota(Quota::per_second(2));
    /// assert_eq!(layer.limiter().quota(), Quota::per_second(2));
    /// ```
    pub fn builder(limiter: Limiter<E::Key>, key: E) -> Builder<E> {
        Builder::new(limiter, key)
    }
}

/// Configures a [`RateLimitLayer`]: from [`RateLimitLayer::builder`].
///
/// `M` is the mode ([`Reject`], or [`Delay`] and [`DryRun`] from [`delay`](Self::delay) and
/// [`dry_run`](Self::dry_run)), `R` what answers a refused request ([`EmptyBody`], or
/// the hooks of [`on_refusal`](Self::on_refusal) and [`problem_json`](Self::problem_json)).
/// Setting one keeps the other.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use std::net::SocketAddr;
/// use tollgate::{Limiter, Quota};
/// use tollgate_tower::{MissingKey, PeerIp, RateLimitLayer};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(10)), PeerIp::new())
///     .policy_name("per-ip")
///     .unwrap()
///     .headers(true)
///     .on_missing_key(MissingKey::Reject)
///     .build();
/// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new(String::new()))
/// }));
/// let mut from_peer = http::Request::new(());
/// from_peer.extensions_mut().insert("192.0.2.7:4000".parse::<SocketAddr>().unwrap());
/// futures_executor::block_on(async {
///     let ok = svc.clone().oneshot(from_peer).await.unwrap();
///     assert_eq!(ok.headers()["ratelimit-policy"], "\"per-ip\";q=10;w=1");
///     // No peer address, no key: refused.
///     assert_eq!(svc.clone().oneshot(http::Request::new(())).await.unwrap().status(), 400);
/// });
/// ```
pub struct Builder<E: KeyExtractor, M = Reject, R = EmptyBody> {
    config: Config<E>,
    mode: M,
    /// What answers a refused request.
    respond: R,
}

impl<E: KeyExtractor> Builder<E> {
    /// The defaults: reject mode, the IETF fields on, a `400` for requests without a key,
    /// refusals with an empty body.
    pub(crate) fn new(limiter: Limiter<E::Key>, key: E) -> Self {
        Builder {
            config: Config {
                limiter,
                extractor: key,
                quota_for: None,
                skip: None,
                cost_for: None,
                format: Format {
                    ietf: true,
                    legacy: false,
                },
                policy: Policy::new("default"),
                policy_raw: String::from("default"),
                missing_key: MissingKey::Reject,
                extras: Vec::new(),
                allow: None,
                counters: Counters::default(),
                near: NearLimit::default(),
                refusals: RefusalLog::default(),
            },
            mode: Reject,
            respond: EmptyBody,
        }
    }
}

impl<E: KeyExtractor, M, R> Builder<E, M, R> {
    /// Whether to send the `RateLimit-Policy` and `RateLimit` fields (on by default).
    /// `Retry-After` is always sent on a `429`.
    ///
    /// `RateLimit-Policy` says `q` cells per `w` seconds, and `w` is a whole number: the
    /// policy announced is never looser than the quota enforces, so a client that spends
    /// at most `q` in any `w` seconds, all at once or spread out, is never refused. That
    /// needs `q` at most the burst and `q / w` at most the rate (`q` intervals within `w`
    /// seconds, to the nanosecond). When the burst refills in whole seconds it is exact
    /// (`per_second(10)`: `q=10;w=1`; `per_minute(100)`: `q=100;w=60`). Otherwise it is
    /// the pair with the highest rate among `w` = the refill time rounded up (with `q` =
    /// the burst) and the 8 whole seconds at or below it (with the largest `q` that fits):
    /// `per_second(30)` (33,333,334 ns per cell) is `q=29;w=1`, `per_second(2)` with a
    /// burst of 5 is `q=4;w=2`. A burst that refills in under a second is announced per
    /// second (`per_second(30).allow_burst(5)`: `q=5;w=1`), the price of `q` being
    /// spendable at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, ManualClock, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let limiter = Limiter::builder(Quota::per_second(1)).clock(ManualClock::new()).build();
    /// let quiet = RateLimitLayer::builder(limiter, Global).headers(false).build();
    /// let svc = quiet.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// futures_executor::block_on(async {
    ///     let ok = svc.clone().oneshot(http::Request::new(())).await.unwrap();
    ///     assert!(ok.headers().is_empty());
    ///     let refused = svc.clone().oneshot(http::Request::new(())).await.unwrap();
    ///     assert_eq!(refused.status(), 429);
    ///     assert_eq!(refused.headers().len(), 1); // `Retry-After` alone
    ///     assert_eq!(refused.headers()["retry-after"], "1");
    /// });
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

    /// Answers refused requests with `hook`'s response: every refusal the layer makes by
    /// itself (`429`, and the `400`, `503` and `413`), given as a [`Refusal`] (why, which
    /// policy, when to retry, the fields prepared). [`Refusal::into_response`] wraps a body
    /// of yours in the response the layer would send (its status, `Retry-After`, the
    /// rate-limit fields); a response built from scratch carries only what you put in it.
    /// Replaces [`problem_json`](Self::problem_json) or a hook set before.
    ///
    /// The body type `B` must be the response body type of the service the layer wraps:
    /// the layer's services are `Service`s only then, so a hook of another body type is a
    /// compile error (below), not refusals sent without their body.
    ///
    /// gRPC requests (`content-type: application/grpc*`) never reach the hook: they are
    /// answered as gRPC, trailers-only (HTTP 200 with `grpc-status`, `grpc-message` and the
    /// fields, and an empty body, `B::default()`), since a body of the hook's would make
    /// the answer malformed for every gRPC client. Dry-run mode refuses nothing, so it never
    /// calls the hook. The hook runs in the service's `call` (in delay mode, when the wait
    /// fails), on the path of every refused request: keep it quick.
    ///
    /// # Examples
    ///
    /// A JSON body that tells the client when to retry, beside the fields the layer sets:
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use http::HeaderValue;
    /// use http::header::CONTENT_TYPE;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer, Refusal};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(1)), Global)
    ///     .on_refusal(|refusal: Refusal| {
    ///         let retry = refusal.retry_after().map_or(0, |wait| wait.as_secs());
    ///         let body = format!(r#"{{"error":"slow down","retry_in":{retry}}}"#);
    ///         let mut response = refusal.into_response(body);
    ///         let json = HeaderValue::from_static("application/json");
    ///         response.headers_mut().insert(CONTENT_TYPE, json);
    ///         response
    ///     })
    ///     .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::from("hello")))
    /// }));
    /// futures_executor::block_on(async {
    ///     assert_eq!(svc.clone().oneshot(http::Request::new(())).await.unwrap().body(), "hello");
    ///     let refused = svc.clone().oneshot(http::Request::new(())).await.unwrap();
    ///     assert_eq!(refused.status(), 429);
    ///     assert_eq!(refused.headers()["content-type"], "application/json");
    ///     assert_eq!(refused.headers()["retry-after"], "60");
    ///     assert_eq!(refused.headers()["ratelimit"], "\"default\";r=0;t=60");
    ///     assert_eq!(refused.body(), r#"{"error":"slow down","retry_in":60}"#);
    /// });
    /// ```
    ///
    /// A hook must make the wrapped service's body type. This service's bodies are
    /// `Vec<u8>`, and so are the hook's:
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(1)), Global)
    ///     .on_refusal(|refusal| refusal.into_response(b"slow down".to_vec()))
    ///     .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(b"hello".to_vec()))
    /// }));
    /// let refused = futures_executor::block_on(async {
    ///     ServiceExt::oneshot(svc.clone(), http::Request::new(())).await.unwrap();
    ///     ServiceExt::oneshot(svc.clone(), http::Request::new(())).await.unwrap()
    /// });
    /// assert_eq!(refused.body(), b"slow down");
    /// ```
    ///
    /// The same with a hook that makes `String`s does not compile. rustc says "expected
    /// `{closure}` to return `Response<Vec<u8>>`, but it returns `Response<String>`",
    /// required for `OnRefusal<{closure}>` to implement `RefusalResponse<Vec<u8>>` (E0271);
    /// through a method call, `svc.oneshot(..)`, it says only that the `RateLimit` is not a
    /// `Service` (E0599).
    ///
    /// ```compile_fail,E0271
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(1)), Global)
    ///     .on_refusal(|refusal| refusal.into_response(String::from("slow down")))
    ///     .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(b"hello".to_vec()))
    /// }));
    /// let refused = futures_executor::block_on(async {
    ///     ServiceExt::oneshot(svc.clone(), http::Request::new(())).await.unwrap();
    ///     ServiceExt::oneshot(svc.clone(), http::Request::new(())).await.unwrap()
    /// });
    /// assert_eq!(refused.body(), b"slow down");
    /// ```
    pub fn on_refusal<F, B>(self, hook: F) -> Builder<E, M, OnRefusal<F>>
    where
        F: Fn(Refusal) -> Response<B> + Send + Sync + 'static,
    {
        Builder {
            config: self.config,
            mode: self.mode,
            respond: OnRefusal(hook),
        }
    }

    /// Gives refusals (`429`, and the `400`, `503` and `413` the layer answers by itself) an
    /// RFC 9457 `application/problem+json` body, made by `make` from the JSON text
    /// ([`Refusal::problem_json`]): `{"type":"about:blank","title":"Too Many Requests",
    /// "status":429,"detail":"...","retry_after":20}` (`retry_after` when `Retry-After` is
    /// sent). A refusal hook ([`on_refusal`](Self::on_refusal)) made for you, and checked
    /// as one: `B` must be the response body type of the service the layer wraps, or the
    /// layer's services do not compile. Replaces a hook set before. gRPC requests are
    /// answered as gRPC, without a body.
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
    ///     assert_eq!(refused.headers()["retry-after"], "60");
    ///     assert_eq!(
    ///         refused.body(),
    ///         r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded (policy default); retry after 60 s","retry_after":60}"#
    ///     );
    /// });
    /// ```
    pub fn problem_json<F, B>(self, make: F) -> Builder<E, M, ProblemJson<F>>
    where
        F: Fn(String) -> B + Send + Sync + 'static,
    {
        Builder {
            config: self.config,
            mode: self.mode,
            respond: ProblemJson(make),
        }
    }

    /// Lets requests whose key `allow` accepts bypass every limit of the layer (its own
    /// and the stacked ones), without fields; they are counted as
    /// [`Counts::allowlisted`](crate::Counts::allowlisted). Called once per keyed request, before any limit. Calling it
    /// again adds to the allowlist.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{HeaderKey, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// // Internal tokens are not limited.
    /// let layer = RateLimitLayer::builder(
    ///     Limiter::keyed(Quota::per_minute(1)),
    ///     HeaderKey::new(http::HeaderName::from_static("x-api-key")),
    /// )
    /// .allow_if(|key: &http::HeaderValue| key.as_bytes().starts_with(b"internal-"))
    /// .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// let with = |key: &str| http::Request::get("/").header("x-api-key", key).body(()).unwrap();
    /// futures_executor::block_on(async {
    ///     for _ in 0..3 {
    ///         let internal = svc.clone().oneshot(with("internal-7")).await.unwrap();
    ///         assert_eq!(internal.status(), 200);
    ///         assert!(internal.headers().get("ratelimit").is_none()); // no fields
    ///     }
    ///     assert_eq!(svc.clone().oneshot(with("client-1")).await.unwrap().status(), 200);
    ///     assert_eq!(svc.clone().oneshot(with("client-1")).await.unwrap().status(), 429);
    /// });
    /// let counts = layer.counts();
    /// assert_eq!((counts.allowlisted, counts.admitted, counts.rejected), (3, 1, 1));
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
    /// use std::convert::Infallible;
    /// use http::HeaderValue;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{HeaderKey, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = RateLimitLayer::builder(
    ///     Limiter::keyed(Quota::per_minute(1)),
    ///     HeaderKey::new(http::HeaderName::from_static("x-api-key")),
    /// )
    /// .allow_keys([HeaderValue::from_static("monitoring")])
    /// .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// let with = |key: &str| http::Request::get("/").header("x-api-key", key).body(()).unwrap();
    /// futures_executor::block_on(async {
    ///     for _ in 0..3 {
    ///         assert_eq!(svc.clone().oneshot(with("monitoring")).await.unwrap().status(), 200);
    ///     }
    ///     assert_eq!(svc.clone().oneshot(with("monitoring-2")).await.unwrap().status(), 200);
    ///     assert_eq!(svc.clone().oneshot(with("monitoring-2")).await.unwrap().status(), 429);
    /// });
    /// assert_eq!(layer.counts().allowlisted, 3);
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
    /// for key sources keyed by address ([`PeerIp`](crate::PeerIp), [`ClientIp`](crate::ClientIp)). The range is matched
    /// against the *key*, which is masked (IPv6 to its /64 by default): list IPv6 ranges
    /// of /64 or wider, or key by full addresses (`ipv6_prefix(128)`). A client at an IPv6
    /// address that stands for an IPv4 one (IPv4-mapped, NAT64's `64:ff9b::/96`,
    /// IPv4-compatible) is keyed as that IPv4 address ([`ip_key`](crate::ip_key)): list
    /// IPv4 ranges for such clients; an IPv6 range inside `64:ff9b::/96` matches none.
    ///
    /// # Errors
    ///
    /// [`CidrError`] for the first range that does not parse.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::net::SocketAddr;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{ClientIp, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// # fn main() -> Result<(), tollgate_tower::CidrError> {
    /// let layer = RateLimitLayer::builder(
    ///     Limiter::keyed(Quota::per_minute(1)),
    ///     ClientIp::trusting(["10.0.0.0/8"])?,
    /// )
    /// .allow_cidrs(["192.0.2.0/24", "2001:db8:aa::/48"])?
    /// .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// // A client's request, through the load balancer at 10.0.0.2.
    /// let from = |client: &str| {
    ///     let req = http::Request::get("/").header("x-forwarded-for", client);
    ///     let mut req = req.body(()).unwrap();
    ///     req.extensions_mut().insert("10.0.0.2:40000".parse::<SocketAddr>().unwrap());
    ///     req
    /// };
    /// futures_executor::block_on(async {
    ///     for client in ["192.0.2.7", "192.0.2.7", "2001:db8:aa:1::5", "2001:db8:aa:1::5"] {
    ///         assert_eq!(svc.clone().oneshot(from(client)).await.unwrap().status(), 200);
    ///     }
    ///     assert_eq!(svc.clone().oneshot(from("198.51.100.4")).await.unwrap().status(), 200);
    ///     assert_eq!(svc.clone().oneshot(from("198.51.100.4")).await.unwrap().status(), 429);
    /// });
    /// assert_eq!(layer.counts().allowlisted, 4);
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

    /// The policy's name in the IETF fields (`"default"` by default).
    ///
    /// # Errors
    ///
    /// [`PolicyNameError`] if `name` is not printable ASCII (a structured-field String, which
    /// the fields write it as, cannot carry it), or if a limit stacked already has it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(1)), Global)
    ///     .policy_name("global")
    ///     .unwrap()
    ///     .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// let ok = futures_executor::block_on(svc.oneshot(http::Request::new(()))).unwrap();
    /// assert_eq!(ok.headers()["ratelimit-policy"], "\"global\";q=1;w=1");
    /// assert_eq!(ok.headers()["ratelimit"], "\"global\";r=0;t=1");
    ///
    /// let bad = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(1)), Global)
    ///     .policy_name("größe");
    /// assert!(bad.is_err());
    /// ```
    pub fn policy_name(mut self, name: &str) -> Result<Self, PolicyNameError> {
        if self
            .config
            .extras
            .iter()
            .any(|extra| extra.raw_name() == name)
        {
            return Err(PolicyNameError::taken(name));
        }
        self.config.policy = Policy::try_new(name)?;
        self.config.policy_raw = name.to_owned();
        Ok(self)
    }

    /// When an admission counts as near the limit ([`Counts::near_limit`], and the
    /// `tollgate_near_limit_total` metric): once more than `ratio` of its key's burst is
    /// used, i.e. less than `1 - ratio` of it is left. The default is 0.8 (less than 20%
    /// left: with a burst of 10, an admission that leaves 1 or 0). `1.0` counts nothing,
    /// and then no cells left are even computed; `0.0` counts every admission that leaves
    /// less than the whole burst.
    ///
    /// Every limit is judged, the layer's own and each stacked one ([`Builder::stack`]),
    /// from the admission its check returns (no second table read), once the request
    /// stands (an admission given back because another limit refused is not counted); each
    /// near limit counts once, under its own policy in the metric. Delay mode's waits
    /// report no cells left, so delay mode counts none.
    ///
    /// [`Counts::near_limit`]: crate::Counts::near_limit
    ///
    /// # Errors
    ///
    /// A ratio outside `0.0..=1.0`, or NaN: [`NearLimitError`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, ManualClock, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let limiter = Limiter::builder(Quota::per_second(1).allow_burst(4))
    ///     .clock(ManualClock::new())
    ///     .build();
    /// // Near once more than half the burst is used: fewer than 2 of 4 left.
    /// let layer = RateLimitLayer::builder(limiter, Global).near_limit(0.5).unwrap().build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// futures_executor::block_on(async {
    ///     for _ in 0..5 {
    ///         svc.clone().oneshot(http::Request::new(())).await.unwrap();
    ///     }
    /// });
    /// let counts = layer.counts();
    /// // Left 3, 2, 1, 0, then refused: two admissions near the limit.
    /// assert_eq!((counts.admitted, counts.near_limit, counts.rejected), (4, 2, 1));
    /// ```
    pub fn near_limit(mut self, ratio: f64) -> Result<Self, NearLimitError> {
        self.config.near = NearLimit::new(ratio)?;
        Ok(self)
    }

    /// What to do with requests that have no key ([`MissingKey::Reject`] by default).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{MissingKey, PeerIp, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(1)), PeerIp::new())
    ///     .on_missing_key(MissingKey::Allow)
    ///     .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// // No peer address, so no key: served (not limited, no fields) rather than a 400.
    /// futures_executor::block_on(async {
    ///     for _ in 0..3 {
    ///         let keyless = svc.clone().oneshot(http::Request::new(())).await.unwrap();
    ///         assert_eq!(keyless.status(), 200);
    ///         assert!(keyless.headers().is_empty());
    ///     }
    /// });
    /// let counts = layer.counts();
    /// assert_eq!((counts.missing_key_allowed, counts.no_peer_address), (3, 3));
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
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{HeaderKey, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
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
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// let request = |key: &str, tier: &str| {
    ///     let req = http::Request::get("/").header("x-api-key", key).header("x-tier", tier);
    ///     req.body(()).unwrap()
    /// };
    /// futures_executor::block_on(async {
    ///     let paid = svc.clone().oneshot(request("k-1", "paid")).await.unwrap();
    ///     assert_eq!(paid.headers()["ratelimit-policy"], "\"default\";q=100;w=1");
    ///     let free = svc.clone().oneshot(request("k-2", "free")).await.unwrap();
    ///     assert_eq!(free.headers()["ratelimit-policy"], "\"default\";q=1;w=1");
    /// });
    /// ```
    pub fn quota_for<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> Quota + Send + Sync + 'static,
    {
        self.config.quota_for = Some(QuotaFor::Request(Arc::new(f)));
        self
    }

    /// Chooses each request's quota from the key it is limited by, as
    /// [`quota_for`](Self::quota_for) does from the request: the quota and the key can never
    /// disagree (a tier read from the request would have to repeat the key source's rules,
    /// and an empty `x-api-key:` would get the paid quota on the fallback key). Replaces a
    /// [`quota_for`](Self::quota_for) set before, and is replaced by one set after. Not
    /// called for requests without a key, nor for allowlisted or skipped ones.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{HeaderKey, KeyExtractor, KeyOr, PeerIp, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// // Clients with a (validated) paid key get 100 a minute; everyone else, by address, 1.
    /// let paid = |key: &http::HeaderValue| key.as_bytes().starts_with(b"paid-");
    /// let layer = RateLimitLayer::builder(
    ///     Limiter::keyed(Quota::per_minute(1)),
    ///     HeaderKey::new("x-api-key").or(PeerIp::new()),
    /// )
    /// .quota_for_key(move |key| match key {
    ///     KeyOr::First(api_key) if paid(api_key) => Quota::per_minute(100),
    ///     _ => Quota::per_minute(1),
    /// })
    /// .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// let with = |key: &str| {
    ///     let mut req = http::Request::get("/").header("x-api-key", key).body(()).unwrap();
    ///     req.extensions_mut().insert("192.0.2.7:4000".parse::<std::net::SocketAddr>().unwrap());
    ///     req
    /// };
    /// futures_executor::block_on(async {
    ///     for _ in 0..3 {
    ///         assert_eq!(svc.clone().oneshot(with("paid-42")).await.unwrap().status(), 200);
    ///     }
    ///     // An empty key is no key: the address's quota, not the paid one.
    ///     assert_eq!(svc.clone().oneshot(with("")).await.unwrap().status(), 200);
    ///     assert_eq!(svc.clone().oneshot(with("")).await.unwrap().status(), 429);
    /// });
    /// ```
    pub fn quota_for_key<F>(mut self, f: F) -> Self
    where
        F: Fn(&E::Key) -> Quota + Send + Sync + 'static,
    {
        self.config.quota_for = Some(QuotaFor::Key(Arc::new(f)));
        self
    }

    /// How many cells a request costs in the layer's own limit (1 by default): a batch
    /// call, an expensive query, an upload by its size. The quota's burst is then the most
    /// one request may cost: a request that costs more can never be admitted and is answered
    /// `413 Content Too Large` without `Retry-After` (counted as `rejected`; gRPC status 11,
    /// OUT_OF_RANGE). A cost of 0 is admitted and spends nothing. Delay mode waits for all
    /// the cells at once. Stacked limits count each request as one cell.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// // 10 units a minute; a request says what it costs in `x-units` (default 1).
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(10)), Global)
    ///     .cost_for(|parts| {
    ///         parts.headers.get("x-units").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(1)
    ///     })
    ///     .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// let costing = |units: &str| http::Request::get("/").header("x-units", units).body(()).unwrap();
    /// futures_executor::block_on(async {
    ///     assert_eq!(svc.clone().oneshot(costing("7")).await.unwrap().status(), 200);
    ///     assert_eq!(svc.clone().oneshot(costing("4")).await.unwrap().status(), 429);
    ///     assert_eq!(svc.clone().oneshot(costing("3")).await.unwrap().status(), 200);
    ///     let too_big = svc.clone().oneshot(costing("11")).await.unwrap();
    ///     assert_eq!(too_big.status(), 413);
    ///     assert!(too_big.headers().get("retry-after").is_none());
    /// });
    /// ```
    pub fn cost_for<F>(mut self, cost: F) -> Self
    where
        F: Fn(&Parts) -> u32 + Send + Sync + 'static,
    {
        self.config.cost_for = Some(Box::new(cost));
        self
    }

    /// Lets the requests `skip` says yes to through unlimited, before any key is looked for:
    /// health checks, `OPTIONS` preflights, metrics scrapes. They carry no fields and are
    /// counted as [`Counts::skipped`](crate::Counts::skipped). Calling it again replaces the
    /// predicate.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::Quota;
    /// use tollgate_tower::{Global, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = RateLimitLayer::builder(tollgate::Limiter::keyed(Quota::per_minute(1)), Global)
    ///     .skip_if(|parts| parts.uri.path() == "/healthz" || parts.method == http::Method::OPTIONS)
    ///     .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// let get = |path: &str| http::Request::get(path).body(()).unwrap();
    /// futures_executor::block_on(async {
    ///     assert_eq!(svc.clone().oneshot(get("/")).await.unwrap().status(), 200);
    ///     assert_eq!(svc.clone().oneshot(get("/")).await.unwrap().status(), 429);
    ///     for _ in 0..3 {
    ///         assert_eq!(svc.clone().oneshot(get("/healthz")).await.unwrap().status(), 200);
    ///     }
    /// });
    /// assert_eq!(layer.counts().skipped, 3);
    /// ```
    pub fn skip_if<F>(mut self, skip: F) -> Self
    where
        F: Fn(&Parts) -> bool + Send + Sync + 'static,
    {
        self.config.skip = Some(Box::new(skip));
        self
    }

    /// Stacks another limit, with its own key source, after the layer's own (and after those
    /// stacked before it): per IP, then per API key, then a global budget. A request is
    /// served only if every limit admits it; a refusal by any of them gives back what the
    /// others admitted ([`Limiter::undo`], as [`tollgate::check_all`] does), so a client
    /// refused by the global budget keeps its own allowance. A request in which a stacked
    /// limit's key source finds no key ([`NoKey::Absent`](crate::NoKey::Absent): no API key)
    /// is not limited by it; one it cannot attribute or that carries no peer address
    /// ([`NoKey::Unattributable`](crate::NoKey::Unattributable),
    /// [`NoKey::NoPeerAddress`](crate::NoKey::NoPeerAddress)) gets the missing-key policy, so a
    /// per-client limit cannot be escaped that way. The IETF fields list every policy that admitted
    /// the request; a `429` carries the refusing policy's fields.
    ///
    /// In delay mode, only the layer's own limit waits; the stacked limits are checked
    /// first and given back if the wait fails.
    ///
    /// `name` is the policy's name in the IETF fields, its gauges' label and its refusals'
    /// name: each limit of a layer has its own.
    ///
    /// # Errors
    ///
    /// [`PolicyNameError`] if `name` is not printable ASCII, or if another limit of the
    /// layer has it already (the layer's own, `"default"` unless
    /// [`policy_name`](Builder::policy_name) named it, or a stacked one).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::net::SocketAddr;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, HeaderKey, PeerIp, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(5)), PeerIp::new())
    ///     .policy_name("per-ip")
    ///     .unwrap()
    ///     .stack(
    ///         "per-key",
    ///         Limiter::keyed(Quota::per_second(50)),
    ///         HeaderKey::new(http::HeaderName::from_static("x-api-key")),
    ///     )
    ///     .unwrap()
    ///     .stack("global", Limiter::keyed(Quota::per_second(1000)), Global)
    ///     .unwrap()
    ///     .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// let request = |api_key: Option<&str>| {
    ///     let mut req = http::Request::get("/");
    ///     if let Some(key) = api_key {
    ///         req = req.header("x-api-key", key);
    ///     }
    ///     let mut req = req.body(()).unwrap();
    ///     req.extensions_mut().insert("192.0.2.7:4000".parse::<SocketAddr>().unwrap());
    ///     req
    /// };
    /// futures_executor::block_on(async {
    ///     let keyed = svc.clone().oneshot(request(Some("k-1"))).await.unwrap();
    ///     assert_eq!(
    ///         keyed.headers()["ratelimit-policy"],
    ///         r#""per-ip";q=5;w=1, "per-key";q=50;w=1, "global";q=1000;w=1"#
    ///     );
    ///     // Without an API key, the per-key limit does not apply.
    ///     let keyless = svc.clone().oneshot(request(None)).await.unwrap();
    ///     assert_eq!(keyless.status(), 200);
    ///     assert_eq!(
    ///         keyless.headers()["ratelimit-policy"],
    ///         r#""per-ip";q=5;w=1, "global";q=1000;w=1"#
    ///     );
    /// });
    /// ```
    pub fn stack<E2: KeyExtractor>(
        mut self,
        name: &str,
        limiter: Limiter<E2::Key>,
        key: E2,
    ) -> Result<Self, PolicyNameError> {
        let taken = name == self.config.policy_raw
            || self
                .config
                .extras
                .iter()
                .any(|extra| extra.raw_name() == name);
        if taken {
            return Err(PolicyNameError::taken(name));
        }
        self.config.extras.push(Box::new(Extra {
            policy: Policy::try_new(name)?,
            raw_name: name.to_owned(),
            limiter,
            extractor: key,
            refusals: RefusalLog::default(),
        }));
        Ok(self)
    }

    /// The layer.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer, Reject};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(1)), Global).build();
    /// let Reject = layer.mode(); // the defaults: reject mode, the IETF fields
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// futures_executor::block_on(async {
    ///     let ok = svc.clone().oneshot(http::Request::new(())).await.unwrap();
    ///     assert_eq!(ok.headers()["ratelimit-policy"], "\"default\";q=1;w=60");
    ///     assert_eq!(svc.clone().oneshot(http::Request::new(())).await.unwrap().status(), 429);
    /// });
    /// ```
    pub fn build(self) -> RateLimitLayer<E, M, R> {
        #[allow(unused_mut)] // used with the `metrics` feature
        let mut config = self.config;
        #[cfg(feature = "metrics")]
        {
            let stacked = config.extras.iter().map(|extra| extra.raw_name());
            config.counters.instruments =
                crate::instruments::Instruments::register(&config.policy_raw, stacked);
        }
        RateLimitLayer {
            config: Arc::new(config),
            mode: self.mode,
            respond: Arc::new(self.respond),
        }
    }
}

/// The modes other than reject, chosen from reject mode (the default): a layer has one mode,
/// so choosing a second (`.dry_run().delay(max)`, which would enforce a limit meant as a
/// trial) does not compile.
///
/// ```compile_fail
/// use std::time::Duration;
/// use tollgate::{Limiter, Quota};
/// use tollgate_tower::{PeerIp, RateLimitLayer};
///
/// let limiter = Limiter::keyed(Quota::per_second(1));
/// let layer = RateLimitLayer::builder(limiter, PeerIp::new())
///     .dry_run()
///     .delay(Duration::from_millis(100)) // no `delay` on a dry run
///     .build();
/// ```
impl<E: KeyExtractor, R> Builder<E, Reject, R> {
    /// Dry-run mode: every request is decided and counted as usual, but none is refused.
    /// A request that would have been refused (`429`, or the `400` / `503` / `413` the layer
    /// answers by itself) is passed to the service with a [`DryRunRefusal`](crate::DryRunRefusal) in its
    /// extensions, and counted in [`Counts::dry_run_refused`](crate::Counts::dry_run_refused); it consumes nothing, as a
    /// refusal would not. Its response gets no rate-limit fields and no `Retry-After`
    /// (clients see no sign of the trial); admitted requests get their fields as usual.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::net::SocketAddr;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{DryRun, DryRunRefusal, PeerIp, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let trial: RateLimitLayer<PeerIp, DryRun> =
    ///     RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(1)), PeerIp::new())
    ///         .dry_run()
    ///         .build();
    /// let svc = trial.layer(service_fn(|req: http::Request<()>| async move {
    ///     let marked = req.extensions().get::<DryRunRefusal>().map(|r| r.status().as_u16());
    ///     Ok::<_, Infallible>(http::Response::new(marked))
    /// }));
    /// let from_peer = || {
    ///     let mut req = http::Request::new(());
    ///     req.extensions_mut().insert("192.0.2.7:4000".parse::<SocketAddr>().unwrap());
    ///     req
    /// };
    /// futures_executor::block_on(async {
    ///     let first = svc.clone().oneshot(from_peer()).await.unwrap();
    ///     assert_eq!((first.status().as_u16(), *first.body()), (200, None));
    ///     assert!(first.headers().contains_key("ratelimit"));
    ///     // Over the limit: served, marked, and without fields.
    ///     let over = svc.clone().oneshot(from_peer()).await.unwrap();
    ///     assert_eq!((over.status().as_u16(), *over.body()), (200, Some(429)));
    ///     assert!(over.headers().is_empty());
    ///     // No key: served, marked as the 400 it would have been.
    ///     let keyless = svc.clone().oneshot(http::Request::new(())).await.unwrap();
    ///     assert_eq!(*keyless.body(), Some(400));
    /// });
    /// let counts = trial.counts();
    /// assert_eq!((counts.admitted, counts.dry_run_refused, counts.rejected), (1, 2, 0));
    /// ```
    pub fn dry_run(self) -> Builder<E, DryRun, R> {
        Builder {
            config: self.config,
            mode: DryRun,
            respond: self.respond,
        }
    }

    /// Delay mode: a request over its limit waits up to `max` in its key's FIFO queue
    /// (with [`UntilReady::within`](tollgate::UntilReady::within)), and is refused at once
    /// if its turn would come later. The inner service must be `Clone`: a waiting request
    /// holds a clone, readied and called when the wait ends, so that it holds none of the
    /// inner service's capacity (a `ConcurrencyLimit` permit, a `Buffer` slot) meanwhile;
    /// the capacity the caller's `poll_ready` reserved is given back at once. A request whose
    /// turn has come then waits for that capacity like any other, outside `max`, its cell
    /// spent (dropped meanwhile, it counts as served).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::net::SocketAddr;
    /// use std::time::Duration;
    /// use futures_lite::future::poll_once;
    /// use tollgate::{Limiter, ManualClock, Quota};
    /// use tollgate_tower::{PeerIp, RateLimitLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let clock = ManualClock::new(); // time moves when the example says
    /// // Smooth bursts out at 10/s, queueing up to half a second of them.
    /// let limiter = Limiter::builder(Quota::per_second(10).allow_burst(1))
    ///     .clock(clock.clone())
    ///     .build();
    /// let layer = RateLimitLayer::builder(limiter, PeerIp::new())
    ///     .delay(Duration::from_millis(500))
    ///     .build();
    /// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::new()))
    /// }));
    /// let from_peer = || {
    ///     let mut req = http::Request::new(());
    ///     req.extensions_mut().insert("192.0.2.7:4000".parse::<SocketAddr>().unwrap());
    ///     req
    /// };
    /// futures_executor::block_on(async {
    ///     assert_eq!(svc.clone().oneshot(from_peer()).await.unwrap().status(), 200);
    ///     // A burst of six more: five queue, 0.1 s to 0.5 s each...
    ///     let mut queued = Vec::new();
    ///     for _ in 0..5 {
    ///         let mut waiting = Box::pin(svc.clone().oneshot(from_peer()));
    ///         assert!(poll_once(&mut waiting).await.is_none());
    ///         queued.push(waiting);
    ///     }
    ///     // ...and the sixth, whose turn would come after 0.6 s, is refused at once.
    ///     assert_eq!(svc.clone().oneshot(from_peer()).await.unwrap().status(), 429);
    ///     clock.advance(Duration::from_millis(500));
    ///     for waiting in queued {
    ///         assert_eq!(waiting.await.unwrap().status(), 200);
    ///     }
    /// });
    /// let counts = layer.counts();
    /// assert_eq!((counts.admitted, counts.delayed, counts.rejected), (1, 5, 1));
    /// ```
    pub fn delay(self, max: Duration) -> Builder<E, Delay, R> {
        Builder {
            config: self.config,
            mode: Delay { max },
            respond: self.respond,
        }
    }
}

impl<E: KeyExtractor + fmt::Debug, M: fmt::Debug, R> fmt::Debug for Builder<E, M, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}
