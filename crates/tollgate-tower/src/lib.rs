//! Per-client rate limiting for [tower](https://docs.rs/tower) HTTP services (hyper, axum, tonic),
//! on [`tollgate`]'s lock-free keyed GCRA limiter.
//!
//! [`RateLimitLayer`] wraps a service in a [`RateLimit`]: each request is keyed by a
//! [`KeyExtractor`] (the peer address, the client address behind trusted proxies, a
//! header, one global key, or your closure) and checked in `call` against one shared
//! [`tollgate::Limiter`]. Every clone of the layer and of the service (one per connection
//! under hyper and axum) enforces the same limit. `poll_ready` passes through, the bodies
//! are generic (refusals carry `ResBody::default()`, or what your hook makes), and nothing
//! here needs a runtime.
//!
//! * **Refused**: `429 Too Many Requests` with `Retry-After` in whole seconds rounded *up*
//!   (at least 1), so a client that obeys it is admitted.
//! * **The IETF fields** (draft-ietf-httpapi-ratelimit-headers-10) on every limited
//!   response, admitted or refused (not a `413`: a request costing more than the burst is
//!   about no state of its key), unless switched off ([`Builder::headers`]):
//!   `RateLimit-Policy: "default";q=10;w=1` (the burst, and the seconds it takes to refill;
//!   never looser than enforced: when those are not whole seconds, the closest `q` per `w`
//!   whole seconds with `q` at most the burst and `q / w` at most the rate, so 30/s is
//!   `q=29;w=1`, see [`Builder::headers`]) and `RateLimit: "default";r=3;t=1` (cells left, and seconds until the burst is back in
//!   full).
//! * **No key** (no API key header, a forwarding walk that reached an element naming no
//!   address, no peer address: [`NoKey`]): `400 Bad Request` by default, or let through
//!   ([`MissingKey`]), or limited by another key source instead ([`KeyExtractor::or`]: an
//!   API key, else the peer address, where unknown API keys are refused before the limit:
//!   a header's value is the client's to make up, [`HeaderKey`]); never a 500, and never
//!   keyed as the proxy. A server
//!   that records no peer address logs a `tracing` warning once; both set-up signals are
//!   counted apart ([`Counts::unattributable`], [`Counts::no_peer_address`]).
//! * **Skipped requests**: [`Builder::skip_if`] lets health checks or `OPTIONS` through
//!   before any key is looked for ([`Counts::skipped`]).
//! * **Keys from an earlier layer**: [`ExtensionKey`] keys by what an authentication layer
//!   put in the request's extensions; [`HeaderKey::new`] takes a `&'static str`.
//! * **Request cost**: [`Builder::cost_for`] charges a request several cells (a batch, an
//!   expensive query); one that costs more than the burst is a `413` (it never passes).
//! * **Tiers by key**: [`Builder::quota_for_key`] picks the quota from the key the request is
//!   limited by, so the two never disagree.
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
//!   `X-Real-IP` ([`ForwardedHeader`]) from the right, element by element, judging only
//!   the elements it reaches.
//! * **Other fields and bodies**: the legacy `X-RateLimit-*` fields
//!   ([`Builder::legacy_headers`]); refusals answered by a hook of yours
//!   ([`Builder::on_refusal`]: it gets a [`Refusal`], why and when to retry, and returns
//!   the response), or with RFC 9457 problem+json bodies ([`Builder::problem_json`]). The
//!   hook's body type is checked at compile time: one that is not the wrapped service's
//!   response body type does not compile. A gRPC or gRPC-Web request (`content-type:
//!   application/grpc*`) is refused as gRPC, never through the hook: HTTP 200,
//!   trailers-only, in the request's own content type, `grpc-status: 8` (RESOURCE_EXHAUSTED; 3 for a missing key, 14 for a
//!   full table, 11 for a request that costs more than the burst) and a `grpc-message`.
//!   The client picks this by its `content-type`, on any route: a refusal is still a
//!   refusal (the service never sees the request), but it may reach an access log or a
//!   cache as a `200`; count refusals with [`RateLimitLayer::counts`] or the metrics, not
//!   by status code.
//! * **Observability**: [`RateLimitLayer::counts`] (requests per decision, over every
//!   clone, and the admissions near the limit: [`Builder::near_limit`]) and
//!   [`RateLimitLayer::stats`] (the [`Stats`](tollgate::Stats) of every limiter behind it);
//!   the same through the `metrics` facade (the `metrics` feature), and sampled `tracing`
//!   events: see [Metrics and events](#metrics-and-events).
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
//! use std::net::SocketAddr;
//! use tollgate::Quota;
//! use tollgate_tower::{ClientIp, RateLimitLayer};
//! use tower::ServiceExt;
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
//!
//! // Two clients' requests, as the load balancer at 10.0.0.2 forwards them.
//! for client in ["203.0.113.9", "198.51.100.4"] {
//!     let req = http::Request::get("/").header("x-forwarded-for", client);
//!     let mut req = req.body(()).unwrap();
//!     req.extensions_mut().insert("10.0.0.2:40000".parse::<SocketAddr>().unwrap());
//!     let ok = futures_executor::block_on(svc.clone().oneshot(req)).unwrap();
//!     assert_eq!(ok.body(), "hello");
//!     assert_eq!(ok.headers()["ratelimit-policy"], "\"default\";q=10;w=2");
//! }
//! assert_eq!(svc.limiter().stats().keys_held, 2); // one limit per client, none for the balancer
//! # Ok(())
//! # }
//! ```
//!
//! With hyper, insert the peer address into each request's extensions when you accept the
//! connection (see the `server` example). With axum, turn on the `axum` feature and serve
//! with `into_make_service_with_connect_info::<SocketAddr>()`: [`PeerIp`] and [`ClientIp`]
//! read axum's `ConnectInfo<SocketAddr>` (see the `axum` example: per-IP and per-API-key
//! tiers, stacked). With tonic, turn on the `tonic` feature and add the layer with
//! `Server::builder().layer(..)`: [`PeerIp`] and [`ClientIp`] read tonic's `TcpConnectInfo`,
//! and refusals are gRPC statuses.
//!
//! # Features
//!
//! * `foldhash` (default): tollgate's `foldhash` feature, its faster identity hash.
//! * `axum`: the peer address from axum's `ConnectInfo<SocketAddr>` (axum without its
//!   default features but with `tokio`, the feature under which axum defines
//!   `ConnectInfo`).
//! * `tonic`: the peer address from tonic's `TcpConnectInfo` (tonic with its `server`
//!   feature only, the one under which it defines that type).
//! * `metrics` (default): the counters, histogram and gauges below, through the
//!   [`metrics`](https://docs.rs/metrics) facade (0.24); with no recorder installed a
//!   decision pays a load and a branch.
//!
//! # Metrics and events
//!
//! With the `metrics` feature, a layer registers its handles with the recorder installed
//! **when it is built** ([`Builder::build`], [`RateLimitLayer::new`]), so install the
//! recorder (Prometheus, StatsD, ...) first: a layer built before any recorder records
//! nothing. A request then bumps a handle it already holds; without a recorder that is a
//! load and a branch, and without the feature nothing of it is compiled. Every metric has
//! one label, `policy`: the layer's policy name ([`Builder::policy_name`], `"default"`
//! unless set), except where a stacked limit ([`Builder::stack`]) is the one meant: its
//! refusals and its gauges carry its own name. So the label sets are as many as your
//! policies: never a client key. Two layers with the same policy name add into the same
//! series; name them apart.
//!
//! Counters, one per field of [`Counts`], counting the same requests (the refusals split
//! by the limit that refused, so a layer's series of one name add up to its field):
//!
//! | metric | [`Counts`] field | a request |
//! | --- | --- | --- |
//! | `tollgate_admitted_total` | `admitted` | admitted at once by every limit |
//! | `tollgate_refused_total` | `rejected` | refused with a `429` (or a `413`: costlier than the burst); `policy`: the limit that refused |
//! | `tollgate_delayed_total` | `delayed` | delay mode: passed on after waiting its turn |
//! | `tollgate_abandoned_total` | `abandoned` | delay mode: dropped while it waited its turn (the client gone, a timeout) |
//! | `tollgate_dry_run_refused_total` | `dry_run_refused` | dry-run mode: would have been refused, passed on; `policy`: the limit that would have refused (the layer's for a `400` or `503`) |
//! | `tollgate_allowlisted_total` | `allowlisted` | passed on unlimited, its key allowlisted |
//! | `tollgate_skipped_total` | `skipped` | passed on by [`Builder::skip_if`] |
//! | `tollgate_keyless_refused_total` | `missing_key_rejected` | without a key, refused with a `400` |
//! | `tollgate_keyless_allowed_total` | `missing_key_allowed` | without a key, passed on ([`MissingKey::Allow`]) |
//! | `tollgate_table_full_total` | `unavailable` | refused with a `503`: the table was full |
//! | `tollgate_unattributable_total` | `unattributable` | of the keyless: a forwarding element naming no address |
//! | `tollgate_no_peer_address_total` | `no_peer_address` | of the keyless: no peer address (a set-up mistake) |
//! | `tollgate_near_limit_total` | `near_limit` | of the admitted: left its key near the limit ([`Builder::near_limit`]); `policy`: the limit it was near (a request near two limits counts under each) |
//!
//! A histogram, `tollgate_delay_seconds`: in delay mode, how long each request that waited
//! its turn waited, on the limiter's clock. Two gauges per limiter (the layer's own and each
//! stacked one, labelled with its own policy name): `tollgate_live_keys` (keys whose state
//! has not expired) and `tollgate_bytes` (what the limiter holds). Counting live keys scans
//! the table, so no request sets them: [`RateLimitLayer::stats`] (and
//! [`RateLimit::stats`]) set them from the snapshot it takes; call it before each scrape, or
//! from a timer (the `server` example does it in its scrape handler).
//!
//! ```
//! use std::convert::Infallible;
//! use metrics_exporter_prometheus::PrometheusBuilder;
//! use tollgate::{Limiter, ManualClock, Quota};
//! use tollgate_tower::{Global, RateLimitLayer};
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! # #[cfg(feature = "metrics")] {
//! let recorder = PrometheusBuilder::new().build_recorder();
//! let scrape = recorder.handle();
//! // The handles bind to the recorder current when the layer is built (here a local one).
//! let limiter = Limiter::builder(Quota::per_minute(2)).clock(ManualClock::new()).build();
//! let layer = metrics::with_local_recorder(&recorder, || {
//!     RateLimitLayer::builder(limiter, Global).policy_name("api").unwrap().build()
//! });
//! let svc = layer.layer(service_fn(|_: http::Request<()>| async {
//!     Ok::<_, Infallible>(http::Response::new(String::new()))
//! }));
//! futures_executor::block_on(async {
//!     for _ in 0..3 {
//!         svc.clone().oneshot(http::Request::new(())).await.unwrap();
//!     }
//! });
//! layer.stats(); // sets the gauges
//! let text = scrape.render();
//! assert!(text.contains("tollgate_admitted_total{policy=\"api\"} 2"));
//! assert!(text.contains("tollgate_refused_total{policy=\"api\"} 1"));
//! assert!(text.contains("tollgate_near_limit_total{policy=\"api\"} 1"));
//! assert!(text.contains("tollgate_live_keys{policy=\"api\"} 1"));
//! # }
//! ```
//!
//! `tracing` events and spans (target `tollgate_tower`, the warning's `tollgate_tower::key`;
//! no client key or address in any field):
//!
//! * **warn**, once per process: a request reached [`PeerIp`] or [`ClientIp`] without a
//!   peer address in its extensions (a server set-up mistake; see [`NoKey::NoPeerAddress`]).
//! * **debug**, sampled: a refusal (`429`, `400`, `503`, `413`, or in dry-run mode one
//!   that would have been), with fields `policy` (the refusing limit's name), `status`,
//!   `reason` ([`RefusalReason`]), `retry_after_s` (0 when none), `dry_run`, and
//!   `suppressed`. At most one event per policy per second of the limiter's clock; the
//!   refusals left out in between are counted in the next event's `suppressed`, so a
//!   flood of refusals is a line a second. Nothing of it (not even a clock read) runs
//!   unless a subscriber wants debug events from this target.
//! * **debug span** `rate_limit_wait`, around each delay-mode wait, with fields `policy`,
//!   `cost` and `max_ms` (the bound); a refusal after waiting is logged inside it.
//!
//! # Speed
//!
//! On the repository's 2-core test machine a hello-world hyper server spends about 6–12 µs
//! of CPU per request; the layer adds 70–115 ns to that with the fields off and 180–275 ns
//! with them on, by the host's state (one client; `BENCHMARKS.md` in the repository has
//! every figure and the command). Much of what the fields cost is the `http` crate's header
//! map, which any layer that writes two fields pays (60–116 ns for two fixed values, no
//! limiter).
//!
//! The clock is the next largest item: the core reads `std::time::Instant` (about 30 ns
//! here), which is monotonic everywhere. Where Linux keeps time with an invariant
//! time-stamp counter (most x86-64 servers), [`tollgate::TscClock`] reads that counter in
//! about a third of the time, and falls back to `Instant` by itself anywhere else; a limiter
//! built with it through [`RateLimitLayer::builder`] saves the difference on every request:
//!
//! ```
//! use tollgate::{Limiter, Quota, TscClock};
//! use tollgate_tower::{PeerIp, RateLimitLayer};
//!
//! let limiter = Limiter::builder(Quota::per_second(10)).clock(TscClock::new()).build();
//! let layer = RateLimitLayer::builder(limiter, PeerIp::new()).build();
//! assert_eq!(layer.limiter().quota(), Quota::per_second(10));
//! ```
//!
//! A limiter on a custom clock waits (delay mode) on tollgate's timer for as long as its
//! clock says is left, exact for a clock that runs at real time's rate
//! ([`tollgate::Clock`]).
//!
//! With many clients, a table grown to them reads a key's slot as one sized for them does
//! up to about 13,000 keys, and through a segment lookup past that; a server that knows
//! about how many clients it sees can say so ([`tollgate::LimiterBuilder::presize`]) and
//! skip the growths. In the repository's bench on its Intel host, with the fields off and
//! 10,000 clients, the layer costs what tower_governor does, or 5–7 % more behind a bare
//! handler when the host's clock reads are slow, and as much or less on `TscClock`
//! (`BENCHMARKS.md`: each round's difference, over 45 and 71 rounds):
//!
//! ```
//! use tollgate::{Limiter, Quota, TscClock};
//! use tollgate_tower::{ClientIp, RateLimitLayer};
//!
//! let limiter = Limiter::builder(Quota::per_second(10))
//!     .presize(10_000)
//!     .clock(TscClock::new())
//!     .build();
//! let key = ClientIp::trusting(["10.0.0.0/8"]).expect("a valid CIDR");
//! let layer = RateLimitLayer::builder(limiter, key).build();
//! assert!(layer.limiter().stats().bytes > 0);
//! ```
//!
//! Clients that come back after their key has expired (a per-second quota, requests a few
//! hundred milliseconds apart) are still held by default: the limiter learns, from the keys
//! it forgot that come back, to keep expired keys up to a second (10,000 such clients in the
//! repository's bench: about 170 ns a request, against 285 when each is inserted into the
//! table again, under a lock). For clients that take longer to return, a limiter that keeps
//! expired keys that long ([`tollgate::LimiterBuilder::keep_expired`]) finds them held, at
//! about 20 bytes per kept client:
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Limiter, Quota};
//! use tollgate_tower::{PeerIp, RateLimitLayer};
//!
//! let limiter = Limiter::builder(Quota::per_second(10))
//!     .keep_expired(Duration::from_secs(10))
//!     .build();
//! let layer = RateLimitLayer::builder(limiter, PeerIp::new()).build();
//! # let _ = layer;
//! ```

// One `unsafe` block, in `fields.rs`, allowed there with its argument.
#![deny(unsafe_code)]

// How the files fit: the layer (`layer.rs`, made by `builder.rs`) and every service it makes
// (`service.rs`, one `Service` impl per mode of `mode.rs`) share one `Config` (`config.rs`)
// and one `RefusalResponse` (`respond.rs`); `call` decides with the config (`decide.rs`) and
// then answers a refusal (`refusal.rs`) with the `RefusalResponse`, calls the inner service,
// or waits (`delay.rs`) inside the response future (`future.rs`).

mod builder;
mod config;
mod counts;
mod decide;
mod delay;
mod dry_run;
mod extract;
mod fields;
mod forwarded;
mod future;
#[cfg(feature = "metrics")]
mod instruments;
mod key;
mod layer;
mod mode;
mod near;
mod refusal;
mod respond;
mod sampled;
mod service;
mod stack;

pub use builder::Builder;
pub use config::MissingKey;
pub use counts::Counts;
pub use dry_run::{DryRun, DryRunRefusal};
pub use extract::{KeyExtractor, KeyOr, NoKey, Or};
pub use fields::PolicyNameError;
pub use forwarded::ForwardedHeader;
pub use future::ResponseFuture;
pub use key::{
    Cidr, CidrError, ClientIp, ExtensionKey, Global, HeaderKey, HeaderKeyName, PeerIp, ip_key,
    peer_addr,
};
pub use layer::RateLimitLayer;
pub use mode::{Delay, Reject};
pub use near::NearLimitError;
pub use refusal::{Refusal, RefusalReason};
pub use respond::{EmptyBody, OnRefusal, ProblemJson, RefusalResponse};
pub use service::RateLimit;
/// The core's limiter and quota, so that one dependency on this crate suffices.
pub use tollgate::{Limiter, Quota};
