//! A host failing everything, over real sockets (hyper on 127.0.0.1, hyper-util's client):
//! the retry budget caps the extra load retries put on it, and a run of plain 5xx lowers
//! its rate.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use http::{Request, StatusCode};
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::hosts::answering;
use tollgate_client::{AdaptiveConfig, PoliteLayer, RetryBudget, RetryPolicy};
use tower::{Layer, ServiceExt};

/// Sends `n` GETs one after the other to `port` through `layer`; each ends in `status`.
async fn get_n(layer: &PoliteLayer, port: u16, n: usize, status: StatusCode) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let polite = layer.layer(client);
    for _ in 0..n {
        let req = Request::get(format!("http://127.0.0.1:{port}/"))
            .body(Empty::new())
            .unwrap();
        let res = polite.clone().oneshot(req).await.unwrap();
        assert_eq!(res.status(), status);
    }
}

/// Fast enough that pacing is not what the test waits on, even after the 5xx runs.
fn config() -> AdaptiveConfig {
    AdaptiveConfig::new(2_000.0).floor(1_000.0)
}

fn policy() -> RetryPolicy {
    RetryPolicy::new()
        .base(Duration::from_millis(1))
        .max_retries(3)
}

#[tokio::test]
async fn the_budget_caps_retries_of_a_host_failing_everything() {
    let (port, seen) = answering(StatusCode::SERVICE_UNAVAILABLE).await;
    // No floor and an hour's window: the cap is exactly 20 % of first attempts, however
    // slowly the machine runs the test.
    let budget = RetryBudget::new(0.2)
        .floor(0.0)
        .window(Duration::from_secs(3_600));
    let layer = PoliteLayer::new(config()).retry(policy().budget(budget));
    get_n(&layer, port, 40, StatusCode::SERVICE_UNAVAILABLE).await;
    let h = layer.host(&format!("127.0.0.1:{port}")).unwrap();
    assert_eq!(seen.load(Ordering::Relaxed), h.requests);
    assert_eq!(h.retries, 8, "{h:?}"); // 20 % of 40, not 3 × 40
    assert_eq!(h.requests, 48, "{h:?}");
    assert_eq!(h.gave_up, 40, "{h:?}");
    assert!(h.budget_refused >= 32, "{h:?}");
}

#[tokio::test]
async fn the_default_budget_is_on() {
    let (port, seen) = answering(StatusCode::BAD_GATEWAY).await;
    let layer = PoliteLayer::new(config()).retry(policy());
    get_n(&layer, port, 40, StatusCode::BAD_GATEWAY).await;
    let h = layer.host(&format!("127.0.0.1:{port}")).unwrap();
    // 20 % of 40 and a floor of 10 in its 10 s window: 18, if the test takes no more
    // than the window; far below the 120 retries without it in any case.
    assert!(h.retries < 60, "{h:?}");
    assert!(h.budget_refused > 0, "{h:?}");
    assert_eq!(seen.load(Ordering::Relaxed), 40 + h.retries);
}

#[tokio::test]
async fn no_budget_retries_each_request_fully() {
    let (port, seen) = answering(StatusCode::SERVICE_UNAVAILABLE).await;
    let layer = PoliteLayer::new(config()).retry(policy().no_budget());
    get_n(&layer, port, 10, StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(seen.load(Ordering::Relaxed), 40);
    let h = layer.host(&format!("127.0.0.1:{port}")).unwrap();
    assert_eq!((h.retries, h.budget_refused), (30, 0));
}

#[tokio::test]
async fn a_run_of_plain_5xx_lowers_the_rate() {
    let (port, _) = answering(StatusCode::INTERNAL_SERVER_ERROR).await;
    let layer = PoliteLayer::new(AdaptiveConfig::new(100.0)).retry(RetryPolicy::never());
    let key = format!("127.0.0.1:{port}");
    get_n(&layer, port, 2, StatusCode::INTERNAL_SERVER_ERROR).await;
    assert_eq!(layer.rates().rate(&key), 100.0); // two are not a run
    get_n(&layer, port, 1, StatusCode::INTERNAL_SERVER_ERROR).await;
    assert_eq!(layer.rates().rate(&key), 80.0); // the third lowers it as a 429 does
    let h = layer.host(&key).unwrap();
    assert!(h.last_decrease.is_some(), "{h:?}");
}
