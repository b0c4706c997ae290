//! A polite HTTP client layer for [tower](https://docs.rs/tower): per-host concurrency,
//! rates learned from the server, and retries that listen, on [`tollgate`].
//!
//! * [`PoliteLayer`] wraps any tower client of `http::Request` to `http::Response`
//!   (hyper-util's legacy client, your own `Service`; `reqwest::Client` serves its own
//!   request type, so wrap it in `Reqwest`, feature `reqwest`). Each request is keyed by its host (or your key); it
//!   takes a per-host [`tollgate::InFlight`] permit, then waits for its turn at the host's
//!   [`AdaptiveRate`], then goes out; the permit travels in the response's body
//!   ([`PoliteBody`]) until the body is read to its end or dropped, so downloads count
//!   against the host's concurrency. The response's signals feed the rate back:
//!   a success raises it, a 429 (or a 503 with `Retry-After`, or a 403 that refuses for
//!   rate) lowers it, and an announced policy (`RateLimit-Policy`, `X-RateLimit-Limit;w=`)
//!   is paced to exactly. A slower rate applies from the answer that brings it, to the
//!   requests already queued for their turn too (if it slows by more than an eighth), and
//!   the next request follows the host's latest send by the new interval.
//! * An announcement is trusted for its window (or [`AdaptiveConfig::announcement_ttl`]),
//!   then the host goes back to learning; a 429 under it lowers the rate below it (the
//!   quota is shared, or smaller than said), and renewals keep it there. A remaining count
//!   `r` with `t` seconds to its reset (`RateLimit: r=..;t=..`, `X-RateLimit-Remaining` and
//!   `-Reset`) paces the host at `r / t` until the reset when that is slower
//!   ([`AdaptiveRate::spread`]), so several processes sharing one quota do not each spend it
//!   at the announced rate.
//! * A policy's quota unit (`qu`) is honoured: requests are paced; `"content-bytes"`
//!   charges each request its bytes (its own `Content-Length` and the host's last
//!   response's) under the byte policy ([`AdaptiveRate::until_bytes_ready`]); a unit the
//!   layer cannot measure (`"concurrent-requests"`, others) is ignored and reported in
//!   [`HostSnapshot::ignored_unit`].
//! * robots.txt `Crawl-delay`, opt-in: [`crawl_delay`] reads it for a user agent (groups,
//!   `*`, malformed values skipped, an overlong one taken as the longest) and
//!   [`PoliteLayer::crawl_delay`] seeds the host's ceiling from it
//!   ([`AdaptiveRate::set_ceiling`]); you fetch the robots.txt.
//! * Holds are honoured whatever the status carrying them: `Retry-After` on a refusal, and
//!   a spent quota (`RateLimit: r=0;t=N`, or `X-RateLimit-Remaining: 0` with
//!   `X-RateLimit-Reset`) on any status, a 200, a 403 (GitHub's spent primary limit), a 429
//!   without `Retry-After`: the host's next admission moves out by it
//!   ([`ServerSignal::hold`]). A 403 without rate-limit fields is an ordinary 403.
//! * `X-RateLimit-Reset` is read as delta seconds, Unix seconds (above 10⁹) or Unix
//!   milliseconds (above 10¹²), with an optional decimal fraction; an HTTP-date
//!   `Retry-After` and a Unix-time reset are measured from the response's `Date` when it
//!   has one (the server's clock), so a server whose clock is off still gets its wait.
//! * Long holds are honoured, not probed: a host that says `Retry-After: 3600` gets no
//!   request for an hour (a cap, [`AdaptiveConfig::max_retry_after`], is off by default),
//!   requests already queued for their turn included, for as many held hosts as
//!   [`AdaptiveConfig::capacity`] keeps.
//!   A request that should not wait that long is bounded by [`PoliteLayer::max_wait`]
//!   (off by default): past it, it fails at once with [`PoliteError::Held`], which says
//!   when the host opens again ([`PoliteError::held_until`]).
//! * [`AdaptiveRate`] is the rate half alone, without HTTP: a rate per key under a ceiling
//!   and, for throttles, above a floor ([`AdaptiveConfig`]), moved by `success`, `throttled` and `announce`,
//!   each key paced through a keyed [`tollgate::Limiter`] with per-call quotas.
//! * GET, HEAD and OPTIONS requests (PUT, DELETE and a POST with an `Idempotency-Key`
//!   header too, after [`RetryPolicy::retry_writes`]) are retried on 429, 5xx and the transport
//!   errors a second attempt may get past (a refused, reset or timed-out connection:
//!   [`is_transient_error`], widened by [`RetryPolicy::retry_errors_if`]) under a
//!   [`RetryPolicy`]. The only 4xx retried are 429 and a 403 that refuses for rate (with
//!   `Retry-After` or a spent quota, as GitHub's limits answer: a throttle, see
//!   [`Verdict::Throttled`]); another 4xx is never retried, nor a DNS failure, a TLS
//!   error, an invalid URI or an error the classifier does not know.
//!   Each host's retries stay within a [`RetryBudget`] (by default 20 % of its first
//!   attempts over 10 s, plus 1 per second), and a run of plain 5xx lowers its rate as a
//!   429 does (unless it announced its policy), so a failing host is not sent more than it
//!   failed under.
//! * The polite service answers `http::Response<PoliteBody<B>>`, `B` the inner client's
//!   body: [`PoliteBody`] carries the host's permit and implements `http_body::Body` as
//!   `B` does (`collect()`, hyper and reqwest helpers read it unchanged; `into_inner`
//!   gives `B` back). Code that named `Response<B>` names `Response<PoliteBody<B>>`. A
//!   response kept with its body unread holds its host's permit until it is dropped.
//! * [`RedirectLayer`], stacked above the polite layer, follows 301, 302, 303, 307 and
//!   308 as requests of their own through it, so each hop is keyed, permitted, paced and
//!   counted under its own host; a hop limit (10 by default, then
//!   [`PoliteError::TooManyRedirects`]), relative `Location`s, 303 (and a POST under 301
//!   or 302) as a GET without a body, and no `Authorization`, `Cookie` or
//!   `Proxy-Authorization` sent to another host; the answer says where it came from
//!   ([`Redirected`]). reqwest follows redirects itself unless told not to:
//!   `Reqwest::default` and `Reqwest::builder` do not.
//! * [`PoliteLayer::hosts`] and [`PoliteLayer::host`] report per host: rate, in flight,
//!   waits, 429s, retries, holds, budget refusals, the last signal; bounded to the hosts
//!   the layer tracks.
//! * The same counters, with the waits and the rates, go to the `metrics` facade (feature
//!   `metrics`, on by default), labelled only by the hosts you name; holds, budget refusals
//!   and rate changes are `tracing` events, and each wait a span: see
//!   [Metrics and events](#metrics-and-events).
//! * [`comparison`]: what this crate does, point by point, next to reqwest-retry,
//!   reqwest-ratelimit, tower's `retry` and Scrapy's AutoThrottle.
//! * [`ServerSignal`] reads a response's fields on its own; malformed fields are ignored,
//!   never a panic.
//!
//! Nothing here needs a runtime: waits are on tollgate's own timer.
//!
//! # Examples
//!
//! ```
//! use std::convert::Infallible;
//! use tollgate_client::{AdaptiveConfig, PoliteLayer};
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! // A stand-in for an HTTP client: answers 200 with a policy of 50 per second.
//! let client = service_fn(|_req: http::Request<String>| async {
//!     let mut res = http::Response::new(String::new());
//!     res.headers_mut().insert("ratelimit-policy", "\"h\";q=50;w=1".parse().unwrap());
//!     Ok::<_, Infallible>(res)
//! });
//! let layer = PoliteLayer::new(AdaptiveConfig::new(5.0)).max_in_flight(4);
//! let polite = layer.layer(client);
//! futures_executor::block_on(async {
//!     let req = http::Request::get("http://example.com/").body(String::new()).unwrap();
//!     let res = polite.clone().oneshot(req).await.unwrap();
//!     assert_eq!(res.status(), 200);
//! });
//! let host = layer.host("example.com:80").unwrap();
//! assert_eq!(host.rate, 50.0); // the announced policy
//! assert_eq!(host.requests, 1);
//! ```
//!
//! The rates alone:
//!
//! ```
//! use std::time::Duration;
//! use tollgate::Quota;
//! use tollgate_client::{AdaptiveConfig, AdaptiveRate};
//!
//! let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0).floor(1.0).ceiling(500.0));
//! futures_executor::block_on(rates.until_ready("a.example")).unwrap(); // its turn, FIFO
//! rates.success("a.example");                                   // 200: climb
//! rates.throttled("a.example", Some(Duration::from_secs(2)));   // 429: slow down, wait 2 s
//! rates.announce("b.example", Quota::per_second(50));           // RateLimit-Policy: pace to it
//! assert_eq!(rates.rate("b.example"), 50.0);
//! ```
//!
//! # Metrics and events
//!
//! With the `metrics` feature (on by default: with no recorder installed a bump costs a
//! load and a branch), a layer registers its handles with the recorder installed **when it
//! is built** ([`PoliteLayer::new`], [`PoliteLayer::with_rates`],
//! [`PoliteLayer::metrics_hosts`]), so install the recorder (Prometheus, StatsD, ...)
//! first: a layer built before any recorder records nothing. A request then bumps handles
//! its host's entry already holds. `default-features = false` (then `foldhash` back)
//! compiles none of it.
//!
//! Every metric has one label, `host`: the host's key (as [`host_key`] or your
//! [`PoliteLayer::key`] makes it) for the hosts named by [`PoliteLayer::metrics_hosts`],
//! `"other"` for all the rest (by default, every host). So the label set is as large as
//! your list, never as large as a crawl; a host you care about gets its own series.
//!
//! Counters, each counting what the [`HostSnapshot`] field beside it counts, bumped under
//! the same lock (after any traffic a named host's series equal its snapshot; `other`'s
//! equal the sum over the other hosts, evicted ones included):
//!
//! | metric | [`HostSnapshot`] field | counts |
//! | --- | --- | --- |
//! | `tollgate_client_requests_total` | `requests` | attempts sent, first tries and retries |
//! | `tollgate_client_successes_total` | `successes` | 1xx-3xx answers |
//! | `tollgate_client_throttled_total` | `throttled` | 429s, and 403s refusing for rate |
//! | `tollgate_client_server_errors_total` | `server_errors` | 5xx answers |
//! | `tollgate_client_errors_total` | `errors` | the inner client's errors (transport) |
//! | `tollgate_client_holds_total` | `holds` | answers that held the host back (`Retry-After`, a spent quota) |
//! | `tollgate_client_retries_total` | `retries` | retries sent |
//! | `tollgate_client_budget_refused_total` | `budget_refused` | retries the [`RetryBudget`] refused |
//! | `tollgate_client_gave_up_total` | `gave_up` | requests given up on (budget refusals included) |
//!
//! Requests without a key (no host in the URI) go through unpaced and uncounted, in the
//! metrics as in the snapshots; an attempt refused by [`PoliteLayer::max_wait`]
//! ([`PoliteError::Held`]) is not sent, and not counted either.
//!
//! A histogram, `tollgate_client_wait_seconds`: how long each attempt waited for its turn
//! (its host's in-flight permit, then its rate and bytes), one sample per attempt sent,
//! zero waits included ([`HostSnapshot::waits`] counts only those of 1 ms or more). A
//! gauge, `tollgate_client_rate`, for named hosts only (the rate of a crowd of hosts is no
//! one's): the rate the host is paced at, in requests per second, set when the host is
//! named and after each of its responses (a rate you change yourself between responses
//! shows at the next one).
//!
//! ```
//! use std::convert::Infallible;
//! use metrics_exporter_prometheus::PrometheusBuilder;
//! use tollgate_client::{AdaptiveConfig, PoliteLayer, RetryPolicy};
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! # #[cfg(feature = "metrics")] {
//! let recorder = PrometheusBuilder::new().build_recorder();
//! let scrape = recorder.handle();
//! // The handles bind to the recorder current when the layer is built (here a local one).
//! let layer = metrics::with_local_recorder(&recorder, || {
//!     PoliteLayer::new(AdaptiveConfig::new(100.0))
//!         .retry(RetryPolicy::never())
//!         .metrics_hosts(["example.com:80"])
//! });
//! // A stand-in client that refuses with 429 and Retry-After: 2.
//! let polite = layer.layer(service_fn(|_req: http::Request<()>| async {
//!     let res = http::Response::builder().status(429).header("retry-after", "2");
//!     Ok::<_, Infallible>(res.body(()).unwrap())
//! }));
//! let req = http::Request::get("http://example.com/").body(()).unwrap();
//! futures_executor::block_on(polite.oneshot(req)).unwrap();
//! let text = scrape.render();
//! assert!(text.contains("tollgate_client_throttled_total{host=\"example.com:80\"} 1"));
//! assert!(text.contains("tollgate_client_holds_total{host=\"example.com:80\"} 1"));
//! assert!(text.contains("tollgate_client_rate{host=\"example.com:80\"} 80"));
//! # }
//! ```
//!
//! `tracing` span and events (target `tollgate_client`; `host` is the host's key, a
//! destination of yours, never a caller's):
//!
//! * **debug span** `polite_wait`, fields `host` and `attempt` (0 for the first try):
//!   around each attempt's wait for its turn (its permit, its rate, its bytes); its length
//!   is the wait.
//! * **info** `host held by the server`, fields `host`, `hold_ms` and `status`: a response
//!   held the host back (a `Retry-After`, or a spent quota's reset), one event per such
//!   response (they come no faster than the host's answers); `hold_ms` is what the server
//!   asked, before any [`AdaptiveConfig::max_retry_after`] cap.
//! * **warn** `retry refused by the host's retry budget`, fields `host` and `suppressed`:
//!   sampled, at most one per host per second of the rates' clock; the refusals left out
//!   in between are counted in the next event's `suppressed`, so a failing host under a
//!   busy crawler logs a line a second, not a line a request.
//! * **debug** `host's rate changed`, fields `host`, `from`, `to` (requests per second)
//!   and `status` (the response that moved it): the rate is read before and after each
//!   response only while a subscriber wants this event.

#![forbid(unsafe_code)]

/// Per-key rates learned from the server: a fast climb to the first throttle, then a
/// bisection between the slowest throttled and the fastest confirmed rate; `Retry-After`
/// pushes and announced policies; driving a keyed [`tollgate::Limiter`].
mod adaptive;
mod body;
mod budget;
pub mod comparison;
mod error;
mod hosts;
mod layer;
mod location;
mod lru;
mod observe;
mod redirect;
#[cfg(feature = "reqwest")]
mod reqwest;
mod retry;
mod robots;
mod signal;

pub use adaptive::{AdaptiveConfig, AdaptiveRate, MAX_RATE, MIN_RATE, RateSnapshot, Signal};
pub use body::PoliteBody;
pub use budget::RetryBudget;
pub use error::PoliteError;
pub use hosts::HostSnapshot;
pub use layer::{Polite, PoliteLayer, ResponseFuture, host_key};
pub use redirect::{RedirectFuture, RedirectLayer, Redirected, Redirects};
#[cfg(feature = "reqwest")]
pub use reqwest::{Reqwest, ReqwestFuture};
pub use retry::{Decision, Failure, GiveUp, RetryPolicy, RetryState, is_transient_error};
pub use robots::crawl_delay;
pub use signal::{
    QuotaUnit, ServerSignal, Verdict, parse_policy, parse_ratelimit, parse_retry_after,
};
