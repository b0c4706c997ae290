//! Per-client rate limiting for [Pingora](https://github.com/cloudflare/pingora) proxies, on
//! [`tollgate`]'s lock-free keyed GCRA limiter.
//!
//! A [`ProxyLimit`] is what a `ProxyHttp` implementation calls: from `request_filter`,
//! [`ProxyLimit::request_filter`] keys the request by its client (the peer address, or the
//! client behind trusted proxies: [`ClientIp`]), checks it with one clock read
//! (`Limiter::check_at`), and either lets it go upstream (`Ok(false)`) or writes the
//! refusal to the session (`Ok(true)`): `429` with `Retry-After`, the IETF `RateLimit`
//! fields and a problem+json body (a gRPC request: `grpc-status: 8`, trailers-only, as
//! tollgate-tower answers it). From `response_filter`,
//! [`ProxyLimit::response_filter`] adds the fields to an admitted request's response. In
//! delay mode ([`ProxyLimit::delay`]) a request over the limit waits its turn first, up to a
//! bound, and leaves the queue if its client hangs up meanwhile. The request's [`Checked`] (the proxy's `CTX`, or a field of it) carries the fields
//! from one filter to the other.
//!
//! The keys, the fields and the refusals are tollgate-http's, the same that tollgate-tower
//! uses (re-exported here): a client is keyed, and a response described, alike behind either.
//! The `proxy` example is a complete proxy:
//!
//! ```text
//! cargo run --release -p tollgate-pingora --example proxy -- \
//!     --listen 127.0.0.1:8080 --upstream 127.0.0.1:3000 --rate 10 --burst 20 \
//!     --trusted-proxy 10.0.0.0/8
//! ```
//!
//! Pingora is built without TLS here (its default features off); its zlib-ng build needs
//! `cmake`.
//!
//! # Examples
//!
//! The decision a proxy makes, without a session ([`ProxyLimit::check`]):
//!
//! ```
//! use std::net::IpAddr;
//! use tollgate::Quota;
//! use tollgate_pingora::{ClientIp, ProxyLimit};
//!
//! // 2 requests per second per client, bursts of 2, behind a load balancer in 10.0.0.0/8.
//! let limit = ProxyLimit::new(Quota::per_second(2), ClientIp::trusting(["10.0.0.0/8"]).unwrap());
//! let balancer: IpAddr = "10.0.0.2".parse().unwrap();
//! let mut headers = http::HeaderMap::new();
//! headers.insert("x-forwarded-for", "203.0.113.9".parse().unwrap());
//!
//! let mut checked = limit.check(Some(balancer), &headers).unwrap();
//! let mut response = pingora_http::ResponseHeader::build(200, None).unwrap();
//! limit.response_filter(&mut response, &mut checked).unwrap();
//! assert_eq!(response.headers["ratelimit"], "\"default\";r=1;t=1");
//!
//! limit.check(Some(balancer), &headers).unwrap();
//! let refusal = limit.check(Some(balancer), &headers).unwrap_err();
//! assert_eq!(refusal.status(), 429);
//! assert_eq!(refusal.headers()["ratelimit"], "\"default\";r=0;t=1");
//! // A client that names no address behind a trusted proxy is not keyed as the proxy.
//! headers.insert("x-forwarded-for", "unknown".parse().unwrap());
//! assert_eq!(limit.check(Some(balancer), &headers).unwrap_err().status(), 400);
//! ```

mod limit;
mod session;

pub use limit::{Checked, ProxyLimit};
/// The core's limiter and quota, so that one dependency on this crate suffices.
pub use tollgate::{Limiter, Quota};
/// The keys, fields and refusals shared with tollgate-tower.
pub use tollgate_http::{
    Cidr, CidrError, ClientIp, Format, ForwardedHeader, Refusal, RefusalReason,
};
