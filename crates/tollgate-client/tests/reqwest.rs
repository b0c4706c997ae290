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
