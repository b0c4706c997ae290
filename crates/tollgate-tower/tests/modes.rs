//! The layer's modes behind a real hyper server: delay mode waits up to its bound and then
//! refuses; dry-run mode decides, counts and marks, but never refuses.
//!
//! Limiters run on a `ManualClock` wherever an assertion depends on time, so nothing here
//! asserts a wall-clock duration.

mod common;

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use tollgate::{Limiter, ManualClock, Quota};
use tollgate_tower::{DryRunRefusal, Global, HeaderKey, PeerIp, RateLimitLayer};
use tower::service_fn;

use crate::common::*;

/// Returns once a request waits at the head of the queue of a 1/s key (burst 1) whose
/// cell was taken at time 0: the head reserves its cell, so a peek sees the key 2 s out.
async fn queued_at_the_head(limiter: &Limiter<()>) {
    let mut polls = 0;
    while limiter.peek(&()).unwrap_err().retry_after() != Some(Duration::from_secs(2)) {
        polls += 1;
        assert!(polls < 2000, "the request never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_mode_waits_up_to_its_bound_then_refuses() {
    let clock = ManualClock::new();
    let limiter: Limiter<()> = Limiter::builder(Quota::per_second(1).allow_burst(1))
        .clock(clock.clone())
        .build();
    let layer = RateLimitLayer::builder(limiter.clone(), Global)
        .delay(Duration::from_millis(1500))
        .build();
    let addr = serve(layer.clone()).await;

    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::OK); // a free cell: no wait
    assert_eq!(ratelimit(&h), ("default".into(), 0, 1));

    // The next one waits 1 s (within the bound) at the head of the queue, which reserves its
    // cell: a peek then sees the key 2 s out.
    let waiting = tokio::spawn(get_once(addr, &[]));
    queued_at_the_head(&limiter).await;
    // Its turn would come 2 s out, past the bound: refused at once.
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 2);
    assert!(!waiting.is_finished());

    clock.advance(Duration::from_secs(1));
    let (status, h) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(policy(&h), ("default".into(), 1, 1));
    assert_eq!(ratelimit(&h), ("default".into(), 0, 1));
    let counts = layer.counts();
    assert_eq!(
        (counts.admitted, counts.delayed, counts.rejected),
        (1, 1, 1)
    );
}

/// Delay mode: a request dropped while it waits (its client hung up; or its future dropped
/// before it was ever polled) is counted as abandoned, so every request counts once, and
/// its turn goes to the next in line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_while_it_waits_counts_as_abandoned() {
    use tower::{Layer, Service, ServiceExt};

    let clock = ManualClock::new();
    let limiter: Limiter<()> = Limiter::builder(Quota::per_second(1).allow_burst(1))
        .clock(clock.clone())
        .build();
    let layer = RateLimitLayer::builder(limiter.clone(), Global)
        .delay(Duration::from_secs(10))
        .build();
    let addr = serve(layer.clone()).await;
    assert_eq!(get_once(addr, &[]).await.0, StatusCode::OK);

    // A client that hangs up while its request waits for its turn (1 s out).
    let hung_up = tokio::spawn(get_once(addr, &[]));
    queued_at_the_head(&limiter).await;
    hung_up.abort();
    let mut polls = 0;
    while layer.counts().abandoned == 0 {
        polls += 1;
        assert!(polls < 2000, "the hang-up was never counted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // A future dropped before its first poll.
    let mut svc = layer.layer(tower::service_fn(hello_string));
    svc.ready().await.unwrap();
    drop(svc.call(Request::new(())));

    // The turn the hung-up request left goes to the next in line: 1 s out, not 2.
    let next = tokio::spawn(get_once(addr, &[]));
    queued_at_the_head(&limiter).await;
    clock.advance(Duration::from_secs(1));
    let (status, _) = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("served at the turn the abandoned request left")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    let counts = layer.counts();
    assert_eq!(
        (
            counts.admitted,
            counts.delayed,
            counts.abandoned,
            counts.rejected
        ),
        (1, 1, 2, 0)
    );
}

/// The hello service, answering with the status a dry-run layer would have refused with
/// in `x-would-be` (none if admitted).
fn dry_run_reporter() -> HelloService {
    tower::util::BoxCloneSyncService::new(service_fn(|req: Request<Incoming>| async move {
        let mut res = Response::new(Full::new(Bytes::from_static(b"hello")));
        if let Some(refusal) = req.extensions().get::<DryRunRefusal>() {
            res.headers_mut()
                .insert("x-would-be", refusal.status().as_u16().into());
            if let Some(retry) = refusal.headers().get("retry-after") {
                res.headers_mut()
                    .insert("x-would-retry-after", retry.clone());
            }
        }
        Ok::<_, Infallible>(res)
    }))
}

#[tokio::test]
async fn dry_run_decides_counts_and_marks_but_never_refuses() {
    let (clock, limiter) = manual(Quota::per_minute(2));
    let layer = RateLimitLayer::builder(limiter.clone(), PeerIp::new())
        .dry_run()
        .build();
    let addr = serve_over(layer.clone(), dry_run_reporter()).await;
    let mut conn = connect(addr).await;
    for r in [1, 0] {
        let (status, h) = get(&mut conn, &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert!(h.get("x-would-be").is_none());
        assert_eq!(ratelimit(&h).1, r);
    }
    for _ in 0..3 {
        let (status, h) = get(&mut conn, &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(h["x-would-be"], "429");
        assert_eq!(h["x-would-retry-after"], "30");
        // Nothing tells the client.
        assert!(h.get("retry-after").is_none() && h.get("ratelimit").is_none());
    }
    // The would-be refusals consumed nothing: after one interval, one cell again.
    clock.advance(Duration::from_secs(30));
    let (_, h) = get(&mut conn, &[]).await;
    assert!(h.get("x-would-be").is_none());
    let (_, h) = get(&mut conn, &[]).await;
    assert_eq!(h["x-would-be"], "429");
    let counts = layer.counts();
    assert_eq!(
        (counts.admitted, counts.dry_run_refused, counts.rejected),
        (3, 4, 0)
    );
    assert_eq!(limiter.stats().denied, 4);

    // A request without a key would have been a 400.
    let api_key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
    let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(2)), api_key)
        .dry_run()
        .build();
    let addr = serve_over(layer.clone(), dry_run_reporter()).await;
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(
        (status, &h["x-would-be"]),
        (StatusCode::OK, &http::HeaderValue::from_static("400"))
    );
    assert_eq!(layer.counts().dry_run_refused, 1);
    assert_eq!(layer.counts().missing_key_rejected, 0);

    // A request costing more than the burst would have been a 413, with no Retry-After.
    let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(2)), PeerIp::new())
        .cost_for(|parts: &http::request::Parts| {
            if parts.headers.contains_key("x-big") {
                3
            } else {
                1
            }
        })
        .dry_run()
        .build();
    let addr = serve_over(layer.clone(), dry_run_reporter()).await;
    let mut conn = connect(addr).await;
    let (status, h) = get(&mut conn, &[("x-big", b"1")]).await;
    assert_eq!(
        (status, &h["x-would-be"]),
        (StatusCode::OK, &http::HeaderValue::from_static("413"))
    );
    assert!(h.get("x-would-retry-after").is_none());
    assert_eq!(layer.counts().dry_run_refused, 1);
}

/// Dry run with stacked limits: a refusal by either the layer's own limit or a stacked one
/// lets the request through, marked, and takes nothing from the other limits (as in reject
/// mode, what they admitted is given back).
#[tokio::test]
async fn dry_run_refusals_by_a_stacked_limit_consume_nothing() {
    let (_clock, per_ip) = manual(Quota::per_minute(100));
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(1))
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder(per_ip.clone(), PeerIp::new())
        .stack("global", global.clone(), Global)
        .unwrap()
        .dry_run()
        .build();
    let addr = serve_over(layer.clone(), dry_run_reporter()).await;
    let mut conn = connect(addr).await;
    let (status, h) = get(&mut conn, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(h.get("x-would-be").is_none());
    for _ in 0..3 {
        // The global budget refuses: served, marked, and the per-IP cell given back.
        let (status, h) = get(&mut conn, &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(h["x-would-be"], "429");
        assert!(h.get("retry-after").is_none() && h.get("ratelimit").is_none());
    }
    // One request admitted of 100: a check would leave 98. Without the give-back, 95.
    let ip = "127.0.0.1".parse().unwrap();
    assert_eq!(per_ip.peek(&ip).unwrap().remaining(), 98);
    assert_eq!((global.stats().admitted, global.stats().denied), (1, 3));
    let counts = layer.counts();
    assert_eq!(
        (counts.admitted, counts.dry_run_refused, counts.rejected),
        (1, 3, 0)
    );

    // The other way round: the layer's own limit refuses, the stacked one is never asked.
    let (_clock, per_ip) = manual(Quota::per_minute(1));
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(10))
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder(per_ip, PeerIp::new())
        .stack("global", global.clone(), Global)
        .unwrap()
        .dry_run()
        .build();
    let addr = serve_over(layer.clone(), dry_run_reporter()).await;
    let mut conn = connect(addr).await;
    assert!(get(&mut conn, &[]).await.1.get("x-would-be").is_none());
    for _ in 0..3 {
        let (status, h) = get(&mut conn, &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(h["x-would-be"], "429");
    }
    assert_eq!(global.peek(&()).unwrap().remaining(), 8); // one used of ten
    assert_eq!(layer.counts().dry_run_refused, 3);
}

/// A request's cost in cells, from its `x-cost` header (1 without one): the `cost_for` of
/// the tests below.
fn cost(parts: &http::request::Parts) -> u32 {
    parts
        .headers
        .get("x-cost")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(1)
}

/// A request's cost in cells (`cost_for`), in reject and delay mode: what it costs is spent,
/// a cost of 0 spends nothing, and a cost above the burst is a `413` without `Retry-After`
/// (it could never be admitted), in either mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_costs_what_cost_for_says() {
    let limiter: Limiter<()> = Limiter::builder(Quota::per_minute(10))
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder(limiter.clone(), Global)
        .cost_for(cost)
        .build();
    let addr = serve(layer.clone()).await;
    let costing = |n: &'static [u8]| [("x-cost", n)];
    let (status, h) = get_once(addr, &costing(b"7")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ratelimit(&h).1, 3, "7 of 10 spent");
    assert_eq!(
        get_once(addr, &costing(b"4")).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    let (status, h) = get_once(addr, &costing(b"0")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ratelimit(&h).1, 3, "a cost of 0 spends nothing");
    let (status, h) = get_once(addr, &costing(b"11")).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(h.get("retry-after").is_none());
    assert_eq!(get_once(addr, &costing(b"3")).await.0, StatusCode::OK);
    assert_eq!((layer.counts().admitted, layer.counts().rejected), (3, 2));

    // Delay mode: a cost above the burst is refused at once, not waited for.
    let limiter: Limiter<()> = Limiter::builder(Quota::per_minute(10))
        .clock(ManualClock::new())
        .build();
    let delayed = RateLimitLayer::builder(limiter, Global)
        .cost_for(cost)
        .delay(Duration::from_secs(3600))
        .build();
    let addr = serve(delayed).await;
    assert_eq!(
        get_once(addr, &costing(b"11")).await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    let (status, h) = get_once(addr, &costing(b"10")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ratelimit(&h).1, 0, "all ten cells at once");
}

/// A refused request of several cells says what the key holds, as the admission before it
/// did: the cells left (fewer than it asked for, not none) and when all are back, with
/// `Retry-After` when its own cells come; in reject mode and when delay mode's bound is
/// passed. (The fields once took the wait for all the cells as the wait for one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_costly_request_says_what_the_key_holds() {
    let costing = |n: &'static [u8]| [("x-cost", n)];
    // A cell every 12 s, burst 5.
    let limiter = || -> Limiter<()> {
        Limiter::builder(Quota::per_minute(5))
            .clock(ManualClock::new())
            .build()
    };
    let layer = RateLimitLayer::builder(limiter(), Global)
        .cost_for(cost)
        .legacy_headers(true)
        .build();
    let addr = serve(layer).await;
    let (status, h) = get_once(addr, &costing(b"4")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ratelimit(&h), ("default".into(), 1, 48));
    let (status, h) = get_once(addr, &costing(b"2")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(ratelimit(&h), ("default".into(), 1, 48));
    assert_eq!(retry_after(&h), 12);
    assert_eq!(h["x-ratelimit-remaining"], "1");
    assert_eq!(h["x-ratelimit-reset"], "48");
    let (status, h) = get_once(addr, &costing(b"5")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(ratelimit(&h), ("default".into(), 1, 48));
    assert_eq!(retry_after(&h), 48);

    // Delay mode, bound 30 s: the 5 cells would come in 48 s, so refused at once.
    let delayed = RateLimitLayer::builder(limiter(), Global)
        .cost_for(cost)
        .delay(Duration::from_secs(30))
        .build();
    let addr = serve(delayed).await;
    assert_eq!(get_once(addr, &costing(b"4")).await.0, StatusCode::OK);
    let (status, h) = get_once(addr, &costing(b"5")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(ratelimit(&h), ("default".into(), 1, 48));
    assert_eq!(retry_after(&h), 48);
}

/// Delay mode keyed by `key` (1 cell a second, bursts of `burst`, waits up to 10 s, on the
/// manual clock returned) in front of a handler that serves one request at a time (a
/// `ConcurrencyLimit` of one): what the delay-mode capacity tests below share.
fn delayed_behind_one_permit<E: tollgate_tower::KeyExtractor>(
    burst: u32,
    key: E,
) -> (
    ManualClock,
    tollgate_tower::RateLimit<
        tower::limit::ConcurrencyLimit<HelloString>,
        E,
        tollgate_tower::Delay,
    >,
)
where
    E::Key: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
{
    use tower::Layer;

    let clock = ManualClock::new();
    let limiter = Limiter::builder(Quota::per_second(1).allow_burst(burst))
        .clock(clock.clone())
        .build();
    let layer = RateLimitLayer::builder(limiter, key)
        .delay(Duration::from_secs(10))
        .build();
    let hello: HelloString = service_fn(hello_string);
    (
        clock,
        layer.layer(tower::limit::ConcurrencyLimit::new(hello, 1)),
    )
}

/// The handler behind [`delayed_behind_one_permit`].
type HelloString = tower::util::ServiceFn<
    fn(Request<()>) -> std::future::Ready<Result<Response<String>, Infallible>>,
>;

fn hello_string(_req: Request<()>) -> std::future::Ready<Result<Response<String>, Infallible>> {
    std::future::ready(Ok(Response::new(String::new())))
}

/// The delay-mode tests' key: the `x-client` header.
fn client_key() -> HeaderKey {
    HeaderKey::new(http::HeaderName::from_static("x-client"))
}

/// Delay mode: a request asleep holds none of the inner service's capacity. Behind a
/// `ConcurrencyLimit` of one, client A's two delayed requests leave the permit to client B,
/// which is served at once, and get it in turn when their waits end.
#[tokio::test]
async fn a_delayed_request_holds_none_of_the_inner_services_capacity() {
    use tower::ServiceExt;

    let (clock, svc) = delayed_behind_one_permit(1, client_key());
    let request = |client: &str| {
        Request::get("/")
            .header("x-client", client)
            .body(())
            .unwrap()
    };
    assert_eq!(
        svc.clone().oneshot(request("a")).await.unwrap().status(),
        200
    );
    // A's next two wait for their turns (1 s and 2 s out on the stopped clock).
    let a1 = tokio::spawn(svc.clone().oneshot(request("a")));
    let a2 = tokio::spawn(svc.clone().oneshot(request("a")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!a1.is_finished() && !a2.is_finished());
    let b = tokio::time::timeout(Duration::from_secs(5), svc.clone().oneshot(request("b")))
        .await
        .expect("B waits for no permit held by A's sleeping requests")
        .unwrap();
    assert_eq!(b.status(), 200);
    clock.advance(Duration::from_secs(2));
    for a in [a1, a2] {
        let res = tokio::time::timeout(Duration::from_secs(5), a)
            .await
            .expect("served once its wait ends")
            .unwrap()
            .unwrap();
        assert_eq!(res.status(), 200);
    }
}

/// Delay mode with one service kept across calls (as a `Buffer`'s worker keeps it) behind a
/// `ConcurrencyLimit` of one: each call goes through, admitted at once or after its wait; the
/// capacity readied for a call that waits is not pinned by the service kept.
#[tokio::test]
async fn a_service_kept_across_calls_in_delay_mode_goes_on_serving() {
    use tower::{Service, ServiceExt};

    let (clock, mut svc) = delayed_behind_one_permit(2, Global);
    for call in 0..4 {
        let ready = tokio::time::timeout(Duration::from_secs(5), svc.ready())
            .await
            .expect("the kept service readies")
            .unwrap();
        let response = tokio::spawn(ready.call(Request::new(())));
        if call >= 2 {
            // Past the burst: this one waits a second for its turn.
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(!response.is_finished());
            clock.advance(Duration::from_secs(1));
        }
        let response = tokio::time::timeout(Duration::from_secs(5), response)
            .await
            .expect("served")
            .unwrap()
            .unwrap();
        assert_eq!(response.status(), 200, "call {call}");
    }
}

/// Delay mode, one service kept across calls behind a `ConcurrencyLimit` of one: a request
/// answered without the inner service (a missing key's 400) gives back what its
/// `poll_ready` reserved, so a request waiting on a clone gets the permit when its turn
/// comes.
#[tokio::test]
async fn a_refusal_in_delay_mode_pins_no_capacity_a_waiting_request_needs() {
    use tower::{Service, ServiceExt};

    let (clock, mut svc) = delayed_behind_one_permit(1, client_key());
    let keyed = || Request::get("/").header("x-client", "a").body(()).unwrap();
    let first = svc.ready().await.unwrap().call(keyed()).await.unwrap();
    assert_eq!(first.status(), 200);
    let waiting = tokio::spawn(svc.ready().await.unwrap().call(keyed()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let keyless = tokio::time::timeout(Duration::from_secs(5), async {
        svc.ready().await.unwrap().call(Request::new(())).await
    })
    .await
    .expect("the kept service readies")
    .unwrap();
    assert_eq!(keyless.status(), StatusCode::BAD_REQUEST);
    clock.advance(Duration::from_secs(1));
    let waited = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("served once its turn comes")
        .unwrap()
        .unwrap();
    assert_eq!(waited.status(), 200);
}
