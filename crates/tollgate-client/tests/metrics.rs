//! The `metrics` feature over real sockets (scripted hyper servers on 127.0.0.1, hyper-util's
//! client): after known traffic, a named host's series equal its `HostSnapshot` fields and
//! the figures the traffic makes; the hosts not named add into `host="other"`; a layer
//! built before the recorder records nothing. Each test records into a recorder of its own,
//! installed for the thread that builds the layer (the layer registers its handles then).

#![cfg(feature = "metrics")]

mod support;

use std::time::Duration;

use http::Request;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::recorder::Recorder;
use support::script::serve;
use tollgate_client::{AdaptiveConfig, HostSnapshot, PoliteLayer, RetryBudget, RetryPolicy};
use tower::{Layer, ServiceExt};

const COUNTERS: [&str; 9] = [
    "tollgate_client_requests_total",
    "tollgate_client_successes_total",
    "tollgate_client_throttled_total",
    "tollgate_client_server_errors_total",
    "tollgate_client_errors_total",
    "tollgate_client_holds_total",
    "tollgate_client_retries_total",
    "tollgate_client_budget_refused_total",
    "tollgate_client_gave_up_total",
];

/// The snapshot's fields in the order of [`COUNTERS`].
fn fields(h: &HostSnapshot) -> [u64; 9] {
    [
        h.requests,
        h.successes,
        h.throttled,
        h.server_errors,
        h.errors,
        h.holds,
        h.retries,
        h.budget_refused,
        h.gave_up,
    ]
}

/// The counters of `host`'s label, in the order of [`COUNTERS`] (0 if not registered).
fn counters(r: &Recorder, host: &str) -> [u64; 9] {
    COUNTERS.map(|name| r.counter(name, &[("host", host)]).unwrap_or(0))
}

/// Retries at 1 ms, 3 at most, and a budget of exactly 2 retries per host for the test's
/// length (no share of first attempts; a floor of 2⁻⁷ per second over 256 s).
fn policy() -> RetryPolicy {
    let budget = RetryBudget::new(0.0)
        .floor(1.0 / 128.0)
        .window(Duration::from_secs(256));
    RetryPolicy::new()
        .base(Duration::from_millis(1))
        .max_retries(3)
        .budget(budget)
}

/// Sends one GET to `url` through `layer`; the status, or `None` for an error.
async fn get(layer: &PoliteLayer, url: &str) -> Option<u16> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let req = Request::get(url).body(Empty::new()).unwrap();
    let res = layer.layer(client).oneshot(req).await;
    res.ok().map(|r| r.status().as_u16())
}

/// A port on 127.0.0.1 that refuses connections (bound, then closed).
async fn refusing_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn metrics_agree_with_the_snapshots_after_known_traffic() {
    let (named, _) = serve(|n, _| match n {
        0 => (429, vec![("retry-after", "0".into())], String::new()),
        2 => (503, vec![], String::new()),
        4 => (404, vec![], String::new()),
        _ => (200, vec![], String::new()),
    })
    .await;
    let (failing, _) = serve(|_, _| (503, vec![], String::new())).await;
    let dead = format!("http://127.0.0.1:{}", refusing_port().await);
    let key = |url: &str| url.trim_start_matches("http://").to_owned();

    let recorder = Recorder::default();
    let layer = metrics::with_local_recorder(&recorder, || {
        PoliteLayer::new(AdaptiveConfig::new(1_000.0).floor(500.0))
            .retry(policy())
            .metrics_hosts([key(&named)])
    });
    // The named host's gauge reads its rate before any response.
    let rate = recorder.gauge("tollgate_client_rate", &[("host", &key(&named))]);
    assert_eq!(rate, Some(1_000.0));
    // Named: a 429 (held for 0 s) then a 200; a 503 then a 200; a 404.
    assert_eq!(get(&layer, &named).await, Some(200));
    assert_eq!(get(&layer, &named).await, Some(200));
    assert_eq!(get(&layer, &named).await, Some(404));
    // Other: 503s, the budget's 2 retries spent on the first GET, then refused.
    for _ in 0..3 {
        assert_eq!(get(&layer, &failing).await, Some(503));
    }
    // Other: refused connections, retried within the budget, then refused by it.
    assert_eq!(get(&layer, &dead).await, None);

    let h = layer.host(&key(&named)).unwrap();
    assert_eq!(counters(&recorder, &key(&named)), fields(&h));
    //          requests, ok, 429, 5xx, errors, holds, retries, refused, gave up
    assert_eq!(fields(&h), [5, 2, 1, 1, 0, 1, 2, 0, 0]); // a 404 is neither
    let waits = recorder.samples("tollgate_client_wait_seconds", &[("host", &key(&named))]);
    assert_eq!(waits.unwrap().len(), 5); // one per attempt
    let rate = recorder.gauge("tollgate_client_rate", &[("host", &key(&named))]);
    assert_eq!(rate, Some(h.rate));
    assert!(h.rate < 1_000.0, "{h:?}"); // the 429 lowered it: the gauge followed

    let (f, d) = (
        layer.host(&key(&failing)).unwrap(),
        layer.host(&key(&dead)).unwrap(),
    );
    assert_eq!(fields(&f), [5, 0, 0, 5, 0, 0, 2, 3, 3]);
    assert_eq!(fields(&d), [3, 0, 0, 0, 3, 0, 2, 1, 1]);
    let sum: Vec<u64> = fields(&f)
        .iter()
        .zip(fields(&d))
        .map(|(a, b)| a + b)
        .collect();
    assert_eq!(counters(&recorder, "other").to_vec(), sum);
    let waits = recorder.samples("tollgate_client_wait_seconds", &[("host", "other")]);
    assert_eq!(waits.unwrap().len(), 8);
    // No rate gauge for `other`, nor any series naming a host that was not named.
    assert_eq!(
        recorder.gauge("tollgate_client_rate", &[("host", "other")]),
        None
    );
    for series in recorder.names() {
        assert!(
            series.contains("host=other") || series.contains(&format!("host={}", key(&named))),
            "{series}"
        );
    }
}

#[tokio::test]
async fn by_default_every_host_is_other() {
    let (a, _) = serve(|_, _| (200, vec![], String::new())).await;
    let (b, _) = serve(|_, _| (200, vec![], String::new())).await;
    let recorder = Recorder::default();
    let layer =
        metrics::with_local_recorder(&recorder, || PoliteLayer::new(AdaptiveConfig::new(1_000.0)));
    for url in [&a, &b, &a] {
        assert_eq!(get(&layer, url).await, Some(200));
    }
    let other = [("host", "other")];
    assert_eq!(
        recorder.counter("tollgate_client_requests_total", &other),
        Some(3)
    );
    assert_eq!(
        recorder.counter("tollgate_client_successes_total", &other),
        Some(3)
    );
    assert_eq!(recorder.gauge("tollgate_client_rate", &other), None);
    assert!(recorder.names().iter().all(|s| s.ends_with("{host=other}")));
}

#[tokio::test]
async fn a_layer_built_before_its_recorder_records_nothing() {
    let (a, _) = serve(|_, _| (200, vec![], String::new())).await;
    let layer = PoliteLayer::new(AdaptiveConfig::new(1_000.0));
    let recorder = Recorder::default();
    metrics::with_local_recorder(&recorder, || async {
        assert_eq!(get(&layer, &a).await, Some(200));
    })
    .await;
    assert!(recorder.names().is_empty());
    assert_eq!(layer.host(&a["http://".len()..]).unwrap().requests, 1);
}
