//! Stacked limits: a refusal by one gives back what the others admitted, also when delay
//! mode refuses or a delayed request is dropped while it waits.
//!
//! Limiters run on a `ManualClock` wherever an assertion depends on time, so nothing here
//! asserts a wall-clock duration.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tollgate::{Limiter, ManualClock, Quota};
use tollgate_tower::{Delay, Global, HeaderKey, PeerIp, RateLimitLayer};
use tower::{Layer, service_fn};

use crate::common::*;

#[tokio::test]
async fn stacked_limits_consume_nothing_on_rejection() {
    let clock = ManualClock::new();
    let per_ip: Limiter<std::net::IpAddr> = Limiter::builder(Quota::per_minute(100))
        .clock(clock.clone())
        .build();
    let per_key: Limiter<http::HeaderValue> = Limiter::builder(Quota::per_minute(2))
        .clock(clock.clone())
        .build();
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(3))
        .clock(clock.clone())
        .build();
    let layer = RateLimitLayer::builder(per_ip.clone(), PeerIp::new())
        .policy_name("per-ip")
        .unwrap()
        .stack(
            "per-key",
            per_key.clone(),
            HeaderKey::new(http::HeaderName::from_static("x-api-key")),
        )
        .unwrap()
        .stack("global", global.clone(), Global)
        .unwrap()
        .build();
    let addr = serve(layer).await;
    let a: &[(&str, &[u8])] = &[("x-api-key", b"a")];
    let b: &[(&str, &[u8])] = &[("x-api-key", b"b")];

    let (status, h) = get_once(addr, a).await;
    assert_eq!(status, StatusCode::OK);
    let policies = parse_list(&h, "ratelimit-policy");
    let names: Vec<_> = policies.iter().map(|i| i.value.clone()).collect();
    let s = |n: &str| Bare::Str(n.into());
    assert_eq!(names, [s("per-ip"), s("per-key"), s("global")]);
    assert_eq!(
        policies
            .iter()
            .map(|i| (i.int("q"), i.int("w")))
            .collect::<Vec<_>>(),
        [(100, 60), (2, 60), (3, 60)]
    );
    let limits = parse_list(&h, "ratelimit");
    assert_eq!(
        limits.iter().map(|i| i.int("r")).collect::<Vec<_>>(),
        [99, 1, 2]
    );

    assert_eq!(get_once(addr, a).await.0, StatusCode::OK);
    // Refused by a's own limit: the per-IP cell is given back, the global one never taken.
    let (status, h) = get_once(addr, a).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(ratelimit(&h).0, "per-key");
    assert_eq!(retry_after(&h), 30);

    assert_eq!(get_once(addr, b).await.0, StatusCode::OK); // the global budget's last cell
    // Refused by the global budget: b's own cell and the per-IP cell are given back.
    let (status, h) = get_once(addr, b).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(policy(&h), ("global".into(), 3, 60));
    assert_eq!(retry_after(&h), 20);

    // b used one cell of two: a check would leave 0. Without the undo it would be refused.
    let b_key = http::HeaderValue::from_static("b");
    assert_eq!(per_key.peek(&b_key).unwrap().remaining(), 0);
    // Three requests served, so the IP used 3 cells of 100: a check would leave 96.
    let ip = "127.0.0.1".parse().unwrap();
    assert_eq!(per_ip.peek(&ip).unwrap().remaining(), 96);
    // No API key: the per-key limit does not apply, the global one does.
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(ratelimit(&h).0, "global");
    clock.advance(Duration::from_secs(20));
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<_> = parse_list(&h, "ratelimit")
        .into_iter()
        .map(|i| i.value)
        .collect();
    assert_eq!(names, [s("per-ip"), s("global")]);
}

/// A delay-mode layer waiting up to `max`: per IP, one cell a second, bursts of 1, stacked
/// with a global limit of 10 a minute (returned, to be peeked at). Both run on a
/// `ManualClock` that never moves.
fn delayed_behind_global(max: Duration) -> (Limiter<()>, RateLimitLayer<PeerIp, Delay>) {
    let clock = ManualClock::new();
    let per_ip: Limiter<std::net::IpAddr> = Limiter::builder(Quota::per_second(1).allow_burst(1))
        .clock(clock.clone())
        .build();
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(10)).clock(clock).build();
    let layer = RateLimitLayer::builder(per_ip, PeerIp::new())
        .stack("global", global.clone(), Global)
        .unwrap()
        .delay(max)
        .build();
    (global, layer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_mode_gives_stacked_limits_back_when_it_refuses() {
    let (global, layer) = delayed_behind_global(Duration::from_millis(500));
    let addr = serve(layer).await;
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(parse_list(&h, "ratelimit").len(), 2);
    // The next cell is 1 s out, past the bound: refused, and the global cell given back.
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 1);
    assert_eq!(global.peek(&()).unwrap().remaining(), 8); // one used of ten
}

#[tokio::test]
async fn a_delayed_request_dropped_while_waiting_gives_stacked_cells_back() {
    let (global, layer) = delayed_behind_global(Duration::from_secs(5));
    let svc = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::from("hello")))
    }));
    let request = || {
        let mut req = Request::new(());
        req.extensions_mut()
            .insert("192.0.2.1:1".parse::<SocketAddr>().unwrap());
        req
    };
    use tower::ServiceExt;
    let ok = svc.clone().oneshot(request()).await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    // The next waits 1 s of manual time, which never passes: the client gives up.
    let gave_up = tokio::time::timeout(Duration::from_millis(20), svc.clone().oneshot(request()));
    assert!(gave_up.await.is_err());
    assert_eq!(global.peek(&()).unwrap().remaining(), 8); // only the served request's cell
}

/// Each limit of a layer has a name of its own: it tells its items, gauges and refusals
/// apart. A stacked limit may not take the layer's (`"default"` unless named) or another
/// stacked one's, nor the layer a stacked one's.
#[test]
fn a_policy_name_is_one_limits_only() {
    use tollgate_tower::PolicyNameError;

    let limiter = || Limiter::keyed(Quota::per_second(5));
    let taken = |result: Result<_, PolicyNameError>| {
        let Err(err) = result else {
            panic!("a name taken, accepted");
        };
        assert!(err.to_string().contains("taken"), "{err}");
    };
    taken(RateLimitLayer::builder(limiter(), Global).stack("default", limiter(), Global));
    taken(
        RateLimitLayer::builder(limiter(), Global)
            .policy_name("api")
            .unwrap()
            .stack("api", limiter(), Global),
    );
    taken(
        RateLimitLayer::builder(limiter(), Global)
            .stack("global", limiter(), Global)
            .unwrap()
            .stack("global", limiter(), Global),
    );
    taken(
        RateLimitLayer::builder(limiter(), Global)
            .stack("global", limiter(), Global)
            .unwrap()
            .policy_name("global"),
    );
    // Distinct names are fine, and a layer may rename itself.
    let layer = RateLimitLayer::builder(limiter(), Global)
        .stack("per-key", limiter(), Global)
        .unwrap()
        .policy_name("per-ip")
        .unwrap()
        .policy_name("per-client")
        .unwrap()
        .build();
    let names: Vec<String> = layer.stats().into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["per-client", "per-key"]);
}
