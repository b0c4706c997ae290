//! The layer's rules, over a scripted inner client: which requests are retried, what feeds
//! the rate, what the per-host snapshot counts. (The real sockets are in `converge.rs`.)

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response};
use tollgate::Quota;
use tollgate_client::{AdaptiveConfig, PoliteLayer, RetryPolicy};
use tower::{Layer, ServiceExt, service_fn};

/// A client answering each request with the next status of `script` (the last one
/// repeated), with `fields` on every response; it counts the requests it saw.
fn scripted(
    script: &'static [u16],
    fields: &'static [(&'static str, &'static str)],
) -> (
    impl tower::Service<Request<()>, Response = Response<()>, Error = Infallible, Future = impl Send>
    + Clone
    + Send
    + 'static,
    Arc<Mutex<usize>>,
) {
    let seen = Arc::new(Mutex::new(0usize));
    let count = Arc::clone(&seen);
    let svc = service_fn(move |_req: Request<()>| {
        let count = Arc::clone(&count);
        async move {
            let n = {
                let mut c = count.lock().unwrap();
                *c += 1;
                *c - 1
            };
            let status = script[n.min(script.len() - 1)];
            let mut res = Response::builder().status(status);
            for (k, v) in fields {
                res = res.header(*k, *v);
            }
            Ok::<_, Infallible>(res.body(()).unwrap())
        }
    });
    (svc, seen)
}

fn layer() -> PoliteLayer {
    PoliteLayer::new(AdaptiveConfig::new(1_000.0).ceiling(10_000.0)).retry(
        RetryPolicy::new()
            .base(Duration::from_millis(1))
            .max_retries(3),
    )
}

fn send(
    layer: &PoliteLayer,
    svc: impl tower::Service<
        Request<()>,
        Response = Response<()>,
        Error = Infallible,
        Future = impl Send,
    > + Clone
    + Send
    + 'static,
    method: Method,
) -> u16 {
    let polite = layer.layer(svc);
    let req = Request::builder()
        .method(method)
        .uri("http://h.example/")
        .body(())
        .unwrap();
    futures_executor::block_on(polite.oneshot(req))
        .unwrap()
        .status()
        .as_u16()
}

#[test]
fn a_5xx_is_retried_for_idempotent_methods_only() {
    for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
        let l = layer();
        let (svc, seen) = scripted(&[503, 502, 200], &[]);
        assert_eq!(send(&l, svc, method), 200);
        assert_eq!(*seen.lock().unwrap(), 3);
        let h = l.host("h.example:80").unwrap();
        assert_eq!(
            (h.requests, h.retries, h.server_errors, h.successes),
            (3, 2, 2, 1)
        );
    }
    let l = layer();
    let (svc, seen) = scripted(&[503, 200], &[]);
    assert_eq!(send(&l, svc, Method::POST), 503);
    assert_eq!(*seen.lock().unwrap(), 1);
}

#[test]
fn a_4xx_other_than_429_is_never_retried() {
    const SCRIPTS: [&[u16]; 5] = [
        &[400, 200],
        &[401, 200],
        &[403, 200],
        &[404, 200],
        &[410, 200],
    ];
    for script in SCRIPTS {
        let status = script[0];
        let l = layer();
        let (svc, seen) = scripted(script, &[]);
        assert_eq!(send(&l, svc, Method::GET), status);
        assert_eq!(*seen.lock().unwrap(), 1);
        assert_eq!(l.host("h.example:80").unwrap().retries, 0);
    }
}

#[test]
fn retries_are_bounded() {
    let l = layer();
    let (svc, seen) = scripted(&[500], &[]);
    assert_eq!(send(&l, svc, Method::GET), 500);
    assert_eq!(*seen.lock().unwrap(), 4); // the try and 3 retries
    assert_eq!(l.host("h.example:80").unwrap().gave_up, 1);
}

#[test]
fn a_429_lowers_the_rate_and_a_repeated_one_gives_up() {
    let l = layer();
    let (svc, seen) = scripted(&[429], &[("retry-after", "0")]);
    assert_eq!(send(&l, svc, Method::GET), 429);
    assert_eq!(*seen.lock().unwrap(), 2);
    let h = l.host("h.example:80").unwrap();
    assert_eq!((h.throttled, h.retries, h.gave_up), (2, 1, 1));
    assert_eq!(h.rate, 800.0);
    assert!(h.last_decrease.is_some());
    let last = h.last_signal.unwrap();
    assert_eq!(last.retry_after, Some(Duration::ZERO));
}

#[test]
fn a_503_with_retry_after_throttles_one_without_does_not() {
    let l = layer();
    let (svc, _) = scripted(&[503, 200], &[("retry-after", "0")]);
    assert_eq!(send(&l, svc, Method::GET), 200);
    assert_eq!(l.rates().rate("h.example:80"), 800.0);
    let l = layer();
    let (svc, _) = scripted(&[503, 200], &[]);
    assert_eq!(send(&l, svc, Method::GET), 200);
    assert!(l.rates().rate("h.example:80") > 1_000.0); // one success: climbing
}

#[test]
fn an_announced_policy_is_paced_to() {
    let l = layer();
    let (svc, _) = scripted(&[200], &[("ratelimit-policy", "\"p\";q=100;w=2")]);
    assert_eq!(send(&l, svc, Method::GET), 200);
    let h = l.host("h.example:80").unwrap();
    assert!(h.announced);
    assert_eq!(h.rate, 50.0);
    assert_eq!(
        l.rates().snapshot("h.example:80").unwrap().announced,
        Some(Quota::new(100, Duration::from_secs(2)))
    );
}

#[test]
fn a_custom_key_and_unkeyed_requests() {
    let l = layer().key(|parts| {
        parts
            .headers
            .get("x-tenant")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    let (svc, _) = scripted(&[200], &[]);
    assert_eq!(send(&l, svc, Method::GET), 200); // no x-tenant: unpaced, untracked
    assert!(l.hosts().is_empty());
}

#[test]
fn the_host_table_is_bounded() {
    let l = layer().track_hosts(2);
    let (svc, _) = scripted(&[200], &[]);
    let polite = l.layer(svc);
    futures_executor::block_on(async {
        for host in ["a", "b", "c", "d"] {
            let req = Request::get(format!("http://{host}.example/"))
                .body(())
                .unwrap();
            polite.clone().oneshot(req).await.unwrap();
        }
    });
    let keys: Vec<_> = l.hosts().into_iter().map(|h| h.key).collect();
    assert_eq!(keys, ["c.example:80", "d.example:80"]);
}

#[test]
fn ratelimit_remaining_zero_holds_the_host_until_the_reset() {
    let l = layer();
    let (svc, _) = scripted(&[200], &[("ratelimit", "\"p\";r=0;t=30")]);
    assert_eq!(send(&l, svc, Method::GET), 200);
    // 30 s from the response: no test machine is that slow.
    let wait = l
        .rates()
        .check("h.example:80")
        .unwrap_err()
        .retry_after()
        .unwrap();
    assert!(wait > Duration::from_secs(20), "{wait:?}");
}

/// Three GETs at once through a layer at 10/s on a manual clock, the third answered 429;
/// the clock moves by `steps` while they wait their turns (each polled after each step).
/// Returns the host's rate, its 429 count and the rate's bracket top after.
fn third_throttled_after(steps: &[u64]) -> (f64, u64, Option<f64>) {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use tollgate::ManualClock;
    use tollgate_client::AdaptiveRate;

    let clock = ManualClock::new();
    let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(10.0), clock.clone());
    let l = PoliteLayer::with_rates(rates).retry(RetryPolicy::never());
    let (svc, seen) = scripted(&[200, 200, 429], &[("retry-after", "0")]);
    let polite = l.layer(svc);
    let mut futs: Vec<_> = (0..3)
        .map(|_| {
            let req = Request::get("http://h.example/").body(()).unwrap();
            Some(Box::pin(polite.clone().oneshot(req)))
        })
        .collect();
    let mut cx = Context::from_waker(Waker::noop());
    for &ms in std::iter::once(&0).chain(steps) {
        clock.advance(Duration::from_millis(ms));
        for slot in &mut futs {
            if let Some(f) = slot {
                if let Poll::Ready(res) = f.as_mut().poll(&mut cx) {
                    res.unwrap();
                    *slot = None;
                }
            }
        }
    }
    assert!(futs.iter().all(Option::is_none), "a request still waits");
    assert_eq!(*seen.lock().unwrap(), 3);
    let h = l.host("h.example:80").unwrap();
    let snap = l.rates().snapshot("h.example:80").unwrap();
    (h.rate, h.throttled, snap.throttled_at)
}

#[test]
fn a_429_of_requests_the_client_sent_bunched_does_not_lower_the_rate() {
    // Paced: sent at 0, 100 and 200 ms (10/s), so the 429 is about the rate.
    let (rate, throttled, upper) = third_throttled_after(&[100, 100]);
    assert_eq!(throttled, 1);
    assert!(rate < 10.0, "{rate}");
    assert!(upper.is_some());
    // The client stalled: the second and third turns came due together at 250 ms and went
    // out at once. The server's burst ran out, which says nothing of its rate.
    let (rate, throttled, upper) = third_throttled_after(&[250]);
    assert_eq!(throttled, 1);
    assert!(rate > 10.0, "{rate}"); // the two successes climbed, the 429 did not cut
    assert_eq!(upper, None);
}
