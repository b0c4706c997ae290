//! The [`RateLimitLayer`]: the shared configuration, handed to every service it makes.

use std::fmt;
use std::sync::Arc;

use tollgate::{Limiter, Stats};
use tower_layer::Layer;

use crate::config::Config;
use crate::counts::Counts;
use crate::extract::KeyExtractor;
use crate::mode::Reject;
use crate::respond::EmptyBody;
use crate::service::RateLimit;

/// A [`Layer`] that rate-limits a service per client: see the [crate docs](crate).
///
/// Cloning is cheap, and every clone, and every service it makes, shares one limiter.
///
/// `M` is the mode ([`Reject`], [`Delay`](crate::Delay), [`DryRun`](crate::DryRun)), `R`
/// what answers a refused request ([`EmptyBody`], or a hook set with
/// [`Builder::on_refusal`](crate::Builder::on_refusal) or [`Builder::problem_json`](crate::Builder::problem_json)).
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use std::net::SocketAddr;
/// use tollgate::Quota;
/// use tollgate_tower::{ClientIp, RateLimitLayer};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// // Behind a load balancer in 10.0.0.0/8: 10 requests per second per client, bursts of 20.
/// let layer = RateLimitLayer::new(
///     Quota::per_second(10).allow_burst(20),
///     ClientIp::trusting(["10.0.0.0/8"]).unwrap(),
/// );
/// let limiter = layer.limiter().clone(); // for stats()
/// let svc = layer.clone().layer(service_fn(|_: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new(String::new()))
/// }));
/// let mut req = http::Request::get("/")
///     .header("x-forwarded-for", "203.0.113.9")
///     .body(())
///     .unwrap();
/// req.extensions_mut().insert("10.0.0.2:40000".parse::<SocketAddr>().unwrap());
/// let ok = futures_executor::block_on(svc.oneshot(req)).unwrap();
/// assert_eq!(ok.headers()["ratelimit-policy"], "\"default\";q=20;w=2");
/// assert_eq!(limiter.stats().admitted, 1); // the clones share one limiter
/// assert_eq!(layer.counts().admitted, 1);
/// ```
pub struct RateLimitLayer<E: KeyExtractor, M = Reject, R = EmptyBody> {
    pub(crate) config: Arc<Config<E>>,
    pub(crate) mode: M,
    /// Beside the config rather than in it: the config's type stays free of `R`.
    pub(crate) respond: Arc<R>,
}

impl<E: KeyExtractor, M, R> RateLimitLayer<E, M, R> {
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
    /// layer's own first, then the stacked ones in order. It scans each limiter's table
    /// (for `live_keys`): not for every request. With the `metrics` feature it also sets
    /// the `tollgate_live_keys` and `tollgate_bytes` gauges from what it read (see
    /// [Metrics and events](crate#metrics-and-events)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, PeerIp, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(5)), PeerIp::new())
    ///     .policy_name("per-ip")
    ///     .unwrap()
    ///     .stack("global", Limiter::keyed(Quota::per_second(500)), Global)
    ///     .unwrap()
    ///     .build();
    /// let names: Vec<String> = layer.stats().into_iter().map(|(name, _)| name).collect();
    /// assert_eq!(names, ["per-ip", "global"]);
    /// ```
    pub fn stats(&self) -> Vec<(String, Stats)> {
        self.config.stats()
    }

    /// The mode: [`Reject`], [`Delay`](crate::Delay) or [`DryRun`](crate::DryRun).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_tower::{Global, RateLimitLayer, Reject};
    ///
    /// let layer = RateLimitLayer::new(Quota::per_second(5), Global);
    /// let Reject = layer.mode(); // the default
    /// let waits = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(5)), Global)
    ///     .delay(Duration::from_millis(500))
    ///     .build();
    /// assert_eq!(waits.mode().max(), Duration::from_millis(500));
    /// ```
    pub fn mode(&self) -> &M {
        &self.mode
    }
}

impl<E: KeyExtractor, M: Clone, R> Clone for RateLimitLayer<E, M, R> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            config: Arc::clone(&self.config),
            mode: self.mode.clone(),
            respond: Arc::clone(&self.respond),
        }
    }
}

impl<E: KeyExtractor + fmt::Debug, M: fmt::Debug, R> fmt::Debug for RateLimitLayer<E, M, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("config", &self.config)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl<S, E: KeyExtractor, M: Clone, R> Layer<S> for RateLimitLayer<E, M, R> {
    type Service = RateLimit<S, E, M, R>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            config: Arc::clone(&self.config),
            mode: self.mode.clone(),
            respond: Arc::clone(&self.respond),
        }
    }
}
