//! The `tracing` span and events over real sockets (scripted hyper servers on 127.0.0.1,
//! hyper-util's client), seen by a subscriber that keeps everything: each attempt's wait
//! is a span; a hold is an info event with its length; a rate change a debug event; the
//! retry budget's refusals are warnings, sampled to one per host per second of the rates'
//! clock (a `ManualClock`) with the count left out. The tests share the process's
//! subscriber, so each reads only its own host's records.

mod support;

use std::time::Duration;

use http::Request;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::events::{Events, Seen};
use support::script::serve;
use tollgate::ManualClock;
use tollgate_client::{AdaptiveConfig, AdaptiveRate, PoliteLayer, RetryBudget, RetryPolicy};
use tower::{Layer, ServiceExt};
use tracing::Level;

async fn get(layer: &PoliteLayer, url: &str) -> u16 {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let req = Request::get(url).body(Empty::new()).unwrap();
    let res = layer.layer(client).oneshot(req).await.unwrap();
    res.status().as_u16()
}

fn key(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

/// The events (not spans) whose message is `message`.
fn events(all: &[Seen], message: &str) -> Vec<Seen> {
    all.iter()
        .filter(|s| s.span.is_none() && s.message() == message)
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_hold_is_an_info_event_and_the_rate_change_a_debug_one() {
    let log = Events::get();
    let (url, _) = serve(|_, _| (429, vec![("retry-after", "7".into())], String::new())).await;
    let layer = PoliteLayer::new(AdaptiveConfig::new(100.0)).retry(RetryPolicy::never());
    assert_eq!(get(&layer, &url).await, 429);
    let seen = log.of_host(&key(&url));
    let held = events(&seen, "host held by the server");
    assert_eq!(held.len(), 1, "{seen:?}");
    assert_eq!(held[0].level, Level::INFO);
    assert_eq!(held[0].target, "tollgate_client");
    assert_eq!(held[0].field("hold_ms"), Some("7000"));
    assert_eq!(held[0].field("status"), Some("429"));
    let moved = events(&seen, "host's rate changed");
    assert_eq!(moved.len(), 1, "{seen:?}");
    assert_eq!(moved[0].level, Level::DEBUG);
    assert_eq!(moved[0].field("from"), Some("100.0"));
    assert_eq!(moved[0].field("to"), Some("80.0")); // as `layer.host(..).rate` says
    assert_eq!(layer.host(&key(&url)).unwrap().rate, 80.0);
}

#[tokio::test]
async fn each_attempt_waits_in_a_debug_span() {
    let log = Events::get();
    let (url, _) = serve(|n, _| match n {
        0 => (503, vec![], String::new()),
        _ => (200, vec![], String::new()),
    })
    .await;
    let policy = RetryPolicy::new().base(Duration::from_millis(1));
    let layer = PoliteLayer::new(AdaptiveConfig::new(1_000.0)).retry(policy);
    assert_eq!(get(&layer, &url).await, 200); // a 503, then its retry
    assert_eq!(get(&layer, &url).await, 200);
    let spans: Vec<Seen> = log
        .of_host(&key(&url))
        .into_iter()
        .filter(|s| s.span == Some("polite_wait"))
        .collect();
    assert!(spans.iter().all(|s| s.level == Level::DEBUG), "{spans:?}");
    let attempts: Vec<_> = spans.iter().map(|s| s.field("attempt").unwrap()).collect();
    assert_eq!(attempts, ["0", "1", "0"]);
    assert_eq!(layer.host(&key(&url)).unwrap().requests, 3);
}

#[tokio::test]
async fn budget_refusals_are_sampled_per_host_per_second() {
    let log = Events::get();
    let (url, _) = serve(|_, _| (503, vec![], String::new())).await;
    let clock = ManualClock::new();
    let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(1_000.0), clock.clone());
    // No budget at all: every retry the policy wants is refused.
    let budget = RetryBudget::new(0.0).floor(0.0);
    let layer = PoliteLayer::with_rates(rates).retry(RetryPolicy::new().budget(budget));
    // Five refusals within a second of the rates' clock: the first one logs.
    for _ in 0..5 {
        assert_eq!(get(&layer, &url).await, 503);
        clock.advance(Duration::from_millis(10));
    }
    let refusals = |log: &Events| {
        events(
            &log.of_host(&key(&url)),
            "retry refused by the host's retry budget",
        )
    };
    let seen = refusals(&log);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].level, Level::WARN);
    assert_eq!(seen[0].field("suppressed"), Some("0"));
    // A second on: the next logs, with the four left out.
    clock.advance(Duration::from_secs(1));
    assert_eq!(get(&layer, &url).await, 503);
    let seen = refusals(&log);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[1].field("suppressed"), Some("4"));
    assert_eq!(layer.host(&key(&url)).unwrap().budget_refused, 6);
}
