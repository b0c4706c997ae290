//! What every clone of a layer and of its services shares: the limiter, the key source and
//! the options the [`Builder`](crate::Builder) set. The decision made with it is in
//! `decide.rs`.

use std::fmt;
use std::sync::Arc;

use http::request::Parts;
use tollgate::{Limiter, Quota, Stats};

use crate::counts::{Counters, Outcome};
use crate::extract::KeyExtractor;
use crate::fields::{Format, Policy};
use crate::near::NearLimit;
use crate::refusal::Refusal;
use crate::sampled::{self, RefusalLog};
use crate::stack::StackedLimit;

type QuotaFn = dyn Fn(&Parts) -> Quota + Send + Sync;
type KeyQuotaFn<K> = dyn Fn(&K) -> Quota + Send + Sync;
type AllowFn<K> = dyn Fn(&K) -> bool + Send + Sync;
type SkipFn = dyn Fn(&Parts) -> bool + Send + Sync;
type CostFn = dyn Fn(&Parts) -> u32 + Send + Sync;

/// Where a request's quota comes from, when not the limiter's own.
pub(crate) enum QuotaFor<K> {
    /// From the request ([`Builder::quota_for`](crate::Builder::quota_for)).
    Request(Arc<QuotaFn>),
    /// From the key the request was limited by
    /// ([`Builder::quota_for_key`](crate::Builder::quota_for_key)).
    Key(Arc<KeyQuotaFn<K>>),
}

/// What every clone of a layer and its services shares.
pub(crate) struct Config<E: KeyExtractor> {
    pub(crate) limiter: Limiter<E::Key>,
    pub(crate) extractor: E,
    pub(crate) quota_for: Option<QuotaFor<E::Key>>,
    /// Requests this says yes to pass unlimited ([`Builder::skip_if`](crate::Builder::skip_if)).
    pub(crate) skip: Option<Box<SkipFn>>,
    /// The cells a request costs ([`Builder::cost_for`](crate::Builder::cost_for)).
    pub(crate) cost_for: Option<Box<CostFn>>,
    pub(crate) format: Format,
    /// The policy's name as the fields write it, and its `RateLimit-Policy` items.
    pub(crate) policy: Policy,
    /// The policy's name as given.
    pub(crate) policy_raw: String,
    pub(crate) missing_key: MissingKey,
    /// Stacked limits, checked after this one, in order.
    pub(crate) extras: Vec<Box<dyn StackedLimit>>,
    /// Keys that bypass every limit.
    pub(crate) allow: Option<Box<AllowFn<E::Key>>>,
    pub(crate) counters: Counters,
    /// When an admission by the layer's own limit counts as near the limit.
    pub(crate) near: NearLimit,
    /// The sampler of the layer's own policy's refusal events.
    pub(crate) refusals: RefusalLog,
}

impl<E: KeyExtractor> Config<E> {
    pub(crate) fn stats(&self) -> Vec<(String, Stats)> {
        let mut all = vec![(self.policy_raw.clone(), self.limiter.stats())];
        all.extend(
            self.extras
                .iter()
                .map(|e| (e.raw_name().to_owned(), e.stats())),
        );
        #[cfg(feature = "metrics")]
        self.counters.instruments.set_gauges(&all);
        all
    }

    /// The stacked limit that refused (its index in `extras`), or `None` for the layer's
    /// own limit and for refusals that name no policy (a missing key, a full table).
    fn refused_by(&self, refusal: &Refusal) -> Option<usize> {
        let name = refusal.policy().filter(|name| *name != self.policy_raw)?;
        self.extras
            .iter()
            .position(|extra| extra.raw_name() == name)
    }

    /// Counts a refusal (or, in dry-run mode, a would-be refusal) as `outcome`; the
    /// `metrics` feature's counter is the refusing policy's.
    pub(crate) fn count_refusal(&self, outcome: Outcome, refusal: &Refusal) {
        #[cfg(feature = "metrics")]
        self.counters.count_by(outcome, self.refused_by(refusal));
        #[cfg(not(feature = "metrics"))]
        {
            let _ = refusal;
            self.counters.count(outcome);
        }
    }

    /// Counts an admission that left its key near the stacked limit `stacked` (its index):
    /// one count here, and that policy's counter in the metrics.
    pub(crate) fn count_near_by(&self, stacked: usize) {
        #[cfg(feature = "metrics")]
        self.counters.count_by(Outcome::NearLimit, Some(stacked));
        #[cfg(not(feature = "metrics"))]
        {
            let _ = stacked;
            self.counters.count(Outcome::NearLimit);
        }
    }

    /// The debug event for a refusal, sampled per policy (see `sampled.rs`), by the
    /// refusing policy's sampler.
    pub(crate) fn log_refusal(&self, refusal: &Refusal, dry_run: bool) {
        if !sampled::wanted() {
            return;
        }
        let (name, log) = match self.refused_by(refusal) {
            Some(i) => (self.extras[i].raw_name(), self.extras[i].refusals()),
            None => (self.policy_raw.as_str(), &self.refusals),
        };
        let now_ms = self.limiter.now().as_nanos() / 1_000_000;
        sampled::log(log, now_ms, name, refusal, dry_run);
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
            .field("policy", &self.policy)
            .field("missing_key", &self.missing_key)
            .finish_non_exhaustive()
    }
}

/// What to do with a request whose key cannot be found: no API key, a forwarding walk that
/// reached an element naming no address, no peer address (each reason is a [`NoKey`];
/// the last two are counted apart in [`Counts`](crate::Counts)).
///
/// [`NoKey`]: crate::NoKey
///
/// The third choice, limiting such a request by another key (its peer address, say), is
/// made where the key is: [`KeyExtractor::or`](crate::KeyExtractor::or).
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use tollgate::{Limiter, Quota};
/// use tollgate_tower::{HeaderKey, MissingKey, RateLimitLayer};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// // Requests without an API key are not limited by this layer (another one may be).
/// let layer = RateLimitLayer::builder(
///     Limiter::keyed(Quota::per_minute(1)),
///     HeaderKey::new(http::HeaderName::from_static("x-api-key")),
/// )
/// .on_missing_key(MissingKey::Allow)
/// .build();
/// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new(String::new()))
/// }));
/// let keyed = || http::Request::get("/").header("x-api-key", "k-1").body(()).unwrap();
/// futures_executor::block_on(async {
///     assert_eq!(svc.clone().oneshot(keyed()).await.unwrap().status(), 200);
///     assert_eq!(svc.clone().oneshot(keyed()).await.unwrap().status(), 429);
///     for _ in 0..3 {
///         let keyless = svc.clone().oneshot(http::Request::new(())).await.unwrap();
///         assert_eq!(keyless.status(), 200);
///         assert!(keyless.headers().get("ratelimit").is_none()); // not described either
///     }
/// });
/// assert_eq!(layer.counts().missing_key_allowed, 3);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// Answer `400 Bad Request` without calling the service (the default).
    #[default]
    Reject,
    /// Call the service, not limited by the layer's own limit (nor described in the
    /// fields); limits stacked with [`Builder::stack`](crate::Builder::stack) still apply.
    Allow,
}
