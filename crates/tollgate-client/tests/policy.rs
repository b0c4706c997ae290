//! Announced policies over a real socket (a scripted hyper server on 127.0.0.1): an
//! announcement is trusted for its window and then expires back to learning; a 429 under
//! one lowers the rate below it, and its renewals keep it there; a remaining count is
//! spread over its reset; a policy in content bytes paces by the bytes, and one in a unit
//! the client cannot measure is ignored and reported. The client paces on a `ManualClock`:
//! a pace is seen as the next request staying unsent until the clock moves, never by
//! timing it.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use support::script::{self, Answer};
use tollgate::ManualClock;
use tollgate_client::{AdaptiveConfig, AdaptiveRate, Polite, PoliteLayer, QuotaUnit, RetryPolicy};
use tower::{Layer, ServiceExt};

type Svc = Polite<Client<HttpConnector, Full<Bytes>>>;

/// A layer pacing on `clock` at 1,000/s until told otherwise, with no retries (a retry
/// would sleep on real time).
fn paced(clock: &ManualClock) -> (PoliteLayer, Svc) {
    let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(1_000.0), clock.clone());
    let layer = PoliteLayer::with_rates(rates).retry(RetryPolicy::never());
    let svc = layer.layer(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
    (layer, svc)
}

/// Sends one GET and reads its body; returns the status.
async fn get(svc: &Svc, url: &str) -> u16 {
    let req = Request::get(url).body(Full::new(Bytes::new())).unwrap();
    let res = svc
        .clone()
        .oneshot(req)
        .await
        .expect("the local server answers");
    let status = res.status().as_u16();
    let _ = res.into_body().collect().await;
    status
}

fn key(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

/// The wait the host's next request would have now (nothing consumed).
fn held_for(layer: &PoliteLayer, key: &str) -> Option<Duration> {
    let rates = layer.rates();
    rates
        .limiter()
        .peek_with(key, rates.quota(key))
        .err()
        .and_then(|e| e.retry_after())
}

fn ok(fields: &[(&'static str, &str)]) -> Answer {
    answer(200, fields)
}

fn answer(status: u16, fields: &[(&'static str, &str)]) -> Answer {
    let fields = fields.iter().map(|&(k, v)| (k, v.to_owned())).collect();
    (status, fields, "page\n".to_owned())
}

#[tokio::test]
async fn an_announcement_expires_after_its_window_back_to_learning() {
    // Announced once (10 a minute), then never again.
    let (url, _) = script::serve(|n, _| match n {
        0 => ok(&[("ratelimit-policy", "\"p\";q=10;w=60")]),
        _ => ok(&[]),
    })
    .await;
    let clock = ManualClock::new();
    let (layer, svc) = paced(&clock);
    assert_eq!(get(&svc, &url).await, 200);
    let host = layer.host(&key(&url)).unwrap();
    assert!(host.announced);
    assert!((host.rate - 10.0 / 60.0).abs() < 1e-9);

    // Inside the window: a plain 200 does not probe above the announcement.
    clock.advance(Duration::from_secs(30));
    assert_eq!(get(&svc, &url).await, 200);
    let host = layer.host(&key(&url)).unwrap();
    assert!(host.announced);
    assert!((host.rate - 10.0 / 60.0).abs() < 1e-9);

    // Past it: learning again, from the announced rate (a success climbs by `increase`).
    clock.advance(Duration::from_secs(31));
    assert!(!layer.host(&key(&url)).unwrap().announced);
    assert_eq!(get(&svc, &url).await, 200);
    let host = layer.host(&key(&url)).unwrap();
    assert!(!host.announced, "{host:?}");
    assert!((host.rate - (10.0 / 60.0 + 0.1)).abs() < 1e-9, "{host:?}");
}

#[tokio::test]
async fn a_429_under_an_announcement_lowers_the_rate_below_it() {
    // Every answer announces 50/s; the second one is a 429 (another client spent the
    // shared quota), without Retry-After.
    let policy = ("ratelimit-policy", "\"p\";q=50;w=1");
    let (url, _) = script::serve(move |n, _| match n {
        1 => answer(429, &[policy]),
        _ => ok(&[policy]),
    })
    .await;
    let clock = ManualClock::new();
    let (layer, svc) = paced(&clock);
    assert_eq!(get(&svc, &url).await, 200);
    assert_eq!(layer.host(&key(&url)).unwrap().rate, 50.0);
    clock.advance(Duration::from_secs(1));
    assert_eq!(get(&svc, &url).await, 429);
    let host = layer.host(&key(&url)).unwrap();
    assert_eq!((host.throttled, host.rate), (1, 40.0)); // 50 × the decrease 0.8
    assert!(host.announced);
    // The renewals of the same policy keep it under: it is bisected below 50, not reset.
    for _ in 0..5 {
        clock.advance(Duration::from_secs(1));
        assert_eq!(get(&svc, &url).await, 200);
    }
    let host = layer.host(&key(&url)).unwrap();
    assert_eq!(host.rate, 40.0, "{host:?}");
    assert_eq!(
        held_for(&layer, &key(&url)),
        Some(Duration::from_millis(25))
    ); // 40/s
}

#[tokio::test]
async fn a_remaining_count_is_spread_over_its_reset() {
    // 600 a minute announced, but only 20 left for the next 40 s: 0.5 a second, not 10.
    let (url, seen) = script::serve(|n, _| match n {
        0 => ok(&[
            ("ratelimit-policy", "\"p\";q=600;w=60"),
            ("ratelimit", "\"p\";r=20;t=40"),
        ]),
        _ => ok(&[]),
    })
    .await;
    let clock = ManualClock::new();
    let (layer, svc) = paced(&clock);
    assert_eq!(get(&svc, &url).await, 200);
    let host = layer.host(&key(&url)).unwrap();
    assert_eq!(host.rate, 0.5);
    // The next turn is the spread's interval after the first send, not the old pace's
    // (1 ms) after it.
    assert_eq!(held_for(&layer, &key(&url)), Some(Duration::from_secs(2)));

    // The next request stays unsent until its turn, 2 s on.
    clock.advance(Duration::from_millis(1_900));
    let next = {
        let svc = svc.clone();
        let url = url.clone();
        tokio::spawn(async move { get(&svc, &url).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "sent before its spread turn"
    );
    clock.advance(Duration::from_millis(100));
    let status = tokio::time::timeout(Duration::from_secs(30), next)
        .await
        .expect("sent at its turn")
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(held_for(&layer, &key(&url)), Some(Duration::from_secs(2)));

    // Past the reset, the policy's own pace is back.
    clock.advance(Duration::from_secs(40));
    assert_eq!(layer.rates().rate(&key(&url)), 10.0);
}

#[tokio::test]
async fn legacy_remaining_and_reset_spread_a_learning_host() {
    // GitHub-style fields without a policy: 30 left, reset in 60 s (delta seconds).
    let (url, _) = script::serve(|_, _| {
        ok(&[
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "30"),
            ("x-ratelimit-reset", "60"),
        ])
    })
    .await;
    let clock = ManualClock::new();
    let (layer, svc) = paced(&clock);
    assert_eq!(get(&svc, &url).await, 200);
    let host = layer.host(&key(&url)).unwrap();
    assert_eq!(host.rate, 0.5); // 30 / 60 s, not the 1,000/s it was learning at
    assert!(!host.announced);
    // The next turn is 2 s after the first send, not the old pace's 1 ms.
    assert_eq!(held_for(&layer, &key(&url)), Some(Duration::from_secs(2)));
}

#[tokio::test]
async fn a_reset_of_a_second_spreads_nothing() {
    // A server refilling continuously rounds its reset up to 1 s: r / 1 would crawl.
    let (url, _) = script::serve(|_, _| {
        ok(&[
            ("ratelimit-policy", "\"p\";q=5;w=1"),
            ("ratelimit", "\"p\";r=4;t=1"),
        ])
    })
    .await;
    let clock = ManualClock::new();
    let (layer, svc) = paced(&clock);
    assert_eq!(get(&svc, &url).await, 200);
    assert_eq!(layer.host(&key(&url)).unwrap().rate, 5.0);
}

#[tokio::test]
async fn a_content_bytes_policy_paces_by_the_bytes() {
    // 2,000 bytes a second, each page 1,500 bytes.
    let (url, seen) = script::serve(|_, _| {
        let fields = vec![(
            "ratelimit-policy",
            "\"b\";q=2000;w=1;qu=\"content-bytes\"".to_owned(),
        )];
        (200, fields, "x".repeat(1_500))
    })
    .await;
    let clock = ManualClock::new();
    let (layer, svc) = paced(&clock);
    // The first request goes out before the policy is known; the second is charged the
    // first page's 1,500 bytes, out of the full 2,000.
    assert_eq!(get(&svc, &url).await, 200);
    clock.advance(Duration::from_millis(1));
    assert_eq!(get(&svc, &url).await, 200);
    let host = layer.host(&key(&url)).unwrap();
    assert!(!host.announced); // not a request rate
    assert!(host.rate >= 1_000.0); // still learning its request rate
    assert_eq!(host.ignored_unit, None);
    let snap = layer.rates().snapshot(&key(&url)).unwrap();
    assert_eq!(
        snap.byte_policy,
        Some(tollgate::Quota::new(2_000, Duration::from_secs(1)))
    );

    // The third's 1,500 bytes are not there (502 are, a millisecond on): it stays unsent
    // for the 499 ms of fake time the rest takes to come back, then goes.
    clock.advance(Duration::from_millis(1));
    let third = {
        let svc = svc.clone();
        let url = url.clone();
        tokio::spawn(async move { get(&svc, &url).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    clock.advance(Duration::from_millis(400));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        2,
        "sent before its bytes were there"
    );
    assert!(!third.is_finished());
    clock.advance(Duration::from_millis(99));
    let status = tokio::time::timeout(Duration::from_secs(30), third)
        .await
        .expect("sent once its bytes were there")
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_policy_in_a_unit_the_client_cannot_measure_is_ignored_and_reported() {
    for (unit, want) in [
        ("\"concurrent-requests\"", QuotaUnit::ConcurrentRequests),
        ("\"tokens\"", QuotaUnit::Other),
    ] {
        let policy = format!("\"c\";q=5;w=1;qu={unit}");
        let (url, _) = script::serve(move |_, _| {
            (
                200,
                vec![("ratelimit-policy", policy.clone())],
                String::new(),
            )
        })
        .await;
        let clock = ManualClock::new();
        let (layer, svc) = paced(&clock);
        assert_eq!(get(&svc, &url).await, 200);
        let host = layer.host(&key(&url)).unwrap();
        assert_eq!(host.ignored_unit, Some(want), "{unit}");
        assert!(!host.announced, "{unit}: paced as requests");
        assert!((host.rate - 1_000.1).abs() < 1e-9, "{unit}: {}", host.rate); // learning
    }
}

#[tokio::test]
async fn a_run_of_plain_5xx_under_an_announcement_keeps_its_rate() {
    // Random failures of a host that said its rate: only its refusals move the rate.
    let policy = ("ratelimit-policy", "\"p\";q=50;w=1");
    let (url, _) = script::serve(move |n, _| match n {
        0 => ok(&[policy]),
        _ => answer(503, &[policy]),
    })
    .await;
    let clock = ManualClock::new();
    let (layer, svc) = paced(&clock);
    assert_eq!(get(&svc, &url).await, 200);
    for _ in 0..6 {
        clock.advance(Duration::from_secs(1));
        assert_eq!(get(&svc, &url).await, 503);
    }
    let host = layer.host(&key(&url)).unwrap();
    assert_eq!((host.server_errors, host.rate), (6, 50.0), "{host:?}");
}

#[tokio::test]
async fn answers_that_hold_the_host_are_counted() {
    let (url, _) = script::serve(|n, _| match n {
        0 => ok(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "10")]),
        1 => answer(429, &[("retry-after", "5")]),
        _ => ok(&[("x-ratelimit-remaining", "7"), ("x-ratelimit-reset", "1")]),
    })
    .await;
    let clock = ManualClock::new();
    let (layer, svc) = paced(&clock);
    let mut holds = Vec::new();
    for status in [200, 429, 200] {
        assert_eq!(get(&svc, &url).await, status);
        holds.push(layer.host(&key(&url)).unwrap().holds);
        clock.advance(Duration::from_secs(11)); // past each hold
    }
    assert_eq!(holds, [1, 2, 2]); // a spent quota, a Retry-After; remaining 7 is no hold
}

#[tokio::test]
async fn a_weekly_policy_is_paced_at_its_own_rate() {
    // 5 a week: one every 1.4 days, slower than the configuration's lowest rate (a day).
    let (url, _) =
        script::serve(|_, _| ok(&[("ratelimit-policy", "\"weekly\";q=5;w=604800")])).await;
    let clock = ManualClock::new();
    let (layer, svc) = paced(&clock);
    assert_eq!(get(&svc, &url).await, 200);
    let host = layer.host(&key(&url)).unwrap();
    assert!(host.announced);
    assert!((host.rate - 5.0 / 604_800.0).abs() < 1e-15, "{host:?}");
    // The next request's turn: a fifth of the week after the first, not a day.
    assert_eq!(
        held_for(&layer, &key(&url)),
        Some(Duration::from_secs(604_800 / 5))
    );
}
