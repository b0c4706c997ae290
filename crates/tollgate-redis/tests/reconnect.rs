//! A connection that stays open and answers nothing (a hung server, an L4 proxy whose
//! upstream hangs, a host partitioned away without a reset) is replaced: a real
//! `redis-server` behind a proxy of our own (`common/proxy.rs`) that silences the open
//! connection while new ones go through, as a failover behind a virtual address does.
//! Recovery is asserted within a generous bound, never a tight one; the bound on
//! replacements is checked against the elapsed time measured around them.

mod common;

use std::time::{Duration, Instant};

use common::RedisServer;
use common::proxy::Proxy;
use tollgate::Quota;
use tollgate_redis::{FaultPolicy, FleetBuilder, FleetLimiter, Source};

/// How long the limiter may take to find Redis again: many times what it needs (a few
/// timeouts, a cool-down, a connection), so that a loaded machine never fails the test.
const RECOVERY: Duration = Duration::from_secs(30);

fn builder(timeout: Duration) -> FleetBuilder {
    FleetLimiter::builder(Quota::per_second(100_000))
        .timeout(timeout)
        .fault_policy(FaultPolicy::FailClosed {
            retry_after: Duration::from_millis(1),
        })
}

/// Checks until Redis answers one, within [`RECOVERY`].
async fn until_redis_answers(l: &FleetLimiter) {
    let start = Instant::now();
    loop {
        if let Ok(ok) = l.check("k").await
            && ok.source() == Source::Redis
        {
            return;
        }
        assert!(
            start.elapsed() < RECOVERY,
            "Redis did not answer again within {RECOVERY:?}: {:?}",
            l.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_gone_silent_is_replaced_and_redis_answers_again() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let l = builder(Duration::from_millis(300))
        .circuit_breaker(3, Duration::from_millis(400))
        .connect(proxy.client())
        .await
        .unwrap();
    // Healthy: one connection, never replaced.
    until_redis_answers(&l).await;
    for _ in 0..50 {
        let _ = l.check("k").await;
    }
    assert_eq!((proxy.accepted(), l.stats().reconnects), (1, 0));
    // The open connection goes silent; a new one would reach the server.
    proxy.silence_open();
    assert!(l.check("k").await.unwrap_err().is_rate_limited());
    until_redis_answers(&l).await;
    let s = l.stats();
    assert!(s.timeouts >= 3 && s.circuit_opened >= 1, "{s:?}");
    assert!(s.reconnects >= 1, "{s:?}");
    assert!(
        proxy.accepted() >= 2,
        "a new connection: {}",
        proxy.accepted()
    );
    // And it stays: the new connection answers.
    for _ in 0..20 {
        assert_eq!(l.check("k").await.unwrap().source(), Source::Redis);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_breaker_off_a_silent_connection_is_replaced_too() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let l = builder(Duration::from_millis(200))
        .circuit_breaker(0, Duration::ZERO)
        .connect(proxy.client())
        .await
        .unwrap();
    until_redis_answers(&l).await;
    proxy.silence_open();
    until_redis_answers(&l).await;
    let s = l.stats();
    assert!(s.timeouts >= 1 && s.reconnects >= 1, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_is_reconnected_to_at_most_once_a_second() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let l = builder(Duration::from_millis(50))
        .circuit_breaker(0, Duration::ZERO)
        .connect(proxy.client())
        .await
        .unwrap();
    until_redis_answers(&l).await;
    // Every connection silent, the open one and every new one: each check times out, and
    // two tasks check at once, so many timeouts find a replacement in flight.
    proxy.silence_all();
    let start = Instant::now();
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let l = l.clone();
            tokio::spawn(async move {
                while start.elapsed() < Duration::from_secs(3) {
                    assert!(l.check("k").await.unwrap_err().is_rate_limited());
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let s = l.stats();
    let elapsed = start.elapsed();
    // Replacements start at least a second apart: at most one more than the whole seconds
    // elapsed, however many calls timed out.
    assert!(s.reconnects >= 1, "{s:?}");
    assert!(
        s.reconnects <= 1 + elapsed.as_secs(),
        "{} replacements in {elapsed:?} ({} timeouts)",
        s.reconnects,
        s.timeouts
    );
    assert!(s.timeouts > 2 * s.reconnects, "{s:?}");
}
