//! What a client of the layer behind a real hyper server sees (hyper's HTTP/1 and HTTP/2
//! clients over TCP): statuses, every rate-limit field parsed, renamed and switched off,
//! quota tiers, the legacy fields, problem+json bodies and gRPC refusals.
//!
//! Limiters run on a `ManualClock` wherever an assertion depends on time, so nothing here
//! asserts a wall-clock duration.

mod common;

use std::time::Duration;

use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use tollgate::{FullPolicy, Limiter, ManualClock, Quota};
use tollgate_tower::{ClientIp, Global, HeaderKey, PeerIp, RateLimitLayer};

use crate::common::*;

#[tokio::test]
async fn statuses_and_every_field() {
    let (clock, limiter) = manual(Quota::per_minute(3)); // one cell per 20 s, bursts of 3
    let addr = serve(RateLimitLayer::builder(limiter, PeerIp::new()).build()).await;
    let mut conn = connect(addr).await;

    for (r, t) in [(2, 20), (1, 40), (0, 60)] {
        let (status, h) = get(&mut conn, &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(policy(&h), ("default".into(), 3, 60));
        assert_eq!(ratelimit(&h), ("default".into(), r, t));
        assert!(h.get("retry-after").is_none());
    }
    let (status, h) = get(&mut conn, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 20);
    assert_eq!(policy(&h), ("default".into(), 3, 60));
    assert_eq!(ratelimit(&h), ("default".into(), 0, 60));

    // 18.5 s left: Retry-After rounds up, never down.
    clock.advance(Duration::from_millis(1500));
    let (status, h) = get(&mut conn, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 19);
    assert_eq!(ratelimit(&h), ("default".into(), 0, 59));

    // 1 ns short: still refused, and told to wait a whole second, not 0.
    clock.advance(Duration::from_millis(18_500) - Duration::from_nanos(1));
    let (status, h) = get(&mut conn, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 1);

    // Obeying Retry-After is admitted.
    clock.advance(Duration::from_nanos(1));
    let (status, h) = get(&mut conn, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ratelimit(&h), ("default".into(), 0, 60));
}

#[tokio::test]
async fn fields_can_be_switched_off_and_renamed() {
    let (_clock, limiter) = manual(Quota::per_second(1));
    let quiet = RateLimitLayer::builder(limiter, PeerIp::new())
        .headers(false)
        .build();
    let addr = serve(quiet).await;
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(h.get("ratelimit").is_none() && h.get("ratelimit-policy").is_none());
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 1); // always sent on a 429
    assert!(h.get("ratelimit").is_none() && h.get("ratelimit-policy").is_none());

    let (_clock, limiter) = manual(Quota::per_second(10));
    let named = RateLimitLayer::builder(limiter, PeerIp::new())
        .policy_name("per \"ip\"")
        .unwrap()
        .build();
    let (_, h) = get_once(serve(named).await, &[]).await;
    assert_eq!(policy(&h), ("per \"ip\"".into(), 10, 1));
    assert_eq!(ratelimit(&h), ("per \"ip\"".into(), 9, 1));
}

#[tokio::test]
async fn tiers_from_the_request() {
    let limiter = Limiter::builder(Quota::per_minute(1))
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder(
        limiter,
        HeaderKey::new(http::HeaderName::from_static("x-api-key")),
    )
    .quota_for(|parts| match parts.headers.get("x-api-key") {
        Some(k) if k.as_bytes().starts_with(b"paid-") => Quota::per_minute(5),
        _ => Quota::per_minute(1),
    })
    .build();
    let addr = serve(layer).await;
    let paid: &[(&str, &[u8])] = &[("x-api-key", b"paid-1")];
    let free: &[(&str, &[u8])] = &[("x-api-key", b"free-1")];
    for r in (0..5).rev() {
        let (status, h) = get_once(addr, paid).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(policy(&h), ("default".into(), 5, 60));
        assert_eq!(ratelimit(&h).1, r);
    }
    let (status, h) = get_once(addr, paid).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 12);
    let (status, h) = get_once(addr, free).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(policy(&h), ("default".into(), 1, 60));
    let (status, h) = get_once(addr, free).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 60);
}

#[tokio::test]
async fn legacy_fields_and_problem_bodies() {
    let (_clock, limiter) = manual(Quota::per_minute(2));
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(100)).build();
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .stack("global", global, Global)
        .unwrap()
        .legacy_headers(true)
        .problem_json(|json: String| Full::new(Bytes::from(json)))
        .build();
    let addr = serve(layer).await;
    let mut conn = connect(addr).await;
    let int = |h: &HeaderMap, name: &str| -> u64 {
        let values: Vec<_> = h.get_all(name).iter().collect();
        assert_eq!(values.len(), 1, "{name}");
        values[0].to_str().unwrap().parse().unwrap()
    };
    for (remaining, reset) in [(1, 30), (0, 60)] {
        let (status, h) = get(&mut conn, &[]).await;
        assert_eq!(status, StatusCode::OK);
        // The policy with the fewest cells left: per IP, not global.
        assert_eq!(int(&h, "x-ratelimit-limit"), 2);
        assert_eq!(int(&h, "x-ratelimit-remaining"), remaining);
        assert_eq!(int(&h, "x-ratelimit-reset"), reset);
        assert_eq!(parse_list(&h, "ratelimit").len(), 2); // the IETF fields too
        assert!(h.get("content-type").is_none());
    }
    conn.ready().await.unwrap();
    let res = conn
        .send_request(
            Request::get("/")
                .header("host", "t")
                .body(Empty::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let (parts, body) = res.into_parts();
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(parts.headers["content-type"], "application/problem+json");
    assert_eq!(int(&parts.headers, "x-ratelimit-remaining"), 0);
    assert_eq!(int(&parts.headers, "x-ratelimit-reset"), 60);
    let retry = retry_after(&parts.headers);
    let body = body.collect().await.unwrap().to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["type"], "about:blank");
    assert_eq!(problem["title"], "Too Many Requests");
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["retry_after"], retry);
    assert!(problem["detail"].as_str().unwrap().contains("default"));
    // A maker of another body type does not compile: see `Builder::on_refusal`'s docs.
}

#[tokio::test]
async fn grpc_requests_are_refused_as_grpc() {
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .problem_json(|json: String| Full::new(Bytes::from(json)))
        .build();
    let addr = serve_h2(layer).await;
    let mut client = connect_h2(addr).await;
    let mut call = async || grpc_call(&mut client, &[]).await;
    let admitted = call().await;
    assert_eq!(admitted.status(), StatusCode::OK);
    assert!(admitted.headers().get("grpc-status").is_none());
    admitted.into_body().collect().await.unwrap();

    let refused = call().await;
    // Trailers-only: HTTP 200, the gRPC status in the one header block, which ends the
    // stream (no data, no trailers).
    assert_eq!(refused.status(), StatusCode::OK);
    assert_eq!(refused.version(), http::Version::HTTP_2);
    let h = refused.headers();
    assert_eq!(h["content-type"], "application/grpc+proto");
    assert_eq!(h["grpc-status"], "8");
    assert_eq!(h["grpc-message"], "rate limit exceeded");
    assert_eq!(retry_after(h), 60);
    assert_eq!(ratelimit(h).1, 0);
    assert!(hyper::body::Body::is_end_stream(refused.body()));
    let collected = refused.into_body().collect().await.unwrap();
    assert!(collected.trailers().is_none());
    assert!(collected.to_bytes().is_empty());
}

/// A table with room for one client, refusing new keys when full: behind a trusted proxy,
/// the first client is served, the next one is told the server has no room (`503`,
/// `Retry-After: 1`, a problem+json body; gRPC's UNAVAILABLE), never that it is over its rate.
#[tokio::test]
async fn a_full_table_refuses_new_clients_with_503() {
    let limiter = Limiter::builder(Quota::per_minute(5))
        .shards(1)
        .capacity(1)
        .full_policy(FullPolicy::RefuseNewKeys)
        .clock(ManualClock::new())
        .build();
    let key = ClientIp::trusting(["127.0.0.0/8"]).unwrap();
    let layer = RateLimitLayer::builder(limiter, key)
        .problem_json(|json: String| Full::new(Bytes::from(json)))
        .build();
    let addr = serve(layer.clone()).await;
    let mut conn = connect(addr).await; // one proxy connection carries every client
    let first: &[(&str, &[u8])] = &[("x-forwarded-for", b"198.51.100.1")];
    assert_eq!(get(&mut conn, first).await.0, StatusCode::OK);

    conn.ready().await.unwrap();
    let req = Request::get("/")
        .header("host", "t")
        .header("x-forwarded-for", "198.51.100.2")
        .body(Empty::new())
        .unwrap();
    let (parts, body) = conn.send_request(req).await.unwrap().into_parts();
    assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry_after(&parts.headers), 1);
    // Not a rate limit: no policy to report.
    assert!(parts.headers.get("ratelimit").is_none());
    assert_eq!(parts.headers["content-type"], "application/problem+json");
    let body = body.collect().await.unwrap().to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["status"], 503);
    assert_eq!(problem["title"], "Service Unavailable");
    assert_eq!(problem["retry_after"], 1);

    // The known client is still served by its own key.
    assert_eq!(get(&mut conn, first).await.0, StatusCode::OK);
    let counts = layer.counts();
    assert_eq!(
        (counts.admitted, counts.unavailable, counts.rejected),
        (2, 1, 0)
    );

    // A gRPC call from a third client: UNAVAILABLE (14), in a trailers-only answer.
    let addr = serve_h2(layer.clone()).await;
    let mut client = connect_h2(addr).await;
    let refused = grpc_call(&mut client, &[("x-forwarded-for", b"198.51.100.3")]).await;
    assert_eq!(refused.status(), StatusCode::OK);
    let h = refused.headers();
    assert_eq!(h["content-type"], "application/grpc+proto");
    let grpc_status: u32 = h["grpc-status"].to_str().unwrap().parse().unwrap();
    assert_eq!(grpc_status, 14);
    assert_eq!(retry_after(h), 1);
    assert!(hyper::body::Body::is_end_stream(refused.body()));
    assert_eq!(layer.counts().unavailable, 2);
}

/// A quota whose burst does not refill in whole seconds announces a policy slightly
/// stricter than it enforces, never looser: a client that spends its `q` at once at the
/// start of every `w` seconds is never refused, and 30/s is announced as 29 per second (not
/// 30 per 2 s, half the rate, as the window rounded up from the rounded-up interval gave).
#[tokio::test]
async fn the_policy_never_announces_more_than_is_enforced() {
    let odd = Quota::new(30, Duration::from_millis(7800)); // 260 ms per cell
    for (quota, announced) in [
        (Quota::per_second(30), (29, 1)),
        (Quota::per_second(7), (6, 1)),
        (Quota::per_second(2).allow_burst(5), (4, 2)),
        (odd, (23, 6)),
        (Quota::per_minute(3), (3, 60)),
    ] {
        let (clock, limiter) = manual(quota);
        let addr = serve(RateLimitLayer::builder(limiter, PeerIp::new()).build()).await;
        let mut conn = connect(addr).await;
        let (status, h) = get(&mut conn, &[]).await;
        assert_eq!(status, StatusCode::OK);
        let (_, q, w) = policy(&h);
        assert_eq!((q, w), announced, "{quota:?}");
        // The first request spent one of this window's q.
        let mut spent = 1;
        for window in 0..20 {
            while spent < q {
                let (status, h) = get(&mut conn, &[]).await;
                assert_eq!(status, StatusCode::OK, "{quota:?}: window {window}: {h:?}");
                spent += 1;
            }
            clock.advance(Duration::from_secs(w as u64));
            spent = 0;
        }
    }
}
