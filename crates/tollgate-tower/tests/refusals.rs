//! Refusals answered by a hook (`Builder::on_refusal`) behind a real hyper server, asked by
//! hyper's clients over TCP: the hook's body and fields beside the layer's own, for every
//! reason the layer refuses (`429`, `400`, `503`, `413`), by the layer's own limit and by a
//! stacked one, in reject and delay mode; gRPC requests answered trailers-only without it;
//! dry run never calling it.
//!
//! Limiters run on a `ManualClock` wherever an assertion depends on time, so nothing here
//! asserts a wall-clock duration.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::Value;
use tollgate::{FullPolicy, Limiter, ManualClock, Quota};
use tollgate_tower::{
    ClientIp, Delay, DryRun, Global, HeaderKey, OnRefusal, PeerIp, RateLimitLayer, Refusal,
    RefusalReason,
};

use crate::common::*;

/// The hook under test: a JSON body saying why, which policy and when to retry,
/// `content-type: application/json` and an `x-refused-by: hook` mark, around the layer's
/// own fields (`Refusal::into_response`).
fn json_refusal(refusal: Refusal) -> Response<Body> {
    let reason = match refusal.reason() {
        RefusalReason::RateLimited => "rate_limited",
        RefusalReason::MissingKey => "missing_key",
        RefusalReason::Unavailable => "unavailable",
        RefusalReason::TooCostly => "too_costly",
        _ => "other",
    };
    let body = serde_json::json!({
        "reason": reason,
        "status": refusal.status().as_u16(),
        "policy": refusal.policy(),
        "retry_after": refusal.retry_after().map(|wait| wait.as_secs()),
    });
    let mut response = refusal.into_response(Full::new(Bytes::from(body.to_string())));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert("x-refused-by", HeaderValue::from_static("hook"));
    response
}

/// The hook's answer, checked as such: its mark and content type, and its JSON body.
fn hooked(status: StatusCode, h: &HeaderMap, body: &[u8]) -> Value {
    assert_eq!(h["x-refused-by"], "hook", "{status}: {h:?}");
    assert_eq!(h["content-type"], "application/json");
    let json: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(json["status"], status.as_u16());
    json
}

#[tokio::test]
async fn a_hook_answers_429_and_400_with_its_body_beside_the_layers_fields() {
    let limiter = Limiter::builder(Quota::per_minute(2))
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder(limiter, HeaderKey::new("x-api-key"))
        .policy_name("per-key")
        .unwrap()
        .legacy_headers(true)
        .on_refusal(json_refusal)
        .build();
    let addr = serve(layer.clone()).await;
    let mut conn = connect(addr).await;
    let key: &[(&str, &[u8])] = &[("x-api-key", b"k-1")];

    for _ in 0..2 {
        let (status, h, body) = fetch(&mut conn, key).await;
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"hello"[..]));
        assert!(h.get("x-refused-by").is_none());
    }
    let (status, h, body) = fetch(&mut conn, key).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let json = hooked(status, &h, &body);
    assert_eq!(json["reason"], "rate_limited");
    assert_eq!(json["policy"], "per-key");
    // The hook's retry-after is the layer's `Retry-After`, and the fields are all there.
    assert_eq!(retry_after(&h), 30);
    assert_eq!(json["retry_after"], 30);
    assert_eq!(policy(&h), ("per-key".into(), 2, 60));
    assert_eq!(ratelimit(&h), ("per-key".into(), 0, 60));
    assert_eq!(h["x-ratelimit-remaining"], "0");

    // No key: a 400 from the hook, with nothing to retry and no policy to name.
    let (status, h, body) = fetch(&mut conn, &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let json = hooked(status, &h, &body);
    assert_eq!(json["reason"], "missing_key");
    assert_eq!(json["policy"], Value::Null);
    assert_eq!(json["retry_after"], Value::Null);
    assert!(h.get("retry-after").is_none() && h.get("ratelimit").is_none());

    let counts = layer.counts();
    assert_eq!(
        (
            counts.admitted,
            counts.rejected,
            counts.missing_key_rejected
        ),
        (2, 1, 1)
    );
}

/// A stacked limit's refusal names that limit's policy; a full table's `503` names none.
#[tokio::test]
async fn a_hook_hears_which_stacked_policy_refused_and_a_full_tables_503() {
    let (_clock, per_ip) = manual(Quota::per_minute(100));
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(1))
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder(per_ip.clone(), PeerIp::new())
        .policy_name("per-ip")
        .unwrap()
        .stack("global", global, Global)
        .unwrap()
        .on_refusal(json_refusal)
        .build();
    let mut conn = connect(serve(layer).await).await;
    assert_eq!(fetch(&mut conn, &[]).await.0, StatusCode::OK);
    let (status, h, body) = fetch(&mut conn, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let json = hooked(status, &h, &body);
    assert_eq!(json["policy"], "global");
    assert_eq!(json["retry_after"], 60);
    assert_eq!(policy(&h), ("global".into(), 1, 60));
    // The per-IP cell was given back, as without a hook.
    let ip = "127.0.0.1".parse().unwrap();
    assert_eq!(per_ip.peek(&ip).unwrap().remaining(), 98);

    // A table with room for one client, refusing new keys.
    let limiter = Limiter::builder(Quota::per_minute(5))
        .shards(1)
        .capacity(1)
        .full_policy(FullPolicy::RefuseNewKeys)
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder(limiter, ClientIp::trusting(["127.0.0.0/8"]).unwrap())
        .on_refusal(json_refusal)
        .build();
    let mut conn = connect(serve(layer).await).await;
    let first: &[(&str, &[u8])] = &[("x-forwarded-for", b"198.51.100.1")];
    let second: &[(&str, &[u8])] = &[("x-forwarded-for", b"198.51.100.2")];
    assert_eq!(fetch(&mut conn, first).await.0, StatusCode::OK);
    let (status, h, body) = fetch(&mut conn, second).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let json = hooked(status, &h, &body);
    assert_eq!(json["reason"], "unavailable");
    assert_eq!(json["policy"], Value::Null);
    assert_eq!(
        (json["retry_after"].as_u64(), retry_after(&h)),
        (Some(1), 1)
    );
}

/// Delay mode refuses in two places: a stacked limit, checked before the wait, and the
/// wait itself (a turn past the bound, or a cost no wait can meet). Both reach the hook.
#[tokio::test]
async fn delay_mode_refusals_reach_the_hook() {
    let clock = ManualClock::new();
    let per_ip: Limiter<std::net::IpAddr> = Limiter::builder(Quota::per_second(1).allow_burst(1))
        .clock(clock.clone())
        .build();
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(2))
        .clock(clock.clone())
        .build();
    let cost = |parts: &http::request::Parts| {
        let cost = parts.headers.get("x-cost").and_then(|v| v.to_str().ok());
        cost.and_then(|v| v.parse().ok()).unwrap_or(1)
    };
    let layer = RateLimitLayer::builder(per_ip, PeerIp::new())
        .stack("global", global, Global)
        .unwrap()
        .cost_for(cost)
        .on_refusal(json_refusal)
        .delay(Duration::from_millis(500))
        .build();
    let addr = serve(layer.clone()).await;
    let mut conn = connect(addr).await;
    assert_eq!(fetch(&mut conn, &[]).await.0, StatusCode::OK);

    // The next cell is 1 s out, past the 500 ms bound: the wait refuses at once.
    let (status, h, body) = fetch(&mut conn, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let json = hooked(status, &h, &body);
    assert_eq!(
        (json["policy"].as_str(), json["retry_after"].as_u64()),
        (Some("default"), Some(1))
    );
    assert_eq!(retry_after(&h), 1);

    // More than the burst: no wait can meet it.
    let (status, h, body) = fetch(&mut conn, &[("x-cost", b"2")]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let json = hooked(status, &h, &body);
    assert_eq!(json["reason"], "too_costly");
    assert_eq!(json["retry_after"], Value::Null);
    assert!(h.get("retry-after").is_none());

    // The global budget (2 a minute; the wait refused above gave its cell back) refuses
    // before any wait.
    clock.advance(Duration::from_secs(1));
    assert_eq!(fetch(&mut conn, &[]).await.0, StatusCode::OK);
    clock.advance(Duration::from_secs(1));
    let (status, h, body) = fetch(&mut conn, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(hooked(status, &h, &body)["policy"], "global");
    assert_eq!(policy(&h), ("global".into(), 2, 60));

    let counts = layer.counts();
    assert_eq!((counts.admitted, counts.rejected), (2, 3));
}

/// Dry run refuses nothing: the hook is never called, the requests are served and marked.
#[tokio::test]
async fn dry_run_never_calls_the_hook() {
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .on_refusal(move |refusal| {
            counted.fetch_add(1, Ordering::Relaxed);
            json_refusal(refusal)
        })
        .dry_run()
        .build();
    let mut conn = connect(serve(layer.clone()).await).await;
    for _ in 0..3 {
        let (status, h, body) = fetch(&mut conn, &[]).await;
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"hello"[..]));
        assert!(h.get("x-refused-by").is_none());
    }
    assert_eq!(layer.counts().dry_run_refused, 2);
    assert_eq!(calls.load(Ordering::Relaxed), 0);
}

/// A layer of one request a minute per peer whose refusals go through `json_refusal`, and
/// how many times that hook was called.
fn one_a_minute_with_a_counted_hook() -> (
    impl tower::Layer<HelloService, Service: Served>,
    Arc<AtomicUsize>,
) {
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .on_refusal(move |refusal| {
            counted.fetch_add(1, Ordering::Relaxed);
            json_refusal(refusal)
        })
        .build();
    (layer, calls)
}

/// A gRPC-Web request (a browser's, over HTTP/1.1) is refused as gRPC too, in its own
/// content type, which is the only one a gRPC-Web client reads a status from; the hook is
/// not asked.
#[tokio::test]
async fn grpc_web_refusals_answer_in_the_requests_content_type() {
    let (layer, calls) = one_a_minute_with_a_counted_hook();
    let mut conn = connect(serve(layer).await).await;
    let (status, _, body) = fetch(&mut conn, &[]).await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"hello"[..]));
    for content_type in [
        "application/grpc-web-text+proto",
        "application/grpc-web",
        "application/grpc-web+proto",
    ] {
        let (status, h, body) =
            fetch(&mut conn, &[("content-type", content_type.as_bytes())]).await;
        assert_eq!(status, StatusCode::OK, "{content_type}");
        assert_eq!(h["content-type"], content_type);
        assert_eq!(h["grpc-status"], "8");
        assert_eq!(h["grpc-message"], "rate limit exceeded");
        assert_eq!(retry_after(&h), 60);
        assert!(body.is_empty(), "{content_type}: {body:?}");
    }
    assert_eq!(calls.load(Ordering::Relaxed), 0);
}

/// A gRPC request is refused trailers-only (HTTP 200, `grpc-status: 8`, the fields, an
/// empty body that ends the stream), without the hook; a plain request on the same
/// HTTP/2 connection gets the hook's answer.
#[tokio::test]
async fn grpc_refusals_are_trailers_only_and_skip_the_hook() {
    let (layer, calls) = one_a_minute_with_a_counted_hook();
    let mut client = connect_h2(serve_h2(layer).await).await;
    let admitted = grpc_call(&mut client, &[]).await;
    assert_eq!(admitted.status(), StatusCode::OK);
    assert!(admitted.headers().get("grpc-status").is_none());
    admitted.into_body().collect().await.unwrap();

    let refused = grpc_call(&mut client, &[]).await;
    assert_eq!(refused.status(), StatusCode::OK);
    let h = refused.headers();
    assert_eq!(h["content-type"], "application/grpc+proto");
    assert_eq!(h["grpc-status"], "8");
    assert_eq!(h["grpc-message"], "rate limit exceeded");
    assert_eq!(retry_after(h), 60);
    assert_eq!(ratelimit(h).1, 0);
    assert!(h.get("x-refused-by").is_none());
    assert!(hyper::body::Body::is_end_stream(refused.body()));
    let collected = refused.into_body().collect().await.unwrap();
    assert!(collected.trailers().is_none());
    assert!(collected.to_bytes().is_empty());
    assert_eq!(calls.load(Ordering::Relaxed), 0);

    let plain = Request::post("http://test/")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    client.ready().await.unwrap();
    let (parts, body) = client.send_request(plain).await.unwrap().into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        hooked(parts.status, &parts.headers, &body)["reason"],
        "rate_limited"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

/// The mode and the hook are set independently: either order gives the same layer type.
#[test]
fn the_mode_and_the_hook_are_kept_in_either_order() {
    type Hook = OnRefusal<fn(Refusal) -> Response<Body>>;
    let hook: fn(Refusal) -> Response<Body> = json_refusal;
    let limiter = || Limiter::keyed(Quota::per_second(1));
    let wait = Duration::from_millis(250);
    let hook_first: RateLimitLayer<Global, Delay, Hook> =
        RateLimitLayer::builder(limiter(), Global)
            .on_refusal(hook)
            .delay(wait)
            .build();
    let mode_first: RateLimitLayer<Global, Delay, Hook> =
        RateLimitLayer::builder(limiter(), Global)
            .delay(wait)
            .on_refusal(hook)
            .build();
    assert_eq!(
        (hook_first.mode().max(), mode_first.mode().max()),
        (wait, wait)
    );
    let _: RateLimitLayer<Global, DryRun, Hook> = RateLimitLayer::builder(limiter(), Global)
        .dry_run()
        .on_refusal(hook)
        .build();
}
