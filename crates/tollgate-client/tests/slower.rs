//! A slower rate reaches the requests already queued for their turn, over a real socket (a
//! scripted hyper server on 127.0.0.1): an announced policy slower than the host's rate, or
//! a 429's lowered rate, paces every request sent after the answer that carried it, the
//! next one included, whether the client sends one request at a time or eight at once.
//!
//! The client paces on a `ManualClock` that the test moves in small steps; each request is
//! stamped with that clock when the layer hands it to the inner client. A `ManualClock`
//! wakes the turns that come due inside `advance`, on the test's thread, and the
//! current-thread runtime runs those tasks (to the stamp, without another await) before
//! the test's next step, so a stamp is the step its turn came due in: no real time is
//! measured.

mod support;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::script::{self, Answer};
use tollgate::{ManualClock, Timestamp};
use tollgate_client::{AdaptiveConfig, AdaptiveRate, PoliteLayer, RetryPolicy};
use tower::{Layer, Service, ServiceExt};

/// The layer's key of a scripted server's URL.
fn key(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

fn answer(status: u16, fields: &[(&'static str, &str)]) -> Answer {
    let fields = fields.iter().map(|&(k, v)| (k, v.to_owned())).collect();
    (status, fields, "page\n".to_owned())
}

/// A polite client over hyper's, starting every host at `rate` on `clock`, without
/// retries (a retry would sleep on real time), that stamps each request with `clock` as
/// the layer sends it; and the stamps.
#[allow(clippy::type_complexity)]
fn stamped(
    clock: &ManualClock,
    rate: f64,
) -> (
    PoliteLayer,
    impl Service<
        Request<Full<Bytes>>,
        Response = http::Response<tollgate_client::PoliteBody<hyper::body::Incoming>>,
        Error = tollgate_client::PoliteError<hyper_util::client::legacy::Error>,
        Future = impl Send,
    > + Clone
    + Send
    + 'static,
    Arc<Mutex<Vec<Timestamp>>>,
) {
    let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(rate), clock.clone());
    let layer = PoliteLayer::with_rates(rates).retry(RetryPolicy::never());
    let stamps = Arc::new(Mutex::new(Vec::new()));
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let (clock, log) = (clock.clone(), Arc::clone(&stamps));
    let inner = tower::service_fn(move |req: Request<Full<Bytes>>| {
        log.lock().unwrap().push(tollgate::Clock::now(&clock));
        client.request(req)
    });
    (layer.clone(), layer.layer(inner), stamps)
}

/// Sends one GET through `svc` and reads its body; returns the status.
async fn get<S>(svc: S, url: String) -> u16
where
    S: Service<
            Request<Full<Bytes>>,
            Response = http::Response<tollgate_client::PoliteBody<hyper::body::Incoming>>,
        >,
    S::Error: std::fmt::Debug,
{
    let req = Request::get(url).body(Full::new(Bytes::new())).unwrap();
    let res = svc.oneshot(req).await.expect("the local server answers");
    let status = res.status().as_u16();
    let _ = res.into_body().collect().await;
    status
}

/// Waits (in real time, bounded: a hang guard, not a measured time) until `done`.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..3_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting until {what}");
}

/// Moves `clock` by `step` `steps` times, letting the woken tasks run after each.
async fn step(clock: &ManualClock, step: Duration, steps: u32) {
    for _ in 0..steps {
        clock.advance(step);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The most stamps in any window `[t, t + width)`.
fn most_in_window(stamps: &[Timestamp], width: Duration) -> usize {
    let mut t = stamps.to_vec();
    t.sort_unstable();
    let mut most = 0;
    let mut first = 0;
    for (i, &at) in t.iter().enumerate() {
        while at.saturating_duration_since(t[first]) >= width {
            first += 1;
        }
        most = most.max(i - first + 1);
    }
    most
}

/// Eight tasks fetching `url` through `svc` in a loop; returns once the layer has applied
/// the first answer (the clock not moved yet, the other seven queued for their turns).
async fn eight_fetching<S>(
    layer: &PoliteLayer,
    svc: &S,
    url: &str,
) -> Vec<tokio::task::JoinHandle<()>>
where
    S: Service<
            Request<Full<Bytes>>,
            Response = http::Response<tollgate_client::PoliteBody<hyper::body::Incoming>>,
        > + Clone
        + Send
        + 'static,
    S::Error: std::fmt::Debug,
    S::Future: Send,
{
    let tasks = (0..8)
        .map(|_| {
            let (svc, url) = (svc.clone(), url.to_owned());
            tokio::spawn(async move {
                loop {
                    get(svc.clone(), url.clone()).await;
                }
            })
        })
        .collect();
    until("the first answer is applied", || {
        layer.host(&key(url)).is_some_and(|h| h.successes == 1)
    })
    .await;
    tasks
}

/// Eight tasks fetch in a loop from a host whose every answer announces 2 a second; the
/// client starts at 20 a second, so seven requests are queued at that rate when the first
/// answer comes. No second holds more than 2 of the requests sent, the first one's
/// included, and the queue goes on at 2 a second.
#[tokio::test]
async fn an_announced_slower_policy_paces_the_requests_already_queued() {
    let (url, _) =
        script::serve(|_, _| answer(200, &[("ratelimit-policy", "\"p\";q=2;w=1")])).await;
    let clock = ManualClock::new();
    let (layer, svc, stamps) = stamped(&clock, 20.0);
    // The first answer is in before the clock moves: the other seven are queued by then,
    // their turns taken at 20 a second.
    let tasks = eight_fetching(&layer, &svc, &url).await;
    assert_eq!(layer.host(&key(&url)).unwrap().rate, 2.0);
    // 10 ms steps for 5.5 s: every turn is a multiple of 50 ms, so each stamp is exact.
    step(&clock, Duration::from_millis(10), 550).await;
    for t in tasks {
        t.abort();
    }
    let stamps = stamps.lock().unwrap().clone();
    let most = most_in_window(&stamps, Duration::from_secs(1));
    assert!(most <= 2, "{most} in a second: {stamps:?}");
    // Paced at 2 a second, not stalled: the first at 0, the next within a second, then
    // one every 500 ms to 5.5 s.
    assert!(stamps.len() >= 10, "{stamps:?}");
}

/// A slowdown of an eighth or less (here 20 a second announced as 19) lets the requests
/// already queued go at their turns: were each to take a turn again, as for a larger one,
/// the small moves of a spread (which follows the server's counts answer by answer) would
/// cost every queued request a cell each time, and the host's pace would collapse. Paced
/// at 19 or 20 a second over 2 s, not stalled behind turns taken twice (32 sends).
#[tokio::test]
async fn a_small_slowdown_lets_the_queued_requests_go_at_their_turns() {
    let (url, _) =
        script::serve(|_, _| answer(200, &[("ratelimit-policy", "\"p\";q=19;w=1")])).await;
    let clock = ManualClock::new();
    let (layer, svc, stamps) = stamped(&clock, 20.0);
    // The first answer is in before the clock moves: the other seven are queued by then,
    // their turns taken at 20 a second.
    let tasks = eight_fetching(&layer, &svc, &url).await;
    assert!((layer.host(&key(&url)).unwrap().rate - 19.0).abs() < 1e-6);
    step(&clock, Duration::from_millis(2), 1_000).await;
    for t in tasks {
        t.abort();
    }
    let stamps = stamps.lock().unwrap().clone();
    assert!(stamps.len() >= 36, "{} sent: {stamps:?}", stamps.len());
    assert!(
        most_in_window(&stamps, Duration::from_secs(1)) <= 21,
        "{stamps:?}"
    );
}

/// Eight requests at once to a host that answers the first with a 429 without
/// `Retry-After`: the rate drops from 20 to 16 a second (the decrease 0.8), and the seven
/// requests queued at 20 a second go out at least 62.5 ms apart, not 50.
#[tokio::test]
async fn a_429s_lowered_rate_paces_the_requests_already_queued() {
    let (url, seen) = script::serve(|n, _| answer(if n == 0 { 429 } else { 200 }, &[])).await;
    let clock = ManualClock::new();
    let (layer, svc, stamps) = stamped(&clock, 20.0);
    let tasks: Vec<_> = (0..8)
        .map(|_| tokio::spawn(get(svc.clone(), url.clone())))
        .collect();
    until("the 429 is applied", || {
        layer.host(&key(&url)).is_some_and(|h| h.throttled == 1)
    })
    .await;
    assert_eq!(layer.host(&key(&url)).unwrap().rate, 16.0);
    // 2.5 ms steps for 1.5 s: every turn is a multiple of 12.5 ms, so each stamp is exact.
    step(&clock, Duration::from_micros(2_500), 600).await;
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(seen.load(Ordering::SeqCst), 8);
    let stamps = stamps.lock().unwrap().clone();
    for pair in stamps.windows(2) {
        let gap = pair[1].saturating_duration_since(pair[0]);
        assert!(gap >= Duration::from_micros(62_500), "{stamps:?}");
    }
}

/// One request at a time: the answer to the first, which came 100 ms after it was sent
/// (two intervals at 20 a second), announces 2 a second; the second request goes out
/// 500 ms after the first, not at once (the limiter's state was sized at 50 ms from the
/// first send, long passed when the answer came).
#[tokio::test]
async fn the_next_request_after_a_slower_announcement_keeps_its_interval_from_the_last() {
    let clock = ManualClock::new();
    let server_clock = clock.clone();
    let (url, seen) = script::serve(move |n, _| {
        if n == 0 {
            server_clock.advance(Duration::from_millis(100)); // the answer's latency
        }
        answer(200, &[("ratelimit-policy", "\"p\";q=2;w=1")])
    })
    .await;
    let (layer, svc, stamps) = stamped(&clock, 20.0);
    assert_eq!(get(svc.clone(), url.clone()).await, 200);
    assert_eq!(layer.host(&key(&url)).unwrap().rate, 2.0);
    let second = tokio::spawn(get(svc.clone(), url.clone()));
    step(&clock, Duration::from_millis(10), 39).await; // to 490 ms
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(seen.load(Ordering::SeqCst), 1, "sent before its interval");
    step(&clock, Duration::from_millis(10), 1).await; // 500 ms
    let status = tokio::time::timeout(Duration::from_secs(30), second)
        .await
        .expect("sent at 500 ms")
        .unwrap();
    assert_eq!(status, 200);
    let stamps = stamps.lock().unwrap().clone();
    assert_eq!(
        stamps,
        [Timestamp::ZERO, Timestamp::from_nanos(500_000_000)]
    );
}
