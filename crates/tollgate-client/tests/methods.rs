//! Which methods are retried, against hyper on 127.0.0.1 answering 503 to everything:
//! GET, HEAD and OPTIONS by default; PUT, DELETE and a keyed POST only on opt-in; a POST
//! without `Idempotency-Key` and PATCH never.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use http::{Method, Request, StatusCode};
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::hosts::answering;
use tollgate_client::{AdaptiveConfig, PoliteLayer, RetryPolicy};
use tower::{Layer, ServiceExt};

/// The attempts one request of `method` (with an `Idempotency-Key` if `keyed`) makes
/// against a host answering 503, under `policy`.
async fn attempts(policy: RetryPolicy, method: Method, keyed: bool) -> u64 {
    let (port, seen) = answering(StatusCode::SERVICE_UNAVAILABLE).await;
    let layer = PoliteLayer::new(AdaptiveConfig::new(1_000.0)).retry(
        policy
            .base(Duration::from_millis(1))
            .max_retries(3)
            .no_budget(),
    );
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut req = Request::builder()
        .method(method.clone())
        .uri(format!("http://127.0.0.1:{port}/"));
    if keyed {
        req = req.header("idempotency-key", "5a1c0b9e-7f1d-4c0a");
    }
    let res = layer
        .layer(client)
        .oneshot(req.body(Empty::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), 503);
    let n = seen.load(Ordering::Relaxed);
    assert_eq!(
        n,
        layer.host(&format!("127.0.0.1:{port}")).unwrap().requests
    );
    n
}

#[tokio::test]
async fn safe_methods_are_retried_by_default() {
    for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
        assert_eq!(
            attempts(RetryPolicy::new(), method.clone(), false).await,
            4,
            "{method}"
        );
    }
}

#[tokio::test]
async fn writes_are_not_retried_by_default() {
    for (method, keyed) in [
        (Method::PUT, false),
        (Method::DELETE, false),
        (Method::POST, true),
        (Method::POST, false),
        (Method::PATCH, true),
    ] {
        let n = attempts(RetryPolicy::new(), method.clone(), keyed).await;
        assert_eq!(n, 1, "{method} keyed {keyed}");
    }
}

#[tokio::test]
async fn writes_are_retried_on_opt_in() {
    let writes = || RetryPolicy::new().retry_writes(true);
    for (method, keyed) in [
        (Method::PUT, false),
        (Method::DELETE, false),
        (Method::POST, true),
    ] {
        let n = attempts(writes(), method.clone(), keyed).await;
        assert_eq!(n, 4, "{method} keyed {keyed}");
    }
    // A POST without the key, and PATCH, stay unretried.
    assert_eq!(attempts(writes(), Method::POST, false).await, 1);
    assert_eq!(attempts(writes(), Method::PATCH, true).await, 1);
}
