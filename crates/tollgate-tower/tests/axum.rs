//! The layer in an axum `Router` served by `axum::serve` with `ConnectInfo`, asked by a real
//! HTTP client: the peer address comes from axum's `ConnectInfo<SocketAddr>`, and a refusal
//! hook makes axum bodies.

mod common;

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tollgate::{Limiter, ManualClock, Quota};
use tollgate_tower::{Global, HeaderKey, MissingKey, PeerIp, RateLimitLayer, Refusal};

use crate::common::{Bare, parse_list, policy, ratelimit, retry_after};

async fn get_status(addr: SocketAddr, api_key: Option<&str>) -> (StatusCode, http::HeaderMap) {
    let (status, headers, _body) = get_full(addr, api_key).await;
    (status, headers)
}

/// `GET /` on a fresh connection, with `x-api-key` if given: the status, the headers, the
/// body.
async fn get_full(addr: SocketAddr, api_key: Option<&str>) -> (StatusCode, http::HeaderMap, Bytes) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::get("/").header("host", "test");
    if let Some(key) = api_key {
        req = req.header("x-api-key", key);
    }
    let res = sender
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let (parts, body) = res.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, body)
}

/// `GET path` on a fresh connection: the status and the headers.
async fn get_path(addr: SocketAddr, path: &str) -> (StatusCode, http::HeaderMap) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::get(path).header("host", "test");
    let res = sender
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    (res.status(), res.headers().clone())
}

/// Serves `app` on 127.0.0.1:0 with `ConnectInfo<SocketAddr>`.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

#[tokio::test]
async fn axum_connect_info_tiers_and_a_stacked_per_ip_limit() {
    let clock = ManualClock::new();
    let per_key = Limiter::builder(Quota::per_minute(1))
        .clock(clock.clone())
        .build();
    let per_ip = Limiter::builder(Quota::per_minute(4))
        .clock(clock.clone())
        .build();
    let layer = RateLimitLayer::builder(
        per_key,
        HeaderKey::new(http::HeaderName::from_static("x-api-key")),
    )
    .policy_name("per-key")
    .unwrap()
    .quota_for(|parts| match parts.headers.get("x-api-key") {
        Some(k) if k.as_bytes().starts_with(b"paid-") => Quota::per_minute(3),
        _ => Quota::per_minute(1),
    })
    .on_missing_key(MissingKey::Allow)
    .stack("per-ip", per_ip, PeerIp::new())
    .unwrap()
    .build();
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer);
    let addr = serve(app).await;

    // The free key: 1 a minute.
    assert_eq!(get_status(addr, Some("free-1")).await.0, StatusCode::OK);
    let (status, h) = get_status(addr, Some("free-1")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(policy(&h), ("per-key".into(), 1, 60));
    // The paid key: 3 a minute, but the per-IP limit (4, one used) ends it at 3 more.
    for _ in 0..3 {
        let (status, h) = get_status(addr, Some("paid-1")).await;
        assert_eq!(status, StatusCode::OK);
        let policies: Vec<_> = parse_list(&h, "ratelimit-policy")
            .iter()
            .map(|i| (i.value.clone(), i.int("q"), i.int("w")))
            .collect();
        let s = |n: &str| Bare::Str(n.into());
        assert_eq!(policies, [(s("per-key"), 3, 60), (s("per-ip"), 4, 60)]);
    }
    // Anonymous: not limited per key, but the IP's 4 are used (the refused free-key
    // request cost the IP nothing).
    let (status, h) = get_status(addr, None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(policy(&h), ("per-ip".into(), 4, 60));
    assert_eq!(retry_after(&h), 15);
}

/// A refusal hook in a `Router`: it makes `axum::body::Body` responses, as the router's
/// services do, and its answers keep the layer's fields.
#[tokio::test]
async fn axum_refusals_answered_by_a_hook_with_an_axum_body() {
    let limiter = Limiter::builder(Quota::per_minute(1))
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder(limiter, HeaderKey::new("x-api-key"))
        .on_refusal(|refusal: Refusal| {
            let retry = refusal.retry_after().map(|wait| wait.as_secs());
            let body =
                serde_json::json!({ "status": refusal.status().as_u16(), "retry_after": retry });
            let mut response = refusal.into_response(axum::body::Body::from(body.to_string()));
            let json = http::HeaderValue::from_static("application/json");
            response
                .headers_mut()
                .insert(http::header::CONTENT_TYPE, json);
            response
        })
        .build();
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer);
    let addr = serve(app).await;

    let (status, _, body) = get_full(addr, Some("k")).await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"hello"[..]));
    let (status, h, body) = get_full(addr, Some("k")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(retry_after(&h), 60);
    assert_eq!(ratelimit(&h), ("default".into(), 0, 60));
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (json["status"].as_u64(), json["retry_after"].as_u64()),
        (Some(429), Some(60))
    );

    let (status, h, body) = get_full(addr, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(h["content-type"], "application/json");
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["status"], 400);
    assert!(json["retry_after"].is_null());
}

/// The items of list field `field`: each one's value and its integer parameters `a`, `b`.
fn items(h: &http::HeaderMap, field: &str, [a, b]: [&str; 2]) -> Vec<(Bare, i64, i64)> {
    parse_list(h, field)
        .iter()
        .map(|i| (i.value.clone(), i.int(a), i.int(b)))
        .collect()
}

/// Layers nested in a `Router` (a global limit on the app, a per-IP one on one route), and a
/// handler that answers with an upstream's own fields: every policy's items reach the client,
/// the inner ones first, and the refusing policy's `Retry-After` stands.
#[tokio::test]
async fn nested_layers_and_an_upstreams_fields_all_reach_the_client() {
    let clock = ManualClock::new();
    let global = Limiter::builder(Quota::per_minute(100))
        .clock(clock.clone())
        .build();
    let global = RateLimitLayer::builder(global, Global)
        .policy_name("global")
        .unwrap()
        .build();
    let login = Limiter::builder(Quota::per_minute(1)).clock(clock).build();
    let login = RateLimitLayer::builder(login, PeerIp::new())
        .policy_name("login")
        .unwrap()
        .build();
    let upstream = || async {
        let mut response = http::Response::new(axum::body::Body::empty());
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        let h = response.headers_mut();
        h.insert(
            "ratelimit-policy",
            r#""upstream";q=10;w=3600"#.parse().unwrap(),
        );
        h.insert("ratelimit", r#""upstream";r=0;t=120"#.parse().unwrap());
        h.insert("retry-after", "120".parse().unwrap());
        response
    };
    let app = Router::new()
        .route("/login", get(|| async { "welcome" }).route_layer(login))
        .route("/upstream", get(upstream))
        .layer(global);
    let addr = serve(app).await;

    let s = |n: &str| Bare::Str(n.into());
    let (status, h) = get_path(addr, "/login").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        items(&h, "ratelimit-policy", ["q", "w"]),
        [(s("login"), 1, 60), (s("global"), 100, 60)]
    );
    assert_eq!(
        items(&h, "ratelimit", ["r", "t"]),
        [(s("login"), 0, 60), (s("global"), 99, 1)]
    );
    // The inner limit refuses; the outer one admitted the request and says so, after it.
    let (status, h) = get_path(addr, "/login").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        items(&h, "ratelimit", ["r", "t"]),
        [(s("login"), 0, 60), (s("global"), 98, 2)]
    );
    assert_eq!(retry_after(&h), 60);
    // An upstream's fields stay, the layer's items after them, its later `Retry-After` too.
    let (status, h) = get_path(addr, "/upstream").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        items(&h, "ratelimit-policy", ["q", "w"]),
        [(s("upstream"), 10, 3600), (s("global"), 100, 60)]
    );
    assert_eq!(
        items(&h, "ratelimit", ["r", "t"]),
        [(s("upstream"), 0, 120), (s("global"), 97, 2)]
    );
    assert_eq!(retry_after(&h), 120);
}

/// Two nested layers both left at the default policy name (a global limit on the app, a
/// per-IP one on a route): the fields name one `"default"` policy, and it is the one with
/// fewer cells left, the one that decides the client's next request, with both of its items.
#[tokio::test]
async fn nested_layers_of_one_name_announce_the_stricter_policy() {
    let clock = ManualClock::new();
    let global = Limiter::builder(Quota::per_minute(1))
        .clock(clock.clone())
        .build();
    let global = RateLimitLayer::builder(global, Global).build();
    let per_ip = Limiter::builder(Quota::per_minute(100))
        .clock(clock)
        .build();
    let per_ip = RateLimitLayer::builder(per_ip, PeerIp::new()).build();
    let app = Router::new()
        .route("/", get(|| async { "hello" }).route_layer(per_ip))
        .layer(global);
    let addr = serve(app).await;

    let default = || Bare::Str("default".into());
    let (status, h) = get_path(addr, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        items(&h, "ratelimit-policy", ["q", "w"]),
        [(default(), 1, 60)]
    );
    assert_eq!(items(&h, "ratelimit", ["r", "t"]), [(default(), 0, 60)]);
    // As announced: the next request is refused (by the global limit, outside the route).
    let (status, h) = get_path(addr, "/").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(items(&h, "ratelimit", ["r", "t"]), [(default(), 0, 60)]);
}
