//! The `metrics` feature behind a real hyper server, read back through
//! `metrics-exporter-prometheus`'s text format: after known traffic, every counter says
//! exactly what [`Counts`](tollgate_tower::Counts) says, the delay histogram holds the
//! waits (on the limiter's clock), and the gauges hold each limiter's keys and bytes.
//!
//! Each layer is built under a recorder of its own (`metrics::with_local_recorder`), which
//! its handles keep: the tests run in parallel without a process-wide recorder. (The demo
//! server's process-wide one is scraped over a socket by `.ci/tower-server-smoke`.)

mod common;

use std::time::Duration;

use http::StatusCode;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tollgate::{Limiter, ManualClock, Quota};
use tollgate_tower::{Counts, Global, HeaderKey, PeerIp, RateLimitLayer};

use crate::common::*;

/// Builds with a fresh recorder behind the handles; the handle renders what it recorded.
fn recorded<L>(build: impl FnOnce() -> L) -> (L, PrometheusHandle) {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    (metrics::with_local_recorder(&recorder, build), handle)
}

/// The value of the series `name{policy="policy"}` in `text`, if rendered.
fn value(text: &str, name: &str, policy: &str) -> Option<f64> {
    let series = format!("{name}{{policy=\"{policy}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map(|v| v.parse().unwrap())
}

/// Each counter and the `Counts` field it mirrors.
fn counters(counts: &Counts) -> [(&'static str, u64); 13] {
    [
        ("tollgate_admitted_total", counts.admitted),
        ("tollgate_refused_total", counts.rejected),
        ("tollgate_delayed_total", counts.delayed),
        ("tollgate_abandoned_total", counts.abandoned),
        ("tollgate_dry_run_refused_total", counts.dry_run_refused),
        ("tollgate_allowlisted_total", counts.allowlisted),
        ("tollgate_skipped_total", counts.skipped),
        (
            "tollgate_keyless_refused_total",
            counts.missing_key_rejected,
        ),
        ("tollgate_keyless_allowed_total", counts.missing_key_allowed),
        ("tollgate_table_full_total", counts.unavailable),
        ("tollgate_unattributable_total", counts.unattributable),
        ("tollgate_no_peer_address_total", counts.no_peer_address),
        ("tollgate_near_limit_total", counts.near_limit),
    ]
}

/// A burst of B from one client, then k more: exactly B admitted and k refused, in the
/// scrape as in `Counts`; the gauges of both limiters, each under its own policy name.
#[tokio::test]
async fn a_burst_then_refusals_are_counted_exactly() {
    const B: u32 = 5;
    const K: u64 = 3;
    // Both on manual clocks: no key expires before the gauges are read.
    let (_clock, per_ip) = manual(Quota::per_second(1).allow_burst(B));
    let global: Limiter<()> = Limiter::builder(Quota::per_second(1000))
        .clock(ManualClock::new())
        .build();
    let (layer, scrape) = recorded(|| {
        RateLimitLayer::builder(per_ip, PeerIp::new())
            .policy_name("per-ip")
            .unwrap()
            .stack("global", global, Global)
            .unwrap()
            .build()
    });
    let addr = serve(layer.clone()).await;
    let mut conn = connect(addr).await;
    for _ in 0..B {
        assert_eq!(get(&mut conn, &[]).await.0, StatusCode::OK);
    }
    for _ in 0..K {
        assert_eq!(get(&mut conn, &[]).await.0, StatusCode::TOO_MANY_REQUESTS);
    }
    let stats = layer.stats(); // sets the gauges
    let text = scrape.render();
    assert_eq!(
        value(&text, "tollgate_admitted_total", "per-ip"),
        Some(f64::from(B))
    );
    assert_eq!(
        value(&text, "tollgate_refused_total", "per-ip"),
        Some(K as f64)
    );
    // Burst 5, default ratio: only the admission that left 0 is near.
    assert_eq!(
        value(&text, "tollgate_near_limit_total", "per-ip"),
        Some(1.0)
    );
    for (name, count) in counters(&layer.counts()) {
        assert_eq!(value(&text, name, "per-ip"), Some(count as f64), "{name}");
    }
    for (policy, stats) in [("per-ip", stats[0].1), ("global", stats[1].1)] {
        assert_eq!(
            value(&text, "tollgate_live_keys", policy),
            Some(1.0),
            "{policy}"
        );
        assert_eq!(
            value(&text, "tollgate_bytes", policy),
            Some(stats.bytes as f64)
        );
    }
    // No series is labelled with anything but a policy name.
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        assert!(
            line.contains("{policy=\"per-ip\"") || line.contains("{policy=\"global\""),
            "{line}"
        );
    }
}

/// Per client (an `x-client` header), bursts of 1, and stacked on it a global limit,
/// bursts of 2.
fn per_client_and_global() -> tollgate_tower::Builder<HeaderKey> {
    let per_client = Limiter::builder(Quota::per_minute(1))
        .clock(ManualClock::new())
        .build();
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(2))
        .clock(ManualClock::new())
        .build();
    let client = HeaderKey::new(http::HeaderName::from_static("x-client"));
    RateLimitLayer::builder(per_client, client)
        .policy_name("per-client")
        .unwrap()
        .stack("global", global, Global)
        .unwrap()
}

/// a: admitted; a again: per-client refuses; b: admitted (global's last cell); c, d, e:
/// global refuses.
async fn one_and_three_refusals<L: tower::Layer<HelloService, Service: Served>>(layer: L) {
    let mut conn = connect(serve(layer).await).await;
    for client in ["a", "a", "b", "c", "d", "e"] {
        get(&mut conn, &[("x-client", client.as_bytes())]).await;
    }
}

/// A refusal is counted under the policy that refused: a stacked limit's under its own
/// name, in reject and in dry-run mode; a layer's series add up to `Counts`.
#[tokio::test]
async fn refusals_are_labelled_with_the_refusing_policy() {
    let (layer, scrape) = recorded(|| per_client_and_global().build());
    one_and_three_refusals(layer.clone()).await;
    let text = scrape.render();
    assert_eq!(
        value(&text, "tollgate_refused_total", "per-client"),
        Some(1.0)
    );
    assert_eq!(value(&text, "tollgate_refused_total", "global"), Some(3.0));
    assert_eq!((layer.counts().admitted, layer.counts().rejected), (2, 4));

    let (layer, scrape) = recorded(|| per_client_and_global().dry_run().build());
    one_and_three_refusals(layer.clone()).await;
    let text = scrape.render();
    assert_eq!(
        value(&text, "tollgate_dry_run_refused_total", "per-client"),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "tollgate_dry_run_refused_total", "global"),
        Some(3.0)
    );
    assert_eq!(
        (layer.counts().admitted, layer.counts().dry_run_refused),
        (2, 4)
    );
}

/// A near-limit admission is counted under the policy it was near, the layer's own or a
/// stacked one's, once the request stands; the series add up to `Counts::near_limit`.
#[tokio::test]
async fn near_limit_admissions_are_labelled_with_the_policy_they_were_near() {
    let (layer, scrape) = recorded(|| per_client_and_global().build());
    one_and_three_refusals(layer.clone()).await;
    let text = scrape.render();
    // a: per-client left 0 of 1 (near), global 1 of 2 (not); b: per-client 0 of 1 and
    // global 0 of 2 (both near); c, d, e: per-client near, but global refused: given back.
    assert_eq!(
        value(&text, "tollgate_near_limit_total", "per-client"),
        Some(2.0)
    );
    assert_eq!(
        value(&text, "tollgate_near_limit_total", "global"),
        Some(1.0)
    );
    assert_eq!(layer.counts().near_limit, 3);
}

/// The other outcomes reach their counters too: allowlisted, keyless, table full.
#[tokio::test]
async fn every_outcome_has_its_counter() {
    let one_key: Limiter<http::HeaderValue> = Limiter::builder(Quota::per_minute(10))
        .shards(1)
        .capacity(1)
        .full_policy(tollgate::FullPolicy::RefuseNewKeys)
        .clock(ManualClock::new())
        .build();
    let (layer, scrape) = recorded(|| {
        RateLimitLayer::builder(
            one_key,
            HeaderKey::new(http::HeaderName::from_static("x-key")),
        )
        .allow_keys([http::HeaderValue::from_static("ops")])
        .build()
    });
    let addr = serve(layer.clone()).await;
    let mut conn = connect(addr).await;
    for (key, status) in [
        (Some("alice"), StatusCode::OK),
        (Some("bob"), StatusCode::SERVICE_UNAVAILABLE),
        (Some("ops"), StatusCode::OK),
        (None, StatusCode::BAD_REQUEST),
        (None, StatusCode::BAD_REQUEST),
    ] {
        let header: Vec<(&str, &[u8])> = key.map(|k| ("x-key", k.as_bytes())).into_iter().collect();
        assert_eq!(get(&mut conn, &header).await.0, status, "{key:?}");
    }
    let counts = layer.counts();
    assert_eq!(
        (
            counts.admitted,
            counts.unavailable,
            counts.allowlisted,
            counts.missing_key_rejected
        ),
        (1, 1, 1, 2)
    );
    let text = scrape.render();
    for (name, count) in counters(&counts) {
        assert_eq!(value(&text, name, "default"), Some(count as f64), "{name}");
    }
}

/// Delay mode: a request that waited 1 s (of the limiter's clock) is in the histogram.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_mode_waits_are_in_the_histogram() {
    let clock = ManualClock::new();
    let limiter: Limiter<()> = Limiter::builder(Quota::per_second(1).allow_burst(1))
        .clock(clock.clone())
        .build();
    let (layer, scrape) = recorded(|| {
        RateLimitLayer::builder(limiter.clone(), Global)
            .delay(Duration::from_secs(5))
            .build()
    });
    let addr = serve(layer.clone()).await;
    assert_eq!(get_once(addr, &[]).await.0, StatusCode::OK); // no wait
    let waiting = tokio::spawn(get_once(addr, &[]));
    // Queued: its reservation puts the key 2 s out (before that, a peek says 1 s).
    let mut polls = 0;
    while limiter.peek(&()).unwrap_err().retry_after() != Some(Duration::from_secs(2)) {
        polls += 1;
        assert!(polls < 2000, "the request never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    clock.advance(Duration::from_secs(1));
    assert_eq!(waiting.await.unwrap().0, StatusCode::OK);
    let text = scrape.render();
    assert_eq!(value(&text, "tollgate_delayed_total", "default"), Some(1.0));
    assert_eq!(
        value(&text, "tollgate_admitted_total", "default"),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "tollgate_delay_seconds_count", "default"),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "tollgate_delay_seconds_sum", "default"),
        Some(1.0)
    );
}

/// A layer built before any recorder holds no-op handles: it counts in `Counts` as ever,
/// and a recorder current later sees nothing of it (so install the recorder first).
#[tokio::test]
async fn a_layer_built_without_a_recorder_records_nothing() {
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let layer = RateLimitLayer::builder(limiter, PeerIp::new()).build();
    let addr = serve(layer.clone()).await;
    let recorder = PrometheusBuilder::new().build_recorder();
    let scrape = recorder.handle();
    let mut conn = connect(addr).await;
    assert_eq!(get(&mut conn, &[]).await.0, StatusCode::OK);
    assert_eq!(get(&mut conn, &[]).await.0, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!((layer.counts().admitted, layer.counts().rejected), (1, 1));
    assert_eq!(scrape.render().trim(), "");
}
