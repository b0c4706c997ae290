//! One limit and one set of counts over every connection and clone of the layer behind a
//! real hyper server, and the auto traits that sharing needs.
//!
//! Limiters run on a `ManualClock` wherever an assertion depends on time, so nothing here
//! asserts a wall-clock duration.

mod common;

use http::StatusCode;
use hyper::body::Incoming;
use tollgate::{Limiter, ManualClock, Quota};
use tollgate_tower::{ClientIp, Global, HeaderKey, MissingKey, PeerIp, RateLimitLayer};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_share_one_limit_exactly() {
    let clock = ManualClock::new(); // no time passes: exactly the burst is admitted
    let limiter = Limiter::builder(Quota::per_minute(50)).clock(clock).build();
    let layer = RateLimitLayer::builder(limiter.clone(), Global).build();
    let addr = serve(layer).await;
    let mut tasks = Vec::new();
    for _ in 0..20 {
        tasks.push(tokio::spawn(async move {
            let mut conn = connect(addr).await;
            let mut statuses = Vec::new();
            for _ in 0..5 {
                statuses.push(get(&mut conn, &[]).await.0);
            }
            statuses
        }));
    }
    let mut ok = 0;
    let mut refused = 0;
    for task in tasks {
        for status in task.await.unwrap() {
            match status {
                StatusCode::OK => ok += 1,
                StatusCode::TOO_MANY_REQUESTS => refused += 1,
                other => panic!("unexpected {other}"),
            }
        }
    }
    assert_eq!((ok, refused), (50, 50));
    let stats = limiter.stats();
    assert_eq!((stats.admitted, stats.denied), (50, 50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_are_shared_by_every_connection() {
    let (_clock, limiter) = manual(Quota::per_minute(10));
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .on_missing_key(MissingKey::Reject)
        .build();
    let addr = serve(layer.clone()).await;
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(async move {
                let mut conn = connect(addr).await;
                for _ in 0..4 {
                    get(&mut conn, &[]).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let counts = layer.counts();
    assert_eq!((counts.admitted, counts.rejected), (10, 22));
    assert_eq!(layer.stats()[0].1.admitted, 10);
    assert_eq!(counts.missing_key_rejected + counts.missing_key_allowed, 0);
}

#[tokio::test]
async fn missing_key_outcomes_are_counted() {
    let api_key = || HeaderKey::new(http::HeaderName::from_static("x-api-key"));
    let strict = RateLimitLayer::new(Quota::per_minute(10), api_key());
    let lax = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(10)), api_key())
        .on_missing_key(MissingKey::Allow)
        .build();
    let (a, b) = (serve(strict.clone()).await, serve(lax.clone()).await);
    for _ in 0..2 {
        assert_eq!(get_once(a, &[]).await.0, StatusCode::BAD_REQUEST);
        assert_eq!(get_once(b, &[]).await.0, StatusCode::OK);
    }
    assert_eq!(strict.counts().missing_key_rejected, 2);
    assert_eq!(lax.counts().missing_key_allowed, 2);
    assert_eq!(strict.counts().admitted + lax.counts().admitted, 0);
}

#[test]
fn layers_services_and_futures_are_send_and_sync() {
    use tollgate_tower::{Delay, DryRun, RateLimit, ResponseFuture};
    fn shared<T: Clone + Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    shared::<RateLimitLayer<PeerIp>>();
    shared::<RateLimitLayer<ClientIp, Delay>>();
    shared::<RateLimit<HelloService, ClientIp>>();
    shared::<RateLimit<HelloService, Global, Delay>>();
    shared::<RateLimitLayer<HeaderKey, DryRun>>();
    shared::<RateLimit<HelloService, PeerIp, DryRun>>();
    send::<ResponseFuture<HelloService, Incoming>>();
}

/// What answers a refusal sits behind an `Arc`: a hook that is not `Clone` (it owns a
/// `Mutex`) still makes layers and services that are `Clone`, `Send` and `Sync`.
#[test]
fn layers_with_a_refusal_hook_are_shared_without_cloning_it() {
    use std::sync::Mutex;
    use tollgate_tower::{Delay, ProblemJson, RateLimit, Refusal};
    use tower::Layer;
    fn shared<T: Clone + Send + Sync + 'static>(_: &T) {}
    let refused = Mutex::new(0_u64);
    let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(1)), PeerIp::new())
        .on_refusal(move |refusal: Refusal| {
            *refused.lock().unwrap() += 1;
            refusal.into_response(Body::default())
        })
        .build();
    shared(&layer);
    shared(&layer.layer(boxed_hello()));
    type Problems = ProblemJson<fn(String) -> Body>;
    fn named<T: Clone + Send + Sync + 'static>() {}
    named::<RateLimitLayer<ClientIp, Delay, Problems>>();
    named::<RateLimit<HelloService, ClientIp, Delay, Problems>>();
}
