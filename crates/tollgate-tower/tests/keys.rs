//! How the layer behind a real hyper server keys its clients: the peer address, the client
//! behind trusted proxies (`X-Forwarded-For`, `Forwarded`, `X-Real-IP`, spoofed and
//! malformed fields), IPv6 prefixes, requests without a key, and the allowlist.
//!
//! Limiters run on a `ManualClock` wherever an assertion depends on time, so nothing here
//! asserts a wall-clock duration.

mod common;

use std::net::SocketAddr;

use http::{HeaderMap, StatusCode};
use tollgate::{Limiter, ManualClock, Quota};
use tollgate_tower::{
    ClientIp, ForwardedHeader, Global, HeaderKey, KeyExtractor, MissingKey, PeerIp, RateLimitLayer,
};

use crate::common::*;

fn behind_proxy(quota: Quota) -> (ManualClock, RateLimitLayer<ClientIp>) {
    behind_proxy_reading(quota, ForwardedHeader::XForwardedFor)
}

fn behind_proxy_reading(
    quota: Quota,
    header: ForwardedHeader,
) -> (ManualClock, RateLimitLayer<ClientIp>) {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(quota).clock(clock.clone()).build();
    let key = ClientIp::trusting(["127.0.0.0/8", "10.0.0.0/8", "2001:db8:ffff::/48"])
        .unwrap()
        .header(header);
    (clock, RateLimitLayer::builder(limiter, key).build())
}

#[tokio::test]
async fn spoofed_leftmost_forwarded_for_does_not_change_the_key() {
    let (_clock, layer) = behind_proxy(Quota::per_minute(2));
    let addr = serve(layer).await;
    // The proxy (127.0.0.1, trusted) appends the client's address to what the client sent.
    let spoofs = [
        "1.1.1.1",
        "2.2.2.2",
        "10.9.9.9",
        "garbage",
        "3.3.3.3, 4.4.4.4",
    ];
    let mut statuses = Vec::new();
    for spoof in spoofs {
        let xff = format!("{spoof}, 203.0.113.5");
        let (status, _) = get_once(addr, &[("x-forwarded-for", xff.as_bytes())]).await;
        statuses.push(status);
    }
    assert_eq!(
        statuses,
        [200, 200, 429, 429, 429].map(|s| StatusCode::from_u16(s).unwrap())
    );
    // Through two trusted proxies, the same client is the same key.
    let xff = b"9.9.9.9, 203.0.113.5, 10.0.0.7";
    let (status, _) = get_once(addr, &[("x-forwarded-for", xff)]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn clients_behind_a_trusted_proxy_are_limited_apart() {
    let (_clock, layer) = behind_proxy(Quota::per_minute(2));
    let addr = serve(layer).await;
    let mut conn = connect(addr).await; // one proxy connection carries both clients
    let a: &[(&str, &[u8])] = &[("x-forwarded-for", b"198.51.100.1")];
    let b: &[(&str, &[u8])] = &[("x-forwarded-for", b"198.51.100.2")];
    for _ in 0..2 {
        assert_eq!(get(&mut conn, a).await.0, StatusCode::OK);
    }
    assert_eq!(get(&mut conn, a).await.0, StatusCode::TOO_MANY_REQUESTS);
    for _ in 0..2 {
        let (status, h) = get(&mut conn, b).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(policy(&h).1, 2);
    }
    assert_eq!(get(&mut conn, b).await.0, StatusCode::TOO_MANY_REQUESTS);
    // The proxy itself, without a header, is a third client.
    assert_eq!(get(&mut conn, &[]).await.0, StatusCode::OK);
}

/// The attack of a client behind a trusted proxy that appends the peer (nginx's
/// `$proxy_add_x_forwarded_for`): it sends garbage (one non-ASCII byte) in its own
/// `X-Forwarded-For`, hoping the whole field is rejected and the key falls back to the
/// proxy's address. It is keyed as itself; the next garbage sender as itself; the proxy's
/// own bucket (its health checks) is untouched. Rate 1/s, burst 2, as the demo server runs
/// with `--rate 1 --burst 2 --trusted-proxy 127.0.0.1/32`.
#[tokio::test]
async fn garbage_left_of_the_proxys_entry_cannot_spend_the_proxys_key() {
    let quota = Quota::per_second(1).allow_burst(2);
    for header in [ForwardedHeader::XForwardedFor, ForwardedHeader::Forwarded] {
        let (_clock, limiter) = manual(quota);
        let key = ClientIp::trusting(["127.0.0.1/32"]).unwrap().header(header);
        let layer = RateLimitLayer::builder(limiter.clone(), key).build();
        let addr = serve(layer.clone()).await;
        let (name, attack): (&str, fn(&str) -> Vec<u8>) = match header {
            ForwardedHeader::XForwardedFor => ("x-forwarded-for", |client| {
                [&b"\x80\xff, "[..], client.as_bytes()].concat()
            }),
            _ => ("forwarded", |client| {
                [&b"for=\"\x80, for=_x;;=, for="[..], client.as_bytes()].concat()
            }),
        };
        let first = attack("203.0.113.50");
        let statuses = statuses_for(addr, name, &[&first, &first, &first]).await;
        assert_eq!(statuses, [200, 200, 429], "{name}");
        let second = attack("203.0.113.51");
        assert_eq!(statuses_for(addr, name, &[&second]).await, [200], "{name}");
        // The proxy itself, without the header: its own burst of 2, then refused.
        for status in [200, 200, 429] {
            assert_eq!(get_once(addr, &[]).await.0.as_u16(), status, "{name}");
        }
        let client: std::net::IpAddr = "203.0.113.50".parse().unwrap();
        assert!(
            limiter.peek(&client).is_err(),
            "{name}: the client's own bucket is spent"
        );
        let counts = layer.counts();
        assert_eq!((counts.admitted, counts.rejected), (5, 2), "{name}");
        assert_eq!(counts.unattributable + counts.missing_key_rejected, 0);
    }
}

/// The same attack through a dual-stack listener, where the proxy arrives as
/// `::ffff:127.0.0.1`: the trust in `127.0.0.1/32` holds for the mapped peer, and the
/// client's garbage still never reaches the key.
#[tokio::test]
async fn garbage_left_of_the_proxys_entry_on_a_dual_stack_socket() {
    let Some(dual) = dual_stack_listener().await else {
        return;
    };
    let (_clock, limiter) = manual(Quota::per_second(1).allow_burst(2));
    let key = ClientIp::trusting(["127.0.0.1/32"]).unwrap();
    let layer = RateLimitLayer::builder(limiter.clone(), key).build();
    let dual = serve_on(dual, layer.clone(), peer_echo());
    let via_v4 = SocketAddr::from(([127, 0, 0, 1], dual.port()));
    let attack = [("x-forwarded-for", &b"\x80\xff, 203.0.113.50"[..])];
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let (status, h) = get_once(via_v4, &attack).await;
        if status == StatusCode::OK {
            assert_eq!(seen_peer(&h).ip().to_string(), "::ffff:127.0.0.1");
        }
        statuses.push(status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 429]);
    // Garbage that the walk does reach: unattributable, a 400, the proxy's key untouched.
    let reached = [("x-forwarded-for", &b"\x80\xff"[..])];
    assert_eq!(get_once(via_v4, &reached).await.0, StatusCode::BAD_REQUEST);
    for _ in 0..2 {
        assert_eq!(get_once(via_v4, &[]).await.0, StatusCode::OK);
    }
    let counts = layer.counts();
    assert_eq!((counts.unattributable, counts.missing_key_rejected), (1, 1));
}

/// A walk from a trusted proxy that reaches an element naming no address cannot attribute
/// the request: never the proxy's key, never one the client wrote; it gets the missing-key
/// policy (a 400 by default, no limit under `Allow`), is counted as unattributable, and a
/// fallback key source (the peer address) is not consulted.
#[tokio::test]
async fn unattributable_requests_get_the_missing_key_policy() {
    let reached: [&[u8]; 7] = [
        b"garbage",
        b"unknown",
        b"_hidden",
        b"203.0.113.9, nonsense",
        b"203.0.113.9:99999",
        b"203.0.113.9, \xff\xfe",
        b"garbage, 10.0.0.7", // 10.0.0.0/8 is trusted: the walk goes on to the garbage
    ];
    let (_clock, layer) = behind_proxy(Quota::per_minute(3));
    let addr = serve(layer.clone()).await;
    for xff in reached {
        let (status, h) = get_once(addr, &[("x-forwarded-for", xff)]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{xff:?}");
        assert!(h.get("ratelimit").is_none());
    }
    let counts = layer.counts();
    assert_eq!((counts.unattributable, counts.missing_key_rejected), (7, 7));
    assert_eq!(
        counts.admitted + counts.rejected + counts.no_peer_address,
        0
    );
    // The proxy's own burst of 3 is whole; a well-formed client is its own key.
    for _ in 0..3 {
        assert_eq!(get_once(addr, &[]).await.0, StatusCode::OK);
    }
    let fine = [("x-forwarded-for", &b"203.0.113.9"[..])];
    assert_eq!(get_once(addr, &fine).await.0, StatusCode::OK);

    // Under `MissingKey::Allow`: passed on unlimited, still counted apart.
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let key = ClientIp::trusting(["127.0.0.0/8", "10.0.0.0/8"]).unwrap();
    let allow = RateLimitLayer::builder(limiter.clone(), key)
        .on_missing_key(MissingKey::Allow)
        .build();
    let addr = serve(allow.clone()).await;
    for xff in reached {
        let (status, h) = get_once(addr, &[("x-forwarded-for", xff)]).await;
        assert_eq!(status, StatusCode::OK, "{xff:?}");
        assert!(h.get("ratelimit").is_none(), "not limited: no fields");
    }
    let counts = allow.counts();
    assert_eq!((counts.unattributable, counts.missing_key_allowed), (7, 7));
    assert_eq!(limiter.stats().admitted, 0, "no key was charged");

    // With the peer address as a fallback key: still refused, not keyed as the proxy.
    let key = ClientIp::trusting(["127.0.0.0/8", "10.0.0.0/8"])
        .unwrap()
        .or(PeerIp::new());
    let limiter = Limiter::builder(Quota::per_minute(1))
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder(limiter.clone(), key).build();
    let addr = serve(layer.clone()).await;
    for xff in reached {
        let status = get_once(addr, &[("x-forwarded-for", xff)]).await.0;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{xff:?}");
    }
    assert_eq!(limiter.stats().admitted, 0);
    assert_eq!(layer.counts().unattributable, 7);
}

/// A stacked per-client limit cannot be escaped by an unattributable request either: it
/// follows the missing-key policy as the layer's own limit does.
#[tokio::test]
async fn a_stacked_per_client_limit_refuses_what_it_cannot_attribute() {
    let (_clock, per_client) = manual(Quota::per_minute(5));
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(100)).build();
    let layer = RateLimitLayer::builder(global.clone(), Global)
        .stack(
            "per-client",
            per_client,
            ClientIp::trusting(["127.0.0.0/8"]).unwrap(),
        )
        .unwrap()
        .build();
    let addr = serve(layer.clone()).await;
    let reached = [("x-forwarded-for", &b"garbage"[..])];
    assert_eq!(get_once(addr, &reached).await.0, StatusCode::BAD_REQUEST);
    // The global limit's cell was given back: a check now leaves 99 of 100.
    assert_eq!(global.check(&()).unwrap().remaining(), 99);
    let counts = layer.counts();
    assert_eq!((counts.unattributable, counts.missing_key_rejected), (1, 1));
    let fine = [("x-forwarded-for", &b"203.0.113.9"[..])];
    assert_eq!(get_once(addr, &fine).await.0, StatusCode::OK);
}

#[tokio::test]
async fn ipv6_clients_are_keyed_by_their_64() {
    let (_clock, limiter) = manual(Quota::per_minute(2));
    let addr = serve(RateLimitLayer::builder(limiter, PeerIp::new()).build()).await;
    let peer = |p: &'static str| [("x-test-peer", p.as_bytes())];
    assert_eq!(get_once(addr, &peer("[2001:db8:1:2::1]:1")).await.0, 200);
    assert_eq!(
        get_once(addr, &peer("[2001:db8:1:2:ffff::9]:2")).await.0,
        200
    );
    // Same /64: refused.
    assert_eq!(
        get_once(addr, &peer("[2001:db8:1:2:abcd::7]:3")).await.0,
        429
    );
    // The next /64 is another client.
    assert_eq!(get_once(addr, &peer("[2001:db8:1:3::1]:1")).await.0, 200);
    // IPv4-mapped IPv6 is the IPv4 address.
    assert_eq!(get_once(addr, &peer("192.0.2.1:1")).await.0, 200);
    assert_eq!(get_once(addr, &peer("[::ffff:192.0.2.1]:1")).await.0, 200);
    assert_eq!(get_once(addr, &peer("192.0.2.1:2")).await.0, 429);
}

/// The hello service, telling in `x-seen-peer` the peer address the layer was given.
fn peer_echo() -> HelloService {
    tower::util::BoxCloneSyncService::new(tower::service_fn(
        |req: http::Request<hyper::body::Incoming>| async move {
            let mut res = http::Response::new(Body::from("hello"));
            if let Some(peer) = req.extensions().get::<SocketAddr>() {
                let seen = http::HeaderValue::from_str(&peer.to_string()).unwrap();
                res.headers_mut().insert("x-seen-peer", seen);
            }
            Ok::<_, std::convert::Infallible>(res)
        },
    ))
}

/// The peer address the server saw, from `x-seen-peer`.
fn seen_peer(h: &HeaderMap) -> SocketAddr {
    h["x-seen-peer"].to_str().unwrap().parse().unwrap()
}

/// Over real sockets, no stand-in header: an IPv4 client reaching a dual-stack listener
/// arrives as an IPv4-mapped IPv6 peer (`::ffff:127.0.0.1`), and is keyed, and limited, as
/// the IPv4 address it is; `::1` is another client.
#[tokio::test]
async fn a_mapped_peer_on_a_dual_stack_socket_is_its_ipv4_client() {
    let Some(dual) = dual_stack_listener().await else {
        return;
    };
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let layer = RateLimitLayer::builder(limiter.clone(), PeerIp::new()).build();
    let dual = serve_on(dual, layer.clone(), peer_echo());
    let v4_only = serve_over(layer.clone(), peer_echo()).await;
    let via_v4 = SocketAddr::from(([127, 0, 0, 1], dual.port()));

    let (status, h) = get_once(via_v4, &[]).await;
    assert_eq!(status, StatusCode::OK);
    let seen = seen_peer(&h);
    assert_eq!(
        seen.ip(),
        "::ffff:127.0.0.1".parse::<std::net::IpAddr>().unwrap(),
        "the peer is mapped (if not, this socket is not dual-stack and the test proves nothing)"
    );
    // The burst of 1 is spent: refused again from the mapped peer...
    let (status, h) = get_once(via_v4, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 60);
    // ... and from the same client over an IPv4 socket, whose peer is plain 127.0.0.1.
    let (status, _) = get_once(v4_only, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // One key, the IPv4 one: a peek at it sees the spent burst.
    let v4: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    assert!(limiter.peek(&v4).is_err());
    assert_eq!(limiter.stats().admitted, 1);

    // `::1` is another client, with a burst of its own.
    let via_v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, dual.port()));
    match tokio::net::TcpStream::connect(via_v6).await {
        Err(e) => eprintln!("skipped the ::1 half: no IPv6 loopback here ({e})"),
        Ok(_) => {
            let (status, h) = get_once(via_v6, &[]).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(seen_peer(&h).ip(), std::net::Ipv6Addr::LOCALHOST);
            assert_eq!(get_once(via_v6, &[]).await.0, StatusCode::TOO_MANY_REQUESTS);
        }
    }
}

/// A dual-stack listener, or `None` (with the reason printed) where this machine refuses
/// IPv6 sockets altogether.
async fn dual_stack_listener() -> Option<tokio::net::TcpListener> {
    match tokio::net::TcpListener::bind("[::]:0").await {
        Ok(listener) => Some(listener),
        Err(e) => {
            eprintln!("skipped: this machine refuses IPv6 sockets ([::]:0: {e})");
            None
        }
    }
}

/// Over a real dual-stack socket, the CIDRs a layer is given match the mapped peer
/// `::ffff:127.0.0.1` as the IPv4 address it is: `127.0.0.0/8` allowlists it, and trusts it
/// as a proxy whose `X-Forwarded-For` names the client.
#[tokio::test]
async fn cidrs_match_a_mapped_peer_on_a_dual_stack_socket() {
    let Some(dual) = dual_stack_listener().await else {
        return;
    };
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .allow_cidrs(["127.0.0.0/8"])
        .unwrap()
        .build();
    let dual = serve_on(dual, layer.clone(), peer_echo());
    let via_v4 = SocketAddr::from(([127, 0, 0, 1], dual.port()));
    for _ in 0..3 {
        let (status, h) = get_once(via_v4, &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(seen_peer(&h).ip().to_string(), "::ffff:127.0.0.1");
        assert!(h.get("ratelimit").is_none() && h.get("ratelimit-policy").is_none());
    }
    assert_eq!(
        (layer.counts().allowlisted, layer.counts().admitted),
        (3, 0)
    );

    // A trusted proxy reaching the dual-stack socket from 127.0.0.1: its clients are keyed
    // by X-Forwarded-For, apart from each other.
    let Some(dual) = dual_stack_listener().await else {
        return;
    };
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let key = ClientIp::trusting(["127.0.0.0/8"]).unwrap();
    let dual = serve_on(
        dual,
        RateLimitLayer::builder(limiter.clone(), key).build(),
        peer_echo(),
    );
    let via_v4 = SocketAddr::from(([127, 0, 0, 1], dual.port()));
    let mut proxy = connect(via_v4).await;
    for client in [&b"198.51.100.1"[..], b"198.51.100.2"] {
        let (status, h) = get(&mut proxy, &[("x-forwarded-for", client)]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(seen_peer(&h).ip().to_string(), "::ffff:127.0.0.1");
        let (status, _) = get(&mut proxy, &[("x-forwarded-for", client)]).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    }
    // The proxy's own key was never charged.
    let proxy_ip: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    assert!(limiter.peek(&proxy_ip).is_ok());
}

#[tokio::test]
async fn the_missing_key_policy() {
    let api_key = || HeaderKey::new(http::HeaderName::from_static("x-api-key"));
    let reject = RateLimitLayer::new(Quota::per_minute(1), api_key());
    let addr = serve(reject).await;
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(h.get("ratelimit").is_none());
    let (status, _) = get_once(addr, &[("x-api-key", b"")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = get_once(addr, &[("x-api-key", b"k1")]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = get_once(addr, &[("x-api-key", b"k1")]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);

    let allow = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(1)), api_key())
        .on_missing_key(MissingKey::Allow)
        .build();
    let addr = serve(allow).await;
    for _ in 0..3 {
        let (status, h) = get_once(addr, &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert!(h.get("ratelimit").is_none()); // not limited, so no fields
    }
    let (status, _) = get_once(addr, &[("x-api-key", b"k1")]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = get_once(addr, &[("x-api-key", b"k1")]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);

    // A custom key that is missing gets the policy too.
    let custom = |parts: &http::request::Parts| {
        parts
            .uri
            .query()
            .and_then(|q| q.strip_prefix("user="))
            .map(str::to_owned)
    };
    let addr = serve(RateLimitLayer::new(Quota::per_minute(1), custom)).await;
    assert_eq!(get_once(addr, &[]).await.0, StatusCode::BAD_REQUEST);
}

/// The missing-key policy's third choice: a request without an API key is limited by its
/// peer address, apart from every API key (even one spelled like that address).
#[tokio::test]
async fn a_request_without_a_key_falls_back_to_its_peer_address() {
    let key = HeaderKey::new(http::HeaderName::from_static("x-api-key")).or(PeerIp::new());
    let clock = ManualClock::new();
    let limiter = Limiter::builder(Quota::per_minute(1)).clock(clock).build();
    let layer = RateLimitLayer::builder(limiter, key).build();
    let addr = serve(layer.clone()).await;

    // No key: limited by the peer address (127.0.0.1), once per minute.
    assert_eq!(get_once(addr, &[]).await.0, StatusCode::OK);
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 60);
    // Another peer without a key is another client.
    let elsewhere = [("x-test-peer", &b"192.0.2.9:1"[..])];
    assert_eq!(get_once(addr, &elsewhere).await.0, StatusCode::OK);
    // An API key, even one spelled as the refused address, has a limit of its own.
    for api_key in [&b"k1"[..], b"127.0.0.1"] {
        assert_eq!(
            get_once(addr, &[("x-api-key", api_key)]).await.0,
            StatusCode::OK
        );
        let refused = get_once(addr, &[("x-api-key", api_key)]).await.0;
        assert_eq!(refused, StatusCode::TOO_MANY_REQUESTS);
    }
    let counts = layer.counts();
    assert_eq!((counts.admitted, counts.rejected), (4, 3));
    assert_eq!(counts.missing_key_rejected + counts.missing_key_allowed, 0);
}

/// Sends each `Forwarded` value (one field, or several fields where split by `|`) on a
/// fresh connection from 127.0.0.1 (a trusted proxy): the statuses.
async fn statuses_for(addr: SocketAddr, name: &str, values: &[&[u8]]) -> Vec<u16> {
    let mut statuses = Vec::new();
    for value in values {
        let fields: Vec<(&str, &[u8])> = value.split(|&b| b == b'|').map(|v| (name, v)).collect();
        let (status, h) = get_once(addr, &fields).await;
        if status == StatusCode::OK {
            ratelimit(&h); // the fields parse
        }
        statuses.push(status.as_u16());
    }
    statuses
}

#[tokio::test]
async fn forwarded_is_walked_right_to_left() {
    let (_clock, layer) = behind_proxy_reading(Quota::per_minute(2), ForwardedHeader::Forwarded);
    let addr = serve(layer).await;
    // One client, 203.0.113.5, behind up to two trusted proxies, whatever it puts in front
    // (the leftmost entries are its own), in every spelling RFC 7239 allows.
    let same_client: [&[u8]; 6] = [
        b"for=203.0.113.5",
        b"for=1.1.1.1, For=\"203.0.113.5:4711\";proto=https",
        b"for=\"[2001:db8::1]\", for=203.0.113.5;by=10.0.0.1, for=10.0.0.7",
        b"for=unknown|for=203.0.113.5",
        b"for=_spoof;proto=http, for=203.0.113.5 ; host=example.com",
        b"for=203.0.113.5, for=203.0.113.6", // another client
    ];
    assert_eq!(
        statuses_for(addr, "forwarded", &same_client).await,
        [200, 200, 429, 429, 429, 200]
    );
    // IPv6 clients in quoted brackets, keyed by their /64: two addresses, one key.
    let v6: [&[u8]; 3] = [
        b"for=\"[2001:db8:1:2::a]:4711\"",
        b"for=\"[2001:db8:1:2::b]\"",
        b"for=\"[2001:db8:1:2::c]\", for=\"[2001:db8:ffff::1]:80\"",
    ];
    assert_eq!(statuses_for(addr, "forwarded", &v6).await, [200, 200, 429]);
    // X-Forwarded-For is not read when Forwarded is: it cannot choose a key.
    let xff: [&[u8]; 1] = [b"198.51.100.77"];
    assert_eq!(statuses_for(addr, "x-forwarded-for", &xff).await, [200]);
    assert_eq!(statuses_for(addr, "x-forwarded-for", &xff).await, [200]);
    // ... those two were the proxy's own two cells: the third is refused.
    assert_eq!(statuses_for(addr, "x-forwarded-for", &xff).await, [429]);
}

#[tokio::test]
async fn malformed_forwarded_elements_are_unattributable_where_reached() {
    let (_clock, layer) = behind_proxy_reading(Quota::per_minute(3), ForwardedHeader::Forwarded);
    let addr = serve(layer.clone()).await;
    // Each names no address where the walk from the proxy reaches it: a 400.
    let malformed: [&[u8]; 10] = [
        b"for=unknown",
        b"for=_hidden",
        b"proto=https",
        b"for=\"203.0.113.9",
        b"for=[2001:db8::1]",
        b"for=2001:db8::1",
        b"for=203.0.113.9;for=203.0.113.10",
        b"for=203.0.113.9, =x",
        b"for=203.0.113.9|for=\xff",
        b"for=203.0.113.9, for=10.0.0.7;by=\"",
    ];
    assert_eq!(statuses_for(addr, "forwarded", &malformed).await, [400; 10]);
    assert_eq!(layer.counts().unattributable, 10);
    // The proxy's own key was never charged: its burst of 3 is whole.
    for _ in 0..3 {
        assert_eq!(get_once(addr, &[]).await.0, StatusCode::OK);
    }
    // A well-formed client right of a malformed element or field is its own key.
    let fine: [&[u8]; 3] = [
        b"for=203.0.113.9",
        b"garbage=\"|for=203.0.113.9",
        b"for=\"\\\", by=x;;=, for=203.0.113.9",
    ];
    assert_eq!(
        statuses_for(addr, "forwarded", &fine).await,
        [200, 200, 200]
    );
}

#[tokio::test]
async fn x_real_ip_from_a_trusted_proxy() {
    let (_clock, layer) = behind_proxy_reading(Quota::per_minute(1), ForwardedHeader::XRealIp);
    let addr = serve(layer).await;
    let clients: [&[u8]; 4] = [
        b"198.51.100.1",
        b"198.51.100.2",
        b"198.51.100.1",
        b" 198.51.100.2 ",
    ];
    assert_eq!(
        statuses_for(addr, "x-real-ip", &clients).await,
        [200, 200, 429, 429]
    );
    // Malformed, or two fields: unattributable (never the proxy's key).
    let malformed: [&[u8]; 3] = [b"nope", b"198.51.100.3|198.51.100.4", b""];
    assert_eq!(
        statuses_for(addr, "x-real-ip", &malformed).await,
        [400, 400, 400]
    );
    assert_eq!(
        get_once(addr, &[]).await.0,
        StatusCode::OK,
        "the proxy's own cell"
    );
    // From a peer that is not trusted, X-Real-IP is ignored.
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let key = ClientIp::trusting(["10.0.0.0/8"])
        .unwrap()
        .header(ForwardedHeader::XRealIp);
    let addr = serve(RateLimitLayer::builder(limiter, key).build()).await;
    assert_eq!(
        statuses_for(addr, "x-real-ip", &clients[..2]).await,
        [200, 429]
    );
}

/// `GET /` from the IPv4 client `ip` (standing in for the socket's address).
async fn get_from(
    addr: SocketAddr,
    ip: &str,
    headers: &[(&str, &[u8])],
) -> (StatusCode, HeaderMap) {
    let peer = format!("{ip}:4000");
    let mut all = vec![("x-test-peer", peer.as_bytes())];
    all.extend_from_slice(headers);
    get_once(addr, &all).await
}

#[tokio::test]
async fn allowlisted_clients_bypass_every_limit() {
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(2)).build();
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .stack("global", global.clone(), Global)
        .unwrap()
        .allow_cidrs(["192.0.2.0/24"])
        .unwrap()
        .allow_if(|ip: &std::net::IpAddr| {
            *ip == "198.51.100.200".parse::<std::net::IpAddr>().unwrap()
        })
        .build();
    let addr = serve(layer.clone()).await;
    for ip in ["192.0.2.1", "192.0.2.254", "198.51.100.200"] {
        for _ in 0..3 {
            let (status, h) = get_from(addr, ip, &[]).await;
            assert_eq!(status, StatusCode::OK, "{ip}");
            assert!(h.get("ratelimit").is_none() && h.get("ratelimit-policy").is_none());
        }
    }
    // Nothing was taken from the global budget: two other clients still get a cell each.
    assert_eq!(get_from(addr, "192.0.3.1", &[]).await.0, StatusCode::OK);
    assert_eq!(
        get_from(addr, "198.51.100.201", &[]).await.0,
        StatusCode::OK
    );
    assert_eq!(
        get_from(addr, "192.0.3.2", &[]).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    let counts = layer.counts();
    assert_eq!(
        (counts.allowlisted, counts.admitted, counts.rejected),
        (9, 2, 1)
    );
    let stats = layer.stats();
    assert_eq!(stats[1].0, "global");
    assert_eq!((stats[1].1.admitted, stats[1].1.denied), (2, 1));
    assert_eq!(stats[0].1.admitted, 3); // the third was given back when global refused

    // Allowlisted API keys.
    let by_key: Limiter<http::HeaderValue> = Limiter::builder(Quota::per_minute(1)).build();
    let layer = RateLimitLayer::builder(
        by_key,
        HeaderKey::new(http::HeaderName::from_static("x-api-key")),
    )
    .allow_keys([http::HeaderValue::from_static("monitoring")])
    .build();
    let addr = serve(layer).await;
    for _ in 0..3 {
        assert_eq!(
            get_once(addr, &[("x-api-key", b"monitoring")]).await.0,
            StatusCode::OK
        );
    }
    assert_eq!(
        get_once(addr, &[("x-api-key", b"user")]).await.0,
        StatusCode::OK
    );
    assert_eq!(
        get_once(addr, &[("x-api-key", b"user")]).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    // No key is not an allowlisted key.
    assert_eq!(get_once(addr, &[]).await.0, StatusCode::BAD_REQUEST);
}

/// The key an authentication layer in front resolved, read from the request's extensions:
/// each user its own limit, whatever header or address it comes with; a request the auth
/// layer did not resolve has no key (a 400).
#[tokio::test]
async fn an_auth_layers_extension_is_the_key() {
    #[derive(Clone, Hash, PartialEq, Eq, Debug)]
    struct User(String);
    let limiter = Limiter::builder(Quota::per_minute(1))
        .clock(ManualClock::new())
        .build();
    let rate =
        RateLimitLayer::builder(limiter, tollgate_tower::ExtensionKey::<User>::new()).build();
    // The "authentication": a user named by a header this test trusts.
    let auth = tower::ServiceBuilder::new()
        .map_request(|mut req: http::Request<hyper::body::Incoming>| {
            let user = req
                .headers()
                .get("x-user")
                .map(|v| v.to_str().unwrap().to_owned());
            if let Some(user) = user {
                req.extensions_mut().insert(User(user));
            }
            req
        })
        .layer(rate.clone());
    let addr = serve(auth).await;
    let alice = [("x-user", &b"alice"[..])];
    assert_eq!(get_once(addr, &alice).await.0, StatusCode::OK);
    assert_eq!(
        get_once(addr, &alice).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    let bob = [("x-user", &b"bob"[..])];
    assert_eq!(get_once(addr, &bob).await.0, StatusCode::OK);
    assert_eq!(get_once(addr, &[]).await.0, StatusCode::BAD_REQUEST);
    let counts = rate.counts();
    assert_eq!(
        (
            counts.admitted,
            counts.rejected,
            counts.missing_key_rejected
        ),
        (2, 1, 1)
    );
}
