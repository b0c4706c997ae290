//! `Reqwest` under `PoliteLayer`, against a real local host (feature `reqwest`): the
//! response's fields reach the layer, and a request reqwest cannot take is an error.
#![cfg(feature = "reqwest")]

mod support;

use support::hosts::{self, HostSpec};
use tollgate_client::Reqwest;
use tower::{Layer, ServiceExt};

#[tokio::test]
async fn the_layer_learns_through_reqwest() {
    let host = hosts::start(HostSpec {
        name: "ietf",
        rate: 50,
        burst: 50,
        ietf: true,
        flaky: 0.0,
    })
    .await;
    let layer = support::crawl::layer(2);
    let client = layer.layer(Reqwest::new(reqwest::Client::new()));
    let req = http::Request::get(host.url()).body(String::new()).unwrap();
    let res = client
        .clone()
        .oneshot(req)
        .await
        .expect("the local host answers");
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["ratelimit-policy"], "\"ietf\";q=50;w=1");
    let h = layer.host(&host.key()).expect("tracked");
    assert!(h.announced && h.rate == 50.0, "{h:?}");
    assert_eq!(host.served.ok(), 1);

    // No scheme: reqwest's builder error, through the layer, not a panic.
    let req = http::Request::get("/relative").body(String::new()).unwrap();
    let err = client.oneshot(req).await.unwrap_err();
    assert!(err.inner().is_some_and(reqwest::Error::is_builder), "{err}");
}

/// A GET through the layer over reqwest to `url`: the error, and the host's attempts.
async fn failed_attempts(url: &str, key: &str) -> (reqwest::Error, u64) {
    let layer = tollgate_client::PoliteLayer::new(tollgate_client::AdaptiveConfig::new(1_000.0))
        .retry(tollgate_client::RetryPolicy::new().base(std::time::Duration::from_millis(1)));
    let client = layer.layer(Reqwest::new(reqwest::Client::new()));
    let req = http::Request::get(url).body(String::new()).unwrap();
    let err = client.oneshot(req).await.unwrap_err();
    let err = err
        .into_inner()
        .expect("the client's own error, not a hold");
    (err, layer.host(key).expect("tracked").requests)
}

#[tokio::test]
async fn a_refused_connect_is_retried_a_failed_lookup_is_not() {
    let port = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().port()
    };
    let (err, n) = failed_attempts(
        &format!("http://127.0.0.1:{port}/"),
        &format!("127.0.0.1:{port}"),
    )
    .await;
    assert!(err.is_connect(), "{err}");
    assert_eq!(n, 4, "{err}"); // the try and the default 3 retries
    let (err, n) = failed_attempts("http://no-such-host.invalid/", "no-such-host.invalid:80").await;
    assert!(err.is_connect(), "{err}"); // reqwest says connect for DNS too
    assert_eq!(n, 1, "{err}");
}
