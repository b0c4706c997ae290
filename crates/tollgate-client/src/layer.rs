//! [`PoliteLayer`] and its service [`Polite`]: per-host permit, then per-host rate, then the
//! request; the response's signals fed back; idempotent requests retried.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use http::request::Parts;
use http::{Request, Response};
use tollgate::{InFlight, Timestamp};
use tower_layer::Layer;
use tower_service::Service;
use tracing::Instrument;

use crate::adaptive::{AdaptiveConfig, AdaptiveRate};
use crate::body::PoliteBody;
use crate::error::PoliteError;
use crate::hosts::{HostSnapshot, Hosts};
use crate::observe::{self, HostHandle, Instruments, Tally};
use crate::retry::{Decision, Failure, RetryPolicy};
use crate::signal::{ServerSignal, Verdict};

type KeyFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// An attempt that waited at least this long counts in [`HostSnapshot::waits`].
const COUNTED_WAIT: Duration = Duration::from_millis(1);

/// Plain 5xx answers (no `Retry-After`) in a row that lower a host's rate as a throttle does.
const SERVER_ERROR_RUN: u32 = 3;

/// The polite client layer: wraps a tower HTTP client so that each host gets at most
/// [`max_in_flight`](PoliteLayer::max_in_flight) requests at once, paced at a rate learned
/// from its answers ([`AdaptiveRate`]), with idempotent requests retried under a
/// [`RetryPolicy`].
///
/// Per attempt, in this order (the order [`InFlight`] documents as deadlock-free and
/// faithful to the paced rate): a permit of the host, then the host's turn at its rate,
/// then the inner service. The permit goes out with the response, in its body
/// ([`PoliteBody`]), and is released when the body is read to its end or dropped: a host's
/// downloads count against its `max_in_flight`, not only its waits for headers (a response
/// kept unread keeps its permit; see [`PoliteBody`]). The response's [`ServerSignal`] then
/// moves the rate:
///
/// * 1xx-3xx: a success (additive increase while probing);
/// * 429, a 403 that refuses for rate (remaining 0 or `Retry-After`, as GitHub's spent
///   limits), or a 503 with `Retry-After` or a spent quota: a throttle (multiplicative
///   decrease; the host's next admission moves out by the [hold](ServerSignal::hold),
///   for as long as the server says unless the [`AdaptiveConfig`] sets a cap);
/// * `RateLimit-Policy` (or `X-RateLimit-Limit: N;w=S`): the host is paced to it exactly,
///   for its window after the last response that carried it (see
///   [`AdaptiveRate::announce`]; a 429 under it lowers the rate below it); a policy in
///   content bytes charges each attempt its bytes, one in another unit is ignored and
///   reported ([`HostSnapshot::ignored_unit`]);
/// * `RateLimit: r=0;t=N` (or `X-RateLimit-Remaining: 0` with `X-RateLimit-Reset`) holds
///   the host back until the reset, whatever the status it comes on (a 200, a 403, a
///   429 without `Retry-After`); `r > 0` paces the host at `r / t` until the reset when
///   that is slower ([`AdaptiveRate::spread`]).
///
/// A slower rate (an announced policy, a 429's decrease, a spread) applies from the answer
/// that brings it: to the attempts already queued for their turn at the old rate (each
/// takes its turn again at the new one, after its old turn comes, unless the interval grew
/// by an eighth or less: a spread's small moves answer by answer would otherwise cost each
/// queued attempt a cell every time), and to the next request, which follows the host's
/// latest send by the new interval, not the old.
///
/// A run of 3 plain 5xx answers in a row (without `Retry-After`) lowers the host's rate as
/// a 429 does, unless the host announced its policy: a server failing under load gets less
/// of it.
///
/// Retries, as the [`RetryPolicy`] decides:
///
/// * which requests: GET, HEAD and OPTIONS; PUT, DELETE and a POST with an
///   `Idempotency-Key` header only after [`RetryPolicy::retry_writes`]; no other;
/// * on what: 429, 5xx, and the errors of the inner service that
///   [`RetryPolicy::retries_error`] accepts (a refused, reset or timed-out connection; not
///   a DNS failure, a TLS error or an invalid URI); a 403 that refuses for rate is a
///   throttle and retried as a 429 is; never another 4xx;
/// * how many: within the host's [`RetryBudget`](crate::RetryBudget) (by default at most
///   20 % of its first attempts over the last 10 s, plus 1 retry per second); a refused
///   retry returns the last answer and counts in [`HostSnapshot::budget_refused`].
///
/// The inner service's error must be a `std::error::Error` so that it can be classified
/// (map tower's `BoxError` to a type of your own). After the last try the last response (or
/// the inner error, as [`PoliteError::Inner`]) is returned as it came; a response not
/// returned (a retried 5xx or 429) is dropped with its body, and its permit with it.
/// Requests are cloned
/// for each attempt, so the request body must be `Clone` (an empty or buffered body:
/// `String`, `Full<Bytes>`, `Empty<Bytes>`).
///
/// A hold is waited out in full, however long the server asked. With
/// [`max_wait`](PoliteLayer::max_wait), a request whose host's turn is further off fails at
/// once, unsent, with [`PoliteError::Held`] and the instant the host opens.
///
/// Requests whose key cannot be found (no host in the URI) go through unpaced.
///
/// Cloning the layer or the service is cheap; every clone shares the hosts' state.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use tollgate_client::{AdaptiveConfig, PoliteLayer, RetryPolicy};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// // A stand-in client that refuses every request with 429 and Retry-After: 0.
/// let client = service_fn(|_req: http::Request<()>| async {
///     let res = http::Response::builder().status(429).header("retry-after", "0");
///     Ok::<_, Infallible>(res.body(()).unwrap())
/// });
/// let layer = PoliteLayer::new(AdaptiveConfig::new(100.0))
///     .retry(RetryPolicy::new().give_up_after_throttles(2));
/// let polite = layer.layer(client);
/// futures_executor::block_on(async {
///     let req = http::Request::get("http://example.com/").body(()).unwrap();
///     let res = polite.oneshot(req).await.unwrap();
///     assert_eq!(res.status(), 429); // retried once, then given up
/// });
/// let host = layer.host("example.com:80").unwrap();
/// assert_eq!((host.requests, host.throttled, host.retries, host.gave_up), (2, 2, 1, 1));
/// assert_eq!(host.rate, 80.0); // lowered once: the second 429 came inside the cooldown
/// ```
#[derive(Clone)]
pub struct PoliteLayer {
    shared: Arc<Shared>,
}

#[derive(Clone)]
struct Shared {
    rates: AdaptiveRate<str>,
    inflight: InFlight<str>,
    retry: RetryPolicy,
    key: Arc<KeyFn>,
    hosts: Arc<Hosts>,
    /// The metrics' handles (with the `metrics` feature), registered when the layer is
    /// built; each host's entry in `hosts` takes its label's.
    instruments: Arc<Instruments>,
    /// The rates' clock reading when the layer was made (`last_decrease` is since then).
    created: Timestamp,
    /// The longest an attempt waits for its host's turn; `None`: as long as the host says.
    max_wait: Option<Duration>,
}

impl fmt::Debug for PoliteLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoliteLayer")
            .field("rates", &self.shared.rates)
            .field("inflight", &self.shared.inflight)
            .field("retry", &self.shared.retry)
            .field("max_wait", &self.shared.max_wait)
            .finish_non_exhaustive()
    }
}

/// The default key: the URI's host and port (the scheme's default port if none is given),
/// lower-cased, as `host:port`. A fully qualified name's trailing dot is dropped: it names
/// the same host, which would otherwise be paced twice as fast under its two spellings.
///
/// # Examples
///
/// ```
/// let key = |uri: &str| {
///     let (parts, _) = http::Request::get(uri).body(()).unwrap().into_parts();
///     tollgate_client::host_key(&parts)
/// };
/// assert_eq!(key("https://Example.COM/a").as_deref(), Some("example.com:443"));
/// assert_eq!(key("https://example.com./a").as_deref(), Some("example.com:443"));
/// ```
pub fn host_key(parts: &Parts) -> Option<String> {
    let uri = &parts.uri;
    let host = uri.host()?;
    let host = host
        .strip_suffix('.')
        .filter(|h| !h.is_empty())
        .unwrap_or(host);
    let port = uri.port_u16().or(match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") | None => Some(80),
        Some(_) => None,
    });
    let host = host.to_ascii_lowercase();
    Some(match port {
        Some(p) => format!("{host}:{p}"),
        None => host,
    })
}

impl PoliteLayer {
    /// A layer whose hosts start at `config`'s initial rate; at most 8 requests in flight per
    /// host, the default [`RetryPolicy`], keyed by [`host_key`], counters for up to 10 000
    /// hosts.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::AdaptiveConfig;
    /// let layer = tollgate_client::PoliteLayer::new(AdaptiveConfig::new(10.0));
    /// assert_eq!(layer.rates().config().initial_rate(), 10.0);
    /// ```
    pub fn new(config: AdaptiveConfig) -> PoliteLayer {
        PoliteLayer::with_rates(AdaptiveRate::new(config))
    }

    /// A layer over an [`AdaptiveRate`] of your own (on a [`tollgate::ManualClock`] in tests,
    /// or shared with other code).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0));
    /// let layer = tollgate_client::PoliteLayer::with_rates(rates.clone());
    /// rates.announce("example.com:80", Quota::per_second(50)); // learned elsewhere
    /// assert_eq!(layer.rates().rate("example.com:80"), 50.0); // the layer paces by it
    /// ```
    pub fn with_rates(rates: AdaptiveRate<str>) -> PoliteLayer {
        let instruments = Arc::new(Instruments::register(std::iter::empty()));
        PoliteLayer {
            shared: Arc::new(Shared {
                inflight: InFlight::new(8),
                retry: RetryPolicy::new(),
                key: Arc::new(host_key),
                hosts: Arc::new(Hosts::new(10_000, Arc::clone(&instruments))),
                instruments,
                created: rates.now(),
                max_wait: None,
                rates,
            }),
        }
    }

    /// At most `n` requests in flight per host.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tollgate_client::{AdaptiveConfig, MAX_RATE, PoliteLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// // A stand-in client that takes 10 ms to answer.
    /// let client = service_fn(|_req: http::Request<()>| async {
    ///     tollgate::timer::sleep(Duration::from_millis(10)).await;
    ///     Ok::<_, Infallible>(http::Response::new(()))
    /// });
    /// // Unpaced (the highest rate), so that only the permits hold requests back.
    /// let layer = PoliteLayer::new(AdaptiveConfig::new(MAX_RATE)).max_in_flight(2);
    /// let polite = layer.layer(client);
    /// let get = || {
    ///     let req = http::Request::get("http://example.com/").body(()).unwrap();
    ///     polite.clone().oneshot(req)
    /// };
    /// // Each drops its response, and with its body the host's permit.
    /// let get = || async { get().await.map(drop) };
    /// futures_executor::block_on(async { tokio::join!(get(), get(), get()) });
    /// let host = layer.host("example.com:80").unwrap();
    /// assert_eq!((host.requests, host.in_flight_max), (3, 2)); // the third waited for a permit
    /// ```
    #[must_use]
    pub fn max_in_flight(mut self, n: usize) -> Self {
        Arc::make_mut(&mut self.shared).inflight = InFlight::new(n);
        self
    }

    /// The retry policy: which requests are retried, on what, how often
    /// ([`RetryPolicy::never`] to switch retries off).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate_client::{AdaptiveConfig, PoliteLayer, RetryPolicy};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// // A stand-in client that answers every request with 503.
    /// let client = service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::builder().status(503).body(()).unwrap())
    /// });
    /// let layer = PoliteLayer::new(AdaptiveConfig::new(10.0)).retry(RetryPolicy::never());
    /// let req = http::Request::get("http://example.com/").body(()).unwrap();
    /// let res = futures_executor::block_on(layer.layer(client).oneshot(req)).unwrap();
    /// assert_eq!(res.status(), 503);
    /// let host = layer.host("example.com:80").unwrap();
    /// assert_eq!((host.requests, host.retries, host.gave_up), (1, 0, 1)); // not retried
    /// ```
    #[must_use]
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        Arc::make_mut(&mut self.shared).retry = policy;
        self
    }

    /// Keys requests by `f` instead of [`host_key`] (per API token, per tenant); `None` lets
    /// a request through unpaced.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate_client::{AdaptiveConfig, PoliteLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = PoliteLayer::new(AdaptiveConfig::new(10.0)).key(|parts| {
    ///     parts.headers.get("x-tenant")?.to_str().ok().map(str::to_owned)
    /// });
    /// // A stand-in client that answers 200.
    /// let client = service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(()))
    /// });
    /// let polite = layer.layer(client);
    /// futures_executor::block_on(async {
    ///     let req = http::Request::get("http://example.com/").header("x-tenant", "acme");
    ///     polite.clone().oneshot(req.body(()).unwrap()).await.unwrap();
    ///     let req = http::Request::get("http://example.com/"); // no tenant: unpaced
    ///     polite.clone().oneshot(req.body(()).unwrap()).await.unwrap();
    /// });
    /// let keys: Vec<_> = layer.hosts().into_iter().map(|h| (h.key, h.requests)).collect();
    /// assert_eq!(keys, [("acme".to_owned(), 1)]);
    /// ```
    #[must_use]
    pub fn key<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        Arc::make_mut(&mut self.shared).key = Arc::new(f);
        self
    }

    /// Refuses at once, with [`PoliteError::Held`], a request whose host's turn is more than
    /// `max` away: a host held by its `Retry-After` or a spent quota's reset (which the layer
    /// honours in full, for as long as the server says, unless the [`AdaptiveConfig`]'s
    /// `max_retry_after` caps it), or paced that slowly. The error says when the host opens
    /// again ([`PoliteError::held_until`]); the request is not sent and holds nothing.
    ///
    /// Off by default: a request waits as long as its host says. The bound is per attempt,
    /// on the wait for the host's turn (a wait for an in-flight permit, or a retry's delay,
    /// is not counted: the [`RetryPolicy`] bounds the latter with its own
    /// `max_retry_after`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::{Duration, Instant};
    /// use tollgate_client::{AdaptiveConfig, PoliteLayer, RetryPolicy};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// // A stand-in client whose host is closed for an hour.
    /// let client = service_fn(|_req: http::Request<()>| async {
    ///     let res = http::Response::builder().status(429).header("retry-after", "3600");
    ///     Ok::<_, Infallible>(res.body(()).unwrap())
    /// });
    /// let layer = PoliteLayer::new(AdaptiveConfig::new(10.0))
    ///     .retry(RetryPolicy::never())
    ///     .max_wait(Duration::from_secs(10));
    /// let polite = layer.layer(client);
    /// let get = || http::Request::get("http://example.com/").body(()).unwrap();
    /// futures_executor::block_on(async {
    ///     let res = polite.clone().oneshot(get()).await.unwrap();
    ///     assert_eq!(res.status(), 429); // the server's answer, as it came
    ///     let err = polite.clone().oneshot(get()).await.unwrap_err(); // at once, unsent
    ///     let opens = err.held_until().unwrap();
    ///     assert!(opens > Instant::now() + Duration::from_secs(3_590)); // the whole hour
    /// });
    /// assert_eq!(layer.host("example.com:80").unwrap().requests, 1);
    /// ```
    #[must_use]
    pub fn max_wait(mut self, max: Duration) -> Self {
        Arc::make_mut(&mut self.shared).max_wait = Some(max);
        self
    }

    /// Keeps counters for at most `n` hosts, the least recently used evicted (the
    /// adaptive rates have their own capacity, in their [`AdaptiveConfig`]).
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate_client::{AdaptiveConfig, PoliteLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let layer = PoliteLayer::new(AdaptiveConfig::new(10.0)).track_hosts(2);
    /// // A stand-in client that answers 200.
    /// let client = service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(()))
    /// });
    /// let polite = layer.layer(client);
    /// for host in ["a.example", "b.example", "c.example"] {
    ///     let req = http::Request::get(format!("http://{host}/")).body(()).unwrap();
    ///     futures_executor::block_on(polite.clone().oneshot(req)).unwrap();
    /// }
    /// let keys: Vec<_> = layer.hosts().into_iter().map(|h| h.key).collect();
    /// assert_eq!(keys, ["b.example:80", "c.example:80"]); // a, least recently used, evicted
    /// ```
    #[must_use]
    pub fn track_hosts(mut self, n: usize) -> Self {
        assert!(n > 0, "the layer must track at least one host");
        let shared = Arc::make_mut(&mut self.shared);
        shared.hosts = Arc::new(Hosts::new(n, Arc::clone(&shared.instruments)));
        self
    }

    /// Gives each host of `hosts` (keys as the layer keys them: [`host_key`]'s `host:port`,
    /// or your [`key`](PoliteLayer::key)'s) a `host` label of its own in the metrics, and a
    /// rate gauge; every other host adds into the series of `host="other"`. The label set
    /// stays as small as the list, however many hosts a crawl meets. By default the list
    /// is empty: every host is `other`.
    ///
    /// The handles are registered now, with the recorder installed now: install the
    /// recorder first (see [Metrics and events](crate#metrics-and-events)). Call it while
    /// building the layer: the hosts' counters start afresh.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use metrics_exporter_prometheus::PrometheusBuilder;
    /// use tollgate_client::{AdaptiveConfig, PoliteLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let recorder = PrometheusBuilder::new().build_recorder();
    /// let scrape = recorder.handle();
    /// let layer = metrics::with_local_recorder(&recorder, || {
    ///     PoliteLayer::new(AdaptiveConfig::new(10.0)).metrics_hosts(["api.example:443"])
    /// });
    /// // A stand-in client that answers 200.
    /// let polite = layer.layer(service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(()))
    /// }));
    /// futures_executor::block_on(async {
    ///     for uri in ["https://api.example/", "https://b.example/", "https://c.example/"] {
    ///         let req = http::Request::get(uri).body(()).unwrap();
    ///         polite.clone().oneshot(req).await.unwrap();
    ///     }
    /// });
    /// let text = scrape.render();
    /// assert!(text.contains("tollgate_client_requests_total{host=\"api.example:443\"} 1"));
    /// assert!(text.contains("tollgate_client_requests_total{host=\"other\"} 2"));
    /// assert!(text.contains("tollgate_client_rate{host=\"api.example:443\"} 10"));
    /// ```
    ///
    /// A named host's rate gauge reads its rate from the start (the initial rate, or what
    /// the rates were told before), then after each of its responses.
    #[cfg(feature = "metrics")]
    #[must_use]
    pub fn metrics_hosts<I>(mut self, hosts: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let shared = Arc::make_mut(&mut self.shared);
        let named = hosts.into_iter().map(Into::into);
        shared.instruments = Arc::new(Instruments::register(named));
        shared
            .instruments
            .seed_rates(|host| shared.rates.rate(host));
        let capacity = shared.hosts.capacity();
        shared.hosts = Arc::new(Hosts::new(capacity, Arc::clone(&shared.instruments)));
        self
    }

    /// The adaptive rates the layer paces with.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::AdaptiveConfig;
    /// let layer = tollgate_client::PoliteLayer::new(AdaptiveConfig::new(10.0));
    /// assert_eq!(layer.rates().rate("example.com:80"), 10.0);
    /// ```
    pub fn rates(&self) -> &AdaptiveRate<str> {
        &self.shared.rates
    }

    /// Seeds `key`'s ceiling from its robots.txt: the `Crawl-delay` that `robots_txt` asks
    /// of `user_agent` ([`crawl_delay`](crate::crawl_delay)), `d` seconds, becomes the
    /// host's ceiling of `1 / d` requests per second
    /// ([`AdaptiveRate::set_ceiling`]); learned and announced rates stay under it. Returns
    /// the delay found; none (or a delay of 0) leaves the host's ceiling as it was. A delay
    /// longer than tollgate can pace (one request per 2^59 ns, about 18 years; an overlong
    /// value is [`Duration::MAX`]) paces the host at that slowest rate. The next request
    /// keeps the delay after the host's latest send through this layer (the robots.txt
    /// fetch itself, if it went through it), as after an answer that slows the host.
    ///
    /// Opt-in, and the robots.txt is yours to fetch: the layer never sends a request its
    /// caller did not make, and you keep your own cache of robots.txt and your own policy
    /// for one that fails to load. `key` is the host's key as the layer keys it
    /// ([`host_key`]: `host:port`). The ceiling lives with the host's learned state, so a
    /// host evicted from the rates' table (see [`AdaptiveConfig::capacity`]) forgets it:
    /// seed it again when you fetch that host's robots.txt again.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_client::{AdaptiveConfig, PoliteLayer};
    ///
    /// let layer = PoliteLayer::new(AdaptiveConfig::new(10.0));
    /// let robots = "User-agent: *\nCrawl-delay: 4\n";
    /// let delay = layer.crawl_delay("example.com:443", robots, "mybot/1.0");
    /// assert_eq!(delay, Some(Duration::from_secs(4)));
    /// assert_eq!(layer.rates().rate("example.com:443"), 0.25); // one request every 4 s
    /// ```
    pub fn crawl_delay(&self, key: &str, robots_txt: &str, user_agent: &str) -> Option<Duration> {
        let delay = crate::robots::crawl_delay(robots_txt, user_agent)?;
        if !delay.is_zero() {
            self.shared
                .rates
                .set_ceiling(key, Some(1.0 / delay.as_secs_f64()));
            // As after an answer that slows the host: the next request keeps the delay after
            // the latest send (the robots.txt fetch, if it went through this layer).
            self.shared.slow_from_last_send(key);
        }
        Some(delay)
    }

    /// What the layer knows of `key`'s host, if it tracks it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::AdaptiveConfig;
    /// let layer = tollgate_client::PoliteLayer::new(AdaptiveConfig::new(10.0));
    /// assert!(layer.host("example.com:80").is_none());
    /// ```
    pub fn host(&self, key: &str) -> Option<HostSnapshot> {
        let counters = self.shared.hosts.get(key)?;
        Some(self.shared.snapshot(key, counters))
    }

    /// Every tracked host, sorted by key.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::AdaptiveConfig;
    /// let layer = tollgate_client::PoliteLayer::new(AdaptiveConfig::new(10.0));
    /// assert!(layer.hosts().is_empty());
    /// ```
    pub fn hosts(&self) -> Vec<HostSnapshot> {
        let all = self.shared.hosts.all();
        all.into_iter()
            .map(|(key, c)| self.shared.snapshot(&key, c))
            .collect()
    }
}

impl Shared {
    fn snapshot(&self, key: &str, c: crate::hosts::Counters) -> HostSnapshot {
        let rate = self.rates.snapshot(key);
        HostSnapshot {
            key: key.to_owned(),
            rate: self.rates.rate(key),
            announced: rate.is_some_and(|r| r.announced.is_some()),
            in_flight: self.inflight.in_flight(key),
            in_flight_max: c.in_flight_max,
            requests: c.requests,
            successes: c.successes,
            throttled: c.throttled,
            server_errors: c.server_errors,
            errors: c.errors,
            retries: c.retries,
            gave_up: c.gave_up,
            budget_refused: c.budget_refused,
            holds: c.holds,
            ignored_unit: c.ignored_unit,
            waits: c.waits,
            waited: c.waited,
            last_signal: c.last_signal,
            last_decrease: rate
                .and_then(|r| r.last_decrease)
                .map(|t| t.saturating_duration_since(self.created)),
        }
    }

    /// Feeds a response's signals to the host's rate and counters; a throttle of an attempt
    /// the client sent `bunched` with others is an overrun of the server's burst (its
    /// `Retry-After` applies, the rate stays).
    fn apply(&self, key: &str, sig: &ServerSignal, bunched: bool) {
        if let Some(policy) = sig.policy {
            self.rates.announce(key, policy);
        }
        if let Some(policy) = sig.byte_policy {
            self.rates.byte_policy(key, policy);
        }
        // What is left until the reset is spread over it (a count of 0 is the hold below).
        if let (Some(remaining), Some(reset)) = (sig.remaining, sig.reset) {
            self.rates.spread(key, remaining, reset);
        }
        // The server's hold (Retry-After, or a spent quota's reset) applies on every status.
        let hold = sig.hold();
        match sig.verdict {
            Verdict::Throttled | Verdict::Unavailable
                if bunched && (sig.verdict == Verdict::Throttled || hold.is_some()) =>
            {
                self.rates.overrun(key, hold);
            }
            Verdict::Throttled => {
                self.rates.throttled(key, hold);
            }
            Verdict::Unavailable if hold.is_some() => {
                self.rates.throttled(key, hold);
            }
            Verdict::Success => {
                self.rates.success(key);
                if let Some(hold) = hold {
                    self.rates.hold(key, hold);
                }
            }
            Verdict::Unavailable | Verdict::ServerError | Verdict::Final => {
                if let Some(hold) = hold {
                    self.rates.hold(key, hold);
                }
            }
        }
        self.hosts.with(key, |c| {
            match sig.verdict {
                Verdict::Success => {
                    c.successes += 1;
                    c.handle.count(Tally::Successes);
                }
                Verdict::Throttled => {
                    c.throttled += 1;
                    c.handle.count(Tally::Throttled);
                }
                Verdict::Unavailable | Verdict::ServerError => {
                    c.server_errors += 1;
                    c.handle.count(Tally::ServerErrors);
                }
                Verdict::Final => {}
            }
            c.last_signal = Some(*sig);
            if hold.is_some() {
                c.holds += 1;
                c.handle.count(Tally::Holds);
            }
            if sig.ignored_unit.is_some() {
                c.ignored_unit = sig.ignored_unit;
            }
            if let Some(n) = sig.content_length {
                c.last_bytes = n;
            }
        });
        if let Some(hold) = hold {
            observe::held(key, hold, sig.status.as_u16());
        }
    }
}

impl Shared {
    /// After a response: sets a named host's rate gauge (`gauge`, its handle), and logs
    /// the rate's change from `before` (read only when the event is wanted).
    fn observe_rate(
        &self,
        key: &str,
        sig: &ServerSignal,
        before: Option<f64>,
        gauge: Option<HostHandle>,
    ) {
        if before.is_none() && gauge.is_none() {
            return;
        }
        let rate = self.rates.rate(key);
        if let Some(gauge) = gauge {
            gauge.set_rate(rate);
        }
        if let Some(before) = before.filter(|&b| b != rate) {
            observe::rate_changed(key, before, rate, sig.status.as_u16());
        }
    }

    /// The bytes an attempt is charged under its host's content-bytes policy, ahead of
    /// sending: the request's own `Content-Length` plus the host's last response's (the
    /// best guess of this one's, which is not known until it is in). Charged ahead so
    /// that concurrent attempts queue for their bytes in order, as they queue for their
    /// turns; a host whose responses vary in size is paced by the last one.
    fn byte_cost(&self, key: &str, parts: &Parts) -> u64 {
        let sent = crate::signal::content_length(&parts.headers).unwrap_or(0);
        let last = self.hosts.with(key, |c| c.last_bytes);
        sent.saturating_add(last)
    }

    /// After an answer that may have slowed the host (an announced policy, a 429, a
    /// spread): its next admission moves out to its interval as it is now after its latest
    /// send. The limiter's state was sized at the latest send's own interval, so without
    /// this the first request after the change would follow it by the old interval.
    /// Nothing is known of a host the counters no longer track (evicted): it keeps the gap
    /// of its latest admission.
    fn slow_from_last_send(&self, key: &str) {
        let Some((at, was)) = self.hosts.with(key, |c| c.last_send) else {
            return;
        };
        let interval = self.rates.quota(key).interval();
        if interval <= was {
            return;
        }
        let wait = (at + interval).saturating_duration_since(self.rates.now());
        if !wait.is_zero() {
            // A full limiter table cannot hold the push: the host is then paced at its new
            // rate from its next admission on, the documented policy of a full table.
            let _ = self.rates.limiter().penalize(key, wait);
        }
    }

    /// Counts a plain 5xx (one without `Retry-After`, which [`apply`](Shared::apply) reads
    /// as a throttle already) in the host's run; the run's [`SERVER_ERROR_RUN`]th lowers
    /// the rate as a throttle does, and starts a new run. Any other answer ends the run.
    ///
    /// Not under an announced policy: there the server has said its rate, and only its
    /// refusals (a 429) say the rate is too high. A host failing a tenth of its requests at
    /// random sees a run of 3 about once in a thousand answers, and each would knock it
    /// under its own quota for the bisection's climb back; the retry budget bounds what
    /// its failures cost it instead.
    fn server_error_run(&self, key: &str, sig: &ServerSignal) {
        let plain = matches!(sig.verdict, Verdict::ServerError | Verdict::Unavailable)
            && sig.retry_after.is_none();
        let slow_down = self.hosts.with(key, |c| {
            c.server_errors_in_a_row = if plain {
                c.server_errors_in_a_row + 1
            } else {
                0
            };
            let full = c.server_errors_in_a_row >= SERVER_ERROR_RUN;
            if full {
                c.server_errors_in_a_row = 0;
            }
            full
        });
        let announced = || {
            self.rates
                .snapshot(key)
                .is_some_and(|r| r.announced.is_some())
        };
        if slow_down && !announced() {
            self.rates.throttled(key, None);
        }
    }
}

impl<S> Layer<S> for PoliteLayer {
    type Service = Polite<S>;

    fn layer(&self, inner: S) -> Polite<S> {
        Polite {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service of a [`PoliteLayer`].
///
/// `poll_ready` is always ready: each attempt takes its own clone of the inner service and
/// waits for that clone's readiness after its permit and its turn.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use tollgate_client::{AdaptiveConfig, Polite, PoliteLayer};
/// use tower::{Layer, service_fn};
///
/// let client = service_fn(|_req: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new(()))
/// });
/// let polite: Polite<_> = PoliteLayer::new(AdaptiveConfig::new(10.0)).layer(client);
/// assert!(format!("{polite:?}").starts_with("Polite"));
/// ```
#[derive(Clone)]
pub struct Polite<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> fmt::Debug for Polite<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Polite").finish_non_exhaustive()
    }
}

/// The future of [`Polite`]'s `call`.
///
/// # Cancel safety
///
/// Dropping it drops the attempt under way: a queued permit or rate wait gives its place
/// up and holds nothing (see [`InFlight::acquire`] and [`tollgate::UntilReady`]); a request
/// already sent is dropped as the inner client drops it, and its permit is released. A
/// response that has come in holds its permit in its body ([`PoliteBody`]).
#[must_use = "futures do nothing unless polled"]
pub struct ResponseFuture<T, E> {
    inner: Pin<Box<dyn Future<Output = Result<T, E>> + Send>>,
}

impl<T, E> fmt::Debug for ResponseFuture<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<T, E> Future for ResponseFuture<T, E> {
    type Output = Result<T, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

/// Waits for `turn`, for at most `max` if given: `Held` if the turn is further off than that.
/// Any other error is only a full limiter table: the attempt goes on at the rate alone.
async fn take_turn<E>(
    turn: tollgate::UntilReady<'_>,
    max: Option<Duration>,
) -> Result<(), PoliteError<E>> {
    let Some(max) = max else {
        let _ = turn.await;
        return Ok(());
    };
    match turn.within(max).await.map_err(|e| e.retry_after()) {
        Err(Some(wait)) => Err(PoliteError::held(wait)),
        _ => Ok(()),
    }
}

async fn send<S, ReqB, ResB>(
    mut svc: S,
    parts: Parts,
    body: ReqB,
) -> Result<Response<ResB>, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    poll_fn(|cx| svc.poll_ready(cx)).await?;
    svc.call(Request::from_parts(parts, body)).await
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Polite<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: std::error::Error + Send + 'static,
    ReqB: Clone + Send + 'static,
    ResB: Send + 'static,
{
    type Response = Response<PoliteBody<ResB>>;
    type Error = PoliteError<S::Error>;
    type Future = ResponseFuture<Response<PoliteBody<ResB>>, PoliteError<S::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        let inner = self.inner.clone();
        let (parts, body) = req.into_parts();
        ResponseFuture {
            inner: Box::pin(async move {
                let Some(key) = (shared.key)(&parts) else {
                    return match send(inner, parts, body).await {
                        Ok(res) => Ok(res.map(|b| PoliteBody::new(b, None))),
                        Err(e) => Err(PoliteError::Inner(e)),
                    };
                };
                let idempotent = shared.retry.retries_method(&parts.method, &parts.headers);
                let mut state = shared.retry.start();
                let budget = shared.retry.retry_budget();
                loop {
                    let asked = Instant::now();
                    // The wait for the attempt's turn, in its span: its permit, its turn at
                    // the rate, its bytes' turn.
                    let wait = async {
                        let permit = shared.inflight.acquire(&key).await;
                        // `max_wait` bounds the waits for the rate, not for the permit.
                        let turns = Instant::now();
                        // What is left of `max_wait` (if any) for the next wait.
                        let left = || {
                            shared
                                .max_wait
                                .map(|max| max.saturating_sub(turns.elapsed()))
                        };
                        // The interval the attempt's turn was taken at.
                        let paced = loop {
                            // A wait keeps the quota it starts with, so it is read here and
                            // compared after the turn.
                            let quota = shared.rates.quota(&key);
                            let turn = shared.rates.limiter().until_ready_with(&key, quota);
                            take_turn(turn, left()).await?;
                            // A turn reserved before a hold came (an answer to an attempt
                            // ahead of this one) is not moved by it: the hold is renewed in
                            // the rates (it may also have left a full limiter table) and the
                            // attempt takes a turn after it. A table that cannot hold it:
                            // the attempt sleeps it out instead, on the real clock.
                            if let Some(held) = shared.rates.held_after_now(&key) {
                                if left().is_some_and(|left| held > left) {
                                    return Err(PoliteError::held(held));
                                }
                                if shared.rates.limiter().penalize(&key, held).is_ok() {
                                    continue;
                                }
                                RetryPolicy::sleep(held).await;
                                break quota.interval();
                            }
                            // Nor is a turn queued at a faster rate than the host's now (an
                            // answer ahead of it announced a slower policy, or was a 429):
                            // its cell, sized at the old rate, is spent, and the attempt
                            // takes a turn at the new one, behind the waits queued at it
                            // already (they are fewer than `max_in_flight`: each holds a
                            // permit). Attempts queued at the old rate rejoin in the order
                            // their old turns came, so they keep their order among
                            // themselves. Each extra turn needs the rate to have slowed
                            // again during the last one, a wait of at least its interval.
                            // A slowdown of an eighth or less is let pass: a spread follows
                            // the server's counts answer by answer, and each small move
                            // would cost every queued attempt a cell.
                            let interval = shared.rates.quota(&key).interval();
                            if interval > quota.interval() + quota.interval() / 8 {
                                continue;
                            }
                            break quota.interval();
                        };
                        // A content-bytes policy: the attempt's bytes too (see `byte_cost`).
                        let cost = shared.byte_cost(&key, &parts);
                        if let Some(turn) = shared.rates.until_bytes_ready(&key, cost) {
                            take_turn(turn, left()).await?;
                        }
                        Ok((permit, paced))
                    };
                    let span = observe::wait_span(&key, state.retries());
                    let (permit, paced) = match wait.instrument(span).await {
                        Ok(waited) => waited,
                        Err(e) => return Err(e),
                    };
                    let waited = asked.elapsed();
                    let in_flight = shared.inflight.in_flight(&key);
                    let sent_at = shared.rates.now();
                    shared.hosts.with(&key, |c| {
                        c.requests += 1;
                        c.handle.count(Tally::Requests);
                        c.handle.waited(waited);
                        if waited >= COUNTED_WAIT {
                            c.waits += 1;
                            c.waited += waited;
                        }
                        c.in_flight_max = c.in_flight_max.max(in_flight);
                        c.sent(sent_at, paced);
                        if let (Some(b), 0) = (budget, state.retries()) {
                            c.budget.first(&b, sent_at);
                        }
                    });
                    // The permit goes with the response's body (released at its end, or when
                    // it is dropped: below for a retried answer); an error releases it here.
                    let res = match send(inner.clone(), parts.clone(), body.clone()).await {
                        Ok(res) => Ok(res.map(|b| PoliteBody::new(b, Some(permit)))),
                        Err(e) => {
                            drop(permit);
                            Err(PoliteError::Inner(e))
                        }
                    };
                    let failure = match &res {
                        Ok(response) => {
                            let sig = ServerSignal::read(
                                response.status(),
                                response.headers(),
                                SystemTime::now(),
                            );
                            // The client's own sends up to this one broke its pacing (it
                            // was not scheduled for a while): a 429 then says the server's
                            // burst ran out, not that the rate is too high.
                            // A named host's handle comes out for its rate gauge (an `Arc`),
                            // rather than a second trip through the table's lock.
                            let (bunched, gauge) = shared.hosts.with(&key, |c| {
                                let gauge = c.handle.wants_rate().then(|| c.handle.clone());
                                (c.bunched(sent_at, paced), gauge)
                            });
                            let events = observe::rate_events_wanted();
                            let before = events.then(|| shared.rates.rate(&key));
                            shared.apply(&key, &sig, bunched);
                            shared.server_error_run(&key, &sig);
                            shared.slow_from_last_send(&key);
                            shared.observe_rate(&key, &sig, before, gauge);
                            match sig.verdict {
                                Verdict::Success | Verdict::Final => return res,
                                Verdict::Throttled => Failure::Throttled {
                                    retry_after: sig.hold(),
                                },
                                Verdict::Unavailable | Verdict::ServerError => Failure::Transient {
                                    retry_after: sig.hold().max(sig.retry_after),
                                },
                            }
                        }
                        Err(e) => {
                            shared.hosts.with(&key, |c| {
                                c.errors += 1;
                                c.handle.count(Tally::Errors);
                            });
                            // The policy (and a user's hook) judges the client's own error,
                            // not the wrapper this layer returns it in.
                            let retry = match e {
                                PoliteError::Inner(inner) => shared.retry.retries_error(inner),
                                _ => false,
                            };
                            if !retry {
                                return res;
                            }
                            Failure::Transient { retry_after: None }
                        }
                    };
                    if !idempotent {
                        return res;
                    }
                    match shared.retry.decide(&mut state, failure) {
                        Decision::Retry(delay) => {
                            let now = shared.rates.now();
                            let (allowed, logged) = shared.hosts.with(&key, |c| {
                                let allowed = budget.is_none_or(|b| c.budget.retry(&b, now));
                                if allowed {
                                    c.retries += 1;
                                    c.handle.count(Tally::Retries);
                                    return (true, None);
                                }
                                c.budget_refused += 1;
                                c.gave_up += 1;
                                c.handle.count(Tally::BudgetRefused);
                                c.handle.count(Tally::GaveUp);
                                let wanted = observe::budget_events_wanted();
                                (false, wanted.then(|| c.budget_log.sample(now)).flatten())
                            });
                            if let Some(suppressed) = logged {
                                observe::budget_refused(&key, suppressed);
                            }
                            if !allowed {
                                return res;
                            }
                            drop(res);
                            RetryPolicy::sleep(delay).await;
                        }
                        Decision::GiveUp(_) => {
                            shared.hosts.with(&key, |c| {
                                c.gave_up += 1;
                                c.handle.count(Tally::GaveUp);
                            });
                            return res;
                        }
                    }
                }
            }),
        }
    }
}
