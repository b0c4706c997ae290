//! A rate that does not divide a second, announced over a real socket: a 30/s host guarded
//! by tollgate-tower announces `q=29;w=1` (never more than it enforces), and the client
//! paces to that, within a few % under 30/s (it once announced `q=30;w=2`, and the client
//! went at 15). Deterministic: one response sets the rate, no timing is measured.

mod support;

use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::hosts::{self, HostSpec};
use tower::{Layer, ServiceExt};

#[tokio::test]
async fn a_30_per_second_host_is_paced_just_under_30() {
    // (hidden rate, burst, the rate announced): a policy's `q` is at most the burst (a
    // client may spend it at once), its `w` whole seconds, and `q / w` at most the rate.
    for (rate, burst, paced) in [(30, 30, 29.0), (7, 7, 6.0), (50, 50, 50.0), (30, 5, 5.0)] {
        let host = hosts::start(HostSpec {
            name: "ietf",
            rate,
            burst,
            ietf: true,
            flaky: 0.0,
        })
        .await;
        let layer = support::crawl::layer(1);
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let svc = layer.layer(client);
        let req = Request::get(host.url())
            .body(Full::new(Bytes::new()))
            .unwrap();
        let res = svc.oneshot(req).await.expect("the local host answers");
        assert_eq!(res.status(), 200);
        let policy = res.headers()["ratelimit-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        let _ = res.into_body().collect().await;

        let snap = layer.host(&host.key()).expect("the host is tracked");
        let hidden = f64::from(rate);
        if burst == rate {
            // Within a few % under the hidden rate.
            assert!(snap.rate >= 0.8 * hidden, "{policy}: {}", snap.rate);
        }
        assert!(snap.announced, "{policy}: {snap:?}");
        assert!(
            snap.rate <= hidden && (snap.rate - paced).abs() < paced * 1e-6,
            "{rate}/s, burst {burst}: announced {policy}, paced at {}",
            snap.rate
        );
    }
}
