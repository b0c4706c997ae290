//! The HTTP parts of [`tollgate`]'s integrations, on the [`http`] crate's types alone: who
//! the client is, what the rate-limit fields say, and how a refusal answers. tollgate-tower
//! (tower servers) and tollgate-pingora (Pingora proxies) both build on them and re-export
//! them, so a key, a field or a refusal means the same behind either.
//!
//! * **Client keys**: [`PeerIp`], [`ClientIp`] (the client behind trusted proxies, walking
//!   `X-Forwarded-For`, `Forwarded` or `X-Real-IP` from the right: [`ForwardedHeader`]),
//!   IPv6 prefixes ([`ip_key`]), [`HeaderKey`], [`ExtensionKey`], [`Global`], and any
//!   closure, as a [`KeyExtractor`]; [`NoKey`] says why a request has none. A proxy that
//!   holds the peer address itself, outside the request, walks with
//!   [`ClientIp::client_of`].
//! * **Fields**: `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10),
//!   the legacy `X-RateLimit-*` and `Retry-After` ([`Fields`], [`Policy`], [`Format`]).
//! * **Refusals**: [`Refusal`] (why, when to retry, the prepared fields; a response around
//!   your body, RFC 9457 problem+json, or a gRPC status) and [`RefusalReason`].
//!
//! # Examples
//!
//! A proxy keys a request by its client behind a trusted load balancer, then answers a
//! refusal with the fields:
//!
//! ```
//! use std::net::IpAddr;
//! use tollgate::{Limiter, Quota};
//! use tollgate_http::{ClientIp, Fields, Format, Policy, Refusal, RefusalReason};
//!
//! let client_ip = ClientIp::trusting(["10.0.0.0/8"]).unwrap();
//! let limiter = Limiter::keyed(Quota::per_second(1));
//! let policy = Policy::new("default");
//!
//! let (parts, ()) = http::Request::get("/")
//!     .header("x-forwarded-for", "203.0.113.9")
//!     .body(())
//!     .unwrap()
//!     .into_parts();
//! let peer: IpAddr = "10.0.0.2".parse().unwrap(); // the load balancer
//! let client = client_ip.client_of(peer, &parts.headers).unwrap();
//! assert_eq!(client, "203.0.113.9".parse::<IpAddr>().unwrap());
//!
//! assert!(limiter.check(&client).is_ok());
//! let wait = limiter.check(&client).unwrap_err().retry_after().unwrap(); // a second in a second
//! let mut headers = http::HeaderMap::new();
//! Fields::refused(&policy, limiter.quota(), wait).insert_into(&mut headers, Format::IETF);
//! let refusal = Refusal::new(RefusalReason::RateLimited, headers, Some("default"), Some(1));
//! let response = refusal.into_response(());
//! assert_eq!(response.status(), 429);
//! assert_eq!(response.headers()["retry-after"], "1");
//! assert_eq!(response.headers()["ratelimit"], "\"default\";r=0;t=1");
//! ```
//!
//! # Features
//!
//! All off by default; tollgate-tower turns them on with its own.
//!
//! * `tracing`: a request without a peer address logs a warning, once per process.
//! * `axum`: [`peer_addr`] reads axum's `ConnectInfo<SocketAddr>` too.
//! * `tonic`: [`peer_addr`] reads tonic's `TcpConnectInfo` too.

// One `unsafe` block, in `fields.rs`, allowed there with its argument.
#![deny(unsafe_code)]

mod extract;
mod fields;
mod forwarded;
mod key;
mod refusal;

pub use extract::{KeyExtractor, KeyOr, NoKey, Or};
pub use fields::{Fields, Format, Policy, PolicyNameError};
pub use forwarded::ForwardedHeader;
pub use key::{
    Cidr, CidrError, ClientIp, ExtensionKey, Global, HeaderKey, HeaderKeyName, PeerIp, ip_key,
    peer_addr,
};
pub use refusal::{Refusal, RefusalReason, grpc_content_type, is_grpc};
