//! `ProxyLimit::check`'s answers that the socket tests do not reach: no peer address, IPv6
//! prefixes, a full table, the legacy fields.

use std::net::{IpAddr, Ipv4Addr};

use tollgate::{FullPolicy, Limiter, Quota};
use tollgate_pingora::{ClientIp, Format, ProxyLimit, RefusalReason};

fn peer_only() -> ClientIp {
    ClientIp::trusting::<[&str; 0]>([]).unwrap()
}

#[test]
fn no_peer_address_is_a_400_never_a_shared_key() {
    let limit = ProxyLimit::new(Quota::per_minute(1), peer_only());
    let refusal = limit.check(None, &http::HeaderMap::new()).unwrap_err();
    assert_eq!(refusal.reason(), RefusalReason::MissingKey);
    assert_eq!(refusal.status(), 400);
    assert_eq!(refusal.retry_after(), None);
    assert_eq!(limit.limiter().stats().keys_held, 0);
}

#[test]
fn ipv6_clients_are_keyed_by_their_64() {
    let limit = ProxyLimit::new(Quota::per_minute(1), peer_only());
    let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
    let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
    let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
    let none = http::HeaderMap::new();
    assert!(limit.check(Some(a), &none).is_ok());
    assert_eq!(limit.check(Some(b), &none).unwrap_err().status(), 429);
    assert!(limit.check(Some(other), &none).is_ok());
}

#[test]
fn a_full_table_refusing_new_keys_is_a_503_with_retry_after_1() {
    let limiter = Limiter::builder(Quota::per_minute(1))
        .capacity(1)
        .full_policy(FullPolicy::RefuseNewKeys)
        .build();
    let capacity = limiter.capacity();
    let limit = ProxyLimit::with_limiter(limiter, peer_only());
    let none = http::HeaderMap::new();
    let refused = (0..=capacity as u32 * 4)
        .map(|i| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))
        .find_map(|ip| limit.check(Some(ip), &none).err())
        .expect("a table of bounded capacity fills");
    assert_eq!(refused.reason(), RefusalReason::Unavailable);
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
}

#[test]
fn the_legacy_fields_when_asked_and_retry_after_always() {
    let both = Format {
        ietf: true,
        legacy: true,
    };
    let limit = ProxyLimit::new(Quota::per_minute(2), peer_only()).fields(both);
    let peer = Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
    let none = http::HeaderMap::new();
    limit.check(peer, &none).unwrap();
    limit.check(peer, &none).unwrap();
    let refusal = limit.check(peer, &none).unwrap_err();
    let headers = refusal.headers();
    assert_eq!(headers["x-ratelimit-limit"], "2");
    assert_eq!(headers["x-ratelimit-remaining"], "0");
    assert_eq!(headers["ratelimit-policy"], "\"default\";q=2;w=60");
    assert!(headers.contains_key("retry-after"));
}

/// An upstream that limits too: its fields stay on the response, this policy's items
/// after its own, and its `Retry-After` as it came.
#[test]
fn an_upstreams_fields_are_kept_and_combined_with_the_limits() {
    let limit = ProxyLimit::new(Quota::per_minute(10), peer_only());
    let peer = Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
    let mut checked = limit.check(peer, &http::HeaderMap::new()).unwrap();
    let mut response = pingora_http::ResponseHeader::build(503, None).unwrap();
    response
        .insert_header("RateLimit", r#""upstream";r=0;t=30"#)
        .unwrap();
    response
        .append_header("Retry-After", "Wed, 21 Oct 2065 07:28:00 GMT")
        .unwrap();
    response
        .insert_header("content-type", "text/plain")
        .unwrap();
    limit.response_filter(&mut response, &mut checked).unwrap();
    let all = |name: &str| -> Vec<&str> {
        response
            .headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    };
    assert_eq!(
        all("ratelimit"),
        [r#""upstream";r=0;t=30, "default";r=9;t=6"#]
    );
    assert_eq!(all("ratelimit-policy"), [r#""default";q=10;w=60"#]);
    assert_eq!(all("retry-after"), ["Wed, 21 Oct 2065 07:28:00 GMT"]);
    assert_eq!(all("content-type"), ["text/plain"]);
}
