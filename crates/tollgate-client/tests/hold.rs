//! Holds the server asks for, over a real socket (a scripted hyper server on 127.0.0.1):
//! a spent limit is honoured whatever the status carrying it (GitHub's 403, a 429 with only
//! `RateLimit: r=0;t=N`, a 503), and an ordinary 403 is no rate signal; an hour's hold is
//! honoured for the hour, and a request bounded by `max_wait` fails at once with the
//! instant the host opens. The client paces on a `ManualClock`, so a hold is seen by the
//! next request staying unsent until the clock moves past it, never by waiting it out.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tollgate::ManualClock;
use tollgate_client::{AdaptiveConfig, AdaptiveRate, PoliteLayer, RetryPolicy};
use tower::{Layer, ServiceExt};

/// One scripted answer: a status and its fields.
type Answer = (u16, Vec<(&'static str, String)>);

/// A local server answering request `n` with `script[n]` (the last one repeated); returns
/// its URL and the count of requests it saw.
async fn serve(script: Vec<Answer>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    let seen = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&seen);
    let script = Arc::new(Mutex::new(script));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            let script = Arc::clone(&script);
            let svc = hyper::service::service_fn(move |_req: Request<Incoming>| {
                let n = count.fetch_add(1, Ordering::SeqCst);
                let script = script.lock().unwrap();
                let (status, fields) = &script[n.min(script.len() - 1)];
                let mut res = Response::builder().status(*status);
                for (k, v) in fields {
                    res = res.header(*k, v.as_str());
                }
                let res = res.body(Full::new(Bytes::from_static(b"body\n"))).unwrap();
                async move { Ok::<_, Infallible>(res) }
            });
            tokio::spawn(async move {
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc);
                let _ = conn.await;
            });
        }
    });
    (format!("http://127.0.0.1:{}/", addr.port()), seen)
}

/// A layer pacing on `clock`, fast enough that only holds matter, with no retries (a retry
/// would sleep on real time).
fn paced(clock: &ManualClock) -> PoliteLayer {
    let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(1_000.0), clock.clone());
    PoliteLayer::with_rates(rates).retry(RetryPolicy::never())
}

type Svc = tollgate_client::Polite<
    Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
>;

fn client(layer: &PoliteLayer) -> Svc {
    layer.layer(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>())
}

fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::new(Bytes::new())).unwrap()
}

fn key(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

/// Unix seconds `secs` from now, as `X-RateLimit-Reset` sends them.
fn epoch_in(secs: u64) -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    (now.as_secs() + secs).to_string()
}

/// Whether `wait` is within the 2 s that whole-second fields leave of `want`.
fn near(wait: Duration, want: Duration) -> bool {
    wait.abs_diff(want) <= Duration::from_secs(2)
}

/// The wait the host's next request would have now, if any (nothing consumed).
fn held_for(layer: &PoliteLayer, key: &str) -> Option<Duration> {
    let rates = layer.rates();
    rates
        .limiter()
        .peek_with(key, rates.quota(key))
        .err()
        .and_then(|e| e.retry_after())
}

/// The answer to a request spawned while its host was held, once the hold is over (the
/// 30 s bound is a hang guard, not a time the test asserts).
async fn sent_after_the_hold<R, E: std::fmt::Debug>(
    request: tokio::task::JoinHandle<Result<R, E>>,
) -> R {
    tokio::time::timeout(Duration::from_secs(30), request)
        .await
        .expect("sent after the hold")
        .unwrap()
        .expect("answers")
}

/// Sends one request, then a second one that the server's hold must keep unsent until the
/// clock passes `hold`; returns the first answer's status.
async fn first_holds_the_second(first: Answer, hold: Duration) -> StatusCode {
    let (url, seen) = serve(vec![first, (200, vec![])]).await;
    let clock = ManualClock::new();
    let layer = paced(&clock);
    let svc = client(&layer);
    let status = svc
        .clone()
        .oneshot(get(&url))
        .await
        .expect("answers")
        .status();
    assert_eq!(seen.load(Ordering::SeqCst), 1);

    // The hold, as the limiter has it: a reset or date in whole seconds, measured from the
    // server's `Date` (whole seconds too) or the wall clock, so within 2 s of `hold`.
    let wait = held_for(&layer, &key(&url)).expect("the host is held");
    assert!(
        near(wait, hold),
        "{status}: held for {wait:?}, not {hold:?}"
    );

    // A second request stays unsent while the clock is short of the hold...
    clock.advance(hold - Duration::from_secs(3));
    let second = tokio::spawn(svc.clone().oneshot(get(&url)));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(seen.load(Ordering::SeqCst), 1, "{status}: sent while held");
    assert!(!second.is_finished());
    // ... and goes out once it is past.
    clock.advance(Duration::from_secs(6));
    let res = sent_after_the_hold(second).await;
    assert_eq!(res.status(), 200);
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    status
}

#[tokio::test]
async fn a_403_with_a_spent_primary_limit_holds_the_host_until_its_reset() {
    // GitHub: 403, x-ratelimit-remaining: 0, x-ratelimit-reset in Unix seconds.
    let answer = (
        403,
        vec![
            ("x-ratelimit-limit", "5000".to_owned()),
            ("x-ratelimit-remaining", "0".to_owned()),
            ("x-ratelimit-reset", epoch_in(30)),
        ],
    );
    let status = first_holds_the_second(answer, Duration::from_secs(30)).await;
    assert_eq!(status, 403); // the caller still gets the 403
}

#[tokio::test]
async fn a_429_with_only_a_ratelimit_field_holds_the_host_for_its_t() {
    let answer = (429, vec![("ratelimit", "\"p\";r=0;t=40".to_owned())]);
    let status = first_holds_the_second(answer, Duration::from_secs(40)).await;
    assert_eq!(status, 429);
}

#[tokio::test]
async fn a_spent_limit_holds_the_host_on_any_status() {
    for status in [200, 404, 500, 503] {
        let answer = (
            status,
            vec![
                ("x-ratelimit-remaining", "0".to_owned()),
                ("x-ratelimit-reset", "20".to_owned()), // delta seconds
            ],
        );
        let got = first_holds_the_second(answer, Duration::from_secs(20)).await;
        assert_eq!(got.as_u16(), status);
    }
}

#[tokio::test]
async fn a_403_is_a_throttle_only_with_rate_limit_fields() {
    // With them: counted as a throttle, the host's rate lowered.
    let (url, _) = serve(vec![(
        403,
        vec![
            ("x-ratelimit-remaining", "0".to_owned()),
            ("x-ratelimit-reset", epoch_in(10)),
        ],
    )])
    .await;
    let layer = paced(&ManualClock::new());
    let res = client(&layer).oneshot(get(&url)).await.expect("answers");
    assert_eq!(res.status(), 403);
    let host = layer.host(&key(&url)).unwrap();
    assert_eq!((host.throttled, host.rate), (1, 800.0));

    // Without them (a permission refusal; remaining left): an ordinary 403.
    let (url, seen) = serve(vec![(
        403,
        vec![("x-ratelimit-remaining", "4999".to_owned())],
    )])
    .await;
    let clock = ManualClock::new();
    let layer = paced(&clock);
    let svc = client(&layer);
    for _ in 0..2 {
        clock.advance(Duration::from_millis(1)); // past the 1 ms pacing
        let res = svc.clone().oneshot(get(&url)).await.expect("answers");
        assert_eq!(res.status(), 403);
    }
    assert_eq!(seen.load(Ordering::SeqCst), 2); // no hold
    let host = layer.host(&key(&url)).unwrap();
    assert_eq!((host.throttled, host.rate), (0, 1_000.0));
    assert_eq!(held_for(&layer, &key(&url)), Some(Duration::from_millis(1)));
}

/// A 403 that refuses for rate (a `Retry-After`, or a spent quota) is a throttle, and is
/// retried as a 429 is; a 403 without them is final, never retried. (The crate docs once
/// said that no 4xx but 429 is retried.)
#[tokio::test]
async fn a_403_refusing_for_rate_is_retried_an_ordinary_403_is_not() {
    let cases = [
        (vec![("retry-after", "0".to_owned())], true),
        (
            vec![
                ("x-ratelimit-remaining", "0".to_owned()),
                ("x-ratelimit-reset", "0".to_owned()),
            ],
            true,
        ),
        (vec![("x-ratelimit-remaining", "4999".to_owned())], false),
        (vec![], false),
    ];
    for (fields, retried) in cases {
        let (url, seen) = serve(vec![(403, fields.clone()), (200, vec![])]).await;
        // On the real clock: the retry's own delay sleeps on it (1 ms and its jitter here).
        let layer = PoliteLayer::new(AdaptiveConfig::new(1_000.0))
            .retry(RetryPolicy::new().base(Duration::from_millis(1)));
        let res = client(&layer).oneshot(get(&url)).await.expect("answers");
        let host = layer.host(&key(&url)).unwrap();
        let want = if retried {
            (200, 2, 1, 1)
        } else {
            (403, 1, 0, 0)
        };
        let got = (
            res.status().as_u16(),
            seen.load(Ordering::SeqCst),
            host.retries,
            host.throttled,
        );
        assert_eq!(got, want, "{fields:?}");
    }
}

#[tokio::test]
async fn a_retry_after_of_an_hour_holds_the_host_for_the_hour() {
    let hour = Duration::from_secs(3_600);
    let answer = (429, vec![("retry-after", "3600".to_owned())]);
    assert_eq!(first_holds_the_second(answer, hour).await, 429);
    // GitHub's reset an hour ahead, likewise.
    let answer = (
        403,
        vec![
            ("x-ratelimit-remaining", "0".to_owned()),
            ("x-ratelimit-reset", epoch_in(3_600)),
        ],
    );
    assert_eq!(first_holds_the_second(answer, hour).await, 403);
}

#[tokio::test]
async fn past_max_wait_a_held_host_fails_at_once_with_the_instant_it_opens() {
    let hour = Duration::from_secs(3_600);
    let answers = [
        (429, vec![("retry-after", "3600".to_owned())]),
        (
            403,
            vec![
                ("x-ratelimit-remaining", "0".to_owned()),
                ("x-ratelimit-reset", epoch_in(3_600)),
            ],
        ),
    ];
    for answer in answers {
        let first = answer.0;
        let (url, seen) = serve(vec![answer, (200, vec![])]).await;
        let clock = ManualClock::new();
        let layer = paced(&clock).max_wait(Duration::from_secs(10));
        let svc = client(&layer);
        let res = svc.clone().oneshot(get(&url)).await.expect("answers");
        assert_eq!(res.status(), first);

        // At once (the generous timeout only guards against a hang), unsent.
        let before = Instant::now();
        let second = svc.clone().oneshot(get(&url));
        let err = tokio::time::timeout(Duration::from_secs(20), second)
            .await
            .expect("refused at once, not after the hour")
            .expect_err("the host is held for an hour");
        let after = Instant::now();
        assert!(err.is_held(), "{first}: {err}");
        let wait = err.retry_after().unwrap();
        assert!(near(wait, hour), "{first}: {wait:?}");
        let until = err.held_until().unwrap();
        assert!(
            until + Duration::from_secs(2) >= before + hour
                && until <= after + hour + Duration::from_secs(2),
            "{first}: opens {:?} after the request",
            until.saturating_duration_since(before)
        );
        assert_eq!(seen.load(Ordering::SeqCst), 1, "{first}: sent while held");
        let host = layer.host(&key(&url)).unwrap();
        assert_eq!(host.requests, 1);

        // Near the end of the hold, the turn is within the bound: waited for, then sent.
        clock.advance(hour - Duration::from_secs(5));
        let third = tokio::spawn(svc.clone().oneshot(get(&url)));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(seen.load(Ordering::SeqCst), 1, "{first}: sent while held");
        clock.advance(Duration::from_secs(8));
        let res = sent_after_the_hold(third).await;
        assert_eq!(res.status(), 200);
        assert_eq!(seen.load(Ordering::SeqCst), 2);
    }
}

#[tokio::test]
async fn an_absurd_retry_after_is_held_without_a_panic() {
    let answer = (
        429,
        vec![("retry-after", "99999999999999999999".to_owned())],
    );
    let (url, seen) = serve(vec![answer, (200, vec![])]).await;
    let layer = paced(&ManualClock::new()).max_wait(Duration::from_secs(10));
    let svc = client(&layer);
    let res = svc.clone().oneshot(get(&url)).await.expect("answers");
    assert_eq!(res.status(), 429);
    let err = svc.oneshot(get(&url)).await.expect_err("held");
    let years = err.retry_after().unwrap().as_secs() / (365 * 86_400);
    assert!(years >= 36, "{err}"); // as good as never
    assert!(err.held_until().unwrap() > Instant::now() + Duration::from_secs(36 * 365 * 86_400));
    assert_eq!(seen.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn resets_in_milliseconds_and_fractions_are_read() {
    let ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 30_000;
    for (reset, hold) in [
        (ms.to_string(), 30.0),              // Unix milliseconds
        (format!("{}.5", ms / 1_000), 30.0), // Unix seconds with a fraction
        ("20.5".to_owned(), 20.5),           // delta seconds with a fraction
    ] {
        let answer = (
            429,
            vec![
                ("x-ratelimit-remaining", "0".to_owned()),
                ("x-ratelimit-reset", reset.clone()),
            ],
        );
        let status = first_holds_the_second(answer, Duration::from_secs_f64(hold)).await;
        assert_eq!(status, 429, "{reset}");
    }
}

#[tokio::test]
async fn an_http_date_retry_after_is_read_on_the_servers_clock() {
    // The server's clock is an hour behind ours, and then an hour ahead: its Retry-After
    // date is 40 s after its own Date either way.
    for skew in [-3_600i64, 3_600] {
        let server_now = if skew < 0 {
            SystemTime::now() - Duration::from_secs(skew.unsigned_abs())
        } else {
            SystemTime::now() + Duration::from_secs(skew.unsigned_abs())
        };
        let answer = (
            503,
            vec![
                ("date", httpdate::fmt_http_date(server_now)),
                (
                    "retry-after",
                    httpdate::fmt_http_date(server_now + Duration::from_secs(40)),
                ),
            ],
        );
        let status = first_holds_the_second(answer, Duration::from_secs(40)).await;
        assert_eq!(status, 503, "skew {skew}");
    }
}

/// A request already queued for its turn when a 429's hold arrives (its turn was reserved
/// before the hold, a second after the first request) stays unsent through the hold, and
/// goes after it; bounded by `max_wait`, it fails with the hold instead, as soon as the hold
/// arrives (the hold puts its turn past its bound).
#[tokio::test]
async fn a_hold_keeps_back_a_request_queued_before_it() {
    for bounded in [false, true] {
        let (url, seen) = serve(vec![
            (429, vec![("retry-after", "30".to_owned())]),
            (200, vec![]),
        ])
        .await;
        let clock = ManualClock::new();
        let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(1.0), clock.clone());
        let mut layer = PoliteLayer::with_rates(rates).retry(RetryPolicy::never());
        if bounded {
            layer = layer.max_wait(Duration::from_secs(10));
        }
        let svc = client(&layer);
        // The first goes at once; the second queues for its turn at 1 s (the current-thread
        // runtime runs it to its wait before the first's answer comes back).
        let first = tokio::spawn(svc.clone().oneshot(get(&url)));
        let second = tokio::spawn(svc.clone().oneshot(get(&url)));
        let answer = first.await.unwrap().expect("answers");
        assert_eq!(answer.status(), 429);
        assert_eq!(seen.load(Ordering::SeqCst), 1);

        if bounded {
            let err = tokio::time::timeout(Duration::from_secs(30), second)
                .await
                .expect("refused at once")
                .unwrap()
                .expect_err("held past max_wait");
            let wait = err.retry_after().expect("the hold's wait");
            assert_eq!(wait, Duration::from_secs(30), "{err}");
            assert_eq!(seen.load(Ordering::SeqCst), 1);
            continue;
        }
        // The second's turn would have come, inside the hold.
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(seen.load(Ordering::SeqCst), 1, "sent inside the hold");
        assert!(!second.is_finished());
        clock.advance(Duration::from_secs(28));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(seen.load(Ordering::SeqCst), 1, "sent inside the hold");
        // Past the hold it goes out.
        clock.advance(Duration::from_secs(2));
        let res = sent_after_the_hold(second).await;
        assert_eq!(res.status(), 200);
        assert_eq!(seen.load(Ordering::SeqCst), 2);
    }
}

/// A stand-in client for `example.com`: the first answer is `first`, the later ones 200;
/// counts the requests it saw.
fn stand_in(
    first: u16,
    retry_after: &'static str,
) -> (
    impl tower::Service<
        http::Request<()>,
        Response = Response<()>,
        Error = Infallible,
        Future = impl Send,
    > + Clone
    + Send
    + 'static,
    Arc<AtomicUsize>,
) {
    let seen = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&seen);
    let svc = tower::service_fn(move |_req: http::Request<()>| {
        let n = count.fetch_add(1, Ordering::SeqCst);
        async move {
            let mut res = Response::new(());
            if n == 0 {
                *res.status_mut() = StatusCode::from_u16(first).unwrap();
                res.headers_mut()
                    .insert("retry-after", retry_after.parse().unwrap());
            }
            Ok::<_, Infallible>(res)
        }
    });
    (svc, seen)
}

fn example() -> http::Request<()> {
    http::Request::get("http://example.com/").body(()).unwrap()
}

/// `max_wait` bounds the wait for the host's turn, not the wait for an in-flight permit:
/// a request that waited 2 s for its permit still waits the 10 s to its turn under a
/// bound of 11 s.
#[tokio::test]
async fn max_wait_does_not_count_the_wait_for_a_permit() {
    let clock = ManualClock::new();
    let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(0.1), clock.clone());
    let layer = PoliteLayer::with_rates(rates)
        .retry(RetryPolicy::never())
        .max_in_flight(1)
        .max_wait(Duration::from_secs(11));
    let (inner, seen) = stand_in(200, "0");
    let svc = layer.layer(inner);
    let first = svc.clone().oneshot(example()).await.unwrap(); // its body holds the permit
    let second = tokio::spawn(svc.clone().oneshot(example()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(first);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !second.is_finished(),
        "refused: the permit's wait was counted"
    );
    clock.advance(Duration::from_secs(10));
    let res = tokio::time::timeout(Duration::from_secs(30), second)
        .await
        .expect("sent at its turn")
        .unwrap();
    assert!(res.is_ok());
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}

/// `rates().forget(key)` lifts a host's hold for the layer too.
#[tokio::test]
async fn forgetting_a_held_host_lifts_its_hold() {
    let clock = ManualClock::new();
    let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(1_000.0), clock.clone());
    let layer = PoliteLayer::with_rates(rates).retry(RetryPolicy::never());
    let (inner, seen) = stand_in(429, "30");
    let svc = layer.layer(inner);
    let first = svc.clone().oneshot(example()).await.unwrap();
    assert_eq!(first.status(), 429);
    assert!(layer.rates().check("example.com:80").is_err());
    assert!(layer.rates().forget("example.com:80"));
    clock.advance(Duration::from_millis(10));
    let second = tokio::time::timeout(Duration::from_secs(30), svc.clone().oneshot(example()))
        .await
        .expect("sent at once: the hold was forgotten")
        .unwrap();
    assert_eq!(second.status(), 200);
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}
