//! The circuit breaker against a real `redis-server`: a silent server (SIGSTOP) and a dead
//! one (killed) open it after the configured failures in a row; while it is open checks are
//! answered by the fault policy at once, without a call; after the cool-down one probe
//! goes, and an answer closes it. The short-circuited checks are asserted by the counters
//! (no call was sent), never by a wall-clock bound.

mod common;

use std::time::{Duration, Instant};

use common::RedisServer;
use tollgate::Quota;
use tollgate_redis::{FaultPolicy, FleetLimiter, Source, Unavailable};

const TIMEOUT: Duration = Duration::from_millis(300);
const COOL_DOWN: Duration = Duration::from_millis(400);

async fn node(server: &RedisServer) -> FleetLimiter {
    let l = FleetLimiter::builder(Quota::per_second(1000))
        .timeout(TIMEOUT)
        .fault_policy(FaultPolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        })
        .circuit_breaker(3, COOL_DOWN)
        .connect(server.client())
        .await
        .unwrap();
    l.peek("warm-up").await.unwrap(); // connected, the script loaded
    l
}

/// Checks until the breaker has opened (at most `limit` checks), each refused by the policy.
async fn fail_until_open(l: &FleetLimiter, limit: usize) {
    for _ in 0..limit {
        assert!(l.check("k").await.unwrap_err().is_rate_limited());
        if l.stats().circuit_opened > 0 {
            return;
        }
    }
    panic!("the breaker did not open: {:?}", l.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_opens_the_breaker_and_an_answer_closes_it() {
    let server = RedisServer::start();
    let l = node(&server).await;
    server.pause();
    let before = l.stats();
    fail_until_open(&l, 3).await;
    let opened = l.stats();
    assert_eq!(
        opened.timeouts - before.timeouts,
        3,
        "three timeouts in a row: {opened:?}"
    );
    // Open: answered by the policy without a call (so without waiting for the timeout).
    for _ in 0..50 {
        let e = l.check("k").await.unwrap_err();
        assert!(e.is_rate_limited());
    }
    let s = l.stats();
    assert_eq!(s.short_circuited - opened.short_circuited, 50);
    assert_eq!(
        s.round_trips, opened.round_trips,
        "no call was sent while open"
    );
    assert_eq!(s.failed_closed - opened.failed_closed, 50);
    match l.reset("k").await {
        Err(Unavailable::CircuitOpen(left)) => assert!(left <= COOL_DOWN),
        other => panic!("{other:?}"),
    }
    // After the cool-down, still silent: the one probe times out and opens it again.
    tokio::time::sleep(COOL_DOWN).await;
    assert!(l.check("k").await.is_err());
    let s = l.stats();
    assert_eq!(
        (s.circuit_opened, s.round_trips),
        (2, opened.round_trips + 1)
    );
    // Answering again: after the cool-down the probe is answered, and the breaker closes.
    server.resume();
    tokio::time::sleep(COOL_DOWN).await;
    let ok = l.check("k").await.unwrap();
    assert_eq!(ok.source(), Source::Redis);
    for _ in 0..5 {
        assert_eq!(l.check("k").await.unwrap().source(), Source::Redis);
    }
    assert_eq!(l.stats().circuit_opened, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_opens_the_breaker_and_a_restarted_one_closes_it() {
    let mut server = RedisServer::start();
    let l = node(&server).await;
    server.kill();
    fail_until_open(&l, 10).await;
    let opened = l.stats();
    for _ in 0..20 {
        assert!(l.check("k").await.unwrap_err().is_rate_limited());
    }
    let s = l.stats();
    assert_eq!(s.short_circuited - opened.short_circuited, 20);
    assert_eq!(s.round_trips, opened.round_trips);
    server.spawn();
    // The connection manager reconnects on its own schedule: probe until Redis answers.
    let start = Instant::now();
    loop {
        tokio::time::sleep(COOL_DOWN).await;
        if let Ok(ok) = l.check("k").await {
            assert_eq!(ok.source(), Source::Redis);
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{:?}", l.stats());
    }
    assert_eq!(l.check("k").await.unwrap().source(), Source::Redis);
}

/// With the breaker off (0 failures), every check waits its call out, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_breaker_every_check_tries_redis() {
    let server = RedisServer::start();
    let l = FleetLimiter::builder(Quota::per_second(1000))
        .timeout(Duration::from_millis(50))
        .fault_policy(FaultPolicy::FailOpen)
        .circuit_breaker(0, COOL_DOWN)
        .connect(server.client())
        .await
        .unwrap();
    l.peek("warm-up").await.unwrap();
    server.pause();
    for _ in 0..8 {
        assert_eq!(l.check("k").await.unwrap().source(), Source::FailOpen);
    }
    let s = l.stats();
    assert_eq!((s.timeouts, s.short_circuited, s.circuit_opened), (8, 0, 0));
    server.resume();
}

/// A call that times out is `Unavailable::Timeout`, the documented variant, whichever timer
/// fires first: tollgate's per-call timer, or the connection's own response timeout (which
/// by default is set well above it, and here, set through `connection_manager`, below it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_times_out_is_a_timeout_whichever_timer_fires_first() {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(30);
    let default = FleetLimiter::builder(Quota::per_second(1000))
        .timeout(timeout)
        .circuit_breaker(0, COOL_DOWN);
    let shorter = default.clone().connection_manager(
        redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_millis(5)))
            .set_number_of_retries(0),
    );
    let limiters = [
        default.connect(server.client()).await.unwrap(),
        shorter.connect(server.client()).await.unwrap(),
    ];
    for l in &limiters {
        l.peek("warm-up").await.unwrap();
    }
    server.pause();
    for (which, l) in limiters.iter().enumerate() {
        for _ in 0..40 {
            match l.reset("k").await {
                Err(Unavailable::Timeout(t)) => assert_eq!(t, timeout),
                other => panic!("limiter {which}: {other:?}"),
            }
        }
        let s = l.stats();
        assert_eq!((s.faults, s.timeouts), (40, 40), "limiter {which}: {s:?}");
    }
    server.resume();
}

/// A server that refuses this node's credentials (none given to a `requirepass` server, or
/// a wrong password) is of no use until the configuration changes: its refusals open the
/// breaker as an unreachable server's failures do (instead of a round trip and the fault
/// policy per check), and `memory_policy` is an error, not `Unknown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_the_credentials_opens_the_breaker() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let url = |auth: &str| format!("redis://{auth}127.0.0.1:{}/", server.port);
    for (what, auth) in [("no password", ""), ("a wrong password", ":wrong@")] {
        let l = FleetLimiter::builder(Quota::per_second(1000))
            .timeout(common::FAULT_TIMEOUT)
            .fault_policy(FaultPolicy::FailOpen)
            .circuit_breaker(3, Duration::from_secs(600))
            .connect(redis::Client::open(url(auth)).unwrap())
            .await
            .unwrap();
        for _ in 0..10 {
            assert_eq!(l.check("k").await.unwrap().source(), Source::FailOpen);
        }
        let s = l.stats();
        assert_eq!(
            (s.round_trips, s.faults, s.circuit_opened, s.short_circuited),
            (3, 3, 1, 7),
            "{what}: {s:?}"
        );
        match l.memory_policy().await {
            Err(Unavailable::Redis(e)) => assert!(
                e.kind() == redis::ErrorKind::AuthenticationFailed || e.code() == Some("NOAUTH"),
                "{what}: {e:?}"
            ),
            other => panic!("{what}: {other:?}"),
        }
    }
    let l = FleetLimiter::builder(Quota::per_second(1000))
        .timeout(common::CALM_TIMEOUT)
        .connect(redis::Client::open(url(":s3cret@")).unwrap())
        .await
        .unwrap();
    assert_eq!(l.check("k").await.unwrap().source(), Source::Redis);
    assert_eq!(
        l.memory_policy().await.unwrap(),
        tollgate_redis::MemoryPolicy::NoEviction
    );
}

/// A password set on the server to match the limiter's is picked up: the `redis` crate's
/// connection keeps the refusal of its first connect for good, so refused credentials count
/// toward a new connection as timeouts do, and the new one presents them afresh.
#[tokio::test]
async fn a_password_set_on_the_server_to_match_is_picked_up() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let url = |auth: &str| format!("redis://{auth}127.0.0.1:{}/", server.port);
    let l = FleetLimiter::builder(Quota::per_second(1000))
        .timeout(common::FAULT_TIMEOUT)
        .fault_policy(FaultPolicy::FailOpen)
        .circuit_breaker(3, COOL_DOWN)
        .connect(redis::Client::open(url(":wrong@")).unwrap())
        .await
        .unwrap();
    assert_eq!(l.check("k").await.unwrap().source(), Source::FailOpen);
    // The operator sets the server's password to the one the fleet was given.
    let mut admin = redis::Client::open(url(":s3cret@"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("wrong")
        .query_async(&mut admin)
        .await
        .unwrap();
    // A hang guard, not a measured time: the breaker probes every 400 ms, and the third
    // refusal in a row starts a new connection.
    let mut answered = false;
    for _ in 0..300 {
        if l.check("k").await.unwrap().source() == Source::Redis {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered, "Redis never answered again: {:?}", l.stats());
    assert!(l.stats().reconnects >= 1, "{:?}", l.stats());
}
